"""Tests for wire.codec: section scanning, router annotations, the value codec, checked against proton."""

from __future__ import annotations

import math
import random
import struct
import uuid

import proton
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proton import Message

from wire import codec
from wire.codec import (
    Array, Byte, Char, CodecError, Decimal32, Decimal64, Decimal128, Described, Float32, Int,
    RouterAnnotations, Sections, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort, decode_value,
    encode_message, encode_value, message_body_bytes, message_to, properties_fields,
    read_router_annotations, scan, set_router_annotations, strip_router_annotations,
)

# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------

ROUTER_KEYS = ("x-opt-qd.to", "x-opt-qd.phase", "x-opt-qd.ingress", "x-opt-qd.trace", "x-opt-qd.stream")


def pencode(**kw) -> bytes:
    inferred = kw.pop("inferred", None)
    m = Message(**kw)
    if inferred is not None:
        m.inferred = inferred
    return bytes(m.encode())          # proton returns a bytearray; the router hands the codec bytes


def pdecode(b: bytes) -> Message:
    m = Message()
    m.decode(b)
    return m


def body_of(m: Message):
    b = m.body
    if isinstance(b, memoryview):
        return bytes(b)
    return b


def fields(m: Message) -> dict:
    """Everything of a proton message except the annotations."""
    return dict(
        address=m.address, reply_to=m.reply_to, id=m.id, correlation_id=m.correlation_id,
        user_id=bytes(m.user_id or b""), subject=m.subject, content_type=m.content_type,
        group_id=m.group_id, properties=dict(m.properties or {}), body=body_of(m),
        durable=m.durable, priority=m.priority, ttl=m.ttl, instructions=dict(m.instructions or {}),
        inferred=m.inferred, delivery_count=m.delivery_count, first_acquirer=m.first_acquirer,
    )


def user_annotations(m: Message) -> dict:
    return {str(k): v for k, v in (m.annotations or {}).items() if not str(k).startswith("x-opt-qd.")}


def ref_sections(b: bytes):
    """Independent section walk with decode_value: [(code, start, end)]."""
    out = []
    pos = 0
    while pos < len(b):
        v, end = decode_value(b, pos)
        assert isinstance(v, Described)
        out.append((int(v.descriptor), pos, end))
        pos = end
    return out


# A catalogue of proton-built messages covering the id types, annotations (user and router), properties
# and body kinds.
U1 = uuid.UUID("12345678-1234-5678-9abc-def012345678")
PROTON_MESSAGES = {
    "minimal": dict(body="hello"),
    "no-body": dict(address="a"),
    "address-str-id": dict(address="examples", id="id-1", reply_to="replies", correlation_id="c-1",
                           body="hi"),
    "ulong-ids": dict(address="q1", id=proton.ulong(7), correlation_id=proton.ulong(1 << 40), body=b"x"),
    "uuid-ids": dict(address="q/uuid", id=U1, correlation_id=U1, body={"a": 1}),
    "binary-ids": dict(address="q.bin", id=b"\x00\x01", correlation_id=b"\xff" * 300, body=[1, 2, 3]),
    "user-annotations": dict(address="ua", annotations={"x-opt-user": "v", "x-opt-n": 5,
                                                        proton.symbol("x-opt-l"): [1, "a"]},
                             body="b"),
    "router-annotations": dict(address="ra", annotations={
        "x-opt-user": "v",
        "x-opt-qd.to": "override/addr",
        "x-opt-qd.phase": proton.int32(1),
        "x-opt-qd.ingress": "0/RouterA",
        "x-opt-qd.trace": ["0/RouterA", "0/RouterB"],
    }, body="b"),
    "router-only": dict(address="ro", annotations={"x-opt-qd.ingress": "0/R", "x-opt-qd.trace": ["0/R"]},
                        body=b"payload"),
    "router-first": dict(address="rf", annotations={"x-opt-qd.to": "t", "user-a": 1, "x-opt-qd.class": "c",
                                                    "user-b": "two", "x-opt-qd.stream": proton.int32(1)},
                         body="b"),
    "router-lookalike-value": dict(address="lv", annotations={"k": "x-opt-qd.to", "x-opt-qd": 1,
                                                              "x-opt-qd.": "bare"}, body="x-opt-qd."),
    "properties": dict(address="p", properties={"k": "v", "n": 42, "f": 1.5, "b": True, "none": None},
                       subject="subj", user_id=b"user", content_type="text/plain", group_id="g",
                       body="body"),
    "header-fields": dict(address="h", durable=True, priority=9, ttl=1.5, first_acquirer=True,
                          delivery_count=3, body="x"),
    "delivery-annotations": dict(address="da", instructions={"x-opt-da": "v"}, body="x"),
    "da-and-ma": dict(address="dama", instructions={"x-opt-da": 1},
                      annotations={"x-opt-qd.to": "o", "u": 1}, body="x"),
    "data-section": dict(address="data", body=b"\x00\x01binary", inferred=True),
    "sequence-section": dict(address="seq", body=[1, "two", None], inferred=True),
    "map-body": dict(address="mapbody", body={"k": [1, 2], "n": None}),
    "big": dict(address="big/" + "a" * 300, reply_to="r" * 400,
                annotations={"x-opt-big": "v" * 300, "x-opt-qd.trace": ["r%d" % i for i in range(60)]},
                properties={"p%d" % i: i for i in range(40)}, body=b"z" * 5000, inferred=True),
    "no-address-reply": dict(reply_to="only-reply", body="x"),
    "unicode": dict(address="adresse/ünï", annotations={"x-opt-qd.to": "zíel"}, body="ü"),
}


@pytest.fixture(params=sorted(PROTON_MESSAGES))
def pmsg(request):
    kw = dict(PROTON_MESSAGES[request.param])
    return Message(**{k: v for k, v in kw.items() if k != "inferred"}), pencode(**kw)


