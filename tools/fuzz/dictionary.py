"""Tokens the mutators splice into inputs (libFuzzer ``-dict``): what a random byte flip rarely produces.

AMQP tokens are the constructors of AMQP 1.0 §1.6 (types) and the descriptors of the performatives
(§2.7), SASL frames (§5.3.3) and message sections (§3.2); the others are the vocabulary of the
management protocol and of the two configuration files.
"""

from __future__ import annotations

import struct

_HEADERS = [b"AMQP\x00\x01\x00\x00", b"AMQP\x03\x01\x00\x00", b"AMQP\x02\x01\x00\x00"]
_PERFORMATIVES = [bytes((0x00, 0x53, c)) for c in range(0x10, 0x19)]   # open .. close
_SASL = [bytes((0x00, 0x53, c)) for c in range(0x40, 0x45)]             # mechanisms .. outcome
_SECTIONS = [bytes((0x00, 0x53, c)) for c in range(0x70, 0x79)]          # header .. footer
_OUTCOMES = [bytes((0x00, 0x53, c)) for c in range(0x23, 0x29)]          # received .. modified
_CONSTRUCTORS = [bytes((c,)) for c in (0x40, 0x41, 0x42, 0x43, 0x44, 0x45, 0x50, 0x52, 0x53, 0x54, 0x55, 0x56,
                                        0x60, 0x70, 0x71, 0x72, 0x73, 0x80, 0x81, 0x82, 0x83, 0x98, 0xA0,
                                        0xA1, 0xA3, 0xB0, 0xB1, 0xB3, 0xC0, 0xC1, 0xD0, 0xD1, 0xE0, 0xF0)]
_SIZES = [b"\xff", b"\x00\x00", b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", struct.pack(">I", 0x10000),
          b"\x80\x00\x00\x00"]
