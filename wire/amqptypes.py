"""AMQP 1.0 primitive type codec (§1.2 encodings, §1.6 types): Python wrappers, encode_value, decode_value.

This is the general value codec, independent of messages: it knows constructors, sizes and types, not
sections. :mod:`wire.codec` (message sections, the router's hot path) and :mod:`wire.annotations` (router
annotations) build on it and share its low-level pieces: the constructor-width table ``_W`` with its
markers, ``_skip``, ``_decode`` and the encoders' ``_vbin``/``_compound``/``_enc_map``. Those helpers are
private to the ``wire`` package; everything else should import the public names (also re-exported by
:mod:`wire.codec`).

Malformed input raises :class:`CodecError` (a ``ValueError``), never ``IndexError``/``struct.error``.

Why one module of ~700 lines: the wrapper classes, the constructor tables, the encoder and the decoder
must agree on every type code; split apart, each half would be unreadable without the other open.

:func:`encode_value` / :func:`decode_value` map AMQP types to Python:

=================  ===========================================================================
AMQP               Python (decode result; the same types are accepted by encode)
=================  ===========================================================================
null               ``None``
boolean            ``bool``
ubyte/ushort/uint  :class:`UByte` / :class:`UShort` / :class:`UInt` (``int`` subclasses)
ulong              :class:`ULong`
byte/short/int     :class:`Byte` / :class:`Short` / :class:`Int`
long               plain ``int`` (a plain ``int`` encodes as long; 2**63..2**64-1 as ulong)
float / double     :class:`Float32` (``float`` subclass) / plain ``float``
decimal32/64/128   :class:`Decimal32` / :class:`Decimal64` / :class:`Decimal128` (raw ``bytes``)
char               :class:`Char` (one-character ``str``)
timestamp          :class:`Timestamp` (``int`` subclass, milliseconds since the Unix epoch)
uuid               ``uuid.UUID``
binary             ``bytes`` (``bytearray``/``memoryview`` also encode as binary)
string             ``str``
symbol             :class:`Symbol` (``str`` subclass; ASCII only, as §1.6.21 requires)
list               ``list`` (``tuple`` also encodes as list)
map                ``dict`` (insertion order = wire order). A list-valued key decodes as a ``tuple``;
                   a key that cannot be hashed (a map) raises CodecError. Duplicate keys: last wins.
array              :class:`Array` (a ``list`` subclass carrying the element ``type`` name and an
                   optional ``descriptor``)
described          :class:`Described` (``descriptor``, ``value``)
=================  ===========================================================================

Encoding always picks the most compact form (uint0/smalluint, smallint, smalllong, str8 vs str32, list0 /
list8 / list32, map8 / map32, array8 / array32).
"""

from __future__ import annotations

import struct
import uuid as _uuid

__all__ = [
    "CodecError", "encode_value", "decode_value",
    "Symbol", "UByte", "UShort", "UInt", "ULong", "Byte", "Short", "Int", "Float32", "Char", "Timestamp",
    "Decimal32", "Decimal64", "Decimal128", "Array", "Described",
]


class CodecError(ValueError):
    """Malformed AMQP input (truncated, bad constructor, inconsistent sizes, section order wrong)."""


# --------------------------------------------------------------------------------------------------
# Python-side type wrappers
# --------------------------------------------------------------------------------------------------

class Symbol(str):
    """AMQP symbol (ASCII)."""
    __slots__ = ()

    def __repr__(self):
        return f"Symbol({str.__repr__(self)})"


class _TypedInt(int):
    __slots__ = ()

    def __repr__(self):
        return f"{type(self).__name__}({int.__repr__(self)})"


class UByte(_TypedInt):
    __slots__ = ()


class UShort(_TypedInt):
    __slots__ = ()


class UInt(_TypedInt):
    __slots__ = ()


class ULong(_TypedInt):
    __slots__ = ()


class Byte(_TypedInt):
    __slots__ = ()


class Short(_TypedInt):
    __slots__ = ()


class Int(_TypedInt):
    __slots__ = ()


class Timestamp(_TypedInt):
    """AMQP timestamp: signed milliseconds since the Unix epoch."""
    __slots__ = ()


