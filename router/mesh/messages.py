"""Control messages of the Qpid Dispatch 1.x routing protocol as complete AMQP message bytes.

Shape of every control message (Qpid Dispatch 1.19 python/qpid_dispatch_internal/router/data.py,
src/router_core/modules/mobile_sync/mobile.c), which is what a qdrouterd 1.x peer sends and parses:

* ``properties.to`` — the control address (``amqp:/_local/qdhello``, ``amqp:/_topo/0/all/qdrouter``, ...);
* ``application-properties`` — ``{"opcode": "HELLO" | "RA" | "LSR" | "LSU" | "MAU" | "MAR"}``;
* body — one amqp-value section holding a map with symbol keys; every body carries ``id`` (router id),
  ``pv`` (protocol version, 1) and ``area`` ("0").

Integers (instance, sequence numbers, costs) are encoded as AMQP long, hints as int, ids and keys as
string; the decoder accepts any integer width and string or symbol keys, because a receiver must take
whatever a peer's codec chose. Router annotations (``x-opt-qd.ingress`` / ``x-opt-qd.trace``) are the
forwarding layer's business (:mod:`router.mesh.engine`); :func:`decode` reports them.

Malformed input raises :class:`MeshMessageError`; a message of a newer protocol version raises
:class:`UnsupportedVersion` (a subclass) so that the engine can log it as a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from router.mesh import protocol as P
from wire.amqptypes import CodecError, Described, Int, Symbol, decode_value
from wire.annotations import read_router_annotations, router_id_of, set_router_annotations
from wire.codec import encode_message, properties_fields, scan

__all__ = [
    "MeshMessageError", "UnsupportedVersion", "Hello", "RouterAdvertisement", "LinkStateRequest",
    "LinkState", "LinkStateUpdate", "MobileAddressUpdate", "MobileAddressRequest", "Envelope",
    "encode", "decode",
]

#: Largest list (seen, add, del, exist, hints) or peer map accepted in one control message. Dispatch
#: meshes hold at most 128 routers, and mobile address sets of this size already mean a sick peer; the
#: bound keeps one bad message from costing unbounded memory and CPU.
MAX_ITEMS = 1_000_000
_AMQP_VALUE = 0x77


class MeshMessageError(ValueError):
    """A control message that cannot be understood (bad sections, missing or ill-typed fields)."""


class UnsupportedVersion(MeshMessageError):
    """A control message of a protocol version newer than :data:`protocol.PROTOCOL_VERSION`."""


# --------------------------------------------------------------------------------------------------
# Message bodies
# --------------------------------------------------------------------------------------------------

@dataclass
class Hello:
    """HELLO: neighbour discovery, every helloInterval on each inter-router connection."""
    id: str
    instance: int
    seen: list[str] = field(default_factory=list)
    area: str = P.DEFAULT_AREA
    pv: int = P.PROTOCOL_VERSION
    opcode = P.HELLO

    def body(self) -> dict:
        return {"id": self.id, "pv": self.pv, "area": self.area, "instance": self.instance,
                "seen": list(self.seen)}


@dataclass
class RouterAdvertisement:
    """RA: flooded; the sequence numbers of the sender's link state and mobile address set."""
    id: str
    instance: int
    ls_seq: int
    mobile_seq: int
    area: str = P.DEFAULT_AREA
    pv: int = P.PROTOCOL_VERSION
    opcode = P.RA

    def body(self) -> dict:
        return {"id": self.id, "pv": self.pv, "area": self.area, "instance": self.instance,
                "ls_seq": self.ls_seq, "mobile_seq": self.mobile_seq}


@dataclass
class LinkStateRequest:
    """LSR: unicast; asks the target for its link state."""
    id: str
    area: str = P.DEFAULT_AREA
    pv: int = P.PROTOCOL_VERSION
    opcode = P.LSR

    def body(self) -> dict:
        return {"id": self.id, "pv": self.pv, "area": self.area}


@dataclass
class LinkState:
    """One router's link state: its neighbours and the cost of the connection to each."""
    id: str
    ls_seq: int
    peers: dict[str, int] = field(default_factory=dict)
    area: str = P.DEFAULT_AREA

    def to_map(self) -> dict:
        return {"id": self.id, "area": self.area, "ls_seq": self.ls_seq, "peers": dict(self.peers)}


@dataclass
class LinkStateUpdate:
    """LSU: unicast reply to an LSR, carrying the sender's link state."""
    id: str
    instance: int
    ls_seq: int
    ls: LinkState
    area: str = P.DEFAULT_AREA
    pv: int = P.PROTOCOL_VERSION
    opcode = P.LSU

    def body(self) -> dict:
        return {"id": self.id, "pv": self.pv, "area": self.area, "instance": self.instance,
                "ls_seq": self.ls_seq, "ls": self.ls.to_map()}


