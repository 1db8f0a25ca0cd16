"""``tddemo network``: two tdbrokers in a network of brokers (docs/networks.md); messages follow a consumer.

Broker A has one ``<networkConnector>`` to broker B with ``duplex="true"``: one connection carries a bridge
each way, and B adopts A's connector settings for its half. The demo, step by step:

1. a producer on A sends ``count`` messages to the queue ``orders``; no consumer exists anywhere, so they
   wait on A;
2. a consumer attaches to ``orders`` on B: B tells A of it (a consumer advisory) and A's bridge forwards
   every waiting message to B, where the consumer takes half of them and leaves;
3. the consumer attaches on A instead: A tells B of it, and B's half of the duplex bridge forwards the other
   half back to A. They had come from A, so only the destination policy ``replayWhenNoConsumers`` lets them
   go back there (ActiveMQ's "stuck messages" case; docs/networks.md);
4. the message ids the consumer got are checked: every message exactly once.

What the brokers did is read from their management (the ``networkBridge`` and ``queue`` entities that
``tdstat --broker`` shows). :class:`NetworkDemo` takes the narration and daemon starter of tools/demo.py,
which owns the command line; a failure (a message lost, one received twice, a step that never happens)
raises :class:`DemoFailed` with what went wrong.
"""

from __future__ import annotations

import os
import time
import uuid
from typing import Callable

from proton import Message, Timeout
from proton.utils import BlockingConnection

from tools.mgmtclient import ManagementClient

QUEUE = "orders"
CONNECTOR = "a-to-b"
ARTEMIS = "org.apache.activemq.artemis."
#: How long one step may take before the demo reports it as failed (two cold brokers on a busy machine).
STEP_TIMEOUT_SECONDS = 20.0
#: How long the consumer keeps listening after the last expected message, so a duplicate would be seen.
DUPLICATE_WATCH_SECONDS = 1.0
#: B sends a message back to A, where it came from, once it has been on B this long without a consumer there
#: (conditionalNetworkBridgeFilterFactory replayDelay; short, so the demo does not wait).
REPLAY_DELAY_MS = 200
_POLL_SECONDS = 0.05

BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>{name}</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="{queue}"><anycast><queue name="{queue}"/></anycast></address>
  </addresses>
  {network}
  <destinationPolicy><policyMap><policyEntries>
    <policyEntry queue=">"><networkBridgeFilterFactory>
      <conditionalNetworkBridgeFilterFactory replayWhenNoConsumers="true" replayDelay="{replay_delay}"/>
    </networkBridgeFilterFactory></policyEntry>
  </policyEntries></policyMap></destinationPolicy>
</core>
</configuration>
"""

CONNECTOR_XML = """<networkConnectors>
    <networkConnector name="{name}" uri="static:(tcp://127.0.0.1:{port})?initialReconnectDelay=100"
                      duplex="true"/>
  </networkConnectors>"""


class DemoFailed(Exception):
    """The network did not do what the demo shows (the message says what)."""


def broker_xml(name: str, journal: str, network: str = "") -> str:
    return BROKER_XML.format(name=name, journal=journal, queue=QUEUE, network=network,
                             replay_delay=REPLAY_DELAY_MS)


def wait_until(what: str, probe: Callable[[], object]):
    """Poll ``probe`` until it returns something true; DemoFailed naming ``what`` after the step timeout."""
    deadline = time.monotonic() + STEP_TIMEOUT_SECONDS
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise DemoFailed(f"{what}: not within {STEP_TIMEOUT_SECONDS:.0f} s")
        time.sleep(_POLL_SECONDS)


class BrokerView:
    """What one broker's management says about the demo's queue and its network bridges."""

    def __init__(self, port: int):
        self.client = ManagementClient(f"127.0.0.1:{port}")

    def close(self) -> None:
        self.client.close()

    def messages(self) -> int:
        rows = self.client.query(ARTEMIS + "queue", ["name", "messageCount"])
        return next((int(r["messageCount"]) for r in rows if r["name"] == QUEUE), 0)

    def bridges(self) -> list[dict]:
        return self.client.query(ARTEMIS + "networkBridge", ["name", "direction", "state", "peer", "demand",
                                                             "forwarded"])

    def bridge(self) -> dict | None:
        """The demo connector's bridge on this broker (A's own, or B's half of it), when connected."""
        rows = [b for b in self.bridges() if b["name"] == CONNECTOR and b["state"] == "connected"]
        return rows[0] if rows else None

    def demand_consumers(self) -> int:
        """Remote consumers of the demo queue this broker's bridge forwards to."""
        bridge = self.bridge() or {}
        return sum(int(d["consumers"]) for d in bridge.get("demand") or [] if d["destination"] == QUEUE)


