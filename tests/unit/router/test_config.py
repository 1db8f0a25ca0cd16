"""router.config: the qdrouterd.conf parser and validator."""

import textwrap

import pytest

from router import schema
from router.config import ConfigError, Entity, RouterConfig, load_config, parse_config, validate_entity
from tests.paths import REPO


FULL = """\
# A full configuration: every section type.
router {
    mode: interior
    id: Router.X
    hello-interval-seconds: 2          # dashed spelling
    raInterval: 20                     # deprecated name
    defaultDistribution: closest
    metadata: "rack 4 # top"
}

# sslProfile sections are refused while TLS is not enforced (issue 12);
# these comment lines keep the line numbers below
# that the tests assert.
#
#
#

listener
{
    name: amqp
    host: ::1
    port: amqp
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
    idle-timeout-seconds: 30
    linkCapacity: 100
    # (sslProfile: refused while TLS is not enforced)
}

listener {
    addr: 0.0.0.0
    port: 0
    role: inter-router
    cost: 5
}

connector {
    name: broker
    host: broker.example.com
    port: 5673
    role: route-container
    stripAnnotations: no
    retryDelaySeconds: 0.5
    retryMultiplier: 1.0
    retryMaxDelaySeconds: 5
    retryMaxAttempts: 3
}

address {
    prefix: closest
    distribution: closest
}

address {
    pattern: news/#
    distribution: multicast
}

address {
    prefix: 'queue'
    waypoint: yes
    priority: 7
}

linkRoute {
    prefix: lr
    dir: in
    connection: broker
}

linkRoute {
    pattern: lr.*.x
    direction: out
    containerId: broker-container
    addExternalPrefix: ext.
}

autoLink {
    addr: queue.q1
    dir: in
    connection: broker
}

autoLink {
    address: queue.q1
    direction: out
    connection: broker
    externalAddr: remote.q1
}

log {
    module: DEFAULT
    enable: info+
    timestamp: yes
}

log {
    module: ROUTER_CORE
    enable: trace,warning+
    includeSource: true
    outputFile: /tmp/core.log
}
"""


@pytest.fixture
def full() -> RouterConfig:
    return parse_config(FULL, "full.conf")


def write(tmp_path, text, name="bad.conf"):
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return str(p)


# -- a good file ---------------------------------------------------------------

def test_full_counts(full):
    assert full.path == "full.conf"
    assert (len(full.listeners), len(full.connectors), len(full.addresses), len(full.link_routes),
            len(full.auto_links), len(full.logs), len(full.ssl_profiles)) == (2, 1, 3, 2, 2, 2, 0)
    assert [e.type for e in full.entities()][:3] == ["router", "listener", "listener"]
    assert all(isinstance(e, Entity) for e in full.entities())


def test_router_section(full):
    r = full.router
    assert r.type == "router" and r.line == 2 and r.path == "full.conf"
    assert r["id"] == "Router.X" and r["name"] == "Router.X"
    assert r["mode"] == "interior"
    assert r["helloIntervalSeconds"] == 2          # from hello-interval-seconds
    assert r["raIntervalSeconds"] == 20            # from raInterval
    assert r["defaultDistribution"] == "closest"
    assert r["metadata"] == "rack 4 # top"         # quoted: '#' kept
    assert r["helloMaxAgeSeconds"] == 3 and r["raIntervalFluxSeconds"] == 4
    assert r["remoteLsMaxAgeSeconds"] == 60


def test_listeners(full):
    a, b = full.listeners
    assert a.line == 18                            # the name line; '{' is on the next line
    assert a["name"] == "amqp" and a["host"] == "::1" and a["port"] == "5672"
    assert a["authenticatePeer"] is False and a["saslMechanisms"] == "ANONYMOUS"
    assert a["idleTimeoutSeconds"] == 30 and a["linkCapacity"] == 100
    assert a["sslProfile"] is None
    assert b["host"] == "0.0.0.0" and b["port"] == "0"          # addr -> host
    assert b["role"] == "inter-router" and b["cost"] == 5
    assert b["name"] == "listener/0.0.0.0:0"                     # generated
    assert a.attr_lines["port"] == 22


