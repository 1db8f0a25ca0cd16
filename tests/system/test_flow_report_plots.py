"""The report page's plot data, from small canned results (no Spark): the latency CDF, the path graph's
node order and the throughput series (tools/tdflow/html.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib", reason="the report's plots need matplotlib (the flow extra)")

from tools.tdflow import html  # noqa: E402


def test_latency_cdf_climbs_to_one_in_bin_order():
    hist = [{"address": "q", "bin": 61, "lo_ms": 1122.0, "hi_ms": 1189.0, "count": 3},
            {"address": "q", "bin": 60, "lo_ms": 1000.0, "hi_ms": 1122.0, "count": 1},
            {"address": "a", "bin": -6, "lo_ms": 0.5, "hi_ms": 0.56, "count": 2}]
    cdfs = html.latency_cdfs(hist)
    assert cdfs["q"] == ([1000.0, 1122.0, 1189.0], [0.0, 0.25, 1.0])
    assert cdfs["a"] == ([0.5, 0.56], [0.0, 1.0])


def test_latency_plot_spans_both_a_fast_and_a_slow_address():
    hist = [{"address": "q", "bin": 60, "lo_ms": 1000.0, "hi_ms": 1122.0, "count": 4},
            {"address": "a", "bin": -6, "lo_ms": 0.5, "hi_ms": 0.56, "count": 2}]
    stats = [{"address": "q", "count": 4, "p50_ms": 1050.0, "p99_ms": 1100.0},
             {"address": "a", "count": 2, "p50_ms": 0.52, "p99_ms": 0.55}]
    img = html.plot_latency(hist, stats)
    assert 'alt="latency distribution"' in img and "data:image/png;base64," in img
    assert html.plot_latency([], stats) == ""


def test_graph_nodes_keep_a_line_of_routers_in_order():
    # A-B-C-D with a broker on B (tdflow generate's mesh): walking from an end keeps neighbours adjacent.
    edges = [{"src": s, "dst": d, "messages": n} for s, d, n in
             [("R.C", "R.B", 129), ("Broker.1", "R.B", 118), ("R.B", "Broker.1", 118), ("R.B", "R.C", 110),
              ("R.D", "R.C", 89), ("R.B", "R.A", 82), ("R.C", "R.D", 77), ("R.A", "R.B", 72)]]
    order = html.graph_nodes(edges, {"Broker.1"})
    assert sorted(order) == ["Broker.1", "R.A", "R.B", "R.C", "R.D"]
    pos = {n: i for i, n in enumerate(order)}
    for a, b in (("R.A", "R.B"), ("R.B", "R.C"), ("R.C", "R.D")):
        assert abs(pos[a] - pos[b]) == 1, order
    assert 'alt="path graph"' in html.plot_path_graph(edges, [{"node": "R.A", "messages": 10}], {"Broker.1"})


def test_throughput_series_fill_empty_buckets_with_zero():
    first_ns = 1_000_000_000_000
    rows = [{"node": "R", "link": "1", "direction": "in", "time_us": first_ns // 1000, "messages": 5},
            {"node": "R", "link": "1", "direction": "in", "time_us": first_ns // 1000 + 30_000, "messages": 2}]
    series = html.throughput_series(rows, first_ns, 0.01)
    xs, rate, total = series["R link 1 in"]
    assert xs == pytest.approx([0.0, 0.01, 0.02, 0.03, 0.04])
    assert rate == pytest.approx([500.0, 0.0, 0.0, 200.0, 0.0])
    assert total == [5, 5, 5, 7, 7]
