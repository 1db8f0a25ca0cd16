"""Malformed ``$management`` requests get a 400 answer saying what is wrong, at most one log line and never
a traceback, from the router's agent and the broker's agent alike (issue 10).

Requests are built with proton (for wrong types of application properties and bodies) or byte by byte
with the project's codec (for what proton cannot even encode). The inputs marked "fuzz finding" are the
exact inputs the fuzz campaign (tools/fuzz, docs/robustness.md) found; each failed before its fix.
"""

from __future__ import annotations

import logging
import struct

import proton
import pytest

from broker.config import parse_broker_config
from broker.management import BrokerManagement
from broker.server import Broker
from router.core import Router
from router.daemon import attach_agent
from router.management import ManagementAgent
from tests.unit.enginepair import RouterHarness
from tests.unit.wire.fixtures import BROKER_XML, REPLY_TO, broker_agent, router_agent
from wire import management as wm
from wire.codec import encode_value

@pytest.fixture(params=["router", "broker"])
def agent(request):
    return router_agent() if request.param == "router" else broker_agent()


def ask(agent, data: bytes, caplog) -> wm.Response:
    """The agent's answer to ``data``; the request must cost at most one log line and no traceback."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        reply = agent.handle(data)
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert len([r for r in caplog.records if r.levelno >= logging.INFO]) <= 1
    assert reply is not None, "no answer"
    resp = wm.parse_response(reply)
    assert resp.to == REPLY_TO
    return resp


def request(**props) -> bytes:
    """A request with exactly these application properties (any types) and an optional body."""
    body = props.pop("body", {})
    msg = proton.Message(address="$management", reply_to=REPLY_TO, correlation_id="c1",
                         properties={k: v for k, v in props.items()}, body=body)
    return bytes(msg.encode())


def raw_request(app_properties: bytes, body: bytes = b"\x00Sw\xc1\x01\x00", reply_to: str = REPLY_TO) -> bytes:
    """A request assembled from encoded sections (for what proton will not encode)."""
    props = encode_value([None, None, "$management", None, reply_to, "c1"])
    return b"\x00Ss" + props + b"\x00St" + app_properties + body


def assert_bad(resp: wm.Response, *words: str) -> None:
    assert resp.status == 400, (resp.status, resp.description)
    for w in words:
        assert w in resp.description, resp.description
    assert resp.correlation_id == "c1"


# -- application properties of the wrong type --------------------------------------------------------------

@pytest.mark.parametrize("props, words", [
    pytest.param({"type": "org.amqp.management"}, ["operation"], id="operation-missing"),
    pytest.param({"operation": 5}, ["operation", "string"], id="operation-int"),
    pytest.param({"operation": ""}, ["operation"], id="operation-empty"),
    pytest.param({"operation": "READ", "type": ["x"]}, ["type", "string"], id="type-list"),
    pytest.param({"operation": "READ", "type": "queue", "name": 7}, ["name", "string"], id="name-int"),
    pytest.param({"operation": "READ", "identity": {"a": 1}}, ["identity", "string"], id="identity-map"),
    pytest.param({"operation": "QUERY", "entityType": True}, ["entityType", "string"], id="entityType-bool"),
    pytest.param({"operation": "QUERY", "offset": -1}, ["offset", "negative"], id="offset-negative"),
    pytest.param({"operation": "QUERY", "count": 1.5}, ["count", "integer"], id="count-float"),
    pytest.param({"operation": "QUERY", "count": "many"}, ["count", "integer"], id="count-word"),
    pytest.param({"operation": "QUERY", "offset": "9" * 40}, ["offset", "integer"], id="offset-huge-digits"),
    # fuzz finding: "²".isdigit() is True but int("²") raises; the router answered 500 with a traceback.
    pytest.param({"operation": "QUERY", "offset": "²"}, ["offset", "integer"], id="offset-superscript-digit"),
    pytest.param({"operation": "QUERY", "offset": "١٢"}, ["offset", "integer"], id="offset-arabic-digits"),
    pytest.param({"operation": "READ", "name": "x" * 100_000}, ["name", "1024"], id="name-huge"),
])
def test_wrong_application_properties_are_400(agent, caplog, props, words):
    assert_bad(ask(agent, request(**props), caplog), *words)


def test_application_properties_that_are_not_a_map_are_400(agent, caplog):
    assert_bad(ask(agent, raw_request(encode_value(["QUERY"])), caplog), "application-properties", "map")


def test_unknown_operation_is_refused_with_a_reason(agent, caplog):
    resp = ask(agent, request(operation="FROBNICATE", type="org.amqp.management"), caplog)
    assert resp.status in (400, 404, 501) and resp.description


# -- bodies --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [["prefix", "x"], "prefix=x", 5, b"\x00"], ids=["list", "string", "int", "binary"])
def test_router_create_and_update_need_a_map_body(caplog, body):
    agent = router_agent()
    assert_bad(ask(agent, request(operation="CREATE", type="router.config.address", name="a", body=body),
                   caplog), "body", "map")
    assert_bad(ask(agent, request(operation="UPDATE", type="log", name="log/DEFAULT", body=body), caplog),
               "body", "map")


@pytest.mark.parametrize("body", [["name", "q"], "q", 5], ids=["list", "string", "int"])
def test_broker_create_needs_a_map_body(caplog, body):
    assert_bad(ask(broker_agent(), request(operation="CREATE", type="queue", name="q", body=body), caplog),
               "body", "map")


def test_query_attribute_names_must_be_a_list_of_strings(agent, caplog):
    for names in ("name", [1, 2], {"name": 1}):
        assert_bad(ask(agent, request(operation="QUERY", body={"attributeNames": names}), caplog),
                   "attributeNames")


@pytest.mark.parametrize("op, type_, name, body, words", [
    ("CREATE", "router.config.address", "a", {"prefix": ["p"]}, ["prefix"]),
    ("CREATE", "router.config.address", "a", {"prefix": "p", "distribution": 5}, ["distribution"]),
    ("CREATE", "router.config.address", "a", {"prefix": "p", "distribution": "sideways"}, ["distribution"]),
    ("CREATE", "router.config.autoLink", "al", {"address": "q", "direction": "out", "connection": "c",
                                                "phase": "first"}, ["phase"]),
    ("CREATE", "router.config.linkRoute", "lr", {"prefix": "lr", "direction": {"in": 1}}, ["direction"]),
    ("CREATE", "connector", "c", {"host": "h", "port": "1", "openProperties": "[" * 5000}, ["openProperties"]),
    ("CREATE", "listener", "l", {"host": "h", "port": 70000}, ["port"]),
    ("UPDATE", "log", "log/DEFAULT", {"enable": ["info"]}, ["enable"]),
    ("UPDATE", "log", "log/DEFAULT", {"enable": "loud"}, ["enable"]),
    ("UPDATE", "log", "log/DEFAULT", {"colour": "red"}, ["colour"]),
])
def test_router_attribute_values_of_the_wrong_type_are_400(caplog, op, type_, name, body, words):
    assert_bad(ask(router_agent(), request(operation=op, type=type_, name=name, body=body), caplog), *words)


@pytest.mark.parametrize("body, words", [
    ({"durable": "maybe"}, ["durable"]),
    ({"address": 5}, ["address"]),
    ({"routingType": ["anycast"]}, ["routingType"]),
    ({"routingType": "broadcast"}, ["routing"]),
    ({"colour": "red"}, ["colour"]),
])
def test_broker_attribute_values_of_the_wrong_type_are_400(caplog, body, words):
    assert_bad(ask(broker_agent(), request(operation="CREATE", type="queue", name="q", body=body), caplog), *words)


def test_unknown_entity_types(agent, caplog):
    resp = ask(agent, request(operation="READ", type="no.such.type", name="x"), caplog)
    assert resp.status == 404 and "no.such.type" in resp.description
    assert_bad(ask(agent, request(operation="QUERY", entityType="no.such.type"), caplog), "no.such.type")
    assert_bad(ask(agent, request(operation="GET-ATTRIBUTES", entityType="no.such.type"), caplog))


# -- what proton cannot decode ------------------------------------------------------------------------------

def test_a_request_too_large_to_decode_still_gets_its_400(agent, caplog):
    """Regression: the reply address was read by decoding the whole request, so an oversized one got no
    answer at all (the client waits for its timeout)."""
    data = request(operation="QUERY", body={"attributeNames": ["name"], "pad": "x" * (wm.MAX_REQUEST_BYTES + 1)})
    assert_bad(ask(agent, data, caplog), "exceeds")


def test_a_request_with_a_binary_map_key_gets_its_400(agent, caplog):
    """Regression: proton cannot hold a binary map key in a Python dict and gave up on the whole
    message, reply address included: no answer."""
    app = encode_value({"operation": "QUERY", "x": {b"binary-key": 1}})
    assert_bad(ask(agent, raw_request(app), caplog), "malformed")


def test_invalid_utf8_in_the_body_is_a_400(agent, caplog):
    body = b"\x00Sw\xa1\x02\xff\xfe"
    assert_bad(ask(agent, raw_request(encode_value({"operation": "QUERY"}), body), caplog), "UTF-8")


def test_invalid_utf8_in_an_application_property_is_a_400(agent, caplog):
    app = b"\xc1\x10\x02\xa1\x09operation\xa1\x02\xff\xfe"
    assert_bad(ask(agent, raw_request(app), caplog), "UTF-8")


def test_nesting_beyond_the_stack_is_a_400(agent, caplog):
    body = b"\xa1\x01x"
    for _ in range(5000):
        body = b"\xd0" + struct.pack(">II", len(body) + 4, 1) + body
    assert_bad(ask(agent, raw_request(encode_value({"operation": "QUERY"}), b"\x00Sw" + body), caplog))


# fuzz finding (mgmt-router and mgmt-broker, signature "UnicodeDecodeError at wire/management.py:reply_target"),
# the exact input: a QUERY whose properties section was mutated so that reply-to is not UTF-8. proton
# decodes reply-to lazily, when it is read, and that read was outside the agent's error handling: the
# exception escaped the agent (the router logged a traceback for every such request).
FUZZ_INVALID_UTF8_REPLY_TO = bytes.fromhex(
    "00537045005373c01f064040a10b246d616e6167656d656e7440a10aa1055155455259a10474797065a1136f72672e616d"
    "71702e6d616e6167656d656e74a10a656e7469747954797065a1226f72672e6170616368652e717069642e656d656e74a1"
    "0a656e7469747954797065a1226f72672e6170616368652e717069642e64697370617463682e616c6c6f6361746f720053"
    "77d10000001500000002a10e6174747269627574654e616d657345")


def test_fuzz_finding_invalid_utf8_reply_to_is_refused_without_an_exception(agent, caplog):
    caplog.set_level(logging.DEBUG)
    assert agent.handle(FUZZ_INVALID_UTF8_REPLY_TO) is None  # no address to answer to
    assert not [r for r in caplog.records if r.exc_info]
    assert len([r for r in caplog.records if r.levelno >= logging.INFO]) == 1


def test_a_properties_section_read_past_its_size_names_no_reply_address(agent, caplog):
    """A properties list whose declared size runs past the section (proton reads on leniently): there is
    no well-formed reply address, so no answer, and no exception either."""
    data = (b"\x00SpE\x00Ss\xc0\x1f\x06@@\xa1\x0b$management@\xa1\nfuzz.repent\xa1\x04name\xa1\x04self"
            b"\x00Sw\xd1\x00\x00\x00\x04\x00\x00\x00\x00")
    caplog.set_level(logging.DEBUG)
    assert agent.handle(data) is None
    assert not [r for r in caplog.records if r.exc_info]


# -- end to end: the request arrives as a message, the 400 leaves as one --------------------------------------

def _exchange(node) -> wm.Response:
    """A client sends a QUERY whose body is not UTF-8 to ``$management`` and reads the answer from its
    dynamic reply link."""
    h = RouterHarness(router=node)
    client = h.connect()
    rcv = client.receiver(dynamic=True, credit=5)
    snd = client.sender("$management")
    h.pump()
    reply_to = rcv.remote_source.address
    assert reply_to
    client.send(snd, raw_request(encode_value({"operation": "QUERY"}), b"\x00Sw\xa1\x02\xff\xfe", reply_to))
    h.pump()
    [got] = client.received(rcv)
    return wm.parse_response(got.data)


def test_router_answers_a_malformed_request_sent_through_it():
    router = Router("R1")
    attach_agent(router, ManagementAgent(router))
    resp = _exchange(router)
    assert resp.status == 400 and "UTF-8" in resp.description


def test_broker_answers_a_malformed_request_sent_to_it():
    broker = Broker(parse_broker_config(BROKER_XML))
    broker.open_journal()
    broker.management = BrokerManagement(broker)
    resp = _exchange(broker)
    assert resp.status == 400 and "UTF-8" in resp.description