def test_connector(full):
    (c,) = full.connectors
    assert c["name"] == "broker" and c["port"] == "5673" and c["role"] == "route-container"
    assert c["stripAnnotations"] == "no"
    assert (c["retryDelaySeconds"], c["retryMultiplier"], c["retryMaxDelaySeconds"],
            c["retryMaxAttempts"]) == (0.5, 1.0, 5.0, 3)


def test_addresses(full):
    a0, a1, a2 = full.addresses
    assert (a0["prefix"], a0["pattern"], a0["distribution"]) == ("closest", None, "closest")
    assert (a1["prefix"], a1["pattern"], a1["distribution"]) == (None, "news/#", "multicast")
    assert a2["prefix"] == "queue" and a2["waypoint"] is True and a2["priority"] == 7
    assert a2["distribution"] is None            # router default applies later
    assert [a["name"] for a in full.addresses] == ["address/0", "address/1", "address/2"]


def test_link_routes_and_auto_links(full):
    l0, l1 = full.link_routes
    assert l0["direction"] == "in" and l0["connection"] == "broker" and l0["containerId"] is None
    assert l0["distribution"] == "linkBalanced" and l0["name"] == "linkRoute/0"
    assert l1["pattern"] == "lr.*.x" and l1["addExternalPrefix"] == "ext."
    a0, a1 = full.auto_links
    assert a0["address"] == "queue.q1" and a0["direction"] == "in" and a0["phase"] == 1
    assert a1["direction"] == "out" and a1["phase"] == 0 and a1["externalAddress"] == "remote.q1"
    assert a1["fallback"] is False


def test_logs(full):
    d, core = full.logs
    assert d["module"] == "DEFAULT" and d["enable"] == "info+" and d["includeTimestamp"] is True
    assert d["name"] == "log/DEFAULT" and d["includeSource"] is None
    assert core["enable"] == "trace,warning+" and core["includeSource"] is True
    assert core["outputFile"] == "/tmp/core.log"


def test_defaults_for_empty_file():
    cfg = parse_config("", "empty.conf")
    r = cfg.router
    assert r["mode"] == "standalone" and r["defaultDistribution"] == "balanced"
    assert r["id"].startswith("standalone") and len(r["id"]) > len("standalone")
    assert r.line == 0 and r["name"] == r["id"]
    assert (r["helloIntervalSeconds"], r["helloMaxAgeSeconds"], r["raIntervalSeconds"],
            r["raIntervalFluxSeconds"], r["remoteLsMaxAgeSeconds"]) == (1, 3, 30, 4, 60)
    assert cfg.listeners == cfg.connectors == cfg.addresses == cfg.logs == []
    assert parse_config("router {\n  mode: edge\n}\n").router["id"].startswith("edge")
    assert parse_config("").router["id"] != r["id"]          # random discriminator


def test_connection_defaults():
    cfg = parse_config("listener {\n}\nconnector {\n}\naddress {\n prefix: a\n}\n")
    (l,), (c,), (a,) = cfg.listeners, cfg.connectors, cfg.addresses
    for e in (l, c):
        assert (e["role"], e["cost"], e["maxFrameSize"], e["maxSessions"], e["idleTimeoutSeconds"],
                e["linkCapacity"], e["stripAnnotations"], e["saslMechanisms"], e["port"]) == \
            ("normal", 1, 16384, 32768, 16, 250, "both", None, "5672")
    assert l["host"] == "" and l["authenticatePeer"] is False and l["name"] == "listener/:5672"
    assert c["host"] == "127.0.0.1" and c["name"] == "connector/127.0.0.1:5672"
    assert (c["retryDelaySeconds"], c["retryMultiplier"], c["retryMaxDelaySeconds"],
            c["retryMaxAttempts"]) == (1.0, 2.0, 60.0, 0)
    assert (a["waypoint"], a["ingressPhase"], a["egressPhase"], a["priority"], a["enableFallback"],
            a["distribution"]) == (False, None, None, None, False, None)


