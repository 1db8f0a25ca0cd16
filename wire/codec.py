"""AMQP 1.0 message codec for the router's hot path: section boundaries, ``properties.to``, the body, and a
message builder.

The router treats a message as the raw bytes of its sections (AMQP 1.0 §3.2) and parses only what it needs:

* :func:`scan` walks the section boundaries (it never looks inside the body);
* :func:`message_to` finds ``properties.to`` without touching anything after the properties section;
* :func:`properties_fields` decodes the first fields of the properties section;
* :func:`message_body_bytes` returns the payload of a single data section;
* :func:`encode_message` builds a message (lean clients, tests).

Section layout (§3.2): ``header? delivery-annotations? message-annotations? properties?
application-properties? body footer?`` where body is ``data+ | amqp-sequence+ | amqp-value``. Each section
is a described value; the descriptor may be the small form ``00 53 <code>``, the full ulong form
``00 80 <8 bytes>`` or the symbolic form (``00 a3 <len> amqp:properties:list``). A message whose sections are
out of order, repeated, or unknown is malformed.

Anything malformed (truncated, invalid constructor, sizes that disagree, bad UTF-8, sections out of order)
raises :class:`CodecError`, never ``IndexError``/``struct.error``, so one broken client message becomes a
clean rejection. Each function walks only as far as it needs: :func:`message_to` and
:func:`properties_fields` stop at the properties section, :func:`scan` at the first body section (and the
router-annotation functions at the message-annotations section); damage further on is not their concern.
Messages are ``bytes`` (``bytearray`` works too).

Per-call cost on CPython 3.11 (224-byte message, shared 2-vCPU VM, best of many runs): message_to ~1.4 µs,
scan ~2.0 µs.

Related modules, whose public names this module re-exports so that ``from wire.codec import ...`` keeps
working for all of them:

* :mod:`wire.amqptypes` — the general value codec (:func:`encode_value` / :func:`decode_value`, the type
  wrappers :class:`Symbol`, :class:`UInt`, :class:`Array`, ..., and :class:`CodecError`), with the table of
  how AMQP types map to Python;
* :mod:`wire.annotations` — the router's own ``x-opt-qd.*`` message annotations
  (:func:`read_router_annotations`, :func:`strip_router_annotations`, :func:`set_router_annotations`).
  It uses this module's section walker, so it is loaded on first use of one of its names here (see
  :func:`__getattr__` below) rather than imported at the top, which would be a circular import.
"""

from __future__ import annotations

import struct

from wire.amqptypes import (  # noqa: F401 - re-exported: wire.codec is the historical home of these names
    _DECODE_ERRORS, _TYPE_NAMES, _U32, _VAR1, _W, Array, Byte, Char, CodecError, Decimal32, Decimal64,
    Decimal128, Described, Float32, Int, Short, Symbol, Timestamp, UByte, UInt, ULong, UShort, _compound,
    _decode, _enc_map, _skip, _vbin, decode_value, encode_value,
)

__all__ = [
    "CodecError", "Sections", "scan", "head_end", "message_to", "properties_fields",
    "RouterAnnotations", "read_router_annotations", "strip_router_annotations", "set_router_annotations",
    "encode_value", "decode_value", "encode_message", "message_body_bytes",
    "Symbol", "UByte", "UShort", "UInt", "ULong", "Byte", "Short", "Int", "Float32", "Char", "Timestamp",
    "Decimal32", "Decimal64", "Decimal128", "Array", "Described",
    "ROUTER_PREFIX",
]

# Names that live in wire.annotations and are re-exported from here on first access.
_ANNOTATION_NAMES = frozenset(("RouterAnnotations", "read_router_annotations", "strip_router_annotations",
                               "set_router_annotations", "ROUTER_PREFIX"))


def __getattr__(name):
    """Module attribute fallback (PEP 562): resolve the router-annotation names from wire.annotations.
    Runs once per name (the value is then stored in this module's globals), so a caller that does
    ``from wire.codec import strip_router_annotations`` gets the function itself, with no extra call."""
    if name in _ANNOTATION_NAMES:
        from wire import annotations
        value = globals()[name] = getattr(annotations, name)
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    """``dir(wire.codec)`` lists the lazily re-exported names too."""
    return sorted(set(globals()) | _ANNOTATION_NAMES)


# --------------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------------

HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = (
    0x70, 0x71, 0x72, 0x73, 0x74)
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = 0x75, 0x76, 0x77, 0x78

