"""``tddemo federation``: three tdbrokers federate a multicast address, Artemis-style (docs/federation.md).

Every broker has the multicast address ``news``. Brokers 2 and 3 each have an ``<upstream>`` to broker 1
for ``news``, and broker 1, for symmetry, an upstream to each of them; every address policy has
``max-hops="1"``. The demo, step by step:

1. the three brokers start and their federation streams connect (four: 1 -> 2, 1 -> 3, 2 -> 1, 3 -> 1);
2. a subscriber attaches to ``news`` on each broker. A local subscription is demand: each broker keeps a
   federation queue on each of its upstreams' ``news`` and consumes it;
3. a producer on broker 1 sends ``count`` messages to ``news``. Broker 1's own subscriber gets them
   directly; brokers 2 and 3 copy them from their federation queue on broker 1 (one hop), and their
   subscribers get them from there. Broker 1's federation queues on brokers 2 and 3 let in only messages
   with fewer than max-hops (1) hops, so the copies never come back to broker 1: no loop, no duplicate;
4. each subscriber's message ids are checked: every message exactly once on every broker, and each
   stream's ``copied`` count is what it should be.

What the brokers did is read from their management (the ``federationStream`` and ``federationQueue``
entities that ``tdstat --broker`` shows). :class:`FederationDemo` takes the narration and daemon starter of
tools/demo.py, which owns the command line; a failure (a message lost, one received twice, a step that never
happens) raises :class:`DemoFailed` with what went wrong.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Callable

from proton import Message, Timeout
from proton.utils import BlockingConnection

from tools.daemons import free_port
# The demos share their failure, polling, step timeout and duplicate watch (tools/demonet.py).
from tools.demonet import ARTEMIS, DUPLICATE_WATCH_SECONDS, STEP_TIMEOUT_SECONDS, DemoFailed, wait_until
from tools.mgmtclient import ManagementClient

ADDRESS = "news"
FEDERATION = "f"
POLICY = "p"
MAX_HOPS = 1
BROKERS = (1, 2, 3)
#: A federation stream redials this often (Artemis' retry-interval; short, so the demo does not wait for
#: brokers 2 and 3, which start after broker 1 dials them).
RETRY_INTERVAL_MS = 100

BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>{name}</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="{address}"><multicast/></address>
  </addresses>
  <connectors>
{connectors}
  </connectors>
  <federations>
    <federation name="{federation}">
{upstreams}
      <address-policy name="{policy}" max-hops="{max_hops}"><include address-match="{address}"/></address-policy>
    </federation>
  </federations>
</core>
</configuration>
"""
CONNECTOR_XML = '    <connector name="to-b{n}">tcp://127.0.0.1:{port}</connector>'
UPSTREAM_XML = """      <upstream name="b{n}">
        <retry-interval>{retry}</retry-interval>
        <static-connectors><connector-ref>to-b{n}</connector-ref></static-connectors>
        <policy ref="{policy}"/>
      </upstream>"""


def broker_name(n: int) -> str:
    return f"broker-{n}"


def broker_xml(n: int, journal: str, port: int, upstreams: dict[int, int]) -> str:
    """Broker ``n``'s configuration: its acceptor on ``port`` (0: any) and an upstream for each
    ``{broker number: port}``."""
    return BROKER_XML.format(
        name=broker_name(n), journal=journal, port=port, address=ADDRESS, federation=FEDERATION, policy=POLICY,
        max_hops=MAX_HOPS,
        connectors="\n".join(CONNECTOR_XML.format(n=u, port=p) for u, p in sorted(upstreams.items())),
        upstreams="\n".join(UPSTREAM_XML.format(n=u, retry=RETRY_INTERVAL_MS, policy=POLICY)
                            for u in sorted(upstreams)))


class BrokerView:
    """What one broker's management says about its federation streams and the federation queues it keeps."""

    def __init__(self, port: int):
        self.client = ManagementClient(f"127.0.0.1:{port}")

    def close(self) -> None:
        self.client.close()

    def streams(self) -> dict[str, dict]:
        """Stream identity (``f/b2``) -> its row."""
        rows = self.client.query(ARTEMIS + "federationStream", ["identity", "state", "peer", "addresses", "copied"])
        return {r["identity"]: r for r in rows}

    def connected(self) -> bool:
        streams = self.streams()
        return bool(streams) and all(s["state"] == "connected" for s in streams.values())

    def federating(self) -> bool:
        """Every stream consumes its federation queue for the demo's address (the subscriber's demand)."""
        streams = self.streams()
        return bool(streams) and all(any(a["address"] == ADDRESS for a in s["addresses"] or [])
                                     for s in streams.values())

    def kept_queues(self) -> list[dict]:
        """The federation queues other brokers keep here, with a consumer."""
        rows = self.client.query(ARTEMIS + "federationQueue", ["name", "originName", "consumerCount"])
        return [r for r in rows if r["consumerCount"]]


