"""The broker's durable journal (broker/journal.py, broker/journal_io.py): round trip, group commit, torn
tails, corruption, rotation and compaction, a model-based property test, a real ``kill -9``, and the Trio
group committer."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.journal import (
    HEADER_BYTES, GroupCommitter, Journal, JournalCorruptError, JournalError, JournalFailedError,
    JournalFormatError, JournalLockedError, StoredMessage,
)
from broker.journal_io import (
    MAGIC, T_ACKS, T_MESSAGE, AsyncFsync, AsyncFsyncUnavailable, ack_ids, decode, decode_head, encode_ack,
    encode_header, encode_message, open_async_fsync, read_header, scan_records,
)
from broker.journal_io import segment_name
from tests.paths import REPO
from tests.unit.broker.fixtures import FullDisk


def opened(directory, **kw) -> tuple[Journal, list[StoredMessage]]:
    j = Journal(directory, **kw)
    return j, j.recover()


def reopen(j: Journal, **kw) -> tuple[Journal, list[StoredMessage]]:
    """Simulate a crash: unsynced records vanish, the directory is reopened."""
    j.close(discard_pending=True)
    return opened(j.directory, **kw)


def segment_files(directory) -> list[Path]:
    return sorted(p for p in Path(directory).iterdir() if p.suffix == ".tdj")


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x40
    path.write_bytes(bytes(data))


# ---- round trip -------------------------------------------------------------------------------------

def test_round_trip_keeps_order_and_drops_acked(tmp_path):
    j, got = opened(tmp_path)
    assert got == []
    ids = [j.append_message(f"q{i % 3}", f"m{i}".encode(), delivery_count=i % 2) for i in range(50)]
    assert j.pending
    assert j.sync() == ids
    assert not j.pending
    for rid in ids[::3]:
        j.append_ack(rid)
    assert j.sync() == []
    assert j.stats.live_messages == 50 - len(ids[::3])
    j.close()

    j2, got = opened(tmp_path)
    expected = [StoredMessage(rid, f"q{i % 3}", f"m{i}".encode(), i % 2) for i, rid in enumerate(ids) if i % 3]
    assert got == expected
    assert j2.stats.live_messages == len(expected)
    assert j2.append_message("q", b"new") > ids[-1]
    j2.close()


def test_unsynced_records_vanish_on_crash_but_close_syncs(tmp_path):
    j, _ = opened(tmp_path)
    kept = j.append_message("q", b"kept")
    j.sync()
    j.append_message("q", b"lost")
    j.append_ack(kept)
    j, got = reopen(j)
    assert [m.payload for m in got] == [b"kept"]
    j.append_message("q", b"closed")
    j.close()
    j, got = opened(tmp_path)
    assert [m.payload for m in got] == [b"kept", b"closed"]
    j.close()


def test_api_misuse_is_refused(tmp_path):
    j = Journal(tmp_path)
    with pytest.raises(JournalError, match="recover"):
        j.append_message("q", b"x")
    j.recover()
    rid = j.append_message("q", b"x")
    j.append_ack(rid)
    with pytest.raises(KeyError):
        j.append_ack(rid)
    with pytest.raises(KeyError):
        j.append_update(rid, delivery_count=1)
    with pytest.raises(ValueError):
        j.append_message("q" * 70_000, b"")
    with pytest.raises(JournalLockedError, match=str(tmp_path)):
        Journal(tmp_path).recover()
    j.close()
    with pytest.raises(JournalError, match="closed"):
        j.append_message("q", b"x")


# ---- group commit -----------------------------------------------------------------------------------

def test_group_commit_is_one_fsync_for_a_thousand_records(tmp_path, monkeypatch):
    j, _ = opened(tmp_path)
    calls = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real_fsync(fd))[1])
    ids = [j.append_message("orders", b"x" * 100) for _ in range(1000)]
    assert calls == []  # appends are buffered
    assert j.sync() == ids
    assert len(calls) == 1
    assert (j.stats.syncs, j.stats.records_synced) == (1, 1000)
    assert j.sync() == [] and len(calls) == 1  # nothing pending: no fsync
    j.close()


# ---- torn tails and corruption ----------------------------------------------------------------------

def test_torn_tail_at_every_byte_of_the_last_record(tmp_path, caplog):
    src = tmp_path / "src"
    j, _ = opened(src)
    ids = [j.append_message("q", b"body-%d" % i) for i in range(5)]
    j.sync()
    (seg,) = segment_files(src)
    intact = seg.stat().st_size
    j.append_message("q", b"the last record")
    j.close()
    full = seg.stat().st_size
    assert full > intact
    for cut in range(intact, full):
        work = tmp_path / f"cut{cut}"
        shutil.copytree(src, work)
        os.truncate(work / seg.name, cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="broker.journal"):
            j, got = opened(work)
        assert [m.record_id for m in got] == ids, cut
        assert (work / seg.name).stat().st_size == intact, cut
        assert ("torn tail" in caplog.text) == (cut > intact), cut
        rid = j.append_message("q", b"after")
        j.sync()
        j, got = reopen(j)
        assert [m.record_id for m in got] == ids + [rid], cut
        j.close()


def test_flipped_byte_in_the_final_record_is_a_torn_tail(tmp_path):
    j, _ = opened(tmp_path)
    ids = [j.append_message("q", b"payload %d" % i) for i in range(4)]
    j.close()
    (seg,) = segment_files(tmp_path)
    flip(seg, seg.stat().st_size - 3)
    j, got = opened(tmp_path)
    assert [m.record_id for m in got] == ids[:3]
    j.close()


@pytest.mark.parametrize("where", ["crc", "type", "body"])
def test_flipped_byte_in_an_earlier_record_raises_with_file_and_offset(tmp_path, where):
    j, _ = opened(tmp_path)
    for i in range(4):
        j.append_message("q", b"payload %d" % i)
    j.close()
    (seg,) = segment_files(tmp_path)
    data = seg.read_bytes()
    second = next(off for off, _end, _body in scan_records(str(seg), data, last=False, fsync=False)
                  if off > HEADER_BYTES)
    flip(seg, second + {"crc": 5, "type": 8, "body": 20}[where])
    with pytest.raises(JournalCorruptError) as info:
        Journal(tmp_path).recover()
    assert info.value.path == str(seg) and info.value.offset == second
    assert f"{seg}: offset {second}" in str(info.value)
    with pytest.raises(JournalCorruptError):  # not JournalLockedError: the failed attempt let go of the lock
        Journal(tmp_path).recover()


def test_damage_in_a_sealed_segment_raises_even_at_its_end(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=512)
    for i in range(40):
        j.append_message("q", b"%03d" % i * 20)
    j.close()
    first = segment_files(tmp_path)[0]
    assert len(segment_files(tmp_path)) > 2
    flip(first, first.stat().st_size - 2)  # the final record of a sealed segment
    with pytest.raises(JournalCorruptError, match=first.name):
        Journal(tmp_path).recover()


def test_foreign_or_damaged_segment_files_are_rejected_by_name(tmp_path):
    bogus = tmp_path / "0000000000000001.tdj"
    bogus.write_bytes(b"PK\x03\x04 definitely a zip file" + b"\0" * 64)
    with pytest.raises(JournalFormatError, match="0000000000000001.tdj: not a trio-dispatch journal"):
        Journal(tmp_path).recover()
    header = bytearray(encode_header(1, 1, 1))
    header[9] = 7  # version 7
    bogus.write_bytes(bytes(header))
    with pytest.raises(JournalFormatError, match="version 7"):
        Journal(tmp_path).recover()
    header = bytearray(encode_header(1, 1, 1))
    header[30] ^= 1  # inside next_id: header checksum no longer matches
    bogus.write_bytes(bytes(header))
    with pytest.raises(JournalCorruptError, match="header checksum"):
        Journal(tmp_path).recover()
    (tmp_path / "notes.txt").write_text("unrelated files are ignored")
    bogus.write_bytes(encode_header(1, 1, 1))
    j, got = opened(tmp_path)
    assert got == []
    j.close()


# ---- rotation and compaction ------------------------------------------------------------------------

def test_rotation_then_compaction_drops_acked_segments(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=1024, compact_dead_bytes=10**9)
    ids = [j.append_message("q", bytes([i]) * 100) for i in range(60)]
    j.sync()
    before = j.stats
    assert before.segments == len(segment_files(tmp_path)) >= 6
    for rid in ids[:40]:
        j.append_ack(rid)
    j.sync()  # drops the leading fully acknowledged segments by itself ...
    result = j.compact()  # ... and the rest of the sealed ones are rewritten
    after = j.stats
    assert result.segments_removed >= 1 and result.segments_rewritten == 1
    assert after.segments <= before.segments - 5  # the 40 acknowledged messages filled 5 segments
    assert after.segments == len(segment_files(tmp_path)) < before.segments
    assert after.bytes_on_disk == sum(p.stat().st_size for p in segment_files(tmp_path)) < before.bytes_on_disk
    assert after.live_messages == 20
    j, got = reopen(j)
    assert [(m.record_id, m.payload) for m in got] == [(rid, bytes([i]) * 100) for i, rid in enumerate(ids)][40:]
    j.close()


def test_compaction_rewrites_partly_acked_segments_keeping_order_and_counts(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=1024, compact_dead_bytes=10**9)
    ids = [j.append_message("q%d" % (i % 2), b"%02d" % i * 40) for i in range(60)]
    j.sync()
    for rid in ids[::2]:
        j.append_ack(rid)
    j.append_update(ids[1], delivery_count=4)
    j.sync()
    segments_before, bytes_before = j.stats.segments, j.stats.bytes_on_disk
    result = j.compact()
    assert result.segments_rewritten == 1 and 20 <= result.messages_moved <= 30
    assert j.stats.segments < segments_before and j.stats.bytes_on_disk < bytes_before
    assert result.bytes_after == j.stats.bytes_on_disk < result.bytes_before == bytes_before
    # moved records must still be addressable: ack and update some, compact again
    j.append_ack(ids[3])
    j.append_update(ids[5], delivery_count=2)
    j.sync()
    j.compact()
    j, got = reopen(j)
    survivors = [i for i in range(1, 60, 2) if i != 3]
    expected = [StoredMessage(ids[i], "q1", b"%02d" % i * 40, {1: 4, 5: 2}.get(i, 0)) for i in survivors]
    assert got == expected
    j.close()


def test_sync_compacts_automatically_so_disk_use_stays_bounded(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=1024)
    previous = None
    for i in range(600):
        rid = j.append_message("q", b"x" * 64)
        if previous is not None:
            j.append_ack(previous)
        j.sync()
        previous = rid
    stats = j.stats
    assert stats.compactions > 0
    assert stats.bytes_on_disk < 4 * 1024 and len(segment_files(tmp_path)) <= 4
    j, got = reopen(j)
    assert [m.record_id for m in got] == [previous]
    j.close()


def test_record_ids_are_not_reused_after_compaction_dropped_every_message(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=512, compact_dead_bytes=10**9)
    ids = [j.append_message("q", b"m" * 40) for _ in range(28)]  # 4 full segments of 7 records of 64 bytes
    j.sync()
    for rid in ids:
        j.append_ack(rid)
    j.sync()  # their ACKS record starts a 5th segment: every message record is in a sealed one
    j.compact()
    j.close()
    remaining = [decode(body)[0] for p in segment_files(tmp_path)
                 for _o, _e, body in scan_records(str(p), p.read_bytes(), last=False, fsync=False)]
    assert T_MESSAGE not in remaining  # so only the segment header's next_id remembers the ids
    j, got = opened(tmp_path)
    assert got == []
    assert j.append_message("q", b"next") == ids[-1] + 1
    j.close()


def test_interrupted_compaction_is_finished_by_recovery(tmp_path, monkeypatch):
    j, _ = opened(tmp_path, segment_bytes=1024, compact_dead_bytes=10**9)
    ids = [j.append_message("q", b"%02d" % i * 30) for i in range(60)]
    j.sync()
    for rid in ids[::2]:
        j.append_ack(rid)
    j.sync()

    def crash(path):
        raise OSError("simulated crash after the compacted segment was renamed into place")

    monkeypatch.setattr(os, "unlink", crash)
    with pytest.raises(OSError, match="simulated crash"):
        j.compact()
    monkeypatch.undo()
    with pytest.raises(JournalFailedError):
        j.append_message("q", b"after failure")
    j, got = reopen(j)
    assert [m.record_id for m in got] == ids[1::2]
    j.close()


def test_delivery_count_update_survives_restart(tmp_path):
    j, _ = opened(tmp_path)
    a = j.append_message("q", b"a")
    b = j.append_message("q", b"b", delivery_count=1)
    j.sync()
    j.append_update(a, delivery_count=3)
    j.sync()
    j.append_update(b, delivery_count=9)  # never synced
    j, got = reopen(j)
    assert [(m.record_id, m.delivery_count) for m in got] == [(a, 3), (b, 1)]
    j.close()


def test_split_phases_tolerate_appends_and_acks_while_io_is_in_flight(tmp_path):
    """What GroupCommitter relies on: the Trio thread keeps appending while write_batch/run_compaction run
    elsewhere, and compaction only honours acks that are already durable."""
    j, _ = opened(tmp_path, segment_bytes=512, compact_dead_bytes=10**9)
    ids = [j.append_message("q", b"%02d" % i * 20) for i in range(30)]
    batch = j.begin_sync()
    late = j.append_message("q", b"late")  # arrives while the batch is being written
    j.append_ack(ids[0])
    with pytest.raises(JournalError, match="in progress"):
        j.begin_sync()
    j.write_batch(batch)
    assert j.finish_sync(batch) == ids
    assert j.pending and j.durable_id == ids[-1] < late
    j.sync()
    for rid in ids[1:10]:
        j.append_ack(rid)
    j.sync()
    j.append_ack(ids[10])  # buffered only: compaction must keep ids[10] ...
    j.append_update(ids[11], delivery_count=7)  # ... and write ids[11]'s durable count, not this one
    plan = j.begin_compaction(force=True)
    j.append_message("q", b"during compaction")
    j.run_compaction(plan)
    j.finish_compaction(plan)
    j, got = reopen(j)  # the buffered ack and update never reached the disk
    assert [m.record_id for m in got] == ids[10:] + [late]
    assert got[1].delivery_count == 0
    j.close()


# ---- property test against a model ------------------------------------------------------------------

OPS = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a", "b", "queue.c"]), st.binary(max_size=40)),
    st.tuples(st.just("ack"), st.integers(0, 10_000)),
    st.tuples(st.just("update"), st.integers(0, 10_000), st.integers(0, 20)),
    st.just(("sync",)), st.just(("compact",)), st.just(("crash",)),
), max_size=80)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, segment_bytes=st.sampled_from([100, 300, 4096]), dead=st.sampled_from([None, 0]))
def test_random_operations_recover_exactly_what_was_synced(ops, segment_bytes, dead):
    kw = dict(segment_bytes=segment_bytes, fsync=False, compact_dead_bytes=dead)
    with tempfile.TemporaryDirectory() as d:
        j, _ = opened(d, **kw)
        durable: dict[int, tuple[str, bytes, int]] = {}
        current: dict[int, tuple[str, bytes, int]] = {}
        pending: list[tuple] = []

        def check_crash():
            nonlocal j
            j, got = reopen(j, **kw)
            assert got == [StoredMessage(rid, *v) for rid, v in durable.items()]
            current.clear()
            current.update(durable)
            pending.clear()

        for op in ops:
            if op[0] == "append":
                rid = j.append_message(op[1], op[2])
                assert rid > max(list(durable) + list(current), default=0)
                current[rid] = (op[1], op[2], 0)
                pending.append(("m", rid, current[rid]))
            elif op[0] in ("ack", "update") and current:
                rid = sorted(current)[op[1] % len(current)]
                if op[0] == "ack":
                    j.append_ack(rid)
                    del current[rid]
                    pending.append(("a", rid))
                else:
                    j.append_update(rid, delivery_count=op[2])
                    current[rid] = current[rid][:2] + (op[2],)
                    pending.append(("u", rid, op[2]))
            elif op[0] in ("sync", "compact"):
                j.sync() if op[0] == "sync" else j.compact()
                for p in pending:
                    if p[0] == "m":
                        durable[p[1]] = p[2]
                    elif p[0] == "a":
                        del durable[p[1]]
                    else:
                        durable[p[1]] = durable[p[1]][:2] + (p[2],)
                pending.clear()
                assert not j.pending
            elif op[0] == "crash":
                check_crash()
            assert j.stats.live_messages == len(current)
        check_crash()
        j.close()


# ---- a real kill -9 ---------------------------------------------------------------------------------

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from broker.journal import Journal
j = Journal(sys.argv[2], segment_bytes=64 * 1024)
j.recover()
i, to_ack = 0, []
while True:
    for _ in range(25):
        j.append_message("q", b"payload-%08d" % i + b"." * 150)
        i += 1
    acking = to_ack
    for rid in acking:
        j.append_ack(rid)
    durable = j.sync()
    lines = ["M %d\n" % rid for rid in durable] + ["A %d\n" % rid for rid in acking]
    sys.stdout.write("".join(lines))
    sys.stdout.flush()
    to_ack = [rid for rid in durable if rid % 3 == 0]
"""