def test_entity_access():
    (l,) = parse_config("listener {\n port: amqps\n}\n").listeners
    assert l["port"] == "5671" and l.get("port") == "5671"
    assert l.get("nope") is None and l.get("nope", 3) == 3
    with pytest.raises(KeyError):
        l["nope"]


@pytest.mark.parametrize("text,value", [
    ("yes", True), ("No", False), ("TRUE", True), ("false", False), ("1", True), ("0", False),
])
def test_booleans(text, value):
    # (a listener's authenticatePeer: yes is refused while it is not enforced, so another boolean)
    (a,) = parse_config(f"address {{\n prefix: a\n waypoint: {text}\n}}\n").addresses
    assert a["waypoint"] is value


def test_syntax_variants():
    text = (
        "  # indented comment\n"
        "router {   # trailing comment after brace\n"
        "    id: \"R#1\"\n"
        "    mode: 'standalone'\n"
        "}   # after close\n"
        "\n"
        "address\n"
        "\n"
        "# comment between name and brace\n"
        "{\n"
        "    pattern: #\n"
        "}\n"
        "address {\n"
        "    pattern: a.*.#   # a comment after whitespace\n"
        "}\n"
        "listener {\n"
        "    host: \"\"\n"
        "    port: 0\n"
        "}\n"
    )
    cfg = parse_config(text)
    assert cfg.router["id"] == "R#1" and cfg.router["mode"] == "standalone"
    assert [a["pattern"] for a in cfg.addresses] == ["#", "a.*.#"]
    assert cfg.addresses[0].line == 7
    assert cfg.listeners[0]["host"] == ""


def test_empty_section_on_one_line():
    cfg = parse_config("router {}\nlistener {\n}\n")
    assert cfg.router.line == 1 and len(cfg.listeners) == 1


def test_legacy_container_section_merges_into_router():
    cfg = parse_config("container {\n containerName: C1\n workerThreads: 2\n debugDump: /tmp/d\n}\n"
                       "router {\n mode: interior\n}\n")
    r = cfg.router
    assert (r["id"], r["workerThreads"], r["debugDumpFile"], r["mode"]) == ("C1", 2, "/tmp/d", "interior")


def test_deprecated_names():
    cfg = parse_config(
        "router {\n routerId: R\n helloMaxAge: 9\n}\n"
        "listener {\n addr: 1.2.3.4\n failoverList: x\n"
        " logMessage: none\n httpRoot: /h\n}\n"
        "connector {\n verifyHostName: no\n}\n"
        "address {\n prefix: a\n fallback: no\n}\n"
        "linkRoute {\n prefix: b\n dir: out\n containerId: c\n}\n"
        "autoLink {\n addr: q\n dir: out\n externalAddr: rq\n containerId: c\n}\n"
        "log {\n module: SERVER\n source: yes\n output: stderr\n}\n")
    r, (l,), (c,), (a,), (lr,), (al,), (lg,) = (cfg.router, cfg.listeners, cfg.connectors,
                                                 cfg.addresses, cfg.link_routes, cfg.auto_links, cfg.logs)
    assert (r["id"], r["helloMaxAgeSeconds"]) == ("R", 9)
    assert (l["host"], l["failoverUrls"], l["messageLoggingComponents"], l["httpRootDir"]) == \
        ("1.2.3.4", "x", "none", "/h")
    assert c["verifyHostname"] is False
    assert a["enableFallback"] is False
    assert schema.entity_type("listener").resolve("protocolFamily") == "socketAddressFamily"
    assert lr["direction"] == "out"
    assert (al["address"], al["direction"], al["externalAddress"]) == ("q", "out", "rq")
    assert (lg["includeSource"], lg["outputFile"]) == (True, "stderr")
    # Legacy spellings of refused security attributes (schema.UNENFORCED) map to their canonical names.
    assert schema.entity_type("router").resolve("saslConfigPath") == "saslConfigDir"
    assert schema.entity_type("listener").resolve("trustedCerts") == "trustedCertsFile"
    assert schema.entity_type("sslProfile").resolve("displayNameFile") == "uidNameMappingFile"


