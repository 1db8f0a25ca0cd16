"""``tdbench --mirror``: what a broker mirror (docs/mirror.md) costs a broker's durable throughput.

Three tdbrokers, journals fsync'd (``journal-sync-non-transactional``): S has a ``<mirror>`` broker
connection to the replica R (Artemis' "AMQP Broker Connections / Mirror"; message acknowledgements
mirrored, durable events); P has S's configuration without the mirror. Each round runs the same durable
at-least-once load (producer and consumer on the broker at the same time) once on S and once on P,
alternating which goes first, so both see the same machine. A load on S counts until the mirror has caught
up: after the consumer has the last message the bench waits for S's ``mirror`` row to show no queued
events (``drain``), and S's and R's CPU are taken over the load and the drain. At the end R must have
applied every message and every acknowledgement (management's ``mirrorTarget`` row) and hold no message.
"""

from __future__ import annotations

import os
import statistics
import time

import trio

from tools import daemons
from tools.benchclient import process_cpu_seconds
from tools.benchprocs import BenchError, BenchDaemon
from tools.benchrun import run_via_peer
from tools.mgmtclient import ManagementClient

MIRROR_MESSAGES = 30_000
MIRROR_ROUNDS = 3
WARMUP_FRACTION = 0.05
#: How long the mirror may take to connect, or to send what a load left queued, before the run fails.
MIRROR_WAIT_SECONDS = 60.0
POLL_SECONDS = 0.05
ARTEMIS = "org.apache.activemq.artemis."
ADDRESS = "bench.mirror"
MIRROR_NAME = "bench-mirror"

MIRROR_BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <persistence-enabled>true</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <journal-sync-non-transactional>true</journal-sync-non-transactional>
  <security-enabled>false</security-enabled>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  {mirror}
</core></configuration>
"""

MIRROR_CONNECTION = """<broker-connections>
    <amqp-connection name="{name}" uri="tcp://127.0.0.1:{port}" retry-interval="100" reconnect-attempts="-1">
      <mirror message-acknowledgements="true" queue-creation="true" queue-removal="true" durable="true"/>
    </amqp-connection>
  </broker-connections>"""


class MirrorBrokerProcess(BenchDaemon):
    """A tdbroker of the mirror bench, with a mirror to the broker on ``replica_port`` when given."""

    def __init__(self, name: str, replica_port: int | None = None):
        super().__init__(daemons.BROKER, "broker.xml", "", None)
        mirror = MIRROR_CONNECTION.format(name=MIRROR_NAME, port=replica_port) if replica_port else ""
        with open(self.conf_path, "w") as f:
            f.write(MIRROR_BROKER_XML.format(name=name, journal=os.path.join(self.tmp.name, "journal"),
                                             mirror=mirror))


def _query(port: int, entity: str, attrs: list[str]) -> list[dict]:
    with ManagementClient(f"127.0.0.1:{port}", timeout=10) as client:
        return client.query(ARTEMIS + entity, attrs)


def _mirror_row(port: int) -> dict:
    rows = [r for r in _query(port, "mirror", ["name", "state", "queuedEvents", "eventsSent", "lastError"])
            if r.get("name") == MIRROR_NAME]
    if not rows:
        raise BenchError(f"the source broker has no mirror {MIRROR_NAME} (management lists none)")
    return rows[0]


def _wait_mirror(port: int, what: str, done) -> float:
    """Poll S's mirror row until ``done(row)``; the seconds it took. BenchError after MIRROR_WAIT_SECONDS."""
    t0 = time.monotonic()
    while True:
        row = _mirror_row(port)
        if done(row):
            return time.monotonic() - t0
        if time.monotonic() - t0 > MIRROR_WAIT_SECONDS:
            raise BenchError(f"the mirror did not {what} within {MIRROR_WAIT_SECONDS:.0f} s: {row}")
        time.sleep(POLL_SECONDS)


def _cpu(pids: dict) -> dict:
    return {name: process_cpu_seconds(pid) for name, pid in pids.items()}


def _one_load(port: int, pids: dict, opts: dict, mirror_port: int | None) -> dict:
    """One durable load on the broker at ``port``; with ``mirror_port`` (S), waits for the mirror to drain.
    CPU per message of each broker in ``pids`` over the whole load (and drain)."""
    cpu0 = _cpu(pids)
    t0 = time.monotonic()

    async def load():
        return await run_via_peer("127.0.0.1", port, senders=1, receivers=1, messages=opts["messages"],
                                  size=opts["size"], presettled=False, window=opts["window"], address=ADDRESS,
                                  warmup=int(opts["messages"] * WARMUP_FRACTION),
                                  deadline=trio.current_time() + opts["duration_limit"], durable=True)

    r = trio.run(load)
    r["load_s"] = round(time.monotonic() - t0, 3)
    r["drain_s"] = None
    if mirror_port is not None:
        r["drain_s"] = round(_wait_mirror(mirror_port, "send the load's events", lambda m: m["queuedEvents"] == 0),
                             3)
    cpu1 = _cpu(pids)
    for name in pids:
        if cpu0[name] is not None and cpu1[name] is not None:
            r[f"{name}_cpu_us_per_msg"] = round((cpu1[name] - cpu0[name]) * 1e6 / max(1, opts["messages"]), 1)
    return r


