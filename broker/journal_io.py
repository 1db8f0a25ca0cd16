"""Journal file level: the segment/record byte format, blocking file helpers, and the Trio group committer.

The format itself is described in :mod:`broker.journal`'s module docstring. The functions here are pure or do
blocking file I/O on the paths and descriptors they are given; :class:`GroupCommitter` runs the blocking part
of :class:`broker.journal.Journal` syncs in a Trio worker thread (:func:`run_in_worker`) so that every durable send arriving while one
fsync is in flight rides the next one.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import struct
import zlib
from typing import TYPE_CHECKING, Iterator

import trio

if TYPE_CHECKING:
    from broker.journal import Journal

log = logging.getLogger("broker.journal")

MAGIC = b"\x89TDJRNL\n"  # high byte + newline catch 7-bit and text-mode mangling, like PNG's signature
VERSION = 1
_HEADER = struct.Struct(">8sHHQQQ")
_U32 = struct.Struct(">I")
HEADER_BYTES = _HEADER.size + _U32.size
_RECORD = struct.Struct(">II")
RECORD_HEADER_BYTES = _RECORD.size
MSG = struct.Struct(">BQIH")
ACK = struct.Struct(">BQ")
UPDATE = struct.Struct(">BQI")
T_MESSAGE, T_ACK, T_UPDATE = 1, 2, 3

# A record length above this is read as corruption instead of an allocation attempt; it is far above any
# message size the broker accepts.
MAX_RECORD_BYTES = 256 * 1024 * 1024
# Field widths of the record format.
MAX_QUEUE_NAME_BYTES = 0xFFFF
MAX_DELIVERY_COUNT = 0xFFFFFFFF
# Write errors that mean "no room" (disk full, quota exhausted): the journal undoes the write and keeps its
# records for a retry instead of giving up (see Journal.rollback_sync).
OUT_OF_SPACE = frozenset((errno.ENOSPC, errno.EDQUOT))
# Compaction writes its output in chunks of about this size, bounding its memory use.
COMPACT_WRITE_CHUNK = 4 * 1024 * 1024

SEGMENT_SUFFIX = ".tdj"
TMP_SUFFIX = ".tmp"
SEGMENT_NAME = re.compile(r"^(\d{16})\.tdj$")


class JournalError(Exception):
    """Base class of journal errors."""


class JournalFormatError(JournalError):
    """A file in the journal directory is not a segment this code can read (foreign file, other version)."""


class JournalCorruptError(JournalError):
    """A record or header failed validation somewhere recovery may not simply truncate."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: offset {offset}: {reason}")
        self.path, self.offset, self.reason = path, offset, reason


class JournalLockedError(JournalError):
    """Another journal (process or object) holds the directory."""


class JournalFailedError(JournalError):
    """An earlier write or fsync failed; what reached the disk is unknown, so the journal must be reopened."""


class JournalOutOfSpaceError(JournalError):
    """A blocking sync found no room (ENOSPC, EDQUOT): it was undone, its records are still buffered and the
    journal stays usable; sync again once there is space."""


# ---- encoding -------------------------------------------------------------------------------------------

def segment_name(seq: int) -> str:
    return f"{seq:016d}{SEGMENT_SUFFIX}"


def encode_header(seq: int, first_seq: int, next_id: int) -> bytes:
    head = _HEADER.pack(MAGIC, VERSION, 0, seq, first_seq, next_id)
    return head + _U32.pack(zlib.crc32(head))


def frame(body: bytes) -> bytes:
    """``length | crc32 | body`` with the checksum over length and body."""
    length = _U32.pack(len(body))
    return length + _U32.pack(zlib.crc32(body, zlib.crc32(length))) + body


# The encoders below run once per durable message (and once per acknowledgement) on the broker's one
# thread, so they build each record with as few calls and copies as they can: the payload is copied once,
# into the record (``frame`` of a built body would copy it twice), and fixed-size records start their
# checksum from the precomputed checksum of their constant length field.
_ACK_LENGTH_CRC = zlib.crc32(_U32.pack(ACK.size))
_UPDATE_LENGTH_CRC = zlib.crc32(_U32.pack(UPDATE.size))


def encode_message(record_id: int, queue: bytes, payload: bytes, delivery_count: int) -> bytes:
    head = MSG.pack(T_MESSAGE, record_id, delivery_count, len(queue)) + queue
    length = _U32.pack(len(head) + len(payload))
    crc = zlib.crc32(payload, zlib.crc32(head, zlib.crc32(length)))
    return b"".join((length, _U32.pack(crc), head, payload))


