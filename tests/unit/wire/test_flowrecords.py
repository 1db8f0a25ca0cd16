"""FlowRecorder: deterministic sampling, whole lines, rotation, rename on close, the Trio flush task."""

from __future__ import annotations

import itertools
import json
import math
import os
import time
import uuid
import zlib

import pytest
import trio
import trio.testing

from wire.flowrecords import FlowRecorder, FlowRecordError, message_id_str


def _counter_clock(start=1_000):
    it = itertools.count(start)
    return lambda: next(it)


def _lines(directory, pattern=".jsonl"):
    out = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(pattern):
            with open(os.path.join(directory, name), encoding="utf-8") as f:
                out.extend(json.loads(line) for line in f)
    return out


def test_sampling_is_deterministic_by_message_id_across_recorders(tmp_path):
    a = FlowRecorder(tmp_path / "a", "Router.A", sample=0.1)
    b = FlowRecorder(tmp_path / "b", "Broker.B", sample=0.1)
    ids = [f"msg-{i}" for i in range(20_000)]
    chosen_a = [m for m in ids if a.wants(m)]
    assert chosen_a == [m for m in ids if b.wants(m)]
    # The documented rule: CRC-32 of the string form below sample * 2**32.
    assert chosen_a == [m for m in ids if zlib.crc32(m.encode()) < int(0.1 * 2**32)]
    assert 1_700 < len(chosen_a) < 2_300


def test_binary_and_uuid_ids_sample_by_their_string_form(tmp_path):
    rec = FlowRecorder(tmp_path, "n", sample=0.5)
    u = uuid.UUID(int=12345)
    assert message_id_str(b"\x01\xff") == "b:01ff"
    assert message_id_str(u) == str(u)
    assert message_id_str(42) == "42"
    for mid in (b"\x01\xff", u, 42, b"abc" * 5):
        assert rec.wants(mid) == rec.wants(message_id_str(mid))


def test_sample_one_keeps_everything_and_sample_zero_nothing(tmp_path):
    all_ = FlowRecorder(tmp_path, "n", sample=1.0)
    none = FlowRecorder(tmp_path, "m", sample=0.0)
    assert all(all_.wants(f"x{i}") for i in range(1000)) and all_.wants(None)
    assert not any(none.wants(f"x{i}") for i in range(1000)) and not none.wants(None)


def test_records_without_id_are_sampled_by_counter(tmp_path):
    rec = FlowRecorder(tmp_path, "n", sample=0.25)
    assert [rec.wants(None) for _ in range(8)] == [False, False, False, True] * 2


@pytest.mark.parametrize("kwargs", [{"sample": 1.5}, {"sample": -0.1}, {"rotate_mb": 0}, {"flush_interval": 0},
                                    {"sample": "lots"}])
def test_bad_configuration_is_a_clear_error(tmp_path, kwargs):
    with pytest.raises(FlowRecordError):
        FlowRecorder(tmp_path, "n", **kwargs)


def test_unusable_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FlowRecordError, match="cannot create directory"):
        FlowRecorder(blocker / "sub", "n")


def test_record_writes_nothing_until_flush_then_one_json_object_per_line(tmp_path):
    rec = FlowRecorder(tmp_path, "Router/A", clock=_counter_clock())
    rec.record("ingress", conn=3, link="L1", address="queue", phase=0, mid="m1", size=120, outcome=None)
    rec.record("egress", conn=4, link=7, address="queue", mid=b"\x00\x01", trace=["R.A", "R.B"])
    assert os.listdir(tmp_path) == []  # record() does no IO
    rec.flush()
    parts = os.listdir(tmp_path)
    assert len(parts) == 1 and parts[0].endswith(".jsonl.part") and parts[0].startswith("Router_A-")
    lines = _lines(tmp_path, ".jsonl.part")
    assert lines[0] == {"ts": 1000, "node": "Router/A", "event": "ingress", "conn": 3, "link": "L1",
                        "address": "queue", "phase": 0, "mid": "m1", "size": 120}
    assert lines[1]["mid"] == "b:0001" and lines[1]["trace"] == ["R.A", "R.B"] and "outcome" not in lines[1]
    rec.close()
    assert [n.endswith(".jsonl") for n in os.listdir(tmp_path)] == [True]
    assert len(_lines(tmp_path)) == 2
    rec.record("sent", mid="late")  # ignored after close
    rec.flush()
    assert len(_lines(tmp_path)) == 2


