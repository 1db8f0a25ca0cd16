"""Journal compaction: drop fully acknowledged sealed segments, rewrite partly dead ones.

:class:`Compactor` is the compaction part of :class:`broker.journal.Journal`: the journal owns one
(``journal.compactor``) and keeps its public ``compact`` / ``begin_compaction`` / ``run_compaction`` /
``finish_compaction`` as delegations. The compactor sees the journal only through :class:`CompactionHost`
(the sealed segments, the live records in them, and a call to take the rewritten segment in), and follows
the journal's on-disk format and recovery rules (written down in :mod:`broker.journal`).

Compaction
----------
Only sealed segments are compacted and always a prefix of them, which is what makes it safe: an ACK or
UPDATE always lies in the same or a later segment than its message. Leading sealed segments without live
messages are unlinked oldest first (directory fsync after each, so a crash never leaves a later one gone
while an earlier survives). If the remaining sealed segments hold dead bytes, their live messages (current
durable delivery count folded in, append order kept) are rewritten into ``<last sealed seq>.tdj.tmp`` with
``first_seq`` = first sealed seq, fsynced and renamed over the last sealed segment; then the others are
unlinked. Compaction uses durable state only: an ACK still in the buffer does not drop its message.

Compaction and payload reads: a rewrite moves live records, so while a plan is out (:attr:`Compactor.active`)
:meth:`broker.journal.Journal.locate` answers None, and the journal makes no plan while located reads are
out (``hold_reads``). Out of space for the rewrite, it is abandoned and tried again later (the sealed
segments stay as they were).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Callable, Protocol

from broker.journal_io import (
    COMPACT_WRITE_CHUNK, HEADER_BYTES, OUT_OF_SPACE, TMP_SUFFIX, encode_header, fsync_path, reencode_message,
)

log = logging.getLogger("broker.journal")

# Automatic compaction rewrites sealed segments only when at least half their bytes are dead, so each live
# byte is rewritten about once per byte of new garbage at most (amortised O(1) write amplification) ...
COMPACT_DEAD_RATIO = 0.5
# ... and at least this many segments' worth of bytes are dead: less is not worth a rewrite.
COMPACT_DEAD_SEGMENTS = 1.0


@dataclass
class Segment:
    """One segment file as the journal accounts for it (live = not acknowledged)."""

    seq: int
    path: str
    size: int
    live_bytes: int = 0
    live_count: int = 0

    @property
    def dead_bytes(self) -> int:
        return self.size - HEADER_BYTES - self.live_bytes


@dataclass(frozen=True)
class CompactionStats:
    """What one compaction did."""

    segments_removed: int = 0
    segments_rewritten: int = 0
    messages_moved: int = 0
    bytes_before: int = 0
    bytes_after: int = 0


@dataclass
class CompactionPlan:
    """What :meth:`Compactor.run` will do; made by :meth:`Compactor.plan`."""

    drop: list[Segment]  # unlinked oldest first (no rewrite)
    covered: list[Segment]  # replaced by the rewrite
    moves: list[tuple[int, int, int, int]]  # record_id, source seq, source offset, size
    counts: dict[int, int]  # record_id -> durable delivery count to write
    target: Segment | None
    next_id: int
    new_offsets: dict[int, int] = field(default_factory=dict)
    new_size: int = 0


class CompactionHost(Protocol):
    """What a :class:`Compactor` asks of the journal it compacts (:class:`broker.journal.Journal`), all on the
    Trio thread."""

    def sealed_segments(self) -> list[Segment]:
        """The sealed segments, oldest first (the active segment is never compacted)."""

    def live_records(self, seqs: set[int]) -> list[tuple[int, int, int, int, int]]:
        """``(record_id, seq, offset, size, durable delivery count)`` of every message record in the segments
        ``seqs`` whose acknowledgement is not durable yet, in append order."""

    def next_record_id(self) -> int:
        """The floor for new record ids, written into a rewritten segment's header."""

    def claim_io(self) -> None:
        """Mark a sync or compaction in progress; raises if one already is."""

    def adopt_compaction(self, gone: set[int], target: Segment | None, new_offsets: dict[int, int]) -> None:
        """Release the claim; the segments ``gone`` are no more, ``target`` (if any, already sized) replaces
        them at the front, and the record ids in ``new_offsets`` now live in it at those offsets."""

    def bytes_on_disk(self) -> int:
        """The size of every segment file, for :class:`CompactionStats`."""


