"""tdflow's delivery audit on hand-written records: the definitions of lost, returned, duplicated
(anycast vs multicast), out-of-order, time windows and reading files that are still being written."""

from __future__ import annotations

import pytest

from tools.tdflow.cli import parse_time
from tools.tdflow.report import Options, audit, audit_failures

T0 = 1_700_000_000_000_000_000


def _msg(mid, address, t, *, consumers=("c1",), outcome="accepted", producer="p1", router="R"):
    """Records of one message sent by ``producer`` and received by each consumer, ``t`` in µs."""
    base = T0 + t * 1000
    recs = [{"ts": base, "node": producer, "event": "sent", "link": "L", "address": address, "mid": mid},
            {"ts": base + 10, "node": router, "event": "ingress", "conn": 1, "link": 2, "address": address,
             "mid": mid, "phase": 0}]
    for i, c in enumerate(consumers):
        recs.append({"ts": base + 20 + i, "node": router, "event": "egress", "conn": 3, "link": 4 + i,
                     "address": address, "mid": mid})
        recs.append({"ts": base + 30 + i, "node": c, "event": "received", "link": "in", "address": address,
                     "mid": mid, "outcome": outcome})
    if outcome:
        recs.append({"ts": base + 50, "node": producer, "event": "settled", "link": "L", "address": address,
                     "mid": mid, "outcome": outcome})
    return recs


def _audit(spark, paths, **kw):
    return {r["address"]: r for r in audit(spark, Options(paths=[str(p) for p in paths], **kw))}


def test_lost_returned_and_outcomes(spark, tmp_path, write_records):
    recs = _msg("a1", "q", 1) + _msg("a2", "q", 2, outcome="rejected")
    # a3: sent, never received, released back by the router: returned, not lost.
    recs += [r for r in _msg("a3", "q", 3, outcome="released") if r["event"] != "received"
             and r["event"] != "egress"]
    # a4: sent and accepted (a broker stored it) but never received: lost. a5: no outcome, no receipt: lost.
    recs += [r for r in _msg("a4", "q", 4) if r["event"] not in ("received", "egress")]
    recs += [r for r in _msg("a5", "q", 5, outcome=None) if r["event"] in ("sent", "ingress")]
    write_records(tmp_path, "x.jsonl", recs)
    row = _audit(spark, [tmp_path])["q"]
    assert (row["sent"], row["received"], row["lost"], row["returned"]) == (5, 2, 2, 1)
    assert (row["accepted"], row["rejected"], row["released"], row["no_outcome"]) == (2, 1, 1, 1)
    assert row["consumer_rejected"] == 1 and row["duplicated"] == 0
    assert audit_failures([row], 0.0) == ["q"]
    assert audit_failures([row], 0.4) == []  # 2 lost of 5 sent is within 40%


def test_duplicates_anycast_versus_multicast(spark, tmp_path, write_records):
    recs = _msg("m1", "multicast.t", 1, consumers=("c1", "c2"))  # two consumers, one copy each: fine
    recs += _msg("m2", "multicast.t", 2, consumers=("c1", "c1", "c2"))  # c1 twice: one duplicate
    recs += _msg("n1", "anycast", 3, consumers=("c1", "c2"))  # two consumers of an anycast: one duplicate
    recs += _msg("n2", "anycast", 4, consumers=("c1", "c1", "c1"))  # two duplicates
    write_records(tmp_path, "x.jsonl", recs)
    rows = _audit(spark, [tmp_path])
    assert rows["multicast.t"]["duplicated"] == 1 and rows["multicast.t"]["duplicated_messages"] == 1
    assert rows["anycast"]["duplicated"] == 3 and rows["anycast"]["duplicated_messages"] == 2
    # Without the multicast prefix the first address is anycast too: 1 + 2 duplicates.
    rows = _audit(spark, [tmp_path], multicast_prefixes=())
    assert rows["multicast.t"]["duplicated"] == 3


