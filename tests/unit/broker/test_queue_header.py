"""broker.queue's header fast path agrees with wire.header.read_header, and is really taken."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from broker.queue import QueuedMessage, _fast_header
from wire.codec import encode_message
from wire.header import read_header, set_delivery_count


def _slow(b: bytes):
    h = read_header(b)
    return h.durable, h.priority, h.ttl, h.delivery_count


@settings(max_examples=300, deadline=None)
@given(durable=st.booleans(), priority=st.one_of(st.none(), st.integers(0, 255)),
       ttl=st.one_of(st.none(), st.integers(1, 2**32 - 1)), count=st.integers(0, 2**32 - 1),
       first=st.booleans(), body=st.binary(max_size=40))
def test_fast_path_matches_the_general_parser(durable, priority, ttl, count, first, body):
    m = Message(body=body, durable=durable, first_acquirer=first, delivery_count=count)
    if priority is not None:
        m.priority = priority
    if ttl is not None:
        m.ttl = ttl / 1000.0
    b = m.encode()
    fast = _fast_header(b)
    assert fast is not None  # proton's encodings are all on the fast path
    assert fast == _slow(b)


def test_common_shapes_take_the_fast_path_and_match():
    cases = [
        encode_message(body=b"x"),                       # no header at all
        encode_message(body=b"x", durable=True),
        encode_message(body=b"x", durable=True, priority=9, ttl=5000),
        set_delivery_count(encode_message(body=b"x", durable=True), 7),
        Message(body="plain").encode(),
    ]
    for b in cases:
        assert _fast_header(b) is not None
        assert _fast_header(b) == _slow(b)
        q = QueuedMessage.from_bytes(b, 1000)
        durable, priority, ttl, count = _slow(b)
        assert (q.durable, q.priority, q.delivery_count) == (durable, min(priority, 9), count)
        assert q.expires_at == (1000 + ttl if ttl else None)


def test_unusual_encodings_fall_back():
    # A header with an 8-byte ulong descriptor, a list32 and a uint ttl written as ulong: general parser.
    odd = bytes.fromhex("0080" + "0000000000000070" + "d0" + "00000006" + "00000002" + "41" + "40") + \
        encode_message(body=b"x")
    assert _fast_header(odd) is None
    assert QueuedMessage.from_bytes(odd, 0).durable is True
    assert _fast_header(b"\x00\x53\x70\xc0\x02\x01\x99") is None   # bad bool constructor
    assert _fast_header(b"") is None
