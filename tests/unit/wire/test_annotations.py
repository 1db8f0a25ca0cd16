"""split_router_annotations agrees with read + strip (the mesh's one-pass helper)."""

from __future__ import annotations

import pytest
from proton import Message

from wire.annotations import (RouterAnnotations, may_carry_router_annotations, read_router_annotations, router_id_of,
                              set_router_annotations,
                              split_router_annotations, strip_router_annotations)
from wire.codec import CodecError

MESSAGES = [
    Message(address="a", body="x").encode(),
    Message(address="a", body=b"y" * 300, id=7, annotations={"user": 1, "other": "v"}).encode(),
    Message(body=None, durable=True, priority=7, annotations={"k": [1, 2]}).encode(),
]


@pytest.mark.parametrize("msg", MESSAGES)
@pytest.mark.parametrize("fields", [
    {}, {"ingress": "A", "trace": ["A"]}, {"to_override": "q", "phase": 1, "ingress": "R.1", "trace": ["R.1", "R.2"]},
])
def test_split_equals_read_and_strip(msg, fields):
    annotated = set_router_annotations(msg, **fields)
    ra, stripped = split_router_annotations(annotated)
    assert ra == read_router_annotations(annotated)
    assert stripped == strip_router_annotations(annotated)
    assert set_router_annotations(stripped, **fields) == annotated or fields == {}


def test_split_without_router_keys_returns_the_same_bytes():
    msg = MESSAGES[1]
    ra, stripped = split_router_annotations(msg)
    assert ra is None and stripped is msg


def test_split_rejects_a_bad_router_value():
    bad = set_router_annotations(MESSAGES[0], ingress="A").replace(b"\xa1\x01A", b"\x54\x01", 1)
    with pytest.raises(CodecError):
        split_router_annotations(bad)


def test_router_only_sections_are_remembered_and_user_annotations_are_not():
    plain = Message(address="a", body="x").encode()
    annotated = set_router_annotations(plain, ingress="A", trace=["A", "B"])
    first, s1 = split_router_annotations(annotated)
    again, s2 = split_router_annotations(bytes(annotated))
    assert again is first and s1 == s2 == strip_router_annotations(annotated)
    with_user = set_router_annotations(MESSAGES[1], ingress="A", trace=["A"])
    r1, _ = split_router_annotations(with_user)
    r2, _ = split_router_annotations(with_user)
    assert r1 == r2 and r1 is not r2  # user entries vary per message: not cached


# -- Dispatch's router names in ingress and trace: "0/<id>" (area 0) ----------------------------------

def _proton_annotations(data):
    m = Message()
    m.decode(data)
    return {str(k): v for k, v in (m.annotations or {}).items()}


@pytest.mark.parametrize("msg", MESSAGES)
def test_area_names_are_written_as_dispatch_names_routers(msg):
    out = set_router_annotations(msg, to_override="q", ingress="A", trace=["A", "B"], area_names=True)
    ann = _proton_annotations(out)
    assert ann["x-opt-qd.ingress"] == "0/A"
    assert ann["x-opt-qd.trace"] == ["0/A", "0/B"]
    assert ann["x-opt-qd.to"] == "q"
    # Raw reading sees the names; area reading gives the router ids back.
    assert read_router_annotations(out).trace == ["0/A", "0/B"]
    ra, stripped = split_router_annotations(out, area_names=True)
    assert ra == RouterAnnotations(to_override="q", ingress="A", trace=["A", "B"])
    assert stripped == strip_router_annotations(out)


def test_area_reading_takes_plain_ids_as_they_are_and_caches_apart():
    plain = Message(address="a", body="x").encode()
    bare = set_router_annotations(plain, ingress="A", trace=["A", "0/B"])
    ra, _ = split_router_annotations(bare, area_names=True)
    assert ra.ingress == "A" and ra.trace == ["A", "B"]
    raw_ra, _ = split_router_annotations(bare)
    assert raw_ra.trace == ["A", "0/B"]      # the raw view is not the cached area view
    assert split_router_annotations(bare, area_names=True)[0] is ra


def test_router_id_of():
    assert router_id_of("0/QDR.A") == "QDR.A"
    assert router_id_of("QDR.A") == "QDR.A"
    assert router_id_of("1/X") == "1/X"


# -- may_carry_router_annotations: whether a client's message needs stripping, without reading its body --

def _enc(**kw) -> bytes:
    return bytes(Message(**kw).encode())


# The prefix inside a body must not make the router look for annotations; a message-annotations section
# (user keys or router keys) must.
BODY_WITH_PREFIX = b"x-opt-qd.to" * 50


@pytest.mark.parametrize(("msg", "expected"), [
    (b"\x00\x53\x70\xc0\x02\x01\x41\x00\x53\x75\xa0\x05hello", False),   # durable header, data: the bench's
    (_enc(body=BODY_WITH_PREFIX, durable=True, id=1), False),             # header (list8), properties, value
    (_enc(body=BODY_WITH_PREFIX), False),                                 # empty header (list0), properties
    (b"\x00\x53\x75\xa0\x05hello", False),                                # a body alone
    (b"\x00\x53\x70\xc0\x02\x01\x41", False),                             # a header alone
    (_enc(body="x", annotations={"user": 1}), True),                      # user annotations: strip looks
    (set_router_annotations(_enc(body=BODY_WITH_PREFIX, durable=True), ingress="A", trace=["A"]), True),
    (b"\x00\x53\x70\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x41\x00\x53\x75\xa0\x01x", False),  # list32 header,
    # no prefix anywhere: the plain search answers
    (b"\x00\x53\x70\xd0\x00\x00\x00\x05\x00\x00\x00\x01\x41\x00\x53\x72\xc1\x01\x00"
     b"\x00\x53\x75\xa0\x0bx-opt-qd.to", True),                          # list32 header: searched whole
])
def test_may_carry_router_annotations_reads_only_the_first_sections(msg, expected):
    assert may_carry_router_annotations(msg) is expected
    if not expected:
        assert strip_router_annotations(msg) is msg  # never a message that had something to strip