# A section's rank is its code - 0x70: header 0, delivery-annotations 1, message-annotations 2,
# properties 3, application-properties 4, body 5..7 (data, amqp-sequence, amqp-value), footer 8.
_SYMBOLIC = {
    b"amqp:header:list": 0x70,
    b"amqp:delivery-annotations:map": 0x71,
    b"amqp:message-annotations:map": 0x72,
    b"amqp:properties:list": 0x73,
    b"amqp:application-properties:map": 0x74,
    b"amqp:data:binary": 0x75,
    b"amqp:amqp-sequence:list": 0x76,
    b"amqp:amqp-value:*": 0x77,
    b"amqp:footer:map": 0x78,
}
# low bit of the list/map constructors (0xc0/0xd0 list, 0xc1/0xd1 map) expected per rank < 5
_IS_MAP = (0, 1, 1, 0, 1)


def _descriptor(b, pos, n):
    """Section descriptor at ``pos`` (the 0x00 byte) -> (section code 0x70..0x78, offset of the value).
    The small-ulong form is returned as is (the caller checks its range)."""
    if b[pos] != 0:
        raise CodecError(f"expected a section (described value) at offset {pos}")
    c = b[pos + 1]
    if c == 0x53:
        return b[pos + 2], pos + 3
    if c == 0x80:
        if pos + 10 > n:
            raise CodecError("truncated descriptor")
        hi, lo = struct.unpack_from(">II", b, pos + 2)
        if hi != 0 or not 0x70 <= lo <= 0x78:
            raise CodecError(f"unknown section descriptor 0x{hi:08x}:0x{lo:08x} at offset {pos}")
        return lo, pos + 10
    if c == 0xA3:
        s = pos + 3
        e = s + b[pos + 2]
    elif c == 0xB3:
        if pos + 6 > n:
            raise CodecError("truncated descriptor")
        s = pos + 6
        e = s + _U32(b, pos + 2)[0]
    else:
        raise CodecError(f"unsupported section descriptor constructor 0x{c:02x}")
    if e > n:
        raise CodecError("truncated descriptor")
    code = _SYMBOLIC.get(bytes(b[s:e]))
    if code is None:
        raise CodecError(f"unknown section descriptor {bytes(b[s:e])!r} at offset {pos}")
    return code, e


def _section_end(b, vpos, rank, n):
    """End of the list/map value (or null / list0) of a pre-body section; checks its type."""
    c = b[vpos]
    if c >= 0xC0:
        if c & 0xEE != 0xC0 or (c & 1) != _IS_MAP[rank]:
            raise CodecError(f"section 0x{rank + 0x70:x} has a value of the wrong type")
        if c < 0xD0:
            e = vpos + 2 + b[vpos + 1]
        else:
            e = vpos + 5 + _U32(b, vpos + 1)[0]
    elif c == 0x40 or (c == 0x45 and not _IS_MAP[rank]):
        e = vpos + 1
    else:
        raise CodecError(f"section 0x{rank + 0x70:x} has a value of the wrong type")
    if e > n:
        raise CodecError("truncated section")
    return e


def _walk(b, stop):
    """Walk the sections of rank < ``stop`` (checking order and types). Returns (offset, code, value
    offset) of the first section whose rank is >= stop, or (len, None, len) when the message ends."""
    n = len(b)
    pos = 0
    last = -1
    while pos < n:
        if b[pos] == 0 and b[pos + 1] == 0x53:
            code = b[pos + 2]
            vpos = pos + 3
        else:
            code, vpos = _descriptor(b, pos, n)
        rank = code - 0x70
        if rank >= stop:
            if rank > 8:
                raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
            return pos, code, vpos
        if rank <= last:
            if rank < 0:
                raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
            raise CodecError(f"section 0x{code:x} out of order at offset {pos}")
        last = rank
        # _section_end inlined: this loop runs for every message on the router's hot path, and a call per
        # section cost more than these lines (keep the two in step).
        c = b[vpos]
        if c >= 0xC0:
            if c & 0xEE != 0xC0 or (c & 1) != _IS_MAP[rank]:
                raise CodecError(f"section 0x{code:x} has a value of the wrong type")
            if c < 0xD0:
                pos = vpos + 2 + b[vpos + 1]
            else:
                pos = vpos + 5 + _U32(b, vpos + 1)[0]
        elif c == 0x40 or (c == 0x45 and not _IS_MAP[rank]):
            pos = vpos + 1
        else:
            raise CodecError(f"section 0x{code:x} has a value of the wrong type")
        if pos > n:
            raise CodecError("truncated section")
    return n, None, n


