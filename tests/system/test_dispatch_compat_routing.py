"""Dispatch compatibility, routing behaviour (issue 13): what a Qpid Dispatch 1.19 user sees when sending
through a mesh must be what tdrouterd does.

* Unsettled multicast: the producer's delivery settles once every consumer has settled its copy, with the
  merged outcome (Dispatch 1.19 src/router_core/delivery.c, DISPATCH-1266), on one router and across a mesh.
* Anonymous senders get credit from their router at once, whatever the destinations (Dispatch 1.19
  src/router_core/connections.c): in a square of four routers, senders on A and D reach receivers on C.
* ``balanced`` across a line of routers splits as Dispatch's ``qdr_forward_balanced_CT``
  (src/router_core/forwarder.c) does.
* Chained waypoints (address phases 0 -> 1 -> 2) across a mesh, in series and in parallel, with Dispatch's
  per-phase address counters.

Clients are plain python-qpid-proton, as Dispatch's own tests and tools use: ``BlockingConnection`` for a
Dispatch-style client, the threaded clients of tests/system/clients.py where several run at once. Meshes are
module-scoped (one per shape) and every test uses addresses of its own.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid

import proton
import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, Container, EventInjector, LinkOption
from proton.utils import BlockingConnection

from tests.system.clients import Consumer, Producer, close_all
from tests.system.meshharness import Mesh
from wire import management as wm

pytestmark = pytest.mark.system

TIMEOUT = 30.0

ADDRESSES = """\
address {
    prefix: multicast
    distribution: multicast
}

address {
    prefix: balanced
    distribution: balanced
}"""


def _stop(mesh: Mesh) -> None:
    close_all()
    problems = []
    for name, r in mesh.routers.items():
        if r.proc is None or not r.is_running():
            continue
        code = r.stop()
        if code != 0:
            problems.append(f"{name} exited with {code}\n{r.stderr_text()[-3000:]}")
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def square(tmp_path_factory):
    """Four routers in a square: A - B - C - D - A (every link cost 1; A and C, B and D two hops apart)."""
    mesh = Mesh(tmp_path_factory.mktemp("square"), None, sections=ADDRESSES)
    mesh.add("A")
    mesh.add("B", connect={"A": 1})
    mesh.add("C", connect={"B": 1})
    mesh.add("D", listen=False, connect={"C": 1, "A": 1})
    yield mesh
    _stop(mesh)


@pytest.fixture
def standalone(router_factory):
    return router_factory(ADDRESSES)


def query(url: str, entity_type: str) -> list[dict]:
    """A management QUERY the way Dispatch's client sends it (a sender to ``$management``, a dynamic
    receiver for the reply): the rows as dicts."""
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        receiver = conn.create_receiver(None, dynamic=True, credit=1)
        sender = conn.create_sender("$management")
        msg = Message()
        msg.decode(wm.build_request("QUERY", type=wm.NODE_TYPE, name="self", entityType=entity_type,
                                    body={"attributeNames": []}, reply_to=receiver.remote_source.address,
                                    correlation_id=str(uuid.uuid4()), to=None))
        sender.send(msg, timeout=TIMEOUT)
        response = wm.parse_response(receiver.receive(timeout=TIMEOUT))
        assert response.status == wm.OK, response
        names = response.body["attributeNames"]
        return [dict(zip(names, row)) for row in response.body["results"]]
    finally:
        conn.close()


# -- unsettled multicast ------------------------------------------------------------------------------


def _send_blocking(url: str, address: str | None, n: int, *, dynamic_target: bool = False,
                   ready=None, to: str | None = None) -> str:
    """What a Dispatch user's script does: a ``BlockingConnection`` sender whose ``send`` returns only once
    the router has settled the delivery, and raises unless it was accepted. ``dynamic_target``: the
    sender asks the router for an address (a dynamic target); ``ready(address)`` is called once the
    sender is attached, before the first send. Returns the sender's target address."""
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender(address, options=DynamicTarget() if dynamic_target else None)
        target = sender.link.remote_target.address
        if ready is not None:
            ready(target)
        for i in range(n):
            sender.send(Message(address=to, body=f"m{i}"), timeout=TIMEOUT)   # raises unless accepted
        return target
    finally:
        conn.close()


