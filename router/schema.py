"""Declarative attribute tables for the configuration entities.

This module is the single source of truth for every section the config file
accepts (and that the management agent will accept for CREATE): attribute
names, types, defaults, enums, ranges and the legacy spellings Dispatch
accepted.  Names, defaults and enums follow Qpid Dispatch 1.19's management
schema (``qdrouter.json``); attributes marked ``extension`` are ours.

Nothing here parses files: :mod:`router.config` does that and reports errors
with file and line.  :meth:`Attr.convert` raises :class:`ValueError` with a
message that names the attribute, the bad value and what is allowed.

Why one module of ~670 lines: it is one table, every entity Dispatch's ``qdrouter.json`` defines, with the
lists of settings refused as not enforced or not implemented beside the attributes they refer to; splitting
it by entity would scatter what docs/configuration.md and the tests read as a whole.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterator

from wire.annotations import ROUTER_PREFIX
from router.addresses import DISTRIBUTIONS
from router.budget import (DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_MAX_CONNECTION_BUFFERED_BYTES,
                           DEFAULT_STALLED_DELIVERY_TIMEOUT_SECONDS, MIN_BUFFERED_BYTES)
from router.logsetup import LEVELS
from router.mesh import protocol as P

#: Status of an attribute or section in this release.
ACTIVE = "active"        # parsed and acted on
PENDING = "pending"      # parsed and stored; takes effect in a later release
INERT = "inert"          # parsed and stored; has no effect in this implementation
DEPRECATED = "deprecated"  # deprecated in Dispatch; parsed, stored and ignored
REFUSED = "refused"      # not enforced: refused unless absent or at a value that is what tdrouterd does anyway
                         # (UNENFORCED: security settings; NOT_IMPLEMENTED: the others)

SCHEMA_PREFIX = "org.apache.qpid.dispatch."

ROUTER_MODES = ("standalone", "interior", "edge")
CONNECTION_ROLES = ("normal", "inter-router", "route-container", "edge")
STRIP_ANNOTATIONS = ("in", "out", "both", "no")
DIRECTIONS = ("in", "out")
ADDRESS_FAMILIES = ("IPv4", "IPv6")
LOG_LEVELS = tuple(LEVELS)  # Dispatch's, lowest first
LOG_MODULES = (
    "ROUTER", "ROUTER_CORE", "ROUTER_HELLO", "ROUTER_LS", "ROUTER_MA", "MESSAGE",
    "SERVER", "AGENT", "AUTHSERVICE", "CONTAINER", "ERROR", "POLICY", "HTTP",
    "CONN_MGR", "PYTHON", "PROTOCOL", "TCP_ADAPTOR", "HTTP_ADAPTOR",
    "CONFIG",  # extension: tdrouterd's configuration loader
    "DEFAULT",
)
#: symbolic port names understood by ``port``
PORT_NAMES = {"amqp": "5672", "amqps": "5671"}
#: openProperties keys the router owns (Dispatch reserves the same ones)
RESERVED_OPEN_PROPERTIES = frozenset(
    {P.OPEN_PRODUCT, P.OPEN_VERSION, "failover-server-list", "network-host", "port", "scheme", "hostname"}
)
#: openProperties key prefixes the router owns: its OPEN properties' and its message annotations'
RESERVED_PROPERTY_PREFIXES = (P.RESERVED_PROPERTY_PREFIX, ROUTER_PREFIX.decode())

_TRUE = {"yes", "true", "1", "on"}
_FALSE = {"no", "false", "0", "off"}


def camel_case(name: str) -> str:
    """``idle-timeout-seconds`` -> ``idleTimeoutSeconds`` (Dispatch's dashed spelling)."""
    if "-" not in name:
        return name
    head, *rest = [p for p in name.split("-") if p]
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _fmt(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


@dataclass(frozen=True)
class Attr:
    """One attribute of a configuration entity."""

    name: str
    type: str                 # string|path|integer|float|boolean|enum|port|properties|map|logEnable
    default: Any = None
    required: bool = False
    enum: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    legacy: tuple[str, ...] = ()   # deprecated / old spellings that map here
    status: str = ACTIVE
    extension: bool = False        # not in Dispatch: a tdrouterd extension
    secret: bool = False           # a password: never shown in management results, reprs, logs or errors
    doc: str = ""

    # -- conversion ----------------------------------------------------

    def convert(self, value: Any) -> Any:
        """Return *value* converted to this attribute's type, or raise ValueError."""
        conv = getattr(self, "_to_" + self.type.lower())
        return conv(value)

    def _to_string(self, value: Any) -> str:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            shown = f"(a {type(value).__name__})" if self.secret else _fmt(value)
            raise ValueError(f"{self.name} {shown} is not a string")
        return str(value)

    _to_path = _to_string

    def _to_integer(self, value: Any) -> int:
        if isinstance(value, bool):
            raise ValueError(f"{self.name} {value} is not an integer")
        if isinstance(value, int):
            n = value
        elif isinstance(value, float) and value.is_integer():
            n = int(value)
        else:
            text = str(value).strip()
            try:
                n = int(text, 10)
            except ValueError:
                raise ValueError(f"{self.name} {_fmt(value)} is not an integer") from None
        return self._check_range(n)

    def _to_float(self, value: Any) -> float:
        if isinstance(value, bool):
            raise ValueError(f"{self.name} {value} is not a number")
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name} {_fmt(value)} is not a number") from None
        if not math.isfinite(x):
            raise ValueError(f"{self.name} {_fmt(value)} is not a finite number")
        return self._check_range(x)

    def _check_range(self, n):
        if self.min is not None and n < self.min:
            raise ValueError(f"{self.name} {n} is below the minimum {self.min}")
        if self.max is not None and n > self.max:
            raise ValueError(f"{self.name} {n} is above the maximum {self.max}")
        return n

    def _to_boolean(self, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        text = str(value).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"{self.name} {_fmt(value)} is not a boolean (yes, no, true, false, 1, 0)")

    def _to_enum(self, value: Any) -> str:
        text = str(value).strip() if isinstance(value, str) else value
        if text in self.enum:
            return text
        if isinstance(text, str):
            for tag in self.enum:   # forgiving about case: 'Closest', 'default'
                if tag.lower() == text.lower():
                    return tag
        raise ValueError(f"{self.name} {_fmt(value)} is not one of {', '.join(self.enum)}")

    def _to_port(self, value: Any) -> str:
        if isinstance(value, bool):
            raise ValueError(f"{self.name} {value} is not a port")
        text = str(value).strip()
        text = PORT_NAMES.get(text.lower(), text)
        if text.isascii() and text.isdigit() and 0 <= int(text) <= 65535:
            return str(int(text))
        raise ValueError(
            f"{self.name} {_fmt(value)} is not a port number (0..65535), 'amqp' or 'amqps'"
        )

    def _to_properties(self, value: Any) -> dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise ValueError(f"{self.name} is not valid JSON: {e}") from None
            except RecursionError:  # json nests by recursion: '[[[[...' a thousand deep ends the stack
                raise ValueError(f"{self.name} is nested too deeply") from None
        if not isinstance(value, dict):
            raise ValueError(f"{self.name} must be a JSON map")
        for key in value:
            if not isinstance(key, str) or not key.isascii():
                raise ValueError(f"{self.name} key {_fmt(key)} must be an ASCII string")
            if key.startswith(RESERVED_PROPERTY_PREFIXES):
                prefixes = ", ".join(repr(p) for p in RESERVED_PROPERTY_PREFIXES)
                raise ValueError(f"{self.name} key {key!r} uses a reserved prefix ({prefixes})")
            if key in RESERVED_OPEN_PROPERTIES:
                raise ValueError(f"{self.name} key {key!r} is reserved for the router")
        return dict(value)

    def _to_map(self, value: Any) -> dict:
        """A map whose keys are strings (a vhost's groups): JSON text or a dict."""
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError as e:
                raise ValueError(f"{self.name} is not valid JSON: {e}") from None
            except RecursionError:
                raise ValueError(f"{self.name} is nested too deeply") from None
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise ValueError(f"{self.name} must be a map with string keys")
        return dict(value)

    def _to_logenable(self, value: Any) -> str:
        text = str(value).strip()
        parts = [p.strip().lower() for p in text.split(",")]
        if parts == ["none"]:
            return "none"
        for p in parts:
            if p.rstrip("+") not in LOG_LEVELS or p.count("+") > 1:
                raise ValueError(
                    f"{self.name} {_fmt(value)} is not 'none' or a comma list of levels "
                    f"({', '.join(LOG_LEVELS)}), each optionally followed by '+'"
                )
        return ",".join(parts)


@dataclass(frozen=True)
class EntityType:
    """One section / management entity type."""

    name: str                      # canonical section name, e.g. "linkRoute"
    long_name: str                 # management type, e.g. "org.apache.qpid.dispatch.router.config.linkRoute"
    attrs: dict[str, Attr]
    singleton: bool = False
    status: str = ACTIVE
    doc: str = ""
    aliases: dict[str, str] = field(default_factory=dict)   # legacy/dashed name -> canonical

    def resolve(self, key: str) -> str | None:
        """Canonical attribute name for *key* (camelCase, dashed or legacy), or None."""
        if key in self.attrs:
            return key
        key = camel_case(key)
        if key in self.attrs:
            return key
        return self.aliases.get(key)

    def known_names(self) -> list[str]:
        return list(self.attrs) + list(self.aliases)

    def __iter__(self) -> Iterator[Attr]:
        return iter(self.attrs.values())


def _entity(name: str, long_name: str, attrs: list[Attr], **kw) -> EntityType:
    table = {a.name: a for a in attrs}
    aliases = {legacy: a.name for a in attrs for legacy in a.legacy}
    return EntityType(name, SCHEMA_PREFIX + long_name, table, aliases=aliases, **kw)


def _name(doc: str = "Unique name of this entity; generated when absent.") -> Attr:
    return Attr("name", "string", doc=doc)


def _secs(name: str, default: int, legacy: str, doc: str, status: str = ACTIVE) -> Attr:
    return Attr(name, "integer", default, min=1, legacy=(legacy,), status=status, doc=doc)


_ROUTER = _entity("router", "router", [
    _name("Management name; defaults to the router id."),
    Attr("id", "string", legacy=("routerId", "containerName"),
         doc="Router identity, also the AMQP container-id. Default: the mode followed by a "
             "random discriminator. No whitespace or control characters."),
    Attr("mode", "enum", "standalone", enum=ROUTER_MODES,
         doc="standalone: no routing protocol; interior: joins a mesh of interior routers; "
             "edge: attaches to an interior router."),
    _secs("helloIntervalSeconds", P.HELLO_INTERVAL, "helloInterval", "Seconds between HELLOs to neighbours."),
    _secs("helloMaxAgeSeconds", P.HELLO_MAX_AGE, "helloMaxAge",
          "Seconds without a HELLO before a neighbour is lost."),
    _secs("raIntervalSeconds", P.RA_INTERVAL, "raInterval", "Seconds between router advertisements when stable."),
    _secs("raIntervalFluxSeconds", P.RA_INTERVAL_FLUX, "raIntervalFlux",
          "Seconds between router advertisements while the topology changes."),
    _secs("remoteLsMaxAgeSeconds", P.REMOTE_LS_MAX_AGE, "remoteLsMaxAge",
          "Seconds without an RA before a remote router's link state is dropped."),
    Attr("defaultDistribution", "enum", "balanced", enum=DISTRIBUTIONS,
         doc="Distribution for addresses that no address section matches."),
    Attr("workerThreads", "integer", 4, min=1, status=INERT,
         doc="Dispatch's thread count. tdrouterd runs one Trio event loop; accepted and ignored."),
    Attr("debugDumpFile", "path", legacy=("debugDump",), status=INERT, doc="Dispatch debug dump file."),
    Attr("saslConfigDir", "path", legacy=("saslConfigPath",),
         doc="Directory of the Cyrus-style SASL configuration <saslConfigName>.conf (mech_list, sasldb_path "
             "naming a users file made with tdpasswd)."),
    Attr("saslConfigName", "string", "qdrouterd", doc="SASL configuration name (the file <name>.conf)."),
    Attr("allowResumableLinkRoute", "boolean", True,
         doc="Route links with durable or expiring termini (no: such an attach is refused with "
             "qd:link-expiration)."),
    Attr("timestampsInUTC", "boolean", False, doc="Log timestamps in UTC instead of local time."),
    Attr("timestampFormat", "string", doc="strftime format for log timestamps (default: 2026-11-25 02:41:07,907)."),
    Attr("metadata", "string", doc="Free text describing this router; not interpreted."),
    Attr("allowUnsettledMulticast", "boolean", False, status=DEPRECATED,
         doc="Deprecated in Dispatch; unsettled multicast is always allowed."),
    Attr("mobileAddrMaxAge", "integer", status=DEPRECATED, doc="Deprecated in Dispatch; ignored."),
    Attr("maxBufferedBytes", "integer", DEFAULT_MAX_BUFFERED_BYTES, min=MIN_BUFFERED_BYTES, extension=True,
         doc="Bytes of messages the router may buffer in all; past it, reading stops from the connections "
             "whose messages it holds until the total falls to three quarters."),
    Attr("maxConnectionBufferedBytes", "integer", DEFAULT_MAX_CONNECTION_BUFFERED_BYTES, min=MIN_BUFFERED_BYTES,
         extension=True,
         doc="Bytes of one connection's messages the router may buffer before it stops reading from that "
             "connection (until half is left); also the limit on unsettled bytes sent to one connection."),
    Attr("stalledDeliveryTimeoutSeconds", "integer", int(DEFAULT_STALLED_DELIVERY_TIMEOUT_SECONDS), min=1,
         extension=True,
         doc="A multi-frame delivery that receives no bytes for this long is aborted: its link is detached "
             "with amqp:resource-limit-exceeded."),
], singleton=True, doc="The router itself. At most one; missing means all defaults.")


def _connection_attrs(kind: str) -> list[Attr]:
    """Attributes listeners and connectors share."""
    return [
        _name(f"Unique name; default '{kind}/<host>:<port>'. linkRoute/autoLink 'connection' "
              "refers to it."),
        Attr("port", "port", "5672", doc="Port number, or 'amqp' (5672) / 'amqps' (5671)."
             + (" 0 picks a free port (extension)." if kind == "listener" else "")),
        Attr("role", "enum", "normal", enum=CONNECTION_ROLES,
             doc="normal: clients; inter-router: another interior router; route-container: "
                 "a broker or other container for link routes and auto-links; edge: edge uplink."),
        Attr("cost", "integer", 1, min=1, doc="inter-router role only: cost of this connection."),
        Attr("sslProfile", "string", doc="Name of an sslProfile section: this connection runs over TLS."),
        Attr("saslMechanisms", "string", doc="Space separated SASL mechanisms (listener: offered; connector: "
             "used to log in)."),
        Attr("maxFrameSize", "integer", 16384, min=512, max=2**32 - 1,
             doc="Largest AMQP frame offered in OPEN."),
        Attr("maxSessions", "integer", 32768, min=0, max=65535,
             doc="Channel limit offered in OPEN (0 = default)."),
        Attr("maxSessionFrames", "integer", min=0, status=REFUSED,
             doc="Session incoming window in frames (only unset or 0: the AMQP engine's default window)."),
        Attr("idleTimeoutSeconds", "integer", 16, min=0,
             doc="Close the connection when nothing arrives for this long (0 = never)."),
        Attr("stripAnnotations", "enum", "both", enum=STRIP_ANNOTATIONS,
             doc="Remove router annotations on ingress, egress, both or neither "
                 "(inter-router connections always keep them)."),
        Attr("linkCapacity", "integer", 250, min=1,
             doc="Credit window (deliveries in flight) of links on this connection."),
        Attr("maxMessageSize", "integer", 0, min=0, extension=True,
             doc="Largest message (bytes) accepted from this connection's senders; 0 = no limit. "
                 "It is sent as the links' max-message-size; a larger message is rejected with "
                 "amqp:link:message-size-exceeded and its link detached with that condition."),
        Attr("messageLoggingComponents", "string", "none", legacy=("logMessage",), status=REFUSED,
             doc="Message fields to log (only 'none': messages are not logged)."),
        Attr("policyVhost", "string", status=ACTIVE if kind == "listener" else REFUSED,
             doc="Vhost policy for this listener's connections, whatever hostname their OPEN names."
             if kind == "listener" else "Policy vhost for this connection (outgoing connections are not "
             "policed: refused)."),
        Attr("openProperties", "properties",
             doc="JSON map sent in the connection's OPEN properties (keys the router owns are refused)."),
    ]


_LISTENER = _entity("listener", "listener", [
    Attr("host", "string", "", legacy=("addr",),
         doc="Address to listen on; empty listens on all local addresses."),
    *_connection_attrs("listener"),
    Attr("socketAddressFamily", "enum", enum=ADDRESS_FAMILIES, legacy=("protocolFamily",), status=REFUSED,
         doc="Force IPv4 or IPv6 (refused: write host as an address of the family, 0.0.0.0 or ::)."),
    Attr("authenticatePeer", "boolean", False,
         doc="No anonymous login; on a TLS listener a client certificate signed by caCertFile is required."),
    Attr("saslPlugin", "string", status=REFUSED, doc="Name of an authServicePlugin."),
    Attr("requireEncryption", "boolean", False, doc="Require an encrypted connection (TLS: the same as "
         "requireSsl)."),
    Attr("requireSsl", "boolean", False, doc="Refuse plaintext on a listener with an sslProfile."),
    Attr("trustedCertsFile", "path", legacy=("trustedCerts",), status=REFUSED,
         doc="PEM file of CAs accepted for client certificates."),
    Attr("initialHandshakeTimeoutSeconds", "integer", 0, min=0,
         doc="Disconnect a client that has not completed the AMQP and SASL handshake (its OPEN) "
             "within this many seconds of connecting (0 = no limit, Dispatch's default)."),
    Attr("multiTenant", "boolean", False, status=REFUSED, doc="Prefix addresses with the vhost."),
    Attr("failoverUrls", "string", legacy=("failoverList",),
         doc="Comma separated [amqp|amqps|ws|wss://]host[:port] URLs sent to clients in OPEN's "
             "failover-server-list property."),
    Attr("http", "boolean", False, doc="Serve HTTP instead of AMQP on this port: the web console, /metrics, "
         "/healthz and management as JSON (docs/console.md); HTTPS/WSS with an sslProfile."),
    Attr("websockets", "boolean", True, doc="Allow the WebSocket management endpoint /api/ws (http only)."),
    Attr("healthz", "boolean", True, doc="Serve /healthz (http only)."),
    Attr("metrics", "boolean", True, doc="Serve /metrics (http only)."),
    Attr("httpRootDir", "path", legacy=("httpRoot",),
         doc="Directory the console's files are served from (http only); default: the console in the package."),
], doc="Accept incoming AMQP connections.")

_CONNECTOR = _entity("connector", "connector", [
    Attr("host", "string", "127.0.0.1", legacy=("addr",), doc="Host name or IP literal to connect to."),
    *_connection_attrs("connector"),
    Attr("protocolFamily", "enum", enum=ADDRESS_FAMILIES, status=REFUSED,
         doc="Force IPv4 or IPv6 (refused: write host as an IPv4 or IPv6 address)."),
    Attr("allowRedirect", "boolean", False, status=REFUSED,
         doc="Follow a peer's redirect (only no: a connector reconnects to its own host and port; Dispatch's "
             "default is yes)."),
    Attr("verifyHostname", "boolean", True, legacy=("verifyHostName",),
         doc="Check the peer certificate's host name (TLS)."),
    Attr("saslUsername", "string", doc="SASL user name (PLAIN)."),
    Attr("saslPassword", "string", secret=True, doc="SASL password ('env:VAR', 'file:PATH', 'pass:TEXT' or text)."),
    Attr("retryDelaySeconds", "float", 1.0, min=0.001, extension=True,
         doc="Delay before the first reconnect attempt."),
    Attr("retryMultiplier", "float", 2.0, min=1.0, extension=True,
         doc="Each further delay is the previous one times this (1.0 = fixed delay)."),
    Attr("retryMaxDelaySeconds", "float", 60.0, min=0.001, extension=True,
         doc="Upper bound of the reconnect delay."),
    Attr("retryMaxAttempts", "integer", 0, min=0, extension=True,
         doc="Give up after this many failed attempts in a row (0 = never)."),
], doc="Make an outgoing AMQP connection and keep it up.")

_ADDRESS = _entity("address", "router.config.address", [
    _name("Unique name; default 'address/<n>' (n counts address sections from 0)."),
    Attr("prefix", "string", doc="Address prefix (matches the prefix and prefix/...); "
         "give exactly one of prefix or pattern."),
    Attr("pattern", "string", doc="Wildcard pattern: tokens split by '.' or '/', '*' one token, "
         "'#' zero or more."),
    Attr("distribution", "enum", enum=DISTRIBUTIONS,
         doc="Treatment; unset means the router's defaultDistribution."),
    Attr("waypoint", "boolean", False, doc="Route through a waypoint (egress phase 1)."),
    Attr("ingressPhase", "integer", min=0, max=9, doc="Override the ingress phase."),
    Attr("egressPhase", "integer", min=0, max=9, doc="Override the egress phase."),
    Attr("priority", "integer", min=0, max=9, doc="Priority for messages that carry none."),
    Attr("enableFallback", "boolean", False, legacy=("fallback",), status=REFUSED,
         doc="Redirect undeliverable messages to the fallback destination (only no: not implemented)."),
], doc="Message-routing treatment of an address space.")

_LINK_ROUTE = _entity("linkRoute", "router.config.linkRoute", [
    _name("Unique name; default 'linkRoute/<n>'."),
    Attr("prefix", "string", doc="Address prefix; exactly one of prefix or pattern."),
    Attr("pattern", "string", doc="Wildcard pattern; exactly one of prefix or pattern."),
    Attr("direction", "enum", required=True, enum=DIRECTIONS, legacy=("dir",),
         doc="in: client senders; out: client receivers."),
    Attr("containerId", "string", doc="Route to the container with this container-id (with connection: a connection matching either; with neither: only forwarded towards a router that has the container)."),
    Attr("connection", "string", doc="Route over the listener/connector with this name."),
    Attr("distribution", "enum", "linkBalanced", enum=("linkBalanced",),
         doc="Only linkBalanced."),
    Attr("addExternalPrefix", "string", doc="Prefix added to the address towards the container."),
    Attr("delExternalPrefix", "string", doc="Prefix removed from the address towards the container."),
], doc="Route link attaches to a container (broker).")

_AUTO_LINK = _entity("autoLink", "router.config.autoLink", [
    _name("Unique name; default 'autoLink/<n>'."),
    Attr("address", "string", required=True, legacy=("addr",), doc="Router-side address."),
    Attr("direction", "enum", required=True, enum=DIRECTIONS, legacy=("dir",),
         doc="in: container to router; out: router to container."),
    Attr("phase", "integer", min=0, max=9,
         doc="Address phase; default 0 for out, 1 for in, 0 for a fallback link."),
    Attr("containerId", "string", doc="Attach on the connection from this container-id (with connection: a connection matching either; with neither the auto-link never attaches, and a warning says so)."),
    Attr("connection", "string", doc="Attach on the listener/connector with this name."),
    Attr("externalAddress", "string", legacy=("externalAddr",),
         doc="Address on the remote container when it differs."),
    Attr("fallback", "boolean", False, status=REFUSED,
         doc="This link serves the address's fallback destination (only no: not implemented)."),
], doc="A link the router keeps attached to a container (broker queue).")

_LOG = _entity("log", "log", [
    _name("Default 'log/<module>'."),
    Attr("module", "enum", required=True, enum=LOG_MODULES, doc="Module; DEFAULT sets all modules."),
    Attr("enable", "logEnable", doc="'none' or levels like 'info+' or 'trace,warning+'; "
         "unset inherits DEFAULT."),
    Attr("includeTimestamp", "boolean", legacy=("timestamp",), doc="Prefix lines with a timestamp."),
    Attr("includeSource", "boolean", legacy=("source",), doc="Add the source file and line."),
    Attr("outputFile", "string", legacy=("output",), doc="'stderr', 'stdout', 'syslog' or a file (appended to)."),
], doc="Logging of one module.")

_SSL_PROFILE = _entity("sslProfile", "sslProfile", [
    Attr("name", "string", required=True, doc="Name that listeners/connectors refer to."),
    Attr("caCertFile", "path", legacy=("certDb",), doc="PEM file of trusted CAs."),
    Attr("certFile", "path", doc="PEM certificate of this end."),
    Attr("privateKeyFile", "path", legacy=("keyFile",), doc="PEM private key."),
    Attr("password", "string", secret=True, doc="Key password ('env:VAR', 'file:PATH', 'pass:TEXT' or text)."),
    Attr("passwordFile", "path", doc="File whose first line is the key password (deprecated in Dispatch; "
         "use 'password: file:')."),
    Attr("ciphers", "string", doc="OpenSSL cipher list."),
    Attr("protocols", "string", doc="Space separated TLS versions."),
    Attr("uidFormat", "string", doc="Certificate fields that make a SASL EXTERNAL user id (c s l o u n 1 2 5)."),
    Attr("uidNameMappingFile", "path", legacy=("displayNameFile",),
         doc="JSON object mapping such user ids to display names."),
], doc="TLS settings shared by listeners and connectors.")

_FLOW_RECORDS = _entity("flowRecords", "flowRecords", [
    _name("Unique name of this entity."),
    Attr("directory", "path", required=True, extension=True, doc="Directory for the record files."),
    Attr("sample", "float", 1.0, min=0.0, extension=True, doc="Fraction of messages recorded."),
    Attr("rotateMB", "float", 64.0, min=0.001, extension=True, doc="File size at which a new file is begun."),
], doc="Flow records for tdflow (tdrouterd extension).")

#: Dispatch's default for the policy entity's maxConnections.
DEFAULT_MAX_CONNECTIONS = 65535

_POLICY = _entity("policy", "policy", [
    _name("Unique name of this entity."),
    Attr("maxConnections", "integer", DEFAULT_MAX_CONNECTIONS, min=0,
         doc="Most connections accepted by all listeners together (0 = no limit); one more is answered "
             "with amqp:resource-limit-exceeded and closed."),
    Attr("maxMessageSize", "integer", 0, min=0,
         doc="Largest message (bytes) of a policed connection whose vhost and group set none (0 = no limit)."),
    Attr("enableVhostPolicy", "boolean", False,
         doc="Apply vhost policies to connections of normal and route-container listeners."),
    Attr("enableVhostNamePatterns", "boolean", False,
         doc="Vhost hostnames may be patterns ('*' one word, '#' any number; dot-separated)."),
    Attr("policyDir", "path", doc="Directory of JSON vhost policy files (*.json) read at start-up."),
    Attr("defaultVhost", "string", "$default",
         doc="Vhost applied to connections whose hostname matches no vhost ('' = none: refuse them)."),
], doc="Router-wide connection limits and vhost policy (router/policy.py).")

_VHOST = _entity("vhost", "vhost", [
    _name("Unique name of this entity; the hostname when absent."),
    Attr("hostname", "string", required=True, legacy=("id",),
         doc="The AMQP OPEN hostname this vhost applies to (a pattern with enableVhostNamePatterns), or "
             "the policy's defaultVhost."),
    Attr("maxConnections", "integer", 65535, min=0, doc="Most connections to this vhost."),
    Attr("maxMessageSize", "integer", 0, min=0, doc="Largest message (bytes) for groups that set none."),
    Attr("maxConnectionsPerUser", "integer", 65535, min=0, doc="Most connections of one user."),
    Attr("maxConnectionsPerHost", "integer", 65535, min=0, doc="Most connections from one remote host."),
    Attr("allowUnknownUser", "boolean", False, doc="Users in no group get the $default group."),
    Attr("groups", "map", {}, doc="Group name -> settings (users, remoteHosts, sources, targets, limits)."),
], doc="A vhost policy: connection limits and user groups (router/policy.py).")

#: canonical section name -> entity type, in the order sections are documented
ENTITY_TYPES: dict[str, EntityType] = {
    e.name: e for e in (_ROUTER, _LISTENER, _CONNECTOR, _ADDRESS, _LINK_ROUTE, _AUTO_LINK,
                        _LOG, _FLOW_RECORDS, _SSL_PROFILE, _POLICY, _VHOST)
}

#: other spellings of section / entity type names -> canonical name
TYPE_ALIASES: dict[str, str] = {
    "container": "router",   # Dispatch's deprecated 'container' entity, merged into 'router'
    "router.config.address": "address",
    "router.config.linkRoute": "linkRoute",
    "router.config.autoLink": "autoLink",
    **{e.long_name: e.name for e in ENTITY_TYPES.values()},
    SCHEMA_PREFIX + "container": "router",
}

#: Dispatch sections that tdrouterd does not implement (named in the error message)
UNSUPPORTED_SECTIONS = (
    "exchange", "binding", "tcpListener",
    "tcpConnector", "httpListener", "httpConnector", "console", "fixedAddress",
    "waypoint", "linkRoutePattern",
)

#: attributes whose values are secrets: never shown in management results, reprs, logs or error messages
SECRET_ATTRIBUTES = frozenset(a.name for e in ENTITY_TYPES.values() for a in e if a.secret)

#: attributes whose value may be a multi-line JSON block in the config file
JSON_ATTRIBUTES = frozenset(a.name for e in ENTITY_TYPES.values() for a in e if a.type in ("properties", "map"))

#: map attributes that may also be written in Dispatch's block form (``name: value`` lines, nested blocks)
BLOCK_ATTRIBUTES = frozenset(a.name for e in ENTITY_TYPES.values() for a in e if a.type == "map")


def entity_type(name: str) -> EntityType | None:
    """The EntityType for a section or management type name (any accepted spelling)."""
    if name in ENTITY_TYPES:
        return ENTITY_TYPES[name]
    canon = TYPE_ALIASES.get(name)
    if canon is None:
        canon = TYPE_ALIASES.get(camel_case(name), camel_case(name))
    return ENTITY_TYPES.get(canon)


# ---------------------------------------------------------------------------
# Security settings that are not enforced yet (issue 12)
# ---------------------------------------------------------------------------
# A setting that means "secure" and is accepted but ignored leaves the operator believing in a protection
# that does not exist (a listener with requireSsl taking plaintext anonymous clients). So each one below is
# refused at start-up with FILE:LINE, and by management CREATE with 400, unless it is absent or has a value
# that means "off" (``no``/``false``). TLS and SASL settings are enforced by router/security.py.
# docs/configuration.md marks each attribute enforced or refused.

#: (section, attribute) -> (why it is refused, what to do instead). Refused unless absent or "off" (see
#: :func:`unenforced`). A legacy spelling (trustedCerts, displayNameFile) is refused alike.
UNENFORCED: dict[tuple[str, str], tuple[str, str]] = {
    ("listener", "trustedCertsFile"): ("a listener's trustedCertsFile is not read (Dispatch deprecated it)",
                                       "put the trusted CAs in the sslProfile's caCertFile"),
    ("listener", "saslPlugin"): ("authentication services (authServicePlugin) are not implemented",
                                 "remove it; use router saslConfigDir with a users file"),
    ("listener", "multiTenant"): ("per-vhost address prefixes are not implemented yet, so tenants would share "
                                  "one address space", "set multiTenant: no and run one router per tenant"),
    ("connector", "policyVhost"): ("vhost policy applies to connections the router accepts, not to those it "
                                   "makes", "remove it"),
}

#: Dispatch sections about security that tdrouterd does not enforce yet: refused wherever they appear.
UNENFORCED_SECTIONS: dict[str, tuple[str, str]] = {
    "authServicePlugin": ("authentication services are not implemented yet", "remove the section"),
}


# ---------------------------------------------------------------------------
# Other settings tdrouterd does not act on (issue 18)
# ---------------------------------------------------------------------------
# Dispatch settings whose default is what tdrouterd does anyway, but which it cannot do otherwise: the
# default (or an equivalent value) is accepted, anything else is refused at start-up with FILE:LINE, and
# by management CREATE with 400, saying what to write instead. docs/configuration.md says the same.

_SESSION_FRAMES = ("sessions keep the AMQP engine's default incoming window",
                   "remove it: linkCapacity bounds each link's deliveries in flight and router "
                   "maxConnectionBufferedBytes the bytes one connection may have buffered")
_MESSAGE_LOGGING = ("messages are not logged (a log line per message would cost every message)",
                    "remove it, or set it to none; a flowRecords section records every message's route for tdflow")
_FALLBACK = ("the router has no fallback destinations", "remove it, or set it to no")

#: (section, attribute) -> (values that are what tdrouterd does, why another is refused, what to do instead).
NOT_IMPLEMENTED: dict[tuple[str, str], tuple[tuple, str, str]] = {
    ("listener", "maxSessionFrames"): ((0,), *_SESSION_FRAMES),
    ("connector", "maxSessionFrames"): ((0,), *_SESSION_FRAMES),
    ("listener", "messageLoggingComponents"): (("none",), *_MESSAGE_LOGGING),
    ("connector", "messageLoggingComponents"): (("none",), *_MESSAGE_LOGGING),
    ("listener", "socketAddressFamily"): (
        (), "a listener listens on every address its host resolves to",
        "remove it and write host as an address of the family: 0.0.0.0 (IPv4) or :: (IPv6), or one interface's"),
    ("connector", "protocolFamily"): (
        (), "a connector tries every address its host resolves to",
        "remove it and write host as an IPv4 or IPv6 address"),
    ("connector", "allowRedirect"): (
        (False,), "a connector does not follow a peer's redirect (amqp:connection:redirect): it reconnects to its "
                  "own host and port", "remove it, or set it to no"),
    ("address", "enableFallback"): ((False,), *_FALLBACK),
    ("autoLink", "fallback"): ((False,), *_FALLBACK),
}


def not_implemented(section: str, attr: str, value: Any) -> str | None:
    """``"<attr> <value> is not implemented: <why>; <instead>"`` when *value* (given explicitly for *attr*
    of a *section*) asks for something tdrouterd does not do; None when it is allowed."""
    entry = NOT_IMPLEMENTED.get((section, attr))
    if entry is None or value is None:
        return None
    accepted, why, instead = entry
    if any(value == ok and type(value) is type(ok) for ok in accepted):
        return None
    shown = f" {_fmt(value)}" if isinstance(value, (str, int, float)) else ""
    if isinstance(value, bool):
        shown = " yes" if value else " no"
    return f"{attr}{shown} is not implemented: {why}; {instead}"


def mechanisms(value: str | None) -> list[str]:
    """A ``saslMechanisms`` value as a list of upper-case mechanism names (space or comma separated)."""
    return (value or "").replace(",", " ").upper().split()


def unenforced(section: str, attr: str, value: Any) -> str | None:
    """``"<attr> is not enforced yet: <why>; <instead>"`` when *value* (given explicitly for *attr* of a
    *section*) turns on a security setting tdrouterd does not enforce, the :func:`not_implemented` refusal
    when it asks for something else tdrouterd does not do; None when it is allowed."""
    refusal = UNENFORCED.get((section, attr))
    if refusal is None:
        return not_implemented(section, attr, value)
    if value is None or value is False:
        return None
    why, instead = refusal
    return f"{attr} is not enforced yet: {why}; {instead}"


def unenforced_section(name: str) -> str | None:
    """The refusal for a whole section (``vhost``, ``authServicePlugin``), or None."""
    canon = TYPE_ALIASES.get(name, name)
    refusal = UNENFORCED_SECTIONS.get(canon) or UNENFORCED_SECTIONS.get(camel_case(name))
    if refusal is None:
        return None
    why, instead = refusal
    return f"section '{name}' is not enforced yet: {why}; {instead}"
