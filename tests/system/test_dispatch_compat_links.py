"""Dispatch compatibility (issue 13): link routes and auto-links behave as in Qpid Dispatch 1.19.

One real tdrouterd (module-scoped) with route-container listeners; the route's container and the clients
are real proton containers (:class:`Peer`) that see every frame's payload and delivery tag as bytes.

* Empty payloads on a link route (DISPATCH-1988): a transfer with no bytes at all, a message whose body
  is empty and one with no body section pass intact both ways (same bytes, same delivery tag, the
  outcome back), pre-settled or not. Dispatch 1.19 itself rejects the transfer with no bytes
  (``amqp:decode-error``; router_node.c checks every link-routed delivery down to its header); we pass
  it, as a link route leaves the messages to the container (a deliberate difference).
* Transactions (DISPATCH-1453): a coordinator attach follows a link route for ``$coordinator``
  (Dispatch's terminus.c names every coordinator terminus ``$coordinator``); a declare and a discharge reach
  the container and its ``declared`` outcome, with the transaction id, comes back. Without such a route the
  attach is refused with a null target and ``amqp:precondition-failed`` (connections.c), also when
  ``defaultDistribution`` is ``unavailable`` (the DISPATCH-1453 fix).
* Auto-links: a management DELETE detaches the auto-link's link with no error (route_control.c detaches a
  deactivated auto-link with no condition); an auto-link whose ``connection`` names a listener attaches on
  every connection accepted there, and an ``out`` one shares messages fairly between them.
"""

from __future__ import annotations

import itertools
import socket
import time
import uuid

import pytest
from proton import Data, Delivery, Described, Link, Message, Terminus, symbol, uint, ulong
from proton.handlers import IncomingMessageHandler
from proton.utils import BlockingConnection

from tests.system.clients import Client, close_all
from tests.system.harness import RouterProcess
from tests.system.meshharness import Mesh
from wire import management as wm

TIMEOUT = 20.0
DECLARED = 0x33  # AMQP 1.0 §4.5.5 declared outcome
DECLARE = 0x31  # §4.5.2
DISCHARGE = 0x32  # §4.5.3
TRANSACTIONAL_STATE = 0x34  # §4.5.6
AUTO_LINK_TYPE = "org.apache.qpid.dispatch.router.config.autoLink"

# Transfers with an empty payload: no bytes at all (DISPATCH-1988's empty transfer), and bare messages
# with an empty body or none: the header and properties proton writes for Message(), an empty data
# section, a null amqp-value, and properties alone.
EMPTY_PAYLOADS = (
    b"",
    bytes(Message().encode()),
    bytes(Message(body=b"").encode()),
    b"\x00Sw@",
    bytes(Message(subject="no body").encode()),
)
FAIR_MESSAGES = 100

SECTIONS = """\
listener {
    name: lrpeer
    host: 127.0.0.1
    port: 0
    role: route-container
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
listener {
    name: alpeer
    host: 127.0.0.1
    port: 0
    role: route-container
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
listener {
    name: delpeer
    host: 127.0.0.1
    port: 0
    role: route-container
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
linkRoute {
    prefix: lr
    direction: in
    connection: lrpeer
}
linkRoute {
    prefix: lr
    direction: out
    connection: lrpeer
}
linkRoute {
    prefix: $coordinator
    direction: in
    connection: lrpeer
}
autoLink {
    name: fair-out
    address: fair
    direction: out
    connection: alpeer
}
autoLink {
    name: del-me
    address: going
    direction: out
    connection: delpeer
}
"""

_names = itertools.count(1)


