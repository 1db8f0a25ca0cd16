"""Durable message journal for tdbroker: append-only segment files, CRC per record, group commit, compaction.

(The on-disk format and the crash-safety rules are written down here, beside the class that must honour
them, which is why this module runs past 600 lines; the byte codec, file helpers and group committer live
in journal_io.py, compaction in journal_compact.py: a :class:`broker.journal_compact.Compactor` the journal
owns.)

On-disk format
--------------
A journal is a directory of segment files named ``<seq:016d>.tdj`` (``seq`` increases monotonically), plus
``journal.lock`` (an ``flock`` so two brokers never share a directory). Every segment starts with a
40-byte header, all integers big-endian::

    magic:8s = b"\\x89TDJRNL\\n" | version:u16 = 2 | flags:u16 = 0 | seq:u64 | first_seq:u64 | next_id:u64 | crc32:u32

``seq`` repeats the file name; ``first_seq`` < ``seq`` marks a compacted segment that replaces every segment
numbered ``first_seq .. seq-1`` (recovery deletes those leftovers of an interrupted compaction); ``next_id`` is
a floor for new record ids, so ids are never reused even after compaction dropped every record; ``crc32``
covers the preceding 36 bytes. Records follow back to back::

    length:u32 | crc32:u32 | type:u8 | body            length = 1 + len(body); crc32 over length|type|body
    type 1 MESSAGE  record_id:u64 | delivery_count:u32 | queue_len:u16 | queue:utf-8 | payload
    type 2 ACK      record_id:u64                       the message was acknowledged (or moved): drop it
    type 3 UPDATE   record_id:u64 | delivery_count:u32  durable delivery count for redelivery accounting
    type 4 ACKS     record_id:u64 ...  (one or more)    the messages were acknowledged (or moved): drop them

Version 2 added ACKS: a sync writes the acknowledgements it carries as ACKS records after all its other
records (at most :data:`broker.journal_io.ACKS_PER_RECORD` ids each), so an acknowledgement still follows
its message, in the same segment or a later one; version 1 wrote an ACK per acknowledgement, which
recovery still reads. A version 1 segment is never appended to: the journal opens a new segment for its
appends (so a version 1 reader refuses the directory by its version instead of by an unknown record).

A MESSAGE whose payload is a large message reference (:mod:`broker.largemessage`: the message's head and a
footer naming its file) is an ordinary record here; the journal only keeps ``large_refs`` (record id -> file
id, found by the footer's last bytes) and tells ``large`` (the file store) as such records come and go.

Durability and recovery
-----------------------
Appends are buffered in memory; :meth:`Journal.sync` writes the whole buffer with ``os.write`` and fsyncs once
(group commit). When the active segment would pass ``segment_bytes`` it is fsynced and sealed first and a new
segment is created (written to ``*.tmp``, fsynced, renamed, directory fsynced), so a sealed segment is always
complete. Recovery reads segments in order and verifies every checksum. In the **last** segment a torn tail
is normal after ``kill -9`` or power loss and is truncated with a warning: fewer than 8 bytes left, a record
that runs past end of file, a bad checksum on the final record, or an all-zero remainder. Anything else (a
bad record followed by more data, any problem in an earlier segment, a wrong magic) raises an error naming
the file and offset. Residual risk, accepted: a flipped bit in a *length* field near the end of the last
segment that makes the record appear to run past end of file is taken for a torn tail.

Compaction (dropping and rewriting sealed segments) is in :mod:`broker.journal_compact`: ``journal.compactor``
sees the journal through :class:`broker.journal_compact.CompactionHost`, which :class:`Journal` implements.

Threading: a :class:`Journal` belongs to the Trio thread. ``sync()``/``compact()`` block; the async path
(:mod:`broker.journal_io`) splits them into plan (``begin_*``, Trio thread), I/O (``write_batch`` /
``run_compaction``, which touch only their plan and may run in ``trio.to_thread``; the group committer
writes a small batch from the Trio thread and leaves only its fsync to the kernel) and apply
(``finish_*``). The per-record work of a sync is kept off the per-message path where it can be: a
buffered record's place is fixed when it is appended (its offset in the buffer), so placing a batch that
fits the active segment is one comparison and accounting for it one pass over its message ids.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Callable

from broker.journal_compact import (  # noqa: F401  (re-exported)
    COMPACT_DEAD_RATIO, COMPACT_DEAD_SEGMENTS, CompactionHost, CompactionPlan, CompactionStats, Compactor,
    Segment,
)
from broker.journal_io import (  # noqa: F401  (errors re-exported: callers import them from here)
    ACKS_PER_RECORD, HEADER_BYTES, MAX_DELIVERY_COUNT, MAX_QUEUE_NAME_BYTES, MAX_RECORD_BYTES, MSG,
    OUT_OF_SPACE, RECORD_HEADER_BYTES, SEGMENT_NAME, SEGMENT_SUFFIX, T_ACK, T_ACKS, T_MESSAGE, T_UPDATE,
    TMP_SUFFIX, VERSION, GroupCommitter, JournalCorruptError, JournalError, JournalFailedError,
    JournalFormatError, JournalLockedError, JournalOutOfSpaceError, MessageEncoder, ack_ids, create_file,
    decode, decode_head, encode_acks, encode_header, encode_message, encode_update, fsync_path, read_header,
    read_records, scan_records, segment_name, write_all,
)

from broker.largemessage import FOOTER_BYTES as LARGE_FOOTER_BYTES
from broker.largemessage import MAGIC as LARGE_MAGIC
from broker.largemessage import file_id_of as large_file_id

log = logging.getLogger("broker.journal")

# Large enough that rotation (an extra fsync and a directory fsync) is rare at broker rates; small enough
# that a fully acknowledged segment is returned to the file system promptly.
SEGMENT_BYTES = 64 * 1024 * 1024
# Queue names the journal keeps a record encoder for (the name checked once, not per message); past this
# many it starts over, so a broker that creates and drops queues without end does not grow it without end.
QUEUE_NAMES_CACHED = 1024
LOCK_NAME = "journal.lock"


@dataclass(frozen=True)
class StoredMessage:
    """An unacknowledged message as recovered from disk."""

    record_id: int
    queue: str
    payload: bytes
    delivery_count: int


@dataclass(frozen=True, slots=True)
class RecoveredRecord:
    """An unacknowledged message found by :meth:`Journal.recover_index`: where its payload is, not the payload
    (read it with :meth:`Journal.read_payloads` when it is wanted in memory)."""

    record_id: int
    queue: str
    delivery_count: int
    payload_size: int


@dataclass(frozen=True)
class JournalStats:
    """A snapshot of journal counters."""

    live_messages: int
    segments: int
    bytes_on_disk: int
    dead_bytes: int
    syncs: int
    records_synced: int
    compactions: int
    last_sync_seconds: float


@dataclass(slots=True)  # one per live message: kept small (no __dict__)
class _Live:
    size: int
    delivery_count: int  # latest, buffered updates included
    durable_count: int
    queue: str
    seq: int | None = None  # None while buffered
    offset: int = 0  # while buffered: where the record starts in its buffer (_Records.size before it)
    acked: bool = False  # an ACK is buffered or durable; the entry goes when the ACK is durable


class _Records:
    """Records appended and not written yet: their bytes in append order, and which of them are messages,
    acknowledgements and updates (record ids; an update with its count). Kept as flat lists of what a sync
    needs rather than one tuple per record: a durable message and its acknowledgement are two records."""

    __slots__ = ("data", "size", "messages", "acks", "updates", "acks_written")

    def __init__(self) -> None:
        self.data: list[bytes] = []
        self.size = 0  # bytes in data
        self.messages: list[int] = []
        self.acks: list[int] = []  # written as ACKS records when a sync takes the records (seal)
        self.updates: list[tuple[int, int]] = []
        self.acks_written = 0  # ACKS records at the end of data (put there by seal)

    def __bool__(self) -> bool:
        return bool(self.data or self.acks)

    def seal(self) -> None:
        """Add the acknowledgements as ACKS records after every other record (a sync is taking these)."""
        acks = self.acks
        for i in range(0, len(acks), ACKS_PER_RECORD):
            record = encode_acks(acks[i:i + ACKS_PER_RECORD])
            self.data.append(record)
            self.size += len(record)
            self.acks_written += 1

    def unseal(self) -> None:
        """Undo :meth:`seal` (the sync did not happen)."""
        while self.acks_written:
            self.size -= len(self.data.pop())
            self.acks_written -= 1

    def extend(self, later: _Records) -> None:
        """Append ``later``'s records after these (its messages' buffer offsets are the caller's business;
        neither may be sealed)."""
        self.data.extend(later.data)
        self.size += later.size
        self.messages.extend(later.messages)
        self.acks.extend(later.acks)
        self.updates.extend(later.updates)


@dataclass
class _Chunk:
    """The part of a batch written to one segment: its records' bytes from ``start`` (an offset in the
    batch) on, landing at file offset ``offset`` of segment ``seq``."""

    seq: int
    path: str
    parts: list[bytes]
    start: int
    offset: int
    header: bytes | None = None  # set when this chunk starts a new segment


@dataclass
class SyncBatch:
    """Records detached from the buffer by :meth:`Journal.begin_sync`, with where they land."""

    records: _Records
    chunks: list[_Chunk]
    fd: int
    next_id: int
    started: float
    new_fds: list[int] = field(default_factory=list)

    @property
    def appends_only(self) -> bool:
        """The batch goes to the active segment alone (it begins no new segment)."""
        return len(self.chunks) == 1

    @property
    def size(self) -> int:
        """The bytes of its records."""
        return self.records.size


class Journal:
    """Append-only segmented journal of message records, sans-IO except for the file operations it is asked to do.

    Call :meth:`recover` once before anything else; append records (buffered, not durable), then
    :meth:`sync` (or let :class:`broker.journal_io.GroupCommitter` do it) to make them durable.
    Compaction is a part, :attr:`compactor` (:class:`broker.journal_compact.Compactor`), to which the
    journal is its :class:`broker.journal_compact.CompactionHost`.
    """

    def __init__(self, directory: str | os.PathLike, *, segment_bytes: int = SEGMENT_BYTES, fsync: bool = True,
                 compact_dead_bytes: int | None = None, clock: Callable[[], float] = time.monotonic,
                 write: Callable[[int, bytes], None] = write_all) -> None:
        if segment_bytes <= HEADER_BYTES:
            raise ValueError(f"segment_bytes must exceed the {HEADER_BYTES}-byte header")
        self.directory = os.fspath(directory)
        self.segment_bytes = segment_bytes
        self.fsync = fsync
        self._clock = clock
        self._write = write  # every journal write goes through it (tests inject ENOSPC here)
        self._segments: list[Segment] = []
        self._messages: dict[int, _Live] = {}
        self._buffer = _Records()
        self._encoders: dict[str, MessageEncoder] = {}  # queue name -> its record encoder (checked once)
        self._next_id = 1
        self._durable_id = 0
        self._live_count = 0
        self._fd = -1
        self._lock_fd = -1
        self._state = "new"  # new -> open -> closed
        self._busy = False
        self._read_holds = 0  # locations handed out for reading (read_payloads in a worker thread)
        self._inflight: SyncBatch | None = None  # the batch being written (its records are not in _buffer)
        self._failure: BaseException | None = None
        self._syncs = self._records_synced = 0
        self._scan_top = 0  # recovery: the last message record id seen (ids only grow in append order)
        self._last_sync_seconds = 0.0
        # Large messages (broker.largemessage): the live message records that are references to a large
        # message file (record id -> file id), and who is told as they come and go (the file store).
        self.large_refs: dict[int, int] = {}
        self.large = None
        self.compactor = Compactor(self, self.directory, fsync=fsync, write=write,
                                   dead_bytes=(int(segment_bytes * COMPACT_DEAD_SEGMENTS)
                                               if compact_dead_bytes is None else compact_dead_bytes))

    @property
    def compact_dead_bytes(self) -> int:
        """Automatic compaction rewrites sealed segments only when at least this many of their bytes are dead."""
        return self.compactor.dead_bytes

    # ---- recovery ---------------------------------------------------------------------------------

    def recover(self) -> list[StoredMessage]:
        """Open the directory (creating it if needed), validate every segment, truncate a torn tail and
        return the unacknowledged messages in append order, payloads read into memory."""
        index = self.recover_index()
        payloads = dict(read_records(self.locate([r.record_id for r in index])))
        return [StoredMessage(r.record_id, r.queue, payloads[r.record_id], r.delivery_count) for r in index]

    def recover_index(self) -> list[RecoveredRecord]:
        """Like :meth:`recover` but without the payloads (memory stays small whatever the journal holds):
        the broker reads those it keeps in memory and leaves the others on disk (paging)."""
        if self._state != "new":
            raise JournalError("recover() must be called exactly once, before anything else")
        os.makedirs(self.directory, exist_ok=True)
        lock_path = os.path.join(self.directory, LOCK_NAME)
        self._lock_fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise JournalLockedError(f"{self.directory}: journal is in use by another process") from None
        try:
            return self._recover()
        except BaseException:
            self._state = "closed"  # half-built bookkeeping: use a new Journal after fixing the directory
            os.close(self._lock_fd)
            self._lock_fd = -1
            raise

    def _recover(self) -> list[RecoveredRecord]:
        found: list[tuple[int, str]] = []
        for name in os.listdir(self.directory):
            path = os.path.join(self.directory, name)
            if name.endswith(SEGMENT_SUFFIX + TMP_SUFFIX):
                log.info("%s: removing leftover of an interrupted segment write", path)
                os.unlink(path)
            elif (m := SEGMENT_NAME.match(name)) is not None:
                found.append((int(m.group(1)), path))
        found.sort()
        kept: list[tuple[int, str, int]] = []
        next_floor = 1
        removed = False
        version = VERSION
        for seq, path in found:
            hseq, first_seq, next_id, version = read_header(path)
            if hseq != seq:
                raise JournalCorruptError(path, 0, f"header says segment {hseq}, file name says {seq}")
            while kept and kept[-1][0] >= first_seq:
                old = kept.pop()
                log.warning("%s: superseded by compacted %s, removing", old[1], path)
                os.unlink(old[1])
                removed = True
            kept.append((seq, path, next_id))
            next_floor = max(next_floor, next_id)
        if removed and self.fsync:
            fsync_path(self.directory, directory=True)
        top = 0
        for i, (seq, path, _) in enumerate(kept):
            top = max(top, self._scan(seq, path, last=i == len(kept) - 1))
        self._next_id = max(next_floor, top + 1)
        if not self._segments or version != VERSION:  # a version 1 segment is not appended to
            seq = self._segments[-1].seq + 1 if self._segments else 1
            self._segments.append(self._create_segment(seq, seq))
        self._fd = os.open(self._segments[-1].path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._durable_id = self._next_id - 1
        self._live_count = len(self._messages)
        self._state = "open"
        head = RECORD_HEADER_BYTES + MSG.size
        return [RecoveredRecord(rid, m.queue, m.delivery_count, m.size - head - len(m.queue.encode()))
                for rid, m in self._messages.items()]

    def _scan(self, seq: int, path: str, *, last: bool) -> int:
        """Index one segment (no payload is kept); returns the highest message record id seen."""
        with open(path, "rb") as f:
            data = f.read()
        seg = Segment(seq, path, HEADER_BYTES)
        self._segments.append(seg)
        names: dict[str, str] = {}  # one string per queue name, shared by its messages
        top = 0
        for off, end, body in scan_records(path, data, last=last, fsync=self.fsync):
            try:
                kind, rid, count, queue = decode_head(body)
                if kind == T_MESSAGE and rid <= self._scan_top:
                    raise ValueError(f"record id {rid} appears twice (or out of order)")
            except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
                raise JournalCorruptError(path, off, f"undecodable record: {exc}") from None
            seg.size = end
            if kind == T_MESSAGE:
                self._scan_top = top = rid
                if body[-8:] == LARGE_MAGIC:
                    fid = large_file_id(bytes(body[-LARGE_FOOTER_BYTES:]))
                    if fid is not None:
                        self.large_refs[rid] = fid
                self._messages[rid] = _Live(end - off, count, count, names.setdefault(queue, queue), seq, off)
                seg.live_bytes += end - off
                seg.live_count += 1
            elif kind == T_ACKS:
                for acked in ack_ids(body):
                    self._forget(acked)
            elif kind == T_ACK:
                self._forget(rid)
            elif (m := self._messages.get(rid)) is not None:
                m.delivery_count = m.durable_count = count
        return top

    def _forget(self, rid: int) -> None:
        """A durable ACK: the message's bytes become dead (ACKs for compacted-away ids are ignored)."""
        m = self._messages.pop(rid, None)
        if self.large_refs and self._state == "new":  # recovery: an ACK scanned (at run time append_ack does it)
            self.large_refs.pop(rid, None)
        if m is not None and m.seq is not None:
            seg = self._segment(m.seq)
            seg.live_bytes -= m.size
            seg.live_count -= 1

    def _segment(self, seq: int) -> Segment:
        for seg in reversed(self._segments):
            if seg.seq == seq:
                return seg
        raise KeyError(seq)

    # ---- appends ----------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._failure is not None:
            raise JournalFailedError(f"{self.directory}: an earlier journal write failed") from self._failure
        if self._state != "open":
            raise JournalError(f"journal is {self._state}; call recover() first" if self._state == "new"
                               else "journal is closed")

    def append_message(self, queue: str, payload: bytes, *, delivery_count: int = 0) -> int:
        """Buffer a message record and return its record id; durable only after the next :meth:`sync`."""
        if self._failure is not None or self._state != "open":
            self._check()
        encoder = self._encoders.get(queue)
        if encoder is None:
            encoder = self._encoder(queue)
        if not 0 <= delivery_count <= MAX_DELIVERY_COUNT:
            raise ValueError(f"delivery_count {delivery_count} out of range")
        if len(payload) > encoder.max_payload:
            raise ValueError(f"message record larger than {MAX_RECORD_BYTES} bytes")
        rid = self._next_id
        self._next_id = rid + 1
        # bytes(payload): a no-op for bytes; a bytearray or memoryview is copied once, as the record needs
        data = encoder.encode(rid, payload if type(payload) is bytes else bytes(payload), delivery_count)
        buf = self._buffer
        self._messages[rid] = _Live(len(data), delivery_count, delivery_count, queue, None, buf.size)
        self._live_count += 1
        buf.data.append(data)
        buf.size += len(data)
        buf.messages.append(rid)
        if payload[-8:] == LARGE_MAGIC:
            fid = large_file_id(payload)
            if fid is not None:
                self.large_refs[rid] = fid
                if self.large is not None:
                    self.large.referenced(fid)
        return rid

    def _encoder(self, queue: str) -> MessageEncoder:
        qb = queue.encode()
        if len(qb) > MAX_QUEUE_NAME_BYTES:
            raise ValueError(f"queue name longer than {MAX_QUEUE_NAME_BYTES} bytes")
        if len(self._encoders) >= QUEUE_NAMES_CACHED:
            self._encoders.clear()
        encoder = self._encoders[queue] = MessageEncoder(qb)
        return encoder

    def _live(self, record_id: int) -> _Live:
        m = self._messages.get(record_id)
        if m is None or m.acked:
            raise KeyError(f"record {record_id} is not a live message")
        return m

    def append_ack(self, record_id: int) -> None:
        """Buffer the removal of a message (acknowledged, or moved elsewhere)."""
        if self._failure is not None or self._state != "open":
            self._check()
        m = self._messages.get(record_id)
        if m is None or m.acked:
            raise KeyError(f"record {record_id} is not a live message")
        m.acked = True
        self._live_count -= 1
        self._buffer.acks.append(record_id)  # written by the sync that takes it (_Records.seal)
        if self.large_refs:
            fid = self.large_refs.pop(record_id, None)
            if fid is not None and self.large is not None:
                self.large.unreferenced(fid)

    def append_update(self, record_id: int, *, delivery_count: int) -> None:
        """Buffer a new delivery count for a live message."""
        self._check()
        if not 0 <= delivery_count <= MAX_DELIVERY_COUNT:
            raise ValueError(f"delivery_count {delivery_count} out of range")
        self._live(record_id).delivery_count = delivery_count
        data = encode_update(record_id, delivery_count)
        buf = self._buffer
        buf.data.append(data)
        buf.size += len(data)
        buf.updates.append((record_id, delivery_count))

    @property
    def pending(self) -> bool:
        """True when buffered records are waiting for a sync."""
        return bool(self._buffer)

    @property
    def durable_id(self) -> int:
        """Every record id up to and including this one is on disk (ids are issued and synced in order)."""
        return self._durable_id

    # ---- reading payloads back (paging) -------------------------------------------------------------

    def delivery_count(self, record_id: int) -> int:
        """The latest delivery count of a live message."""
        return self._live(record_id).delivery_count

    def locate(self, record_ids: list[int]) -> list[tuple[int, str, int, int]] | None:
        """Trio thread: ``(record_id, path, offset, size)`` of each live message record on disk, for
        :func:`broker.journal_io.read_records` (which may run in a worker thread); None while a compaction
        is moving records (ask again after it). Messages not on disk yet are left out (:meth:`buffered` has
        them), and so are acknowledged ones. A caller reading in another thread brackets the read with :meth:`hold_reads` /
        :meth:`release_reads`, which keeps compaction from starting meanwhile."""
        if self.compactor.active:
            return None
        out = []
        for rid in record_ids:
            m = self._messages.get(rid)
            if m is not None and m.seq is not None and not m.acked:
                out.append((rid, self._segment(m.seq).path, m.offset, m.size))
        return out

    def buffered(self, record_id: int) -> bytes | None:
        """The payload of a live message whose record is not on disk yet (buffered, or being written), else
        None. A linear search: only a message paged the moment it arrived needs it."""
        m = self._messages.get(record_id)
        if m is None or m.seq is not None or m.acked:
            return None
        buffers = [self._buffer] if self._inflight is None else [self._inflight.records, self._buffer]
        for records in buffers:
            for data in records.data:
                if data[RECORD_HEADER_BYTES] == T_MESSAGE and \
                        MSG.unpack_from(data, RECORD_HEADER_BYTES)[1] == record_id:
                    return decode(data[RECORD_HEADER_BYTES:])[4]
        return None

    def read_payloads(self, record_ids: list[int]) -> dict[int, bytes]:
        """BLOCKING, Trio thread: the payloads of live messages (wherever they are). Unknown or acknowledged
        ids (an acknowledgement buffered counts) are left out."""
        self._check()
        found = {rid: p for rid in record_ids if (p := self.buffered(rid)) is not None}
        located = self.locate([rid for rid in record_ids if rid not in found])
        if located is None:
            raise JournalError("read_payloads during a compaction")
        found.update(read_records(located))
        return found

    def live_ids(self, queue: str) -> list[int]:
        """Record ids of the live (unacknowledged) messages of ``queue``, in order: a scan of every live
        message (cold path: deleting or purging a queue whose messages are partly paged)."""
        return [rid for rid, m in self._messages.items() if m.queue == queue and not m.acked]

    def hold_reads(self) -> None:
        self._read_holds += 1

    def release_reads(self) -> None:
        self._read_holds -= 1

    # ---- sync (group commit) ----------------------------------------------------------------------

    def sync(self) -> list[int]:
        """BLOCKING. Write every buffered record, fsync once, return the message ids now durable; compacts
        automatically when enough sealed bytes are dead."""
        wrote = bool(self._buffer)
        ids = self._sync_buffer()
        if wrote:
            plan = self.begin_compaction(force=False)
            if plan is not None:
                self._compact_now(plan)
        return ids

    def _sync_buffer(self) -> list[int]:
        self._check()
        if not self._buffer:
            return []
        batch = self.begin_sync()
        try:
            self.write_batch(batch)
        except OSError as exc:
            if exc.errno not in OUT_OF_SPACE:
                self.abort_io(exc)
                raise
            self.rollback_sync(batch, exc)
            raise JournalOutOfSpaceError(f"{self.directory}: out of space: {exc.strerror}") from exc
        except BaseException as exc:
            self.abort_io(exc)
            raise
        return self.finish_sync(batch)

    def begin_sync(self) -> SyncBatch:
        """Trio thread: detach the buffer and decide which segment its records go to."""
        self._check()
        self.claim_io()
        records, self._buffer = self._buffer, _Records()
        records.seal()
        seg = self._segments[-1]
        if seg.size + records.size <= self.segment_bytes:  # the common case: all of it fits
            chunks = [_Chunk(seg.seq, seg.path, records.data, 0, seg.size)]
        else:
            chunks = self._place(records.data, seg)
        self._inflight = SyncBatch(records, chunks, self._fd, self._next_id, self._clock())
        return self._inflight

    def _place(self, data: list[bytes], seg: Segment) -> list[_Chunk]:
        """Split a batch that does not fit ``seg`` (the active segment) into chunks: a record that would
        take a non-empty segment past ``segment_bytes`` starts a new one."""
        cur = _Chunk(seg.seq, seg.path, [], 0, seg.size)
        chunks, size, start = [cur], seg.size, 0
        for record in data:
            if size + len(record) > self.segment_bytes and size > HEADER_BYTES:
                seq = cur.seq + 1
                cur = _Chunk(seq, os.path.join(self.directory, segment_name(seq)), [], start, HEADER_BYTES,
                             header=encode_header(seq, seq, self._next_id))
                chunks.append(cur)
                size = HEADER_BYTES
            cur.parts.append(record)
            size += len(record)
            start += len(record)
        return chunks

    def write_batch(self, batch: SyncBatch, *, sync: bool = True) -> None:
        """Blocking I/O, safe in a worker thread: touches only ``batch`` and its file descriptors. With
        ``sync`` False the last segment written is left for the caller to fsync (:attr:`SyncBatch.fd` once
        this returns); a segment sealed on the way is fsynced here all the same."""
        fd, dirty = batch.fd, False
        for chunk in batch.chunks:
            if chunk.header is not None:
                if dirty and self.fsync:
                    os.fsync(fd)  # seal the full segment before its successor exists
                fd = create_file(self.directory, chunk.path, chunk.header, fsync=self.fsync, reopen=True,
                                 write=self._write)
                batch.new_fds.append(fd)
            if chunk.parts:
                self._write(fd, b"".join(chunk.parts))
                dirty = True
        if dirty and self.fsync and sync:
            os.fsync(fd)

    def finish_sync(self, batch: SyncBatch) -> list[int]:
        """Trio thread: account for the written records; returns the message ids now durable."""
        self._busy = False
        self._inflight = None
        if batch.new_fds:
            os.close(self._fd)
            for fd in batch.new_fds[:-1]:
                os.close(fd)
            self._fd = batch.new_fds[-1]
        chunks = batch.chunks
        for chunk in chunks:
            if chunk.header is not None:
                self._segments.append(Segment(chunk.seq, chunk.path, HEADER_BYTES))
        records = batch.records
        messages = self._messages
        by_seq = {s.seq: s for s in self._segments}
        # Once per durable message and once per acknowledgement: a message's place is its offset in the
        # buffer (set when it was appended) plus where its chunk landed.
        if len(chunks) == 1:
            chunk = chunks[0]
            seg = by_seq[chunk.seq]
            seq, base, live = chunk.seq, chunk.offset, 0
            for rid in records.messages:
                m = messages[rid]
                m.seq = seq
                m.offset += base
                live += m.size
            seg.size += records.size
            seg.live_bytes += live
            seg.live_count += len(records.messages)
        else:
            self._finish_chunks(records, chunks, by_seq)
        for rid, count in records.updates:
            if (m := messages.get(rid)) is not None:
                m.durable_count = count
        last = self._segments[-1]
        for rid in records.acks:
            m = messages.pop(rid, None)  # _forget, inline (ACKs for compacted-away ids are ignored)
            if m is not None and m.seq is not None:
                dead = last if m.seq == last.seq else by_seq[m.seq]
                dead.live_bytes -= m.size
                dead.live_count -= 1
        self._durable_id = batch.next_id - 1
        self._syncs += 1
        self._records_synced += len(records.data)
        self._last_sync_seconds = self._clock() - batch.started
        return records.messages

    def _finish_chunks(self, records: _Records, chunks: list[_Chunk], by_seq: dict[int, Segment]) -> None:
        """finish_sync's accounting of the messages of a batch that began new segments."""
        messages = self._messages
        i, ends = 0, [c.start for c in chunks[1:]] + [records.size]
        for rid in records.messages:
            m = messages[rid]
            while m.offset >= ends[i]:
                i += 1
            chunk = chunks[i]
            seg = by_seq[chunk.seq]
            m.seq = chunk.seq
            m.offset = chunk.offset + m.offset - chunk.start
            seg.live_bytes += m.size
            seg.live_count += 1
        for chunk in chunks:
            by_seq[chunk.seq].size += sum(len(p) for p in chunk.parts)

    def rollback_sync(self, batch: SyncBatch, exc: OSError) -> None:
        """Trio thread: writing ``batch`` failed for lack of space (ENOSPC, EDQUOT). Undo it so that the files
        are as before -- the current segment truncated back to what was synced, the segments the batch began
        removed -- and put its records back in front of the buffer, where the next sync writes them again.
        Nothing durable is lost and the journal stays usable. (Truncating also drops whatever the failed
        write left in the page cache, so a later fsync cannot report success for bytes never written.)"""
        self._busy = False
        self._inflight = None
        try:
            for fd in batch.new_fds:
                os.close(fd)
            for chunk in batch.chunks:
                if chunk.header is not None:
                    for path in (chunk.path, chunk.path + TMP_SUFFIX):
                        try:
                            os.unlink(path)
                        except FileNotFoundError:
                            pass
            os.ftruncate(self._fd, self._segments[-1].size)
            if self.fsync:
                os.fsync(self._fd)
        except OSError as undo:  # the files are in an unknown state: this is a failure after all
            self.abort_io(undo)
            raise
        # The batch's records go back in front of the buffer: what was appended meanwhile moves up by as
        # many bytes in it (a buffered message's offset is its place in the buffer).
        batch.records.unseal()  # its acknowledgements are written with the next sync's
        later, shift = self._buffer, batch.records.size
        for rid in later.messages:
            self._messages[rid].offset += shift
        batch.records.extend(later)
        self._buffer = batch.records
        log.debug("%s: out of space (%s): %d records kept for the next sync", self.directory,
                  exc.strerror or exc, len(batch.records.data))

    def abort_io(self, exc: BaseException) -> None:
        """Trio thread: a write, fsync or compaction failed; the journal refuses further use."""
        self._busy = False
        self.compactor.abandon()
        self._inflight = None
        self._failure = exc
        log.error("%s: journal I/O failed, journal disabled: %r", self.directory, exc)

    # ---- compaction (the work is done by self.compactor) -------------------------------------------

    def compact(self) -> CompactionStats:
        """BLOCKING. Sync the buffer, then drop fully acknowledged sealed segments and rewrite the rest of
        the sealed segments without their dead records, keeping append order."""
        self._sync_buffer()
        self._check()
        plan = self.begin_compaction(force=True)
        return CompactionStats() if plan is None else self._compact_now(plan)

    def _compact_now(self, plan: CompactionPlan) -> CompactionStats:
        try:
            self.run_compaction(plan)
        except BaseException as exc:
            self.abort_io(exc)
            raise
        return self.finish_compaction(plan)

    def begin_compaction(self, *, force: bool) -> CompactionPlan | None:
        """Trio thread: plan a compaction of the sealed segments, or None when there is nothing (``force``)
        or not enough (automatic) to gain, or while payload reads are out (:meth:`hold_reads`)."""
        self._check()
        if self._read_holds:
            return None
        return self.compactor.plan(force=force)

    def run_compaction(self, plan: CompactionPlan) -> None:
        """Blocking I/O, safe in a worker thread: :meth:`broker.journal_compact.Compactor.run`."""
        self.compactor.run(plan)

    def finish_compaction(self, plan: CompactionPlan) -> CompactionStats:
        """Trio thread: replace the compacted segments in the bookkeeping."""
        return self.compactor.finish(plan)

    # CompactionHost: what self.compactor calls back (Trio thread)

    def sealed_segments(self) -> list[Segment]:
        return self._segments[:-1]

    def live_records(self, seqs: set[int]) -> list[tuple[int, int, int, int, int]]:
        return [(rid, m.seq, m.offset, m.size, m.durable_count)
                for rid, m in self._messages.items() if m.seq in seqs]

    def next_record_id(self) -> int:
        return self._next_id

    def claim_io(self) -> None:
        """Mark a sync or compaction in progress (one at a time)."""
        if self._busy:
            raise JournalError("a sync or compaction is already in progress")
        self._busy = True

    def adopt_compaction(self, gone: set[int], target: Segment | None, new_offsets: dict[int, int]) -> None:
        self._busy = False
        self._segments = [s for s in self._segments if s.seq not in gone]
        if target is not None:
            for rid, new_offset in new_offsets.items():
                if (m := self._messages.get(rid)) is not None:
                    m.seq, m.offset = target.seq, new_offset
                    target.live_bytes += m.size
                    target.live_count += 1
            self._segments.insert(0, target)

    def bytes_on_disk(self) -> int:
        return sum(s.size for s in self._segments)

    def _create_segment(self, seq: int, first_seq: int) -> Segment:
        path = os.path.join(self.directory, segment_name(seq))
        header = encode_header(seq, first_seq, self._next_id)
        create_file(self.directory, path, header, fsync=self.fsync, reopen=False, write=self._write)
        return Segment(seq, path, HEADER_BYTES)

    # ---- life cycle & stats -----------------------------------------------------------------------

    def close(self, *, discard_pending: bool = False) -> None:
        """Sync what is buffered (unless ``discard_pending``, which is what a crash does) and release the
        directory. Idempotent."""
        if self._state == "open":
            if self._busy:
                raise JournalError("cannot close during a sync or compaction")
            try:
                if self._buffer and not discard_pending and self._failure is None:
                    self._sync_buffer()
            except JournalOutOfSpaceError as exc:
                # Their producers never heard "accepted": nothing promised is lost by leaving them out.
                log.error("%s: closing while out of space: %d buffered records not written (%s)",
                          self.directory, len(self._buffer.data) + len(self._buffer.acks), exc)
            finally:
                self._state = "closed"
                self._buffer = _Records()
                os.close(self._fd)
                self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1
        self._state = "closed"

    @property
    def stats(self) -> JournalStats:
        """Counters for management and tests."""
        return JournalStats(
            live_messages=self._live_count,
            segments=len(self._segments),
            bytes_on_disk=self.bytes_on_disk(),
            dead_bytes=sum(s.dead_bytes for s in self._segments),
            syncs=self._syncs,
            records_synced=self._records_synced,
            compactions=self.compactor.compactions,
            last_sync_seconds=self._last_sync_seconds,
        )
