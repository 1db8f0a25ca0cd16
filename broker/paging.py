"""Paging: Artemis' ``address-full-policy`` PAGE. Messages for an address over its ``max-size-bytes`` (or
for any address while the broker is over ``global-max-size``) go to disk instead of memory and come back in
order as consumers take the address below its limits again (Artemis user manual, "Paging").

Per queue, a :class:`PageSpool`: a FIFO of entries in four stretches, oldest first ::

    ahead (read back, in memory) | on disk, not read yet | being flushed | tail (in memory)

New entries join the tail; a tail of :data:`FLUSH_BYTES` is written to the queue's current page file (a new
file after ``page-size-bytes``, Artemis' page files); entries come back from the files :data:`READ_AHEAD_BYTES`
at a time, and a page file is deleted once read. While nothing of the queue is on disk (nor being written)
the tail itself is handed out, so a consumer that keeps up costs no I/O. Once a queue pages, every later
message of it pages too until its spool is empty: that is what keeps FIFO order (and why a message paged
behind others waits for them, whatever its priority; depaged messages take their place among the queue's
in-memory messages by priority as usual).

**Durable bodies are written once.** A durable message already has a journal record; its page entry is only
a reference (record id and arrival facts, 41 bytes) and its body is read back from the journal by record id
(:meth:`broker.journal.Journal.read_payloads` -- the id stays valid across compaction, which moves records).
A non-durable message's entry carries its bytes. Writing durable bodies into page files as well would double
the disk traffic of the case paging is for (a backlog bigger than memory), and would give two copies to keep
consistent across a crash.

**Restart.** Page files are scratch: :class:`Pager` empties the paging directory when it starts. Durable
paged messages are still journal records, so recovery hands them back and the broker pages them again
(without reading their bodies); non-durable paged messages are gone, as non-durable messages in memory are
(AMQP 1.0 §3.2.1: a non-durable message need not survive a restart; Artemis' page files hold non-durable
messages too, and they are not recovered).

Memory per paging queue: at most about FLUSH_BYTES in the tail, FLUSH_BYTES being written and
READ_AHEAD_BYTES read ahead, plus one message; the message bytes a queue holds otherwise stay within the
limits the broker enforces.

Threading: :class:`PageSpool` is plain bookkeeping (Trio thread). :class:`Pager.run` is the Trio task that
does the file I/O, one operation at a time, in ``trio.to_thread``; the functions it runs there touch only
the paths and bytes they are given.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import struct
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import trio

from broker.journal_io import OUT_OF_SPACE, read_records, write_all

log = logging.getLogger("broker.paging")

# A tail this large is written out: small enough that each paging queue holds little, large enough that
# a write costs one thread hop per quarter MiB.
FLUSH_BYTES = 256 * 1024
# How much is read back from page files at a time (and at most held read ahead per queue).
READ_AHEAD_BYTES = 1024 * 1024
# A failed page write or read is tried again after this long (out of space: the broker refuses new
# pages meanwhile, so nothing grows).
RETRY_SECONDS = 1.0
PAGE_SUFFIX = ".page"
LOCK_NAME = "paging.lock"

# Entry: length:u32 | crc32:u32 | kind:u8 | record_id:u64 | enqueued_at:i64 (ms) | expires_at:i64 (ms, or
# NO_EXPIRY / FROM_HEADER) | delivery_count:u32 | size:u32 | payload (KIND_BODY only). ``length`` counts what
# follows the checksum; the checksum covers it.
_HEAD = struct.Struct(">II")
_FIELDS = struct.Struct(">BQqqII")
KIND_BODY, KIND_JOURNAL = 1, 2
NO_EXPIRY = -1
FROM_HEADER = -2  # recovered durable message: expiry from its header, counted from recovery (as in memory)


@dataclass(slots=True)
class PagedMessage:
    """One spool entry. ``payload`` is None for a journal reference whose body is not in memory (on disk,
    or its record gone); ``size`` is the message's encoded size (its weight in memory once depaged)."""

    kind: int
    record_id: int
    enqueued_at: int
    expires_at: int
    delivery_count: int
    size: int
    payload: bytes | None = None

    def encode(self) -> bytes:
        rest = _FIELDS.pack(self.kind, self.record_id, self.enqueued_at, self.expires_at, self.delivery_count,
                            self.size) + (self.payload if self.kind == KIND_BODY else b"")
        return _HEAD.pack(len(rest), zlib.crc32(rest)) + rest


