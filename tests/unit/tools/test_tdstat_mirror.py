"""``tdstat --broker``'s mirror and acceptor tables (tools/tdstatbroker.py): from canned management rows, and
end to end through a real broker's management agent (broker/management.py) with the mirror part and
acceptor controls canned (tests/unit/broker/test_mirror_mgmt.py tests those entity types themselves); and
the report of ``tdbench --mirror`` (tools/benchmirror.py), the other tool that shows a mirror's figures."""

from __future__ import annotations

import argparse
import io
import json

from tests.paths import REPO
from tools.tdstat import render_broker, render_lines
from tools.tdstatbroker import fetch_broker, fmt_age

MIRRORS = [
    {"name": "dr", "remote": "tcp://127.0.0.1:61733", "state": "connected", "snfQueue": "$ACTIVEMQ_ARTEMIS_MIRROR_dr",
     "target": "$ACTIVEMQ_ARTEMIS_MIRROR_dr", "durable": True, "queuedEvents": 12, "oldestEventAgeMs": 340,
     "eventsSent": 9000, "messageEvents": 6000, "ackEvents": 3000, "queueEvents": 12,
     "remoteBrokerId": "mirror-replica-0b7e", "lastError": ""},
    {"name": "backup", "remote": "tcp://127.0.0.1:61740", "state": "connecting",
     "snfQueue": "$ACTIVEMQ_ARTEMIS_MIRROR_backup", "target": "backup.events", "durable": False, "queuedEvents": 0,
     "oldestEventAgeMs": 0, "eventsSent": 0, "messageEvents": 0, "ackEvents": 0, "queueEvents": 0,
     "remoteBrokerId": "", "lastError": "connection refused"},
]
TARGETS = [
    {"name": "mirror-source", "sourceId": "mirror-source-5c0e", "sourceName": "mirror-source",
     "address": "$ACTIVEMQ_ARTEMIS_MIRROR_dr", "connected": True, "messagesApplied": 6000, "acksApplied": 2990,
     "queueEventsApplied": 4, "duplicatesSkipped": 3, "acksUnmatched": 0, "lastEventAgeMs": 15},
]
ACCEPTORS = [
    {"name": "mirror", "host": "127.0.0.1", "port": 61733, "bound": ["127.0.0.1:61733"], "started": True,
     "autoStart": True, "tls": False, "connections": 1, "lastError": None},
    {"name": "amqp", "host": "127.0.0.1", "port": 61732, "bound": [], "started": False, "autoStart": False,
     "tls": False, "connections": 0, "lastError": "cannot listen on 127.0.0.1:61732: Address already in use"},
]


def tail(verbose=False, **tables) -> list[str]:
    """The lines after Queues and Broker Connections (both empty here)."""
    out = render_lines(render_broker([], [], verbose, **tables))
    return out[out.index("Broker Connections") + 3:]


def test_mirrors_show_state_and_lag_sorted_by_name():
    assert tail(mirrors=MIRRORS) == [
        "",
        "Mirrors",
        "  name    state       remote                 queued events  oldest age  sent",
        "  " + "=" * 76,
        "  backup  connecting  tcp://127.0.0.1:61740  0              -           0",
        "  dr      connected   tcp://127.0.0.1:61733  12             340ms       9000",
    ]


def test_verbose_mirrors_add_counts_queue_target_and_error():
    lines = tail(True, mirrors=MIRRORS)
    assert lines[2].split()[8:] == ["message", "events", "ack", "events", "queue", "events", "snf", "queue",
                                    "target", "durable", "remote", "broker", "id", "last", "error"]
    assert lines[4].split()[6:] == ["0", "0", "0", "$ACTIVEMQ_ARTEMIS_MIRROR_backup", "backup.events", "no", "-",
                                    "connection", "refused"]
    assert lines[5].split()[6:] == ["6000", "3000", "12", "$ACTIVEMQ_ARTEMIS_MIRROR_dr",
                                    "$ACTIVEMQ_ARTEMIS_MIRROR_dr", "yes", "mirror-replica-0b7e", "-"]


def test_mirror_targets_and_their_verbose_columns():
    assert tail(mirror_targets=TARGETS) == [
        "",
        "Mirror Targets",
        "  source         connected  messages applied  acks applied  duplicates skipped",
        "  " + "=" * 78,
        "  mirror-source  yes        6000              2990          3",
    ]
    verbose = tail(True, mirror_targets=TARGETS)
    assert verbose[4].split()[5:] == ["4", "0", "15ms", "mirror-source-5c0e", "$ACTIVEMQ_ARTEMIS_MIRROR_dr"]
    # a source whose name is not known yet shows its id
    assert tail(mirror_targets=[dict(TARGETS[0], sourceName="")])[4].split()[0] == "mirror-source-5c0e"