class DynamicTarget(LinkOption):
    """A sender whose target is dynamic: the router gives it an address (what Dispatch's tests call an
    anonymous sender, tests/system_tests_distribution.py)."""

    def apply(self, link) -> None:
        link.target.dynamic = True
        link.target.address = None


N_MULTICAST = 20


def _check_multicast(consumers: list) -> None:
    for c in consumers:
        c.wait(TIMEOUT, count=N_MULTICAST)
        assert c.bodies == [f"m{i}" for i in range(N_MULTICAST)]
        assert c.settled_by_us == {"accept": N_MULTICAST}


def test_unsettled_multicast_to_three_accepting_consumers_settles_on_one_router(standalone):
    consumers = [Consumer(standalone.url, "multicast/local", credit=5).start() for _ in range(3)]
    _send_blocking(standalone.url, "multicast/local", N_MULTICAST)
    _check_multicast(consumers)


@pytest.mark.parametrize("producer_at, consumers_at", [("A", "ABC"), ("A", "BCD"), ("B", "DDD")])
def test_unsettled_multicast_to_three_accepting_consumers_settles_across_a_mesh(square, producer_at, consumers_at):
    """Three consumers on the square's routers (C is two hops from A by two equal paths, D two from B):
    each accepts every message once, and each of the producer's sends returns accepted."""
    address = f"multicast/mesh.{producer_at}.{consumers_at}"
    consumers = [Consumer(square.url(r), address, credit=5).start() for r in consumers_at]
    _wait_known(square, producer_at, address, len(set(consumers_at)))
    _send_blocking(square.url(producer_at), address, N_MULTICAST)
    _check_multicast(consumers)


class SettleSecond(LinkOption):
    """Dispatch's ``Link3Ack`` (tests/system_tests_multicast.py): unsettled sends, receiver settles second."""

    def apply(self, link) -> None:
        link.snd_settle_mode = proton.Link.SND_UNSETTLED
        link.rcv_settle_mode = proton.Link.RCV_SECOND