class Sections:
    """Section boundaries found by :func:`scan`. Each attribute is ``(start, end)`` (``start`` is the
    offset of the section's 0x00 descriptor byte, ``end`` the offset just past its value) or None when
    the section is absent. ``body_start`` is the offset of the first body section (data, amqp-sequence
    or amqp-value), or None when the message has no body. Sections from the body onwards are not
    walked."""
    __slots__ = ("header", "delivery_annotations", "message_annotations", "properties",
                 "application_properties", "body_start")

    def __init__(self, header=None, delivery_annotations=None, message_annotations=None,
                 properties=None, application_properties=None, body_start=None):
        self.header = header
        self.delivery_annotations = delivery_annotations
        self.message_annotations = message_annotations
        self.properties = properties
        self.application_properties = application_properties
        self.body_start = body_start

    def __repr__(self):
        return ("Sections(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")")

    def __eq__(self, other):
        if not isinstance(other, Sections):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)


def scan(msg: bytes) -> Sections:
    """Find the section boundaries up to the start of the body."""
    try:
        n = len(msg)
        pos = 0
        last = -1
        found = [None, None, None, None, None]
        body = None
        while pos < n:
            if msg[pos] == 0 and msg[pos + 1] == 0x53:
                code = msg[pos + 2]
                vpos = pos + 3
            else:
                code, vpos = _descriptor(msg, pos, n)
            rank = code - 0x70
            if rank >= 5:
                if rank > 8:
                    raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
                if rank < 8:
                    body = pos
                break
            if rank <= last:
                if rank < 0:
                    raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
                raise CodecError(f"section 0x{code:x} out of order at offset {pos}")
            last = rank
            c = msg[vpos]                        # _section_end inlined: this loop runs for every message on the router's hot path, and a call per
        # section cost more than these lines (keep the two in step).
            if c >= 0xC0:
                if c & 0xEE != 0xC0 or (c & 1) != _IS_MAP[rank]:
                    raise CodecError(f"section 0x{code:x} has a value of the wrong type")
                if c < 0xD0:
                    end = vpos + 2 + msg[vpos + 1]
                else:
                    end = vpos + 5 + _U32(msg, vpos + 1)[0]
            elif c == 0x40 or (c == 0x45 and not _IS_MAP[rank]):
                end = vpos + 1
            else:
                raise CodecError(f"section 0x{code:x} has a value of the wrong type")
            if end > n:
                raise CodecError("truncated section")
            found[rank] = (pos, end)
            pos = end
        return Sections(found[0], found[1], found[2], found[3], found[4], body)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def head_end(prefix: bytes) -> int | None:
    """Where the part of a message the router reads ends, in the first bytes of a message still arriving:
    the offset of its first section from application-properties on (AMQP 1.0 §3.2: header,
    delivery-annotations, message-annotations and properties come first), or None when ``prefix`` ends
    before that (or is not a well-formed message start: it is then assembled whole and refused there).
    The router streams a large message once this is known: the head is all it parses and rewrites."""
    try:
        pos, code, _ = _walk(prefix, 4)
    except (CodecError, *_DECODE_ERRORS):
        return None
    return None if code is None else pos


def _list_header(b, vpos, n):
    """(count, first element offset, end) of the list at vpos (list0/list8/list32/null)."""
    c = b[vpos]
    if c == 0xC0:
        if vpos + 3 > n or b[vpos + 1] < 1:
            raise CodecError("truncated list")
        return b[vpos + 2], vpos + 3, vpos + 2 + b[vpos + 1]
    if c == 0xD0:
        if vpos + 9 > n:
            raise CodecError("truncated list")
        size = _U32(b, vpos + 1)[0]
        if size < 4:
            raise CodecError("bad list size")
        return _U32(b, vpos + 5)[0], vpos + 9, vpos + 5 + size
    if c == 0x45 or c == 0x40:
        return 0, vpos + 1, vpos + 1
    raise CodecError(f"expected a list, found constructor 0x{c:02x}")


