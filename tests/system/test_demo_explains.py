"""What the brokered and linkroute demos show a user (issue 18): the configurations they ran (printed, or
kept with --keep DIR and runnable again), where rejected messages went, whose credit the producer got,
the waypoint's two phases, and a broker stopped only once it has every outcome (its flow records hold a
``settle`` for every message)."""

from __future__ import annotations

import collections
import json
import pathlib
import re
import subprocess
import sys

import pytest

from tests.system.harness import REPO_ROOT
from tools.daemons import DaemonProcess

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]


def _demo(*args):
    out = subprocess.run([sys.executable, "-m", "tools.demo", *args], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _block(stdout: str, name: str) -> str:
    """The configuration printed between ``--- NAME (...) ---`` and ``--- end of NAME ---``."""
    m = re.search(rf"^--- {re.escape(name)} \(.*\) ---\n(.*?)\n--- end of {re.escape(name)} ---$", stdout,
                  re.S | re.M)
    assert m, f"{name} not printed:\n{stdout}"
    return m.group(1)


def _events(directory: pathlib.Path) -> dict:
    """(node prefix, event, outcome) -> count over every record file."""
    counts = collections.Counter()
    for f in directory.glob("*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            counts[(r["node"], r["event"], r.get("outcome"))] += 1
    return counts


def test_brokered_prints_its_configs_and_the_broker_records_every_settlement(tmp_path):
    records = tmp_path / "records"
    out = _demo("brokered", "--count", "100", "--records", str(records))
    router_conf, broker_xml = _block(out, "router.conf"), _block(out, "broker.xml")
    assert "waypoint: yes" in router_conf and "flowRecords {" in router_conf
    assert "<peer address-match=\"queue\"/>" in broker_xml and "<dead-letter-address>DLQ" in broker_xml
    assert "no consumer exists anywhere" in out
    counts = _events(records)
    # The broker heard every consumer outcome before it was stopped (91 of 100 before the fix: the consumer
    # stopped its container with dispositions unwritten, and the broker was stopped at once after).
    assert counts[("demo-broker", "settle", "accepted")] == 100, counts
    assert counts[("demo-broker", "deliver", None)] == 100
    assert not any(outcome == "modified" for (_node, _event, outcome) in counts), counts
    assert "broker    has every outcome: 100 acknowledged, 0 dead-lettered" in out


def test_brokered_says_where_rejected_messages_went_and_explains_the_phases(tmp_path):
    out = _demo("brokered", "--count", "50", "--reject-every", "5")
    assert "consumer  rejected 10 of them" in out
    assert "has every outcome: 40 acknowledged, 10 dead-lettered" in out
    assert "moved the 10 rejected messages to its dead-letter queue 'DLQ'" in out and "which holds 10" in out
    assert "had already seen 'accepted' for all 50, the 10 rejected ones included" in out
    assert "producers send into phase 0, consumers receive phase 1" in out
    assert ("phase 0 (M0queue): 50 in from the producer, 50 out to the broker; phase 1 (M1queue): 50 in from "
            "the broker, 50 out to the consumer") in out
    assert "credit 250 at once, from the router" in out


def test_linkroute_says_the_credit_is_the_brokers(tmp_path):
    out = _demo("linkroute", "--count", "20", "--reject-every", "4")
    credit = re.search(r"producer  credit (\d+) at once, from the broker", out)
    assert credit, out
    # The broker's window (broker/delivery.py LINK_CAPACITY), not the router's linkCapacity of 250.
    assert int(credit.group(1)) == 1000
    assert "moved the 5 rejected messages to its dead-letter queue 'DLQ'" in out
    assert "connector {" in _block(out, "router.conf") and "linkRoute {" in _block(out, "router.conf")


def test_keep_writes_configs_that_run_again(tmp_path):
    keep = tmp_path / "kept"
    out = _demo("brokered", "--count", "10", "--reject-every", "2", "--keep", str(keep))
    assert "--- router.conf" not in out  # named, not printed
    assert f"tdrouterd -c {keep / 'router.conf'}" in out and f"tdbroker -c {keep / 'broker.xml'}" in out
    assert {"router.conf", "broker.xml", "journal"} <= {p.name for p in keep.iterdir()}
    # The kept configurations start the same daemons again; the broker recovers the dead-lettered messages.
    with DaemonProcess("tdrouterd", keep / "router.conf", cwd=REPO_ROOT) as router, \
            DaemonProcess("tdbroker", keep / "broker.xml", cwd=REPO_ROOT) as broker:
        assert router.port and broker.port
        from tools.demoshow import BrokerView
        with BrokerView(broker.port) as view:
            assert view.queues()["DLQ"]["messageCount"] == 5
    # A second run into the same directory is refused (its journal would be recovered).
    again = subprocess.run([sys.executable, "-m", "tools.demo", "brokered", "--keep", str(keep)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 2 and "not empty" in again.stderr, again.stderr
