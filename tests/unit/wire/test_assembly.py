"""wire/assembly.py with a real engine pair: any application that owns a link gets whole messages, with
multi-frame assembly, the size limit, aborted deliveries and the owner's verdicts handled by wire/."""

from __future__ import annotations

import pytest

from wire import raw
from wire.assembly import ABORTED, DISCARD, FORGET, KEEP, LAST, MESSAGE_SIZE_EXCEEDED, MORE, STREAM, MessageAssembler
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection

from tests.unit.enginepair import REJECTED, Peer, Pipe, encode, pump

FRAME = 512  # small frames: a few kB make a multi-frame message


class Link:
    """A minimal link record."""

    def __init__(self, owner, ptr, max_message_size=0):
        self.owner = owner
        self.ptr = ptr
        self.incoming = True
        self.max_message_size = max_message_size


class App(ConnectionHandler):
    """An application owning every link a peer attaches, recording what its links are told."""

    def __init__(self, *, limit=0, verdict=KEEP):
        self.limit = limit
        self.verdict = verdict
        self.messages: list = []
        self.partials: list[int] = []
        self.oversized: list[int] = []
        self.unowned: list = []
        self.held: list[int] = []
        self.chunks: list = []  # (bytes, end) of streamed deliveries
        self.hold = False  # hold_off after each chunk
        self.assembler = MessageAssembler(on_held=lambda rec, delta: self.held.append(delta))
        self.engine = EngineConnection(self, ConnectionSettings(max_frame_size=FRAME), server=True,
                                       assembler=self.assembler)

    # ConnectionHandler
    def on_link_open(self, engine, link):
        engine.open_link_like_remote(link)
        if raw.link_object(link).name.startswith("unowned"):
            raw.link_flow(link, 10)
            return
        engine.own_link(link, Link(self, link, self.limit))
        raw.link_flow(link, 10)

    def on_delivery(self, engine, d):
        self.unowned.append(d)

    # LinkOwner
    def on_message(self, engine, link, d, msg):
        self.messages.append(msg)
        if msg is None:
            raw.set_rejected(d, "amqp:resource-limit-exceeded", "discarded")
        else:
            raw.delivery_update(d, raw.ACCEPTED)
        raw.delivery_settle(d)

    def on_partial(self, engine, link, d, held):
        self.partials.append(held)
        if self.verdict == FORGET:
            raw.set_rejected(d, "amqp:resource-limit-exceeded", "forgotten")
            raw.delivery_settle(d)
            engine.close_link(link.ptr, "amqp:resource-limit-exceeded", "forgotten")
        return self.verdict

    def on_chunk(self, engine, link, d, chunk, end):
        self.chunks.append((chunk, end))
        if end == LAST:
            raw.delivery_update(d, raw.ACCEPTED)
            raw.delivery_settle(d)
        elif end == MORE and self.hold:
            self.assembler.hold_off(d)

    def on_delivery_update(self, engine, link, d):
        pass

    def on_link_flow(self, engine, link):
        pass

    def on_oversized(self, engine, link, d, limit):
        self.oversized.append(limit)


def connect(app: App) -> tuple[Peer, Pipe]:
    peer = Peer(max_frame_size=FRAME)
    pipe = Pipe(peer, app.engine)
    pump(pipe)
    return peer, pipe


def payload(size: int) -> bytes:
    return encode(body=b"x" * size)


def test_multi_frame_message_arrives_whole_and_nothing_stays_held():
    app = App()
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    big = payload(10_000)
    d = peer.send(snd, big)
    pump(pipe)
    assert app.messages == [big]
    assert app.partials and app.partials == sorted(app.partials) and app.partials[-1] < len(big)
    assert app.assembler.total == 0 and not app.assembler and sum(app.held) == 0 and max(app.held) > 0
    assert d.remote_state == d.ACCEPTED