# --------------------------------------------------------------------------------------------------
# scan / message_to / properties_fields agree with proton
# --------------------------------------------------------------------------------------------------

def test_scan_matches_reference_walk(pmsg):
    _, b = pmsg
    s = scan(b)
    ref = ref_sections(b)
    names = {0x70: "header", 0x71: "delivery_annotations", 0x72: "message_annotations",
             0x73: "properties", 0x74: "application_properties"}
    expect = {n: None for n in names.values()}
    body = None
    for code, start, end in ref:
        if code in names:
            expect[names[code]] = (start, end)
        elif 0x75 <= code <= 0x77 and body is None:
            body = start
    for n, v in expect.items():
        assert getattr(s, n) == v, n
    assert s.body_start == body


def test_message_to_matches_proton(pmsg):
    m, b = pmsg
    assert message_to(b) == m.address


def test_properties_fields_match_proton(pmsg):
    m, b = pmsg
    f = properties_fields(b, 7)
    m2 = pdecode(b)
    assert f[0] == m2.id
    assert (f[1] or b"") == bytes(m2.user_id or b"")
    assert f[2] == m2.address
    assert f[3] == m2.subject
    assert f[4] == m2.reply_to
    assert f[5] == m2.correlation_id
    # proton 0.40 reports an absent content-type as symbol("None")
    assert f[6] == (None if m2.content_type == "None" else m2.content_type)
    assert len(properties_fields(b, 20)) == 20
    assert properties_fields(b, 0) == []


def test_message_to_symbol_and_null():
    props = encode_value(Described(ULong(0x73), [None, None, Symbol("sym/addr")]))
    assert message_to(props) == "sym/addr"
    props = encode_value(Described(ULong(0x73), ["id", None, None, "subj"]))
    assert message_to(props) is None
    props = encode_value(Described(ULong(0x73), ["id"]))
    assert message_to(props) is None
    assert message_to(b"") is None
    long_to = "t" * 1000
    props = encode_value(Described(ULong(0x73), [None, None, long_to]))
    assert message_to(props) == long_to
    props = encode_value(Described(ULong(0x73), [None, None, Symbol(long_to)]))
    assert message_to(props) == long_to
    with pytest.raises(CodecError):
        message_to(encode_value(Described(ULong(0x73), [None, None, 5])))


def test_scan_empty_and_body_only():
    assert scan(b"") == Sections()
    b = encode_message(body=b"abc")
    s = scan(b)
    assert s.body_start == 0 and s.properties is None


# --------------------------------------------------------------------------------------------------
# router annotations
# --------------------------------------------------------------------------------------------------

def expected_router(m: Message):
    ann = {str(k): v for k, v in (m.annotations or {}).items()}
    if not any(k.startswith("x-opt-qd.") for k in ann):
        return None
    tr = ann.get("x-opt-qd.trace")
    return RouterAnnotations(
        to_override=ann.get("x-opt-qd.to"),
        phase=None if ann.get("x-opt-qd.phase") is None else int(ann["x-opt-qd.phase"]),
        ingress=ann.get("x-opt-qd.ingress"),
        trace=None if tr is None else list(tr),
        stream=None if ann.get("x-opt-qd.stream") is None else int(ann["x-opt-qd.stream"]),
    )


def test_read_router_annotations_matches_proton(pmsg):
    m, b = pmsg
    assert read_router_annotations(b) == expected_router(m)


def test_strip_matches_proton(pmsg):
    m, b = pmsg
    out = strip_router_annotations(b)
    has_router = any(str(k).startswith("x-opt-qd.") for k in (m.annotations or {}))
    if not has_router:
        assert out is b
        return
    assert out is not b
    d = pdecode(out)
    assert user_annotations(d) == user_annotations(pdecode(b))
    assert {str(k) for k in (d.annotations or {})} == set(user_annotations(pdecode(b)))
    assert fields(d) == fields(pdecode(b))
    assert read_router_annotations(out) is None
    assert strip_router_annotations(out) is out
    # every byte outside the message-annotations section is unchanged
    s_in, s_out = scan(b), scan(out)
    a, e = s_in.message_annotations
    assert out[:a] == b[:a]
    assert out.endswith(b[e:])
    if user_annotations(pdecode(b)):
        assert s_out.message_annotations is not None
        # user entries keep their bytes and order
        assert list(d.annotations) == [k for k in pdecode(b).annotations if not str(k).startswith("x-opt-qd.")]
    else:
        assert s_out.message_annotations is None
        assert out == b[:a] + b[e:]


SETS = [
    dict(to_override="new/to"),
    dict(ingress="0/RouterX", trace=["0/RouterX"]),
    dict(to_override="t", phase=1, ingress="0/I", trace=["0/A", "0/B", "0/C"]),
    dict(phase=-5),
    dict(phase=1000, trace=[]),
    dict(trace=["r%03d" % i for i in range(100)], ingress="i" * 300),
    dict(),
]