def encode_ack(record_id: int) -> bytes:
    body = ACK.pack(T_ACK, record_id)
    return _RECORD.pack(ACK.size, zlib.crc32(body, _ACK_LENGTH_CRC)) + body


def encode_update(record_id: int, delivery_count: int) -> bytes:
    body = UPDATE.pack(T_UPDATE, record_id, delivery_count)
    return _RECORD.pack(UPDATE.size, zlib.crc32(body, _UPDATE_LENGTH_CRC)) + body


def decode(body: bytes) -> tuple[int, int, int, str, bytes]:
    """``(type, record_id, delivery_count, queue, payload)`` of a checked record body; ValueError (or
    struct.error / UnicodeDecodeError) when it does not parse."""
    kind = body[0]
    if kind == T_MESSAGE:
        _, rid, count, qlen = MSG.unpack_from(body)
        if MSG.size + qlen > len(body):
            raise ValueError("queue name runs past the record")
        return kind, rid, count, body[MSG.size:MSG.size + qlen].decode(), body[MSG.size + qlen:]
    if kind == T_ACK:
        return (kind, ACK.unpack(body)[1], 0, "", b"")
    if kind == T_UPDATE:
        _, rid, count = UPDATE.unpack(body)
        return kind, rid, count, "", b""
    raise ValueError(f"unknown record type {kind}")


def decode_head(body) -> tuple[int, int, int, str]:
    """``(type, record_id, delivery_count, queue)`` of a checked record body (bytes or memoryview) without
    copying a message's payload: recovery indexes records and reads payloads only when asked."""
    kind = body[0]
    if kind == T_MESSAGE:
        _, rid, count, qlen = MSG.unpack_from(body)
        if MSG.size + qlen > len(body):
            raise ValueError("queue name runs past the record")
        return kind, rid, count, bytes(body[MSG.size:MSG.size + qlen]).decode()
    if kind == T_ACK:
        return kind, ACK.unpack(body)[1], 0, ""
    if kind == T_UPDATE:
        _, rid, count = UPDATE.unpack(body)
        return kind, rid, count, ""
    raise ValueError(f"unknown record type {kind}")


def message_payload(path: str, offset: int, record_id: int, record: bytes) -> bytes:
    """The payload of the message record ``record_id`` read back from ``path`` at ``offset`` (checksum and
    identity verified: a mismatch is corruption, named by file and offset)."""
    if len(record) < RECORD_HEADER_BYTES + MSG.size:
        raise JournalCorruptError(path, offset, "message record cut short on read")
    length, crc = _RECORD.unpack_from(record)
    body = memoryview(record)[RECORD_HEADER_BYTES:]
    if length != len(body) or zlib.crc32(body, zlib.crc32(record[:4])) != crc:
        raise JournalCorruptError(path, offset, "record checksum mismatch on read")
    kind, got, _count, qlen = MSG.unpack_from(body)
    if kind != T_MESSAGE or got != record_id:
        raise JournalCorruptError(path, offset, f"expected message record {record_id} on read")
    return bytes(body[MSG.size + qlen:])


def read_records(locations: list[tuple[int, str, int, int]]) -> list[tuple[int, bytes]]:
    """BLOCKING (safe in a worker thread): ``(record_id, payload)`` for each ``(record_id, path, offset,
    size)``, one descriptor per file."""
    fds: dict[str, int] = {}
    out = []
    try:
        for rid, path, offset, size in locations:
            fd = fds.get(path)
            if fd is None:
                fd = fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            out.append((rid, message_payload(path, offset, rid, os.pread(fd, size, offset))))
    finally:
        for fd in fds.values():
            os.close(fd)
    return out


# ---- reading --------------------------------------------------------------------------------------------