class Float32(float):
    """AMQP float (IEEE 754 binary32)."""
    __slots__ = ()

    def __repr__(self):
        return f"Float32({float.__repr__(self)})"


class Char(str):
    """AMQP char: a single Unicode code point (UTF-32BE on the wire)."""
    __slots__ = ()

    def __repr__(self):
        return f"Char({str.__repr__(self)})"


class _RawBytes(bytes):
    __slots__ = ()
    _width = 0

    def __repr__(self):
        return f"{type(self).__name__}({bytes.__repr__(self)})"


class Decimal32(_RawBytes):
    """AMQP decimal32, kept as its 4 raw bytes."""
    __slots__ = ()
    _width = 4


class Decimal64(_RawBytes):
    """AMQP decimal64, kept as its 8 raw bytes."""
    __slots__ = ()
    _width = 8


class Decimal128(_RawBytes):
    """AMQP decimal128, kept as its 16 raw bytes."""
    __slots__ = ()
    _width = 16


class Described:
    """A described value: ``descriptor`` (normally a ULong or Symbol) and ``value``."""
    __slots__ = ("descriptor", "value")

    def __init__(self, descriptor, value):
        self.descriptor = descriptor
        self.value = value

    def __eq__(self, other):
        if not isinstance(other, Described):
            return NotImplemented
        return self.descriptor == other.descriptor and self.value == other.value

    def __hash__(self):
        return hash((Described, self.descriptor, self.value))

    def __repr__(self):
        return f"Described({self.descriptor!r}, {self.value!r})"


_TYPE_NAMES = (
    "null", "boolean", "ubyte", "ushort", "uint", "ulong", "byte", "short", "int", "long", "float",
    "double", "decimal32", "decimal64", "decimal128", "char", "timestamp", "uuid", "binary", "string",
    "symbol", "list", "map", "array",
)


class Array(list):
    """AMQP array: every element has the AMQP type named by ``type`` (one of the §1.6 type names:
    ``"int"``, ``"symbol"``, ``"string"``, ``"list"``, ...). ``descriptor`` is not None for an array of
    described values (the elements are then the undescribed values)."""
    __slots__ = ("type", "descriptor")

    def __init__(self, type, items=(), descriptor=None):
        if type not in _TYPE_NAMES:
            raise ValueError(f"unknown AMQP type name {type!r}")
        super().__init__(items)
        self.type = type
        self.descriptor = descriptor

    def __eq__(self, other):
        if isinstance(other, Array):
            return (self.type == other.type and self.descriptor == other.descriptor
                    and list.__eq__(self, other))
        return list.__eq__(self, other)

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = None

    def __repr__(self):
        d = "" if self.descriptor is None else f", descriptor={self.descriptor!r}"
        return f"Array({self.type!r}, {list.__repr__(self)}{d})"


# --------------------------------------------------------------------------------------------------
# Constructor table (§1.2, §1.6): fixed width >= 0, or one of the markers below
# --------------------------------------------------------------------------------------------------

_VAR1 = -1        # 1-byte size prefix (vbin8, str8, sym8, list8, map8, array8)
_VAR4 = -4        # 4-byte size prefix (vbin32, str32, sym32, list32, map32, array32)
_DESC = -2        # 0x00: described value
_BAD = -9         # reserved / invalid constructor

_W = [_BAD] * 256
for _c in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45):
    _W[_c] = 0
for _c in (0x50, 0x51, 0x52, 0x53, 0x54, 0x55, 0x56):
    _W[_c] = 1
for _c in (0x60, 0x61):
    _W[_c] = 2
for _c in (0x70, 0x71, 0x72, 0x73, 0x74):
    _W[_c] = 4
for _c in (0x80, 0x81, 0x82, 0x83, 0x84):
    _W[_c] = 8
for _c in (0x94, 0x98):
    _W[_c] = 16
for _c in (0xA0, 0xA1, 0xA3, 0xC0, 0xC1, 0xE0):
    _W[_c] = _VAR1