def _replica_check(replica_port: int, expected: int) -> list[str]:
    """What is wrong with the replica after ``expected`` mirrored messages, all acknowledged."""
    targets = _query(replica_port, "mirrorTarget", ["sourceName", "messagesApplied", "acksApplied",
                                                   "duplicatesSkipped"])
    queues = [q for q in _query(replica_port, "queue", ["name", "messageCount"]) if q.get("name") == ADDRESS]
    problems = []
    applied = sum(t.get("messagesApplied") or 0 for t in targets)
    acks = sum(t.get("acksApplied") or 0 for t in targets)
    if applied != expected or acks != expected:
        problems.append(f"replica applied {applied} messages and {acks} acknowledgements of {expected}")
    if not queues:
        problems.append(f"replica has no queue {ADDRESS}")
    elif queues[0].get("messageCount"):
        problems.append(f"replica holds {queues[0]['messageCount']} messages of {ADDRESS} (all were acknowledged)")
    return problems


def run_mirror(*, messages: int = MIRROR_MESSAGES, rounds: int = MIRROR_ROUNDS, size: int = 100,
               window: int = 1000, duration_limit: float = 120.0) -> dict:
    opts = dict(messages=messages, size=size, window=window, duration_limit=duration_limit)
    report: dict = {"kind": "mirror", "messages": messages, "rounds": rounds, "size": size, "window": window,
                    "runs": []}
    replica = source = plain = None
    try:
        replica = MirrorBrokerProcess("bench-replica").start()
        source = MirrorBrokerProcess("bench-source", replica_port=replica.port).start()
        plain = MirrorBrokerProcess("bench-plain").start()
        _wait_mirror(source.port, "connect", lambda m: m["state"] == "connected")
        for i in range(rounds):
            order = ("mirror", "none") if i % 2 == 0 else ("none", "mirror")
            for kind in order:
                if kind == "mirror":
                    r = _one_load(source.port, {"broker": source.pid, "replica": replica.pid}, opts, source.port)
                else:
                    r = _one_load(plain.port, {"broker": plain.pid}, opts, None)
                r.update(mirror=kind == "mirror", round=i + 1)
                report["runs"].append(r)
        problems = []
        for r in report["runs"]:
            label = f"round {r['round']}, {'with' if r['mirror'] else 'without'} mirror"
            problems += [f"{label}: {e}" for e in r["errors"]]
            if r["received"] != messages or r["accepted"] != messages:
                problems.append(f"{label}: sent {r['sent']}, received {r['received']}, accepted {r['accepted']} "
                                f"of {messages}")
        problems += _replica_check(replica.port, messages * rounds)
    finally:
        for p in (source, plain, replica):
            if p is not None:
                p.stop()
    report["summary"] = summarize(report["runs"])
    report["problems"] = problems
    report["ok"] = not problems
    return report


def _median(values):
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 1) if values else None


def summarize(runs: list[dict]) -> dict:
    """Medians over the rounds, with and without the mirror, and what the mirror costs: the throughput
    ratio and the extra CPU per message on the broker (and the replica's)."""
    out = {}
    for key, mirrored in (("with", True), ("without", False)):
        rs = [r for r in runs if r["mirror"] == mirrored]
        out[key] = {"msgs_per_s": _median([r["msgs_per_s"] for r in rs]),
                    "broker_cpu_us_per_msg": _median([r.get("broker_cpu_us_per_msg") for r in rs]),
                    "replica_cpu_us_per_msg": _median([r.get("replica_cpu_us_per_msg") for r in rs]),
                    "drain_s": _median([r.get("drain_s") for r in rs])}
    w, wo = out["with"], out["without"]
    out["throughput_ratio"] = (round(w["msgs_per_s"] / wo["msgs_per_s"], 2)
                               if w["msgs_per_s"] and wo["msgs_per_s"] else None)
    out["broker_cpu_extra_us_per_msg"] = (round(w["broker_cpu_us_per_msg"] - wo["broker_cpu_us_per_msg"], 1)
                                          if None not in (w["broker_cpu_us_per_msg"], wo["broker_cpu_us_per_msg"])
                                          else None)
    return out


def _fmt(v, width: int, digits: int = 0) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def format_mirror(rep: dict) -> str:
    lines = [f"tdbench --mirror: 1 -> 1, {rep['messages']} x {rep['size']} B durable, at-least-once, window "
             f"{rep['window']}, {rep['rounds']} rounds; clients on the broker, with a mirror to a replica or "
             "without",
             f"{'':26}{'msgs/s':>9}{'p50 us':>10}{'p99 us':>10}{'broker us/msg':>15}{'replica us/msg':>16}"
             f"{'drain s':>9}"]
    for r in rep["runs"]:
        label = f"round {r['round']}, {'with' if r['mirror'] else 'without'} mirror"
        lines.append(f"{label:26}{_fmt(r['msgs_per_s'], 9)}{_fmt(r['p50_us'], 10)}{_fmt(r['p99_us'], 10)}"
                     f"{_fmt(r.get('broker_cpu_us_per_msg'), 15, 1)}{_fmt(r.get('replica_cpu_us_per_msg'), 16, 1)}"
                     f"{_fmt(r.get('drain_s'), 9, 2)}")
    s = rep.get("summary") or {}
    if s.get("with") and s.get("without"):
        w, wo = s["with"], s["without"]
        lines.append(f"median: with mirror {_fmt(w['msgs_per_s'], 0)} msgs/s, broker "
                     f"{_fmt(w['broker_cpu_us_per_msg'], 0, 1)} us/msg (replica "
                     f"{_fmt(w['replica_cpu_us_per_msg'], 0, 1)}); without {_fmt(wo['msgs_per_s'], 0)} msgs/s, "
                     f"{_fmt(wo['broker_cpu_us_per_msg'], 0, 1)} us/msg; with / without "
                     f"{_fmt(s['throughput_ratio'], 0, 2)}")
    for p in rep["problems"]:
        lines.append(f"FAILED: {p}")
    return "\n".join(lines)
