"""Journal file level: the segment/record byte format, blocking file helpers, and the Trio group committer.

The format itself is described in :mod:`broker.journal`'s module docstring. The functions here are pure or do
blocking file I/O on the paths and descriptors they are given; :class:`GroupCommitter` makes
:class:`broker.journal.Journal` syncs without blocking the Trio thread, so that every durable send arriving
while one fsync is in flight rides the next one. Its usual sync writes the batch from the Trio thread (a
copy into the page cache) and has the kernel fsync it asynchronously (:class:`AsyncFsync`, Linux native
AIO), which costs no thread hand-off; a batch that begins a segment, or a large one, is written and
fsynced whole in a Trio worker thread (:func:`run_in_worker`), as is every batch where Linux AIO is not
available.

The module is over the project's ~600-line guide: the record codec, the segment file operations and the
group committer's two write paths are the journal's I/O half and change together (a record format change
touches all three); :mod:`broker.journal` keeps the bookkeeping half.
"""

from __future__ import annotations

import array
import ctypes
import errno
import logging
import os
import platform
import re
import struct
import sys
import zlib
from typing import TYPE_CHECKING, Iterator

import trio

if TYPE_CHECKING:
    from broker.journal import Journal

log = logging.getLogger("broker.journal")

MAGIC = b"\x89TDJRNL\n"  # high byte + newline catch 7-bit and text-mode mangling, like PNG's signature
VERSION = 2  # 2: ACKS records (type 4); segments of version 1 (types 1-3 only) are read as well
READABLE_VERSIONS = (1, 2)
_HEADER = struct.Struct(">8sHHQQQ")
_U32 = struct.Struct(">I")
HEADER_BYTES = _HEADER.size + _U32.size
_RECORD = struct.Struct(">II")
RECORD_HEADER_BYTES = _RECORD.size
MSG = struct.Struct(">BQIH")
ACK = struct.Struct(">BQ")
UPDATE = struct.Struct(">BQI")
T_MESSAGE, T_ACK, T_UPDATE, T_ACKS = 1, 2, 3, 4
# Record ids per ACKS record: a sync with more acknowledgements writes several (keeps each record far below
# MAX_RECORD_BYTES).
ACKS_PER_RECORD = 65536

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


# The encoders below run once per durable message (and once per sync for its acknowledgements) on the
# broker's one thread, so they build each record with as few calls and copies as they can: the payload is
# copied once, into the record (``frame`` of a built body would copy it twice); a message record's fixed
# fields and queue name are packed once for the checksum (length and body head: what the checksum covers,
# in that order) and once with it, by structs made for the queue (:class:`MessageEncoder`).
_ACK_LENGTH_CRC = zlib.crc32(_U32.pack(ACK.size))
_UPDATE_LENGTH_CRC = zlib.crc32(_U32.pack(UPDATE.size))
_MSG_SUMMED = ">I" + MSG.format[1:]  # length | type, id, count, queue_len: the checksummed fields ...
_MSG_HEAD = ">II" + MSG.format[1:]   # ... and length | crc32 | type, id, count, queue_len: the record head


class MessageEncoder:
    """Encodes the MESSAGE records of one queue: its name (UTF-8, at most MAX_QUEUE_NAME_BYTES) is part of
    the two structs that pack a record's head, once with and once without the checksum."""

    __slots__ = ("queue", "max_payload", "_length", "_fixed", "_summed", "_head")

    def __init__(self, queue: bytes) -> None:
        self.queue = queue
        self._length = len(queue)
        self._fixed = MSG.size + len(queue)  # the body's bytes besides the payload
        self.max_payload = MAX_RECORD_BYTES - self._fixed  # the largest payload a record may hold
        self._summed = struct.Struct(f"{_MSG_SUMMED}{len(queue)}s")
        self._head = struct.Struct(f"{_MSG_HEAD}{len(queue)}s")

    def encode(self, record_id: int, payload: bytes, delivery_count: int) -> bytes:
        length = self._fixed + len(payload)
        queue = self.queue
        crc = zlib.crc32(payload, zlib.crc32(
            self._summed.pack(length, T_MESSAGE, record_id, delivery_count, self._length, queue)))
        return self._head.pack(length, crc, T_MESSAGE, record_id, delivery_count, self._length, queue) + payload