class FederationDemo:
    """The steps of ``tddemo federation`` (see the module docstring)."""

    def __init__(self, workdir: str, count: int, *, say: Callable[[str, str], None], daemon: Callable):
        if count < 1:
            raise DemoFailed("--count must be at least 1")
        self.workdir, self.count, self.say, self.daemon = workdir, count, say, daemon
        self.run_id = uuid.uuid4().hex[:8]
        self.received: dict[int, list[str]] = {n: [] for n in BROKERS}

    def run(self) -> None:
        tmp = self.workdir
        # Brokers 2 and 3 need broker 1's port and broker 1 theirs: theirs are chosen before broker 1 starts
        # (it redials until they listen); broker 1's is its own pick.
        ports = {2: free_port(), 3: free_port()}
        with self.daemon("broker.daemon", "broker-1.xml",
                         broker_xml(1, os.path.join(tmp, "journal-1"), 0, ports), tmp) as b1:
            ports[1] = b1.port
            self.say(broker_name(1), f"tdbroker on 127.0.0.1:{b1.port}, upstreams b2 and b3 for '{ADDRESS}' "
                                     f"(max-hops {MAX_HOPS})")
            with self.daemon("broker.daemon", "broker-2.xml",
                             broker_xml(2, os.path.join(tmp, "journal-2"), ports[2], {1: ports[1]}), tmp), \
                    self.daemon("broker.daemon", "broker-3.xml",
                                broker_xml(3, os.path.join(tmp, "journal-3"), ports[3], {1: ports[1]}), tmp):
                for n in (2, 3):
                    self.say(broker_name(n), f"tdbroker on 127.0.0.1:{ports[n]}, upstream b1 for '{ADDRESS}' "
                                             f"(max-hops {MAX_HOPS})")
                views = {n: BrokerView(ports[n]) for n in BROKERS}
                try:
                    self._steps(ports, views)
                finally:
                    for view in views.values():
                        view.close()

    def _steps(self, ports: dict[int, int], views: dict[int, BrokerView]) -> None:
        wait_until("the four federation streams to connect", lambda: all(v.connected() for v in views.values()))
        self.say("federation", "4 streams connected: broker-1 <- broker-2, broker-1 <- broker-3, "
                               "broker-2 <- broker-1, broker-3 <- broker-1")
        conns = {n: BlockingConnection(f"amqp://127.0.0.1:{ports[n]}", timeout=STEP_TIMEOUT_SECONDS)
                 for n in BROKERS}
        try:
            receivers = {n: conns[n].create_receiver(ADDRESS, credit=self.count + 10) for n in BROKERS}
            self.say("subscribers", f"one on '{ADDRESS}' on each broker")
            wait_until("every stream to federate the subscribers' address",
                  lambda: all(v.federating() for v in views.values()))
            wait_until("each broker to keep a consumed federation queue for each broker that federates from it",
                  lambda: len(views[1].kept_queues()) == 2 and all(len(views[n].kept_queues()) == 1
                                                                   for n in (2, 3)))
            for n in BROKERS:
                kept = sorted(f"{q['name']} (for {q['originName'] or '?'})" for q in views[n].kept_queues())
                self.say(broker_name(n), f"keeps {len(kept)} federation queue(s): {', '.join(kept)}")
            self._send(conns[1])
            for n in BROKERS:
                self._receive(n, receivers[n], self.count)
                self.say(f"sub {n}", f"received {self.count} on {broker_name(n)}")
            self._watch_duplicates(receivers)
            # read while the subscribers are there: a stream counts what it copied per federated address,
            # and an address without demand any more is no longer federated
            streams = {n: views[n].streams() for n in BROKERS}
        finally:
            for conn in conns.values():
                conn.close()
        self._check(streams)

    def _send(self, conn) -> None:
        tx = conn.create_sender(ADDRESS)
        for i in range(self.count):
            tx.send(Message(id=f"{self.run_id}-{i}", body=f"news {i}"))
        self.say("producer", f"sent {self.count} messages to '{ADDRESS}' on {broker_name(1)}, each accepted")

    def _receive(self, n: int, rx, count: int) -> None:
        for _ in range(count):
            try:
                msg = rx.receive(timeout=STEP_TIMEOUT_SECONDS)
            except Timeout:
                raise DemoFailed(f"the subscriber on {broker_name(n)} waited {STEP_TIMEOUT_SECONDS:.0f} s for a "
                                 f"message; it has {len(self.received[n])} of {self.count}") from None
            self.received[n].append(str(msg.id))
            rx.accept()

    def _watch_duplicates(self, receivers: dict) -> None:
        """Anything more arriving now is a message received twice (or one never sent)."""
        deadline = time.monotonic() + DUPLICATE_WATCH_SECONDS
        for n, rx in receivers.items():
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    msg = rx.receive(timeout=left)
                except Timeout:
                    break
                self.received[n].append(str(msg.id))
                rx.accept()

    def _check(self, streams: dict[int, dict[str, dict]]) -> None:
        expected = {f"{self.run_id}-{i}" for i in range(self.count)}
        for n in (2, 3):
            copied = streams[n]["f/b1"]["copied"]
            self.say(broker_name(n), f"its upstream b1 copied {copied} from broker-1 (one hop each)")
        back = sum(s["copied"] for s in streams[1].values())
        self.say(broker_name(1), f"its upstreams b2 and b3 copied {back}: the copies on brokers 2 and 3 carry "
                                 f"a hop, and max-hops {MAX_HOPS} keeps them out of broker-1's federation queues")
        problems = []
        for n in BROKERS:
            got = self.received[n]
            distinct = set(got)
            lost = len(expected - distinct)
            twice = len(got) - len(distinct)
            self.say("check", f"{broker_name(n)}: sent {self.count}, received {len(got)}: "
                              f"{len(distinct & expected)} different, {twice} received twice, {lost} lost")
            if lost or twice or distinct - expected:
                problems.append(f"{broker_name(n)}: {lost} lost, {twice} duplicated, "
                                f"{len(distinct - expected)} unexpected")
        for n in (2, 3):
            if streams[n]["f/b1"]["copied"] != self.count:
                problems.append(f"{broker_name(n)} copied {streams[n]['f/b1']['copied']}, not {self.count}")
        if back:
            problems.append(f"{back} copies came back to broker-1 (max-hops not enforced)")
        if problems:
            raise DemoFailed("; ".join(problems))


__all__ = ["ADDRESS", "BROKER_XML", "DemoFailed", "FederationDemo", "broker_xml"]
