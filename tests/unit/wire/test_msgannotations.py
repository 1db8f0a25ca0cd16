"""wire.msgannotations: read/set/remove symbol keys in message annotations, checked against proton's codec."""

from __future__ import annotations

import timeit

import pytest
from proton import Message, symbol, ulong

from wire.amqptypes import CodecError
from wire.msgannotations import read_annotation, read_annotations, remove_annotations, set_annotations


def _decode(data: bytes) -> Message:
    m = Message()
    m.decode(data)
    return m


def _ann(data: bytes) -> dict:
    """The message annotations proton decodes, with plain str keys (None when there are none)."""
    ann = _decode(data).annotations
    return None if ann is None else {str(k): v for k, v in ann.items()}


def _message(**kw) -> bytes:
    return Message(**kw).encode()


BIG = {f"user-key-{i}": "v" * 20 for i in range(40)}          # > 255 bytes: a map32 from proton

MESSAGES = {
    "bare": _message(body="x"),
    "properties": _message(address="q", id=7, subject="s", body="x"),
    "header": _message(durable=True, priority=7, ttl=5000, body=b"y" * 300),
    "annotations": _message(address="q", annotations={"k": [1, 2], "other": "v", "n": 3}, body="x"),
    "big-annotations": _message(address="q", annotations=BIG, body="x"),
    "everything": _message(durable=True, priority=3, address="q", reply_to="r", correlation_id="c",
                           instructions={"da": 1}, annotations={"u": "v"}, properties={"app": 1},
                           body={"k": "v"}),
}


def _with_footer(data: bytes) -> bytes:
    """``data`` with a footer section (proton's Message cannot set one)."""
    return data + b"\x00\x53\x78\xc1\x06\x02\xa3\x01f\x54\x01"


MESSAGES["footer"] = _with_footer(MESSAGES["everything"])

VALUES = {"s": "text", "n": 12, "big": 1 << 40, "neg": -5, "t": True, "f": False, "path": ["b1", "b2", "b3"],
          "ints": [1, 2, 300], "empty": []}


@pytest.mark.parametrize("name", list(MESSAGES))
def test_set_then_proton_decodes_everything_else_unchanged(name):
    msg = MESSAGES[name]
    before = _decode(msg)
    out = set_annotations(msg, VALUES)
    after = _decode(out)
    ann = _ann(out)
    for k, v in VALUES.items():
        assert ann[k] == v
    for k, v in (_ann(msg) or {}).items():
        if k not in VALUES:
            assert ann[k] == v
    for field in ("durable", "priority", "ttl", "address", "id", "subject", "reply_to", "correlation_id",
                  "instructions", "properties", "body"):
        assert getattr(after, field) == getattr(before, field), field
    assert read_annotations(out, tuple(VALUES)) == VALUES


@pytest.mark.parametrize("name", list(MESSAGES))
def test_set_and_remove_round_trip_to_the_same_bytes(name):
    msg = MESSAGES[name]
    out = set_annotations(msg, {"x-path": ["A"], "x-hops": 1})
    assert remove_annotations(out, ("x-path", "x-hops")) == msg


def test_section_inserted_after_header_and_delivery_annotations_before_properties():
    msg = _message(durable=True, instructions={"da": 1}, address="q", body="x")
    out = set_annotations(msg, {"k": "v"})
    # header 0x70, delivery-annotations 0x71, then our 0x72 before properties 0x73
    codes = [out[i + 2] for i in range(len(out) - 2) if out[i] == 0 and out[i + 1] == 0x53
             and 0x70 <= out[i + 2] <= 0x77]
    assert codes[:4] == [0x70, 0x71, 0x72, 0x73]
    assert _ann(out) == {"k": "v"}


def test_existing_key_replaced_in_place_others_copied_verbatim():
    msg = _message(annotations={"a": "1", "b": "2", "c": "3"}, body="x")
    out = set_annotations(msg, {"b": "two"})
    assert list(_ann(out).items()) == [("a", "1"), ("b", "two"), ("c", "3")]
    assert b"\xa3\x01a\xa1\x011\xa3\x01b\xa1\x03two\xa3\x01c\xa1\x013\x00\x53\x73" in out