def test_enum_case_is_forgiven():
    cfg = parse_config("log {\n module: default\n enable: INFO+\n}\naddress {\n prefix: a\n"
                       " distribution: Closest\n}\n")
    assert cfg.logs[0]["module"] == "DEFAULT" and cfg.logs[0]["enable"] == "info+"
    assert cfg.addresses[0]["distribution"] == "closest"


def test_generated_names_stay_unique():
    cfg = parse_config("listener {\n host: 127.0.0.1\n port: 0\n}\nlistener {\n host: 127.0.0.1\n port: 0\n}\n"
                       "address {\n name: address/1\n prefix: x\n}\naddress {\n prefix: y\n}\n")
    assert [l["name"] for l in cfg.listeners] == ["listener/127.0.0.1:0", "listener/127.0.0.1:0/1"]
    assert [a["name"] for a in cfg.addresses] == ["address/1", "address/1/1"]


def test_shipped_router_conf_parses():
    cfg = load_config(str(REPO / "conf" / "router.conf"))
    assert cfg.router["mode"] == "standalone" and cfg.router["id"] == "Router.A"
    l, web = cfg.listeners
    assert (l["host"], l["port"], l["role"], l["authenticatePeer"], l["saslMechanisms"]) == \
        ("127.0.0.1", "5672", "normal", False, "ANONYMOUS")
    assert (web["host"], web["port"], web["http"]) == ("127.0.0.1", "8672", True)   # the web console
    assert [(g["module"], g["enable"]) for g in cfg.logs] == [("DEFAULT", "info+")]


def test_shipped_router_conf_examples_parse_when_uncommented():
    import re
    text = (REPO / "conf" / "router.conf").read_text()
    cfg = parse_config(re.sub(r"^#(?!#)", "", text, flags=re.M))
    assert len(cfg.addresses) >= 3
    assert {a["distribution"] for a in cfg.addresses} >= {"closest", "balanced", "multicast"}
    assert any(a["pattern"] for a in cfg.addresses) and any(a["prefix"] for a in cfg.addresses)


# -- errors, with exact FILE:LINE -----------------------------------------------