class Peer(Client):
    """One proton connection that answers every attach the router sends it (mirroring the termini, a
    coordinator target included), records what arrives as bytes with its delivery tag, answers declares
    like a transaction coordinator, and sends raw payloads on links it attaches."""

    def __init__(self, url: str, *, container_id: str | None = None, credit: int = 200):
        super().__init__(url, container_id=container_id)
        # Deliveries are read here as bytes, not decoded into messages.
        self.handlers = [h for h in self.handlers if not isinstance(h, IncomingMessageHandler)]
        self.credit = credit
        self.links: dict[str, Link] = {}  # client thread only
        self.answered: list[str] = []  # names of attaches the router made to us, answered
        self.target_types: dict[str, int] = {}  # name of such an attach -> the type of its target
        self.remote_states: list[tuple] = []  # (state, data) each arriving delivery carried
        self.opened: dict[str, tuple] = {}  # our attaches the router answered: name -> (source, target)
        self.received: list[tuple[str, bytes, bytes, bool]] = []  # (link, tag, payload, pre-settled)
        self.outcomes: dict[bytes, tuple] = {}  # tag of a sent delivery -> (state, condition, data)
        self.closed: dict[str, tuple | None] = {}  # link name -> the router's detach condition
        self.txn_ids = itertools.count(1)

    def _open_links(self, container, conn) -> None:
        pass

    def _ready(self) -> bool:
        return self.connected.is_set()

    # -- what the router attaches to us --------------------------------------------------------------
    def on_link_opening(self, event) -> None:
        link = event.link
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        with self._cond:
            self.links[link.name] = link
            self.answered.append(link.name)
            self.target_types[link.name] = link.remote_target.type
            self._cond.notify_all()
        if link.is_receiver:
            link.flow(self.credit)

    # -- what we attach ------------------------------------------------------------------------------
    def attach(self, name: str, address: str | None, *, sender: bool, presettled: bool = False,
               coordinator: bool = False) -> None:
        def go():
            session = self.conn.session()
            session.open()
            link = session.sender(name) if sender else session.receiver(name)
            node = link.target if sender else link.source
            if coordinator:
                link.target.type = Terminus.COORDINATOR
                link.target.capabilities.put_array(False, Data.SYMBOL)
                link.target.capabilities.enter()
                link.target.capabilities.put_symbol(symbol("amqp:local-transactions"))
                link.target.capabilities.exit()
            else:
                node.address = address
            if presettled:
                link.snd_settle_mode = Link.SND_SETTLED
            link.open()
            if not sender:
                link.flow(self.credit)
            self.links[name] = link
        self.call(go)

    def on_link_opened(self, event) -> None:
        link = event.link
        with self._cond:
            source, target = link.remote_source, link.remote_target
            self.opened[link.name] = (source.type, source.address, target.type, target.address)
            self._cond.notify_all()

    def on_link_remote_close(self, event) -> None:
        cond = event.link.remote_condition
        with self._cond:
            self.closed[event.link.name] = (cond.name, cond.description) if cond is not None else None
        super().on_link_remote_close(event)
        if not event.link.state & Link.LOCAL_CLOSED:
            event.link.close()

    def send(self, name: str, payloads, *, presettled: bool = False, state=None) -> list[bytes]:
        """Send each payload (bytes) as one delivery on our link ``name``; returns the tags."""
        tags = [f"{name}-{next(_names)}".encode() for _ in payloads]

        def go():
            link = self.links[name]
            for tag, payload in zip(tags, payloads):
                dlv = link.delivery(tag)
                link.send(payload)
                link.advance()
                if state is not None:
                    dlv.local.data = state[1]
                    dlv.update(state[0])
                if presettled:
                    dlv.settle()
        self.call(go)
        return tags

    # -- deliveries ----------------------------------------------------------------------------------
    def on_delivery(self, event) -> None:
        dlv = event.delivery
        link = dlv.link
        if link.is_sender:
            if dlv.remote_state or dlv.settled:
                cond = dlv.remote.condition
                with self._cond:
                    self.outcomes[bytes(dlv.tag, "latin-1") if isinstance(dlv.tag, str) else dlv.tag] = (
                        dlv.remote_state, (cond.name, cond.description) if cond else None, dlv.remote.data)
                    self._cond.notify_all()
                if dlv.settled:
                    dlv.settle()
            return
        if not dlv.readable or dlv.partial:
            return
        payload = link.recv(dlv.pending) or b""
        link.advance()
        tag = bytes(dlv.tag, "latin-1") if isinstance(dlv.tag, str) else dlv.tag
        presettled = dlv.settled
        with self._cond:
            self.received.append((link.name, tag, payload, presettled))
            self.remote_states.append((dlv.remote_state, dlv.remote.data if dlv.remote_state else None))
            self._cond.notify_all()
        if not presettled:
            self._answer(link, dlv, payload)
        dlv.settle()
        link.flow(1)

    def _answer(self, link, dlv, payload: bytes) -> None:
        """Accept; a coordinator declares a transaction (declared, with an id) and accepts a discharge."""
        if link.target.type == Terminus.COORDINATOR:
            msg = Message()
            msg.decode(payload)
            body = msg.body
            if isinstance(body, Described) and body.descriptor == symbol("amqp:declare:list"):
                dlv.local.data = [f"txn-{next(self.txn_ids)}".encode()]
                dlv.update(DECLARED)
                return
        dlv.update(Delivery.ACCEPTED)

    # -- test-thread helpers -------------------------------------------------------------------------
    def wait_answered(self, name_part: str, count: int = 1) -> list[str]:
        self.wait_for(lambda: sum(name_part in n for n in self.answered) >= count, TIMEOUT,
                      f"{count} attach(es) of {name_part}")
        return [n for n in self.answered if name_part in n]

    def wait_opened(self, name: str) -> tuple:
        self.wait_for(lambda: name in self.opened or name in self.closed, TIMEOUT, f"the answer to {name}")
        return self.opened.get(name)

    def wait_received(self, count: int) -> list:
        self.wait_for(lambda: len(self.received) >= count, TIMEOUT, f"{count} deliveries")
        return list(self.received)

    def wait_outcomes(self, tags) -> list:
        self.wait_for(lambda: all(t in self.outcomes for t in tags), TIMEOUT, f"outcomes of {tags}")
        return [self.outcomes[t] for t in tags]