def read_header(path: str) -> tuple[int, int, int]:
    """``(seq, first_seq, next_id)`` of a segment; a clear error for foreign or damaged files."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if raw[:len(MAGIC)] != MAGIC:
        raise JournalFormatError(f"{path}: not a trio-dispatch journal segment (starts {raw[:8]!r})")
    if len(raw) < HEADER_BYTES:
        raise JournalCorruptError(path, len(raw), "segment header is truncated")
    _magic, version, _flags, seq, first_seq, next_id = _HEADER.unpack_from(raw)
    if version != VERSION:
        raise JournalFormatError(f"{path}: journal format version {version}, this code reads {VERSION}")
    if _U32.unpack_from(raw, _HEADER.size)[0] != zlib.crc32(raw[:_HEADER.size]):
        raise JournalCorruptError(path, 0, "segment header checksum mismatch")
    if first_seq > seq:
        raise JournalCorruptError(path, 0, f"header first_seq {first_seq} is after seq {seq}")
    return seq, first_seq, next_id


def scan_records(path: str, data: bytes, *, last: bool, fsync: bool) -> Iterator[tuple[int, int, memoryview]]:
    """Yield ``(offset, end, body)`` (a view into ``data``) for each checked record of a segment's bytes. A torn tail of the last
    segment is truncated on disk (with a warning) and ends the iteration; any other damage raises."""
    off, size = HEADER_BYTES, len(data)
    view = memoryview(data)  # bodies are handed out as views: no copy per record
    while off < size:
        torn, reason, end = False, "", 0
        if size - off < RECORD_HEADER_BYTES:
            torn, reason = True, "record header is cut short"
        else:
            length, crc = _RECORD.unpack_from(data, off)
            end = off + RECORD_HEADER_BYTES + length
            if not 1 <= length <= MAX_RECORD_BYTES:
                reason = f"implausible record length {length}"
            elif end > size:
                torn, reason = True, f"record of {length} bytes runs past end of file"
            elif zlib.crc32(view[off + RECORD_HEADER_BYTES:end], zlib.crc32(view[off:off + 4])) != crc:
                torn, reason = end == size, "record checksum mismatch"
        if reason:
            torn = torn or not any(view[off:])  # an all-zero remainder: unsynced pages after power loss
            if not (last and torn):
                raise JournalCorruptError(path, off, reason)
            log.warning("%s: torn tail at offset %d (%s); truncating %d bytes", path, off, reason, size - off)
            os.truncate(path, off)
            if fsync:
                fsync_path(path)
            return
        yield off, end, view[off + RECORD_HEADER_BYTES:end]
        off = end


def reencode_message(path: str, offset: int, record_id: int, record: bytes, delivery_count: int) -> bytes:
    """Check a message record read back for compaction and return it with ``delivery_count`` folded in."""
    if len(record) < RECORD_HEADER_BYTES + MSG.size:
        raise JournalCorruptError(path, offset, "message record cut short during compaction")
    length, crc = _RECORD.unpack_from(record)
    body = record[RECORD_HEADER_BYTES:]
    if length != len(body) or zlib.crc32(body, zlib.crc32(record[:4])) != crc:
        raise JournalCorruptError(path, offset, "record checksum mismatch during compaction")
    kind, got, _count, _qlen = MSG.unpack_from(body)
    if kind != T_MESSAGE or got != record_id:
        raise JournalCorruptError(path, offset, f"expected message record {record_id} during compaction")
    return frame(body[:9] + _U32.pack(delivery_count) + body[13:])


# ---- writing --------------------------------------------------------------------------------------------

def fsync_path(path: str, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def create_file(directory: str, path: str, data: bytes, *, fsync: bool, reopen: bool, write=write_all) -> int:
    """Create ``path`` holding ``data`` atomically (write ``*.tmp``, fsync, rename, fsync the directory);
    return an O_APPEND descriptor when ``reopen``, else -1. ``write(fd, data)`` is the journal's writer."""
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    if fsync:
        fsync_path(directory, directory=True)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC) if reopen else -1


# ---- Trio: group commit ---------------------------------------------------------------------------------

# While the journal's file system is out of space the committer retries the pending records this often
# (any new sync request waits for it too): often enough that the broker takes durable messages again within
# about a second of space returning, rare enough that a full disk costs nothing noticeable.
OUT_OF_SPACE_RETRY_SECONDS = 1.0


async def run_in_worker(fn, arg):
    """``fn(arg)`` in one of Trio's cached worker threads; returns its result or raises its exception.
    Not cancellable (the caller shields it). What ``trio.to_thread.run_sync`` does, less what a sync per
    fsync cannot afford: to_thread names the worker for each job (two ``prctl`` calls around it) and takes a
    capacity limiter, and under load every step at which the worker takes the GIL back costs the busy Trio
    thread a forced switch (up to the switch interval, plus the worker's wait for a core). Here the worker
    takes the GIL to start, after its write, after its fsync and to hand the result back."""
    task = trio.lowlevel.current_task()
    token = trio.lowlevel.current_trio_token()

    def deliver(result) -> None:  # in the worker: hand the outcome to the Trio thread, which resumes the task
        token.run_sync_soon(trio.lowlevel.reschedule, task, result)

    trio.lowlevel.start_thread_soon(lambda: fn(arg), deliver)
    return await trio.lowlevel.wait_task_rescheduled(lambda _raise_cancel: trio.lowlevel.Abort.FAILED)