def decode_entries(data: bytes, max_size: int | None = None) -> tuple[list[PagedMessage], int]:
    """The whole entries at the start of ``data`` and how many bytes they took, stopping once the messages
    weigh ``max_size`` (a journal reference is small on disk, its message is not). A checksum mismatch is
    an error (a page file is only ever read by the process that wrote it: damage means a failing disk)."""
    out, off, n = [], 0, len(data)
    view = memoryview(data)
    weight = 0
    while n - off >= _HEAD.size and (max_size is None or weight < max_size):
        length, crc = _HEAD.unpack_from(view, off)
        end = off + _HEAD.size + length
        if end > n:
            break
        rest = view[off + _HEAD.size:end]
        if length < _FIELDS.size or zlib.crc32(rest) != crc:
            raise ValueError(f"page entry at byte {off}: checksum mismatch")
        kind, rid, enq, exp, count, size = _FIELDS.unpack_from(rest)
        payload = bytes(rest[_FIELDS.size:]) if kind == KIND_BODY else None
        out.append(PagedMessage(kind, rid, enq, exp, count, size, payload))
        weight += size
        off = end
    return out, off


def entry_length_at(data: bytes) -> int:
    """The full length of the entry starting ``data`` (which must hold its 8-byte head)."""
    return _HEAD.size + _HEAD.unpack_from(data)[0]


# ---- blocking file operations (worker thread) -----------------------------------------------------------

def append_file(path: str, data: bytes, *, new: bool = False) -> None:
    """Append ``data`` to ``path`` (created, with its directory, when ``new``). A failed write is cut off
    again, so no half entry stays behind for a retry to write after."""
    if new:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        before = os.fstat(fd).st_size
        try:
            write_all(fd, data)
        except OSError:
            os.ftruncate(fd, before)
            raise
    finally:
        os.close(fd)


def read_file(path: str, offset: int, limit: int) -> bytes:
    """Up to ``limit`` bytes of whole entries from ``offset`` (more when the first entry is bigger)."""
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(limit)
        if len(data) >= _HEAD.size and entry_length_at(data) > len(data):
            data += f.read(entry_length_at(data) - len(data))
    return data


def unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---- one queue's spool ------------------------------------------------------------------------------------

@dataclass
class _PageFile:
    path: str
    size: int = 0  # bytes written