@pytest.mark.parametrize("kw", SETS, ids=[",".join(k) or "nothing" for k in SETS])
def test_set_matches_proton(pmsg, kw):
    m, b = pmsg
    out = set_router_annotations(b, **kw)
    before = pdecode(b)
    d = pdecode(out)
    assert fields(d) == fields(before)
    ann = d.annotations or {}
    keys = [str(k) for k in ann]
    users = [k for k in keys if not k.startswith("x-opt-qd.")]
    assert users == list(user_annotations(before))
    assert user_annotations(d) == user_annotations(before)
    router_keys = [k for k in keys if k.startswith("x-opt-qd.")]
    names = {"to_override": "x-opt-qd.to", "phase": "x-opt-qd.phase", "ingress": "x-opt-qd.ingress",
             "trace": "x-opt-qd.trace"}
    assert router_keys == [names[k] for k in ("to_override", "phase", "ingress", "trace") if k in kw]
    # router keys come after all user annotations
    assert keys == users + router_keys
    for k, v in kw.items():
        got = ann[proton.symbol(names[k])]
        if k == "phase":
            assert type(got) is proton.int32 and got == v
        elif k == "trace":
            assert list(got) == v
        else:
            assert type(got) is str and got == v
    ra = read_router_annotations(out)
    if kw:
        assert ra == RouterAnnotations(**kw)
    else:
        assert ra is None
    # all bytes before the MA section (or its insertion point) and after it are unchanged
    s_in, s_out = scan(b), scan(out)
    if s_in.message_annotations:
        a, e = s_in.message_annotations
        assert out[:a] == b[:a] and out.endswith(b[e:])
    if s_out.message_annotations:
        a, e = s_out.message_annotations
        assert out[:a] + out[e:] == (b if s_in.message_annotations is None
                                     else b[:s_in.message_annotations[0]] + b[s_in.message_annotations[1]:])


def test_set_creates_ma_in_place():
    # header + delivery-annotations, no MA: the new MA goes after DA, before properties
    b = pencode(address="x", durable=True, instructions={"k": 1}, body="b")
    s = scan(b)
    assert s.message_annotations is None and s.delivery_annotations is not None
    out = set_router_annotations(b, ingress="0/R")
    s2 = scan(out)
    assert s2.message_annotations[0] == s.delivery_annotations[1]
    assert s2.properties[0] == s2.message_annotations[1]
    assert out[:s.delivery_annotations[1]] == b[:s.delivery_annotations[1]]
    assert out[s2.message_annotations[1]:] == b[s.delivery_annotations[1]:]
    d = pdecode(out)
    assert dict(d.annotations) == {proton.symbol("x-opt-qd.ingress"): "0/R"}
    assert dict(d.instructions) == {proton.symbol("k"): 1}
    # body-only message
    b = encode_message(body=b"p")
    out = set_router_annotations(b, to_override="t")
    assert out.endswith(b) and scan(out).message_annotations == (0, len(out) - len(b))
    assert pdecode(out).annotations == {proton.symbol("x-opt-qd.to"): "t"}
    # empty message
    out = set_router_annotations(b"", trace=["a"])
    assert read_router_annotations(out) == RouterAnnotations(trace=["a"])


def test_set_and_strip_identity():
    b = pencode(address="a", annotations={"u": 1}, body="x")
    assert strip_router_annotations(b) is b
    assert set_router_annotations(b) is b
    b2 = pencode(address="a", body="x")
    assert strip_router_annotations(b2) is b2
    assert set_router_annotations(b2) is b2
    b3 = encode_message(body=b"x")
    assert strip_router_annotations(b3) is b3
    # the prefix inside a user value (not a key) is not a router key
    b4 = pencode(address="a", annotations={"u": "x-opt-qd.to", "x-opt-qd": 1}, body="x")
    assert strip_router_annotations(b4) is b4
    assert read_router_annotations(b4) is None


def test_strip_drops_empty_ma_and_roundtrip():
    b = pencode(address="a", annotations={"x-opt-qd.to": "t"}, body="x")
    out = strip_router_annotations(b)
    assert scan(out).message_annotations is None
    assert pdecode(out).annotations in (None, {})
    again = set_router_annotations(out, to_override="t")
    assert pdecode(again).annotations == pdecode(b).annotations


def test_bytearray_input():
    b = pencode(address="ba", annotations={"u": 1, "x-opt-qd.to": "t"}, body="x")
    ba = bytearray(b)
    assert scan(ba) == scan(b)
    assert message_to(ba) == "ba"
    assert read_router_annotations(ba) == RouterAnnotations(to_override="t")
    assert strip_router_annotations(ba) == strip_router_annotations(b)
    assert type(strip_router_annotations(ba)) is bytes
    assert set_router_annotations(ba, ingress="i") == set_router_annotations(b, ingress="i")
    plain = bytearray(encode_message(body=b"abc"))
    assert strip_router_annotations(plain) is plain
    assert message_body_bytes(plain) == b"abc" and type(message_body_bytes(plain)) is bytes


def test_set_argument_errors():
    b = encode_message(body=b"x")
    with pytest.raises(CodecError):
        set_router_annotations(b, phase=1 << 31)
    with pytest.raises(TypeError):
        set_router_annotations(b, ingress=5)
    with pytest.raises(TypeError):
        set_router_annotations(b, trace=[1])
    with pytest.raises(CodecError):
        encode_value("\ud800")


def test_set_replaces_all_router_keys_anywhere():
    b = pencode(address="a", annotations={"x-opt-qd.to": "t", "u1": 1, "x-opt-qd.class": "c",
                                          "u2": 2, "x-opt-qd.trace": ["a"]}, body="x")
    out = set_router_annotations(b, trace=["a", "b"])
    keys = [str(k) for k in pdecode(out).annotations]
    assert keys == ["u1", "u2", "x-opt-qd.trace"]
    ra = read_router_annotations(b)
    assert ra == RouterAnnotations(to_override="t", trace=["a"])


def test_stream_and_bare_prefix():
    b = set_router_annotations(encode_message(body=b"x"), stream=1)
    assert read_router_annotations(b) == RouterAnnotations(stream=1)
    ann = pdecode(b).annotations
    assert ann[proton.symbol("x-opt-qd.stream")] == 1
    b = pencode(annotations={"x-opt-qd.": "bare"}, body="x")
    assert read_router_annotations(b) == RouterAnnotations()
    assert pdecode(strip_router_annotations(b)).annotations in (None, {})