def test_message_over_the_links_limit_is_rejected_and_the_link_detached_while_it_arrives():
    app = App(limit=3000)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    small = payload(1000)
    peer.send(snd, small)
    d = snd.delivery(b"big")
    snd.send(payload(20_000)[:5000])  # not advanced: the message is still arriving when it is refused
    pump(pipe)
    assert app.messages == [small]
    assert app.oversized == [3000]
    assert d.remote_state == REJECTED and d.remote.condition.name == MESSAGE_SIZE_EXCEEDED
    assert snd.remote_condition.name == MESSAGE_SIZE_EXCEEDED
    assert app.assembler.total == 0 and not app.engine.link_records


def test_aborted_delivery_is_forgotten_and_the_link_carries_on():
    app = App()
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    d = snd.delivery(b"aborted")
    snd.send(payload(5000)[:3000])
    pump(pipe)
    assert app.assembler.total > 0 and app.messages == []
    d.abort()
    pump(pipe)
    assert app.assembler.total == 0 and not app.assembler and sum(app.held) == 0
    after = payload(4000)
    peer.send(snd, after)
    pump(pipe)
    assert app.messages == [after]


def test_discarded_message_is_answered_when_complete():
    app = App(verdict=DISCARD)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    d = peer.send(snd, payload(8000))
    pump(pipe)
    assert app.messages == [None]
    assert len(app.partials) == 1  # asked once; its bytes were dropped from then on
    assert app.assembler.total == 0 and sum(app.held) == 0
    assert d.remote_state == REJECTED and d.remote.condition.description == "discarded"


def test_forgotten_message_leaves_nothing_held():
    app = App(verdict=FORGET)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    d = peer.send(snd, payload(8000))
    pump(pipe)
    assert app.messages == []
    assert app.assembler.total == 0 and sum(app.held) == 0
    assert d.remote_state == REJECTED and snd.remote_condition.description == "forgotten"


def test_peer_detaching_mid_message_frees_its_bytes():
    app = App()
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    snd.delivery(b"half")
    snd.send(payload(5000)[:3000])
    pump(pipe)
    assert app.assembler.total > 0
    snd.close()
    pump(pipe)
    assert app.assembler.total == 0 and not app.engine.link_records


def test_stalled_deliveries_are_listed_by_last_progress():
    now = [100.0]
    app = App()
    app.assembler.clock = lambda: now[0]
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    snd.delivery(b"slow")
    snd.send(payload(5000)[:3000])
    pump(pipe)
    [d] = app.assembler.stalled(130.0, 30.0)
    assert app.assembler.owner_of(d).owner is app
    assert app.assembler.stalled(129.0, 30.0) == []
    app.assembler.touch(d, 129.0)
    assert app.assembler.stalled(130.0, 30.0) == []


def test_links_nobody_owns_still_reach_the_handler():
    app = App()
    peer, pipe = connect(app)
    snd = peer.sender("q", name="unowned-1")
    pump(pipe)
    peer.send(snd, payload(100))
    pump(pipe)
    assert len(app.unowned) == 1 and app.messages == []


@pytest.mark.parametrize("size", [0, 1, FRAME - 100, FRAME * 3 + 7])
def test_sizes_around_frame_boundaries(size):
    app = App()
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    msg = payload(size)
    peer.send(snd, msg)
    pump(pipe)
    assert app.messages == [msg]


def test_first_bytes_and_count_of_deliveries_in_progress():
    app = App()
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    assert len(app.assembler) == 0 and app.assembler.first_bytes(b"none") is None
    snd.delivery(b"half")
    msg = payload(5000)
    snd.send(msg[:3000])
    pump(pipe)
    [d] = app.assembler.partials
    assert len(app.assembler) == 1
    assert msg.startswith(app.assembler.first_bytes(d))


def _streamed(app):
    return b"".join(c for c, _ in app.chunks)


def test_streamed_message_reaches_the_owner_in_chunks_and_nothing_is_kept():
    app = App(verdict=STREAM)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    big = payload(20_000)
    d = peer.send(snd, big)
    pump(pipe)
    assert app.messages == [] and _streamed(app) == big
    assert [e for _, e in app.chunks] == [MORE] * (len(app.chunks) - 1) + [LAST]
    assert len(app.partials) == 1  # asked once, then streamed
    assert app.assembler.total == 0 and not app.assembler and sum(app.held) == 0
    assert d.remote_state == d.ACCEPTED
    after = payload(100)  # the link carries on with whole messages
    peer.send(snd, after)
    pump(pipe)
    assert app.messages == [after]


