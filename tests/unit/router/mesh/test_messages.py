"""Control messages of the inter-router protocol: round trips, the exact Dispatch 1.x shapes, and what a
peer's codec may send differently (string keys, other integer widths), and rejection of bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from proton import Message, symbol

from router.mesh import messages as M
from router.mesh import protocol as P
from wire.amqptypes import Described, Symbol, decode_value
from wire.codec import properties_fields, scan

SAMPLES = [
    (M.Hello("Router.A", 1700000000, ["Router.B", "Router.C"]), P.HELLO_ADDRESS),
    (M.RouterAdvertisement("Router.A", 1700000000, 7, 3), P.ALL_ROUTERS_ADDRESS),
    (M.LinkStateRequest("Router.A"), P.router_address("Router.B")),
    (M.LinkStateUpdate("Router.A", 1700000000, 7, M.LinkState("Router.A", 7, {"Router.B": 1, "Router.C": 5})),
     P.router_address("Router.B")),
    (M.MobileAddressUpdate("Router.A", 4, add=["M0queue", "M1queue"], delete=["M0old"], hints=[2, 3]),
     P.ALL_ROUTERS_MA_ADDRESS),
    (M.MobileAddressUpdate("Router.A", 4, exist=["M0queue", "Cprefix"], hints=[2, 4]),
     P.router_ma_address("Router.B")),
    (M.MobileAddressRequest("Router.A", 2), P.router_ma_address("Router.B")),
]


@pytest.mark.parametrize("msg,to", SAMPLES, ids=lambda x: type(x).__name__ if not isinstance(x, str) else "")
def test_round_trip(msg, to):
    env = M.decode(M.encode(msg, to))
    assert env.to == to
    assert env.opcode == msg.opcode
    assert env.body == msg
    assert env.ingress is None and env.trace == []


def test_round_trip_with_router_annotations():
    data = M.encode(M.LinkStateRequest("A"), P.router_address("C"), ingress="A", trace=["A", "B"])
    env = M.decode(data)
    assert (env.ingress, env.trace) == ("A", ["A", "B"])


def _sections(data):
    s = scan(data)
    app, _ = decode_value(data[s.application_properties[0]:s.application_properties[1]])
    body, _ = decode_value(data, s.body_start)
    return s, app, body


def test_byte_level_shape_of_an_ra():
    data = M.encode(M.RouterAdvertisement("R1", 1700000000, 2, 0), P.ALL_ROUTERS_ADDRESS,
                    ingress="R1", trace=["R1"])
    s, app, body = _sections(data)
    # sections: message-annotations, properties, application-properties, amqp-value; nothing else
    assert s.header is None and s.delivery_annotations is None
    assert data[s.message_annotations[0]:s.message_annotations[0] + 3] == b"\x00\x53\x72"
    assert data[s.properties[0]:s.properties[0] + 3] == b"\x00\x53\x73"
    assert data[s.application_properties[0]:s.application_properties[0] + 3] == b"\x00\x53\x74"
    assert data[s.body_start:s.body_start + 3] == b"\x00\x53\x77"
    assert properties_fields(data, 3)[2] == "amqp:/_topo/0/all/qdrouter"
    # application-properties: {"opcode": "RA"} with a string key and a string value
    assert app.value == {"opcode": "RA"} and type(list(app.value)[0]) is str
    assert b"\xa1\x06opcode\xa1\x02RA" in data
    # body: an amqp-value map with symbol keys, integers as AMQP long
    assert body.descriptor == 0x77
    assert list(body.value) == ["id", "pv", "area", "instance", "ls_seq", "mobile_seq"]
    assert all(type(k) is Symbol for k in body.value)
    assert b"\xa3\x02pv\x55\x01" in data                       # pv: smalllong 1
    assert b"\xa3\x04area\xa1\x010" in data                    # area: string "0"
    assert b"\xa3\x08instance\x81" + (1700000000).to_bytes(8, "big") in data
    # router annotations: symbol keys, ingress a string, trace a list of strings; routers named "0/<id>"
    # as Dispatch 1.19's core names them (src/router_node.c)
    assert b"\xa3\x10x-opt-qd.ingress\xa1\x040/R1" in data
    assert b"\xa3\x0ex-opt-qd.trace\xc0\x07\x01\xa1\x040/R1" in data


def test_byte_level_shape_of_a_differential_mau():
    data = M.encode(M.MobileAddressUpdate("R1", 1, add=["M0q"], delete=[], hints=[3]), P.ALL_ROUTERS_MA_ADDRESS)
    _, app, body = _sections(data)
    assert app.value == {"opcode": "MAU"}
    assert set(body.value) == {"id", "pv", "area", "mobile_seq", "hints", "add", "del"}
    assert b"\xa3\x05hints\xc0\x03\x01\x54\x03" in data       # hints: list of int (smallint 3)
    assert b"\xa3\x03add\xc0\x06\x01\xa1\x03M0q" in data
    assert b"\xa3\x03del\x45" in data                          # empty list


def test_lsu_peers_map_is_keyed_by_router_id_strings():
    data = M.encode(SAMPLES[3][0], "x")
    _, _, body = _sections(data)
    ls = body.value["ls"]
    assert set(ls) == {"id", "area", "ls_seq", "peers"}
    assert ls["peers"] == {"Router.B": 1, "Router.C": 5}
    assert all(type(k) is str for k in ls["peers"])


def test_decodes_what_proton_builds_with_string_keys_and_other_int_widths():
    """A peer's codec may use string keys and int/uint instead of long: all of it must be understood."""
    m = Message(address="amqp:/_topo/0/all/qdrouter", properties={"opcode": "RA"},
                body={"id": "X", "pv": 1, "area": "0", "instance": 5, "ls_seq": 9, "mobile_seq": 2})
    env = M.decode(m.encode())
    assert env.body == M.RouterAdvertisement("X", 5, 9, 2)
    m = Message(address="amqp:/_local/qdhello", properties={"opcode": "HELLO"},
                body={symbol("id"): "X", symbol("pv"): 1, symbol("instance"): 5, symbol("seen"): ["A"]},
                annotations={symbol("user"): 1, symbol("x-opt-qd.trace"): ["X"]})
    env = M.decode(m.encode())
    assert env.body == M.Hello("X", 5, ["A"]) and env.trace == ["X"]
    # Dispatch's own form: routers named "0/<id>" in ingress and trace, read as plain ids
    m.annotations = {symbol("x-opt-qd.ingress"): "0/X", symbol("x-opt-qd.trace"): ["0/X", "0/Y"]}
    env = M.decode(m.encode())
    assert (env.ingress, env.trace) == ("X", ["X", "Y"])