@dataclass
class MobileAddressUpdate:
    """MAU: differential (``add``/``delete`` with ``hints`` per add; flooded) when ``exist`` is None,
    absolute (``exist`` with ``hints`` per entry; unicast reply to a MAR) otherwise."""
    id: str
    mobile_seq: int
    add: list[str] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)
    hints: list[int] = field(default_factory=list)
    exist: list[str] | None = None
    area: str = P.DEFAULT_AREA
    pv: int = P.PROTOCOL_VERSION
    opcode = P.MAU

    @property
    def absolute(self) -> bool:
        return self.exist is not None

    def body(self) -> dict:
        m = {"id": self.id, "pv": self.pv, "area": self.area, "mobile_seq": self.mobile_seq,
             "hints": [Int(h) for h in self.hints]}
        if self.exist is not None:
            m["exist"] = list(self.exist)
        else:
            m["add"] = list(self.add)
            m["del"] = list(self.delete)
        return m


@dataclass
class MobileAddressRequest:
    """MAR: unicast; "I have your mobile_seq = have_seq", answered by an absolute MAU."""
    id: str
    have_seq: int
    area: str = P.DEFAULT_AREA
    pv: int = P.PROTOCOL_VERSION
    opcode = P.MAR

    def body(self) -> dict:
        return {"id": self.id, "pv": self.pv, "area": self.area, "have_seq": self.have_seq}


ControlMessage = (Hello | RouterAdvertisement | LinkStateRequest | LinkStateUpdate | MobileAddressUpdate
                  | MobileAddressRequest)


@dataclass
class Envelope:
    """A decoded control message with what the forwarding layer needs: ``to`` (properties.to as
    sent), the router annotations ``ingress`` and ``trace`` (None / [] when absent), and the body."""
    to: str | None
    opcode: str
    body: ControlMessage
    ingress: str | None = None
    trace: list[str] = field(default_factory=list)
    to_override: str | None = None
    phase: int | None = None


# --------------------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------------------

def _symbol_keys(v):
    """Body maps use symbol keys at every level except the ``peers`` map (keyed by router id)."""
    if isinstance(v, dict):
        return {Symbol(k): (_symbol_keys(x) if k != "peers" else dict(x)) for k, x in v.items()}
    return v


def encode(msg: ControlMessage, to: str, *, ingress: str | None = None,
           trace: list[str] | None = None) -> bytes:
    """The complete AMQP message bytes of ``msg`` addressed to ``to``, with router annotations when
    ``ingress`` / ``trace`` are given (appended after any user annotations, as 1.x requires)."""
    data = encode_message(to=to, application_properties={P.OPCODE_KEY: msg.opcode},
                          body_value=_symbol_keys(msg.body()))
    if ingress is not None or trace is not None:
        # Routers named "0/<id>" as Dispatch's core annotates its control messages (wire/annotations.py).
        data = set_router_annotations(data, ingress=ingress, trace=trace, area_names=True)
    return data


# --------------------------------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------------------------------

def _field(m: dict, key: str, kind, *, required=True, default=None):
    if key not in m:
        if required:
            raise MeshMessageError(f"missing field {key!r}")
        return default
    v = m[key]
    if kind is int:
        if type(v) is bool or not isinstance(v, int):
            raise MeshMessageError(f"field {key!r} is not an integer: {v!r}")
        return int(v)
    if kind is str:
        if not isinstance(v, str):
            raise MeshMessageError(f"field {key!r} is not a string: {v!r}")
        return str(v)
    if kind is list:
        if v is None and not required:
            return default
        if not isinstance(v, list):
            raise MeshMessageError(f"field {key!r} is not a list: {v!r}")
        if len(v) > MAX_ITEMS:
            raise MeshMessageError(f"field {key!r} has {len(v)} entries (limit {MAX_ITEMS})")
        return v
    if kind is dict:
        if not isinstance(v, dict):
            raise MeshMessageError(f"field {key!r} is not a map: {v!r}")
        if len(v) > MAX_ITEMS:
            raise MeshMessageError(f"field {key!r} has {len(v)} entries (limit {MAX_ITEMS})")
        return v
    raise AssertionError(kind)


def _str_list(m, key, required=True):
    v = _field(m, key, list, required=required, default=[])
    for x in v:
        if not isinstance(x, str):
            raise MeshMessageError(f"field {key!r} holds a non-string: {x!r}")
    return [str(x) for x in v]


def _int_list(m, key, required=True):
    v = _field(m, key, list, required=required, default=[])
    for x in v:
        if type(x) is bool or not isinstance(x, int):
            raise MeshMessageError(f"field {key!r} holds a non-integer: {x!r}")
    return [int(x) for x in v]


