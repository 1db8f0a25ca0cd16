"""Structured fuzzing of both management agents with hypothesis (part of the bounded fuzz campaign).

Byte mutation (tools/fuzz, ``mgmt-router`` / ``mgmt-broker``) rarely turns a string into a well-formed map
or a uuid; here requests are generated as values: application properties of any AMQP type (or missing),
bodies that are maps, lists, scalars or nothing, attribute maps with well-known names and values of any
type, for every operation and entity type the agents know. The agents live for the whole run (as in a
daemon), so CREATEs pile up state for later requests to trip over.

Property: an answer with an integer status that is not 500, a description for every 4xx, at most one
log line, no traceback, no exception.
"""

from __future__ import annotations

import logging
import uuid

import proton
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests.unit.wire.fixtures import REPLY_TO, broker_agent, router_agent
from wire import management as wm

#: Examples per agent: about ten seconds for both on a busy two-core machine.
EXAMPLES = 600
ANSWERS = {200, 201, 204, 400, 403, 404, 501}

OPERATIONS = ["QUERY", "READ", "CREATE", "UPDATE", "DELETE", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS",
              "GET-MGMT-NODES", "GET-SCHEMA", "PURGE", "startBrokerConnection", "stopBrokerConnection", "read"]
TYPES = ["org.amqp.management", "listener", "connector", "router.config.address", "router.config.linkRoute",
         "router.config.autoLink", "log", "router.link", "connection", "router", "router.address", "router.node",
         "allocator", "org.apache.qpid.dispatch.router.config.address", "queue", "address", "brokerConnection",
         "org.apache.activemq.artemis.queue", "address"]
NAMES = ["self", "log/DEFAULT", "log/ROUTER", "a", "orders", "1", "linkRoute/0", "M0multi", "connection/x", ""]
ATTRIBUTES = ["name", "identity", "type", "prefix", "pattern", "distribution", "direction", "address", "connection",
              "containerId", "phase", "enable", "module", "adminStatus", "host", "port", "role", "routingType",
              "durable", "attributeNames", "openProperties", "waypoint", "externalAddress", "includeTimestamp"]
WORDS = ["in", "out", "multicast", "closest", "yes", "no", "info+", "enabled", "disabled", "deleted", "5672", "0",
         "anycast", "orders", "q", "a.*.#", "#", "²", "-1", "9" * 30, "[" * 2000, "x" * 5000]

_symbols = st.text(st.characters(min_codepoint=33, max_codepoint=126), max_size=12).map(proton.symbol)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=12),
    st.binary(max_size=6), st.sampled_from(WORDS + NAMES + TYPES), _symbols, st.uuids(),
    st.integers(0, 2**32 - 1).map(proton.uint), st.integers(0, 2**64 - 1).map(proton.ulong),
    st.integers(-2**31, 2**31 - 1).map(proton.int32), st.integers(0, 2**40).map(proton.timestamp),
    st.characters(blacklist_categories=("Cs",)).map(proton.char),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(ATTRIBUTES) | st.text(max_size=6), inner, max_size=3),
                      max_leaves=8)
application_properties = st.fixed_dictionaries({}, optional={
    "operation": st.sampled_from(OPERATIONS) | values,
    "type": st.sampled_from(TYPES) | values,
    "name": st.sampled_from(NAMES) | values,
    "identity": st.sampled_from(NAMES) | values,
    "entityType": st.sampled_from(TYPES) | values,
    "offset": st.integers(0, 5) | values,
    "count": st.integers(0, 5) | values,
})
bodies = st.one_of(st.none(), values,
                   st.dictionaries(st.sampled_from(ATTRIBUTES), st.sampled_from(WORDS + NAMES) | values, max_size=5))
correlation_ids = st.one_of(st.text(max_size=8), st.integers(0, 2**64 - 1).map(proton.ulong), st.uuids(),
                            st.binary(max_size=8))


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _encode(props, body, correlation_id) -> bytes | None:
    try:
        return bytes(proton.Message(address="$management", reply_to=REPLY_TO, correlation_id=correlation_id,
                                    properties=props, body=body).encode())
    except Exception:  # noqa: BLE001 - a value proton cannot encode is no request at all
        return None


def _check(agent, data: bytes) -> None:
    lines = _Lines()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(lines)
    root.setLevel(logging.DEBUG)
    try:
        reply = agent.handle(data)
    finally:
        root.removeHandler(lines)
        root.setLevel(old_level)
    tracebacks = [r for r in lines.records if r.exc_info]
    assert not tracebacks, tracebacks[0].getMessage()
    assert reply is not None
    resp = wm.parse_response(reply)
    assert resp.status in ANSWERS, (resp.status, resp.description)
    if resp.status >= 400:
        assert resp.description
        assert len([r for r in lines.records if r.levelno >= logging.INFO]) <= 1


SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                           HealthCheck.data_too_large])


@pytest.mark.parametrize("make_agent", [router_agent, broker_agent], ids=["router", "broker"])
def test_any_request_gets_a_status_never_an_exception(make_agent):
    agent = make_agent()

    @SETTINGS
    @given(props=application_properties, body=bodies, correlation_id=correlation_ids)
    def one_request(props, body, correlation_id):
        data = _encode(props, body, correlation_id)
        if data is not None:
            _check(agent, data)

    one_request()


def test_uuid_and_binary_correlation_ids_come_back_as_sent():
    agent = router_agent()
    for cid in (uuid.UUID(int=7), b"\x00\xff", proton.ulong(2**64 - 1), "text"):
        reply = agent.handle(_encode({"operation": "GET-TYPES"}, None, cid))
        msg = proton.Message()
        msg.decode(reply)
        got = bytes(msg.correlation_id) if isinstance(msg.correlation_id, memoryview) else msg.correlation_id
        assert msg.properties["statusCode"] == 200 and got == cid
        assert isinstance(got, int) or type(got) is type(cid)  # proton hands a ulong back as int