# The same through the Trio group committer (its Linux AIO fsync where there is one; the 64 KiB segments
# make some batches begin a segment, which go through its worker thread).
CHILD_COMMITTER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import trio
from broker.journal import GroupCommitter, Journal
j = Journal(sys.argv[2], segment_bytes=64 * 1024)
j.recover()

async def main():
    committer = GroupCommitter(j)
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        i, to_ack = 0, []
        while True:
            durable = []
            for _ in range(25):
                durable.append(j.append_message("q", b"payload-%08d" % i + b"." * 150))
                i += 1
            acking = to_ack
            for rid in acking:
                j.append_ack(rid)
            await committer.wait_durable(durable[-1])  # the acks were appended with them: same sync
            lines = ["M %d\n" % rid for rid in durable] + ["A %d\n" % rid for rid in acking]
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
            to_ack = [rid for rid in durable if rid % 3 == 0]

trio.run(main)
"""


@pytest.mark.system
@pytest.mark.parametrize("child", [CHILD, CHILD_COMMITTER], ids=["sync", "committer"])
def test_kill_9_mid_run_loses_nothing_reported_durable(tmp_path, child):
    d = tmp_path / "journal"
    proc = subprocess.Popen([sys.executable, "-c", child, str(REPO), str(d)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[bytes] = []
    try:
        while len(lines) < 6000:
            line = proc.stdout.readline()
            assert line.endswith(b"\n"), f"child exited early: {proc.stderr.read().decode()}"
            lines.append(line)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    lines += proc.stdout.read().splitlines(keepends=True)
    proc.stdout.close()
    proc.stderr.close()
    durable, acked = set(), set()
    for line in lines:
        if line.endswith(b"\n"):  # the kill may cut the last line short
            kind, rid = line.split()
            (durable if kind == b"M" else acked).add(int(rid))
    assert len(durable) >= 4000 and acked

    j, got = opened(d)
    recovered = [m.record_id for m in got]
    assert recovered == sorted(recovered)
    # The child acks ids divisible by 3 one round after reporting them, so the final round's acks may be
    # on disk without their "A" line: those ids may or may not come back. All from that one round (25 ids).
    in_flight = {rid for rid in durable - acked if rid % 3 == 0}
    assert not in_flight or max(durable) - min(in_flight) < 50
    must = durable - acked - in_flight
    assert must <= set(recovered), sorted(must - set(recovered))[:10]
    assert not acked & set(recovered)
    for m in got:
        assert m.payload == b"payload-%08d" % (m.record_id - 1) + b"." * 150
    rid = j.append_message("q", b"after the crash")
    assert rid > max(durable)
    j.sync()
    j, got = reopen(j)
    assert got[-1].record_id == rid
    j.close()


# ---- the Trio group committer -----------------------------------------------------------------------

def needs_aio(aio: bool) -> None:
    """Skip a test of the Linux AIO fsync where the kernel offers none (the committer then uses a thread)."""
    if aio:
        fsyncer = open_async_fsync()
        if fsyncer is None:
            pytest.skip("Linux AIO fsync is not available here")
        fsyncer.close()


@pytest.mark.parametrize("aio", [True, False], ids=["aio", "worker"])
async def test_group_committer_batches_concurrent_durable_sends(tmp_path, monkeypatch, aio):
    needs_aio(aio)
    j, _ = opened(tmp_path)
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])
    committer = GroupCommitter(j, aio=aio)
    done = []

    async def send(i):
        rid = j.append_message("q", b"msg %d" % i)
        await committer.wait_durable(rid)
        assert rid <= j.durable_id
        done.append(rid)

    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        async with trio.open_nursery() as senders:
            for i in range(200):
                senders.start_soon(send, i)
        nursery.cancel_scope.cancel()
    assert len(done) == 200
    assert 1 <= committer.syncs <= 10, committer.syncs
    # every sync was one fsync: by the kernel (AIO), or in the worker thread
    assert j.stats.syncs == committer.syncs == (committer.async_fsyncs if aio else len(fsyncs))
    assert (fsyncs, committer.async_fsyncs) == (([], committer.syncs) if aio else (fsyncs, 0))
    j, got = reopen(j)
    assert sorted(m.record_id for m in got) == sorted(done)
    j.close()


@pytest.mark.parametrize("aio", [True, False], ids=["aio", "worker"])
async def test_group_committer_reports_a_failed_fsync_to_every_waiter(tmp_path, monkeypatch, aio):
    needs_aio(aio)
    j, _ = opened(tmp_path)
    committer = GroupCommitter(j, aio=aio)
    rid = j.append_message("q", b"x")
    with pytest.raises(JournalError, match="not running"):
        await committer.wait_durable(rid)

    def broken(fd):
        raise OSError(5, "Input/output error")

    async def broken_async(self, fd):
        broken(fd)

    monkeypatch.setattr(os, "fsync", broken)
    monkeypatch.setattr(AsyncFsync, "fsync", broken_async)
    failures = []

    async def send():
        try:
            await committer.wait_durable(j.append_message("q", b"y"))
        except JournalFailedError as exc:
            failures.append(exc)

    with pytest.raises(BaseExceptionGroup) as info:
        async with trio.open_nursery() as nursery:
            await nursery.start(committer.run)
            for _ in range(5):
                nursery.start_soon(send)
    assert info.group_contains(OSError)
    assert len(failures) == 5
    with pytest.raises(JournalFailedError):
        j.append_message("q", b"z")
    monkeypatch.undo()
    j.close()


async def test_async_fsync_syncs_a_file_and_reports_a_failure(tmp_path):
    needs_aio(True)
    fsyncer = AsyncFsync()
    fd = os.open(tmp_path / "f", os.O_WRONLY | os.O_CREAT)
    try:
        os.write(fd, b"x" * 1000)
        await fsyncer.fsync(fd)  # and again: the context and its eventfd are reused
        os.write(fd, b"y")
        await fsyncer.fsync(fd)
    finally:
        os.close(fd)
    with pytest.raises(OSError) as info:  # a real error, not "AIO is unavailable"
        await fsyncer.fsync(fd)
    assert not isinstance(info.value, AsyncFsyncUnavailable)
    fsyncer.close()
    fsyncer.close()  # idempotent


async def test_group_committer_reports_durable_only_after_the_fsync_of_every_written_record(tmp_path, monkeypatch):
    """The durability rule on the AIO path: a batch is written before its fsync is handed to the kernel,
    and its records are reported durable only once that fsync has completed."""
    needs_aio(True)
    j, _ = opened(tmp_path)
    segment = segment_files(tmp_path)[-1]
    events = []
    real = AsyncFsync.fsync

    async def watched(self, fd):
        events.append(("submit", os.fstat(fd).st_size))
        await real(self, fd)
        events.append(("done",))

    monkeypatch.setattr(AsyncFsync, "fsync", watched)
    committer = GroupCommitter(j, on_durable=lambda rid: events.append(("durable", rid, segment.stat().st_size)))
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        for round_ in range(5):
            ids = [j.append_message("q", b"round %d message %d" % (round_, i)) for i in range(20)]
            await committer.wait_durable(ids[-1])
        nursery.cancel_scope.cancel()
    assert committer.async_fsyncs == committer.syncs >= 5
    durable = [i for i, e in enumerate(events) if e[0] == "durable"]
    assert len(durable) == committer.syncs
    for i in durable:
        assert events[i - 2][0] == "submit" and events[i - 1] == ("done",), events[i - 2:i + 1]
        assert events[i - 2][1] == events[i][2], "records written after their fsync was submitted"


async def test_group_committer_falls_back_to_a_worker_fsync_when_the_kernel_refuses_aio(tmp_path, monkeypatch):
    needs_aio(True)
    j, _ = opened(tmp_path)
    fsyncs = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (fsyncs.append(fd), real_fsync(fd))[1])

    async def refused(self, fd):
        raise AsyncFsyncUnavailable(22, "io_submit(IOCB_CMD_FSYNC): Invalid argument")

    monkeypatch.setattr(AsyncFsync, "fsync", refused)
    committer = GroupCommitter(j)
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        assert committer.fsyncer is not None
        await committer.wait_durable(j.append_message("q", b"first"))
        assert committer.fsyncer is None  # given up on AIO for good
        await committer.wait_durable(j.append_message("q", b"second"))
        nursery.cancel_scope.cancel()
    assert len(fsyncs) == committer.syncs == 2 and committer.async_fsyncs == 0
    j, got = reopen(j)
    assert [m.payload for m in got] == [b"first", b"second"]
    j.close()


# ---- out of space (issue 10: the broker exited on ENOSPC) -------------------------------------------

@pytest.mark.parametrize("code", ["ENOSPC", "EDQUOT"])
def test_out_of_space_is_undone_and_the_records_wait_for_space(tmp_path, code):
    import errno

    from broker.journal import JournalOutOfSpaceError

    disk = FullDisk(getattr(errno, code))
    j, _ = opened(tmp_path, write=disk)
    kept = [j.append_message("q", b"kept %d" % i) for i in range(10)]
    j.sync()
    sizes = {p.name: p.stat().st_size for p in segment_files(tmp_path)}
    disk.full = True
    waiting = [j.append_message("q", b"waiting %d" % i) for i in range(10)]
    j.append_ack(kept[0])
    with pytest.raises(JournalOutOfSpaceError):
        j.sync()
    # The files are exactly as before and the journal is still usable: nothing is disabled.
    assert {p.name: p.stat().st_size for p in segment_files(tmp_path)} == sizes
    assert j.pending and j.durable_id == kept[-1]
    assert j.read_payloads([waiting[3]]) == {waiting[3]: b"waiting 3"}  # still readable from memory
    more = j.append_message("q", b"after")
    with pytest.raises(JournalOutOfSpaceError):
        j.sync()
    disk.full = False
    assert j.sync() == waiting + [more]
    j, got = reopen(j)
    assert [m.payload for m in got] == [b"kept %d" % i for i in range(1, 10)] + \
        [b"waiting %d" % i for i in range(10)] + [b"after"]
    j.close()


def test_out_of_space_while_starting_a_segment_leaves_no_file_behind(tmp_path):
    from broker.journal import JournalOutOfSpaceError

    disk = FullDisk()
    j, _ = opened(tmp_path, write=disk, segment_bytes=4096)
    for i in range(30):
        j.append_message("q", b"%03d" % i * 30)
    j.sync()
    before = sorted(p.name for p in tmp_path.iterdir())
    disk.full = True
    for i in range(30, 60):
        j.append_message("q", b"%03d" % i * 30)
    with pytest.raises(JournalOutOfSpaceError):
        j.sync()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no new segment, no *.tmp
    disk.full = False
    j.sync()
    j, got = reopen(j, segment_bytes=4096)
    assert [m.payload for m in got] == [b"%03d" % i * 30 for i in range(60)]
    j.close()


def test_compaction_without_room_is_abandoned_and_the_journal_carries_on(tmp_path):
    disk = FullDisk()
    j, _ = opened(tmp_path, write=disk, segment_bytes=4096, compact_dead_bytes=10**9)
    ids = [j.append_message("q", bytes([i]) * 100) for i in range(100)]
    j.sync()
    for rid in ids[::2]:
        j.append_ack(rid)
    j.sync()
    disk.full = True
    stats = j.compact()  # the buffer is empty: only the rewrite writes, and it finds no room
    assert stats.segments_rewritten == 0 and disk.failures == 1
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    disk.full = False
    assert j.compact().segments_rewritten == 1
    j, got = reopen(j, segment_bytes=4096)
    assert [m.record_id for m in got] == ids[1::2]
    j.close()


def test_close_while_out_of_space_does_not_raise(tmp_path):
    disk = FullDisk()
    j, _ = opened(tmp_path, write=disk)
    j.append_message("q", b"durable")
    j.sync()
    disk.full = True
    j.append_message("q", b"never acknowledged to its producer")
    j.close()
    j, got = opened(tmp_path)
    assert [m.payload for m in got] == [b"durable"]
    j.close()


async def test_group_committer_waits_out_a_full_disk_and_resumes_by_itself(tmp_path):
    disk = FullDisk()
    j, _ = opened(tmp_path, write=disk)
    changes = []
    committer = GroupCommitter(j, retry_seconds=0.05, on_space=changes.append)
    async with trio.open_nursery() as nursery:
        await nursery.start(committer.run)
        await committer.wait_durable(j.append_message("q", b"before"))
        disk.full = True
        done = trio.Event()

        async def send():
            await committer.wait_durable(j.append_message("q", b"during"))
            done.set()

        nursery.start_soon(send)
        with trio.fail_after(10):
            while not committer.out_of_space:
                await trio.sleep(0.01)
            while disk.failures < 3:  # retried, quietly
                await trio.sleep(0.01)
        assert changes == [False] and not done.is_set()
        disk.full = False
        with trio.fail_after(10):
            await done.wait()
        assert changes == [False, True] and not committer.out_of_space
        nursery.cancel_scope.cancel()
    j, got = reopen(j)
    assert [m.payload for m in got] == [b"before", b"during"]
    j.close()


# ---- reading payloads back (paging) -----------------------------------------------------------------

def test_recover_index_holds_no_payloads_and_read_payloads_fetches_them(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=4096)
    ids = [j.append_message(f"q{i % 2}", b"%04d" % i * 50, delivery_count=i % 3) for i in range(100)]
    j.sync()
    for rid in ids[:50]:
        j.append_ack(rid)
    j.append_update(ids[60], delivery_count=7)
    j.sync()
    j.close()
    j = Journal(tmp_path, segment_bytes=4096)
    index = j.recover_index()
    assert [r.record_id for r in index] == ids[50:]
    assert [r.queue for r in index] == [f"q{i % 2}" for i in range(50, 100)]
    assert index[10].delivery_count == 7 and index[10].payload_size == 200
    assert j.read_payloads([ids[99], ids[50], ids[0]]) == {ids[99]: b"0099" * 50, ids[50]: b"0050" * 50}
    # A message not yet synced is read from the buffer.
    fresh = j.append_message("q0", b"fresh")
    assert j.read_payloads([fresh]) == {fresh: b"fresh"}
    j.close()


def test_compaction_waits_while_reads_are_out_and_locations_follow_it(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=4096, compact_dead_bytes=0)
    ids = [j.append_message("q", bytes([i]) * 100) for i in range(100)]
    j.sync()
    for rid in ids[::2]:
        j.append_ack(rid)
    j._sync_buffer()  # noqa: SLF001 - sync without the automatic compaction
    before = j.locate([ids[1]])
    j.hold_reads()
    assert j.begin_compaction(force=True) is None
    j.release_reads()
    plan = j.begin_compaction(force=True)
    assert plan is not None and j.locate([ids[1]]) is None  # locations are moving
    j.run_compaction(plan)
    j.finish_compaction(plan)
    after = j.locate([ids[1]])
    assert after != before
    assert j.read_payloads([ids[1], ids[99]]) == {ids[1]: bytes([1]) * 100, ids[99]: bytes([99]) * 100}
    j.close()


def test_a_batch_undone_for_lack_of_space_keeps_what_was_appended_meanwhile_in_place(tmp_path):
    """A batch written while more messages are appended, then undone (out of space): the later messages'
    places in the buffer move behind the batch's records, and every record is found where it was written."""
    disk = FullDisk()
    j, _ = opened(tmp_path, write=disk)
    first = [j.append_message("q", b"first %d" % i) for i in range(5)]
    j.sync()
    disk.full = True
    batch_ids = [j.append_message("q", b"in the batch %d" % i) for i in range(5)]
    j.append_ack(first[0])
    batch = j.begin_sync()
    later = [j.append_message("q", b"appended meanwhile %d" % i) for i in range(5)]
    with pytest.raises(OSError):
        j.write_batch(batch)
    j.rollback_sync(batch, OSError(28, "No space left on device"))
    disk.full = False
    assert j.sync() == batch_ids + later
    payloads = j.read_payloads(first + batch_ids + later)  # from the files, at the offsets the journal keeps
    assert payloads == {**{rid: b"first %d" % i for i, rid in enumerate(first[1:], 1)},
                        **{rid: b"in the batch %d" % i for i, rid in enumerate(batch_ids)},
                        **{rid: b"appended meanwhile %d" % i for i, rid in enumerate(later)}}
    acks = [rid for p in segment_files(tmp_path) for _o, _e, body in scan_records(str(p), p.read_bytes(),
            last=True, fsync=False) if body[0] == T_ACKS for rid in ack_ids(body)]
    assert acks == [first[0]]  # written once, by the sync that succeeded
    j, got = reopen(j)
    assert [m.record_id for m in got] == first[1:] + batch_ids + later
    j.close()


