"""Router flow records: ingress, egress and settle lines for sampled messages, nothing when off."""

from __future__ import annotations

import json

from proton import Message

from tests.unit.enginepair import ACCEPTED, REJECTED, RouterHarness, settle
from wire.flowrecords import FlowRecorder


def _records(directory):
    out = []
    for f in sorted(directory.glob("*.jsonl")):
        out += [json.loads(line) for line in f.read_text().splitlines()]
    return out


def test_ingress_egress_settle_with_outcomes(tmp_path):
    rec = FlowRecorder(tmp_path, "R1")
    h = RouterHarness(flow_recorder=rec)
    cons = h.connect()
    rcv = cons.receiver("orders", credit=10)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    prod.send(snd, Message(id="m-1", body="a"))
    prod.send(snd, Message(id="m-2", body="b"))
    h.pump()
    got = cons.received(rcv)
    settle(got[0], ACCEPTED)
    settle(got[1], REJECTED)
    h.pump()
    rec.close()
    rows = _records(tmp_path)
    by = {(r["event"], r["mid"]): r for r in rows}
    assert set(by) == {(e, m) for e in ("ingress", "egress", "settle") for m in ("m-1", "m-2")}
    assert by[("ingress", "m-1")]["address"] == "orders" and by[("ingress", "m-1")]["node"] == "R1"
    assert by[("egress", "m-2")]["size"] > 0
    assert by[("settle", "m-1")]["outcome"] == "accepted"
    assert by[("settle", "m-2")]["outcome"] == "rejected"
    assert all(isinstance(r["ts"], int) for r in rows)
    # Each line is a plain JSON object: one "node" key (Spark's reader drops lines with duplicates).
    for f in tmp_path.glob("*.jsonl"):
        assert all(line.count('"node"') == 1 for line in f.read_text().splitlines())


def test_sampling_is_by_message_id(tmp_path):
    rec = FlowRecorder(tmp_path, "R1", sample=0.3)
    h = RouterHarness(flow_recorder=rec)
    cons = h.connect()
    rcv = cons.receiver("s", credit=200)
    prod = h.connect()
    snd = prod.sender("s")
    h.pump()
    ids = [f"id-{i}" for i in range(100)]
    for i in ids:
        prod.send(snd, Message(id=i, body=i))
    h.pump()
    for g in cons.received(rcv):
        settle(g, ACCEPTED)
    h.pump()
    rec.close()
    recorded = {r["mid"] for r in _records(tmp_path) if r["event"] == "ingress"}
    expected = {i for i in ids if FlowRecorder(tmp_path / "x", "other", sample=0.3).wants(i)}
    assert recorded == expected and 5 < len(recorded) < 60


def test_off_by_default_writes_nothing(tmp_path):
    h = RouterHarness()
    assert h.router.flow is None