def encode_message(record_id: int, queue: bytes, payload: bytes, delivery_count: int) -> bytes:
    """One MESSAGE record (the journal keeps a :class:`MessageEncoder` per queue instead)."""
    return MessageEncoder(queue).encode(record_id, payload, delivery_count)


def encode_ack(record_id: int) -> bytes:
    """A version 1 ACK record: the journal writes ACKS records now (recovery reads both; tests write this)."""
    body = ACK.pack(T_ACK, record_id)
    return _RECORD.pack(ACK.size, zlib.crc32(body, _ACK_LENGTH_CRC)) + body


def encode_update(record_id: int, delivery_count: int) -> bytes:
    body = UPDATE.pack(T_UPDATE, record_id, delivery_count)
    return _RECORD.pack(UPDATE.size, zlib.crc32(body, _UPDATE_LENGTH_CRC)) + body


def encode_acks(record_ids: list[int]) -> bytes:
    """One ACKS record for ``record_ids`` (at most :data:`ACKS_PER_RECORD`): a sync writes the
    acknowledgements it carries as one record after its other records, packed by one call."""
    ids = array.array("Q", record_ids)
    if sys.byteorder == "little":
        ids.byteswap()
    body = b"%c%b" % (T_ACKS, ids)
    length = _U32.pack(len(body))
    return length + _U32.pack(zlib.crc32(body, zlib.crc32(length))) + body


def ack_ids(body) -> list[int]:
    """The record ids of a checked ACKS record body (bytes or memoryview)."""
    ids = array.array("Q", bytes(body[1:]))
    if sys.byteorder == "little":
        ids.byteswap()
    return ids.tolist()


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
    if kind == T_ACKS:
        _check_acks(body)
        return kind, 0, 0, "", b""
    raise ValueError(f"unknown record type {kind}")


def _check_acks(body) -> None:
    if len(body) < 9 or (len(body) - 1) % 8:
        raise ValueError(f"an ACKS record of {len(body)} bytes is not a list of record ids")


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
    if kind == T_ACKS:
        _check_acks(body)
        return kind, 0, 0, ""
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

def read_header(path: str) -> tuple[int, int, int, int]:
    """``(seq, first_seq, next_id, version)`` of a segment; a clear error for foreign or damaged files."""
    with open(path, "rb") as f:
        raw = f.read(HEADER_BYTES)
    if raw[:len(MAGIC)] != MAGIC:
        raise JournalFormatError(f"{path}: not a trio-dispatch journal segment (starts {raw[:8]!r})")
    if len(raw) < HEADER_BYTES:
        raise JournalCorruptError(path, len(raw), "segment header is truncated")
    _magic, version, _flags, seq, first_seq, next_id = _HEADER.unpack_from(raw)
    if version not in READABLE_VERSIONS:
        raise JournalFormatError(f"{path}: journal format version {version}, this code reads "
                                 f"{' and '.join(map(str, READABLE_VERSIONS))}")
    if _U32.unpack_from(raw, _HEADER.size)[0] != zlib.crc32(raw[:_HEADER.size]):
        raise JournalCorruptError(path, 0, "segment header checksum mismatch")
    if first_seq > seq:
        raise JournalCorruptError(path, 0, f"header first_seq {first_seq} is after seq {seq}")
    return seq, first_seq, next_id, version


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


# ---- Trio: asynchronous fsync (Linux native AIO) ---------------------------------------------------------

# A batch up to this size is written from the Trio thread (a copy into the page cache: about 25 us for the
# 30 KB a sync carries at 40k msg/s) and only its fsync goes to the kernel; a larger one, whose copy would
# hold up every connection, is written in a worker thread.
INLINE_WRITE_MAX_BYTES = 1024 * 1024