def test_router_annotations_other_encodings():
    # router values in less usual encodings: str32, symbol, array of symbols, int32, null
    ma = {Symbol("x-opt-qd.to"): Symbol("sym-to"), Symbol("x-opt-qd.ingress"): "i" * 300,
          Symbol("x-opt-qd.trace"): Array("symbol", ["a", "b"]), Symbol("x-opt-qd.phase"): Int(70000),
          Symbol("x-opt-qd.stream"): None}
    b = encode_value(Described(ULong(0x72), ma)) + encode_message(body=b"x")
    assert read_router_annotations(b) == RouterAnnotations(to_override="sym-to", ingress="i" * 300,
                                                           trace=["a", "b"], phase=70000)
    for bad in ({Symbol("x-opt-qd.to"): 5}, {Symbol("x-opt-qd.trace"): "notalist"},
                {Symbol("x-opt-qd.phase"): "1"}, {Symbol("x-opt-qd.trace"): [1]},
                {Symbol("x-opt-qd.trace"): [None]}):
        with pytest.raises(CodecError):
            read_router_annotations(encode_value(Described(ULong(0x72), bad)))
    # a string-typed (not symbol) key is not a router key
    b = encode_value(Described(ULong(0x72), {"x-opt-qd.to": "t"}))
    assert read_router_annotations(b) is None
    assert strip_router_annotations(b) is b
    # sym32 router key
    key = b"\xb3" + struct.pack(">I", 11) + b"x-opt-qd.to"
    entries = key + encode_value("t") + encode_value(Symbol("u")) + encode_value(1)
    ma = b"\x00\x53\x72\xc1" + bytes((len(entries) + 1, 4)) + entries
    assert read_router_annotations(ma) == RouterAnnotations(to_override="t")
    out = strip_router_annotations(ma)
    assert decode_value(out)[0] == Described(ULong(0x72), {Symbol("u"): 1})


def test_map32_ma_kept_compact():
    # proton writes map32; after editing the map header is re-encoded compactly, entries verbatim
    b = pencode(address="a", annotations={"u": 1, "x-opt-qd.to": "t"}, body="x")
    out = strip_router_annotations(b)
    a, e = scan(out).message_annotations
    assert out[a:a + 4] == b"\x00\x53\x72\xc1"


# --------------------------------------------------------------------------------------------------
# descriptor forms, section order, malformed sections
# --------------------------------------------------------------------------------------------------

SYMBOLIC = {0x70: b"amqp:header:list", 0x71: b"amqp:delivery-annotations:map",
            0x72: b"amqp:message-annotations:map", 0x73: b"amqp:properties:list",
            0x74: b"amqp:application-properties:map", 0x75: b"amqp:data:binary",
            0x76: b"amqp:amqp-sequence:list", 0x77: b"amqp:amqp-value:*", 0x78: b"amqp:footer:map"}


def rewrite_descriptors(b: bytes, form: str) -> bytes:
    out = []
    for code, start, end in ref_sections(b):
        assert b[start:start + 3] == bytes((0, 0x53, code))
        if form == "ulong":
            d = b"\x00\x80" + struct.pack(">Q", code)
        elif form == "sym8":
            d = b"\x00\xa3" + bytes((len(SYMBOLIC[code]),)) + SYMBOLIC[code]
        else:
            d = b"\x00\xb3" + struct.pack(">I", len(SYMBOLIC[code])) + SYMBOLIC[code]
        out.append(d + b[start + 3:end])
    return b"".join(out)


@pytest.mark.parametrize("form", ["ulong", "sym8", "sym32"])
@pytest.mark.parametrize("name", ["router-annotations", "user-annotations", "da-and-ma", "data-section",
                                  "properties", "no-body"])
def test_descriptor_forms(form, name):
    kw = dict(PROTON_MESSAGES[name])
    b = pencode(**kw)
    r = rewrite_descriptors(b, form)
    m = Message(**{k: v for k, v in kw.items() if k != "inferred"})
    assert message_to(r) == m.address
    assert read_router_annotations(r) == read_router_annotations(b)
    s = scan(r)
    assert [x is None for x in (s.header, s.delivery_annotations, s.message_annotations, s.properties,
                                s.application_properties, s.body_start)] == \
        [x is None for x in (scan(b).header, scan(b).delivery_annotations, scan(b).message_annotations,
                             scan(b).properties, scan(b).application_properties, scan(b).body_start)]
    st_ = strip_router_annotations(r)
    if read_router_annotations(b) is None:
        assert st_ is r
    else:
        ma = scan(r).message_annotations
        assert st_.startswith(r[:ma[0]])
        assert st_.endswith(r[ma[1]:])
    out = set_router_annotations(r, ingress="0/X")
    assert read_router_annotations(out) == RouterAnnotations(ingress="0/X")
    assert message_to(out) == m.address
    assert properties_fields(out, 3)[2] == m.address
    if name == "data-section":
        assert message_body_bytes(r) == kw["body"]


def sec(code, value) -> bytes:
    return encode_value(Described(ULong(code), value))


def test_section_order_and_unknown_sections():
    H = sec(0x70, [True])
    DA = sec(0x71, {Symbol("d"): 1})
    MA = sec(0x72, {Symbol("m"): 1})
    P = sec(0x73, [None, None, "to"])
    AP = sec(0x74, {"a": 1})
    BODY = sec(0x77, "v")
    ok = H + DA + MA + P + AP + BODY
    assert message_to(ok) == "to"
    assert scan(ok).body_start == len(ok) - len(BODY)
    for bad in (P + MA + BODY, MA + DA + BODY, H + H + BODY, P + P, AP + P, MA + H,
                sec(0x79, [1]) + BODY, sec(0x6F, [1]) + BODY, encode_value(Described(Symbol("x:y"), [])),
                encode_value(Described(ULong((1 << 32) | 0x73), [])) + BODY,
                b"\x53\x73\x45", b"\x00\x50\x73\x45"):
        with pytest.raises(CodecError):
            scan(bad)
        if not bad.startswith((P, AP)):          # message_to stops at the first properties section
            with pytest.raises(CodecError):
                message_to(bad + P)
    # set/strip/read walk up to the message-annotations section: errors there are caught too
    for bad in (H + H + MA, DA + H, sec(0x6F, [1]) + MA, b"\x00\x50\x72\xc1\x01\x00"):
        for f in (read_router_annotations, strip_router_annotations,
                  lambda b: set_router_annotations(b, ingress="x")):
            with pytest.raises(CodecError):
                f(bad)
    # wrong value types for sections
    for bad in (sec(0x70, {"a": 1}), sec(0x72, [1]), sec(0x73, {"a": 1}), sec(0x72, "s"), sec(0x71, [])):
        with pytest.raises(CodecError):
            scan(bad + BODY)
    # null section values are accepted as empty
    assert message_to(sec(0x72, None) + P + BODY) == "to"
    assert strip_router_annotations(sec(0x72, None) + P) == sec(0x72, None) + P
    out = set_router_annotations(sec(0x72, None) + P, to_override="o")
    assert read_router_annotations(out) == RouterAnnotations(to_override="o")