def test_unchanged_returns_the_same_object():
    msg = MESSAGES["annotations"]
    assert set_annotations(msg, {"other": "v"}) is msg
    assert remove_annotations(msg, ("absent",)) is msg
    assert set_annotations(MESSAGES["bare"], {"k": None}) is MESSAGES["bare"]


def test_removing_the_last_key_drops_the_section():
    msg = MESSAGES["properties"]
    assert remove_annotations(set_annotations(msg, {"k": 1}), ["k"]) == msg


def test_map8_grows_to_map32_and_a_map32_stays_one():
    small = set_annotations(MESSAGES["bare"], {"k": "v"})
    assert b"\x00\x53\x72\xc1" in small                        # a section we insert is a map8
    large = set_annotations(small, {"k": "v" * 300})
    assert b"\x00\x53\x72\xd1" in large and _ann(large) == {"k": "v" * 300}
    shrunk = remove_annotations(set_annotations(MESSAGES["big-annotations"], {"k": 1}), list(BIG))
    assert b"\x00\x53\x72\xd1" in shrunk and _ann(shrunk) == {"k": 1}


def test_big_map_read_and_edit():
    msg = MESSAGES["big-annotations"]
    assert read_annotation(msg, "user-key-39") == "v" * 20
    out = set_annotations(msg, {"user-key-5": None, "new": [1]})
    ann = _ann(out)
    assert "user-key-5" not in ann and ann["new"] == [1] and len(ann) == 40


def test_read_absent_and_non_symbol_keys():
    assert read_annotation(MESSAGES["bare"], "k") is None
    assert read_annotation(MESSAGES["annotations"], "zz") is None
    assert read_annotations(MESSAGES["bare"], ("k",)) == {}
    # a string-typed key with the same text is not the symbol key
    m = Message(body="x")
    m.annotations = {"k": 1, symbol("s"): 2, ulong(7): 3}
    data = m.encode()
    assert read_annotation(data, "s") == 2
    out = set_annotations(data, {"s": 20})
    assert _decode(out).annotations[symbol("s")] == 20


def test_values_of_other_types_read_as_decoded():
    m = Message(body="x", annotations={"m": {"a": 1}, "b": b"bin", "d": 1.5})
    data = m.encode()
    assert read_annotation(data, "m") == {"a": 1}
    assert read_annotation(data, "b") == b"bin"
    assert read_annotation(data, "d") == 1.5


def test_set_rejects_bad_keys_and_values():
    with pytest.raises(CodecError):
        set_annotations(MESSAGES["bare"], {"ké": 1})
    with pytest.raises(CodecError):
        set_annotations(MESSAGES["bare"], {"k": 1 << 70})
    with pytest.raises(TypeError):
        set_annotations(MESSAGES["bare"], {"k": object()})


_PROPS = b"\x00\x53\x73\x45"                                # an empty properties section
_BODY = b"\x00\x53\x77\xa1\x01x"                             # amqp-value "x"


def _ma(value: bytes) -> bytes:
    return b"\x00\x53\x72" + value + _PROPS + _BODY


MALFORMED = {
    "truncated section": MESSAGES["annotations"][:12],
    "map count odd": _ma(b"\xc1\x06\x03\xa3\x01k\x55\x01"),
    "map size beyond the message": _ma(b"\xc1\x66\x02\xa3\x01k\x55\x01"),
    "map size and entries disagree": _ma(b"\xc1\x07\x02\xa3\x01k\x55\x01\x40"),
    "map32 count beyond size": _ma(b"\xd1\x00\x00\x00\x09\x00\x00\x01\x00\xa3\x01k\x55\x01"),
    "section not a map": _ma(b"\xa1\x01x"),
    "invalid constructor in map": _ma(b"\xc1\x06\x02\xa3\x01k\x02\x01"),
    "truncated key": _ma(b"\xc1\x03\x02\xa3\x09"),
    "garbage": b"\x01\x02\x03\x04",
    "sections out of order": b"\x00\x53\x71\x40\x00\x53\x70\x45" + _ma(b"\xc1\x06\x02\xa3\x01k\x55\x01"),
}


