"""wire.raw: every function against a real proton engine pair (in memory, no sockets).

wire/raw.py is pinned to python-qpid-proton 0.40.0; this file is what must pass after an upgrade.
Side ``a`` is a proton object-API client, side ``b`` an object-API server whose links the tests drive
through the raw ``pn_*`` calls.
"""

from __future__ import annotations

import os

import proton
import pytest
from proton import Delivery, symbol

from wire import raw
from tests.unit.enginepair import Peer, Pipe, outcome, pair, pump, settle


@pytest.fixture
def ab():
    """(a, b, pipe): a client and a server whose receivers are not read automatically."""
    return pair(Peer(), Peer(server=True, auto_read=False))


def _in_link(a, b, p, credit=100, name="in"):
    """a sender -> b receiver. Returns (a's sender, b's receiver)."""
    s = a.sender("addr-in", name=name)
    pump(p)
    r = b.links[name]
    if credit:
        r.flow(credit)
        pump(p)
    return s, r


def _out_link(a, b, p, credit=100, name="out"):
    """b sender -> a receiver (a grants credit). Returns (b's sender, a's receiver)."""
    r = a.receiver("addr-out", name=name, credit=credit)
    pump(p)
    return b.links[name], r


# -- version pin --------------------------------------------------------------------------------------

def test_pinned_proton_version():
    assert raw.PROTON_VERSION == "0.40.0"
    assert ".".join(map(str, proton.VERSION)) == raw.PROTON_VERSION


def test_constants_match_object_api():
    assert raw.ACCEPTED == Delivery.ACCEPTED
    assert raw.REJECTED == Delivery.REJECTED
    assert raw.RELEASED == Delivery.RELEASED
    assert raw.MODIFIED == Delivery.MODIFIED
    assert raw.RECEIVED == Delivery.RECEIVED
    assert raw.TERMINAL_STATES == {Delivery.ACCEPTED, Delivery.REJECTED, Delivery.RELEASED, Delivery.MODIFIED}
    assert raw.LOCAL_UNINIT == proton.Endpoint.LOCAL_UNINIT
    assert raw.LOCAL_ACTIVE == proton.Endpoint.LOCAL_ACTIVE
    assert raw.LOCAL_CLOSED == proton.Endpoint.LOCAL_CLOSED
    assert raw.REMOTE_ACTIVE == proton.Endpoint.REMOTE_ACTIVE
    assert raw.REMOTE_CLOSED == proton.Endpoint.REMOTE_CLOSED
    assert raw.EOS < 0


# -- recv_all -----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "size",
    [0, 1, 100, raw.RECV_CHUNK - 1, raw.RECV_CHUNK, raw.RECV_CHUNK + 1, 3 * raw.RECV_CHUNK, 1024 * 1024 + 7],
    ids=lambda n: f"{n}B",
)
def test_recv_all_sizes(ab, size):
    a, b, p = ab
    s, r = _in_link(a, b, p)
    payload = os.urandom(size)
    a.send(s, payload)
    pump(p)
    d = raw.link_current(r._impl)
    assert d != raw.NULL
    assert raw.delivery_readable(d)
    assert not raw.delivery_partial(d)
    assert raw.delivery_pending(d) == size
    got = raw.recv_all(r._impl)
    assert type(got) is bytes
    assert got == payload
    assert raw.recv_all(r._impl) == b""  # nothing left
    assert raw.link_advance(r._impl)
    assert raw.link_current(r._impl) == raw.NULL


def test_recv_all_result_survives_the_next_read(ab):
    """The read buffer is shared process-wide: the returned bytes must be a copy."""
    a, b, p = ab
    s, r = _in_link(a, b, p)
    a.send(s, b"first message")
    a.send(s, b"SECOND")
    pump(p)
    first = raw.recv_all(r._impl)
    raw.link_advance(r._impl)
    second = raw.recv_all(r._impl)
    assert first == b"first message"
    assert second == b"SECOND"


def test_recv_all_large_returns_copies_of_every_chunk(ab):
    a, b, p = ab
    s, r = _in_link(a, b, p)
    # Every 64 KiB chunk differs: a buffer reused without copying would repeat the last chunk.
    payload = b"".join(bytes([i]) * raw.RECV_CHUNK for i in range(5)) + b"tail"
    a.send(s, payload)
    pump(p)
    assert raw.recv_all(r._impl) == payload


