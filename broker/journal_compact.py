"""Journal compaction: drop fully acknowledged sealed segments, rewrite partly dead ones (a mixin of
:class:`broker.journal.Journal`, whose on-disk format and recovery rules it follows).

Compaction
----------
Only sealed segments are compacted and always a prefix of them, which is what makes it safe: an ACK or
UPDATE always lies in the same or a later segment than its message. Leading sealed segments without live
messages are unlinked oldest first (directory fsync after each, so a crash never leaves a later one gone
while an earlier survives). If the remaining sealed segments hold dead bytes, their live messages (current
durable delivery count folded in, append order kept) are rewritten into ``<last sealed seq>.tdj.tmp`` with
``first_seq`` = first sealed seq, fsynced and renamed over the last sealed segment; then the others are
unlinked. Compaction uses durable state only: an ACK still in the buffer does not drop its message.

Compaction and payload reads: a rewrite moves live records, so while a plan is out
:meth:`broker.journal.Journal.locate` answers None, and no plan is made while located reads are out
(``hold_reads``). Out of space for the rewrite, it is abandoned and tried again later (the sealed segments
stay as they were).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

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
    """What :meth:`Journal.run_compaction` will do; made by :meth:`Journal.begin_compaction`."""

    drop: list[Segment]  # unlinked oldest first (no rewrite)
    covered: list[Segment]  # replaced by the rewrite
    moves: list[tuple[int, int, int, int]]  # record_id, source seq, source offset, size
    counts: dict[int, int]  # record_id -> durable delivery count to write
    target: Segment | None
    next_id: int
    new_offsets: dict[int, int] = field(default_factory=dict)
    new_size: int = 0


class Compaction:
    """Mixin of :class:`broker.journal.Journal`: its compaction steps (plan, I/O, apply)."""

    def compact(self) -> CompactionStats:
        """BLOCKING. Sync the buffer, then drop fully acknowledged sealed segments and rewrite the rest of
        the sealed segments without their dead records, keeping append order."""
        self._sync_buffer()
        self._check()
        plan = self.begin_compaction(force=True)
        return CompactionStats() if plan is None else self._run_plan(plan)

    def _run_plan(self, plan: CompactionPlan) -> CompactionStats:
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
        sealed = self._segments[:-1]
        lead = 0
        while lead < len(sealed) and sealed[lead].live_count == 0:
            lead += 1
        rest = sealed[lead:]
        dead = sum(s.dead_bytes for s in rest)
        total = sum(s.size - HEADER_BYTES for s in rest)
        rewrite = dead > 0 and (force or (dead >= self.compact_dead_bytes and dead >= COMPACT_DEAD_RATIO * total))
        if not rewrite and lead == 0:
            return None
        self._claim()
        self._compacting = True
        if not rewrite:
            return CompactionPlan(sealed[:lead], [], [], {}, None, self._next_id)
        in_rest = {s.seq for s in rest}
        moves = [(rid, m.seq, m.offset, m.size) for rid, m in self._messages.items() if m.seq in in_rest]
        counts = {rid: self._messages[rid].durable_count for rid, *_ in moves}
        target = Segment(rest[-1].seq, rest[-1].path, HEADER_BYTES)
        return CompactionPlan([], sealed, moves, counts, target, self._next_id)

    def run_compaction(self, plan: CompactionPlan) -> None:
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

    def finish_compaction(self, plan: CompactionPlan) -> CompactionStats:
        """Trio thread: replace the compacted segments in the bookkeeping."""
        self._busy = False
        self._compacting = False
        before = sum(s.size for s in self._segments)
        gone = {s.seq for s in plan.drop} | {s.seq for s in plan.covered}
        self._segments = [s for s in self._segments if s.seq not in gone]
        if plan.target is not None:
            target = plan.target
            target.size = plan.new_size
            for rid, new_offset in plan.new_offsets.items():
                if (m := self._messages.get(rid)) is not None:
                    m.seq, m.offset = target.seq, new_offset
                    target.live_bytes += m.size
                    target.live_count += 1
            self._segments.insert(0, target)
        self._compactions += 1
        after = sum(s.size for s in self._segments)
        stats = CompactionStats(len(gone) - (plan.target is not None), int(plan.target is not None),
                                len(plan.moves), before, after)
        log.info("%s: compaction %s", self.directory, stats)
        return stats

