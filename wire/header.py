"""The message header (AMQP 1.0 §3.2.1) and ``properties.absolute-expiry-time`` (§3.2.4), read and
rewritten without decoding the rest of the message.

A broker needs five small facts about each message it stores — durable, priority, ttl, first-acquirer,
delivery-count — and, on redelivery, must send the message with a new delivery-count. Everything here
works on the message bytes: :func:`read_header` decodes only the header list, :func:`read_expiry` walks
to the ninth properties field skipping the eight before it (:func:`properties_expiry` starts at the
properties list :func:`wire.validate.validate_message` found), and :func:`set_delivery_count` replaces the
header section alone, leaving every other byte of the message as it was (annotations, properties and
body are never re-encoded).

Header fields (§3.2.1), in list order, with their defaults when absent or null:

==================  =========  =========================================================
durable             boolean    false
priority            ubyte      4
ttl                 uint       none (milliseconds)
first-acquirer      boolean    false
delivery-count      uint       0 (the number of prior *unsuccessful* delivery attempts)
==================  =========  =========================================================

A field of the wrong AMQP type, or a malformed message, raises :class:`~wire.amqptypes.CodecError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from wire.amqptypes import _DECODE_ERRORS, CodecError, Timestamp, UByte, UInt, _decode, _skip
from wire.amqptypes import _compound
from wire.codec import _descriptor, _list_header, _walk, scan

__all__ = ["HeaderInfo", "read_header", "read_expiry", "expires_at", "absolute_expiry_time",
           "properties_expiry", "set_delivery_count", "DEFAULT_PRIORITY"]

# §3.2.1: "priority ... default 4" (the JMS default priority too).
DEFAULT_PRIORITY = 4

# Positions of the fields in the header list (§3.2.1).
_DURABLE, _PRIORITY, _TTL, _FIRST_ACQUIRER, _DELIVERY_COUNT = range(5)
_HEADER_FIELDS = 5

# absolute-expiry-time is the ninth field of the properties list (§3.2.4): message-id, user-id, to,
# subject, reply-to, correlation-id, content-type, content-encoding, absolute-expiry-time, ...
_ABSOLUTE_EXPIRY_TIME = 8

# The header section we write when a message has none: the small-ulong descriptor form (§1.5 allows
# any; this one is the shortest and the one every client library writes).
_HEADER_DESCRIPTOR = b"\x00\x53\x70"
_NULL = b"\x40"
_UINT_MAX = (1 << 32) - 1


@dataclass(slots=True)
class HeaderInfo:
    """The header fields of one message, defaults filled in (ttl None when absent)."""
    durable: bool = False
    priority: int = DEFAULT_PRIORITY
    ttl: int | None = None
    first_acquirer: bool = False
    delivery_count: int = 0


def _value_start(msg, pos, n):
    """Offset of the value of the section whose descriptor starts at ``pos``."""
    if msg[pos + 1] == 0x53:
        return pos + 3
    return _descriptor(msg, pos, n)[1]


def _header_fields(msg, span):
    """Raw byte spans ``[(start, end), ...]`` of the elements of the header list in ``span``, plus
    the value offset (where the list starts)."""
    n = len(msg)
    pos, end = span
    vpos = _value_start(msg, pos, n)
    count, p, lend = _list_header(msg, vpos, n)
    if lend != end:
        raise CodecError("header list size disagrees with its section")
    spans = []
    for _ in range(count):
        q = _skip(msg, p, lend)
        spans.append((p, q))
        p = q
    if p != lend:
        raise CodecError("header list size and count disagree")
    return spans, vpos


def _field(msg, spans, i, types, name):
    """Decode header field ``i`` (None when absent or null); check its AMQP type."""
    if i >= len(spans):
        return None
    start, end = spans[i]
    v, _ = _decode(msg, start, end, 0)
    if v is not None and type(v) not in types:
        raise CodecError(f"header {name} has the wrong type ({type(v).__name__})")
    return v


def read_header(msg: bytes) -> HeaderInfo:
    """The header fields of ``msg``; all defaults when the message has no header section."""
    try:
        span = scan(msg).header
        if span is None:
            return HeaderInfo()
        spans, _ = _header_fields(msg, span)
        durable = _field(msg, spans, _DURABLE, (bool,), "durable")
        priority = _field(msg, spans, _PRIORITY, (UByte,), "priority")
        ttl = _field(msg, spans, _TTL, (UInt,), "ttl")
        first = _field(msg, spans, _FIRST_ACQUIRER, (bool,), "first-acquirer")
        count = _field(msg, spans, _DELIVERY_COUNT, (UInt,), "delivery-count")
        return HeaderInfo(
            durable=bool(durable),
            priority=DEFAULT_PRIORITY if priority is None else int(priority),
            ttl=None if ttl is None else int(ttl),
            first_acquirer=bool(first),
            delivery_count=0 if count is None else int(count),
        )
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed header: {e}") from None


def absolute_expiry_time(msg: bytes) -> int | None:
    """properties.absolute-expiry-time in ms since the epoch, or None when absent.

    The properties fields before it are skipped, not decoded, so a caller that already read the header
    (the broker's enqueue path) gets the expiry without a second header read. Raises
    :class:`wire.amqptypes.CodecError` for a malformed message."""
    try:
        return _read_absolute_expiry_time(msg)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def properties_expiry(msg: bytes, properties: int) -> int | None:
    """absolute_expiry_time of ``msg`` whose properties section's value starts at offset ``properties``
    (as :func:`wire.validate.validate_message` returns it): the sections before it are not walked again.
    Raises :class:`wire.amqptypes.CodecError` for a malformed properties list."""
    try:
        return _expiry_at(msg, properties)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def _read_absolute_expiry_time(msg):
    """absolute_expiry_time without the error translation (the decoder's own exceptions escape)."""
    pos, code, vpos = _walk(msg, 3)
    if code != 0x73:
        return None
    return _expiry_at(msg, vpos)


def _expiry_at(msg, vpos):
    """absolute-expiry-time of the properties list at ``vpos``, without the error translation."""
    n = len(msg)
    count, p, end = _list_header(msg, vpos, n)
    if end > n:
        raise CodecError("truncated properties")
    if count <= _ABSOLUTE_EXPIRY_TIME:
        return None
    for _ in range(_ABSOLUTE_EXPIRY_TIME):
        p = _skip(msg, p, end)
    v, _ = _decode(msg, p, end, 0)
    if v is not None and type(v) is not Timestamp:
        raise CodecError(f"properties absolute-expiry-time has the wrong type ({type(v).__name__})")
    return None if v is None else int(v)


# The name the broker used before the public one existed; kept for code not yet moved over.
_absolute_expiry_time = absolute_expiry_time


def read_expiry(msg: bytes) -> tuple[int | None, int | None]:
    """``(header ttl in ms, properties absolute-expiry-time in ms since the epoch)``, each None when
    absent. The properties fields before absolute-expiry-time are skipped, not decoded."""
    try:
        return read_header(msg).ttl, _read_absolute_expiry_time(msg)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def expires_at(msg: bytes, arrival_ms: int) -> int | None:
    """When a message that arrived at ``arrival_ms`` expires (ms since the epoch), or None if never.

    Follows ActiveMQ Artemis (AMQPMessage): an absolute-expiry-time greater than zero wins; otherwise a
    ttl counts from the arrival at this broker (§3.2.1: the expiry "is computed ... at the time of
    arrival at an intermediary"). A ttl of 0 means no expiry: JMS defines a time-to-live of zero as
    unlimited, and proton and qpid-jms never put a zero ttl on the wire."""
    ttl, absolute = read_expiry(msg)
    if absolute is not None and absolute > 0:
        return absolute
    if ttl:
        return arrival_ms + ttl
    return None


def _bool_bytes(v: bool) -> bytes:
    return b"\x41" if v else b"\x42"


def set_delivery_count(msg: bytes, count: int, *, first_acquirer: bool | None = None) -> bytes:
    """``msg`` with header delivery-count set to ``count`` (and first-acquirer when not None).

    Only the header section changes: its durable/priority/ttl (and any further) fields keep their
    original bytes and its descriptor keeps its original form; every byte outside it is copied as is.
    A message without a header gets one at the front — unless the new values are the defaults (count 0,
    first-acquirer not true), in which case ``msg`` is returned unchanged."""
    if not 0 <= count <= _UINT_MAX:
        raise ValueError(f"delivery-count {count} does not fit a uint")
    try:
        span = scan(msg).header
        if span is None:
            if count == 0 and not first_acquirer:
                return bytes(msg)
            fields = [_NULL, _NULL, _NULL,
                      _bool_bytes(first_acquirer) if first_acquirer is not None else _NULL,
                      _uint_bytes(count)]
            return _header_bytes(_HEADER_DESCRIPTOR, fields) + bytes(msg)
        spans, vpos = _header_fields(msg, span)
        # validate the fields we keep, so that a bad header is refused here rather than downstream
        _field(msg, spans, _DURABLE, (bool,), "durable")
        _field(msg, spans, _PRIORITY, (UByte,), "priority")
        _field(msg, spans, _TTL, (UInt,), "ttl")
        _field(msg, spans, _FIRST_ACQUIRER, (bool,), "first-acquirer")
        _field(msg, spans, _DELIVERY_COUNT, (UInt,), "delivery-count")
        fields = [bytes(msg[s:e]) for s, e in spans]
        fields += [_NULL] * (_HEADER_FIELDS - len(fields))
        if first_acquirer is not None:
            fields[_FIRST_ACQUIRER] = _bool_bytes(first_acquirer)
        fields[_DELIVERY_COUNT] = _uint_bytes(count)
        start, end = span
        return bytes(msg[:start]) + _header_bytes(bytes(msg[start:vpos]), fields) + bytes(msg[end:])
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed header: {e}") from None


def _uint_bytes(v: int) -> bytes:
    """A uint in its shortest form (uint0, smalluint, uint)."""
    if v == 0:
        return b"\x43"
    if v < 256:
        return bytes((0x52, v))
    return b"\x70" + v.to_bytes(4, "big")


def _header_bytes(descriptor: bytes, fields: list[bytes]) -> bytes:
    """A header section from its descriptor bytes and encoded fields, trailing nulls dropped (§1.4:
    trailing null fields of a list-encoded composite may be omitted)."""
    while fields and fields[-1] == _NULL:
        fields.pop()
    if not fields:
        return descriptor + b"\x45"
    return descriptor + _compound(0xC0, b"".join(fields), len(fields))