# The Linux system call numbers of io_setup, io_destroy, io_getevents and io_submit (aio_abi.h; glibc has
# no wrappers), per architecture. Elsewhere the committer uses its worker thread.
_AIO_SYSCALLS = {"x86_64": (206, 207, 208, 209), "aarch64": (0, 1, 4, 2)}
_IOCB_CMD_FSYNC = 2
_IOCB_FLAG_RESFD = 1  # signal completion on the eventfd in aio_resfd
# What io_setup or io_submit answer where AIO (or its fsync, Linux < 4.18) is not to be had.
_AIO_UNSUPPORTED = frozenset((errno.ENOSYS, errno.EINVAL, errno.EPERM, errno.EOPNOTSUPP, errno.EAGAIN))


class _Iocb(ctypes.Structure):
    """struct iocb of linux/aio_abi.h (little-endian field order: aio_key before aio_rw_flags)."""

    _fields_ = [("aio_data", ctypes.c_uint64), ("aio_key", ctypes.c_uint32), ("aio_rw_flags", ctypes.c_int32),
                ("aio_lio_opcode", ctypes.c_uint16), ("aio_reqprio", ctypes.c_int16),
                ("aio_fildes", ctypes.c_uint32), ("aio_buf", ctypes.c_uint64), ("aio_nbytes", ctypes.c_uint64),
                ("aio_offset", ctypes.c_int64), ("aio_reserved2", ctypes.c_uint64),
                ("aio_flags", ctypes.c_uint32), ("aio_resfd", ctypes.c_uint32)]


class _IoEvent(ctypes.Structure):
    """struct io_event of linux/aio_abi.h."""

    _fields_ = [("data", ctypes.c_uint64), ("obj", ctypes.c_uint64), ("res", ctypes.c_int64),
                ("res2", ctypes.c_int64)]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class AsyncFsyncUnavailable(OSError):
    """Linux native AIO cannot fsync here (no such system call, not permitted, or a kernel before 4.18)."""


class AsyncFsync:
    """fsync(2) of a descriptor, done by the kernel while the Trio thread goes on: one ``io_submit`` of an
    ``IOCB_CMD_FSYNC`` (Linux >= 4.18 runs it in a kernel worker) whose completion is signalled on an
    eventfd the Trio thread waits for like a socket. Unlike an fsync in a worker thread it needs no thread
    of this process, so the Trio thread never waits for the GIL around it: a worker thread takes the GIL
    to start, after its fsync and to report back, and on a busy machine each of those hand-offs costs the
    Trio thread context switches and waits for a core. The fsync itself is the same call, with the same
    guarantee. One fsync at a time per instance (the group committer's)."""

    def __init__(self) -> None:
        numbers = _AIO_SYSCALLS.get(platform.machine())
        if numbers is None or not hasattr(os, "eventfd"):
            raise AsyncFsyncUnavailable(errno.ENOSYS, f"no Linux AIO on {platform.machine()}")
        self._setup, self._destroy, self._getevents, self._submit = numbers
        syscall = ctypes.CDLL(None, use_errno=True).syscall
        syscall.restype = ctypes.c_long
        self._syscall = syscall
        self._ctx = ctypes.c_ulong(0)
        if syscall(ctypes.c_long(self._setup), ctypes.c_long(1), ctypes.byref(self._ctx)) < 0:
            code = ctypes.get_errno()
            raise AsyncFsyncUnavailable(code, f"io_setup: {os.strerror(code)}")
        try:
            self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        except OSError:
            syscall(ctypes.c_long(self._destroy), self._ctx)
            raise
        self._iocb = _Iocb(aio_lio_opcode=_IOCB_CMD_FSYNC, aio_flags=_IOCB_FLAG_RESFD, aio_resfd=self._efd)
        self._event = _IoEvent()
        # the arguments of the two calls made per fsync, built once
        self._submit_args = (ctypes.c_long(self._submit), self._ctx, ctypes.c_long(1),
                             (ctypes.POINTER(_Iocb) * 1)(ctypes.pointer(self._iocb)))
        self._reap_args = (ctypes.c_long(self._getevents), self._ctx, ctypes.c_long(1), ctypes.c_long(1),
                           ctypes.byref(self._event), ctypes.byref(_Timespec(0, 0)))

    async def fsync(self, fd: int) -> None:
        """fsync ``fd``; returns once it is done, raises its OSError if it failed, or
        :class:`AsyncFsyncUnavailable` if the kernel would not take it (then nothing was done). Not
        cancellable: the caller shields it (the kernel's fsync cannot be called back)."""
        self._iocb.aio_fildes = fd
        if self._syscall(*self._submit_args) != 1:
            code = ctypes.get_errno()
            if code in _AIO_UNSUPPORTED:
                raise AsyncFsyncUnavailable(code, f"io_submit(IOCB_CMD_FSYNC): {os.strerror(code)}")
            raise OSError(code, os.strerror(code))
        reaped = 0
        while reaped != 1:
            await trio.lowlevel.wait_readable(self._efd)
            try:
                os.eventfd_read(self._efd)
            except BlockingIOError:
                continue
            while (reaped := self._syscall(*self._reap_args)) < 0:  # not waiting (zero timeout): only EINTR
                code = ctypes.get_errno()
                if code != errno.EINTR:
                    raise OSError(code, f"io_getevents: {os.strerror(code)}")
        if self._event.res < 0:
            code = -self._event.res
            raise OSError(code, os.strerror(code))

    def close(self) -> None:
        """Release the AIO context and the eventfd (no fsync may be in flight)."""
        if self._efd >= 0:
            self._syscall(ctypes.c_long(self._destroy), self._ctx)
            os.close(self._efd)
            self._efd = -1