def test_recv_all_reads_what_is_available_of_a_partial_delivery():
    a = Peer(max_frame_size=4096)
    b = Peer(server=True, auto_read=False, max_frame_size=4096)
    p = Pipe(a, b)
    pump(p)
    s, r = _in_link(a, b, p)
    payload = os.urandom(200_000)
    a.send(s, payload)
    first_frames = a.take_output()  # proton writes a few frames at a time
    assert 0 < len(first_frames) < len(payload)
    b.feed(first_frames)
    d = raw.link_current(r._impl)
    assert raw.delivery_partial(d)
    first = raw.recv_all(r._impl)
    assert 0 < len(first) < len(payload)
    assert raw.recv_all(r._impl) == b""  # everything available was taken
    pump(p)
    assert not raw.delivery_partial(d)
    rest = raw.recv_all(r._impl)
    assert first + rest == payload


def test_recv_all_with_no_current_delivery(ab):
    a, b, p = ab
    s, r = _in_link(a, b, p)
    assert raw.link_current(r._impl) == raw.NULL
    assert raw.recv_all(r._impl) == b""


# -- send_message / delivery_tag ------------------------------------------------------------------------

@pytest.mark.parametrize("tag", [b"1", b"\x00\x00\x00\x00\x00\x00\x00\x01", b"\x00ab\xff", bytes(range(32))])
def test_send_message_tag_and_bytes_identity(ab, tag):
    a, b, p = ab
    snd, r = _out_link(a, b, p)
    payload = bytes(proton.Message(body="hello", subject="s", properties={"k": 1}).encode())
    d = raw.send_message(snd._impl, tag, payload)
    assert d != raw.NULL
    assert raw.delivery_tag(d) == tag
    assert raw.link_credit(snd._impl) == 99
    pump(p)
    [got] = a.received(r)
    assert got.data == payload
    assert raw.delivery_tag(got.delivery._impl) == tag
    assert got.body == "hello"
    assert not got.settled


def test_send_message_large_and_many(ab):
    a, b, p = ab
    snd, r = _out_link(a, b, p, credit=50)
    payloads = [os.urandom(n) for n in (0, 1, 70_000, 1024 * 1024, 5)]
    for i, pl in enumerate(payloads):
        raw.send_message(snd._impl, i.to_bytes(8, "little"), pl)
    pump(p)
    got = a.received(r)
    assert [g.data for g in got] == payloads
    assert [raw.delivery_tag(g.delivery._impl) for g in got] == [i.to_bytes(8, "little") for i in range(5)]


def test_send_message_without_credit_is_queued_until_credit(ab):
    a, b, p = ab
    snd, r = _out_link(a, b, p, credit=0)
    raw.send_message(snd._impl, b"t", b"payload")
    pump(p)
    assert a.received(r) == []
    assert raw.link_queued(snd._impl) == 1
    r.flow(1)
    pump(p)
    assert [g.data for g in a.received(r)] == [b"payload"]
    assert raw.link_queued(snd._impl) == 0


def test_send_message_settled_arrives_settled(ab):
    a, b, p = ab
    snd, r = _out_link(a, b, p)
    d = raw.send_message(snd._impl, b"t", b"x")
    raw.delivery_settle(d)
    pump(p)
    [got] = a.received(r)
    assert got.settled


# -- copy_outcome ----------------------------------------------------------------------------------------

def _relay(a, b, p):
    """a sends D on 'in'; b forwards its bytes on 'out' back to a. Returns (D, b's in-delivery, b's
    out-delivery, a's Received copy)."""
    s_in, r_in = _in_link(a, b, p)
    s_out, r_out = _out_link(a, b, p)
    D = a.send(s_in, b"relayed")
    pump(p)
    d_in = raw.link_current(r_in._impl)
    msg = raw.recv_all(r_in._impl)
    raw.link_advance(r_in._impl)
    d_out = raw.send_message(s_out._impl, b"o1", msg)
    pump(p)
    [copy] = a.received(r_out)
    assert copy.data == b"relayed"
    return D, d_in, d_out, copy