def message_to(msg: bytes) -> str | None:
    """``properties.to`` as a str (string, or symbol decoded as str); None when absent or null."""
    try:
        # walk to the properties section (same as _walk(msg, 3), inlined: this runs per message)
        n = len(msg)
        pos = 0
        last = -1
        while True:
            if pos >= n:
                return None
            if msg[pos] == 0 and msg[pos + 1] == 0x53:
                code = msg[pos + 2]
                vpos = pos + 3
            else:
                code, vpos = _descriptor(msg, pos, n)
            rank = code - 0x70
            if rank >= 3:
                if rank == 3:
                    break
                if rank > 8:
                    raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
                return None
            if rank <= last:
                if rank < 0:
                    raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
                raise CodecError(f"section 0x{code:x} out of order at offset {pos}")
            last = rank
            pos = _section_end(msg, vpos, rank, n)
        # properties list: skip message-id and user-id, read to
        c = msg[vpos]
        if c == 0xC0:
            size = msg[vpos + 1]
            if size < 1:
                raise CodecError("bad list size")
            count = msg[vpos + 2]
            p = vpos + 3
            end = vpos + 2 + size
        elif c == 0xD0:
            count, p, end = _list_header(msg, vpos, n)
        elif c == 0x45 or c == 0x40:
            return None
        else:
            raise CodecError("properties section is not a list")
        if end > n:
            raise CodecError("truncated properties")
        if count < 3:
            return None
        W = _W
        for _ in (0, 1):
            w = W[msg[p]]
            if w == _VAR1:
                p += 2 + msg[p + 1]
            elif w >= 0:
                p += 1 + w
            else:
                p = _skip(msg, p, end)
        if p >= end:
            raise CodecError("truncated properties")
        c = msg[p]
        if c == 0xA1:
            e = p + 2 + msg[p + 1]
            if e > end:
                raise CodecError("truncated to")
            return msg[p + 2:e].decode()
        if c == 0x40:
            return None
        if c == 0xA3:
            e = p + 2 + msg[p + 1]
            if e > end:
                raise CodecError("truncated to")
            return msg[p + 2:e].decode("ascii")
        if c == 0xB1 or c == 0xB3:
            if p + 5 > end:
                raise CodecError("truncated to")
            e = p + 5 + _U32(msg, p + 1)[0]
            if e > end:
                raise CodecError("truncated to")
            return msg[p + 5:e].decode("utf-8" if c == 0xB1 else "ascii")
        raise CodecError(f"properties.to has unsupported constructor 0x{c:02x}")
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def message_user_and_to(msg: bytes, want_to: bool = True) -> tuple[bytes | None, str | None]:
    """``properties.user-id`` (bytes) and, when ``want_to``, ``properties.to`` (str), each None when absent
    or null: what a vhost policy checks on every message of a policed connection (router/policygate.py).
    The section walk is inlined like message_to's, on purpose: calling ``_walk`` instead costs about 1,000
    router instructions per message (callgrind, 62,700 vs 61,650), and a generic decode of the first fields
    cost 10% more router CPU."""
    try:
        n = len(msg)
        pos = 0
        last = -1
        while True:
            if pos >= n:
                return None, None
            if msg[pos] == 0 and msg[pos + 1] == 0x53:
                code = msg[pos + 2]
                vpos = pos + 3
            else:
                code, vpos = _descriptor(msg, pos, n)
            rank = code - 0x70
            if rank >= 3:
                if rank == 3:
                    break
                if rank > 8:
                    raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
                return None, None
            if rank <= last:
                if rank < 0:
                    raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
                raise CodecError(f"section 0x{code:x} out of order at offset {pos}")
            last = rank
            pos = _section_end(msg, vpos, rank, n)
        count, p, end = _list_header(msg, vpos, n)
        if end > n:
            raise CodecError("truncated properties")
        if count < 2:
            return None, None
        w = _W[msg[p]]   # skip message-id
        if w == _VAR1:
            p += 2 + msg[p + 1]
        elif w >= 0:
            p += 1 + w
        else:
            p = _skip(msg, p, end)
        if p >= end:
            raise CodecError("truncated properties")
        c = msg[p]
        if c == 0x40:
            user_id = None
            p += 1
        elif c == 0xA0:
            e = p + 2 + msg[p + 1]
            user_id, p = msg[p + 2:e], e
        elif c == 0xB0:
            e = p + 5 + _U32(msg, p + 1)[0]
            user_id, p = msg[p + 5:e], e
        else:
            raise CodecError(f"properties.user-id has unsupported constructor 0x{c:02x}")
        if p > end:
            raise CodecError("truncated user-id")
        if count < 3 or not want_to:
            return user_id, None
        to, p = _decode(msg, p, end, 0)
        if to is not None and not isinstance(to, str):
            raise CodecError("properties.to is not a string")
        return user_id, to
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def properties_fields(msg: bytes, count: int) -> list:
    """The first ``count`` fields of the properties section decoded to Python values (see the module
    docstring for the type mapping); missing fields (or a missing section) are None. Field order:
    message-id, user-id, to, subject, reply-to, correlation-id, content-type, content-encoding,
    absolute-expiry-time, creation-time, group-id, group-sequence, reply-to-group-id."""
    out = [None] * count
    try:
        pos, code, vpos = _walk(msg, 3)
        if code != 0x73 or count <= 0:
            return out
        n = len(msg)
        lcount, p, end = _list_header(msg, vpos, n)
        if end > n:
            raise CodecError("truncated properties")
        for i in range(min(count, lcount)):
            out[i], p = _decode(msg, p, end, 0)
        return out
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None


