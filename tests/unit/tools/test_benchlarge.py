"""tdbench --large: its plan, and one huge message through a real tdrouterd with the router's RSS sampled."""

from __future__ import annotations

import pytest

from tools.bench import run_bench
from tools.benchlarge import LARGE_WINDOW, format_large, messages_for, plan


def test_plan_has_the_windowed_rows_and_the_huge_message_through_one_router_and_a_line():
    rows = plan(sizes=(5_000, 1_000_000), huge=200_000_000)
    assert [r["label"] for r in rows] == ["5 kB, window 100", "1 MB, window 100", "one 200 MB message, one router",
                                         "one 200 MB message, 3-router line"]
    assert rows[0]["window"] == rows[1]["window"] == LARGE_WINDOW
    assert rows[2]["messages"] == rows[3]["messages"] == 1 and rows[3]["hops"] == 2
    assert messages_for(5_000) == 20_000 and messages_for(1_000_000) == 400


@pytest.mark.system
def test_a_message_larger_than_a_frame_and_the_client_prefix_is_delivered_and_the_router_rss_sampled():
    """3 MB: many 64 KiB frames, more than the client keeps of a split message (KEEP_PREFIX)."""
    rep = run_bench(messages=3, size=3_000_000, window=1, direct=False, duration_limit=60)
    assert rep["ok"], rep["problems"]
    r = rep["router"]
    assert r["received"] == r["accepted"] == 3 and r["aborted"] == 0
    [m] = r["router_rss_mb"]
    assert m["start"] > 0 and m["peak"] >= m["start"] and m["hwm"] >= m["peak"] - 1


def test_format_large_gives_median_range_and_delivery():
    run = {"router_cpu_us_per_msg": 2870.0, "msgs_per_s": 300.0, "rss_growth_mb": [300.0], "delivered": True,
           "outcomes": {}, "aborted": 0}
    bad = dict(run, delivered=False, outcomes={"released": 1}, router_cpu_us_per_msg=None)
    rep = {"rounds": 2, "rows": [{"label": "1 MB, window 100", "size": 1_000_000, "runs": [run, run]},
                                 {"label": "one 200 MB message, 3-router line", "size": 200_000_000,
                                  "runs": [run, bad]}]}
    text = format_large(rep)
    assert "2.87 ms" in text and "2/2" in text and "1/2 (not delivered: released)" in text