class GroupCommitter:
    """Runs :meth:`Journal.sync`'s blocking part in ``trio.to_thread``, one sync at a time, whenever records
    are pending; everything appended while a sync runs rides the next one (group commit).

    Start :meth:`run` in a nursery; after ``record_id = journal.append_message(...)`` a durable send awaits
    :meth:`wait_durable` before settling ``accepted``, or ``on_durable(record_id)`` is told after each sync
    what is on disk (the broker settles what waited for it). Compaction runs between syncs, off the Trio
    thread.

    Out of space (ENOSPC, EDQUOT) is not a failure: the write is undone (:meth:`Journal.rollback_sync`), the
    records stay pending in memory, :attr:`out_of_space` is set and ``on_space(False)`` is called once; the
    write is retried every ``retry_seconds`` (or at :meth:`retry_now`) and the first that succeeds clears the
    flag and calls ``on_space(True)``. Waiters simply wait meanwhile. Any other failed write or fsync
    disables the journal, wakes every waiter with :class:`JournalFailedError` and makes :meth:`run` raise (the
    broker cannot promise durability any more).
    """

    def __init__(self, journal: Journal, *, retry_seconds: float = OUT_OF_SPACE_RETRY_SECONDS,
                 on_space=None, on_durable=None) -> None:
        self.journal = journal
        self.on_durable = on_durable  # callable(durable record id), after every sync
        self.syncs = 0
        self.compactions = 0
        self.retry_seconds = retry_seconds
        self.on_space = on_space  # callable(space: bool), called on each change of out_of_space
        self.out_of_space = False
        self.out_of_space_error: OSError | None = None
        self._wakeup = trio.Event()
        self._retry = trio.Event()
        self._synced = trio.Event()  # replaced after every sync; waiters hold the one current at their wait
        self._running = False
        self._failure: BaseException | None = None

    def kick(self) -> None:
        """Ask for a sync of whatever is pending (wait_durable does this itself). While out of space the
        request waits for the next retry."""
        self._wakeup.set()

    def retry_now(self) -> None:
        """Out of space: try the pending records now rather than at the next retry (space came back)."""
        self._retry.set()

    async def wait_durable(self, record_id: int) -> None:
        """Return once ``record_id`` (and every record before it) is on disk."""
        while record_id > self.journal.durable_id:
            if self._failure is not None:
                raise JournalFailedError("journal write failed") from self._failure
            if not self._running:
                raise JournalError("the group committer is not running")
            synced = self._synced
            self.kick()
            await synced.wait()

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The commit loop; runs until cancelled."""
        self._running = True
        task_status.started()
        try:
            while True:
                if self.out_of_space:
                    with trio.move_on_after(self.retry_seconds):
                        await self._retry.wait()
                    self._retry = trio.Event()
                else:
                    await self._wakeup.wait()
                self._wakeup = trio.Event()
                while self.journal.pending:
                    if not await self._commit_once():
                        break
        finally:
            self._running = False
            self._synced.set()

    async def _commit_once(self) -> bool:
        """One sync (and maybe a compaction); False when it found no space."""
        journal = self.journal
        # Shielded: a sync or compaction that has started must finish and be accounted for, or the
        # bookkeeping would no longer match the files.
        with trio.CancelScope(shield=True):
            batch = journal.begin_sync()
            try:
                await run_in_worker(journal.write_batch, batch)
            except OSError as exc:
                if exc.errno not in OUT_OF_SPACE:
                    self._fail(exc)
                    raise
                try:
                    journal.rollback_sync(batch, exc)
                except BaseException as undo:
                    self._fail(undo)
                    raise
                self._space(False, exc)
                return False
            except BaseException as exc:
                self._fail(exc)
                raise
            journal.finish_sync(batch)
            self.syncs += 1
            self._space(True, None)
            synced, self._synced = self._synced, trio.Event()
            synced.set()
            if self.on_durable is not None:
                self.on_durable(journal.durable_id)
            plan = journal.begin_compaction(force=False)
            if plan is not None:
                try:
                    await trio.to_thread.run_sync(journal.run_compaction, plan)
                except BaseException as exc:
                    self._fail(exc)
                    raise
                journal.finish_compaction(plan)
                self.compactions += 1
        return True

    def _space(self, space: bool, exc: OSError | None) -> None:
        if self.out_of_space == (not space):
            return
        self.out_of_space = not space
        self.out_of_space_error = exc
        if self.on_space is not None:
            self.on_space(space)
        elif not space:
            log.error("%s: journal write failed, out of space (%s): records kept in memory, retried every %gs",
                      self.journal.directory, exc.strerror if exc is not None else "", self.retry_seconds)
        else:
            log.warning("%s: journal writes resumed: space is available again", self.journal.directory)

    def _fail(self, exc: BaseException) -> None:
        self.journal.abort_io(exc)
        self._failure = exc
        self._synced.set()