ERRORS = [
    ("unknown attribute", "listener {\n    prot: 5672\n}\n", 2,
     "listener: unknown attribute 'prot' (did you mean 'port'?)"),
    ("unknown attribute no hint", "router {\n  zzzz: 1\n}\n", 2, "router: unknown attribute 'zzzz'"),
    ("bad enum", "address {\n  prefix: a\n  distribution: nearest\n}\n", 3,
     "address: distribution 'nearest' is not one of multicast, closest, balanced, unavailable"),
    ("bad mode", "router {\n  mode: leaf\n}\n", 2,
     "router: mode 'leaf' is not one of standalone, interior, edge"),
    ("bad role", "listener {\n role: broker\n}\n", 2,
     "listener: role 'broker' is not one of normal, inter-router, route-container, edge"),
    ("bad strip", "connector {\n stripAnnotations: yes\n}\n", 2,
     "connector: stripAnnotations 'yes' is not one of in, out, both, no"),
    ("bad direction", "linkRoute {\n prefix: a\n direction: both\n connection: c\n}\n", 3,
     "linkRoute: direction 'both' is not one of in, out"),
    ("prefix and pattern", "\naddress {\n  prefix: a\n  pattern: b\n}\n", 2,
     "address: give exactly one of 'prefix' or 'pattern'"),
    ("neither prefix nor pattern", "address {\n  distribution: closest\n}\n", 1,
     "address: give exactly one of 'prefix' or 'pattern'"),
    ("missing required", "\nautoLink {\n direction: in\n connection: c\n}\n", 2,
     "autoLink: missing required attribute 'address'"),
    ("missing log module", "log {\n enable: info+\n}\n", 1, "log: missing required attribute 'module'"),
    ("unterminated", "router {\n}\nlistener {\n  port: 1\n\n", 3,
     "unterminated section 'listener' opened here"),
    ("duplicate attribute", "listener {\n port: 1\n host: a\n port: 2\n}\n", 4,
     "listener: duplicate attribute: 'port' is already set at line 2"),
    ("duplicate via legacy name", "connector {\n host: a\n addr: b\n}\n", 3,
     "connector: duplicate attribute: 'addr' sets 'host', which is already set at line 2"),
    ("duplicate via dashed name", "listener {\n idleTimeoutSeconds: 1\n idle-timeout-seconds: 2\n}\n", 3,
     "listener: duplicate attribute: 'idle-timeout-seconds' sets 'idleTimeoutSeconds', which is "
     "already set at line 2"),
    ("unknown section", "router {\n}\nlistner {\n}\n", 3,
     "unknown section 'listner' (did you mean 'listener'?); expected one of router, listener, "
     "connector, address, linkRoute, autoLink, log, flowRecords, sslProfile, policy, vhost"),
    ("unsupported section", "exchange {\n}\n", 1, "section 'exchange' is not supported by tdrouterd"),
    ("second policy", "policy {\n maxConnections: 5\n}\npolicy {\n maxConnections: 6\n}\n", 4,
     "policy: only one policy section is allowed (the first is at line 1)"),
    ("nested section", "router {\n  id: R\n  listener {\n  }\n}\n", 3,
     "section 'listener' cannot be nested inside 'router' (missing '}' for 'router' opened at line 1?)"),
    ("stray close", "router {\n}\n}\n", 3, "unexpected '}' outside any section"),
    ("attribute outside", "# c\nport: 5672\n", 2, "attribute 'port' outside any section"),
    ("no brace", "router\nid: x\n", 1, "expected '{' after section name 'router'"),
    ("no brace at eof", "router {\n}\nlistener\n", 3, "expected '{' after section name 'listener'"),
    ("not key value", "listener {\n  port 5672\n}\n", 2, "listener: expected 'name: value', got 'port 5672'"),
    ("empty value", "listener {\n  port:\n}\n", 2, "attribute 'port' has no value"),
    ("unterminated quote", "router {\n id: \"R\n}\n", 2, "unterminated quoted value for 'id'"),
    ("text after quote", "router {\n id: \"R\" x\n}\n", 2, "unexpected text 'x' after the quoted value of 'id'"),
    ("bad integer", "listener {\n maxFrameSize: big\n}\n", 2, "listener: maxFrameSize 'big' is not an integer"),
    ("below minimum", "connector {\n cost: 0\n}\n", 2, "connector: cost 0 is below the minimum 1"),
    ("above maximum", "address {\n prefix: a\n ingressPhase: 10\n}\n", 3,
     "address: ingressPhase 10 is above the maximum 9"),
    ("bad boolean", "address {\n prefix: a\n waypoint: maybe\n}\n", 3,
     "address: waypoint 'maybe' is not a boolean (yes, no, true, false, 1, 0)"),
    ("bad port", "listener {\n port: 70000\n}\n", 2,
     "listener: port '70000' is not a port number (0..65535), 'amqp' or 'amqps'"),
    ("bad port name", "listener {\n port: http\n}\n", 2,
     "listener: port 'http' is not a port number (0..65535), 'amqp' or 'amqps'"),
    ("bad float", "connector {\n retryMultiplier: 0.5\n}\n", 2,
     "connector: retryMultiplier 0.5 is below the minimum 1.0"),
    ("max delay below initial", "connector {\n retryDelaySeconds: 10\n retryMaxDelaySeconds: 2\n}\n", 3,
     "connector: retryMaxDelaySeconds 2.0 is below retryDelaySeconds 10.0"),
    ("bad log enable", "log {\n module: DEFAULT\n enable: loud+\n}\n", 3,
     "log: enable 'loud+' is not 'none' or a comma list of levels (trace, debug, info, notice, "
     "warning, error, critical), each optionally followed by '+'"),
    ("bad log module", "log {\n module: NETWORK\n}\n", 2, "log: module 'NETWORK' is not one of "
     + ", ".join(schema.LOG_MODULES)),
    ("duplicate log module", "log {\n module: SERVER\n}\nlog {\n module: server\n}\n", 5,
     "log: module 'SERVER' is already configured at line 1"),
    ("duplicate router", "router {\n}\n\nrouter {\n}\n", 4,
     "duplicate 'router' section (first at line 1); only one is allowed"),
    ("duplicate name", "connector {\n name: b\n}\nconnector {\n  name: b\n}\n", 5,
     "connector: name 'b' is already used by the connector at line 1"),
    ("duplicate address", "address {\n prefix: a\n}\naddress {\n pattern: a.#\n}\n", 5,
     "address: pattern 'a.#' duplicates the address at line 1 (both match 'a/#')"),
    ("duplicate linkRoute", "linkRoute {\n prefix: a\n dir: in\n connection: c\n}\n"
     "linkRoute {\n prefix: a/\n dir: in\n connection: d\n}\n", 7,
     "linkRoute: prefix 'a/' duplicates the linkRoute at line 1 (both match 'a/#')"),
    ("wildcard in prefix", "address {\n prefix: a.*\n}\n", 2,
     "address: prefix 'a.*' contains a wildcard; use 'pattern' instead"),
    ("bad pattern token", "address {\n pattern: a.b*\n}\n", 2,
     "address: pattern 'a.b*': token 'b*' mixes a wildcard with other characters "
     "('*' and '#' must be whole tokens)"),
    ("empty prefix", "address {\n prefix: \"\"\n}\n", 2, "address: prefix must not be empty"),
    ("bad router id", "router {\n id: my router\n}\n", 2,
     "router: id 'my router' must be non-empty, without whitespace or control characters"),
    ("block on plain attribute", "listener {\n host: {\n}\n", 2,
     "listener: 'host' cannot open a block; nested sections are not allowed"),
    ("bad JSON", "listener {\n openProperties: {\n   \"a\": \n }\n}\n", 2,
     "'openProperties' is not valid JSON"),
    ("reserved open property", "connector {\n openProperties: {\"product\": \"x\"}\n}\n", 2,
     "connector: openProperties key 'product' is reserved for the router"),
    ("qd open property", "connector {\n openProperties: {\"qd.x\": 1}\n}\n", 2,
     "connector: openProperties key 'qd.x' uses a reserved prefix ('qd.', 'x-opt-qd.')"),
    ("unterminated JSON", "connector {\n openProperties: {\n \"a\": 1\n", 2,
     "unterminated value for 'openProperties' opened here"),
]