def test_no_mirror_rows_no_mirror_tables():
    assert tail(mirrors=[], mirror_targets=[]) == []
    assert tail(True) == []


def test_acceptors_only_when_one_is_not_started_or_with_verbose():
    started = [a for a in ACCEPTORS if a["started"]]
    assert tail(acceptors=started) == []
    assert tail(acceptors=ACCEPTORS) == [
        "",
        "Acceptors",
        "  name    host:port        started  auto-start  connections",
        "  " + "=" * 59,
        "  amqp    127.0.0.1:61732  no       no          0",
        "  mirror  127.0.0.1:61733  yes      yes         1",
    ]
    verbose = tail(True, acceptors=ACCEPTORS)
    assert verbose[2].split() == ["name", "host:port", "started", "auto-start", "connections", "tls", "last",
                                  "error"]
    assert verbose[4].split()[5:] == ["no", "cannot", "listen", "on", "127.0.0.1:61732:", "Address", "already",
                                      "in", "use"]
    assert verbose[5].split() == ["mirror", "127.0.0.1:61733", "yes", "yes", "1", "no", "-"]
    assert [line.split()[0] for line in tail(True, acceptors=started)[4:]] == ["mirror"]  # -v: even all started


def test_ages_read_in_ms_then_in_tdstat_time():
    assert [fmt_age(v) for v in (None, 0, 9999, 10_000, 3_725_000)] == ["-", "0ms", "9999ms", "000:00:00:10",
                                                                        "000:01:02:05"]


def test_csv_keeps_the_columns():
    out = render_lines(render_broker([], [], mirrors=MIRRORS[1:], acceptors=ACCEPTORS), csv=True)
    assert '"name","state","remote","queued events","oldest age","sent"' in out
    assert '"backup","connecting","tcp://127.0.0.1:61740","0","-","0"' in out
    assert '"amqp","127.0.0.1:61732","no","no","0"' in out


def _doc_example(after: str) -> list[str]:
    doc = (REPO / "docs" / "management.md").read_text()
    return doc.split(after + "\n\n```text\n", 1)[1].split("```", 1)[0].splitlines()


def test_the_examples_in_docs_management_md_are_what_tdstat_prints():
    source = [dict(MIRRORS[1], name="dr", remote="tcp://127.0.0.1:61733", state="connected", queuedEvents=12,
                   oldestEventAgeMs=340, eventsSent=9000)]
    assert tail(mirrors=source)[1:] == _doc_example("Here the source of `conf/mirror/` while a producer sends:")
    replica = [dict(TARGETS[0], sourceName="", sourceId="mirror-source-5c0e2b7d91aa")]  # as a broker id names it
    assert tail(mirror_targets=replica, acceptors=ACCEPTORS)[1:] == _doc_example(
        "The replica of `conf/mirror/` before a failover:")


# -- end to end: tdstat's queries answered by a real broker's agent -------------------------------------------
class AgentClient:
    """tools.mgmtclient.ManagementClient's ``query``, answered in-process by a BrokerManagement."""

    def __init__(self, mgmt):
        self.mgmt = mgmt

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def query(self, entity_type, attribute_names=(), *, limit=None, router_id=None):
        from wire import management as wm

        request = wm.build_request("QUERY", entityType=entity_type, reply_to="r", correlation_id="c",
                                   body={"attributeNames": list(attribute_names)})
        resp = wm.parse_response(self.mgmt.handle(request))
        assert resp.status == 200, resp.description
        return [dict(zip(resp.body["attributeNames"], r)) for r in resp.body["results"]]


class CannedMirror:
    """broker/mirror.py's MirrorPart as management reads it: the canned rows above."""

    def mgmt_sources(self) -> list[dict]:
        return [dict(r) for r in MIRRORS]

    def mgmt_targets(self) -> list[dict]:
        return [dict(r) for r in TARGETS]


class CannedAcceptor:
    """broker/acceptors.py's AcceptorControl as management reads it."""

    def __init__(self, row: dict):
        self.row = row

    def describe(self) -> dict:
        return dict(self.row)