def test_footer_only_and_body_start():
    F = sec(0x78, {Symbol("f"): 1})
    s = scan(sec(0x73, ["i"]) + F)
    assert s.body_start is None and s.properties is not None
    b = encode_message(body=b"x") + F
    assert scan(b).body_start == 0
    assert message_body_bytes(b) == b"x"


def test_message_body_bytes():
    assert message_body_bytes(encode_message(body=b"timestamp:123", to="q")) == b"timestamp:123"
    assert message_body_bytes(encode_message(body=b"")) == b""
    big = bytes(range(256)) * 10
    assert message_body_bytes(encode_message(body=big, annotations={"k": 1})) == big
    assert message_body_bytes(encode_message(body_value="str")) is None
    assert message_body_bytes(pencode(body=b"abc")) is None            # proton: amqp-value binary
    assert message_body_bytes(pencode(body=b"abc", inferred=True)) == b"abc"
    two = encode_message(body=b"a") + sec(0x75, b"b")
    assert message_body_bytes(two) is None
    assert message_body_bytes(pencode(address="a")) is None
    with pytest.raises(CodecError):
        message_body_bytes(sec(0x75, "not binary"))
    with pytest.raises(CodecError):
        message_body_bytes(encode_message(body=b"a") + sec(0x77, 1))


# --------------------------------------------------------------------------------------------------
# encode_message
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw", [
    dict(body=b"payload", to="q1"),
    dict(body=b"", to="q1", message_id=5, correlation_id="c", reply_to="r"),
    dict(body_value={"a": [1, 2]}, to="mgmt", message_id=U1, correlation_id=b"\x01\x02"),
    dict(body_value="text", message_id="m1", durable=True),
    dict(body=b"x" * 1000, priority=7, ttl=2500, annotations={"x-opt-a": 1, "x-opt-qd.to": "z"},
         application_properties={"operation": "QUERY", "n": 3, "f": 2.5, "t": True}),
    dict(to="nobody"),
    dict(body=b"b", to="t" * 300, durable=True, priority=0),
])
def test_encode_message_with_proton(kw):
    b = encode_message(**kw)
    m = pdecode(b)
    assert m.address == kw.get("to")
    assert m.reply_to == kw.get("reply_to")
    mid = kw.get("message_id")
    assert m.id == mid
    if isinstance(mid, int):                   # an int message-id is a ulong on the wire
        a, e = scan(b).properties
        assert type(proton_decode(b[a:e]).value[0]) is proton.ulong
    assert m.correlation_id == kw.get("correlation_id")
    assert m.durable == kw.get("durable", False)
    assert m.priority == (kw["priority"] if kw.get("priority") is not None else 4)
    assert m.ttl == (kw["ttl"] / 1000 if kw.get("ttl") else 0)
    assert {str(k): v for k, v in (m.annotations or {}).items()} == (kw.get("annotations") or {})
    assert all(type(k) is proton.symbol for k in (m.annotations or {}))
    assert dict(m.properties or {}) == (kw.get("application_properties") or {})
    if "body" in kw:
        assert m.inferred and body_of(m) == kw["body"]
        assert message_body_bytes(b) == kw["body"]
    else:
        assert body_of(m) == kw.get("body_value")
    if not (kw.get("durable") or kw.get("priority") is not None or kw.get("ttl")):
        assert scan(b).header is None
    assert message_to(b) == kw.get("to")
    assert scan(b).body_start is not None


def test_encode_message_rejects_both_bodies():
    with pytest.raises(ValueError):
        encode_message(body=b"a", body_value="b")


# --------------------------------------------------------------------------------------------------
# value codec: exact encodings, round trips, agreement with proton.Data
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value,expected", [
    (None, "40"), (True, "41"), (False, "42"),
    (UByte(7), "5007"), (UShort(258), "600102"),
    (UInt(0), "43"), (UInt(200), "52c8"), (UInt(1 << 20), "7000100000"),
    (ULong(0), "44"), (ULong(255), "53ff"), (ULong(256), "800000000000000100"),
    (Byte(-1), "51ff"), (Short(-2), "61fffe"), (Int(-128), "5480"), (Int(128), "7100000080"),
    (0, "5500"), (-1, "55ff"), (1 << 40, "810000010000000000"),
    (Float32(1.5), "723fc00000"), (1.5, "823ff8000000000000"),
    (Char("A"), "7300000041"), (Timestamp(1), "830000000000000001"),
    (Decimal32(b"\x01\x02\x03\x04"), "7401020304"),
    (U1, "98" + U1.hex),
    (b"", "a000"), (b"ab", "a0026162"), (b"x" * 256, "b000000100" + "78" * 256),
    ("", "a100"), ("é", "a102c3a9"), (Symbol("s"), "a30173"),
    ([], "45"), ([None], "c0020140"), ({}, "c10100"), ({Symbol("k"): 1}, "c10602a3016b5501"),
    (Described(ULong(0x70), []), "005370" + "45"),
    (Described(Symbol("d"), None), "00a3016440"),
    (Array("int", [1, 2]), "e00402540102"), (Array("int", [1000]), "e0060171000003e8"),
    (Array("symbol", ["a", "bc"]), "e00702a301610262" + "63"),
    (Array("boolean", [True, False]), "e004025601" + "00"),
    (Array("null", [None, None]), "e0020240"),
    (Array("ulong", [1], descriptor=ULong(9)), "e00601005309530" + "1"),
])
def test_exact_encodings(value, expected):
    assert encode_value(value).hex() == expected
    v, end = decode_value(bytes.fromhex(expected))
    assert end == len(expected) // 2
    assert v == value and type(v) is type(value)
    if isinstance(value, Array):
        assert v.type == value.type and v.descriptor == value.descriptor