@pytest.mark.parametrize("state,name", [(Delivery.ACCEPTED, "accepted"), (Delivery.RELEASED, "released")])
def test_copy_outcome_simple(ab, state, name):
    a, b, p = ab
    D, d_in, d_out, copy = _relay(a, b, p)
    settle(copy, state)
    pump(p)
    assert raw.delivery_settled(d_out)
    assert raw.delivery_remote_state(d_out) == state
    assert raw.copy_outcome(d_out, d_in) == state
    assert raw.delivery_local_state(d_in) == state
    raw.delivery_settle(d_in)
    pump(p)
    assert outcome(D) == {"state": name, "settled": True}




@pytest.mark.parametrize("description", ["it was bad", None])
def test_copy_outcome_rejected_carries_condition(ab, description):
    a, b, p = ab
    D, d_in, d_out, copy = _relay(a, b, p)
    settle(copy, Delivery.REJECTED, condition="amqp:precondition-failed", description=description)
    pump(p)
    assert raw.remote_condition(d_out) == ("amqp:precondition-failed", description)
    assert raw.copy_outcome(d_out, d_in) == raw.REJECTED
    raw.delivery_settle(d_in)
    pump(p)
    assert outcome(D) == {"state": "rejected", "settled": True,
                          "condition": ("amqp:precondition-failed", description)}


@pytest.mark.parametrize("failed", [True, False])
@pytest.mark.parametrize("undeliverable", [True, False])
@pytest.mark.parametrize("annotations", [None, {symbol("x-why"): "busy", symbol("x-n"): 7}])
def test_copy_outcome_modified_carries_flags_and_annotations(ab, failed, undeliverable, annotations):
    a, b, p = ab
    D, d_in, d_out, copy = _relay(a, b, p)
    settle(copy, Delivery.MODIFIED, failed=failed, undeliverable=undeliverable, annotations=annotations)
    pump(p)
    assert raw.copy_outcome(d_out, d_in) == raw.MODIFIED
    raw.delivery_settle(d_in)
    pump(p)
    assert outcome(D) == {"state": "modified", "settled": True, "failed": failed,
                          "undeliverable": undeliverable, "annotations": annotations}


def test_copy_outcome_unsettled_state_is_mirrored_without_settling(ab):
    a, b, p = ab
    D, d_in, d_out, copy = _relay(a, b, p)
    settle(copy, Delivery.ACCEPTED, settle=False)
    pump(p)
    assert not raw.delivery_settled(d_out)
    assert raw.copy_outcome(d_out, d_in) == raw.ACCEPTED
    pump(p)
    assert outcome(D) == {"state": "accepted", "settled": False}


# -- set_modified / set_rejected / remote_condition -----------------------------------------------------

def _incoming(a, b, p):
    s, r = _in_link(a, b, p)
    D = a.send(s, b"m")
    pump(p)
    d = raw.link_current(r._impl)
    raw.recv_all(r._impl)
    raw.link_advance(r._impl)
    return D, d


@pytest.mark.parametrize("failed,undeliverable", [(True, False), (False, True), (True, True), (False, False)])
def test_set_modified(ab, failed, undeliverable):
    a, b, p = ab
    D, d = _incoming(a, b, p)
    raw.set_modified(d, failed=failed, undeliverable=undeliverable)
    raw.delivery_settle(d)
    pump(p)
    assert outcome(D) == {"state": "modified", "settled": True, "failed": failed,
                          "undeliverable": undeliverable, "annotations": None}
    assert raw.remote_modified_flags(D._impl) == (failed, undeliverable)


def test_set_modified_defaults_to_delivery_failed(ab):
    a, b, p = ab
    D, d = _incoming(a, b, p)
    raw.set_modified(d)
    raw.delivery_settle(d)
    pump(p)
    assert D.remote.failed is True
    assert D.remote.undeliverable is False


@pytest.mark.parametrize("description", ["no such address", None, ""])
def test_set_rejected(ab, description):
    a, b, p = ab
    D, d = _incoming(a, b, p)
    raw.set_rejected(d, "amqp:not-found", description)
    raw.delivery_settle(d)
    pump(p)
    assert outcome(D) == {"state": "rejected", "settled": True,
                          "condition": ("amqp:not-found", description or None)}