def test_out_of_order_per_producer_and_consumer(spark, tmp_path, write_records):
    recs = []
    # p1 sends o1..o4 at 1..4 ms; c1 receives them as o1, o3, o2, o4 (o2 late: one out of order).
    for mid, t in (("o1", 1000), ("o2", 2000), ("o3", 3000), ("o4", 4000)):
        recs += _msg(mid, "ord", t)
    for r in recs:
        if r["mid"] == "o2" and r["event"] == "received":
            r["ts"] = T0 + 3500 * 1000
    # Another producer's later message overtaking is not disorder (order is per producer).
    recs += _msg("x1", "ord", 500, producer="p2")
    for r in recs:
        if r["mid"] == "x1" and r["event"] == "received":
            r["ts"] = T0 + 4500 * 1000
    write_records(tmp_path, "x.jsonl", recs)
    row = _audit(spark, [tmp_path])["ord"]
    assert row["out_of_order"] == 1 and row["lost"] == 0 and row["received"] == 5


def test_window_selects_messages_by_send_time_and_keeps_their_later_records(spark, tmp_path, write_records):
    recs = _msg("w1", "win", 1000) + _msg("w2", "win", 2000) + _msg("w3", "win", 3000)
    for r in recs:  # w2's receipt comes long after the window
        if r["mid"] == "w2" and r["event"] == "received":
            r["ts"] += 10**12
    write_records(tmp_path, "x.jsonl", recs)
    rows = _audit(spark, [tmp_path], since_ns=T0 + 1_500_000, until_ns=T0 + 2_500_000)
    assert rows["win"]["sent"] == 1 and rows["win"]["received"] == 1 and rows["win"]["lost"] == 0


def test_open_files_are_read_only_on_request_and_half_lines_are_skipped(spark, tmp_path, write_records):
    write_records(tmp_path, "n-1-1.jsonl", _msg("f1", "open", 1))
    part = write_records(tmp_path, "n-1-2.jsonl.part", _msg("f2", "open", 2))
    with open(part, "a") as fh:
        fh.write('{"ts": 17000000, "node": "n", "ev')  # a writer caught mid-line
    # Files in subdirectories and junk files next to the records are handled too.
    write_records(tmp_path / "sub", "m-1-1.jsonl", _msg("f3", "open", 3))
    (tmp_path / "notes.txt").write_text("not records")
    assert _audit(spark, [tmp_path])["open"]["sent"] == 2
    assert _audit(spark, [tmp_path], include_open=True)["open"]["sent"] == 3


def test_malformed_lines_are_dropped_not_fatal(spark, tmp_path, write_records):
    path = write_records(tmp_path, "x.jsonl", _msg("g1", "bad", 1))
    with open(path, "a") as fh:
        fh.write("not json\n{\"ts\": \"yesterday\", \"node\": \"n\", \"event\": \"sent\"}\n[1,2]\n")
        fh.write('{"node": "n", "event": "sent", "mid": "no-ts"}\n')
    row = _audit(spark, [tmp_path])["bad"]
    assert row["sent"] == 1 and row["received"] == 1


@pytest.mark.parametrize("text, expected", [
    ("1700000000", 1_700_000_000 * 10**9),
    ("1700000000.5", 1_700_000_000_500_000_000),
    (str(T0), T0),
    ("2023-11-14T22:13:20Z", 1_700_000_000 * 10**9),
    ("2023-11-14T22:13:20", 1_700_000_000 * 10**9),
])
def test_time_arguments(text, expected):
    assert parse_time(text) == expected


def test_bad_time_argument_is_a_clear_error():
    import click

    with pytest.raises(click.BadParameter):
        parse_time("last tuesday")


def test_cli_usage_errors_exit_2_before_starting_spark(tmp_path):
    from click.testing import CliRunner

    from tools.tdflow.cli import main

    result = CliRunner().invoke(main, ["audit", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "no such file or directory" in result.output
    result = CliRunner().invoke(main, ["report", str(tmp_path), "--out", str(tmp_path / "o"),
                                       "--since", "2024-01-02", "--until", "2024-01-01"])
    assert result.exit_code == 2 and "--since must be before --until" in result.output


def test_cli_generate_writes_records_and_ground_truth(tmp_path):
    import json as _json

    from click.testing import CliRunner

    from tools.tdflow.cli import main

    out = tmp_path / "recs"
    result = CliRunner().invoke(main, ["generate", "--out", str(out), "--records", "3000", "--loss-rate", "0.05",
                                       "--seed", "4"])
    assert result.exit_code == 0, result.output
    truth = _json.loads((tmp_path / "recs.truth.json").read_text())
    lines = sum(1 for f in out.iterdir() for _ in open(f))
    assert truth["records"] == lines and 2000 < lines < 4500
    assert truth["lost"] == sum(a["lost"] for a in truth["addresses"].values()) > 0