def test_big_ints():
    assert encode_value(1 << 63).hex() == "808000000000000000"
    assert decode_value(encode_value(1 << 63))[0] == ULong(1 << 63)
    assert encode_value(-(1 << 63)).hex() == "818000000000000000"


def test_list32_and_map32():
    v = list(range(300))
    b = encode_value(v)
    assert b[0] == 0xD0
    assert decode_value(b)[0] == v
    m = {str(i): i for i in range(200)}
    b = encode_value(m)
    assert b[0] == 0xD1
    assert decode_value(b)[0] == m
    s = "ü" * 200
    assert encode_value(s)[0] == 0xB1 and decode_value(encode_value(s))[0] == s


def test_encode_errors():
    for bad in (UByte(256), UByte(-1), Int(1 << 31), ULong(-1), 1 << 64, -(1 << 63) - 1, Symbol("ü"),
                Char("ab"), Decimal32(b"\x00"), Short(1 << 15)):
        with pytest.raises(CodecError):
            encode_value(bad)
    with pytest.raises(TypeError):
        encode_value(object())
    with pytest.raises(TypeError):
        encode_value({1, 2})


def test_decode_odd_inputs():
    # map with a list key -> tuple key; map key that is a map -> CodecError
    k = encode_value([1, 2])
    b = bytes((0xC1, len(k) + 2, 2)) + k + b"\x40"
    assert decode_value(b)[0] == {(1, 2): None}
    b = bytes((0xC1, 1 + len(encode_value({1: 2})) + 1, 2)) + encode_value({1: 2}) + b"\x40"
    with pytest.raises(CodecError):
        decode_value(b)
    # boolean octet other than 0/1, invalid char, odd map, list size/count disagreement, bad utf-8
    for bad in ("5602", "73ffffffff", "7300d800" + "00", "c1020140", "c0030140", "c0020240",
                "a102c3", "a101ff", "a301c3", "e00100", "e0020000", "ff", "00", "0040", "f0", "b0000000",
                "e00202ff", "e0020100", "e00302" + "a1" + "00"):
        with pytest.raises(CodecError):
            decode_value(bytes.fromhex(bad))
    # deep nesting is refused, not a RecursionError
    v = b"\x40"
    for _ in range(200):
        v = bytes((0xC0, len(v) + 1, 1)) + v if len(v) < 250 else b"\xd0" + struct.pack(">II", len(v) + 4, 1) + v
    with pytest.raises(CodecError):
        decode_value(v)
    with pytest.raises(CodecError):
        decode_value(b"\x00" * 100000)
    # array of many zero-width elements is refused
    with pytest.raises(CodecError):
        decode_value(b"\xf0" + struct.pack(">II", 5, 1 << 30) + b"\x40")
    # offset argument
    b = b"junk" + encode_value("abc") + encode_value(5)
    v, p = decode_value(b, 4)
    assert v == "abc"
    assert decode_value(b, p) == (5, len(b))


# hypothesis strategies for AMQP values (typed so that round trips are exact)
def _finite_f32():
    return st.floats(width=32, allow_nan=False).map(Float32)


scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(0, 255).map(UByte), st.integers(0, 65535).map(UShort),
    st.integers(0, 2 ** 32 - 1).map(UInt), st.integers(0, 2 ** 64 - 1).map(ULong),
    st.integers(-128, 127).map(Byte), st.integers(-2 ** 15, 2 ** 15 - 1).map(Short),
    st.integers(-2 ** 31, 2 ** 31 - 1).map(Int), st.integers(-2 ** 63, 2 ** 63 - 1),
    _finite_f32(), st.floats(allow_nan=False),
    st.characters(blacklist_categories=("Cs",)).map(Char),
    st.integers(-2 ** 63, 2 ** 63 - 1).map(Timestamp),
    st.binary(min_size=4, max_size=4).map(Decimal32), st.binary(min_size=8, max_size=8).map(Decimal64),
    st.binary(min_size=16, max_size=16).map(Decimal128),
    st.uuids(), st.binary(max_size=300), st.text(max_size=300),
    st.text(alphabet=st.characters(max_codepoint=127), max_size=300).map(Symbol),
)
hashable_keys = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 63 - 1), st.text(max_size=20),
                          st.text(alphabet=st.characters(max_codepoint=127), max_size=20).map(Symbol),
                          st.integers(0, 2 ** 64 - 1).map(ULong), st.binary(max_size=10), st.uuids())