def test_remote_condition(ab):
    a, b, p = ab
    snd, r = _out_link(a, b, p)
    d1 = raw.send_message(snd._impl, b"1", b"x")
    d2 = raw.send_message(snd._impl, b"2", b"y")
    d3 = raw.send_message(snd._impl, b"3", b"z")
    pump(p)
    g1, g2, g3 = a.received(r)
    settle(g1, Delivery.REJECTED, condition="amqp:decode-error", description="bad bytes")
    settle(g2, Delivery.REJECTED, condition="amqp:internal-error")
    settle(g3, Delivery.REJECTED)
    pump(p)
    assert raw.remote_condition(d1) == ("amqp:decode-error", "bad bytes")
    assert raw.remote_condition(d2) == ("amqp:internal-error", None)
    assert raw.remote_condition(d3) == (None, None)


def test_remote_condition_unicode(ab):
    a, b, p = ab
    snd, r = _out_link(a, b, p)
    d = raw.send_message(snd._impl, b"1", b"x")
    pump(p)
    [g] = a.received(r)
    settle(g, Delivery.REJECTED, condition="x:bad", description="café ☕")
    pump(p)
    assert raw.remote_condition(d) == ("x:bad", "café ☕")


# -- bound engine calls used by the router ---------------------------------------------------------------

def test_link_and_delivery_accessors(ab):
    a, b, p = ab
    snd, r = _out_link(a, b, p, credit=3)
    lp = snd._impl
    assert raw.link_is_sender(lp)
    assert not raw.link_is_sender(r._impl)
    assert raw.link_credit(lp) == 3
    assert raw.link_state(lp) & raw.LOCAL_ACTIVE
    assert raw.link_state(lp) & raw.REMOTE_ACTIVE
    assert raw.session_connection(raw.link_session(lp)) == b.connection._impl
    assert not raw.link_get_drain(lp)
    d = raw.send_message(lp, b"t", b"abc")
    assert raw.delivery_link(d) == lp
    assert raw.link_credit(lp) == 2
    pump(p)
    [g] = a.received(r)
    settle(g, Delivery.ACCEPTED)
    pump(p)
    assert raw.delivery_remote_state(d) == raw.ACCEPTED
    assert raw.delivery_settled(d)
    raw.delivery_settle(d)
    # drain: the receiver asks, the sender answers with link_drained
    r.drain(5)
    pump(p)
    assert raw.link_get_drain(lp)
    assert raw.link_credit(lp) == 7  # 2 left + 5 more
    assert raw.link_drained(lp) > 0
    pump(p)
    assert r.credit == 0


def test_delivery_aborted(ab):
    a, b, p = ab
    s, r = _in_link(a, b, p)
    D = s.delivery(b"t")
    s.send(b"x" * 100)
    pump(p)
    D.abort()
    pump(p)
    d = raw.link_current(r._impl)
    assert raw.delivery_aborted(d)


def test_collector_and_event_accessors(ab):
    """The calls EngineConnection.process() drains events with."""
    a, b, p = ab
    # b drains its own collector on every feed; give the connection a fresh one to read raw events from.
    fresh = proton.Collector()
    b.connection.collect(fresh)
    s, r = _in_link(a, b, p, credit=0)
    a.send(s, b"x")
    r.flow(1)
    snd, _ = _out_link(a, b, p, credit=5)  # a's credit reaches b's sender: PN_LINK_FLOW
    pump(p)
    seen = []
    while True:
        ev = raw.collector_peek(fresh._impl)
        if not ev:
            break
        t = raw.event_type(ev)
        seen.append(t)
        if t == raw.PN_DELIVERY:
            assert raw.event_link(ev) == r._impl
            assert raw.delivery_link(raw.event_delivery(ev)) == r._impl
        elif t == raw.PN_LINK_FLOW and raw.event_link(ev) == snd._impl:
            assert raw.link_credit(snd._impl) == 5
        elif t == raw.PN_LINK_REMOTE_OPEN:
            assert raw.event_link(ev) in (r._impl, snd._impl)
        elif t == raw.PN_SESSION_REMOTE_OPEN:
            assert raw.event_session(ev) == raw.link_session(r._impl)
        raw.collector_pop(fresh._impl)
    assert raw.PN_DELIVERY in seen
    assert raw.PN_LINK_FLOW in seen
    assert raw.PN_LINK_REMOTE_OPEN in seen
    assert not raw.collector_peek(fresh._impl)


# -- OutputBuffer.take / transport_push -----------------------------------------------------------------

