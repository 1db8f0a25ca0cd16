"""QueuedMessage.from_validated (the store path: wire.validate.validate_message's walk, then the header
and absolute-expiry-time without walking the sections again) builds what from_bytes builds and refuses
what it refuses, with the same error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message

from broker.queue import QueuedMessage
from wire.amqptypes import CodecError
from wire.header import absolute_expiry_time, properties_expiry
from wire.validate import validate_message

NOW = 1_600_000_000_000


def _fields(q: QueuedMessage):
    return (q.payload, q.record_id, q.priority, q.expires_at, q.delivery_count, q.durable, q.enqueued_at)


def _both(b: bytes):
    """(from_bytes's answer, from_validated's answer): the fields, or the error text."""
    out = []
    for build in (lambda: QueuedMessage.from_bytes(b, NOW),
                  lambda: QueuedMessage.from_validated(b, NOW, validate_message(b))):
        try:
            out.append(_fields(build()))
        except CodecError as exc:
            out.append(str(exc))
    return out


@settings(max_examples=300, deadline=None)
@given(durable=st.booleans(), priority=st.one_of(st.none(), st.integers(0, 255)),
       ttl=st.one_of(st.none(), st.integers(1, 2**32 - 1)), count=st.integers(0, 1000),
       expiry=st.one_of(st.none(), st.integers(0, 2**40)), subject=st.one_of(st.none(), st.text(max_size=5)),
       body=st.one_of(st.binary(max_size=300), st.text(max_size=20)), inferred=st.booleans())
def test_same_message_as_from_bytes(durable, priority, ttl, count, expiry, subject, body, inferred):
    m = Message(body=body, durable=durable, delivery_count=count, subject=subject,
                inferred=inferred and isinstance(body, bytes))
    if priority is not None:
        m.priority = priority
    if ttl is not None:
        m.ttl = ttl / 1000.0
    if expiry is not None:
        m.expiry_time = expiry / 1000.0
    b = bytes(m.encode())
    a, v = _both(b)
    assert not isinstance(a, str)
    assert a == v


def test_the_common_durable_shape():
    b = bytes.fromhex("005370c0020141005375a064") + bytes(100)
    q = QueuedMessage.from_validated(b, NOW, validate_message(b))
    assert (q.durable, q.priority, q.expires_at, q.delivery_count, q.record_id, q.enqueued_at) == \
        (True, 4, None, 0, None, NOW)
    assert _fields(q) == _fields(QueuedMessage.from_bytes(b, NOW))


VALUE_X = b"\x00Sw\xa1\x01x"

# Section grammar that validate_message accepts, fields that from_bytes then refuses.
REFUSED_AFTER_VALIDATION = [
    b"\x00Sp\xc0\x02\x01\xa1" + VALUE_X,                       # durable of type string (cut short)
    b"\x00Sp\xc0\x03\x01\xa1\x00" + VALUE_X,                   # durable of type string
    b"\x00Sp\xc0\x02\x02\x41" + VALUE_X,                       # header list count larger than its size
    b"\x00Ss\xc0\x00" + VALUE_X,                               # properties list8 of size 0
    b"\x00Ss\xc0\x0b\x09\x40\x40\x40\x40\x40\x40\x40\x40\x71\x00" + VALUE_X,   # expiry an int, truncated
    b"\x00Ss\xc0\x0e\x09\x40\x40\x40\x40\x40\x40\x40\x40\x71\x00\x00\x00\x05" + VALUE_X,  # expiry an int
]


@pytest.mark.parametrize("b", REFUSED_AFTER_VALIDATION, ids=range(len(REFUSED_AFTER_VALIDATION)))
def test_refused_with_the_same_error(b):
    validate_message(b)  # the grammar is fine
    a, v = _both(b)
    assert isinstance(a, str) and a == v


def test_properties_expiry_reads_where_validate_says():
    b = bytes(Message(body="x", expiry_time=1_700_000_000.25, subject="s").encode())
    at = validate_message(b)
    assert at > 0
    assert properties_expiry(b, at) == absolute_expiry_time(b) == 1_700_000_000_250
    with pytest.raises(CodecError):
        properties_expiry(b[:at + 6], at)  # a properties list cut short