def open_async_fsync() -> AsyncFsync | None:
    """An :class:`AsyncFsync`, or None (with the reason logged) where Linux AIO cannot fsync."""
    try:
        return AsyncFsync()
    except (AsyncFsyncUnavailable, OSError, AttributeError) as exc:
        log.info("journal fsyncs in a worker thread: Linux AIO is not available (%s)", exc)
        return None


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
    """Runs :meth:`Journal.sync`'s blocking part without blocking the Trio thread, one sync at a time,
    whenever records are pending; everything appended while a sync runs rides the next one (group commit).
    A batch that only appends to the active segment and is not large is written by the Trio thread and
    fsynced by the kernel (:class:`AsyncFsync`); any other batch, or every batch when ``aio`` is False or
    Linux AIO is not available, is written and fsynced in a worker thread (:func:`run_in_worker`).

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
                 on_space=None, on_durable=None, aio: bool = True) -> None:
        self.journal = journal
        self.aio = aio  # fsync through Linux AIO where it is available (see the class docstring)
        self.fsyncer: AsyncFsync | None = None  # while running with aio
        self.on_durable = on_durable  # callable(durable record id), after every sync
        self.syncs = 0
        self.async_fsyncs = 0  # syncs whose fsync the kernel did (AsyncFsync), of self.syncs
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
        if self.aio and self.journal.fsync:
            self.fsyncer = open_async_fsync()
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
            if self.fsyncer is not None:
                self.fsyncer.close()
                self.fsyncer = None

    async def _commit_once(self) -> bool:
        """One sync (and maybe a compaction); False when it found no space."""
        journal = self.journal
        # Shielded: a sync or compaction that has started must finish and be accounted for, or the
        # bookkeeping would no longer match the files.
        with trio.CancelScope(shield=True):
            batch = journal.begin_sync()
            try:
                if batch.appends_only and batch.size <= INLINE_WRITE_MAX_BYTES and \
                        (self.fsyncer is not None or not journal.fsync):
                    journal.write_batch(batch, sync=False)  # a copy into the page cache
                    if journal.fsync:
                        await self._fsync(batch.fd)
                else:
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

    async def _fsync(self, fd: int) -> None:
        try:
            await self.fsyncer.fsync(fd)
            self.async_fsyncs += 1
        except AsyncFsyncUnavailable as exc:  # nothing was done: fsync in the worker, now and from now on
            log.info("%s: journal fsyncs in a worker thread from now on: %s", self.journal.directory, exc)
            self.fsyncer.close()
            self.fsyncer = None
            await run_in_worker(os.fsync, fd)

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