class PageSpool:
    """The paged messages of one queue, in order (see the module docstring for its four stretches)."""

    def __init__(self, queue: str, directory: str, page_size: int):
        self.queue = queue
        self.directory = directory
        self.page_size = page_size
        self.files: deque[_PageFile] = deque()
        self.read_offset = 0             # in files[0]
        self.unread_bytes = 0            # on disk, not read back yet
        self.ahead: deque[PagedMessage] = deque()
        self.ahead_bytes = 0
        self.flushing: list[PagedMessage] | None = None
        self.tail: deque[PagedMessage] = deque()
        self.tail_bytes = 0
        self.count = 0                   # entries in every stretch
        self.bytes = 0                   # their message sizes
        self.busy = False                # an I/O operation on this spool is in flight
        self.wanted = False              # its queue has room: read back from disk (else nothing is read)
        self.closed = False              # dropped (queue deleted or purged): the pager deletes its files
        self._file_seq = 0

    def __len__(self) -> int:
        return self.count

    @property
    def pages(self) -> int:
        """Page files on disk (Artemis' numberOfPages)."""
        return len(self.files)

    def append(self, entry: PagedMessage) -> None:
        self.tail.append(entry)
        self.tail_bytes += entry.size
        self.count += 1
        self.bytes += entry.size

    def peek(self) -> PagedMessage | None:
        """The next message to depage if it is in memory (else None: it is on disk, or being written)."""
        if self.ahead:
            return self.ahead[0]
        if self.unread_bytes or self.flushing is not None:
            return None
        return self.tail[0] if self.tail else None

    def pop(self) -> PagedMessage:
        """Remove and return what :meth:`peek` returned."""
        if self.ahead:
            entry = self.ahead.popleft()
            self.ahead_bytes -= entry.size
        else:
            entry = self.tail.popleft()
            self.tail_bytes -= entry.size
        self.count -= 1
        self.bytes -= entry.size
        return entry

    # -- I/O plans (the pager runs them) --------------------------------------------------------------
    def flush_due(self) -> bool:
        return not self.busy and self.tail_bytes >= FLUSH_BYTES

    def begin_flush(self) -> tuple[str, bytes, bool]:
        """Detach the oldest entries of the tail, as many as the current page file takes (at least one):
        ``(path, bytes, new file)`` to append."""
        self.busy = True
        new = not self.files or self.files[-1].size >= self.page_size
        room = self.page_size - (0 if new else self.files[-1].size)
        self.flushing, parts, size = [], [], 0
        while self.tail and (not parts or size < room):
            e = self.tail.popleft()
            self.tail_bytes -= e.size
            data = e.encode()
            self.flushing.append(e)
            parts.append(data)
            size += len(data)
        if new:
            self._file_seq += 1
            path = os.path.join(self.directory, f"{self._file_seq:010d}{PAGE_SUFFIX}")
        else:
            path = self.files[-1].path
        return path, b"".join(parts), new

    def finish_flush(self, path: str, data: bytes, new: bool) -> None:
        """The tail is on disk (durable bodies are not: the journal has them, they are read from there)."""
        if new:
            self.files.append(_PageFile(path))
        self.files[-1].size += len(data)
        self.unread_bytes += len(data)
        self.flushing = None
        self.busy = False

    def undo_flush(self, new: bool) -> None:
        """The write failed (and was cut off again): the entries are the tail again."""
        self.tail.extendleft(reversed(self.flushing))
        self.tail_bytes += sum(e.size for e in self.flushing)
        self.flushing = None
        self.busy = False
        if new:
            self._file_seq -= 1

    def read_due(self) -> bool:
        return self.wanted and not self.busy and self.unread_bytes > 0 and self.ahead_bytes < READ_AHEAD_BYTES // 2

    def begin_read(self) -> tuple[str, int, int]:
        self.busy = True
        f = self.files[0]
        return f.path, self.read_offset, min(READ_AHEAD_BYTES, f.size - self.read_offset)

    def finish_read(self, entries: list[PagedMessage], consumed: int) -> str | None:
        """Entries read back (durable ones with their payloads); returns a page file now fully read (the
        pager deletes it), if any."""
        for e in entries:
            self.ahead.append(e)
            self.ahead_bytes += e.size
        self.wanted = False
        self.read_offset += consumed
        self.unread_bytes -= consumed
        self.busy = False
        f = self.files[0]
        if self.read_offset >= f.size:  # read to its end: the next write starts a new file if it was the last
            self.files.popleft()
            self.read_offset = 0
            return f.path
        return None


# ---- the broker's pager ----------------------------------------------------------------------------------

def _dir_name(queue: str, n: int) -> str:
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', queue)[:48]}-{n}"


