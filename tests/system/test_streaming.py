"""Large messages stream through real routers with bounded memory (issue 17, router/streams.py).

A router that assembled a message before forwarding it grew by about the message's size (a 200 MB message
cost +816 MB through one router and never crossed a 3-router line). Here messages larger than the memory
bound pass through one router and through a line of three while every router's RSS growth stays under it,
with independent clients: the bench's lean client for the huge one, proton's reactor for content checks,
and a producer killed mid-message, whose stream must be aborted without harming what follows.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.system.clients import Consumer, Producer
from tests.system.test_dispatch_compat_routing import query
from tests.system.meshharness import Mesh
from tools.bench import run_bench

pytestmark = pytest.mark.system

HUGE = 150_000_000          # bytes: far over the bound, so an assembling router would fail the test
RSS_BOUND_MB = 64           # issue 17's target for each router's growth
TIMEOUT = 60


@pytest.mark.parametrize("hops", [0, 2], ids=["one-router", "three-router-line"])
def test_huge_message_crosses_with_bounded_router_memory(hops):
    rep = run_bench(senders=1, receivers=1, messages=1, size=HUGE, window=1, hops=hops, direct=False,
                    duration_limit=120.0, stall_seconds=60.0)
    assert rep["ok"], rep["problems"]
    x = rep["router"]
    assert x["received"] == 1
    growth = [m["growth"] for m in x["router_rss_mb"]]
    assert len(growth) == hops + 1
    assert max(growth) < RSS_BOUND_MB, growth


class Checked(MessagingHandler):
    """Send ``count`` messages of ``size`` random-ish bytes from one router, receive them on another,
    compare digests; every outcome must come back accepted."""

    def __init__(self, src: str, dst: str, address: str, size: int, count: int):
        super().__init__(prefetch=10, auto_accept=True)
        self.src, self.dst, self.address, self.count = src, dst, address, count
        self.bodies = [hashlib.sha256(b"%d" % i).digest() * (size // 32) for i in range(count)]
        self.sent = self.accepted = 0
        self.digests: list = []
        self.bad: list = []
        self.done = threading.Event()
        self.sender = None

    def on_start(self, event):
        rc = event.container.connect(self.dst)
        event.container.create_receiver(rc, self.address)
        self.sc = event.container.connect(self.src)

    def on_link_opened(self, event):
        if event.receiver is not None and self.sender is None:
            self.sender = event.container.create_sender(self.sc, self.address)

    def on_sendable(self, event):
        while event.sender.credit > 0 and self.sent < self.count:
            event.sender.send(Message(id=self.sent, body=self.bodies[self.sent]))
            self.sent += 1

    def on_message(self, event):
        self.digests.append((event.message.id, hashlib.sha256(event.message.body).hexdigest()))

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted == self.count:
            self._finish(event)

    def on_rejected(self, event):
        self.bad.append("rejected")
        self._finish(event)

    def on_released(self, event):
        self.bad.append("released or modified")
        self._finish(event)

    def _finish(self, event):
        event.container.stop()
        self.done.set()


@pytest.fixture
def line(tmp_path):
    mesh = Mesh(tmp_path, None)
    mesh.add("A")
    mesh.add("B", connect={"A": 1})
    mesh.add("C", connect={"B": 1})
    yield mesh
    mesh.stop_all()


def test_streamed_messages_arrive_intact_across_a_line_with_reactor_clients(line):
    line.wait_route("A", "C")
    traffic = Checked(line.url("A"), line.url("C"), "stream.checked", 12_000_000, 3)
    t = threading.Thread(target=Container(traffic).run, daemon=True)
    t.start()
    assert traffic.done.wait(TIMEOUT), f"accepted {traffic.accepted} of 3"
    t.join(TIMEOUT)
    assert traffic.bad == []
    want = [(i, hashlib.sha256(b).hexdigest()) for i, b in enumerate(traffic.bodies)]
    assert traffic.digests == want


PRODUCER = textwrap.dedent("""
    import sys
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Half(MessagingHandler):
        # Sends the first 40 MB of a 400 MB message and never the rest: a delivery left mid-way.
        def on_start(self, event):
            event.container.create_sender(sys.argv[1], sys.argv[2])
        def on_sendable(self, event):
            if getattr(self, "begun", False):
                return
            self.begun = True
            data = Message(body=b"z" * 400_000_000).encode()
            event.sender.delivery(b"half")
            event.sender.send(data[:40_000_000])
            print("sending", flush=True)

    Container(Half()).run()