ARRAY_ELEMS = {
    "ubyte": st.integers(0, 255).map(UByte), "uint": st.integers(0, 2 ** 32 - 1).map(UInt),
    "ulong": st.integers(0, 2 ** 64 - 1).map(ULong), "int": st.integers(-2 ** 31, 2 ** 31 - 1).map(Int),
    "long": st.integers(-2 ** 63, 2 ** 63 - 1), "short": st.integers(-2 ** 15, 2 ** 15 - 1).map(Short),
    "double": st.floats(allow_nan=False), "boolean": st.booleans(),
    "string": st.text(max_size=300), "binary": st.binary(max_size=300),
    "symbol": st.text(alphabet=st.characters(max_codepoint=127), max_size=20).map(Symbol),
    "uuid": st.uuids(), "timestamp": st.integers(-2 ** 63, 2 ** 63 - 1).map(Timestamp),
    "char": st.characters(blacklist_categories=("Cs",)).map(Char),
    "float": _finite_f32(),
}
# the element type a decoded array element has for each array type
ARRAY_DECODED_TYPE = {"ubyte": UByte, "uint": UInt, "ulong": ULong, "int": Int, "long": int,
                      "short": Short, "double": float, "boolean": bool, "string": str, "binary": bytes,
                      "symbol": Symbol, "uuid": uuid.UUID, "timestamp": Timestamp, "char": Char,
                      "float": Float32}


@st.composite
def arrays(draw):
    t = draw(st.sampled_from(sorted(ARRAY_ELEMS)))
    items = draw(st.lists(ARRAY_ELEMS[t], max_size=20))
    desc = draw(st.one_of(st.none(), st.integers(0, 2 ** 64 - 1).map(ULong)))
    return Array(t, items, desc)


values = st.recursive(
    st.one_of(scalars, arrays()),
    lambda children: st.one_of(
        st.lists(children, max_size=8),
        st.dictionaries(hashable_keys, children, max_size=6),
        st.builds(Described, st.one_of(st.integers(0, 2 ** 64 - 1).map(ULong),
                                       st.text(alphabet=st.characters(max_codepoint=127),
                                               max_size=20).map(Symbol)), children),
    ),
    max_leaves=30,
)