@pytest.mark.parametrize("text,line,message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    e = info.value
    assert (e.path, e.line) == (path, line), str(e)
    assert e.message.startswith(message), e.message
    assert str(e) == f"{path}:{line}: {e.message}"
    if not message.endswith("JSON"):
        assert e.message == message


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.conf")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert info.value.line == 0 and info.value.path == path
    assert str(info.value).startswith(f"{path}:0: cannot read configuration file")


def test_error_str_format():
    e = ConfigError("conf/x.conf", 12, "listener: boom")
    assert str(e) == "conf/x.conf:12: listener: boom"
    assert (e.path, e.line, e.message) == ("conf/x.conf", 12, "listener: boom")
    assert isinstance(e, Exception)


# -- validate_entity (management CREATE) ----------------------------------------

def test_validate_entity_typed_and_legacy():
    e = validate_entity("listener", {"addr": "::1", "port": 0, "authenticatePeer": False,
                                     "idle-timeout-seconds": 5, "type": "org.apache.qpid.dispatch.listener"})
    assert e.type == "listener" and e.path == "<management>" and e.line == 0
    assert (e["host"], e["port"], e["authenticatePeer"], e["idleTimeoutSeconds"]) == ("::1", "0", False, 5)
    assert e["name"] == "listener/::1:0" and e["linkCapacity"] == 250


def test_validate_entity_long_type_names_and_unnamed():
    a = validate_entity("org.apache.qpid.dispatch.router.config.address",
                        {"prefix": "x", "distribution": "closest", "waypoint": False, "priority": None})
    assert a.type == "address" and a["name"] is None and a["priority"] is None
    l = validate_entity("router.config.linkRoute", {"pattern": "a.#", "dir": "in", "connection": "c"})
    assert l.type == "linkRoute" and l["direction"] == "in"


def test_validate_entity_errors():
    with pytest.raises(ConfigError) as info:
        validate_entity("address", {"prefix": "a", "distribution": "nearest"}, path="mgmt", line=7)
    assert str(info.value) == ("mgmt:7: address: distribution 'nearest' is not one of multicast, "
                               "closest, balanced, unavailable")
    with pytest.raises(ConfigError, match="unknown entity type 'listner'"):
        validate_entity("listner", {})
    with pytest.raises(ConfigError, match="cost True is not an integer"):
        validate_entity("connector", {"cost": True})
    with pytest.raises(ConfigError, match="waypoint 2 is not a boolean"):
        validate_entity("address", {"prefix": "a", "waypoint": 2})


def test_schema_tables_are_consistent():
    for et in schema.ENTITY_TYPES.values():
        assert et.long_name.startswith(schema.SCHEMA_PREFIX)
        for a in et:
            assert a.status in (schema.ACTIVE, schema.PENDING, schema.INERT, schema.DEPRECATED, schema.REFUSED)
            if a.default is not None:
                assert a.convert(a.default) == a.default, (et.name, a.name)
            for legacy in a.legacy:
                assert et.resolve(legacy) == a.name
                assert legacy not in et.attrs
    assert schema.entity_type("link-route").name == "linkRoute"
    assert schema.entity_type("container").name == "router"
    assert schema.camel_case("idle-timeout-seconds") == "idleTimeoutSeconds"


def test_every_schema_attribute_is_documented():
    """docs/configuration.md is the reference operators read: it must not drift from the schema."""
    from router import schema

    doc = (REPO / "docs" / "configuration.md").read_text()
    missing = []
    for name in ("router", "listener", "connector", "address", "linkRoute", "autoLink", "log", "flowRecords",
                 "sslProfile", "policy", "vhost"):
        for attr in schema.entity_type(name):
            if f"| `{attr.name}` |" not in doc:
                missing.append(f"{name}.{attr.name}")
    assert not missing, f"undocumented attributes: {missing}"


# -- security settings: enforced or refused, never accepted and ignored (issue 12) -------------------

#: section -> (attribute as written, value that turns it on) for every entry of schema.UNENFORCED
SECURITY_ON = [
    ("listener", "trustedCertsFile", "/etc/ca.pem"),
    ("listener", "trustedCerts", "/etc/ca.pem"),          # legacy spelling: refused alike
    ("listener", "saslPlugin", "auth"),
    ("listener", "multiTenant", "yes"),
    ("connector", "policyVhost", "public"),
]


@pytest.mark.parametrize("section,attr,value", SECURITY_ON, ids=[f"{s}.{a}={v}" for s, a, v in SECURITY_ON])
def test_unenforced_security_attribute_refused_with_file_and_line(section, attr, value):
    first = {"listener": "port: 5672", "connector": "port: 5672", "sslProfile": "name: tls"}.get(section)
    text = f"# a comment\n{section} {{\n    {first}\n    {attr}: {value}\n}}\n" if first else (
        f"# a comment\n{section} {{\n    {attr}: {value}\n}}\n")
    line = 4 if first else 3
    with pytest.raises(ConfigError) as info:
        parse_config(text, "sec.conf")
    canon = schema.entity_type(section).resolve(attr)
    assert (info.value.path, info.value.line) == ("sec.conf", line)
    assert str(info.value).startswith(f"sec.conf:{line}: {section}: {canon} is not enforced yet: ")
    assert "; " in info.value.message.split("is not enforced yet: ", 1)[1]   # says what to do instead


def test_every_unenforced_entry_is_tested_and_marked_refused():
    tested = {(s, schema.entity_type(s).resolve(a)) for s, a, _ in SECURITY_ON}
    assert set(schema.UNENFORCED) <= tested
    for section, attr in schema.UNENFORCED:
        assert schema.entity_type(section).attrs[attr].status == schema.REFUSED, (section, attr)
    refused = {(e.name, a.name) for e in schema.ENTITY_TYPES.values() for a in e if a.status == schema.REFUSED}
    # NOT_IMPLEMENTED is tested in test_config_not_implemented.py
    assert refused == set(schema.UNENFORCED) | set(schema.NOT_IMPLEMENTED)


@pytest.mark.parametrize("text", [
    "listener {\n requireSsl: no\n requireEncryption: false\n authenticatePeer: no\n saslMechanisms: ANONYMOUS\n}\n",
    "listener {\n saslMechanisms: anonymous\n}\n",
    "connector {\n verifyHostname: no\n saslMechanisms: ANONYMOUS\n}\n",
    "connector {\n saslUsername: u\n saslPassword: pass:p\n saslMechanisms: PLAIN\n}\n",
    "connector {\n saslUsername: u\n saslMechanisms: SCRAM-SHA-256 PLAIN\n}\n",
    "policy {\n maxConnections: 10\n enableVhostPolicy: no\n enableVhostNamePatterns: no\n}\n",
])
def test_security_attributes_that_mean_off_are_accepted(text):
    parse_config(text, "off.conf")


@pytest.mark.parametrize("section", ["authServicePlugin"])
def test_unenforced_security_sections_refused(section):
    with pytest.raises(ConfigError) as info:
        parse_config(f"router {{\n}}\n{section} {{\n  name: x\n}}\n", "s.conf")
    assert str(info.value).startswith(f"s.conf:3: section '{section}' is not enforced yet: ")


@pytest.mark.parametrize("type,attrs,words", [
    ("listener", {"port": "0", "saslPlugin": "x"}, "saslPlugin is not enforced yet"),
    ("listener", {"port": "0", "trustedCertsFile": "/ca.pem"}, "trustedCertsFile is not enforced yet"),
    ("authServicePlugin", {"name": "x"}, "section 'authServicePlugin' is not enforced yet"),
])
def test_validate_entity_refuses_unenforced_security(type, attrs, words):
    with pytest.raises(ConfigError, match=words):
        validate_entity(type, attrs)


def test_entity_repr_hides_passwords():
    (c,) = parse_config("connector {\n saslUsername: u\n saslPassword: pass:hunter2\n}\n").connectors
    assert c["saslPassword"] == "pass:hunter2"
    assert "hunter2" not in repr(c) and "saslUsername" in repr(c)


def test_a_bad_password_value_is_not_echoed():
    with pytest.raises(ConfigError) as info:
        validate_entity("connector", {"saslUsername": "u", "saslPassword": ["hunter2"]})
    assert "saslPassword" in str(info.value) and "hunter2" not in str(info.value)
