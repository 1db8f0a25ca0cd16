"""The mesh's per-message shortcuts for router annotations give the same bytes as the general functions:
router_section + insert_router_section == set_router_annotations, and split_router_annotations' fast
path (a router-only section first, seen before) == its full walk."""

from __future__ import annotations

import pytest
from proton import Message

from wire.annotations import (insert_router_section, router_section, set_router_annotations,
                              split_router_annotations, strip_router_annotations)
from wire.codec import CodecError

PLAIN = Message(address="a", body="x").encode()                      # properties first
BODY_ONLY = Message(body=b"z" * 100).encode()                         # data section first
WITH_HEADER = Message(address="a", body="x", durable=True, priority=7).encode()
WITH_USER = Message(address="a", body="x", annotations={"user": 1}).encode()

FIELDS = [
    {},
    {"ingress": "A", "trace": ["A"]},
    {"to_override": "q", "phase": 1, "ingress": "R.1", "trace": ["R.1", "R.2"]},
    {"to_override": "t" * 300, "ingress": "A", "trace": ["A"] * 40},  # map32 and list32
]


@pytest.mark.parametrize("msg", [PLAIN, BODY_ONLY, WITH_HEADER])
@pytest.mark.parametrize("fields", FIELDS)
@pytest.mark.parametrize("area_names", [False, True])
def test_inserted_section_equals_set(msg, fields, area_names):
    section = router_section(**fields, area_names=area_names)
    assert insert_router_section(msg, section) == set_router_annotations(msg, **fields, area_names=area_names)


def test_insert_refuses_a_message_with_annotations_of_its_own():
    assert insert_router_section(WITH_USER, router_section(ingress="A", trace=["A"])) is None


def test_insert_checks_what_it_walks():
    with pytest.raises(CodecError):
        insert_router_section(b"\x00\x53\x70\xc0\x99", router_section(ingress="A"))


@pytest.mark.parametrize("msg", [PLAIN, BODY_ONLY, WITH_HEADER, WITH_USER])
@pytest.mark.parametrize("fields", FIELDS[1:])
def test_split_is_the_same_the_second_time(msg, fields):
    annotated = set_router_annotations(msg, **fields, area_names=True)
    first = split_router_annotations(annotated, area_names=True)
    second = split_router_annotations(bytes(annotated), area_names=True)
    assert first == second
    assert second[1] == strip_router_annotations(annotated)
    ra = second[0]
    if msg is WITH_USER:
        assert ra.section is None  # user entries vary per message: nothing to key by
    else:
        assert ra.section == router_section(**fields, area_names=True)


def test_split_fast_path_takes_only_a_section_it_knows():
    annotated = set_router_annotations(BODY_ONLY, ingress="A", trace=["A"])
    ra, _ = split_router_annotations(annotated)
    # The same map size byte, different contents: not the remembered section, so it is parsed.
    other = annotated.replace(b"\xa1\x01A", b"\xa1\x01B")
    ra2, stripped = split_router_annotations(other)
    assert ra2.ingress == "B" and ra2.trace == ["B"] and stripped == BODY_ONLY
    assert ra.ingress == "A"


@pytest.mark.parametrize("msg", [b"", b"\x00", b"\x00\x53\x72\xc1"])
def test_split_of_a_short_message(msg):
    try:
        ra, stripped = split_router_annotations(msg)
    except CodecError:
        return
    assert ra is None and stripped is msg
