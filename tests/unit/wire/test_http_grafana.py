"""conf/grafana/trio-dispatch.json: valid JSON whose queries name only metrics the daemons serve (so a renamed
metric cannot leave an empty panel behind), and which charts the families issue 18 asks operators to see."""

from __future__ import annotations

import json
import re

from tests.paths import REPO

DASHBOARD = REPO / "conf" / "grafana" / "trio-dispatch.json"
SOURCES = {"tdrouter": REPO / "router" / "httpserve.py", "tdbroker": REPO / "broker" / "httpserve.py"}
METRIC = re.compile(r"\b(tdrouter|tdbroker)_([a-z0-9_]+)")


def served_names() -> set[str]:
    """prefix_name for every quoted identifier in the modules that build the metrics (their family names)."""
    names = set()
    for prefix, path in SOURCES.items():
        for word in re.findall(r'"([a-z][a-z0-9_]*)"', path.read_text()):
            names.add(f"{prefix}_{word}")
    names.add("tdrouter_metrics_series_omitted")
    names.add("tdbroker_metrics_series_omitted")
    return names


def expressions(dashboard: dict) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def test_every_queried_metric_is_served():
    dashboard = json.loads(DASHBOARD.read_text())
    served = served_names()
    used = {m.group(0) for e in expressions(dashboard) for m in METRIC.finditer(e)}
    assert used and used <= served, sorted(used - served)


def test_the_dashboard_covers_what_operators_asked_for():
    used = " ".join(expressions(json.loads(DASHBOARD.read_text())))
    for name in ("tdrouter_connections", "tdrouter_deliveries_total", "tdrouter_deliveries_stuck",
                 'link_type="inter-router"', "tdrouter_memory_resident_bytes", "tdbroker_queue_messages",
                 "tdbroker_queue_messages_expired_total", "tdbroker_queue_messages_dead_lettered_total",
                 "tdbroker_journal_syncs_total", "tdbroker_journal_bytes_on_disk", "tdbroker_bridge_forwarded_total",
                 "tdbroker_mirror_queued_events"):
        assert name in used, name