def _plain_keys(m: dict) -> dict:
    out = {}
    for k, v in m.items():
        if not isinstance(k, str):
            raise MeshMessageError(f"body map key is not a string or symbol: {k!r}")
        out[str(k)] = v
    return out


def _body(opcode: str, m: dict) -> ControlMessage:
    m = _plain_keys(m)
    rid = _field(m, "id", str)
    pv = _field(m, "pv", int)
    area = _field(m, "area", str, required=False, default=P.DEFAULT_AREA)
    if pv > P.PROTOCOL_VERSION:
        raise UnsupportedVersion(f"{opcode} from {rid!r} has protocol version {pv} "
                                 f"(this router speaks {P.PROTOCOL_VERSION})")
    if not rid:
        raise MeshMessageError("empty router id")
    if opcode == P.HELLO:
        return Hello(rid, _field(m, "instance", int), _str_list(m, "seen", required=False), area, pv)
    if opcode == P.RA:
        return RouterAdvertisement(rid, _field(m, "instance", int), _field(m, "ls_seq", int),
                                   _field(m, "mobile_seq", int), area, pv)
    if opcode == P.LSR:
        return LinkStateRequest(rid, area, pv)
    if opcode == P.LSU:
        ls = _plain_keys(_field(m, "ls", dict))
        peers = {}
        for k, v in _field(ls, "peers", dict).items():
            if not isinstance(k, str) or type(v) is bool or not isinstance(v, int):
                raise MeshMessageError(f"bad link-state peer entry {k!r}: {v!r}")
            peers[str(k)] = int(v)
        state = LinkState(_field(ls, "id", str), _field(ls, "ls_seq", int), peers,
                          _field(ls, "area", str, required=False, default=area))
        return LinkStateUpdate(rid, _field(m, "instance", int, required=False, default=0),
                               _field(m, "ls_seq", int), state, area, pv)
    if opcode == P.MAU:
        seq = _field(m, "mobile_seq", int)
        hints = _int_list(m, "hints", required=False)
        if "exist" in m and m["exist"] is not None:
            exist = _str_list(m, "exist")
            if hints and len(hints) != len(exist):
                raise MeshMessageError("MAU hints and exist differ in length")
            return MobileAddressUpdate(rid, seq, hints=hints, exist=exist, area=area, pv=pv)
        add = _str_list(m, "add", required=False)
        if hints and len(hints) != len(add):
            raise MeshMessageError("MAU hints and add differ in length")
        return MobileAddressUpdate(rid, seq, add=add, delete=_str_list(m, "del", required=False),
                                   hints=hints, area=area, pv=pv)
    if opcode == P.MAR:
        return MobileAddressRequest(rid, _field(m, "have_seq", int), area, pv)
    raise MeshMessageError(f"unknown opcode {opcode!r}")


def decode(data: bytes) -> Envelope:
    """Parse one control message. Raises MeshMessageError (UnsupportedVersion for pv > 1)."""
    try:
        sections = scan(data)
        to = properties_fields(data, 3)[2]
        if sections.application_properties is None:
            raise MeshMessageError("no application-properties (opcode)")
        a, e = sections.application_properties
        app, _ = decode_value(data[a:e])
        if not isinstance(app, Described) or not isinstance(app.value, dict):
            raise MeshMessageError("application-properties is not a map")
        opcode = app.value.get(P.OPCODE_KEY)
        if not isinstance(opcode, str) or opcode not in P.OPCODES:
            raise MeshMessageError(f"missing or unknown opcode {opcode!r}")
        if sections.body_start is None:
            raise MeshMessageError(f"{opcode} without a body")
        body, end = decode_value(data, sections.body_start)
        if end != len(data) and bytes(data[end:end + 3]) != b"\x00\x53\x78":
            raise MeshMessageError(f"{opcode}: unexpected bytes after the body")
        if not isinstance(body, Described) or body.descriptor not in (_AMQP_VALUE, "amqp:amqp-value:*"):
            raise MeshMessageError(f"{opcode} body is not an amqp-value section")
        if not isinstance(body.value, dict):
            raise MeshMessageError(f"{opcode} body is not a map")
        ra = read_router_annotations(data)
    except CodecError as e:
        raise MeshMessageError(f"malformed control message: {e}") from None
    if to is not None and not isinstance(to, str):
        raise MeshMessageError(f"properties.to is not a string: {to!r}")
    env = Envelope(to, str(opcode), _body(str(opcode), body.value))
    if ra is not None:
        # A 1.x peer names routers "0/<id>"; the engine deals in plain ids (either form is read).
        env.ingress = router_id_of(ra.ingress) if ra.ingress is not None else None
        env.trace = [router_id_of(name) for name in ra.trace or []]
        env.to_override = ra.to_override
        env.phase = ra.phase
    return env
