"""tdflow report on generated records: every result table, checked against the generator's ground truth
and against the same quantities computed in plain Python from the record files."""

from __future__ import annotations

import collections
import glob
import json
import os

import pytest

from tools.tdflow import html
from tools.tdflow.generate import generate
from tools.tdflow.report import Options, run_report, summary_text

ADDRESS_KEYS = ("sent", "received", "lost", "duplicated", "returned", "accepted", "rejected", "released",
                "no_outcome", "consumer_rejected")


@pytest.fixture(scope="module")
def generated(tmp_path_factory, spark):
    base = tmp_path_factory.mktemp("gen")
    records = str(base / "records")
    truth = generate(records, 12_000, loss_rate=0.02, dup_rate=0.02, release_rate=0.02, reject_rate=0.02,
                     seed=7)
    out = str(base / "report")
    small = run_report(spark, Options(paths=[records]), out)
    raw = [json.loads(line) for f in sorted(glob.glob(os.path.join(records, "*.jsonl"))) for line in open(f)]
    return {"truth": truth, "small": small, "out": out, "raw": raw, "records": records}


def test_generator_wrote_whole_lines_per_node_in_time_order(generated):
    files = glob.glob(os.path.join(generated["records"], "*.jsonl"))
    assert len(files) == 21  # 4 routers, a broker, 8 producers, 8 consumers
    for f in files:
        ts = [json.loads(line)["ts"] for line in open(f)]
        assert ts == sorted(ts)
    assert len(generated["raw"]) == generated["truth"]["records"]


def test_audit_finds_exactly_the_injected_faults(generated):
    truth = generated["truth"]["addresses"]
    audit = {r["address"]: r for r in generated["small"]["audit"]}
    assert set(audit) == set(truth)
    for address, expected in truth.items():
        got = {k: audit[address][k] for k in ADDRESS_KEYS}
        assert got == {k: expected[k] for k in ADDRESS_KEYS}, address
    assert sum(r["lost"] for r in audit.values()) == generated["truth"]["lost"] > 0
    assert sum(r["duplicated"] for r in audit.values()) == generated["truth"]["duplicated"] > 0


def test_outcomes_table_splits_producer_and_consumer_sides(generated):
    rows = generated["small"]["outcomes"]
    truth = generated["truth"]["addresses"]
    by = {(r["address"], r["side"], r["outcome"]): r["count"] for r in rows}
    for address, t in truth.items():
        assert by.get((address, "producer", "accepted"), 0) == t["accepted"]
        assert by.get((address, "producer", "none"), 0) == t["no_outcome"]
        assert by.get((address, "consumer", "rejected"), 0) == t["consumer_rejected"]


def _per_mid(raw):
    per = collections.defaultdict(list)
    for r in raw:
        per[r["mid"]].append(r)
    for recs in per.values():
        recs.sort(key=lambda r: r["ts"])
    return per