for _c in (0xB0, 0xB1, 0xB3, 0xD0, 0xD1, 0xF0):
    _W[_c] = _VAR4
_W[0x00] = _DESC
_W = tuple(_W)

_S_U32 = struct.Struct(">I")
_U32 = _S_U32.unpack_from
_P32 = _S_U32.pack


def _skip(b, pos, limit):
    """Return the offset just past the (possibly described) value at ``pos``; never reads past ``limit``.
    Compound values are skipped by their size prefix (contents are not validated here)."""
    pending = 1                                  # values still to skip (each 0x00 adds its descriptor)
    while True:
        if pos >= limit:
            raise CodecError("truncated value")
        w = _W[b[pos]]
        if w == _VAR1:
            if pos + 2 > limit:
                raise CodecError("truncated size")
            pos += 2 + b[pos + 1]
        elif w >= 0:
            pos += 1 + w
        elif w == _VAR4:
            if pos + 5 > limit:
                raise CodecError("truncated size")
            pos += 5 + _U32(b, pos + 1)[0]
        elif w == _DESC:
            pos += 1
            pending += 1
            continue
        else:
            raise CodecError(f"invalid constructor 0x{b[pos]:02x}")
        if pos > limit:
            raise CodecError("truncated value")
        pending -= 1
        if not pending:
            return pos


def skip_value(buf, offset=0, limit=None) -> int:
    """The offset just past the (possibly described) value at ``offset``, by its size prefixes only
    (compound contents are not decoded, so skipping a 1 MB binary costs no copy). CodecError when it
    is truncated or starts with an invalid constructor."""
    try:
        return _skip(buf, offset, len(buf) if limit is None else limit)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed value: {e}") from None


# Python exceptions that malformed input can provoke in the decoders (here and in wire.codec /
# wire.annotations); the public entry points turn them into CodecError.
_DECODE_ERRORS = (IndexError, struct.error, UnicodeError, RecursionError, OverflowError, ValueError)


# --------------------------------------------------------------------------------------------------
# General value decoder
# --------------------------------------------------------------------------------------------------

_MAX_DEPTH = 64              # nesting limit for decode (lists, maps, arrays, described values)
_MAX_ZERO_WIDTH = 1 << 16    # max elements in an array of zero-width elements (e.g. nulls)


def _char(b, p):
    cp = _U32(b, p)[0]
    if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
        raise CodecError(f"invalid char code point 0x{cp:x}")
    return Char(chr(cp))


def _bool(b, p):
    v = b[p]
    if v > 1:
        raise CodecError(f"invalid boolean octet 0x{v:02x}")
    return v == 1


def _sint8(v):
    return v - 256 if v > 127 else v


_FIXED_DEC = {
    0x40: lambda b, p: None,
    0x41: lambda b, p: True,
    0x42: lambda b, p: False,
    0x43: lambda b, p: UInt(0),
    0x44: lambda b, p: ULong(0),
    0x45: lambda b, p: [],
    0x50: lambda b, p: UByte(b[p]),
    0x51: lambda b, p: Byte(_sint8(b[p])),
    0x52: lambda b, p: UInt(b[p]),
    0x53: lambda b, p: ULong(b[p]),
    0x54: lambda b, p: Int(_sint8(b[p])),
    0x55: lambda b, p: _sint8(b[p]),
    0x56: _bool,
    0x60: lambda b, p: UShort(struct.unpack_from(">H", b, p)[0]),
    0x61: lambda b, p: Short(struct.unpack_from(">h", b, p)[0]),
    0x70: lambda b, p: UInt(_U32(b, p)[0]),
    0x71: lambda b, p: Int(struct.unpack_from(">i", b, p)[0]),
    0x72: lambda b, p: Float32(struct.unpack_from(">f", b, p)[0]),
    0x73: _char,
    0x74: lambda b, p: Decimal32(b[p:p + 4]),
    0x80: lambda b, p: ULong(struct.unpack_from(">Q", b, p)[0]),
    0x81: lambda b, p: struct.unpack_from(">q", b, p)[0],
    0x82: lambda b, p: struct.unpack_from(">d", b, p)[0],
    0x83: lambda b, p: Timestamp(struct.unpack_from(">q", b, p)[0]),
    0x84: lambda b, p: Decimal64(b[p:p + 8]),
    0x94: lambda b, p: Decimal128(b[p:p + 16]),
    0x98: lambda b, p: _uuid.UUID(bytes=bytes(b[p:p + 16])),
}