""")


def router_row(url: str) -> dict:
    [row] = query(url, "org.apache.qpid.dispatch.router")
    return row


def wait_until(predicate, what: str, timeout: float = TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_producer_killed_mid_message_aborts_the_stream_and_the_line_carries_on(line):
    line.wait_route("A", "C")
    consumer = Consumer(line.url("C"), "stream.abort", credit=10).start()
    consumer.wait_ready()
    line.wait_route("A", "C")
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, line.url("A"), "stream.abort"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "sending"
        # Mid-way: every router of the line is streaming it (the last one to the consumer).
        for rid in "ABC":
            wait_until(lambda rid=rid: router_row(line.url(rid))["streamingDeliveries"] == 1,
                       f"router {rid} to stream the message")
    finally:
        proc.kill()
        proc.wait(10)
    for rid in "ABC":  # the producer's loss aborts the stream at A, the abort travels on to B and C
        row = wait_until(lambda rid=rid: (r := router_row(line.url(rid)))["streamingDeliveries"] == 0 and r,
                         f"router {rid} to end the stream")
        assert row["streamsAborted"] == 1 and row["streamedDeliveries"] == 1
    # Nothing of it reached the consumer as a message, and what follows goes through.
    producer = Producer(line.url("A"), "stream.abort", count=1).start()
    consumer.wait(count=1, timeout=TIMEOUT)
    assert consumer.bodies == ["m0"]
    producer.close()


EDGE_LISTENER = "listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n}"


def test_streamed_messages_cross_edge_uplinks_both_ways(tmp_path):
    """Edge E1 on interior A, edge E2 on interior B: a client of E1 to a client of E2 crosses an uplink, the
    mesh and a downlink, every hop streaming (the uplinks' links are the edge's own link owner)."""
    mesh = Mesh(tmp_path, None)
    try:
        mesh.add("A", sections=EDGE_LISTENER)
        mesh.add("B", connect={"A": 1}, sections=EDGE_LISTENER)
        for edge, interior in (("E1", "A"), ("E2", "B")):
            port = mesh[interior].ports["edge"]
            mesh.add(edge, listen=False, mode="edge",
                     sections=f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {port}\n"
                              "    role: edge\n    retryDelaySeconds: 0.2\n}")
        mesh.wait_route("E1", "E2")
        traffic = Checked(mesh.url("E1"), mesh.url("E2"), "stream.edge", 6_000_000, 2)
        t = threading.Thread(target=Container(traffic).run, daemon=True)
        t.start()
        assert traffic.done.wait(TIMEOUT), f"accepted {traffic.accepted} of 2"
        t.join(TIMEOUT)
        assert traffic.bad == []
        assert traffic.digests == [(i, hashlib.sha256(b).hexdigest()) for i, b in enumerate(traffic.bodies)]
        for rid in ("E1", "A", "B", "E2"):
            assert router_row(mesh.url(rid))["streamedDeliveries"] == 2, rid
    finally:
        mesh.stop_all()


ROUTED_SIZE = 200_000_000  # bytes: three times RSS_BOUND_MB, so a router that buffered the rest fails

SLOW_CONTAINER = textwrap.dedent("""
    import hashlib, sys
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Slow(MessagingHandler):
        # A link route's container that stops reading its socket when the first bytes of a message
        # arrive, until a line comes on stdin; then prints the digest of what it received.
        def __init__(self):
            super().__init__(prefetch=1)
            self.stalled = False
        def on_start(self, event):
            event.container.listen(sys.argv[1])
            print("listening", flush=True)
        def on_delivery(self, event):
            if not self.stalled:
                self.stalled = True
                print("stalled", flush=True)
                sys.stdin.readline()  # the reactor's thread waits: nothing more is read from the router
            # (the message handler's own delivery handling runs after this one)
        def on_message(self, event):
            print("got", hashlib.sha256(event.message.body).hexdigest(), flush=True)

    Container(Slow()).run()