def _nearest_rank(values, q):
    values = sorted(values)
    return values[max(0, int(-(-q * len(values) // 1)) - 1)]


def test_end_to_end_latency_per_address_matches_the_records(generated):
    e2e = collections.defaultdict(list)
    for recs in _per_mid(generated["raw"]).values():
        sent = [r["ts"] for r in recs if r["event"] == "sent"]
        firsts = {}
        for r in recs:
            if r["event"] == "received":
                firsts.setdefault((r["node"], r["link"]), r["ts"])
        for ts in firsts.values():
            e2e[recs[0]["address"]].append(ts - sent[0])
    rows = {r["address"]: r for r in generated["small"]["latency_by_address"]}
    for address, values in e2e.items():
        row = rows[address]
        assert row["count"] == len(values)
        assert row["max_ms"] == pytest.approx(max(values) / 1e6)
        assert row["p50_ms"] == pytest.approx(_nearest_rank(values, 0.5) / 1e6, rel=0.05)
        assert row["p99_ms"] == pytest.approx(_nearest_rank(values, 0.99) / 1e6, rel=0.05)
    # The broker queue dominates: waypoint addresses are slower than anycast ones.
    assert rows["queue.jobs"]["p50_ms"] > 3 * rows["orders.east"]["p50_ms"]


def test_latency_per_path_and_paths_agree_with_the_ingress_sequence(generated):
    paths = collections.Counter()
    for recs in _per_mid(generated["raw"]).values():
        nodes = [r["node"] for r in recs if r["event"] in ("ingress", "store")]
        if nodes:
            paths[" > ".join(nodes)] += 1
    got = {r["path"]: r for r in generated["small"]["paths"]}
    assert {p: r["count"] for p, r in got.items()} == dict(paths)
    assert sum(r["share"] for r in got.values()) == pytest.approx(1.0)
    assert "R.A > R.B > Broker.1 > R.B > R.C > R.D" in got
    assert got["R.A > R.B > R.C > R.D"]["router_hops"] == 4
    by_path = {r["path"]: r for r in generated["small"]["latency_by_path"]}
    assert by_path["R.A > R.B > R.C > R.D"]["p50_ms"] > by_path["R.A"]["p50_ms"]


def test_hop_counts_and_transit_counts_come_from_the_records(generated):
    hops = collections.Counter()
    for recs in _per_mid(generated["raw"]).values():
        n = sum(r["event"] == "ingress" for r in recs)
        if n:
            hops[n] += 1
    assert {r["router_hops"]: r["count"] for r in generated["small"]["hop_counts"]} == dict(hops)
    nodes = {r["node"]: r for r in generated["small"]["node_counts"]}
    for name in ("R.A", "R.B", "R.C", "R.D"):
        mine = [r for r in generated["raw"] if r["node"] == name]
        assert nodes[name]["role"] == "router"
        assert nodes[name]["ingress"] == sum(r["event"] == "ingress" for r in mine)
        assert nodes[name]["transit"] == sum(r["event"] == "egress" and len(r.get("trace", [])) >= 2
                                             for r in mine)
    # On the line A-B-C-D only the middle routers carry transit traffic.
    assert nodes["R.A"]["transit"] == nodes["R.D"]["transit"] == 0 < nodes["R.B"]["transit"]
    assert nodes["Broker.1"]["role"] == "broker" and nodes["client.p0"]["role"] == "client"


def test_broker_residence_only_for_waypoint_addresses(generated):
    rows = generated["small"]["broker_residence"]
    assert {r["address"] for r in rows} == {"queue.jobs", "queue.audit"}
    assert all(r["broker"] == "Broker.1" for r in rows)
    delivered = collections.Counter(r["address"] for r in generated["raw"] if r["event"] == "deliver")
    assert {r["address"]: r["count"] for r in rows} == dict(delivered)
    # The generator's mean residence is 5 ms plus a quarter.
    assert all(2 < r["p50_ms"] < 8 for r in rows)


def test_per_hop_latency_labels_the_steps(generated):
    hops = {r["hop"]: r for r in generated["small"]["hop_latency"]}
    assert hops["store@Broker.1 -> deliver@Broker.1"]["p50_ms"] > 1.0
    assert hops["egress@R.A -> ingress@R.B"]["count"] > 0
    assert "sent -> ingress@R.A" in hops and "ingress@R.A -> egress@R.A" in hops


def test_link_throughput_counts_every_forward_record(generated, spark):
    lt = spark.read.parquet(os.path.join(generated["out"], "link_throughput"))
    total = lt.groupBy().sum("messages").collect()[0][0]
    forward = sum(r["event"] in ("sent", "ingress", "egress", "store", "deliver", "received")
                  for r in generated["raw"])
    assert total == forward
    assert generated["small"]["link_throughput_top"]
    assert set(lt.columns) >= {"node", "conn", "link", "direction", "time", "messages", "bytes", "msg_per_s"}


def test_every_result_is_a_parquet_table_and_the_html_is_self_contained(generated, spark):
    for name in ("audit", "outcomes", "latency_by_address", "latency_by_path", "broker_residence",
                 "hop_latency", "paths", "hop_counts", "node_counts", "link_throughput"):
        assert spark.read.parquet(os.path.join(generated["out"], name)).count() > 0, name
    text = summary_text(generated["small"], generated["out"])
    assert f"lost {generated['truth']['lost']}" in text
    page = html.render(generated["small"], text)
    assert page.count("data:image/png;base64,") == 4  # latency distribution, path graph, path share, throughput
    assert "http://" not in page and "<script" not in page
    assert "queue.jobs" in page and "Delivery audit per address" in page