def test_one_batch_across_several_segments_places_each_message_in_its_own(tmp_path):
    j, _ = opened(tmp_path, segment_bytes=300)
    ids = [j.append_message("q", b"%02d" % i * 20) for i in range(12)]
    j.append_ack(ids[3])
    assert j.sync() == ids
    assert len(segment_files(tmp_path)) >= 4
    assert j.read_payloads(ids) == {rid: b"%02d" % i * 20 for i, rid in enumerate(ids) if i != 3}
    assert j.stats.live_messages == 11
    j, got = reopen(j, segment_bytes=300)
    assert [m.record_id for m in got] == ids[:3] + ids[4:]
    j.close()


# ---- acknowledgements: one ACKS record per sync (format version 2) ---------------------------------

def records_of(path: Path) -> list[tuple[int, int]]:
    """``(type, record id)`` of each record of a segment (an ACKS record's ids one by one)."""
    out = []
    for _o, _e, body in scan_records(str(path), path.read_bytes(), last=True, fsync=False):
        kind, rid, _count, _queue = decode_head(body)
        out += [(kind, acked) for acked in ack_ids(body)] if kind == T_ACKS else [(kind, rid)]
    return out


def test_a_sync_writes_its_acknowledgements_as_one_record_after_its_messages(tmp_path):
    j, _ = opened(tmp_path)
    first = [j.append_message("q", b"first %d" % i) for i in range(4)]
    j.sync()
    second = [j.append_message("q", b"second %d" % i) for i in range(3)]
    for rid in (first[1], second[0], first[3]):  # interleaved with appends, in any order
        j.append_ack(rid)
    j.append_message("q", b"third")
    j.sync()
    segment = segment_files(tmp_path)[-1]
    bodies = [body for _o, _e, body in scan_records(str(segment), segment.read_bytes(), last=True, fsync=False)]
    assert [b[0] for b in bodies] == [T_MESSAGE] * 8 + [T_ACKS]
    assert ack_ids(bodies[-1]) == [first[1], second[0], first[3]]
    assert read_header(str(segment))[3] == 2
    j, got = reopen(j)
    assert [m.record_id for m in got] == [first[0], first[2], second[1], second[2], second[2] + 1]
    j.close()


