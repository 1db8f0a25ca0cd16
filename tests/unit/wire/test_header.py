"""Tests for wire.header: header fields and absolute-expiry-time read from message bytes, delivery-count
rewritten in place — checked against proton's encoder and decoder."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from wire.amqptypes import CodecError, Symbol, Timestamp, UByte, UInt, encode_value
from wire.codec import encode_message, scan
from wire.header import HeaderInfo, expires_at, read_expiry, read_header, set_delivery_count


def pencode(**kw) -> bytes:
    return bytes(Message(**kw).encode())


def pdecode(b: bytes) -> Message:
    m = Message()
    m.decode(b)
    return m


def everything(m: Message) -> dict:
    """All of a proton message except delivery-count and first-acquirer."""
    body = m.body
    return dict(
        address=m.address, reply_to=m.reply_to, id=m.id, correlation_id=m.correlation_id,
        subject=m.subject, content_type=m.content_type, group_id=m.group_id,
        properties=dict(m.properties or {}), annotations=dict(m.annotations or {}),
        instructions=dict(m.instructions or {}), body=bytes(body) if isinstance(body, memoryview) else body,
        durable=m.durable, priority=m.priority, ttl=m.ttl, expiry_time=m.expiry_time,
        creation_time=m.creation_time,
    )


RICH = dict(
    address="q.orders", reply_to="replies", id=42, correlation_id="c-1", subject="subj",
    content_type="text/plain", group_id="g", properties={"k": "v", "n": 7},
    annotations={Symbol("x-opt-a"): "b"}, instructions={Symbol("x-opt-i"): 1},
    body="hello", creation_time=1700000000.0,
)


def header_span_bytes(b: bytes) -> bytes:
    s = scan(b).header
    return b[s[0]:s[1]]


def outside_header(b: bytes) -> bytes:
    """The message bytes with the header section cut out."""
    s = scan(b).header
    return b if s is None else b[:s[0]] + b[s[1]:]


# --------------------------------------------------------------------------------------------------
# read_header / read_expiry
# --------------------------------------------------------------------------------------------------

def test_defaults_without_header_section():
    msg = encode_message(body=b"x", to="q")
    assert scan(msg).header is None
    assert read_header(msg) == HeaderInfo(durable=False, priority=4, ttl=None, first_acquirer=False,
                                          delivery_count=0)
    assert read_expiry(msg) == (None, None)


def test_defaults_with_empty_proton_header():
    msg = pencode(body="x")                      # proton writes an empty header list (list0)
    assert scan(msg).header is not None
    assert read_header(msg) == HeaderInfo()


@pytest.mark.parametrize("kw, expect", [
    (dict(durable=True), HeaderInfo(durable=True)),
    (dict(priority=0), HeaderInfo(priority=0)),
    (dict(priority=9), HeaderInfo(priority=9)),
    (dict(priority=200), HeaderInfo(priority=200)),
    (dict(ttl=1.5), HeaderInfo(ttl=1500)),
    (dict(ttl=4000000.0), HeaderInfo(ttl=4000000000)),
    (dict(first_acquirer=True), HeaderInfo(first_acquirer=True)),
    (dict(delivery_count=3), HeaderInfo(delivery_count=3)),
    (dict(delivery_count=70000), HeaderInfo(delivery_count=70000)),
    (dict(durable=True, priority=7, ttl=0.25, first_acquirer=True, delivery_count=2),
     HeaderInfo(True, 7, 250, True, 2)),
])
def test_read_header_matches_proton(kw, expect):
    assert read_header(pencode(body="x", **kw)) == expect
    assert read_header(pencode(**RICH, **kw)) == expect


def test_read_expiry():
    assert read_expiry(pencode(body="x")) == (None, None)
    assert read_expiry(pencode(body="x", ttl=2.0)) == (2000, None)
    assert read_expiry(pencode(body="x", expiry_time=1700000000.5)) == (None, 1700000000500)
    assert read_expiry(pencode(ttl=0.1, expiry_time=1700000001.0, **RICH)) == (100, 1700000001000)


def test_read_expiry_skips_undecodable_earlier_properties_fields_only_by_size():
    # absolute-expiry-time is read after skipping eight fields; a long message-id must not matter
    msg = pencode(body="x", id="m" * 300, subject="s" * 70000, expiry_time=5.0)
    assert read_expiry(msg) == (None, 5000)


def test_expires_at_precedence():
    arrival = 1_000_000
    assert expires_at(pencode(body="x"), arrival) is None
    assert expires_at(pencode(body="x", ttl=1.0), arrival) == arrival + 1000
    # absolute-expiry-time wins over ttl (Artemis AMQPMessage)
    assert expires_at(pencode(body="x", ttl=1.0, expiry_time=2000.0), arrival) == 2_000_000
    # a zero ttl / zero absolute-expiry-time mean "never" / "not set"
    zero_ttl = b"\x00\x53\x70" + encode_value([None, None, UInt(0)]) + encode_message(body=b"x")
    assert read_expiry(zero_ttl) == (0, None)
    assert expires_at(zero_ttl, arrival) is None
    zero_abs = (b"\x00\x53\x70" + encode_value([None, None, UInt(500)])
                + b"\x00\x53\x73" + encode_value([None] * 8 + [Timestamp(0)]) + b"\x00\x53\x77\x40")
    assert expires_at(zero_abs, arrival) == arrival + 500


def test_symbolic_and_ulong_descriptors():
    fields = encode_value([True, UByte(8), UInt(60), None, UInt(5)])
    body = encode_message(body=b"payload")
    for desc in (b"\x00\xa3\x10amqp:header:list", b"\x00\x80" + (0x70).to_bytes(8, "big")):
        msg = desc + fields + body
        assert read_header(msg) == HeaderInfo(True, 8, 60, False, 5)
        out = set_delivery_count(msg, 6)
        assert out.startswith(desc)                      # the descriptor keeps its form
        assert out.endswith(body)
        assert read_header(out) == HeaderInfo(True, 8, 60, False, 6)
        if desc[1] == 0x80:                              # proton-c reads no symbolic section descriptors
            assert pdecode(out).delivery_count == 6


# --------------------------------------------------------------------------------------------------
# set_delivery_count
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(body="x"),
    dict(body="x", durable=True, priority=9, ttl=3.0),
    dict(durable=True, first_acquirer=True, delivery_count=4, **RICH),
    dict(priority=1, expiry_time=1700000000.0, **RICH),
])
@pytest.mark.parametrize("count", [0, 1, 255, 256, 2**32 - 1])
def test_set_delivery_count_against_proton(kw, count):
    msg = pencode(**kw)
    out = set_delivery_count(msg, count)
    before, after = pdecode(msg), pdecode(out)
    assert after.delivery_count == count
    assert after.first_acquirer == before.first_acquirer
    assert everything(after) == everything(before)
    assert outside_header(out) == outside_header(msg)        # every other byte unchanged
    assert read_header(out).delivery_count == count


def test_set_delivery_count_keeps_field_bytes():
    # durable as 0x56 0x01 (the long boolean form) and ttl as a full 4-byte uint: both kept verbatim
    hdr = b"\x00\x53\x70\xc0\x0a\x03\x56\x01\x50\x05\x70\x00\x00\x00\x07"
    msg = hdr + encode_message(body=b"x")
    out = set_delivery_count(msg, 2)
    assert out == b"\x00\x53\x70\xc0\x0d\x05\x56\x01\x50\x05\x70\x00\x00\x00\x07\x40\x52\x02" + msg[len(hdr):]
    assert read_header(out) == HeaderInfo(True, 5, 7, False, 2)


def test_set_delivery_count_creates_header_at_front():
    msg = encode_message(body=b"abc", to="q", message_id=1, annotations={"x-opt-k": 1})
    assert scan(msg).header is None
    out = set_delivery_count(msg, 3)
    assert out.endswith(msg) and len(out) > len(msg)
    assert read_header(out) == HeaderInfo(delivery_count=3)
    p = pdecode(out)
    assert p.delivery_count == 3 and p.address == "q" and bytes(p.body) == b"abc"
    # the default values need no header at all
    assert set_delivery_count(msg, 0) == msg
    assert set_delivery_count(msg, 0, first_acquirer=False) == msg


def test_set_first_acquirer():
    msg = pencode(body="x", first_acquirer=True, delivery_count=1)
    assert pdecode(set_delivery_count(msg, 2)).first_acquirer is True                 # None keeps it
    out = set_delivery_count(msg, 2, first_acquirer=False)
    assert read_header(out) == HeaderInfo(first_acquirer=False, delivery_count=2)
    assert pdecode(out).first_acquirer is False
    out = set_delivery_count(encode_message(body=b"x"), 0, first_acquirer=True)
    assert read_header(out) == HeaderInfo(first_acquirer=True)


def test_set_delivery_count_range():
    with pytest.raises(ValueError):
        set_delivery_count(pencode(body="x"), -1)
    with pytest.raises(ValueError):
        set_delivery_count(pencode(body="x"), 2**32)


@settings(max_examples=150, deadline=None)
@given(durable=st.booleans(), priority=st.integers(0, 255), ttl_ms=st.integers(0, 2**31),
       first=st.booleans(), count=st.integers(0, 2**32 - 1), new=st.integers(0, 2**32 - 1),
       to=st.one_of(st.none(), st.text(max_size=300)), body=st.binary(max_size=600))
def test_roundtrip_property(durable, priority, ttl_ms, first, count, new, to, body):
    msg = pencode(durable=durable, priority=priority, ttl=ttl_ms / 1000, first_acquirer=first,
                  delivery_count=count, address=to, body=body)
    h = read_header(msg)
    p = pdecode(msg)
    assert h == HeaderInfo(p.durable, p.priority, round(p.ttl * 1000) or None, p.first_acquirer,
                           p.delivery_count)
    out = set_delivery_count(msg, new)
    assert read_header(out) == HeaderInfo(h.durable, h.priority, h.ttl, h.first_acquirer, new)
    assert everything(pdecode(out)) == everything(p)
    assert outside_header(out) == outside_header(msg)


# --------------------------------------------------------------------------------------------------
# malformed input
# --------------------------------------------------------------------------------------------------

BODY = b"\x00\x53\x77\x40"

MALFORMED = [
    pytest.param(b"\x00\x53\x70\xc0\x05\x02\x41", id="truncated-header"),
    pytest.param(b"\x00\x53\x70\xc0\x03\x02\x41" + BODY, id="count-beyond-size"),
    pytest.param(b"\x00\x53\x70\xc0\x04\x01\x41\x41" + BODY, id="size-and-count-disagree"),
    pytest.param(b"\x00\x53\x70" + encode_value([UInt(1)]) + BODY, id="durable-not-boolean"),
    pytest.param(b"\x00\x53\x70" + encode_value([None, UInt(4)]) + BODY, id="priority-not-ubyte"),
    pytest.param(b"\x00\x53\x70" + encode_value([None, None, 5]) + BODY, id="ttl-long"),
    pytest.param(b"\x00\x53\x70" + encode_value([None, None, None, "yes"]) + BODY, id="first-acq-string"),
    pytest.param(b"\x00\x53\x70" + encode_value([None, None, None, None, -1]) + BODY, id="count-signed"),
    pytest.param(b"\x00\x53\x70\xc0\x02\x01\xff" + BODY, id="invalid-constructor"),
    pytest.param(b"\x00\x53\x70\xc1\x01\x00" + BODY, id="header-is-a-map"),
    pytest.param(b"\x00\x53\x73\x45\x00\x53\x70\x45" + BODY, id="header-after-properties"),
    pytest.param(b"\x00\x53\x99\x45", id="unknown-section"),
    pytest.param(b"\x01\x02\x03", id="garbage"),
]


@pytest.mark.parametrize("msg", MALFORMED)
def test_malformed_header_raises_codec_error(msg):
    with pytest.raises(CodecError):
        read_header(msg)
    with pytest.raises(CodecError):
        set_delivery_count(msg, 1)
    with pytest.raises(CodecError):
        read_expiry(msg)


def test_malformed_absolute_expiry_time():
    bad_type = b"\x00\x53\x73" + encode_value([None] * 8 + ["tomorrow"]) + BODY
    with pytest.raises(CodecError):
        read_expiry(bad_type)
    truncated = b"\x00\x53\x73\xc0\x0b\x09" + b"\x40" * 8 + b"\x83\x00"
    with pytest.raises(CodecError):
        read_expiry(truncated)
    # the header alone stays readable: read_header does not look at the properties
    assert read_header(bad_type) == HeaderInfo()
