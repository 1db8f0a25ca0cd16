"""Real tdbroker processes for system tests, the router sections that reach them, and the clients that
send to and drain them.

:class:`BrokerProcess` starts ``tdbroker`` through :class:`tools.daemons.DaemonProcess` (the helper tdbench
and tddemo use too), which reads the broker's start-up lines. The router sections (:data:`WAYPOINT`,
:data:`LINK_ROUTES`, :data:`AUTO_LINKS`) and the clients are shared by the brokered, broker-delivery,
durability, link-route and RabbitMQ tests, so no test module imports another.
"""

from __future__ import annotations

import pathlib
import time

from proton import Message

from tests.system.clients import Consumer, Producer
from tests.system.harness import REPO_ROOT
from tools.daemons import BROKER, DaemonProcess

__all__ = [
    "AUTO_LINKS",
    "BROKER_XML",
    "BrokerProcess",
    "LINK_ROUTES",
    "REATTACH_DELAY",
    "TIMEOUT",
    "WAYPOINT",
    "attach_when_routed",
    "receive_all",
    "receive_messages",
    "send_all",
    "send_messages",
    "wait_queue_empty",
]

TIMEOUT = 30
"""Seconds a broker may take to start, and a client to finish, on a busy two-core machine."""

# How long a reattaching client waits before trying again after a detach or a refusal.
REATTACH_DELAY = 0.3

WAYPOINT = "address {\n prefix: queue\n waypoint: yes\n}"
"""A router section making ``queue...`` a waypoint address (the broker attached as its peer holds it)."""

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<core xmlns="urn:activemq:core">
  <name>broker-1</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="queue"><anycast><queue name="queue"/></anycast></address>
  </addresses>
  <broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{router_port}" name="router" retry-interval="200">
      <peer address-match="queue"/>
    </amqp-connection>
  </broker-connections>
</core>
</configuration>
"""
"""A broker holding ``queue`` and attached to the router on ``router_port`` as an Artemis ``<peer>``."""

LINK_ROUTES = """\
connector {{
    name: my-broker
    host: 127.0.0.1
    port: {port}
    role: route-container
    retryDelaySeconds: 0.2
}}
linkRoute {{
    prefix: test
    direction: in
    connection: my-broker
}}
linkRoute {{
    prefix: test
    direction: out
    connection: my-broker
}}
"""
"""Router sections link-routing ``test...`` both ways to the route-container on ``port``."""

AUTO_LINKS = """\
address {{
    prefix: {address}
    waypoint: yes
}}
connector {{
    name: my-broker
    host: 127.0.0.1
    port: {port}
    role: route-container
    retryDelaySeconds: 0.2
}}
autoLink {{
    address: {address}
    direction: out
    connection: my-broker
}}
autoLink {{
    address: {address}
    direction: in
    connection: my-broker
}}
"""
"""Router sections auto-linking the waypoint ``address`` both ways to the route-container on ``port``."""


class BrokerProcess(DaemonProcess):
    """A tdbroker subprocess on ``conf`` (tools/daemons.py reads its start-up lines). Its stderr is appended
    to ``workdir/broker.stderr``, so a broker restarted on the same journal keeps its earlier log."""

    def __init__(self, conf: pathlib.Path, workdir: pathlib.Path):
        super().__init__(BROKER, conf, stderr_path=workdir / "broker.stderr", stderr_append=True,
                         start_timeout=TIMEOUT, cwd=REPO_ROOT)
        self.conf = conf
        self.journal_dir = workdir / "journal"

    def check_ready(self) -> None:
        pass  # a broker with no acceptor (only broker-connections) is ready too

    def stop(self, timeout: float = 15) -> int:
        code = super().stop(timeout)
        return 0 if code is None else code


def wait_queue_empty(broker: BrokerProcess, queue: str = "queue", timeout: float = TIMEOUT) -> None:
    """Until the broker's queue holds nothing: a consumer's accept reaches the broker through the router
    after the consumer has settled, so a test that stops the broker at once may stop it first."""
    from tools.mgmtclient import ManagementClient

    deadline = time.monotonic() + timeout
    with ManagementClient(f"127.0.0.1:{broker.ports['amqp']}", timeout=timeout) as mc:
        while True:
            rows = [r for r in mc.query("org.apache.activemq.artemis.queue", ["name", "messageCount"])
                    if r["name"] == queue]
            assert rows, f"the broker has no queue {queue}"
            count = sum(r["messageCount"] for r in rows)
            if count == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"queue {queue} still holds {count} messages")
            time.sleep(0.05)


# -- clients ------------------------------------------------------------------------------------------------

def send_messages(url: str, address: str, messages: list[Message], timeout: float = TIMEOUT) -> None:
    """Send ``messages`` to ``address`` and require every one accepted."""
    p = Producer(url, address, count=len(messages), message_fn=lambda i: messages[i]).start()
    try:
        p.wait(timeout)
        assert p.outcomes == {"accepted": len(messages)}, p.outcomes
    finally:
        p.close()


def receive_messages(url: str, address: str, n: int, timeout: float = TIMEOUT, **kw) -> list[Message]:
    """Receive ``n`` messages from ``address`` (``kw`` go to :class:`Consumer`: outcome, credit...)."""
    c = Consumer(url, address, count=n, **kw).start()
    try:
        c.wait(timeout)
        return list(c.messages)
    finally:
        c.close()


def attach_when_routed(make, timeout: float = TIMEOUT):
    """Start clients from ``make()`` until one attaches without ``qd:no-route-to-dest`` (the router's
    connector to the container may still be coming up)."""
    deadline = time.monotonic() + timeout
    while True:
        client = make().start(wait=False)
        client.wait_ready(timeout)
        if not client.link_errors:
            return client
        client.close()
        if time.monotonic() > deadline:
            raise AssertionError(f"never routed: {client.link_errors}")
        time.sleep(REATTACH_DELAY)


def send_all(url: str, address: str, ids: list, *, durable: bool = True) -> Producer:
    """Send one message per id through a routed address (retrying the attach until it is routed) and
    require every one accepted."""
    msgs = [Message(id=i, body=f"m{i}", durable=durable) for i in ids]
    p = attach_when_routed(lambda: Producer(url, address, count=len(msgs), message_fn=lambda k: msgs[k]))
    try:
        p.wait(TIMEOUT)
        assert p.outcomes == {"accepted": len(msgs)}, p.outcomes
    finally:
        p.close()
    return p


def receive_all(url: str, address: str, n: int) -> list:
    """The ids of ``n`` messages received from a routed address (retrying the attach until it is routed)."""
    c = attach_when_routed(lambda: Consumer(url, address, count=n, credit=50))
    try:
        c.wait(TIMEOUT)
        return [m.id for m in c.messages]
    finally:
        c.close()