class Compactor:
    """The compaction part of a journal: decides when compaction pays (``dead_bytes`` and
    :data:`COMPACT_DEAD_RATIO`), plans it, does its file I/O and hands the result back to the journal.

    ``directory``, ``fsync`` and ``write`` are the journal's: its directory, whether to fsync, and the write
    function every journal write goes through."""

    def __init__(self, host: CompactionHost, directory: str, *, fsync: bool, dead_bytes: int,
                 write: Callable[[int, bytes], None]) -> None:
        self.host = host
        self.directory = directory
        self.fsync = fsync
        self.dead_bytes = dead_bytes  # automatic compaction rewrites only when at least this much is dead
        self._write = write
        self.active = False  # a plan is out: record locations may be about to change
        self.compactions = 0

    def plan(self, *, force: bool) -> CompactionPlan | None:
        """Trio thread: plan a compaction of the sealed segments, or None when there is nothing (``force``)
        or not enough (automatic) to gain. Claims the journal's I/O (:meth:`CompactionHost.claim_io`) when it
        returns a plan."""
        sealed = self.host.sealed_segments()
        lead = 0
        while lead < len(sealed) and sealed[lead].live_count == 0:
            lead += 1
        rest = sealed[lead:]
        dead = sum(s.dead_bytes for s in rest)
        total = sum(s.size - HEADER_BYTES for s in rest)
        rewrite = dead > 0 and (force or (dead >= self.dead_bytes and dead >= COMPACT_DEAD_RATIO * total))
        if not rewrite and lead == 0:
            return None
        self.host.claim_io()
        self.active = True
        if not rewrite:
            return CompactionPlan(sealed[:lead], [], [], {}, None, self.host.next_record_id())
        records = self.host.live_records({s.seq for s in rest})
        moves = [(rid, seq, offset, size) for rid, seq, offset, size, _count in records]
        counts = {rid: count for rid, _seq, _offset, _size, count in records}
        target = Segment(rest[-1].seq, rest[-1].path, HEADER_BYTES)
        return CompactionPlan([], sealed, moves, counts, target, self.host.next_record_id())

    def run(self, plan: CompactionPlan) -> None:
        """Blocking I/O, safe in a worker thread: touches only ``plan`` and the sealed segment files.

        Out of space for the rewritten segment, the rewrite is abandoned (its temporary file removed, the
        sealed segments left as they are: only the drops, already done, count) and tried again at a later
        compaction; any other error propagates."""
        for seg in plan.drop:
            os.unlink(seg.path)
            if self.fsync:
                fsync_path(self.directory, directory=True)
        if plan.target is None:
            return
        tmp = plan.target.path + TMP_SUFFIX
        try:
            self._rewrite(plan, tmp)
        except OSError as exc:
            if exc.errno not in OUT_OF_SPACE:
                raise
            os.unlink(tmp)
            plan.target, plan.covered, plan.moves = None, [], []
            plan.new_offsets.clear()
            log.warning("%s: compaction rewrite abandoned, out of space: %s", self.directory, exc.strerror)
            return
        os.rename(tmp, plan.target.path)
        if self.fsync:
            fsync_path(self.directory, directory=True)
        for seg in plan.covered[:-1]:
            os.unlink(seg.path)
        if self.fsync and len(plan.covered) > 1:
            fsync_path(self.directory, directory=True)

    def _rewrite(self, plan: CompactionPlan, tmp: str) -> None:
        """Write the live records of the covered segments, in order, to ``tmp`` (the new segment)."""
        out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        sources: dict[int, int] = {}
        try:
            chunk = [encode_header(plan.target.seq, plan.covered[0].seq, plan.next_id)]
            size, pending = HEADER_BYTES, HEADER_BYTES
            for rid, seq, offset, length in plan.moves:
                if seq not in sources:
                    sources[seq] = os.open(self._path_of(plan, seq), os.O_RDONLY | os.O_CLOEXEC)
                record = os.pread(sources[seq], length, offset)
                record = reencode_message(self._path_of(plan, seq), offset, rid, record, plan.counts[rid])
                plan.new_offsets[rid] = size
                chunk.append(record)
                size += len(record)
                pending += len(record)
                if pending >= COMPACT_WRITE_CHUNK:
                    self._write(out, b"".join(chunk))
                    chunk, pending = [], 0
            self._write(out, b"".join(chunk))
            if self.fsync:
                os.fsync(out)
        finally:
            os.close(out)
            for fd in sources.values():
                os.close(fd)
        plan.new_size = size

    @staticmethod
    def _path_of(plan: CompactionPlan, seq: int) -> str:
        return next(s.path for s in plan.covered if s.seq == seq)

    def finish(self, plan: CompactionPlan) -> CompactionStats:
        """Trio thread: hand the compacted segments to the journal's bookkeeping."""
        self.active = False
        before = self.host.bytes_on_disk()
        gone = {s.seq for s in plan.drop} | {s.seq for s in plan.covered}
        if plan.target is not None:
            plan.target.size = plan.new_size
        self.host.adopt_compaction(gone, plan.target, plan.new_offsets)
        self.compactions += 1
        after = self.host.bytes_on_disk()
        stats = CompactionStats(len(gone) - (plan.target is not None), int(plan.target is not None),
                                len(plan.moves), before, after)
        log.info("%s: compaction %s", self.directory, stats)
        return stats

    def abandon(self) -> None:
        """Trio thread: the journal failed (:meth:`broker.journal.Journal.abort_io`); no plan is out any more."""
        self.active = False
