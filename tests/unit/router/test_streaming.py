"""router/streams.py: large messages forwarded frame by frame, with a bounded amount kept in the router."""

from __future__ import annotations

import os

from proton import Message

from wire import raw
from router.streams import STREAM_AFTER_BYTES, STREAM_HOLD_BYTES
from tests.unit.enginepair import ACCEPTED, MODIFIED, REJECTED, RELEASED, RouterHarness, encode, pump

BIG = 3 * 1024 * 1024


def big_message(size: int = BIG, **fields) -> bytes:
    return encode(Message(body=os.urandom(size), **fields))


def setup(credit: int = 10, **router_kw):
    h = RouterHarness(**router_kw)
    prod, cons = h.connect(), h.connect()
    rcv = cons.receiver("q", credit=credit)
    snd = prod.sender("q")
    h.pump()
    return h, prod, cons, snd, rcv


def test_large_message_streams_through_and_its_outcome_comes_back():
    h, prod, cons, snd, rcv = setup()
    data = big_message()
    d = prod.send(snd, data)
    h.pump()
    [got] = cons.received(rcv)
    assert got.data == data
    assert h.router.streams.started == 1
    assert not h.router.streams and not h.router.assembly and h.router.assembly.total == 0
    got.delivery.update(ACCEPTED)
    got.delivery.settle()
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled
    # the link carries on: small messages after it
    prod.send(snd, body="after")
    h.pump()
    assert cons.bodies(rcv)[-1] == "after"