def test_acknowledgements_beyond_one_record_are_split(tmp_path, monkeypatch):
    import broker.journal

    monkeypatch.setattr(broker.journal, "ACKS_PER_RECORD", 3)
    j, _ = opened(tmp_path)
    ids = [j.append_message("q", b"%d" % i) for i in range(10)]
    j.sync()
    for rid in ids[:8]:
        j.append_ack(rid)
    j.sync()
    kinds = [k for k, _rid in records_of(segment_files(tmp_path)[-1])]
    assert kinds == [T_MESSAGE] * 10 + [T_ACKS] * 8
    assert len([b for _o, _e, b in scan_records(str(segment_files(tmp_path)[-1]),
                                                 segment_files(tmp_path)[-1].read_bytes(), last=True,
                                                 fsync=False) if b[0] == T_ACKS]) == 3
    j, got = reopen(j)
    assert [m.record_id for m in got] == ids[8:]
    j.close()


def test_a_version_1_journal_is_read_and_not_appended_to(tmp_path):
    """Version 1 wrote one ACK record per acknowledgement; its segments are read as they are, and new
    records go to a new (version 2) segment, so that a version 1 broker refuses the directory by version."""
    import struct
    import zlib

    head = struct.pack(">8sHHQQQ", MAGIC, 1, 0, 1, 1, 1)
    old = (head + struct.pack(">I", zlib.crc32(head)) + encode_message(1, b"q", b"one", 0)
           + encode_message(2, b"q", b"two", 3) + encode_ack(1))
    (tmp_path / segment_name(1)).write_bytes(old)
    j, got = opened(tmp_path)
    assert got == [StoredMessage(2, "q", b"two", 3)]
    rid = j.append_message("q", b"three")
    j.append_ack(j.append_message("q", b"four"))
    j.sync()
    j.close()
    files = segment_files(tmp_path)
    assert [f.name for f in files] == [segment_name(1), segment_name(2)]
    assert files[0].read_bytes() == old
    assert read_header(str(files[1]))[1:] == (2, 3, 2)  # first_seq 2, next_id 3, version 2
    assert [k for k, _rid in records_of(files[1])] == [T_MESSAGE, T_MESSAGE, T_ACKS]
    j, got = opened(tmp_path)
    assert got == [StoredMessage(2, "q", b"two", 3), StoredMessage(rid, "q", b"three", 0)]
    j.close()
    with pytest.raises(JournalFormatError, match="version 9, this code reads 1 and 2"):
        head = struct.pack(">8sHHQQQ", MAGIC, 9, 0, 3, 3, 4)
        (tmp_path / segment_name(3)).write_bytes(head + struct.pack(">I", zlib.crc32(head)))
        Journal(tmp_path).recover()