def same(a, b) -> bool:
    """Deep equality that also checks the Python (= AMQP) types."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Described):
        return same(a.descriptor, b.descriptor) and same(a.value, b.value)
    if isinstance(a, Array):
        return a.type == b.type and same(a.descriptor, b.descriptor) and \
            len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(k1, k2) and same(a[k1], b[k2]) for k1, k2 in zip(a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_value_roundtrip(v):
    b = encode_value(v)
    d, end = decode_value(b)
    assert end == len(b)
    assert same(d, v), (d, v)
    assert encode_value(d) == b


@given(arrays())
def test_array_element_types(a):
    d = decode_value(encode_value(a))[0]
    assert all(type(x) is ARRAY_DECODED_TYPE[a.type] for x in d)


# --- agreement with proton.Data ---------------------------------------------------------------------

def to_proton(v):
    if v is None or type(v) in (bool, int, float, str, bytes, uuid.UUID):
        return v
    if isinstance(v, Symbol):
        return proton.symbol(v)
    if isinstance(v, Char):
        return proton.char(v)
    conv = {UByte: proton.ubyte, UShort: proton.ushort, UInt: proton.uint, ULong: proton.ulong,
            Byte: proton.byte, Short: proton.short, Int: proton.int32, Timestamp: proton.timestamp,
            Float32: proton.float32}
    if type(v) in conv:
        return conv[type(v)](v)
    if isinstance(v, Decimal32):
        return proton.decimal32(int.from_bytes(v, "big"))
    if isinstance(v, Decimal64):
        return proton.decimal64(int.from_bytes(v, "big"))
    if isinstance(v, Decimal128):
        return proton.decimal128(bytes(v))
    if isinstance(v, Described):
        return proton.Described(to_proton(v.descriptor), to_proton(v.value))
    if isinstance(v, Array):
        code = getattr(proton.Data, v.type.upper() if v.type != "boolean" else "BOOL")
        desc = proton.UNDESCRIBED if v.descriptor is None else to_proton(v.descriptor)
        return proton.Array(desc, code, *[to_proton(x) for x in v])
    if isinstance(v, list):
        return [to_proton(x) for x in v]
    if isinstance(v, dict):
        return {to_proton(k): to_proton(x) for k, x in v.items()}
    raise TypeError(type(v))


def from_proton(v):
    if v is None or type(v) in (bool, int, float, str, bytes, uuid.UUID):
        return v
    conv = {proton.ubyte: UByte, proton.ushort: UShort, proton.uint: UInt, proton.ulong: ULong,
            proton.byte: Byte, proton.short: Short, proton.int32: Int, proton.timestamp: Timestamp,
            proton.float32: Float32, proton.symbol: Symbol, proton.char: Char}
    if type(v) in conv:
        return conv[type(v)](v)
    if type(v) is proton.decimal32:
        return Decimal32(int(v).to_bytes(4, "big"))
    if type(v) is proton.decimal64:
        return Decimal64(int(v).to_bytes(8, "big"))
    if type(v) is proton.decimal128:
        return Decimal128(bytes(v))
    if isinstance(v, proton.Described):
        return Described(from_proton(v.descriptor), from_proton(v.value))
    if isinstance(v, proton.Array):
        names = {getattr(proton.Data, n.upper() if n != "boolean" else "BOOL"): n for n in codec._TYPE_NAMES}
        desc = None if v.descriptor is proton.UNDESCRIBED else from_proton(v.descriptor)
        return Array(names[v.type], [from_proton(x) for x in v.elements], desc)
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, list):
        return [from_proton(x) for x in v]
    if isinstance(v, dict):
        return {from_proton(k): from_proton(x) for k, x in v.items()}
    raise TypeError(type(v))


def proton_decode(b: bytes):
    """Decode with proton.Data; binary values are copied out while the Data is alive (proton hands out
    memoryviews into its own buffer)."""
    d = proton.Data()
    d.decode(b)
    d.rewind()
    d.next()
    return _copy_binaries(d.get_object())


def _copy_binaries(v):
    if isinstance(v, memoryview):
        return bytes(v)
    if isinstance(v, proton.Described):
        return proton.Described(_copy_binaries(v.descriptor), _copy_binaries(v.value))
    if isinstance(v, proton.Array):
        return proton.Array(v.descriptor, v.type, *[_copy_binaries(x) for x in v.elements])
    if isinstance(v, list):
        return [_copy_binaries(x) for x in v]
    if isinstance(v, dict):
        return {k: _copy_binaries(x) for k, x in v.items()}
    return v


def proton_encode(v) -> bytes:
    d = proton.Data()
    d.put_object(v)
    return d.encode()


# proton decodes binary as a memoryview, which cannot be a dict key
proton_keys = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 63, 2 ** 63 - 1), st.text(max_size=20),
                        st.text(alphabet=st.characters(max_codepoint=127), max_size=20).map(Symbol),
                        st.integers(0, 2 ** 64 - 1).map(ULong), st.uuids())

# proton's put_object cannot express some shapes (arrays of char / uuid / decimals, empty arrays of
# some kinds); keep the cross-check to what proton handles
proton_values = st.recursive(
    st.one_of(scalars, arrays()),
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(proton_keys, children, max_size=5),
        # proton 0.40 drops the element after a described value whose value is itself described
        # (its own put_object/get_object round trip fails), so no directly nested Described here
        st.builds(Described, st.integers(0, 2 ** 64 - 1).map(ULong),
                  children.filter(lambda c: not isinstance(c, Described))),
    ),
    max_leaves=20,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(proton_values)
def test_agrees_with_proton_data(v):
    # ours -> proton
    got = from_proton(proton_decode(encode_value(v)))
    assert same(got, v), (got, v)
    # proton -> ours
    pb = proton_encode(to_proton(v))
    d, end = decode_value(pb)
    assert end == len(pb)
    assert same(d, v), (d, v)


# --------------------------------------------------------------------------------------------------
# malformed input: only CodecError, never another exception
# --------------------------------------------------------------------------------------------------

HOT = (scan, message_to, read_router_annotations, strip_router_annotations, message_body_bytes,
       lambda b: set_router_annotations(b, ingress="0/R", trace=["0/R"]),
       lambda b: set_router_annotations(b), lambda b: properties_fields(b, 13),
       lambda b: decode_value(b))


def only_codec_errors(b: bytes):
    for f in HOT:
        try:
            f(b)
        except CodecError:
            pass


FUZZ_SEEDS = [pencode(**PROTON_MESSAGES[k]) for k in ("router-annotations", "da-and-ma", "properties",
                                                      "header-fields", "data-section", "uuid-ids",
                                                      "router-first", "big")] + [
    encode_message(body=b"x" * 50, to="q", message_id=1, annotations={"x-opt-qd.to": "t", "u": [1, "a"]},
                   application_properties={"a": 1}, durable=True),
    rewrite_descriptors(pencode(**PROTON_MESSAGES["router-annotations"]), "sym8"),
    rewrite_descriptors(pencode(**PROTON_MESSAGES["da-and-ma"]), "ulong"),
    encode_value([Array("string", ["a", "b"], ULong(3)), {Symbol("k"): Described(Symbol("d"), [1.5])}]),
]


@pytest.mark.parametrize("i", range(len(FUZZ_SEEDS)))
def test_truncations(i):
    b = FUZZ_SEEDS[i]
    for n in range(len(b)):
        only_codec_errors(b[:n])


@pytest.mark.parametrize("i", range(len(FUZZ_SEEDS)))
def test_byte_mutations(i):
    rng = random.Random(i)
    b = FUZZ_SEEDS[i]
    for _ in range(1500):
        m = bytearray(b)
        for _ in range(rng.randint(1, 3)):
            m[rng.randrange(len(m))] = rng.choice((0, 0xFF, 0x40, 0xA1, 0xA3, 0xB1, 0xC0, 0xD1, 0xE0, 0xF0,
                                                   rng.randrange(256)))
        only_codec_errors(bytes(m))


@settings(max_examples=1500)
@given(st.binary(max_size=200))
def test_random_bytes(b):
    only_codec_errors(b)


@settings(max_examples=500)
@given(st.sampled_from(FUZZ_SEEDS), st.data())
def test_random_splices(seed, data):
    a = data.draw(st.integers(0, len(seed)))
    e = data.draw(st.integers(a, len(seed)))
    junk = data.draw(st.binary(max_size=20))
    only_codec_errors(seed[:a] + junk + seed[e:])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(values)
def test_truncated_values(v):
    b = encode_value(v)
    for n in range(len(b)):
        try:
            decode_value(b[:n])
        except CodecError:
            pass
        else:
            raise AssertionError(f"truncation at {n} of {b.hex()} decoded")


# -- message_user_and_to (vhost policy, router/policygate.py) --------------------------------------------

@pytest.mark.parametrize("fields,expected", [
    ({"user_id": b"alice", "address": "q"}, (b"alice", "q")),
    ({"user_id": b"u" * 300, "address": "a" * 300}, (b"u" * 300, "a" * 300)),   # vbin32, str32
    ({"address": "q"}, (None, "q")),
    ({"user_id": b"alice"}, (b"alice", None)),
    ({"id": 12345, "user_id": b"bob", "subject": "s"}, (b"bob", None)),
    ({}, (None, None)),
])
def test_message_user_and_to(fields, expected):
    from wire.codec import message_user_and_to

    assert message_user_and_to(proton.Message(body="x", **fields).encode()) == expected


def test_message_user_and_to_refuses_malformed_properties():
    from wire.codec import message_user_and_to

    good = proton.Message(body="x", user_id=b"alice", address="q").encode()
    with pytest.raises(CodecError):
        message_user_and_to(good[:good.index(b"alice") + 2])            # cut inside the properties
    wrong = good.replace(b"\xa0\x05alice", b"\xa1\x05alice")            # user-id as a string
    with pytest.raises(CodecError):
        message_user_and_to(wrong)