def management(url: str, operation: str, **kw) -> wm.Response:
    connection = BlockingConnection(url, timeout=TIMEOUT)
    try:
        receiver = connection.create_receiver(None, dynamic=True, credit=1)
        sender = connection.create_sender("$management")
        msg = Message()
        msg.decode(wm.build_request(operation, reply_to=receiver.remote_source.address,
                                    correlation_id=str(uuid.uuid4()), **kw))
        sender.send(msg, timeout=TIMEOUT)
        reply = receiver.receive(timeout=TIMEOUT)
        if receiver.fetcher.unsettled:  # routers send replies pre-settled
            receiver.accept()
        return wm.parse_response(reply)
    finally:
        connection.close()


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    r = RouterProcess(tmp_path_factory.mktemp("links"), SECTIONS, router_id="Links").start()
    yield r
    close_all()
    assert r.stop() == 0, r.stderr_text()


@pytest.fixture(scope="module")
def container(router):
    """The link routes' container, connected to the route-container listener ``lrpeer``."""
    peer = Peer(router.url_for("lrpeer"), container_id="lr-broker").start()
    yield peer
    peer.close()


@pytest.fixture
def client(router):
    peer = Peer(router.url).start()
    yield peer
    peer.close()


def _routed_pair(client: Peer, container: Peer, address: str, *, client_sends: bool, presettled: bool):
    name = f"{address}-{next(_names)}"
    client.attach(name, address, sender=client_sends, presettled=presettled)
    container.wait_answered(name)
    assert client.wait_opened(name) is not None, client.closed
    return name


@pytest.mark.parametrize("presettled", [False, True], ids=["unsettled", "presettled"])
def test_empty_payloads_pass_a_link_route_intact_both_ways(client, container, presettled):
    # client -> container
    name = _routed_pair(client, container, "lr.in", client_sends=True, presettled=presettled)
    before = len(container.received)
    tags = client.send(name, EMPTY_PAYLOADS, presettled=presettled)
    got = container.wait_received(before + len(tags))[before:]
    assert [(n, t, p, s) for n, t, p, s in got] == [(name, t, p, presettled)
                                                    for t, p in zip(tags, EMPTY_PAYLOADS)]
    if not presettled:
        assert [o[0] for o in client.wait_outcomes(tags)] == [Delivery.ACCEPTED] * len(tags)

    # container -> client
    name = _routed_pair(client, container, "lr.out", client_sends=False, presettled=False)
    before = len(client.received)
    tags = container.send(name, EMPTY_PAYLOADS, presettled=presettled)
    got = client.wait_received(before + len(tags))[before:]
    assert got == [(name, t, p, presettled) for t, p in zip(tags, EMPTY_PAYLOADS)]
    if not presettled:
        assert [o[0] for o in container.wait_outcomes(tags)] == [Delivery.ACCEPTED] * len(tags)


def test_a_coordinator_follows_the_coordinator_link_route_and_transactions_declare(client, container):
    name = f"txn-ctrl-{next(_names)}"
    client.attach(name, None, sender=True, coordinator=True)
    container.wait_answered(name)
    assert container.target_types[name] == Terminus.COORDINATOR
    source_type, _, target_type, _ = client.wait_opened(name)
    assert target_type == Terminus.COORDINATOR, client.closed
    declare = bytes(Message(body=Described(symbol("amqp:declare:list"), [None])).encode())
    [tag] = client.send(name, [declare])
    [(state, _, data)] = client.wait_outcomes([tag])
    assert (state, data) == (DECLARED, [b"txn-1"])

    # A message sent under the transaction on a routed link carries its transactional state through.
    sender = _routed_pair(client, container, "lr.txn", client_sends=True, presettled=False)
    before = len(container.received)
    [tag] = client.send(sender, [bytes(Message(body="in txn").encode())],
                        state=(TRANSACTIONAL_STATE, [b"txn-1"]))
    container.wait_received(before + 1)
    assert container.remote_states[-1] == (TRANSACTIONAL_STATE, [b"txn-1"])
    discharge = bytes(Message(body=Described(symbol("amqp:discharge:list"), [b"txn-1", False])).encode())
    [tag] = client.send(name, [discharge])
    assert client.wait_outcomes([tag])[0][0] == Delivery.ACCEPTED