_CODE_TYPE = {
    0x40: "null", 0x41: "boolean", 0x42: "boolean", 0x56: "boolean",
    0x50: "ubyte", 0x60: "ushort", 0x70: "uint", 0x52: "uint", 0x43: "uint",
    0x80: "ulong", 0x53: "ulong", 0x44: "ulong",
    0x51: "byte", 0x61: "short", 0x71: "int", 0x54: "int", 0x81: "long", 0x55: "long",
    0x72: "float", 0x82: "double", 0x74: "decimal32", 0x84: "decimal64", 0x94: "decimal128",
    0x73: "char", 0x83: "timestamp", 0x98: "uuid",
    0xA0: "binary", 0xB0: "binary", 0xA1: "string", 0xB1: "string", 0xA3: "symbol", 0xB3: "symbol",
    0x45: "list", 0xC0: "list", 0xD0: "list", 0xC1: "map", 0xD1: "map", 0xE0: "array", 0xF0: "array",
}


def _decode(b, pos, end, depth):
    """Decode one value at ``pos`` (not reading past ``end``) -> (value, next offset)."""
    if pos >= end:
        raise CodecError("truncated value")
    c = b[pos]
    if c == 0:
        if depth >= _MAX_DEPTH:
            raise CodecError("values nested too deeply")
        d, pos = _decode(b, pos + 1, end, depth + 1)
        v, pos = _decode(b, pos, end, depth + 1)
        return Described(d, v), pos
    return _payload(c, b, pos + 1, end, depth)


def _payload(c, b, pos, end, depth):
    """Decode the data of a value whose constructor ``c`` has already been read."""
    w = _W[c]
    if w >= 0:
        e = pos + w
        if e > end:
            raise CodecError("truncated value")
        return _FIXED_DEC[c](b, pos), e
    if w == _VAR1:
        if pos >= end:
            raise CodecError("truncated size")
        size = b[pos]
        pos += 1
        cw = 1
    elif w == _VAR4:
        if pos + 4 > end:
            raise CodecError("truncated size")
        size = _U32(b, pos)[0]
        pos += 4
        cw = 4
    else:
        raise CodecError(f"invalid constructor 0x{c:02x}")
    e = pos + size
    if e > end:
        raise CodecError("truncated value")
    if c == 0xA1 or c == 0xB1:
        return bytes(b[pos:e]).decode("utf-8"), e
    if c == 0xA3 or c == 0xB3:
        return Symbol(bytes(b[pos:e]).decode("ascii")), e
    if c == 0xA0 or c == 0xB0:
        return bytes(b[pos:e]), e
    # compound / array: count follows the size
    if size < cw:
        raise CodecError("compound size too small for its count")
    count = b[pos] if cw == 1 else _U32(b, pos)[0]
    p = pos + cw
    if depth >= _MAX_DEPTH:
        raise CodecError("values nested too deeply")
    if c == 0xC0 or c == 0xD0:
        if count > e - p:
            raise CodecError("list count larger than its size allows")
        items = []
        for _ in range(count):
            v, p = _decode(b, p, e, depth + 1)
            items.append(v)
        if p != e:
            raise CodecError("list size and count disagree")
        return items, e
    if c == 0xC1 or c == 0xD1:
        if count & 1:
            raise CodecError("map with an odd number of elements")
        if count > e - p:
            raise CodecError("map count larger than its size allows")
        d = {}
        for _ in range(count >> 1):
            k, p = _decode(b, p, e, depth + 1)
            v, p = _decode(b, p, e, depth + 1)
            if type(k) is list:
                k = _freeze(k)
            try:
                d[k] = v
            except TypeError:
                raise CodecError(f"map key of unhashable type {type(k).__name__}") from None
        if p != e:
            raise CodecError("map size and count disagree")
        return d, e
    # array
    if p >= e:
        raise CodecError("array without an element constructor")
    ec = b[p]
    p += 1
    desc = None
    if ec == 0:
        desc, p = _decode(b, p, e, depth + 1)
        if p >= e:
            raise CodecError("array without an element constructor")
        ec = b[p]
        p += 1
    if ec == 0 or _W[ec] == _BAD:
        raise CodecError(f"invalid array element constructor 0x{ec:02x}")
    ew = _W[ec]
    if ew == 0:
        if count > _MAX_ZERO_WIDTH:
            raise CodecError("array of zero-width elements too long")
    elif count > e - p:
        raise CodecError("array count larger than its size allows")
    items = []
    for _ in range(count):
        v, p = _payload(ec, b, p, e, depth + 1)
        items.append(v)
    if p != e:
        raise CodecError("array size and count disagree")
    return Array(_CODE_TYPE[ec], items, desc), e