def _agent_with_mirror(tmp_path):
    from broker.management import BrokerManagement
    from tests.unit.broker.fixtures import make_broker

    broker = make_broker(tmp_path)
    broker.mirror = CannedMirror()
    broker.acceptors = {a["name"]: CannedAcceptor(a) for a in ACCEPTORS}
    return BrokerManagement(broker)


def test_fetch_broker_reads_every_mirror_and_acceptor_attribute_the_agent_has(tmp_path):
    data = fetch_broker(AgentClient(_agent_with_mirror(tmp_path)))
    assert data["mirrors"] == MIRRORS  # every attribute tdstat asks for, as the mirror part gave it
    assert data["mirrorTargets"] == TARGETS
    assert data["acceptors"] == ACCEPTORS


def test_tdstat_broker_prints_the_tables_and_json_has_the_rows(tmp_path, monkeypatch):
    from tools import tdstat

    mgmt = _agent_with_mirror(tmp_path)
    monkeypatch.setattr(tdstat, "ManagementClient", lambda *a, **kw: AgentClient(mgmt))
    opts = argparse.Namespace(view="broker", bus="127.0.0.1:61733", timeout=5, router=None, limit=None,
                              verbose=False, csv=False, json=False)
    out = io.StringIO()
    assert tdstat.run(opts, out) == 0
    text = out.getvalue().splitlines()
    assert "Mirrors" in text and "Mirror Targets" in text and "Acceptors" in text
    assert text[text.index("Mirrors") + 4].split() == ["dr", "connected", "tcp://127.0.0.1:61733", "12", "340ms",
                                                       "9000"]
    out = io.StringIO()
    assert tdstat.run(argparse.Namespace(**{**vars(opts), "json": True}), out) == 0
    data = json.loads(out.getvalue())
    assert [m["name"] for m in data["mirrors"]] == ["dr", "backup"]
    assert [t["sourceId"] for t in data["mirrorTargets"]] == ["mirror-source-5c0e"]
    assert sorted(a["name"] for a in data["acceptors"]) == ["amqp", "mirror"]


# -- tdbench --mirror's report (tools/benchmirror.py) --------------------------------------------------------
def _run(round_, mirror, rate, broker_cpu, replica_cpu=None, drain=None):
    return {"round": round_, "mirror": mirror, "msgs_per_s": rate, "p50_us": 900.0, "p99_us": 2000.0,
            "broker_cpu_us_per_msg": broker_cpu, "replica_cpu_us_per_msg": replica_cpu, "drain_s": drain}


def test_bench_mirror_summary_takes_medians_of_each_side_and_the_mirror_cost():
    from tools.benchmirror import format_mirror, summarize

    runs = [_run(1, True, 12000.0, 60.0, 40.0, 0.2), _run(1, False, 30000.0, 30.0),
            _run(2, False, 34000.0, 28.0), _run(2, True, 10000.0, 66.0, 44.0, 0.4),
            _run(3, True, 14000.0, 58.0, 38.0, 0.1), _run(3, False, 32000.0, 31.0)]
    s = summarize(runs)
    assert s["with"] == {"msgs_per_s": 12000.0, "broker_cpu_us_per_msg": 60.0, "replica_cpu_us_per_msg": 40.0,
                         "drain_s": 0.2}
    assert s["without"]["msgs_per_s"] == 32000.0 and s["without"]["broker_cpu_us_per_msg"] == 30.0
    assert s["without"]["replica_cpu_us_per_msg"] is None and s["without"]["drain_s"] is None
    assert (s["throughput_ratio"], s["broker_cpu_extra_us_per_msg"]) == (0.38, 30.0)
    text = format_mirror({"messages": 30000, "size": 100, "window": 1000, "rounds": 3, "runs": runs,
                          "summary": s, "problems": ["replica applied 1 messages and 1 acknowledgements of 90000"]})
    lines = text.splitlines()
    assert lines[2].split() == ["round", "1,", "with", "mirror", "12000", "900", "2000", "60.0", "40.0", "0.20"]
    assert lines[3].split() == ["round", "1,", "without", "mirror", "30000", "900", "2000", "30.0", "-", "-"]
    assert lines[-2] == ("median: with mirror 12000 msgs/s, broker 60.0 us/msg (replica 40.0); without 32000 "
                         "msgs/s, 30.0 us/msg; with / without 0.38")
    assert lines[-1].startswith("FAILED: replica applied 1 messages")
