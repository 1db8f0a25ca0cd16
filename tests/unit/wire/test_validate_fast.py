"""wire.validate's one walk for the broker's store path: the common shapes (a durable-only header and one
data section, or that data section alone) are recognised by byte comparisons, the properties offset is
returned for wire.header.properties_expiry, and nothing that the general walk refuses gets through."""

from __future__ import annotations

import proton
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wire.amqptypes import CodecError
from wire.codec import scan
from wire import validate
from wire.validate import _common_shape, validate_message

HEADER_DURABLE = bytes.fromhex("005370c0020141")
DATA = bytes.fromhex("005375")
EMPTY_PROPERTIES = bytes.fromhex("00537345")  # a properties section holding list0


def _data8(body: bytes) -> bytes:
    return DATA + bytes((0xA0, len(body))) + body


def _data32(body: bytes) -> bytes:
    return DATA + b"\xb0" + len(body).to_bytes(4, "big") + body


COMMON = [
    HEADER_DURABLE + _data8(bytes(100)),   # what the benchmark and most clients send
    HEADER_DURABLE + _data8(b""),
    HEADER_DURABLE + _data32(bytes(300)),
    _data8(b"hello"),
    _data32(bytes(1000)),
    HEADER_DURABLE + EMPTY_PROPERTIES + _data8(b"x"),
    EMPTY_PROPERTIES + _data32(bytes(256)),
    bytes(proton.Message(body=b"x" * 100, durable=True, inferred=True).encode()),  # with an empty properties
]


@pytest.mark.parametrize("msg", COMMON, ids=range(len(COMMON)))
def test_common_shapes_are_recognised_and_have_no_properties(msg):
    assert _common_shape(msg, len(msg))
    assert validate_message(msg) == -1


# Near misses: each is refused with the text the general walk gives it (the fast path must not decide).
NEAR = [
    ("data one byte short", HEADER_DURABLE + DATA + b"\xa0\x05abcd", "truncated value"),
    ("data then a stray byte", HEADER_DURABLE + _data8(b"abcde") + b"\x00", "expected a message section"),
    ("data then garbage", HEADER_DURABLE + _data8(b"abcde") + b"\x01\x02\x03", "expected a message section"),
    ("two data sections glued wrong", HEADER_DURABLE + _data8(b"ab") + DATA, "truncated section"),
    ("vbin32 one byte short", HEADER_DURABLE + DATA + b"\xb0\x00\x00\x01\x00" + bytes(255), "truncated value"),
    ("vbin32 size cut", HEADER_DURABLE + DATA + b"\xb0\x00\x00", "truncated size"),
    ("no header, data short", DATA + b"\xa0\x05abcd", "truncated value"),
    ("no header, data cut", DATA + b"\xa0", "truncated"),
    ("data holding a string", HEADER_DURABLE + DATA + b"\xa1\x01x", "must hold binary"),
    ("durable header twice", HEADER_DURABLE + HEADER_DURABLE + _data8(b"x"), "out of order or repeated"),
    ("data after a footer", HEADER_DURABLE + b"\x00Sx\xc1\x01\x00" + _data8(b"x"), "after the footer"),
    ("empty properties, data short", HEADER_DURABLE + EMPTY_PROPERTIES + DATA + b"\xa0\x02x", "truncated value"),
    ("empty properties twice", EMPTY_PROPERTIES + EMPTY_PROPERTIES + _data8(b"x"), "out of order or repeated"),
    ("properties before the header", EMPTY_PROPERTIES + HEADER_DURABLE + _data8(b"x"), "out of order or repeated"),
    # the general walk's inline type checks (data, header, properties) say what _check_value says
    ("header holding a map", b"\x00Sp\xc1\x01\x00" + _data8(b"x"), "section 0x70 must hold a list, not type 0xc1"),
    ("properties holding a string", HEADER_DURABLE + b"\x00Ss\xa1\x01x" + _data8(b"x"),
     "section 0x73 must hold a list, not type 0xa1"),
    ("data holding a list", HEADER_DURABLE + b"\x00Sr\xc1\x01\x00" + DATA + b"\xc0\x01\x00",
     "a data section must hold binary, not type 0xc0"),
    ("sequence holding null", b"\x00Sv\x40", "section 0x76 must hold a list, not type 0x40"),
]


@pytest.mark.parametrize("name,data,why", NEAR, ids=[n[0] for n in NEAR])
def test_near_misses_of_the_common_shapes_are_refused(name, data, why):
    assert not _common_shape(data, len(data))
    with pytest.raises(CodecError, match=why):
        validate_message(data)


def test_every_truncation_of_a_common_shape_is_refused_or_still_whole():
    msg = HEADER_DURABLE + _data8(bytes(40))
    for n in range(len(msg)):
        cut = msg[:n]
        if n == len(HEADER_DURABLE):  # the header alone is a whole message (no body: proton's null body)
            assert validate_message(cut) == -1
            continue
        with pytest.raises(CodecError):
            validate_message(cut)


def test_the_properties_offset_is_where_scan_finds_them():
    msg = bytes(proton.Message(body=b"x", durable=True, id="ID:1", address="q", expiry_time=1.7e9,
                               properties={"k": 1}, annotations={"x-opt-a": 1}, inferred=True).encode())
    start, _end = scan(msg).properties
    assert validate_message(msg) == start + 3  # after its small-ulong descriptor
    assert validate_message(bytes(proton.Message(body="x", properties={"k": 1}).encode())) == -1
    assert validate_message(bytes(proton.Message(body=b"x", inferred=True).encode())) == -1  # list0 header
    # an empty properties list (or null) has no absolute-expiry-time to read: -1 as well
    for value in (b"\x45", b"\x40"):
        assert validate_message(b"\x00\x53\x73" + value + b"\x00Sw\xa1\x01x") == -1
    assert validate_message(b"\x00\x53\x73\xc0\x01\x00" + b"\x00Sw\xa1\x01x") == 3  # list8, no fields


def _general(msg):
    """The general walk's answer for ``msg`` (the common-shape check switched off): the properties
    offset, or the error text."""
    saved = validate._common_shape
    validate._common_shape = lambda msg, n: False
    try:
        return validate_message(msg)
    except CodecError as exc:
        return str(exc)
    finally:
        validate._common_shape = saved


@settings(max_examples=300, deadline=None)
@given(body=st.binary(max_size=400), durable=st.booleans(), extra=st.binary(min_size=1, max_size=4),
       cut=st.integers(1, 6), flip=st.integers(0, 15), to=st.integers(0, 255))
def test_fast_path_gives_the_general_walks_answer(body, durable, extra, cut, flip, to):
    whole = (HEADER_DURABLE if durable else b"") + (EMPTY_PROPERTIES if len(body) % 3 == 0 else b"") + \
        (_data8(body) if len(body) < 256 else _data32(body))
    changed = bytearray(whole)
    changed[min(flip, len(whole) - 1)] = to
    for msg in (whole, whole + extra, whole[:-cut], bytes(changed)):
        general = _general(msg)
        if _common_shape(msg, len(msg)):
            assert general == -1
        try:
            got = validate_message(msg)
        except CodecError as exc:
            got = str(exc)
        assert got == general