def test_output_buffer_take_copies_and_pops():
    t = proton.Transport(proton.Transport.CLIENT)
    c = proton.Connection()
    c.container = "ob"
    t.bind(c)
    c.open()
    tp = t._impl
    buf = raw.OutputBuffer()
    pending = t.pending()
    assert pending > 0
    out = buf.take(tp)
    assert isinstance(out, memoryview)
    assert len(out) == pending
    assert bytes(out[:8]) == b"AMQP\x00\x01\x00\x00"  # no SASL layer: the AMQP header first
    assert t.pending() == 0
    empty = buf.take(tp)
    assert empty is not None and len(empty) == 0


def test_output_buffer_chunks_when_pending_exceeds_its_size():
    a, b, p = pair(Peer(), Peer(server=True))
    s = a.sender("x", name="chunky")
    pump(p)
    b.links["chunky"].flow(1)
    pump(p)
    payload = os.urandom(5000)
    a.send(s, payload)
    tp = a.transport._impl
    small = raw.OutputBuffer(size=16)
    assert small.size == 16
    total = a.transport.pending()
    assert total > 5000
    chunks = []
    while True:
        out = small.take(tp)
        assert out is not None
        if not out:
            break
        assert len(out) <= 16
        chunks.append(bytes(out))
    assert all(len(c) == 16 for c in chunks[:-1])
    assert sum(map(len, chunks)) == total
    # The reassembled stream is the protocol stream: the message arrives intact.
    b.feed(b"".join(chunks))
    pump(p)
    assert [g.data for g in b.received(b.links["chunky"])] == [payload]


def test_output_buffer_take_none_after_head_closed():
    a, b, p = pair()
    tp = a.transport._impl
    buf = raw.OutputBuffer()
    a.connection.close()
    out = buf.take(tp)
    assert out is not None and len(out) > 0  # the close frame
    b.feed(bytes(out))
    pump(p)
    assert buf.take(tp) is None  # head closed after the close exchange
    assert buf.take(tp) is None
    assert not raw.transport_closed(tp)  # the tail is still open until end of stream
    raw.transport_close_tail(tp)
    assert raw.transport_closed(tp)


def test_output_buffer_take_none_after_close_head():
    t = proton.Transport(proton.Transport.CLIENT)
    raw.transport_close_head(t._impl)
    assert raw.OutputBuffer().take(t._impl) is None


def test_transport_push_counts_and_partial_takes():
    a = Peer()
    b = Peer(server=True, auto_read=False)
    p = Pipe(a, b)
    pump(p)
    s = a.sender("x", name="big")
    pump(p)
    r = b.links["big"]
    r.flow(1)
    pump(p)
    payload = os.urandom(1024 * 1024)
    a.send(s, payload)
    parts = []
    while True:
        out = a.take_output()
        if not out:
            break
        parts.append(out)
    data = b"".join(parts)
    assert len(data) > len(payload)
    tp = b.transport._impl
    n = raw.transport_push(tp, data)
    assert 0 < n < len(data)  # more than the transport's capacity: it takes what fits
    view = data[n:]
    while view:
        b.process()
        n = raw.transport_push(tp, view)
        assert n > 0
        view = view[n:]
    b.process()
    assert raw.recv_all(r._impl) == payload


def test_transport_push_after_tail_closed_is_negative():
    t = proton.Transport(proton.Transport.SERVER)
    tp = t._impl
    assert raw.transport_push(tp, b"") == 0
    raw.transport_close_tail(tp)
    assert raw.transport_push(tp, b"AMQP") < 0


def test_transport_push_garbage_sets_error():
    t = proton.Transport(proton.Transport.SERVER)
    tp = t._impl
    n = raw.transport_push(tp, b"garbage-bytes!!")
    assert n == len(b"garbage-bytes!!") or n < 0
    assert t.condition is not None
    assert t.condition.name == "amqp:connection:framing-error"
    assert raw.transport_push(tp, b"more") < 0


def test_transport_tick_returns_deadline():
    a, b, p = pair(Peer(idle_timeout=10), Peer(server=True, idle_timeout=4))
    deadline = raw.transport_tick(a.transport._impl, 1000)
    assert deadline > 1000  # ms: a keepalive for b's idle timeout is due later


# -- cold path object views ---------------------------------------------------------------------------