REFUSED_COORDINATOR = ("amqp:precondition-failed",
                       "The router can't coordinate transactions by itself, a linkRoute to a coordinator must be "
                       "configured to use transactions.")


@pytest.mark.parametrize("router_extra", ["", "defaultDistribution: unavailable"], ids=["plain", "unavailable"])
def test_a_coordinator_without_a_link_route_is_refused_as_dispatch_refuses_it(router_factory, router_extra):
    plain = router_factory(router_extra=router_extra)
    peer = Peer(plain.url).start()
    try:
        name = "txn-ctrl"
        peer.attach(name, None, sender=True, coordinator=True)
        peer.wait_for(lambda: name in peer.closed, TIMEOUT, "the refusal")
        assert peer.closed[name] == REFUSED_COORDINATOR
        assert peer.opened[name][2] == Terminus.UNSPECIFIED  # the null target of a refusal
    finally:
        peer.close()


def test_deleting_an_auto_link_detaches_its_link_without_an_error(router):
    peer = Peer(router.url_for("delpeer")).start()
    try:
        [name] = peer.wait_answered("del-me")
        response = management(router.url, "DELETE", type=AUTO_LINK_TYPE, name="del-me")
        assert response.status == wm.NO_CONTENT, response
        peer.wait_for(lambda: name in peer.closed, TIMEOUT, "the auto-link's detach")
        assert peer.closed[name] is None
        assert peer.link_errors == []
    finally:
        peer.close()


def test_an_auto_link_on_a_listener_attaches_on_every_connection_and_shares_fairly(router):
    a = Peer(router.url_for("alpeer"), container_id="fair-a").start()
    b = Peer(router.url_for("alpeer"), container_id="fair-b").start()
    producer = Peer(router.url).start()
    try:
        a.wait_answered("fair-out")
        b.wait_answered("fair-out")
        producer.attach("fair-producer", "fair", sender=True)
        producer.wait_opened("fair-producer")
        payloads = [bytes(Message(body=i).encode()) for i in range(FAIR_MESSAGES)]
        tags = producer.send("fair-producer", payloads)
        outcomes = producer.wait_outcomes(tags)
        assert [o[0] for o in outcomes] == [Delivery.ACCEPTED] * FAIR_MESSAGES
        got_a, got_b = len(a.received), len(b.received)
        assert got_a + got_b == FAIR_MESSAGES
        assert min(got_a, got_b) >= FAIR_MESSAGES * 3 // 10, (got_a, got_b)  # 50/50 when idle
    finally:
        for p in (producer, a, b):
            p.close()


class RawAmqp:
    """AMQP frames written and read by hand on a socket: what DISPATCH-1988 needs and no proton client
    sends (empty transfers with ``more`` set, an empty transfer then an abort)."""

    def __init__(self, url: str):
        host, port = url.rsplit("/", 1)[-1].rsplit(":", 1)  # amqp://HOST:PORT
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        self.sock.sendall(b"AMQP\x00\x01\x00\x00")
        self.buffer = b""
        self.header_seen = False

    def frame(self, code: int, fields: list, payload: bytes = b"") -> None:
        data = Data()
        data.put_object(Described(ulong(code), fields))
        body = bytes(data.encode()) + payload
        self.sock.sendall((len(body) + 8).to_bytes(4, "big") + b"\x02\x00\x00\x00" + body)

    def transfer(self, delivery_id: int, tag: bytes, payload: bytes = b"", *, more: bool = False,
                 aborted: bool = False) -> None:
        # handle, delivery-id, delivery-tag, message-format, settled, more, rcv-settle-mode, state, resume,
        # aborted (AMQP 1.0 §2.7.5)
        self.frame(0x14, [uint(0), uint(delivery_id), tag, uint(0), False, more, None, None, False, aborted],
                   payload)

    def read_until(self, predicate, what: str) -> list:
        """Performatives read (as (code, fields)) until ``predicate(all read so far)``."""
        seen: list = []
        deadline = time.monotonic() + TIMEOUT
        while not predicate(seen):
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {TIMEOUT} s; read {seen}")
            self.sock.settimeout(max(0.1, deadline - time.monotonic()))
            chunk = self.sock.recv(65536)
            if not chunk:
                raise AssertionError(f"the router closed the socket before {what}; read {seen}")
            self.buffer += chunk
            if not self.header_seen and len(self.buffer) >= 8:
                assert self.buffer[:8] == b"AMQP\x00\x01\x00\x00", self.buffer[:8]
                self.buffer, self.header_seen = self.buffer[8:], True
            while self.header_seen and len(self.buffer) >= 8:
                size = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) < size:
                    break
                body, self.buffer = self.buffer[self.buffer[4] * 4:size], self.buffer[size:]
                if body:
                    data = Data()
                    data.decode(body)
                    data.rewind()
                    data.next()
                    performative = data.get_object()
                    seen.append((int(performative.descriptor), performative.value))
        return seen

    def close(self) -> None:
        self.sock.close()