""")

ONE_BIG = textwrap.dedent("""
    import hashlib, sys
    from proton import Message
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class One(MessagingHandler):
        def __init__(self):
            super().__init__()
            self.body = bytes(range(256)) * (int(sys.argv[3]) // 256)
            self.sent = False
        def on_start(self, event):
            event.container.create_sender(sys.argv[1], sys.argv[2])
        def on_sendable(self, event):
            if not self.sent:
                self.sent = True
                print("digest", hashlib.sha256(self.body).hexdigest(), flush=True)
                event.sender.send(Message(body=self.body))
        def on_settled(self, event):
            print("outcome", event.delivery.remote_state, flush=True)
            event.connection.close()

    Container(One()).run()
""")


def test_link_routed_stream_from_a_neighbour_is_bounded_by_its_session_window(tmp_path):
    """A link-routed message crossing a neighbour router toward a container that stopped reading: the
    router next to the container holds the stream, and since a neighbour's socket is never paused, only
    the routed link's session window (8 MiB) keeps the rest of the message out of its memory; the
    router the producer is on then holds the stream and stops reading the producer. Without that window
    the router next to the container took the whole message into memory."""
    from tests.system.procstat import rss_mib
    from tools.daemons import free_port

    port = free_port()
    container = subprocess.Popen([sys.executable, "-c", SLOW_CONTAINER, f"127.0.0.1:{port}"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    mesh = Mesh(tmp_path, None)
    routes = "\n\n".join(f"linkRoute {{\n    name: lr-{d}\n    prefix: routed\n    direction: {d}\n"
                         "    connection: slow\n}" for d in ("in", "out"))
    producer = None
    try:
        assert container.stdout.readline().strip() == "listening"
        mesh.add("A", sections=routes)
        mesh.add("B", connect={"A": 1}, sections=routes + (
            f"\n\nconnector {{\n    name: slow\n    host: 127.0.0.1\n    port: {port}\n"
            "    role: route-container\n    retryDelaySeconds: 0.2\n}"))
        mesh.wait_converged()
        before = {rid: rss_mib(mesh[rid].pid) for rid in "AB"}
        producer = subprocess.Popen([sys.executable, "-c", ONE_BIG, mesh.url("A"), "routed.big", str(ROUTED_SIZE)],
                                    stdout=subprocess.PIPE, text=True)
        digest = producer.stdout.readline().split()
        assert digest[0] == "digest", digest
        assert container.stdout.readline().strip() == "stalled"
        # Both routers hold the stream: B for the container, A because B's session window closed.
        for rid in "BA":
            wait_until(lambda rid=rid: router_row(mesh.url(rid))["streamsHeldOff"] == 1,
                       f"router {rid} to hold the routed stream")
        # The held state is stable (the container reads nothing): A stays held and neither router grows.
        # Without B's bounded window A is held only now and then, and B grows by the rest of the message.
        for _ in range(20):
            grown = {rid: rss_mib(mesh[rid].pid) - before[rid] for rid in "AB"}
            assert max(grown.values()) < RSS_BOUND_MB, grown
            assert router_row(mesh.url("A"))["streamsHeldOff"] == 1
            time.sleep(0.05)
        container.stdin.write("go\n")
        container.stdin.flush()
        got = container.stdout.readline().split()
        assert got == ["got", digest[1]]
        assert producer.stdout.readline().split() == ["outcome", "36"]  # accepted (proton's code)
        for rid in "AB":
            row = router_row(mesh.url(rid))
            assert row["streamedDeliveries"] == 1 and row["streamsHeldOff"] == 0, (rid, row)
    finally:
        for proc in (producer, container):
            if proc is not None:
                proc.kill()
                proc.wait(10)
        mesh.stop_all()


def test_a_management_request_large_enough_to_stream_is_rejected_and_management_carries_on(tmp_path):
    """$management takes whole messages: a request that streams (over 256 KiB) is read, dropped and rejected
    with amqp:resource-limit-exceeded, never held whole; the next request is answered."""
    mesh = Mesh(tmp_path, None)
    try:
        mesh.add("A")
        url = mesh.url("A")

        def huge(i):
            return Message(address="$management", reply_to="nowhere",
                           properties={"operation": "QUERY", "type": "org.amqp.management", "name": "self",
                                       "entityType": "org.apache.qpid.dispatch.router"},
                           body={"attributeNames": ["id"], "pad": "x" * 3_000_000})

        p = Producer(url, "$management", count=1, message_fn=huge).start()
        p.wait(TIMEOUT)
        assert p.outcomes["rejected"] == 1, p.outcomes
        [(_i, condition, description)] = p.rejections
        assert condition == "amqp:resource-limit-exceeded" and "$management" in description
        assert router_row(url)["id"] == "A"
        p.close()
    finally:
        mesh.stop_all()


MIXED_SIZES = (100, 300_000, 100, 3_000_000, 50_000, 100, 700_000, 10, 1_500_000)


def test_small_and_large_messages_mixed_on_two_addresses_all_cross_a_line_in_order(line):
    """Small messages queued behind a large one that streams and is held off (its consumer's connection
    has no room): they arrived whole while it was held, so no further event came for them when it ended,
    and they sat in the engine; the line stalled within the first few messages. Every message arrives, in
    order, with its size."""
    line.wait_route("A", "C")
    n = 45
    consumers = [Consumer(line.url("C"), f"mixed.{k}", credit=5 + 10 * k).start() for k in range(2)]
    for c in consumers:
        c.wait_ready()
    line.wait_route("A", "C")

    def size(k, i):
        return MIXED_SIZES[(i + 3 * k) % len(MIXED_SIZES)]

    def maker(k):
        return lambda i: Message(id=i, address=f"mixed.{k}", body=bytes([65 + i % 26]) * size(k, i))

    producers = [Producer(line.url("A"), f"mixed.{k}", count=n, message_fn=maker(k)).start() for k in range(2)]
    for k, (p, c) in enumerate(zip(producers, consumers)):
        c.wait(TIMEOUT, count=n)
        p.wait(TIMEOUT)
        assert p.outcomes["accepted"] == n, p.outcomes
        assert [m.id for m in c.messages] == list(range(n))
        assert [len(m.body) for m in c.messages] == [size(k, i) for i in range(n)]
        p.close()
        c.close()