class NetworkDemo:
    """The steps of ``tddemo network`` (see the module docstring)."""

    def __init__(self, workdir: str, count: int, *, say: Callable[[str, str], None], daemon: Callable):
        if count < 2:
            raise DemoFailed("--count must be at least 2 (half go each way)")
        self.workdir, self.count, self.say, self.daemon = workdir, count, say, daemon
        self.run_id = uuid.uuid4().hex[:8]
        self.received: list[str] = []

    def run(self) -> None:
        tmp = self.workdir
        with self.daemon("broker.daemon", "broker-b.xml",
                         broker_xml("broker-b", os.path.join(tmp, "journal-b")), tmp) as b:
            self.say("broker B", f"tdbroker 'broker-b' on 127.0.0.1:{b.port}")
            network = CONNECTOR_XML.format(name=CONNECTOR, port=b.port)
            with self.daemon("broker.daemon", "broker-a.xml",
                             broker_xml("broker-a", os.path.join(tmp, "journal-a"), network), tmp) as a:
                self.say("broker A", f"tdbroker 'broker-a' on 127.0.0.1:{a.port}, network connector "
                                     f"'{CONNECTOR}' to broker B, duplex")
                view_a, view_b = BrokerView(a.port), BrokerView(b.port)
                try:
                    self._steps(a.port, b.port, view_a, view_b)
                finally:
                    view_a.close()
                    view_b.close()

    def _steps(self, port_a: int, port_b: int, view_a: BrokerView, view_b: BrokerView) -> None:
        half = self.count // 2
        rest = self.count - half
        wait_until("the bridge between A and B to connect", lambda: view_a.bridge() and view_b.bridge())
        self.say("network", "A and B are connected: one connection, a bridge each way")

        self._send(port_a)
        wait_until(f"{self.count} messages to wait on A", lambda: view_a.messages() == self.count)
        self.say("broker A", f"holds all {self.count}: no consumer exists anywhere, so nothing moves")

        conn_b = BlockingConnection(f"amqp://127.0.0.1:{port_b}", timeout=STEP_TIMEOUT_SECONDS)
        rx = conn_b.create_receiver(QUEUE)
        self.say("consumer", f"attached to '{QUEUE}' on broker B")
        wait_until("broker A to learn of the consumer on B", lambda: view_a.demand_consumers() == 1)
        self.say("broker A", "learned of the consumer on B: its bridge now has demand for "
                             f"'{QUEUE}' (1 consumer)")
        forwarded = wait_until(f"A to forward {self.count} messages to B",
                          lambda: (view_a.bridge() or {}).get("forwarded") == self.count
                          and view_b.messages() == self.count and self.count)
        self.say("broker A", f"forwarded {forwarded} messages to B, where the consumer is "
                             f"(A holds {view_a.messages()}, B holds {view_b.messages()})")
        self._receive(rx, half)
        self.say("consumer", f"received {half} on broker B, then leaves")
        conn_b.close()
        wait_until("broker A to learn that the consumer left", lambda: view_a.demand_consumers() == 0)
        self.say("broker B", f"holds the other {view_b.messages()}; A's bridge has no demand any more")

        conn_a = BlockingConnection(f"amqp://127.0.0.1:{port_a}", timeout=STEP_TIMEOUT_SECONDS)
        try:
            rx = conn_a.create_receiver(QUEUE)
            self.say("consumer", f"attached to '{QUEUE}' on broker A")
            self._receive(rx, rest)
            back = (view_b.bridge() or {}).get("forwarded")
            self.say("broker B", f"its half of the duplex bridge forwarded {back} back to A: they came from A, "
                                 f"and replayWhenNoConsumers lets them return once B has no consumer for them")
            self.say("consumer", f"received the other {rest} on broker A")
            self._watch_duplicates(rx)
        finally:
            conn_a.close()
        self._check(view_a, view_b)

    def _send(self, port: int) -> None:
        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=STEP_TIMEOUT_SECONDS)
        try:
            tx = conn.create_sender(QUEUE)
            for i in range(self.count):
                tx.send(Message(id=f"{self.run_id}-{i}", body=f"order {i}", durable=True))
        finally:
            conn.close()
        self.say("producer", f"sent {self.count} messages to '{QUEUE}' on broker A, each accepted (stored)")

    def _receive(self, rx, n: int) -> None:
        for _ in range(n):
            try:
                msg = rx.receive(timeout=STEP_TIMEOUT_SECONDS)
            except Timeout:
                raise DemoFailed(f"the consumer waited {STEP_TIMEOUT_SECONDS:.0f} s for a message; it has "
                                 f"{len(self.received)} of {self.count}") from None
            self.received.append(str(msg.id))
            rx.accept()

    def _watch_duplicates(self, rx) -> None:
        """Anything more arriving now is a message received twice (or one never sent)."""
        try:
            msg = rx.receive(timeout=DUPLICATE_WATCH_SECONDS)
        except Timeout:
            return
        self.received.append(str(msg.id))
        rx.accept()

    def _check(self, view_a: BrokerView, view_b: BrokerView) -> None:
        expected = {f"{self.run_id}-{i}" for i in range(self.count)}
        got = set(self.received)
        lost = sorted(expected - got)
        twice = len(self.received) - len(got)
        left = view_a.messages() + view_b.messages()
        self.say("check", f"sent {self.count}, received {len(self.received)}: {len(got & expected)} different, "
                          f"{twice} received twice, {len(lost)} lost; {left} left on the brokers")
        if lost or twice or got - expected or left:
            raise DemoFailed(f"{len(lost)} lost, {twice} duplicated, {len(got - expected)} unexpected, "
                             f"{left} left on the brokers")


__all__ = ["BROKER_XML", "CONNECTOR", "DemoFailed", "NetworkDemo", "QUEUE", "broker_xml"]
