"""Sockets-free test harness: proton engines wired together in memory.

Two kinds of endpoint can sit on either end of a :class:`Pipe`:

* :class:`Peer` -- a plain proton object-API endpoint (``proton.Connection`` + ``Transport`` +
  ``Collector``), a client by default (``server=True`` makes it accept whatever the other side opens).
  It carries small helpers to attach links, grant credit, send, read what arrived and settle.
* :class:`EngineSide` -- an :class:`wire.connection.EngineConnection` (the router's engines, or an
  ``EngineConnection(handler, settings, server=False)`` client).

:func:`pump` shuttles bytes both ways over every pipe until nothing moves any more.
:class:`RouterHarness` connects any number of peers to one :class:`router.core.Router`::

    h = RouterHarness()
    prod, cons = h.connect(), h.connect()
    rcv = cons.receiver("q", credit=10)
    snd = prod.sender("q")
    h.pump()
    d = prod.send(snd, body="hi")
    h.pump()
    [got] = cons.received(rcv)
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import proton
from proton import Delivery, Endpoint, Link, Message

from wire import raw
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection

_ids = itertools.count(1)

ACCEPTED = Delivery.ACCEPTED
REJECTED = Delivery.REJECTED
RELEASED = Delivery.RELEASED
MODIFIED = Delivery.MODIFIED

OUTCOME_NAMES = {0: "none", ACCEPTED: "accepted", REJECTED: "rejected", RELEASED: "released",
                 MODIFIED: "modified", Delivery.RECEIVED: "received"}


class AddressEntity(dict):
    """A router ``address`` entity for ``Router(address_entities=[...])``: a dict with .get and [key]."""

    def __init__(self, prefix=None, *, pattern=None, distribution=None, waypoint=None, ingressPhase=None,
                 egressPhase=None):
        super().__init__()
        for k, v in (("prefix", prefix), ("pattern", pattern), ("distribution", distribution),
                     ("waypoint", waypoint), ("ingressPhase", ingressPhase), ("egressPhase", egressPhase)):
            if v is not None:
                self[k] = v


def encode(msg: Message | None = None, **fields) -> bytes:
    """Encode a proton Message (or build one from keyword fields: body, address, annotations...)."""
    if msg is None:
        msg = Message(**fields)
    return msg.encode()


def decode(data: bytes) -> Message:
    m = Message()
    m.decode(data)
    return m


@dataclass
class Received:
    """One complete delivery read by a Peer receiver."""

    delivery: Delivery
    data: bytes

    @property
    def message(self) -> Message:
        return decode(self.data)

    @property
    def body(self):
        return self.message.body

    @property
    def settled(self) -> bool:
        """Settled by the sender (pre-settled, or settled after our outcome)."""
        return self.delivery.settled

    @property
    def tag(self):
        return self.delivery.tag


class Peer:
    """A proton object-API endpoint driven in memory (no reactor, no sockets)."""

    def __init__(self, *, server: bool = False, sasl: bool = True, container: str | None = None,
                 max_frame_size: int | None = None, idle_timeout: float | None = None,
                 offered_capabilities=None, hostname: str | None = None, auto_read: bool = True):
        self.server = server
        self.auto_read = auto_read  # False: receivers are left alone (tests read them with wire.raw)
        self.connection = proton.Connection()
        self.connection.container = container or f"peer-{next(_ids)}"
        if hostname:
            self.connection.hostname = hostname
        if offered_capabilities:
            self.connection.offered_capabilities = proton.SymbolList(list(offered_capabilities))
        self.transport = proton.Transport(proton.Transport.SERVER if server else proton.Transport.CLIENT)
        if max_frame_size:
            self.transport.max_frame_size = max_frame_size
        if idle_timeout:
            self.transport.idle_timeout = idle_timeout
        if sasl:
            s = self.transport.sasl()
            s.allowed_mechs("ANONYMOUS")
            if server:
                self.transport.require_auth(False)
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.events: list[int] = []  # event types seen (for tests that care)
        self._receivers: list[Link] = []
        self.links: dict[str, Link] = {}  # every link this peer attached or accepted, by name
        self._inbox: dict[str, list[Received]] = {}
        self._tags = itertools.count(1)
        self.session = None
        self.eof = False
        if not server:
            self.connection.open()
            self.session = self.connection.session()
            self.session.open()

    # -- bytes -------------------------------------------------------------------------------------
    def take_output(self) -> bytes | None:
        """Pending output bytes (b"" if none); None once the transport's head is closed."""
        self.process()
        p = self.transport.pending()
        if p < 0:
            return None
        if p == 0:
            return b""
        data = bytes(self.transport.peek(p))
        self.transport.pop(p)
        return data

    def feed(self, data: bytes) -> None:
        view = memoryview(bytes(data))
        while view:
            cap = self.transport.capacity()
            if cap < 0:
                return  # tail closed: the rest is dropped, like a dead socket
            if cap == 0:
                raise RuntimeError("peer transport has no input capacity")
            n = min(cap, len(view))
            self.transport.push(bytes(view[:n]))
            view = view[n:]
        self.process()

    def feed_eof(self) -> None:
        if not self.eof:
            self.eof = True
            try:
                self.transport.close_tail()
            except proton.TransportException:
                pass
            self.process()

    @property
    def finished(self) -> bool:
        return self.transport.closed

    # -- events ------------------------------------------------------------------------------------
    def process(self) -> None:
        """Drain the collector, open what the peer opened (server mode) and read complete deliveries."""
        while True:
            ev = self.collector.peek()
            if ev is None:
                break
            self.events.append(ev.type)
            self.collector.pop()
        c = self.connection
        if self.server:
            if c.state & Endpoint.LOCAL_UNINIT and c.state & Endpoint.REMOTE_ACTIVE:
                c.open()
            ssn = c.session_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
            while ssn:
                ssn.open()
                if self.session is None:
                    self.session = ssn
                ssn = ssn.next(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
            link = c.link_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
            while link:
                link.source.copy(link.remote_source)
                link.target.copy(link.remote_target)
                link.snd_settle_mode = link.remote_snd_settle_mode
                link.open()
                self.links[link.name] = link
                if link.is_receiver:
                    self._track(link)
                link = link.next(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
        if not self.auto_read:
            return
        for rcv in self._receivers:
            while True:
                d = rcv.current
                if d is None or not d.readable:
                    break
                if d.aborted:
                    rcv.advance()
                    d.settle()
                    continue
                if d.partial:
                    break
                data = bytes(rcv.recv(d.pending) or b"")
                rcv.advance()
                self._inbox[rcv.name].append(Received(d, data))

    def _track(self, rcv: Link) -> None:
        self._receivers.append(rcv)
        self._inbox.setdefault(rcv.name, [])

    # -- links ---------------------------------------------------------------------------------------
    def sender(self, address: str | None = None, *, name: str | None = None, settled: bool = False,
               open: bool = True) -> proton.Sender:
        """Attach a sender; ``address=None`` makes it anonymous (null target address)."""
        snd = self.session.sender(name or f"snd-{next(_ids)}")
        if address is not None:
            snd.target.address = address
        snd.source.address = snd.name
        if settled:
            snd.snd_settle_mode = Link.SND_SETTLED
        if open:
            snd.open()
        self.links[snd.name] = snd
        return snd

    def receiver(self, address: str | None = None, *, credit: int = 0, name: str | None = None,
                 dynamic: bool = False, settled: bool = False, open: bool = True) -> proton.Receiver:
        rcv = self.session.receiver(name or f"rcv-{next(_ids)}")
        if dynamic:
            rcv.source.dynamic = True
        elif address is not None:
            rcv.source.address = address
        rcv.target.address = rcv.name
        if settled:
            rcv.snd_settle_mode = Link.SND_SETTLED
        if open:
            rcv.open()
        if credit:
            rcv.flow(credit)
        self.links[rcv.name] = rcv
        self._track(rcv)
        return rcv

    # -- messages ----------------------------------------------------------------------------------
    def next_tag(self) -> bytes:
        return b"t%d" % next(self._tags)

    def send(self, snd: proton.Sender, msg: Message | bytes | None = None, *, settled: bool = False,
             tag=None, **fields) -> Delivery:
        """Send one message (a Message, raw bytes, or Message(**fields)); returns the delivery."""
        if msg is None:
            msg = Message(**fields)
        data = msg if isinstance(msg, (bytes, bytearray, memoryview)) else msg.encode()
        d = snd.delivery(tag if tag is not None else self.next_tag())
        snd.send(bytes(data))
        snd.advance()
        if settled:
            d.settle()
        return d

    def received(self, rcv: proton.Receiver, *, clear: bool = False) -> list[Received]:
        got = self._inbox[rcv.name]
        if clear:
            out = list(got)
            got.clear()
            return out
        return got

    def bodies(self, rcv: proton.Receiver) -> list:
        return [r.body for r in self._inbox[rcv.name]]


class ConsumerHandler(ConnectionHandler):
    """Handler for an ``EngineConnection(handler, settings, server=False)`` client: on open it attaches one
    receiver to ``address`` with ``credit``; every complete delivery is recorded (bytes) and, unless
    ``auto_accept`` is False, accepted and settled with raw engine calls."""

    def __init__(self, address: str, credit: int = 100, auto_accept: bool = True):
        self.address = address
        self.credit = credit
        self.auto_accept = auto_accept
        self.messages: list[bytes] = []
        self.deliveries: list = []  # raw delivery pointers (only while unsettled when auto_accept=False)
        self.opens = 0
        self.closes = 0

    @property
    def bodies(self) -> list:
        return [decode(m).body for m in self.messages]

    def on_connection_open(self, conn: EngineConnection) -> None:
        self.opens += 1
        ssn = conn.connection.session()
        ssn.open()
        rcv = ssn.receiver(f"consumer-{self.opens}")
        rcv.source.address = self.address
        rcv.target.address = rcv.name
        rcv.open()
        rcv.flow(self.credit)
        conn.wake()

    def on_delivery(self, conn: EngineConnection, d) -> None:
        if not raw.delivery_readable(d) or raw.delivery_partial(d):
            return
        link = raw.delivery_link(d)
        self.messages.append(raw.recv_all(link))
        raw.link_advance(link)
        if self.auto_accept:
            raw.delivery_update(d, raw.ACCEPTED)
            raw.delivery_settle(d)
        else:
            self.deliveries.append(d)
        conn.wake()

    def on_connection_close(self, conn: EngineConnection) -> None:
        self.closes += 1


def engine_client(handler: ConnectionHandler, **settings_kw) -> EngineConnection:
    """An EngineConnection client (server=False) for RouterHarness.connect() or a Pipe."""
    settings_kw.setdefault("container_id", f"engine-client-{next(_ids)}")
    return EngineConnection(handler, ConnectionSettings(**settings_kw), server=False)


# -- outcomes ----------------------------------------------------------------------------------------

def settle(d: Delivery | Received, outcome=ACCEPTED, *, settle: bool = True, condition: str | None = None,
           description: str | None = None, failed: bool | None = None, undeliverable: bool | None = None,
           annotations: dict | None = None) -> None:
    """Set an outcome on a delivery (with the rejected/modified details) and settle it (by default)."""
    if isinstance(d, Received):
        d = d.delivery
    if condition is not None:
        d.local.condition = proton.Condition(condition, description)
    if failed is not None:
        d.local.failed = failed
    if undeliverable is not None:
        d.local.undeliverable = undeliverable
    if annotations is not None:
        d.local.annotations = annotations
    if outcome:
        d.update(outcome)
    if settle:
        d.settle()


def outcome(d: Delivery) -> dict:
    """The remote outcome of a delivery as a plain dict (for assertions)."""
    st = d.remote_state
    out = {"state": OUTCOME_NAMES.get(st, st), "settled": d.settled}
    if st == REJECTED:
        c = d.remote.condition
        out["condition"] = (c.name, c.description) if c is not None else None
    elif st == MODIFIED:
        out["failed"] = d.remote.failed
        out["undeliverable"] = d.remote.undeliverable
        out["annotations"] = d.remote.annotations
    return out


# -- pipes and pumping ---------------------------------------------------------------------------------

class EngineSide:
    """Adapts an EngineConnection to the Pipe interface (process, then take output, like the driver)."""

    def __init__(self, engine: EngineConnection):
        self.engine = engine
        self.eof = False

    def take_output(self) -> bytes | None:
        self.engine.process()
        out = self.engine.take_output()
        return None if out is None else bytes(out)

    def feed(self, data: bytes) -> None:
        self.engine.feed(data)

    def feed_eof(self) -> None:
        if not self.eof:
            self.eof = True
            self.engine.feed_eof()

    @property
    def finished(self) -> bool:
        return self.engine.finished

    @property
    def paused(self) -> bool:
        """The engine's reader is paused (back-pressure): the driver would not read its socket."""
        return self.engine.read_paused


def _side(x):
    return EngineSide(x) if isinstance(x, EngineConnection) else x


class Pipe:
    """An in-memory byte stream between two endpoints (Peer or EngineSide/EngineConnection)."""

    def __init__(self, a, b):
        self.a = _side(a)
        self.b = _side(b)
        self.broken = False
        self.bytes_ab = 0
        self.bytes_ba = 0

    def step(self) -> bool:
        """Move whatever is pending in each direction once. True if anything moved."""
        if self.broken:
            return False
        moved = False
        for src, dst, attr in ((self.a, self.b, "bytes_ab"), (self.b, self.a, "bytes_ba")):
            if getattr(dst, "paused", False):
                continue  # like TCP: what the sender writes waits in its own buffers
            out = src.take_output()
            if out is None:
                if not dst.eof:
                    dst.feed_eof()  # the head closed: the other side reads end of stream
                    moved = True
            elif out:
                setattr(self, attr, getattr(self, attr) + len(out))
                dst.feed(out)
                moved = True
        return moved

    def cut(self) -> None:
        """Stop carrying bytes (a dead network): nothing more moves in either direction."""
        self.broken = True


def pump(*pipes: Pipe, max_rounds: int = 100_000) -> int:
    """Shuttle bytes over every pipe until a full round moves nothing. Returns the rounds taken."""
    for rounds in range(max_rounds):
        moved = False
        for p in pipes:
            if p.step():
                moved = True
        if not moved:
            return rounds
    raise AssertionError(f"engines still busy after {max_rounds} rounds")


def pair(a=None, b=None) -> tuple[Peer, Peer, Pipe]:
    """A client Peer connected to a server Peer (both object API), pumped to open."""
    a = a or Peer()
    b = b or Peer(server=True)
    p = Pipe(a, b)
    pump(p)
    return a, b, p


class RouterHarness:
    """One Router with any number of in-memory connections to it."""

    def __init__(self, router=None, router_id: str = "R1", **router_kw):
        if router is None:
            from router.core import Router

            router = Router(router_id, **router_kw)
        self.router = router
        self.pipes: list[Pipe] = []

    def connect(self, peer=None, settings=None, **settings_kw):
        """Connect a client (a new Peer by default, or an EngineConnection client) to a new router engine.

        Returns the client; the router-side engine is ``client.router_engine``, the pipe ``client.pipe``.
        """
        if settings is None:
            settings = self.router.connection_settings(**settings_kw)
        engine = self.router.new_engine(settings, server=True)
        if peer is None:
            peer = Peer()
        pipe = Pipe(peer, engine)
        peer.router_engine = engine  # Peer and EngineConnection both take attributes
        peer.pipe = pipe
        self.pipes.append(pipe)
        self.pump()
        return peer

    def pump(self) -> int:
        return pump(*self.pipes)

    def drop(self, peer) -> None:
        """The peer's socket is gone: abort the router's engine and stop carrying bytes."""
        peer.pipe.cut()
        peer.router_engine.abort()
        self.pump()