def test_small_multi_frame_messages_are_not_streamed():
    h, prod, cons, snd, rcv = setup()
    prod.send(snd, big_message(STREAM_AFTER_BYTES // 2))
    h.pump()
    assert len(cons.received(rcv)) == 1 and h.router.streams.started == 0


def test_without_credit_the_stream_keeps_a_bounded_amount_and_holds_the_producer_off():
    h, prod, cons, snd, rcv = setup(credit=0)
    cons2 = h.connect()
    rcv2 = cons2.receiver("q", credit=0)  # a destination exists, with no credit: copies wait
    h.pump()
    data = big_message(8 * 1024 * 1024)
    prod.send(snd, body="first")  # something queued ahead
    prod.send(snd, data)
    h.pump()
    streams = h.router.streams
    assert streams.started == 1 and streams.held
    [st] = list(streams.held)
    assert st.kept_bytes <= STREAM_HOLD_BYTES + 512 * 1024  # at most one read over the mark
    assert prod.router_engine.read_paused  # the producer's socket is not read
    rcv.flow(5)
    h.pump()
    got = cons.received(rcv)
    if len(got) < 2:
        rcv2.flow(5)
        h.pump()
        got = got + cons2.received(rcv2)
    assert data in [r.data for r in got]
    assert not streams.held and not prod.router_engine.read_paused


def test_aborted_message_is_aborted_downstream_and_the_link_carries_on():
    h, prod, cons, snd, rcv = setup()
    data = big_message()
    d = snd.delivery(b"abort-me")
    snd.send(data[: len(data) // 2])
    h.pump()
    assert h.router.streams.started == 1 and cons.received(rcv) == []
    d.abort()
    h.pump()
    assert cons.received(rcv) == []  # the consumer saw an aborted delivery and dropped it
    assert h.router.streams.aborted == 1 and not h.router.streams
    prod.send(snd, body="after")
    h.pump()
    assert cons.bodies(rcv) == ["after"]


def test_producer_leaving_mid_message_aborts_the_copy():
    h, prod, cons, snd, rcv = setup()
    data = big_message()
    snd.delivery(b"half")
    snd.send(data[: len(data) // 2])
    h.pump()
    h.drop(prod)
    assert h.router.streams.aborted == 1 and not h.router.streams
    assert cons.received(rcv) == []
    assert h.router.assembly.total == 0


def test_consumer_leaving_mid_message_counts_nothing_delivered_and_the_producer_hears_modified_at_the_end():
    h, prod, cons, snd, rcv = setup()
    data = big_message()
    d = snd.delivery(b"m")
    snd.send(data[: len(data) // 2])
    h.pump()
    ol = next(rl for rc in h.router.connections for rl in rc.links.values()
              if not rl.incoming and rl.address is not None and rl.address.name == "q")
    h.drop(cons)
    assert ol.delivery_count == 0
    assert not d.settled
    snd.send(data[len(data) // 2:])
    snd.advance()
    h.pump()
    assert d.remote_state == MODIFIED and d.settled
    assert not h.router.streams


def test_multicast_streams_to_every_consumer():
    from tests.unit.enginepair import AddressEntity

    h = RouterHarness(address_entities=[AddressEntity("multi", distribution="multicast")])
    prod, c1, c2 = h.connect(), h.connect(), h.connect()
    r1 = c1.receiver("multi", credit=5)
    r2 = c2.receiver("multi", credit=5)
    snd = prod.sender("multi")
    h.pump()
    data = big_message()
    d = prod.send(snd, data, settled=True)
    h.pump()
    assert [r.data for r in c1.received(r1)] == [data]
    assert [r.data for r in c2.received(r2)] == [data]
    assert h.router.streams.started == 1 and not h.router.streams
    assert d is not None


def test_anonymous_sender_streams_by_the_to_in_the_head():
    h, prod, cons, snd, rcv = setup()
    anon = prod.sender(None)
    h.pump()
    data = big_message(address="q")
    prod.send(anon, data)
    h.pump()
    assert [r.data for r in cons.received(rcv)] == [data]
    assert h.router.streams.started == 1


def test_presettled_stream_is_settled_at_its_end():
    h, prod, cons, snd, rcv = setup()
    data = big_message()
    d = prod.send(snd, data, settled=True)
    h.pump()
    assert [r.data for r in cons.received(rcv)] == [data]
    assert not h.router.streams and d is not None  # settled by its sender; the router kept nothing of it
    [il] = [rl for rc in h.router.connections for rl in rc.links.values() if rl.incoming]
    assert raw.lib.pn_link_unsettled(il.ptr) == 0


def test_two_large_messages_back_to_back_keep_their_order():
    h, prod, cons, snd, rcv = setup()
    a, b = big_message(), big_message()
    prod.send(snd, a)
    prod.send(snd, b)
    prod.send(snd, body="small")
    h.pump()
    got = cons.received(rcv)
    assert [r.data for r in got[:2]] == [a, b] and got[2].body == "small"
    assert pump(*h.pipes) == 0


def test_consumer_leaving_before_its_copy_started_lets_the_held_stream_go_on():
    h, prod, cons, snd, rcv = setup(credit=0)
    data = big_message(8 * 1024 * 1024)
    d = prod.send(snd, data)
    h.pump()
    streams = h.router.streams
    assert streams.held  # waiting for credit that never comes
    h.drop(cons)  # its queued copy is released; the stream has nobody left
    for _ in range(3):
        h.router.tick(h.router.clock() + 1)
        h.pump()
    assert not streams.held and not streams and not prod.router_engine.read_paused
    assert d.settled and d.remote_state == RELEASED


def _send_in_pieces(h, snd, tag: bytes, pieces):
    d = snd.delivery(tag)
    for piece in pieces:
        snd.send(piece)
        h.pump()
    snd.advance()
    h.pump()
    return d


def test_a_large_message_whose_head_is_not_in_its_first_bytes_still_streams():
    """A message can begin at the end of a read: its first chunk then holds only the start of its head.
    It is looked for again over what was kept (once the kept bytes doubled), so the message streams
    instead of being held whole."""
    h, prod, cons, snd, rcv = setup()
    data = big_message(4 * 1024 * 1024, address="q", subject="s" * 300)
    step = 256 * 1024
    d = _send_in_pieces(h, snd, b"late-head", [data[:12]] + [data[i:i + step] for i in range(12, len(data), step)])
    assert h.router.streams.started == 1
    [got] = cons.received(rcv)
    assert got.data == data
    got.delivery.update(ACCEPTED)
    got.delivery.settle()
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled


def test_bytes_that_never_form_a_message_head_are_dropped_as_they_arrive_and_rejected():
    """Past MAX_HEAD_BYTES without a head (here: bytes that do not start a message) the router neither
    routes nor keeps the delivery: it drops it as it arrives and rejects it with amqp:decode-error at its
    end; the link carries on."""
    from router.streams import MAX_HEAD_BYTES

    h, prod, cons, snd, rcv = setup()
    piece = b"\xff" * (1024 * 1024)
    pieces = [piece] * (MAX_HEAD_BYTES // len(piece) + 4)
    kept = []
    d = snd.delivery(b"garbage")
    for p in pieces:
        snd.send(p)
        h.pump()
        kept.append(h.router.assembly.total)
    snd.advance()
    h.pump()
    assert max(kept) <= MAX_HEAD_BYTES + 2 * len(piece)  # never the whole delivery
    assert kept[-1] == 0  # dropped once past the mark
    assert d.remote_state == REJECTED and d.settled
    assert d.remote.condition.name == "amqp:decode-error"
    assert h.router.streams.started == 0 and not cons.received(rcv)
    prod.send(snd, body="after")
    h.pump()
    assert cons.bodies(rcv) == ["after"]
