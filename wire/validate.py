"""Whole-message validation for a node that stores what it receives (the broker).

The router parses only what it routes by (:mod:`wire.codec`) and passes the rest through untouched; a
broker keeps a message, redelivers it and replays it from its journal, so it must not accept one it
could not hand back intact. :func:`validate_message` checks the section grammar of AMQP 1.0 §3.2: the
sections in order, each at most once, each value of its section's type, annotation and property maps
with an even number of items (§1.6.23: a map is a sequence of key/value pairs), a body of one or more
``data`` sections holding binary, one or more ``amqp-sequence`` sections holding lists, or one
``amqp-value``, and nothing after the footer. A message with no body section at all is accepted, as
proton's clients send one for a null body; a message of no bytes is not. It walks the section headers by their size prefixes
only, so a large body costs no copy.

The broker runs it once per stored message and then needs the properties section (for
absolute-expiry-time, :func:`wire.header.properties_expiry`): :func:`validate_message` returns where
that section's value starts, so the message is walked once. The shapes AMQP clients send most -- an
optional header of exactly ``durable = true``, an optional empty properties list, and one ``data``
section that ends the message -- are recognised by a few byte comparisons before the general walk
(:func:`_common_shape`).
"""

from __future__ import annotations

import struct

from wire.amqptypes import CodecError, skip_value

# Section codes (AMQP 1.0 §3.2), in the order they must appear.
HEADER, DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, PROPERTIES, APPLICATION_PROPERTIES = range(0x70, 0x75)
DATA, AMQP_SEQUENCE, AMQP_VALUE, FOOTER = range(0x75, 0x79)
_MAP_SECTIONS = frozenset((DELIVERY_ANNOTATIONS, MESSAGE_ANNOTATIONS, APPLICATION_PROPERTIES, FOOTER))
_LIST_SECTIONS = frozenset((HEADER, PROPERTIES))
_BODY = frozenset((DATA, AMQP_SEQUENCE, AMQP_VALUE))

_MAP8, _MAP32, _LIST0, _LIST8, _LIST32, _NULL = 0xC1, 0xD1, 0x45, 0xC0, 0xD0, 0x40
_VBIN8, _VBIN32 = 0xA0, 0xB0
# Constructors whose size is one byte after them (§1.6: vbin8, str8, sym8, list8, map8, array8).
_SIZE8 = frozenset((0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0))
_U32 = struct.Struct(">I").unpack_from
_U64 = struct.Struct(">Q").unpack_from

# The common shapes (see _common_shape): a header section (small-ulong descriptor) holding a list8 of
# one field, durable = true (§3.2.1), then a data section's descriptor; or that data descriptor alone;
# either with an empty properties list between them (list0, as proton writes it).
_DURABLE = b"\x00\x53\x70\xc0\x02\x01\x41"
_DATA = b"\x00\x53\x75"
_NO_PROPERTIES = b"\x00\x53\x73\x45"
_DURABLE_THEN_DATA = _DURABLE + _DATA
_DURABLE_EMPTY_PROPERTIES_DATA = _DURABLE + _NO_PROPERTIES + _DATA
_EMPTY_PROPERTIES_DATA = _NO_PROPERTIES + _DATA


def _section_code(b, pos: int, n: int) -> tuple[int, int]:
    """(section code, offset of its value) for the described section starting at ``pos``."""
    if pos + 3 > n or b[pos] != 0:
        raise CodecError(f"expected a message section at offset {pos}")
    c = b[pos + 1]
    if c == 0x53:
        return b[pos + 2], pos + 3
    if c == 0x80:
        if pos + 10 > n:
            raise CodecError("truncated section descriptor")
        return _U64(b, pos + 2)[0], pos + 10
    raise CodecError(f"section descriptor of type 0x{c:02x} at offset {pos}: tdbroker takes numeric descriptors")


