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

import pytest
from proton import Message
from proton.reactor import LinkOption
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
                   ready=None) -> str:
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
            sender.send(Message(body=f"m{i}"), timeout=TIMEOUT)   # raises on timeout or a non-accepted outcome
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


def test_unsettled_multicast_to_three_accepting_consumers_settles_across_a_mesh(square):
    """Consumers on A, B and C (C two hops from A by two equal paths), the producer on A: each accepts
    every message, and each of the producer's sends returns accepted."""
    address = "multicast/mesh"
    consumers = [Consumer(square.url(r), address, credit=5).start() for r in "ABC"]
    _wait_known(square, "A", address, 3)
    _send_blocking(square.url("A"), address, N_MULTICAST)
    _check_multicast(consumers)


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