def test_held_off_stream_reads_nothing_until_resumed_and_is_never_stalled():
    now = [100.0]
    app = App(verdict=STREAM)
    app.assembler.clock = lambda: now[0]
    app.hold = True
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    big = payload(20_000)
    peer.send(snd, big)
    pump(pipe)
    got = len(_streamed(app))
    assert 0 < got < len(big)
    [d] = list(app.assembler.partials)
    assert app.assembler.is_streaming(d)
    assert app.assembler.stalled(1000.0, 30.0) == []  # held off by its owner: not the peer's stall
    app.hold = False
    app.assembler.resume(app.engine, d)
    pump(pipe)
    assert _streamed(app) == big and app.chunks[-1][1] == LAST


def test_a_delivery_that_arrives_whole_behind_a_held_stream_is_read_when_the_stream_ends():
    """While a streamed delivery is held off it stays the link's current one, so the events of the next
    delivery on the link find it unreadable. When the held one ends, the next one (all of it already in
    the engine, so no further event comes) must still be read: it was lost, and its producer waited for
    ever (seen with rhea's 3 MB messages across two routers)."""
    app = App(verdict=STREAM)
    app.hold = True
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    first, second = payload(20_000), payload(20_000)
    behind = [payload(100 + i) for i in range(3)]
    d1 = peer.send(snd, first)
    d2 = peer.send(snd, second)  # all of it arrives while the first is held
    ds = [peer.send(snd, m) for m in behind]  # and a chain of small ones behind it
    pump(pipe)
    [held] = list(app.assembler.partials)
    app.hold = False
    app.assembler.resume(app.engine, held)
    pump(pipe)
    assert _streamed(app) == first and app.chunks[-1][1] == LAST
    assert app.messages == [second] + behind  # all of them were in: read whole, in order
    assert all(d.remote_state == d.ACCEPTED for d in [d1, d2] + ds)
    assert not app.assembler


def test_aborted_stream_ends_with_aborted():
    app = App(verdict=STREAM)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    d = snd.delivery(b"aborted")
    snd.send(payload(8000)[:5000])
    pump(pipe)
    assert app.chunks and app.chunks[-1][1] == MORE
    d.abort()
    pump(pipe)
    assert app.chunks[-1] == (b"", ABORTED) and not app.assembler


def test_streamed_message_over_the_limit_is_refused():
    app = App(verdict=STREAM, limit=6000)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    d = snd.delivery(b"big")
    snd.send(payload(20_000)[:9000])
    pump(pipe)
    assert app.oversized == [6000] and d.remote_state == REJECTED
    assert not app.assembler


def test_each_connection_counts_its_own_deliveries_in_progress():
    """The driver reads in large pieces only on a connection a large message arrives on (the assembler is
    shared by all of a router's connections): each engine counts its own deliveries still arriving."""
    app = App()
    other = EngineConnection(app, ConnectionSettings(max_frame_size=FRAME), server=True, assembler=app.assembler)
    peer, pipe = connect(app)
    snd = peer.sender("q")
    pump(pipe)
    msg = payload(5000)
    snd.delivery(b"half")
    snd.send(msg[:3000])
    pump(pipe)
    assert app.engine.arriving == 1 and other.arriving == 0
    snd.send(msg[3000:])
    snd.advance()
    pump(pipe)
    assert app.messages == [msg] and app.engine.arriving == 0
    d = snd.delivery(b"aborted")
    snd.send(msg[:3000])
    pump(pipe)
    assert app.engine.arriving == 1
    d.abort()
    pump(pipe)
    assert app.engine.arriving == 0
    snd.delivery(b"left")
    snd.send(msg[:3000])
    pump(pipe)
    assert app.engine.arriving == 1
    snd.close()  # the link goes with a delivery half-way: forgotten
    pump(pipe)
    assert app.engine.arriving == 0 and not app.assembler