def message_body_bytes(msg: bytes) -> bytes | None:
    """The payload of the body when the body is exactly one data section; None otherwise."""
    try:
        n = len(msg)
        pos, code, vpos = _walk(msg, 5)
        if code != 0x75:
            return None
        c = msg[vpos]
        if c == 0xA0:
            start = vpos + 2
            end = start + msg[vpos + 1]
        elif c == 0xB0:
            if vpos + 5 > n:
                raise CodecError("truncated data section")
            start = vpos + 5
            end = start + _U32(msg, vpos + 1)[0]
        else:
            raise CodecError("data section is not binary")
        if end > n:
            raise CodecError("truncated data section")
        if end < n:
            code2, _ = _descriptor(msg, end, n)
            if code2 == 0x75:
                return None                      # more than one data section
            if code2 != 0x78:
                raise CodecError(f"unexpected section 0x{code2:x} after the body")
        return msg[start:end] if type(msg) is bytes else bytes(msg[start:end])
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed message: {e}") from None



# --------------------------------------------------------------------------------------------------
# Message builder (lean clients, tests)
# --------------------------------------------------------------------------------------------------

def _message_id(v):
    """message-id / correlation-id: an int is a ulong, str a string, bytes binary, UUID a uuid."""
    if type(v) is int:
        return ULong(v)
    return v


def _trim(fields):
    while fields and fields[-1] is None:
        fields.pop()
    return fields


def _fields_blob(fields):
    return b"".join([b"\x40" if f is None else encode_value(f) for f in fields]), len(fields)


def encode_message(*, body: bytes | None = None, to: str | None = None, message_id=None, reply_to=None,
                   correlation_id=None, durable=False, priority=None, ttl=None,
                   annotations: dict | None = None, application_properties: dict | None = None,
                   body_value=None) -> bytes:
    """Build a message's section bytes. A header is written only when ``durable``, ``priority`` or
    ``ttl`` (milliseconds) is given. ``annotations`` keys that are ``str`` become symbols (int keys
    become ulong). ``body`` (bytes) becomes one data section; otherwise ``body_value`` becomes an
    amqp-value section (null when both are None). ``message_id``/``correlation_id``: int -> ulong,
    str -> string, bytes -> binary, UUID -> uuid."""
    if body is not None and body_value is not None:
        raise ValueError("give either body or body_value, not both")
    out = []
    header = _trim([True if durable else None,
                    None if priority is None else UByte(priority),
                    None if ttl is None else UInt(ttl)])
    if header:
        out.append(b"\x00\x53\x70" + _compound(0xC0, *_fields_blob(header)))
    if annotations:
        parts = []
        for k, v in annotations.items():
            if type(k) is str:
                k = Symbol(k)
            elif type(k) is int:
                k = ULong(k)
            parts.append(encode_value(k))
            parts.append(encode_value(v))
        out.append(b"\x00\x53\x72" + _compound(0xC1, b"".join(parts), len(parts)))
    props = _trim([_message_id(message_id), None, to, None, reply_to, _message_id(correlation_id)])
    if props:
        out.append(b"\x00\x53\x73" + _compound(0xC0, *_fields_blob(props)))
    if application_properties:
        out.append(b"\x00\x53\x74" + _enc_map(application_properties))
    if body is not None:
        out.append(b"\x00\x53\x75" + _vbin(0xA0, bytes(body)))
    else:
        out.append(b"\x00\x53\x77" + encode_value(body_value))
    return b"".join(out)