def test_proton_reads_our_messages():
    m = Message()
    m.decode(M.encode(SAMPLES[4][0], SAMPLES[4][1], ingress="Router.A", trace=["Router.A"]))
    assert m.address == P.ALL_ROUTERS_MA_ADDRESS
    assert m.properties == {"opcode": "MAU"}
    assert m.body[symbol("add")] == ["M0queue", "M1queue"]
    assert m.body[symbol("hints")] == [2, 3]
    assert m.annotations[symbol("x-opt-qd.ingress")] == "0/Router.A"
    assert m.annotations[symbol("x-opt-qd.trace")] == ["0/Router.A"]


def test_newer_protocol_version_is_reported_as_such():
    m = Message(address=P.HELLO_ADDRESS, properties={"opcode": "HELLO"},
                body={symbol("id"): "X", symbol("pv"): 2, symbol("instance"): 1, symbol("seen"): []})
    with pytest.raises(M.UnsupportedVersion, match="protocol version 2"):
        M.decode(m.encode())


@pytest.mark.parametrize("props,body,why", [
    (None, {"id": "X", "pv": 1}, "application-properties"),
    ({"opcode": "NOPE"}, {"id": "X", "pv": 1}, "opcode"),
    ({"opcode": "RA"}, {"id": "X", "pv": 1, "instance": 1, "ls_seq": 1}, "mobile_seq"),
    ({"opcode": "RA"}, {"id": 7, "pv": 1, "instance": 1, "ls_seq": 1, "mobile_seq": 0}, "'id'"),
    ({"opcode": "HELLO"}, {"id": "X", "pv": 1, "instance": 1, "seen": "A"}, "not a list"),
    ({"opcode": "HELLO"}, {"id": "X", "pv": 1, "instance": 1, "seen": [1]}, "non-string"),
    ({"opcode": "MAU"}, {"id": "X", "pv": 1, "mobile_seq": 1, "add": ["M0a"], "hints": [1, 2]}, "length"),
    ({"opcode": "LSU"}, {"id": "X", "pv": 1, "ls_seq": 1, "ls": {"id": "X", "ls_seq": 1, "peers": {"A": "x"}}},
     "peer"),
    ({"opcode": "MAR"}, ["not", "a", "map"], "not a map"),
])
def test_malformed_bodies_raise(props, body, why):
    m = Message(address=P.ALL_ROUTERS_ADDRESS, body=body)
    if props:
        m.properties = props
    with pytest.raises(M.MeshMessageError, match=why):
        M.decode(m.encode())


@pytest.mark.parametrize("cut", [1, 5, 20, 40, -1])
def test_truncated_bytes_raise_the_mesh_error(cut):
    data = M.encode(SAMPLES[1][0], SAMPLES[1][1])
    with pytest.raises(M.MeshMessageError):
        M.decode(data[:cut])


def test_data_body_is_rejected():
    m = Message(address=P.ALL_ROUTERS_ADDRESS, properties={"opcode": "RA"}, body=b"\x00\x01")
    m.inferred = True
    with pytest.raises(M.MeshMessageError, match="amqp-value"):
        M.decode(m.encode())


def test_body_is_a_described_amqp_value_section():
    data = M.encode(SAMPLES[0][0], SAMPLES[0][1])
    body, _ = decode_value(data, scan(data).body_start)
    assert isinstance(body, Described) and body.descriptor == 0x77

_VALID = [M.encode(msg, to, ingress="R", trace=["R"]) for msg, to in SAMPLES]


@settings(max_examples=300)
@given(st.sampled_from(_VALID), st.data())
def test_mutated_messages_decode_or_raise_the_mesh_error(data, draw):
    """Flipped, cut or inserted bytes: decode returns an Envelope or raises MeshMessageError, never
    anything else (the engine relies on that to drop bad input without crashing)."""
    buf = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 4))):
        op = draw.draw(st.sampled_from(["flip", "cut", "insert"]))
        i = draw.draw(st.integers(0, len(buf) - 1)) if buf else 0
        if op == "flip" and buf:
            buf[i] = draw.draw(st.integers(0, 255))
        elif op == "cut":
            del buf[i:i + draw.draw(st.integers(1, 8))]
        else:
            buf[i:i] = draw.draw(st.binary(min_size=1, max_size=8))
    try:
        env = M.decode(bytes(buf))
    except M.MeshMessageError:
        return
    assert env.opcode in P.OPCODES and isinstance(env.body.id, str)
