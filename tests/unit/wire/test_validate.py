"""wire.validate: the whole-message check tdbroker applies before it stores a message (issue 10: the
broker stored an odd-count annotations map, an empty payload and out-of-order sections)."""

from __future__ import annotations

import proton
import pytest

from wire.amqptypes import CodecError
from wire.validate import validate_message
from tests.unit.enginepair import RouterHarness, outcome
from tests.unit.broker.fixtures import make_broker

VALUE_X = b"\x00Sw\xa1\x01x"  # amqp-value "x"

GOOD = [
    proton.Message(body="x"),
    proton.Message(body=b"y" * 100_000),
    proton.Message(body=None),  # proton sends no body section for a null body
    proton.Message(body={"a": 1}, properties={"k": 1}, annotations={"x-opt-a": 1}, durable=True, ttl=5,
                   id=7, subject="s", reply_to="r"),
    proton.Message(body=[1, 2], inferred=True),  # amqp-sequence
    proton.Message(body=b"ab", inferred=True),   # data
]

BAD = [
    ("empty", b"", "empty message"),
    ("truncated section", b"\x00Sw", "truncated"),
    ("repeated header", b"\x00Sp\x45\x00Sp\x45" + VALUE_X, "out of order or repeated"),
    ("two messages glued", bytes(proton.Message(body="x").encode()) * 2, "out of order or repeated"),
    ("odd-count annotations", b"\x00Sr\xc1\x03\x01\xa1\x00" + VALUE_X, "odd number of items"),
    ("odd-count application-properties", b"\x00St\xc1\x03\x01\x40" + VALUE_X, "odd number of items"),
    ("annotations not a map", b"\x00Sr\xa1\x01x" + VALUE_X, "must hold a map"),
    ("properties not a list", b"\x00Ss\xc1\x01\x00" + VALUE_X, "must hold a list"),
    ("data holding a string", b"\x00Su\xa1\x01x", "must hold binary"),
    ("amqp-value twice", VALUE_X * 2, "after a 0x77 body"),
    ("mixed body", b"\x00Su\xa0\x01x" + VALUE_X, "after a 0x75 body"),
    ("footer before body", b"\x00Sx\xc1\x01\x00" + VALUE_X, "after the footer"),
    ("unknown section", b"\x00S\x79\x40", "unknown section"),
    ("not a section", b"\xa1\x01x", "expected a message section"),
    ("value longer than the message", b"\x00Sw\xa1\x05x", "truncated"),
]


@pytest.mark.parametrize("msg", GOOD, ids=range(len(GOOD)))
def test_what_proton_sends_is_valid(msg):
    validate_message(bytes(msg.encode()))


@pytest.mark.parametrize("name,data,why", BAD, ids=[b[0] for b in BAD])
def test_malformed_messages_are_refused_with_a_reason(name, data, why):
    with pytest.raises(CodecError, match=why):
        validate_message(data)


@pytest.mark.parametrize("name,data,why", BAD, ids=[b[0] for b in BAD])
def test_the_broker_rejects_malformed_messages_with_decode_error(tmp_path, name, data, why):
    broker = make_broker(tmp_path)
    h = RouterHarness(router=broker)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    bad = prod.send(snd, data)
    good = prod.send(snd, body="fine")
    h.pump()
    assert outcome(bad)["state"] == "rejected"
    assert outcome(bad)["condition"][0] == "amqp:decode-error"
    assert outcome(good)["state"] == "accepted"  # the link carries on
    assert broker.queues["orders"].message_count == 1  # only the good one was stored