_UTF8 = [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\n", b"\x1b[31m"]
AMQP = _HEADERS + _PERFORMATIVES + _SASL + _SECTIONS + _OUTCOMES + _CONSTRUCTORS + _SIZES + _UTF8

MANAGEMENT = [s.encode() for s in (
    "operation", "type", "name", "identity", "entityType", "offset", "count", "attributeNames",
    "QUERY", "READ", "CREATE", "UPDATE", "DELETE", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS",
    "GET-MGMT-NODES", "GET-SCHEMA", "PURGE", "startBrokerConnection", "stopBrokerConnection",
    "org.apache.qpid.dispatch.", "router.config.address", "router.config.linkRoute", "router.config.autoLink",
    "listener", "connector", "log", "router.link", "connection", "adminStatus", "enable", "prefix",
    "pattern", "distribution", "direction", "phase", "containerId", "org.apache.activemq.artemis.",
    "queue", "address", "brokerConnection", "routingType", "durable", "self", "log/DEFAULT")] + _CONSTRUCTORS

MESH = [s.encode() for s in (
    "opcode", "HELLO", "RA", "LSU", "LSR", "MAU", "MAR", "id", "pv", "area", "instance", "seen", "ls_seq",
    "mobile_seq", "ls", "peers", "add", "del", "exist", "hints", "have_seq", "x-opt-qd.ingress",
    "x-opt-qd.trace", "x-opt-qd.to", "x-opt-qd.phase", "amqp:/_topo/0/all/qdrouter", "amqp:/_local/qdhello",
    "amqp:/_topo/0/FUZZ/qdrouter.ma")] + _SECTIONS + _CONSTRUCTORS + _SIZES

ROUTER_CONFIG = [s.encode() for s in (
    "router {\n", "listener {\n", "connector {\n", "address {\n", "linkRoute {\n", "autoLink {\n", "log {\n",
    "sslProfile {\n", "policy {\n", "flowRecords {\n", "}\n", ": ", "    # c\n", "\"", "'", "{", "}", "[", "]",
    "mode: interior", "id: ", "host: ", "port: ", "role: ", "prefix: ", "pattern: ", "distribution: ",
    "direction: ", "connection: ", "containerId: ", "phase: ", "enable: ", "module: ", "openProperties: ",
    "saslMechanisms: ", "maxConnections: ", "initialHandshakeTimeoutSeconds: ", "idleTimeoutSeconds: ",
    "waypoint: yes", "true", "-1", "99999999999999999999", "\x00", "\t")]

BROKER_CONFIG = [s.encode() for s in (
    "<configuration xmlns=\"urn:activemq\">", "<core xmlns=\"urn:activemq:core\">", "</core>",
    "</configuration>", "<acceptors>", "<acceptor name=\"a\">tcp://0.0.0.0:5672?protocols=AMQP</acceptor>",
    "<addresses>", "<address name=\"", "<anycast>", "<multicast>", "<queue name=\"", "<address-settings>",
    "<address-setting match=\"", "<max-size-bytes>", "<address-full-policy>", "<global-max-size>",
    "<broker-connections>", "<amqp-connection uri=\"", "<sender address-match=\"", "<receiver ",
    "<peer ", "<max-delivery-attempts>", "<redelivery-delay>", "<persistence-enabled>", "<journal-directory>",
    "<!DOCTYPE x [<!ENTITY e \"x\">]>", "&e;", "<![CDATA[", "]]>", "<!--", "-->", "#", "*", "10MB", "-1",
    "connectionsAllowed=", "handshake-timeout=")]

SASL = [s.encode() for s in (
    "PLAIN", "ANONYMOUS", "EXTERNAL", "SCRAM-SHA-256", "SCRAM-SHA-512", "n,,", "y,,", "p=tls-unique,,", "n=",
    "r=", "c=biws", "p=", "a=", "m=", "=2C", "=3D", ",", "\x00", "alice", "bob")]
SASL += _SASL + _CONSTRUCTORS + _SIZES + _UTF8

SECURITY_FILES = [s.encode() for s in (
    "SCRAM-SHA-256$4096:", "SCRAM-SHA-512$", "$", ":", "=", "ENC(", ")", "mech_list: ", "sasldb_path: ",
    "pwcheck_method: auxprop", "auxprop_plugin: sasldb", "fuzz.users", "sasldb2", "alice", "#", "!", "\\",
    "AAAA", "\x00", "\x0b", "\x1c", "\x85", "\u2028", "\r", "\n", ",")]

# TLS (RFC 8446 §4, §5.1): record headers, versions, handshake types and extension numbers (§4.2).
TLS = [b"\x16\x03\x01", b"\x16\x03\x03", b"\x14\x03\x03\x00\x01\x01", b"\x15\x03\x03\x00\x02",
       b"\x17\x03\x03", b"\x03\x04", b"\x03\x03", b"\x03\x00", b"\x01\x00", b"\x0b\x00", b"\x0f\x00",
       b"\x14\x00", b"\x00\x00", b"\x00\x0a", b"\x00\x0d", b"\x00\x10", b"\x00\x29", b"\x00\x2a", b"\x00\x2b",
       b"\x00\x2d", b"\x00\x33", b"\x00\x1d", b"\x00\x17", b"\x13\x01", b"\x13\x02", b"\xc0\x2f", b"\xff\xff",
       b"amqp", b"localhost"]

_BY_TARGET = {"frames": AMQP, "messages": AMQP, "mgmt": MANAGEMENT + AMQP[:20], "mesh": MESH,
              "config-router": ROUTER_CONFIG, "config-broker": BROKER_CONFIG,
              "sasl-server": SASL, "sasl-files": SECURITY_FILES, "broker-properties": SECURITY_FILES,
              "tls-handshake": TLS}


def tokens_for(target: str) -> list[bytes]:
    """Tokens for a target name (``frames-router`` uses the ``frames`` list)."""
    return _BY_TARGET.get(target) or _BY_TARGET.get(target.split("-")[0], [])