class Pager:
    """The page spools of one broker and the Trio task (:meth:`run`) that writes and reads their files.

    ``journal`` reads durable bodies back; ``on_ready(queue)`` is called (Trio thread) when a spool has
    something in memory to depage again; ``on_space(ok)`` when writing page files starts or stops failing
    for lack of space.
    """

    def __init__(self, directory: str, *, journal=None, on_ready: Callable[[str], None] | None = None,
                 on_space: Callable[[bool], None] | None = None):
        self.directory = directory
        self.journal = journal
        self.on_ready = on_ready or (lambda queue: None)
        self.on_space = on_space or (lambda ok: None)
        self.spools: dict[str, PageSpool] = {}
        self.out_of_space = False
        self._dropped: list[PageSpool] = []
        self._ids = 0
        self._wakeup = trio.Event()
        self._lock_fd = -1

    # -- life cycle -------------------------------------------------------------------------------------
    def open(self) -> None:
        """BLOCKING, at start-up: take the directory (a lock, so two brokers never share it) and empty it:
        page files are scratch (see the module docstring)."""
        os.makedirs(self.directory, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.directory, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                                0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise RuntimeError(f"{self.directory}: paging directory is in use by another broker") from None
        for name in os.listdir(self.directory):
            if name != LOCK_NAME:
                path = os.path.join(self.directory, name)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    unlink_quietly(path)

    def close(self) -> None:
        """BLOCKING, at shutdown: delete the page files."""
        for spool in list(self.spools.values()) + self._dropped:
            shutil.rmtree(spool.directory, ignore_errors=True)
        self.spools.clear()
        self._dropped.clear()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- the broker's calls (Trio thread) ---------------------------------------------------------------
    def paging(self, queue: str) -> bool:
        """True while ``queue`` has paged messages (every new message of it must page too)."""
        spool = self.spools.get(queue)
        return spool is not None and spool.count > 0

    def page(self, queue: str, entry: PagedMessage, *, page_size: int) -> None:
        spool = self.spools.get(queue)
        if spool is None:
            self._ids += 1
            spool = PageSpool(queue, os.path.join(self.directory, _dir_name(queue, self._ids)), page_size)
            self.spools[queue] = spool
        spool.append(entry)
        if spool.tail_bytes >= FLUSH_BYTES:
            self._wakeup.set()

    def peek(self, queue: str) -> PagedMessage | None:
        spool = self.spools.get(queue)
        return None if spool is None else spool.peek()

    def pop(self, queue: str) -> PagedMessage:
        spool = self.spools[queue]
        entry = spool.pop()
        if not spool.count:  # nothing left (nor any file, nor I/O): forget it until the queue pages again
            del self.spools[queue]
            spool.closed = True
            self._dropped.append(spool)
            self._wakeup.set()
        elif spool.ahead_bytes < READ_AHEAD_BYTES // 2 and spool.unread_bytes:
            self.want(queue)  # being consumed: read the next stretch before the read-ahead runs dry
        return entry

    def want(self, queue: str) -> None:
        """``queue`` has room for more than is in memory: read its next stretch back from disk."""
        spool = self.spools.get(queue)
        if spool is None:
            return
        spool.wanted = True
        if spool.read_due():
            self._wakeup.set()

    def typical_size(self, queue: str) -> int:
        """The mean size of ``queue``'s paged messages (what room to wait for before reading from disk)."""
        spool = self.spools[queue]
        return spool.bytes // spool.count if spool.count else 0

    def paging_queues(self) -> list[str]:
        """Queues with paged messages (what the broker tries to depage)."""
        return [name for name, s in self.spools.items() if s.count]

    def drop(self, queue: str) -> int:
        """Forget a queue's paged messages (queue deleted or purged); returns how many. Durable ones are
        still journal records: the broker acknowledges them."""
        spool = self.spools.pop(queue, None)
        if spool is None:
            return 0
        spool.closed = True
        self._dropped.append(spool)
        self._wakeup.set()
        return spool.count

    def stats(self, queue: str) -> tuple[int, int, int]:
        """``(messages, bytes, page files)`` paged for ``queue``."""
        spool = self.spools.get(queue)
        return (0, 0, 0) if spool is None else (spool.count, spool.bytes, spool.pages)

    def flush_all(self) -> None:
        """BLOCKING, at start-up (after recovery paged what it could not hold): write every tail out."""
        for spool in self.spools.values():
            while spool.tail:
                path, data, new = spool.begin_flush()
                try:
                    append_file(path, data, new=new)
                except OSError as exc:  # they stay in memory as references; the task retries
                    spool.undo_flush(new)
                    self._space(False, exc)
                    break
                spool.finish_flush(path, data, new)

    # -- the task -----------------------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Write due tails, read back what is due, delete what is done; until cancelled."""
        task_status.started()
        while True:
            if self.out_of_space:
                with trio.move_on_after(RETRY_SECONDS):
                    await self._wakeup.wait()
                if not any(s.flush_due() for s in self.spools.values()):
                    self._space(True, None)  # nothing left to retry with: let the next page try again
            else:
                await self._wakeup.wait()
            self._wakeup = trio.Event()
            await self._work()

    async def _work(self) -> None:
        # No operation is in flight here (they are awaited one by one below), so a dropped spool's files
        # can go; one dropped during an operation is deleted on the next round (drop() wakes the task).
        while self._dropped:
            spool = self._dropped.pop()
            await trio.to_thread.run_sync(shutil.rmtree, spool.directory, True)
        progress = True
        while progress:
            progress = False
            for spool in list(self.spools.values()):
                if spool.closed:
                    continue
                if spool.flush_due():
                    progress |= await self._flush(spool)
                if spool.read_due():
                    progress |= await self._read(spool)

    async def _flush(self, spool: PageSpool) -> bool:
        path, data, new = spool.begin_flush()
        try:
            await trio.to_thread.run_sync(lambda: append_file(path, data, new=new))
        except OSError as exc:
            spool.undo_flush(new)
            self._space(False, exc)
            return False
        spool.finish_flush(path, data, new)
        self._space(True, None)
        return True

    async def _read(self, spool: PageSpool) -> bool:
        path, offset, limit = spool.begin_read()
        try:
            data = await trio.to_thread.run_sync(read_file, path, offset, limit)
            entries, consumed = decode_entries(data, READ_AHEAD_BYTES - spool.ahead_bytes)
            await self._bodies(entries)
        except (OSError, ValueError) as exc:
            spool.busy = False
            log.error("queue %s: reading page file %s failed (%s); retrying", spool.queue, path, exc)
            await trio.sleep(RETRY_SECONDS)
            return False
        done = spool.finish_read(entries, consumed)
        if done is not None:
            await trio.to_thread.run_sync(unlink_quietly, done)
        if spool.closed:
            return False
        if spool.peek() is not None:
            self.on_ready(spool.queue)
        return True

    async def _bodies(self, entries: list[PagedMessage]) -> None:
        """Fill in the payloads of journal references (reads in a worker thread; waits out a compaction).
        A reference whose record is gone (acknowledged meanwhile) keeps payload None: the broker skips it."""
        wanted = [e for e in entries if e.kind == KIND_JOURNAL]
        if not wanted:
            return
        journal = self.journal
        while True:
            found = {}
            for e in wanted:
                body = journal.buffered(e.record_id)
                if body is not None:
                    found[e.record_id] = body
            located = journal.locate([e.record_id for e in wanted if e.record_id not in found])
            if located is not None:
                break
            await trio.sleep(0.01)  # a compaction is moving records: its locations are about to change
        journal.hold_reads()
        try:
            found.update(await trio.to_thread.run_sync(read_records, located))
        finally:
            journal.release_reads()
        for e in wanted:
            e.payload = found.get(e.record_id)

    def _space(self, ok: bool, exc: OSError | None) -> None:
        if self.out_of_space == (not ok):
            return
        self.out_of_space = not ok
        if not ok:
            kind = "out of space" if exc is not None and exc.errno in OUT_OF_SPACE else "failing"
            log.error("%s: writing page files is %s (%s): messages that would page are refused; retried "
                      "every %gs", self.directory, kind, exc, RETRY_SECONDS)
        else:
            log.warning("%s: page files are written again", self.directory)
        self.on_space(ok)