def test_empty_transfers_and_an_aborted_empty_delivery_on_a_link_route_as_in_dispatch_1988(router, container):
    """Dispatch's own DISPATCH-1988 sequence (system_tests_link_routes.py EmptyTransferTest): an empty
    transfer, then an empty one sent in two frames, then an empty one aborted, then a message. The router
    survives every one and the link goes on; the empty deliveries reach the container, the aborted one
    does not."""
    raw = RawAmqp(router.url)
    try:
        raw.frame(0x10, ["raw-1988"])  # open
        raw.frame(0x11, [None, uint(0), uint(1000), uint(1000)])  # begin
        # attach: name, handle, role (sender), snd/rcv-settle-mode, source, target
        raw.frame(0x12, ["raw-1988-link", uint(0), False, None, None, None, Described(ulong(0x29), ["lr.raw"])])
        raw.read_until(lambda seen: any(code == 0x13 and fields[6] for code, fields in seen),
                       "credit from the container")
        before = len(container.received)
        good = bytes(Message(body="after the empty ones").encode())
        raw.transfer(0, b"\x01")
        raw.transfer(1, b"\x02", more=True)
        raw.transfer(1, b"\x02")
        raw.transfer(2, b"\x03", more=True)
        raw.transfer(2, b"\x03", aborted=True)
        raw.transfer(3, b"\x04", good)
        settled_ids: set = set()

        def all_answered(seen) -> bool:
            for code, fields in seen:
                if code == 0x15:  # disposition: role, first, last, settled, state
                    assert fields[4].descriptor == 0x24, fields  # accepted
                    settled_ids.update(range(fields[1], (fields[2] if fields[2] is not None else fields[1]) + 1))
            return {0, 1, 3} <= settled_ids

        raw.read_until(all_answered, "the outcomes of deliveries 0, 1 and 3")
        got = container.wait_received(before + 3)[before:]
        assert [(tag, payload) for _, tag, payload, _ in got] == [(b"\x01", b""), (b"\x02", b""), (b"\x04", good)]
        assert 2 not in settled_ids
    finally:
        raw.close()
    assert router.proc.poll() is None


MESH_A = """\
listener {
    name: lrpeer
    host: 127.0.0.1
    port: 0
    role: route-container
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
linkRoute {
    prefix: $coordinator
    direction: in
    connection: lrpeer
}
"""
MESH_B = "linkRoute {\n    prefix: $coordinator\n    direction: in\n}\n"  # on every router, as older configs do


def test_a_coordinator_is_link_routed_across_a_mesh(tmp_path):
    """A client of B declares a transaction with the coordinator behind A."""
    mesh = Mesh(tmp_path, None)
    mesh.add("A", sections=MESH_A)
    mesh.add("B", connect={"A": 1}, sections=MESH_B)
    container = Peer(mesh["A"].url_for("lrpeer"), container_id="mesh-coordinator").start()
    client = Peer(mesh.url("B")).start()
    try:
        deadline = time.monotonic() + TIMEOUT
        for attempt in itertools.count(1):  # until B has learned A's route (qd:no-route-to-dest before)
            name = f"mesh-txn-ctrl-{attempt}"
            client.attach(name, None, sender=True, coordinator=True)
            client.wait_for(lambda: name in client.closed or client.opened.get(name, (0,) * 4)[2]
                            == Terminus.COORDINATOR, TIMEOUT, f"the answer to {name}")
            if name not in client.closed:
                break
            assert client.closed[name][0] == "qd:no-route-to-dest" and time.monotonic() < deadline, client.closed
            time.sleep(0.1)
        assert container.target_types[name] == Terminus.COORDINATOR
        [tag] = client.send(name, [bytes(Message(body=Described(symbol("amqp:declare:list"), [None])).encode())])
        [(state, _, data)] = client.wait_outcomes([tag])
        assert (state, data) == (DECLARED, [b"txn-1"])
    finally:
        client.close()
        container.close()
        mesh.stop_all()