def _freeze(v):
    """A list used as a map key becomes a tuple (recursively) so that it can be hashed."""
    return tuple(_freeze(x) if type(x) is list else x for x in v)


def decode_value(buf, offset=0):
    """Decode one AMQP value from ``buf`` at ``offset`` -> (value, offset just past it)."""
    try:
        return _decode(buf, offset, len(buf), 0)
    except CodecError:
        raise
    except _DECODE_ERRORS as e:
        raise CodecError(f"malformed value: {e}") from None


# --------------------------------------------------------------------------------------------------
# General value encoder
# --------------------------------------------------------------------------------------------------

def _vbin(code8, data):
    n = len(data)
    if n < 256:
        return bytes((code8, n)) + data
    return bytes((code8 + 0x10,)) + _P32(n) + data


def _compound(code8, blob, count):
    """list8/map8 (code8) or list32/map32 with ``blob`` holding ``count`` encoded elements."""
    n = len(blob)
    if n < 255 and count < 256:
        return bytes((code8, n + 1, count)) + blob
    return bytes((code8 + 0x10,)) + _P32(n + 4) + _P32(count) + blob


def _enc_uint(v, bits, code, small, zero):
    if not 0 <= v < (1 << bits):
        raise CodecError(f"{v} out of range for an unsigned {bits}-bit integer")
    if zero is not None and v == 0:
        return bytes((zero,))
    if small is not None and v < 256:
        return bytes((small, v))
    return bytes((code,)) + v.to_bytes(bits // 8, "big")


def _enc_sint(v, bits, code, small):
    lim = 1 << (bits - 1)
    if not -lim <= v < lim:
        raise CodecError(f"{v} out of range for a signed {bits}-bit integer")
    if small is not None and -128 <= v <= 127:
        return bytes((small, v & 0xFF))
    return bytes((code,)) + v.to_bytes(bits // 8, "big", signed=True)


def _enc_long(v):
    if -128 <= v <= 127:
        return bytes((0x55, v & 0xFF))
    if -(1 << 63) <= v < (1 << 63):
        return b"\x81" + v.to_bytes(8, "big", signed=True)
    if 0 <= v < (1 << 64):
        return b"\x80" + v.to_bytes(8, "big")
    raise CodecError(f"integer {v} does not fit in 64 bits")


def _enc_symbol(v):
    try:
        return _vbin(0xA3, v.encode("ascii"))
    except UnicodeEncodeError:
        raise CodecError(f"symbol {v!r} is not ASCII") from None


def _enc_char(v):
    if len(v) != 1:
        raise CodecError("char must be a single character")
    cp = ord(v)
    if 0xD800 <= cp <= 0xDFFF:
        raise CodecError("char must not be a surrogate")
    return b"\x73" + _P32(cp)


def _enc_raw(v):
    if len(v) != v._width:
        raise CodecError(f"{type(v).__name__} needs exactly {v._width} bytes")
    return bytes(((0x74, 0x84, 0x94)[(4, 8, 16).index(v._width)],)) + bytes(v)


def _enc_list(v):
    if not v:
        return b"\x45"
    return _compound(0xC0, b"".join([encode_value(x) for x in v]), len(v))


def _enc_map(v):
    parts = []
    for k, x in v.items():
        parts.append(encode_value(k))
        parts.append(encode_value(x))
    return _compound(0xC1, b"".join(parts), len(parts))


def _enc_described(v):
    d = v.descriptor
    if type(d) is int:
        d = ULong(d)
    return b"\x00" + encode_value(d) + encode_value(v.value)


_FIXED_ENC = {
    # type name -> (constructor, struct format or None)
    "ubyte": (0x50, ">B"), "ushort": (0x60, ">H"), "uint": (0x70, ">I"), "ulong": (0x80, ">Q"),
    "byte": (0x51, ">b"), "short": (0x61, ">h"), "int": (0x71, ">i"), "long": (0x81, ">q"),
    "float": (0x72, ">f"), "double": (0x82, ">d"), "timestamp": (0x83, ">q"),
}
_SMALL = {"uint": (0x52, 0, 255), "ulong": (0x53, 0, 255), "int": (0x54, -128, 127),
          "long": (0x55, -128, 127)}
_VAR_CODE = {"binary": 0xA0, "string": 0xA1, "symbol": 0xA3}


def _array_body(arr):
    """(element constructor bytes, [element payloads]) for an Array; the first byte of the
    constructor bytes is the (array8/array32-independent) element constructor."""
    t = arr.type
    items = list(arr)
    if t in _FIXED_ENC:
        code, fmt = _FIXED_ENC[t]
        sm = _SMALL.get(t)
        if sm is not None and items and all(sm[1] <= x <= sm[2] for x in items):
            code, fmt = sm[0], (">B" if sm[1] == 0 else ">b")
        pk = struct.Struct(fmt).pack
        payloads = [pk(x) for x in items]
    elif t == "null":
        code, payloads = 0x40, [b"" for x in items]
        if any(x is not None for x in items):
            raise CodecError("array of null holds a non-null value")
    elif t == "boolean":
        code, payloads = 0x56, [b"\x01" if x else b"\x00" for x in items]
    elif t == "char":
        code, payloads = 0x73, [_enc_char(x)[1:] for x in items]
    elif t in ("decimal32", "decimal64", "decimal128"):
        width = {"decimal32": 4, "decimal64": 8, "decimal128": 16}[t]
        code = {4: 0x74, 8: 0x84, 16: 0x94}[width]
        payloads = [bytes(x) for x in items]
        if any(len(x) != width for x in payloads):
            raise CodecError(f"{t} needs exactly {width} bytes")
    elif t == "uuid":
        code, payloads = 0x98, [x.bytes for x in items]
    elif t in _VAR_CODE:
        if t == "string":
            datas = [x.encode() for x in items]
        elif t == "symbol":
            try:
                datas = [x.encode("ascii") for x in items]
            except UnicodeEncodeError:
                raise CodecError("symbol is not ASCII") from None
        else:
            datas = [bytes(x) for x in items]
        if all(len(d) < 256 for d in datas):
            code, payloads = _VAR_CODE[t], [bytes((len(d),)) + d for d in datas]
        else:
            code, payloads = _VAR_CODE[t] + 0x10, [_P32(len(d)) + d for d in datas]
    elif t in ("list", "map"):
        blobs = []
        for x in items:
            if t == "list":
                blobs.append((b"".join([encode_value(y) for y in x]), len(x)))
            else:
                parts = []
                for k, y in x.items():
                    parts.append(encode_value(k))
                    parts.append(encode_value(y))
                blobs.append((b"".join(parts), len(parts)))
        base = 0xC0 if t == "list" else 0xC1
        if all(len(bl) < 255 and n < 256 for bl, n in blobs):
            code, payloads = base, [bytes((len(bl) + 1, n)) + bl for bl, n in blobs]
        else:
            code, payloads = base + 0x10, [_P32(len(bl) + 4) + _P32(n) + bl for bl, n in blobs]
    elif t == "array":
        bodies = []
        for x in items:
            if not isinstance(x, Array):
                raise CodecError("array of array needs Array elements")
            ctor, pls = _array_body(x)
            bodies.append((ctor + b"".join(pls), len(pls)))
        if all(len(bl) < 255 and n < 256 for bl, n in bodies):
            code, payloads = 0xE0, [bytes((len(bl) + 1, n)) + bl for bl, n in bodies]
        else:
            code, payloads = 0xF0, [_P32(len(bl) + 4) + _P32(n) + bl for bl, n in bodies]
    else:
        raise CodecError(f"unsupported array element type {t!r}")
    ctor = bytes((code,))
    if arr.descriptor is not None:
        d = arr.descriptor
        if type(d) is int:
            d = ULong(d)
        ctor = b"\x00" + encode_value(d) + ctor
    return ctor, payloads


def _enc_array(arr):
    ctor, payloads = _array_body(arr)
    blob = ctor + b"".join(payloads)
    n = len(payloads)
    if len(blob) < 255 and n < 256:
        return bytes((0xE0, len(blob) + 1, n)) + blob
    return b"\xf0" + _P32(len(blob) + 4) + _P32(n) + blob


_ENC = {
    type(None): lambda v: b"\x40",
    bool: lambda v: b"\x41" if v else b"\x42",
    int: _enc_long,
    float: lambda v: b"\x82" + struct.pack(">d", v),
    str: lambda v: _vbin(0xA1, v.encode()),
    bytes: lambda v: _vbin(0xA0, v),
    bytearray: lambda v: _vbin(0xA0, bytes(v)),
    memoryview: lambda v: _vbin(0xA0, v.tobytes()),
    Symbol: _enc_symbol,
    UByte: lambda v: _enc_uint(v, 8, 0x50, None, None),
    UShort: lambda v: _enc_uint(v, 16, 0x60, None, None),
    UInt: lambda v: _enc_uint(v, 32, 0x70, 0x52, 0x43),
    ULong: lambda v: _enc_uint(v, 64, 0x80, 0x53, 0x44),
    Byte: lambda v: _enc_sint(v, 8, 0x51, None),
    Short: lambda v: _enc_sint(v, 16, 0x61, None),
    Int: lambda v: _enc_sint(v, 32, 0x71, 0x54),
    Timestamp: lambda v: _enc_sint(v, 64, 0x83, None),
    Float32: lambda v: b"\x72" + struct.pack(">f", v),
    Char: _enc_char,
    Decimal32: _enc_raw,
    Decimal64: _enc_raw,
    Decimal128: _enc_raw,
    _uuid.UUID: lambda v: b"\x98" + v.bytes,
    list: _enc_list,
    tuple: _enc_list,
    dict: _enc_map,
    Array: _enc_array,
    Described: _enc_described,
}
# subclasses of the built-in types, tried in this order when the exact type is not in _ENC
_ENC_FALLBACK = (
    (bool, _ENC[bool]), (Symbol, _enc_symbol), (Char, _enc_char), (str, _ENC[str]),
    (UByte, _ENC[UByte]), (UShort, _ENC[UShort]), (UInt, _ENC[UInt]), (ULong, _ENC[ULong]),
    (Byte, _ENC[Byte]), (Short, _ENC[Short]), (Int, _ENC[Int]), (Timestamp, _ENC[Timestamp]),
    (int, _enc_long), (Float32, _ENC[Float32]), (float, _ENC[float]), (_RawBytes, _enc_raw),
    (bytes, _ENC[bytes]), (Array, _enc_array), (list, _enc_list), (tuple, _enc_list), (dict, _enc_map),
    (_uuid.UUID, _ENC[_uuid.UUID]),
)


def encode_value(v) -> bytes:
    """Encode a Python value as one AMQP value (see the module docstring for the type mapping).
    Raises TypeError for an unsupported Python type and CodecError for a value out of range."""
    f = _ENC.get(type(v))
    if f is None:
        for t, g in _ENC_FALLBACK:
            if isinstance(v, t):
                f = g
                break
        else:
            raise TypeError(f"cannot encode {type(v).__name__} as an AMQP value")
    try:
        return f(v)
    except (struct.error, UnicodeEncodeError, OverflowError) as e:
        raise CodecError(f"cannot encode {v!r}: {e}") from None
