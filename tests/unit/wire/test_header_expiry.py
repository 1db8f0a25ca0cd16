"""wire.header.absolute_expiry_time: the public reader the broker's enqueue path uses."""

from __future__ import annotations

import proton
import pytest

from broker.queue import QueuedMessage
from wire import header
from wire.amqptypes import CodecError


def _encode(**fields) -> bytes:
    m = proton.Message(body="x")
    for k, v in fields.items():
        setattr(m, k, v)
    return bytes(m.encode())


def test_exported():
    assert "absolute_expiry_time" in header.__all__
    assert header._absolute_expiry_time is header.absolute_expiry_time  # the old name still works


def test_reads_the_properties_field_in_ms():
    # proton's expiry_time is in seconds; on the wire it is a timestamp in ms.
    assert header.absolute_expiry_time(_encode(expiry_time=1_700_000_000.25, subject="s")) == 1_700_000_000_250


def test_absent_is_none():
    assert header.absolute_expiry_time(_encode()) is None
    assert header.absolute_expiry_time(_encode(subject="only a subject")) is None


def test_truncated_message_is_a_codec_error():
    msg = _encode(expiry_time=1_700_000_000.0, subject="s" * 40)
    with pytest.raises(CodecError):
        header.absolute_expiry_time(msg[:-12])


def test_every_truncation_is_a_value_or_a_codec_error():
    """Cut anywhere, the reader answers or raises CodecError -- never IndexError or struct.error."""
    msg = _encode(expiry_time=1_700_000_000.0, subject="s" * 40, durable=True)
    for n in range(len(msg)):
        try:
            header.absolute_expiry_time(msg[:n])
        except CodecError:
            pass


def test_broker_queue_uses_it():
    now = 1_600_000_000_000
    m = QueuedMessage.from_bytes(_encode(expiry_time=1_700_000_000.0), now)
    assert m.expires_at == 1_700_000_000_000
    with pytest.raises(CodecError):
        QueuedMessage.from_bytes(_encode(expiry_time=1_700_000_000.0, subject="s" * 40)[:-12], now)