def test_rotation_by_size_renames_finished_files_and_never_splits_lines(tmp_path):
    rec = FlowRecorder(tmp_path, "n", rotate_mb=0.01)  # ~10 KiB files
    for batch in range(20):
        for i in range(50):
            rec.record("sent", mid=f"m-{batch}-{i}", address="a" * 40, size=i)
        rec.flush()
        # Between flushes at most one .part file exists and every file ends with a newline.
        names = os.listdir(tmp_path)
        assert sum(n.endswith(".part") for n in names) <= 1
        for n in names:
            with open(tmp_path / n, "rb") as f:
                assert f.read().endswith(b"\n")
    rec.close()
    names = sorted(os.listdir(tmp_path), key=lambda n: int(n.split("-")[-1].split(".")[0]))
    assert len(names) > 3 and all(n.endswith(".jsonl") for n in names)
    seqs = [int(n.split("-")[-1].split(".")[0]) for n in names]
    assert seqs == list(range(1, len(names) + 1))
    assert all(os.path.getsize(tmp_path / n) < 20 * 1024 for n in names)
    mids = [r["mid"] for n in names for r in map(json.loads, open(tmp_path / n))]
    assert mids == [f"m-{b}-{i}" for b in range(20) for i in range(50)]


def test_unserialisable_fields_drop_the_batch_without_raising(tmp_path):
    rec = FlowRecorder(tmp_path, "n")
    rec.record("sent", mid="ok", size=float("nan"))  # NaN is allowed by json; an object is stringified
    rec.record("sent", mid="obj", address=object())
    rec.close()
    assert [r["mid"] for r in _lines(tmp_path)] == ["ok", "obj"]


def test_awkward_strings_stay_on_one_line_and_round_trip(tmp_path):
    rec = FlowRecorder(tmp_path, "n")
    odd = 'quote " back \\ newline \n tab \t é \u2028 lone \udc80'
    rec.record("sent", mid=odd, address=odd, flag=True, ratio=0.5, trace=("R.A", 7))
    rec.close()
    (name,) = os.listdir(tmp_path)
    text = (tmp_path / name).read_text(encoding="utf-8")
    assert text.count("\n") == 1
    rec_ = json.loads(text)
    assert rec_["mid"] == odd and rec_["address"] == odd
    assert rec_["flag"] is True and rec_["ratio"] == 0.5 and rec_["trace"] == ["R.A", "7"]


def test_buffer_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr("wire.flowrecords.MAX_BUFFERED_RECORDS", 10)
    rec = FlowRecorder(tmp_path, "n")
    for i in range(15):
        rec.record("sent", mid=str(i))
    assert rec.dropped == 5
    rec.close()
    assert len(_lines(tmp_path)) == 10


async def _settle(rec, expected, tries=2000):
    """Let the flush task and its worker thread finish (mock time does not move while we wait): until
    ``expected`` records are written AND the flush task is back asleep -- its next deadline is set. The
    worker thread counts a write before the task resumes; a clock jump before the task sleeps again would
    move its next flush past the jump (seen under load)."""
    for _ in range(tries):
        await trio.testing.wait_all_tasks_blocked()
        if rec.written >= expected and math.isfinite(trio.lowlevel.current_statistics().seconds_to_next_deadline):
            return
        await trio.to_thread.run_sync(time.sleep, 0.001)


async def test_run_flushes_every_interval_under_mock_clock(tmp_path, mock_clock):
    rec = FlowRecorder(tmp_path, "n", flush_interval=0.5, clock=_counter_clock())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rec.run)
        await trio.testing.wait_all_tasks_blocked()  # run() is asleep until 0.5 s
        rec.record("sent", mid="a")
        mock_clock.jump(0.25)
        await _settle(rec, 1, tries=50)
        assert rec.written == 0  # not yet: the first flush is at 0.5 s
        mock_clock.jump(0.3)
        await _settle(rec, 1)
        assert rec.written == 1
        assert [r["mid"] for r in _lines(tmp_path, ".part")] == ["a"]
        rec.record("sent", mid="b")
        rec.record("sent", mid="c")
        mock_clock.jump(0.5)
        await _settle(rec, 3)
        assert rec.written == 3
        rec.record("sent", mid="d")
        nursery.cancel_scope.cancel()
    assert rec.written == 4  # cancellation flushed what was buffered
    rec.close()
    assert [r["mid"] for r in _lines(tmp_path)] == ["a", "b", "c", "d"]