def _check_value(b, code: int, vpos: int, n: int) -> None:
    c = b[vpos]
    if code in _MAP_SECTIONS:
        if c == _NULL:
            return
        if c == _MAP8:
            count = b[vpos + 2] if vpos + 2 < n else -1
        elif c == _MAP32:
            count = _U32(b, vpos + 5)[0] if vpos + 9 <= n else -1
        else:
            raise CodecError(f"section 0x{code:x} must hold a map, not type 0x{c:02x}")
        if count < 0:
            raise CodecError("truncated map")
        if count % 2:
            raise CodecError(f"section 0x{code:x} holds a map with an odd number of items ({count})")
    elif code in _LIST_SECTIONS or code == AMQP_SEQUENCE:
        if c not in (_NULL, _LIST0, _LIST8, _LIST32) or (c == _NULL and code == AMQP_SEQUENCE):
            raise CodecError(f"section 0x{code:x} must hold a list, not type 0x{c:02x}")
    elif code == DATA:
        if c not in (_VBIN8, _VBIN32):
            raise CodecError(f"a data section must hold binary, not type 0x{c:02x}")


def _common_shape(msg, n: int) -> bool:
    """True when ``msg`` is, whole, an optional durable-only header, an optional empty properties list and
    one data section: valid, with no properties field. False says nothing (the general walk decides)."""
    if n >= 12 and msg[:10] == _DURABLE_THEN_DATA:
        v = 10
    elif n >= 5 and msg[:3] == _DATA:
        v = 3
    elif n >= 16 and msg[:14] == _DURABLE_EMPTY_PROPERTIES_DATA:
        v = 14
    elif n >= 9 and msg[:7] == _EMPTY_PROPERTIES_DATA:
        v = 7
    else:
        return False
    c = msg[v]
    if c == _VBIN8:
        return v + 2 + msg[v + 1] == n
    if c == _VBIN32:
        return v + 5 <= n and v + 5 + _U32(msg, v + 1)[0] == n
    return False


def validate_message(msg) -> int:
    """Raise :class:`CodecError` naming the first thing wrong with ``msg`` (see the module docstring).

    Returns the offset of the properties section's value, or -1 when the message has none or an empty
    one (list0 or null: no fields, so no absolute-expiry-time)."""
    n = len(msg)
    if _common_shape(msg, n):
        return -1
    if n == 0:
        raise CodecError("empty message: no sections at all")
    pos = 0
    last = -1
    body = None
    properties = -1
    try:
        while pos < n:
            # _section_code inlined for the small-ulong form every client library writes (this runs per
            # stored message); the other forms and every error go through it.
            if pos + 3 <= n and msg[pos] == 0 and msg[pos + 1] == 0x53:
                code = msg[pos + 2]
                vpos = pos + 3
            else:
                code, vpos = _section_code(msg, pos, n)
            if not HEADER <= code <= FOOTER:
                raise CodecError(f"unknown section 0x{code:x} at offset {pos}")
            if code in _BODY:
                if body is None:
                    if last >= DATA:
                        raise CodecError(f"body section 0x{code:x} after the footer at offset {pos}")
                    body = code
                elif code != body or code == AMQP_VALUE:
                    raise CodecError(f"body section 0x{code:x} after a 0x{body:x} body at offset {pos}")
            elif code <= last:
                raise CodecError(f"section 0x{code:x} out of order or repeated at offset {pos}")
            if vpos >= n:
                raise CodecError("truncated section")
            c = msg[vpos]
            # _check_value inline for the data, header and properties sections (the same checks, the same
            # errors); the map and sequence sections go through it. An amqp-value may hold any value.
            if code == DATA:
                if c != _VBIN8 and c != _VBIN32:
                    raise CodecError(f"a data section must hold binary, not type 0x{c:02x}")
            elif code == HEADER or code == PROPERTIES:
                if c != _LIST8 and c != _LIST0 and c != _NULL and c != _LIST32:
                    raise CodecError(f"section 0x{code:x} must hold a list, not type 0x{c:02x}")
                if code == PROPERTIES and c != _LIST0 and c != _NULL:
                    properties = vpos  # an empty list (or null) holds no absolute-expiry-time: left at -1
            elif code != AMQP_VALUE:
                _check_value(msg, code, vpos, n)
            if c in _SIZE8:  # skip_value inlined for the one-byte size prefix (same checks, same errors)
                if vpos + 2 > n:
                    raise CodecError("truncated size")
                pos = vpos + 2 + msg[vpos + 1]
                if pos > n:
                    raise CodecError("truncated value")
            else:
                pos = skip_value(msg, vpos, n)
            last = code
    except (IndexError, struct.error) as exc:
        raise CodecError(f"truncated message: {exc}") from None
    return properties
