"""End to end: the demos write flow records, ``tdflow audit`` (a real Spark job) judges them.

A brokered run whose consumer rejects every 5th message and a brokerless run whose consumer rejects every
3rd: nothing is lost or duplicated (exit 0), and the outcomes are reported on the right side (a broker
accepts what it stores, so the brokered producer sees only ``accepted``; brokerless settlement is end to
end, so that producer sees the rejections). Then the same audit over records with one message deleted
exits 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.system.harness import REPO_ROOT

pytest.importorskip("pyspark", reason="tdflow needs pyspark (test extra)")

pytestmark = [pytest.mark.system, pytest.mark.timeout(420)]


def _run(*args, timeout=240):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYSPARK_PYTHON=sys.executable)
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


def _audit(*dirs):
    out = _run("tools.tdflow.cli", "audit", *map(str, dirs), "--json")
    start = out.stdout.find("[")
    rows = json.loads(out.stdout[start: out.stdout.rindex("]") + 1]) if start >= 0 else []
    return out, {r["address"]: r for r in rows}


def test_demo_records_pass_the_audit_and_rejections_are_reported(tmp_path):
    brokered, brokerless = tmp_path / "brokered", tmp_path / "brokerless"
    demo = _run("tools.demo", "brokered", "--count", "40", "--records", str(brokered), "--reject-every", "5")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "drained all 40 messages, in order" in demo.stdout
    demo = _run("tools.demo", "brokerless", "--count", "9", "--records", str(brokerless), "--reject-every", "3")
    assert demo.returncode == 0, demo.stdout + demo.stderr
    # Every record file was finished (renamed from .part).
    names = os.listdir(brokered) + os.listdir(brokerless)
    assert names and all(n.endswith(".jsonl") for n in names)

    out, rows = _audit(brokered, brokerless)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "tdflow audit: passed" in out.stdout
    queue = rows["queue"]
    assert (queue["sent"], queue["received"], queue["lost"], queue["duplicated"]) == (40, 40, 0, 0)
    assert (queue["accepted"], queue["rejected"], queue["consumer_rejected"]) == (40, 0, 8)
    assert queue["out_of_order"] == 0
    direct = rows["demo/brokerless"]
    assert (direct["sent"], direct["received"], direct["lost"], direct["duplicated"]) == (9, 9, 0, 0)
    assert (direct["accepted"], direct["rejected"], direct["consumer_rejected"]) == (6, 3, 3)

    # Delete one receipt: the audit must now fail, naming the address.
    consumer_file = next(brokered / n for n in os.listdir(brokered) if n.startswith("demo.consumer"))
    lines = consumer_file.read_text().splitlines(keepends=True)
    consumer_file.write_text("".join(lines[:10] + lines[11:]))
    out, rows = _audit(brokered)
    assert out.returncode == 1, out.stdout + out.stderr
    assert rows["queue"]["lost"] == 1 and "queue" in out.stderr