class Multicast3Ack(MessagingHandler):
    """Dispatch 1.19's MulticastUnsettled3Ack: three receivers that set an outcome and never settle, a
    sender that settles once it has an outcome. Done when the sender has ``n`` outcomes and the router has
    settled each receiver's ``n`` deliveries; the sender must not be settled first by the router (its
    link asked for rcv-settle-mode second), so settlements seen are exactly the receivers' 3n."""

    def __init__(self, sender_url: str, receiver_urls: list, address: str, n: int):
        super().__init__(prefetch=(n + 1) // 2, auto_accept=False, auto_settle=False)
        self.sender_url, self.receiver_urls, self.address, self.n = sender_url, receiver_urls, address, n
        self.sent = self.received = self.accepted = self.other_outcomes = 0
        self.settled_at_receivers = self.settled_at_sender = 0
        self.done = False
        self.receivers: list = []

    def on_start(self, event) -> None:
        self.timer = event.container.schedule(TIMEOUT, self)
        self.connections = [event.container.connect(url) for url in self.receiver_urls + [self.sender_url]]
        for i, conn in enumerate(self.connections[:-1]):
            self.receivers.append(event.container.create_receiver(conn, self.address, name=f"rx{i}",
                                                                  options=SettleSecond()))
        self.opened = 0

    def on_link_opened(self, event) -> None:
        if event.receiver in self.receivers:
            self.opened += 1
            if self.opened == len(self.receivers):  # every receiver attached: now the sender
                event.container.create_sender(self.connections[-1], self.address, name="tx",
                                              options=SettleSecond())

    def on_sendable(self, event) -> None:
        while event.sender.credit > 0 and self.sent < self.n:
            event.sender.send(Message(body=f"m{self.sent}"))
            self.sent += 1

    def on_message(self, event) -> None:
        self.received += 1
        event.delivery.update(proton.Delivery.ACCEPTED)
        if event.receiver.credit == 0:
            event.receiver.flow(1)

    def on_accepted(self, event) -> None:
        self.accepted += 1
        event.delivery.settle()
        self._check()

    def on_rejected(self, event) -> None:
        self.other_outcomes += 1
        event.delivery.settle()

    on_released = on_rejected

    def on_settled(self, event) -> None:
        if event.link.is_sender:
            self.settled_at_sender += 1
        else:
            self.settled_at_receivers += 1
        event.delivery.settle()
        self._check()

    def _check(self) -> None:
        if self.accepted == self.n and self.settled_at_receivers == 3 * self.n and not self.done:
            self.done = True
            self.timer.cancel()
            for conn in self.connections:
                conn.close()

    def on_timer_task(self, event) -> None:
        for conn in self.connections:
            conn.close()

    def run(self) -> "Multicast3Ack":
        Container(self).run()
        return self


def _three_ack(sender_url: str, receiver_urls: list, address: str) -> None:
    t = Multicast3Ack(sender_url, receiver_urls, address, N_MULTICAST).run()
    assert (t.done, t.sent, t.received, t.accepted, t.other_outcomes, t.settled_at_receivers,
            t.settled_at_sender) == (True, N_MULTICAST, 3 * N_MULTICAST, N_MULTICAST, 0, 3 * N_MULTICAST, 0), vars(t)


def test_unsettled_multicast_three_ack_on_one_router(standalone):
    """Receivers that set an outcome without settling (rcv-settle-mode second): the sender gets the merged
    outcome unsettled, settles, and only then is its delivery done; each receiver's delivery is settled
    by the router (Dispatch 1.19 src/router_core/delivery.c)."""
    _three_ack(standalone.url, [standalone.url] * 3, "multicast/3ack")


def test_unsettled_multicast_three_ack_across_a_mesh(square):
    address = "multicast/3ack.mesh"
    # Consumers on A, B and C known on D first; they stay (their copies accepted and settled at once), so
    # the three-ack receivers attach to routers that D already sends to.
    probes = [Consumer(square.url(r), address, credit=3 * N_MULTICAST).start() for r in "ABC"]
    _wait_known(square, "D", address, 3)
    _three_ack(square.url("D"), [square.url(r) for r in "ABC"], address)
    for c in probes:
        c.close()


# -- anonymous (dynamic-target) senders ---------------------------------------------------------------


@pytest.mark.parametrize("sender_router", ["A", "D"])
def test_dynamic_target_sender_reaches_a_receiver_on_another_router(square, sender_router):
    """Dispatch's AnonymousSenderTest (tests/system_tests_distribution.py, A->C and D->C): a sender with a
    dynamic target gets a mobile address from its router (``_$temp.<id>``, address_lookup_client.c); a
    receiver on C attaches to that address; every message sent arrives and is accepted."""
    receivers = []

    def attach_receiver(address):
        assert address and address.startswith("amqp:/_$temp."), address
        receivers.append(Consumer(square.url("C"), address, credit=10).start())

    _send_blocking(square.url(sender_router), None, 10, dynamic_target=True, ready=attach_receiver)
    [rx] = receivers
    rx.wait(TIMEOUT, count=10)
    assert rx.bodies == [f"m{i}" for i in range(10)]


def _wait_known(mesh: Mesh, at: str, address: str, routers: int, timeout: float = TIMEOUT) -> None:
    """Wait until router ``at`` knows ``routers`` routers with a consumer of mobile ``address`` (its
    ``router.address`` row counts them in ``remoteCount``, plus ``subscriberCount`` local ones)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        rows = query(mesh.url(at), "org.apache.qpid.dispatch.router.address")
        row = next((r for r in rows if r.get("name") == f"M0{address}"), None)
        last = row
        if row is not None and (row.get("remoteCount") or 0) + min(1, row.get("subscriberCount") or 0) >= routers:
            return
        time.sleep(0.1)
    raise AssertionError(f"{at} does not know {routers} routers for {address}: {last}")


@pytest.mark.parametrize("sender_router", ["A", "D"])
def test_anonymous_sender_reaches_a_receiver_on_another_router(square, sender_router):
    """A sender with no target address (messages carry ``to``) gets credit from its router at once, whatever
    the destinations (Dispatch 1.19 src/router_core/connections.c), and reaches a receiver two hops (A) or
    one hop (D) away."""
    address = f"anon.{sender_router}.C"
    rx = Consumer(square.url("C"), address, credit=10).start()
    _wait_known(square, sender_router, address, 1)
    _send_blocking(square.url(sender_router), None, 10, to=address)
    rx.wait(TIMEOUT, count=10)
    assert rx.bodies == [f"m{i}" for i in range(10)]


# -- balanced across a line of routers ------------------------------------------------------------------


@pytest.fixture(scope="module")
def weighted_line(tmp_path_factory):
    """A - B - C with link costs 10 (A-B) and 20 (B-C), as in Dispatch's tests/system_tests_distribution.py
    (its linear balanced tests): C is 30 from A."""
    mesh = Mesh(tmp_path_factory.mktemp("line"), None, sections=ADDRESSES)
    mesh.add("A")
    mesh.add("B", connect={"A": 10})
    mesh.add("C", listen=False, connect={"B": 20})
    yield mesh
    _stop(mesh)


@pytest.mark.parametrize("omit_middle, expected", [(True, (65, 0, 35)), (False, (55, 33, 12))],
                         ids=["middle-receiver-omitted", "three-receivers"])
def test_balanced_across_a_line_splits_as_dispatch(weighted_line, omit_middle, expected):
    """100 unsettled messages from a producer on A to receivers on A, (B,) C that never settle, each with
    credit for all 100 (so nothing waits undelivered): the split is fixed by Dispatch's algorithm alone
    (src/router_core/forwarder.c, qdr_forward_balanced_CT), as its own linear balanced tests assert.

    A local link weighs its undelivered + unsettled deliveries; a neighbour's data link the address's
    unsettled deliveries sent through it plus the path cost to the cheapest router behind it with a
    receiver; a remote candidate must be strictly lighter, so ties stay local.

    Middle receiver omitted: with a on A and c sent towards C (cost 30), A keeps a message while
    a <= c + 30: the first 31 stay on A (a = 31 > 0 + 30 sends the 32nd to C), then C and A alternate
    (c = 1: 31 <= 31 keeps one, and so on). 69 messages alternate starting with C: C 35, A 31 + 34 = 65.

    Three receivers: at A the neighbour B (cost 10) is the cheapest router behind the A-B link, so A
    keeps a message while a <= r + 10 (r: all sent to B): 11 stay, then 89 alternate starting with B:
    B's router gets 45, A 55. B gets them in transit and keeps one while b <= c + 20 (C is 20 from
    B): the first 21 stay, then 24 alternate starting with C: C 12, B 21 + 12 = 33.
    """
    address = f"balanced/line.{'omit' if omit_middle else 'all'}"
    on = ("A", "C") if omit_middle else ("A", "B", "C")
    receivers = {r: Consumer(weighted_line.url(r), address, credit=100, outcome="hold").start() for r in on}
    _wait_known(weighted_line, "A", address, len(on))
    if not omit_middle:
        _wait_known(weighted_line, "B", address, 2)
    producer = Producer(weighted_line.url("A"), address, count=100).start()
    producer.wait_sent(timeout=TIMEOUT)
    receivers["A"].wait_for(lambda: sum(c.received() for c in receivers.values()) == 100, TIMEOUT,
                            "all 100 messages at the receivers")
    counts = tuple(receivers[r].received() if r in receivers else 0 for r in "ABC")
    assert counts == expected


# -- chained waypoints ----------------------------------------------------------------------------------

CHAIN = """\
address {
    prefix: chain
    waypoint: yes
    ingressPhase: 0
    egressPhase: 2
}"""


class WaypointCapability(LinkOption):
    """Declares the link's node a waypoint ``qd.waypoint.N`` (on the source of a receiver, the target of a
    sender), as Artemis' broker connections and Dispatch's own waypoint tests do."""

    def __init__(self, ordinal: int):
        self.symbol = f"qd.waypoint.{ordinal}"

    def apply(self, link) -> None:
        node = link.source if link.is_receiver else link.target
        node.capabilities.put_array(False, proton.Data.SYMBOL)
        node.capabilities.enter()
        node.capabilities.put_symbol(self.symbol)
        node.capabilities.exit()


class Waypoint(MessagingHandler):
    """A plain proton container acting as waypoint N of ``address`` (what a broker queue between two
    phases does): it receives phase N-1, sends each message on as phase N, and accepts the one it received
    once the router has accepted the one it sent. Runs in its own thread; ``passed`` counts messages."""

    def __init__(self, url: str, address: str, ordinal: int, window: int = 20):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.url, self.address, self.ordinal, self.window = url, address, ordinal, window
        self.passed = 0
        self.bodies: set = set()  # the bodies of the messages passed on
        self.ready = threading.Event()
        self.errors: list = []
        self._held: dict = {}  # outgoing delivery -> the incoming one it carries
        self._backlog: collections.deque = collections.deque()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._injector = EventInjector()
        self._container = None

    def start(self) -> "Waypoint":
        self._thread.start()
        assert self.ready.wait(TIMEOUT), f"waypoint {self.ordinal} did not attach: {self.errors}"
        return self

    def _run(self) -> None:
        self._container = Container(self)
        self._container.selectable(self._injector)
        try:
            self._container.run()
        except Exception as exc:  # noqa: BLE001 - reported to the test
            self.errors.append(repr(exc))

    def on_start(self, event) -> None:
        self.conn = event.container.connect(self.url, reconnect=False)
        self.receiver = event.container.create_receiver(self.conn, self.address,
                                                        options=WaypointCapability(self.ordinal))
        self.sender = event.container.create_sender(self.conn, self.address,
                                                    options=WaypointCapability(self.ordinal))
        self.receiver.flow(self.window)

    def on_link_opened(self, event) -> None:
        if self.receiver.state & self.receiver.REMOTE_ACTIVE and self.sender.state & self.sender.REMOTE_ACTIVE:
            self.ready.set()

    def on_message(self, event) -> None:
        self._backlog.append((event.delivery, event.message))
        self._pump()

    def on_sendable(self, event) -> None:
        self._pump()

    def _pump(self) -> None:
        while self._backlog and self.sender.credit > 0:
            dlv, msg = self._backlog.popleft()
            self._held[self.sender.send(msg)] = (dlv, msg.body)

    def on_settled(self, event) -> None:
        held = self._held.pop(event.delivery, None)
        if held is None:
            return
        incoming, body = held
        self.bodies.add(body)
        incoming.update(incoming.ACCEPTED if event.delivery.remote_state == event.delivery.ACCEPTED
                        else incoming.RELEASED)
        incoming.settle()
        self.passed += 1
        self.receiver.flow(1)

    def on_link_error(self, event) -> None:
        self.errors.append(str(event.link.remote_condition))

    def on_waypoint_stop(self, event) -> None:
        self.conn.close()
        self._container.stop()

    def close(self) -> None:
        """Close the connection and end the thread (woken through the injector: proton's container is
        not to be called from another thread)."""
        if self._container is not None:
            self._injector.trigger(ApplicationEvent("waypoint_stop"))
            self._thread.join(TIMEOUT)
            self._injector.close()


@pytest.fixture(scope="module")
def chain_line(tmp_path_factory):
    """A - B - C (cost 1), every router with ``chain`` as a two-waypoint address (phases 0 -> 1 -> 2)."""
    mesh = Mesh(tmp_path_factory.mktemp("chain"), None, sections=ADDRESSES + "\n\n" + CHAIN)
    mesh.add("A")
    mesh.add("B", connect={"A": 1})
    mesh.add("C", listen=False, connect={"B": 1})
    yield mesh
    _stop(mesh)


def _address_rows(mesh: Mesh, address: str) -> dict:
    """router -> phase -> (deliveriesIngress, deliveriesEgress, deliveriesTransit) of ``M<phase><address>``."""
    out = {}
    for r in mesh.routers:
        rows = {row["name"]: row for row in query(mesh.url(r), "org.apache.qpid.dispatch.router.address")}
        out[r] = {phase: (row["deliveriesIngress"], row["deliveriesEgress"], row["deliveriesTransit"])
                  for phase in range(3) if (row := rows.get(f"M{phase}{address}")) is not None}
        out[r] = {p: c for p, c in out[r].items() if any(c)}
    return out


# Shapes: where the producer, the phase-1 waypoints, the phase-2 waypoints and the consumer are.
CHAIN_SHAPES = {
    "series-2-routers": ("A", ["B"], ["A"], "B"),
    "series-3-routers": ("A", ["B"], ["C"], "A"),
    "parallel-2-routers": ("A", ["A", "B"], ["B", "A"], "B"),
    "parallel-3-routers": ("A", ["B", "C"], ["C", "A"], "B"),
}


#: The line A - B - C: the routers a message crosses from one to another, both included.
LINE = "ABC"


def _path(src: str, dst: str) -> str:
    i, j = LINE.index(src), LINE.index(dst)
    return LINE[i:j + 1] if i <= j else LINE[j:i + 1][::-1]


def _expected_counters(legs_of: list) -> dict:
    """Dispatch's per-phase address counters for messages whose legs (phase 0, 1, 2) are given as (from
    router, to router): the router where a leg starts counts one deliveriesIngress (it came from a client
    or waypoint link), the router where it ends one deliveriesEgress (a copy to such a link), and every
    router of the path but the last one deliveriesTransit (a copy to the next router)."""
    counters = {r: {p: [0, 0, 0] for p in range(3)} for r in LINE}
    for legs in legs_of:
        for phase, (src, dst) in enumerate(legs):
            counters[src][phase][0] += 1
            counters[dst][phase][1] += 1
            for hop in _path(src, dst)[:-1]:
                counters[hop][phase][2] += 1
    return {r: {p: tuple(c) for p, c in phases.items() if any(c)} for r, phases in counters.items()}


@pytest.mark.parametrize("shape", list(CHAIN_SHAPES))
def test_chained_waypoints_across_a_mesh(chain_line, shape):
    """Every message passes each phase exactly once, in series (one waypoint per phase) and in parallel
    (two per phase, on different routers), and arrives once. The per-phase address counters (``router.address``
    rows ``M0chain...``, ``M1chain...``, ``M2chain...``) are Dispatch's (src/router_core/transfer.c
    qdr_link_forward_CT, forwarder.c): deliveriesIngress counts messages that came in on a client or waypoint
    link of that router, deliveriesEgress copies sent to such a link, deliveriesTransit copies sent to
    another router; the waypoints record which messages they passed, so the expected counts per router
    follow from the line's paths."""
    producer_at, first_at, second_at, consumer_at = CHAIN_SHAPES[shape]
    address = f"chain.{shape}"
    n = 200
    mesh = chain_line
    consumer = Consumer(mesh.url(consumer_at), address, credit=50).start()
    first = [Waypoint(mesh.url(r), address, 1).start() for r in first_at]
    second = [Waypoint(mesh.url(r), address, 2).start() for r in second_at]
    try:
        for phase, where in ((0, first_at), (1, second_at), (2, [consumer_at])):
            _wait_phase_known(mesh, producer_at if phase == 0 else "A", address, phase, set(where))
        producer = Producer(mesh.url(producer_at), address, count=n).start()
        producer.wait(TIMEOUT)
        assert producer.outcomes == {"accepted": n}
        consumer.wait(TIMEOUT, count=n)
        assert sorted(consumer.bodies, key=lambda b: int(b[1:])) == [f"m{i}" for i in range(n)]
        assert sum(w.passed for w in first) == n and sum(w.passed for w in second) == n
        if len(first) > 1:
            assert all(w.passed > 0 for w in first + second), [w.passed for w in first + second]
        assert not any(w.errors for w in first + second)
        rows = _address_rows(mesh, address)
    finally:
        for w in first + second:
            w.close()
    assert consumer.received() == n  # no duplicate arrived meanwhile
    legs_of = []
    for i in range(n):
        body = f"m{i}"
        [one] = [first_at[k] for k, w in enumerate(first) if body in w.bodies]
        [two] = [second_at[k] for k, w in enumerate(second) if body in w.bodies]
        legs_of.append(((producer_at, one), (one, two), (two, consumer_at)))
    expected = _expected_counters(legs_of)
    got = {r: {p: c for p, c in phases.items() if any(c)} for r, phases in rows.items()}
    assert got == expected


def _wait_phase_known(mesh: Mesh, at: str, address: str, phase: int, routers: set) -> None:
    deadline = time.monotonic() + TIMEOUT
    row = None
    while time.monotonic() < deadline:
        rows = {r["name"]: r for r in query(mesh.url(at), "org.apache.qpid.dispatch.router.address")}
        row = rows.get(f"M{phase}{address}")
        if row is not None:
            known = (row.get("remoteCount") or 0) + (1 if row.get("subscriberCount") else 0)
            if known >= len(routers):
                return
        time.sleep(0.1)
    raise AssertionError(f"{at} does not know phase {phase} of {address} on {routers}: {row}")