def test_link_object_and_connection_object(ab):
    a, b, p = ab
    s, r = _in_link(a, b, p, name="viewed")
    snd, _ = _out_link(a, b, p, name="viewed-out")
    lo = raw.link_object(r._impl)
    assert isinstance(lo, proton.Receiver)
    assert lo.name == "viewed"
    assert lo.remote_target.address == "addr-in"
    so = raw.link_object(snd._impl)
    assert isinstance(so, proton.Sender)
    assert so.remote_source.address == "addr-out"
    co = raw.connection_object(raw.session_connection(raw.link_session(r._impl)))
    assert isinstance(co, proton.Connection)
    assert co.remote_container == a.connection.container
    assert co._impl == b.connection._impl
    assert raw.pointer(lo) == r._impl and raw.pointer(b.connection) == b.connection._impl


# -- counts for policy checks ------------------------------------------------------------------------

def test_count_sessions_and_links(ab):
    a, b, p = ab
    assert raw.count_sessions(b.connection) == 1          # the session a began and b answered
    _in_link(a, b, p, name="in1")
    _in_link(a, b, p, name="in2")
    _out_link(a, b, p, name="out1")
    assert raw.count_links(b.connection, senders=False) == 2
    assert raw.count_links(b.connection, senders=True) == 1
    b.links["in1"].close()
    pump(p)
    assert raw.count_links(b.connection, senders=False) == 1


def test_set_session_error(ab):
    a, b, p = ab
    ssn = raw.pointer(b.connection.session_head(0))
    raw.set_session_error(ssn, "amqp:resource-limit-exceeded", "enough")
    raw.lib.pn_session_close(ssn)   # (the object API's close() would replace the condition with its own)
    pump(p)
    assert a.session.remote_condition.name == "amqp:resource-limit-exceeded"
    assert a.session.remote_condition.description == "enough"


def test_streamed_send_begin_more_advance_and_abort():
    a = Peer(max_frame_size=4096)
    b = Peer(server=True, auto_read=False, max_frame_size=4096)
    p = Pipe(a, b)
    pump(p)
    s, r = _in_link(a, b, p)
    part = os.urandom(10_000)
    d = raw.begin_ring_tagged(s._impl, 7, part)
    pump(p)
    rd = raw.link_current(r._impl)
    assert raw.delivery_partial(rd) and raw.recv_all(r._impl) == part
    raw.send_more(s._impl, part)
    raw.link_advance(s._impl)
    pump(p)
    assert not raw.delivery_partial(rd) and raw.recv_all(r._impl) == part
    assert raw.delivery_tag(rd) == b"0007"
    raw.link_advance(r._impl)
    d2 = raw.begin_tagged(s._impl, b"x1", part)
    pump(p)
    rd2 = raw.link_current(r._impl)
    assert raw.delivery_partial(rd2)
    raw.delivery_abort(d2)
    pump(p)
    assert raw.delivery_aborted(rd2)
    assert d is not None


def test_session_incoming_capacity_stops_the_sender_until_read():
    a = Peer(max_frame_size=16384)
    b = Peer(server=True, auto_read=False, max_frame_size=16384)
    p = Pipe(a, b)
    pump(p)
    s, r = _in_link(a, b, p, credit=0)
    raw.session_set_incoming_capacity(raw.link_session(r._impl), 256 * 1024)
    r.flow(1)
    pump(p)
    raw.begin_ring_tagged(s._impl, 1, os.urandom(2_000_000))
    pump(p)
    first = len(raw.recv_all(r._impl))
    assert 0 < first <= 256 * 1024  # the window held the rest at the sender
    pump(p)
    assert 0 < len(raw.recv_all(r._impl)) <= 256 * 1024  # reading reopened it


def test_session_incoming_capacity_below_the_frame_size_is_one_frame_not_a_dead_connection():
    """proton closes the connection (amqp:internal-error) when a session's capacity is below the
    max-frame-size; a capacity set through wire.raw is raised to one frame instead."""
    big = 16 * 1024 * 1024
    a = Peer(max_frame_size=big)
    b = Peer(server=True, auto_read=False, max_frame_size=big)
    p = Pipe(a, b)
    pump(p)
    s, r = _in_link(a, b, p, credit=0)
    raw.session_set_incoming_capacity(raw.link_session(r._impl), 8 * 1024 * 1024)
    r.flow(1)
    pump(p)
    assert r.session.incoming_capacity == big
    raw.begin_ring_tagged(s._impl, 1, b"x" * 1000)
    raw.link_advance(s._impl)
    pump(p)
    assert len(raw.recv_all(r._impl)) == 1000
    assert not b.transport.condition and not a.transport.condition
