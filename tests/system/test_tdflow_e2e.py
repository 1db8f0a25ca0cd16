"""End to end: the demos write flow records, ``tdflow audit`` (a real Spark job) judges them.

A brokered run whose consumer rejects every 6th message and a brokerless run whose consumer rejects every
3rd: nothing is lost or duplicated (exit 0), and the outcomes are reported on the right side (a broker
accepts what it stores, so the brokered producer sees only ``accepted``; brokerless settlement is end to
end, so that producer sees the rejections). Then the same audit over records with one message deleted
exits 1.

The demos and the tdflow runs are made once for this module and test_flow_report_browser.py
(tests/system/flowfixtures.py); this module judges the audits.
"""

from __future__ import annotations

import pytest

from tests.system.flowfixtures import (BROKERED_COUNT, BROKERED_REJECT_EVERY, BROKERLESS_COUNT,
                                       BROKERLESS_REJECT_EVERY, audit_rows, flow_run)  # noqa: F401,F811

pytest.importorskip("pyspark", reason="tdflow needs pyspark (test extra)")

pytestmark = [pytest.mark.system, pytest.mark.timeout(420)]


def test_demo_records_pass_the_audit_and_rejections_are_reported(flow_run):
    demo = flow_run["demos"]["brokered"]
    assert demo["returncode"] == 0, demo["stdout"] + demo["stderr"]
    assert f"drained all {BROKERED_COUNT} messages, in order" in demo["stdout"]
    demo = flow_run["demos"]["brokerless"]
    assert demo["returncode"] == 0, demo["stdout"] + demo["stderr"]
    # Every record file was finished (renamed from .part).
    names = flow_run["names"]
    assert names and all(n.endswith(".jsonl") for n in names)

    out = flow_run["runs"]["audit"]
    rows = audit_rows(out["stdout"])
    assert out["returncode"] == 0, out["stdout"] + out["stderr"]
    assert "tdflow audit: passed" in out["stdout"]
    queue = rows["queue"]
    n, rejected = BROKERED_COUNT, BROKERED_COUNT // BROKERED_REJECT_EVERY
    assert (queue["sent"], queue["received"], queue["lost"], queue["duplicated"]) == (n, n, 0, 0)
    assert (queue["accepted"], queue["rejected"], queue["consumer_rejected"]) == (n, 0, rejected)
    assert queue["out_of_order"] == 0
    direct = rows["demo/brokerless"]
    n, rejected = BROKERLESS_COUNT, BROKERLESS_COUNT // BROKERLESS_REJECT_EVERY
    assert (direct["sent"], direct["received"], direct["lost"], direct["duplicated"]) == (n, n, 0, 0)
    assert (direct["accepted"], direct["rejected"], direct["consumer_rejected"]) == (n - rejected, rejected,
                                                                                    rejected)

    # One receipt deleted (from a copy of the brokered records): the audit must fail, naming the address.
    out = flow_run["runs"]["audit_faulty"]
    rows = audit_rows(out["stdout"])
    assert out["returncode"] == 1, out["stdout"] + out["stderr"]
    assert rows["queue"]["lost"] == 1 and "queue" in out["stderr"]