def test_well_formed_control_for_the_malformed_cases():
    good = _ma(b"\xc1\x06\x02\xa3\x01k\x55\x01")
    assert read_annotation(good, "k") == 1 and _ann(good) == {"k": 1}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_raises_codec_error(name):
    data = MALFORMED[name]
    for call in (lambda: read_annotations(data, ("k",)), lambda: set_annotations(data, {"k": 2}),
                 lambda: remove_annotations(data, ("k",))):
        with pytest.raises(CodecError):
            call()


def test_malformed_value_of_the_key_read_raises():
    bad = _message(annotations={"k": "abc"}, body="x").replace(b"\xa1\x03abc", b"\xa1\x03\xff\xfe\xfd", 1)
    with pytest.raises(CodecError):
        read_annotation(bad, "k")


def test_timing():
    """Not asserted: prints the per-call cost (the docstring quotes it)."""
    msg = _message(address="queue.orders", id="msg-1234", durable=True, annotations={"x-opt-a": "v", "n": 1},
                   properties={"app": "x"}, body="p" * 100)
    out = set_annotations(msg, {"x-path": ["broker-a"]})
    n = 20000
    results = {
        "read_annotation (present)": (lambda: read_annotation(out, "x-path")),
        "read_annotation (absent)": (lambda: read_annotation(msg, "x-path")),
        "set_annotations (list)": (lambda: set_annotations(msg, {"x-path": ["broker-a", "broker-b"]})),
        "set_annotations (no section)": (lambda: set_annotations(MESSAGES["properties"], {"x-path": ["a"]})),
        "remove_annotations": (lambda: remove_annotations(out, ("x-path",))),
    }
    print(f"\nmessage {len(msg)} bytes")
    for label, fn in results.items():
        best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
        print(f"{label}: {best:.2f} µs")


def test_bytearray_input():
    msg = bytearray(MESSAGES["annotations"])
    out = set_annotations(msg, {"x": [1], "other": None})
    assert type(out) is bytes and _ann(out)["x"] == [1] and "other" not in _ann(out)
    assert read_annotation(msg, "other") == "v" and read_annotations(msg, ("n",)) == {"n": 3}


# -- delivery annotations (broker mirror) -------------------------------------------------------------------

def _with_da(msg_kwargs, da=None) -> bytes:
    import proton

    m = proton.Message(**msg_kwargs)
    if da:
        m.instructions = {proton.symbol(k): v for k, v in da.items()}
    return m.encode()


@pytest.mark.parametrize("kwargs,da", [
    ({"body": "x", "durable": True}, None),
    ({"body": "x", "durable": True, "priority": 7, "ttl": 5}, None),
    ({"body": "x"}, None),                                   # no header: the general path
    ({"body": "x", "durable": True}, {"old": "gone"}),        # an existing section is replaced
    ({"body": "x", "durable": True, "annotations": {"x-opt-a": 1}, "address": "q"}, {"k": 1}),
])
def test_delivery_annotations_are_replaced_and_the_rest_kept(kwargs, da):
    import proton

    from wire.msgannotations import read_delivery_annotations, replace_delivery_annotations

    msg = _with_da(kwargs, da)
    out = replace_delivery_annotations(msg, {"x-opt-amq-mr-id": "r1", "x-opt-amq-mr-trg-q": ["q1"]})
    m = proton.Message()
    m.decode(out)
    assert dict(m.instructions) == {"x-opt-amq-mr-id": "r1", "x-opt-amq-mr-trg-q": ["q1"]}
    assert m.body == "x" and m.durable == kwargs.get("durable", False) and m.address == kwargs.get("address")
    assert read_delivery_annotations(out, ("x-opt-amq-mr-id", "old")) == {"x-opt-amq-mr-id": "r1"}
    stripped = replace_delivery_annotations(out, None)
    assert read_delivery_annotations(stripped, ("x-opt-amq-mr-id",)) == {}
    assert stripped == replace_delivery_annotations(msg, None)
    # a caller's own encoding of the same map gives the same bytes
    same = replace_delivery_annotations(msg, None, encoded_map=out[out.index(b"\x00\x53\x71") + 3:
                                                                   out.index(b"\x00\x53\x71") + 3 + 2 + out[out.index(b"\x00\x53\x71") + 4]])
    assert same == out
