"""Artemis core federation, configuration side: ``<connectors>``, ``<discovery-groups>``,
``<broadcast-groups>`` and ``<federations>`` of broker.xml's ``<core>``.

The vocabulary and defaults are Artemis' (user manual ``federation.adoc``, ``federation-address.adoc``,
``federation-queue.adoc``, ``clusters.adoc`` for broadcast and discovery groups,
``configuring-transports.adoc`` for connectors; the code defaults of ``FederationConnectionConfiguration``,
``FederationAddressPolicyConfiguration`` and ``FederationQueuePolicyConfiguration`` in artemis-server), so
the manual's sample blocks parse once host, port and the transformer's class name are changed. Users read
``docs/federation.md``.

What is parsed is checked completely (names, references, values: FILE:LINE errors). What the federation
runtime does not enforce yet is refused at start-up, at the line that asks for it, unless its key is in
:data:`RUNTIME_SUPPORTS` (:data:`FEATURES` lists the keys): accepting such a setting and ignoring it would
promise a behaviour that does not happen.

broker/config.py hands the four ``<core>`` children to :func:`parse_core_elements`, which parses the
connectors first so that references can be checked wherever the elements stand in the file.

The module is longer than most: it holds one vocabulary (connectors, discovery and broadcast groups,
federations with their streams, policies, policy sets and transformers) whose objects, tables and
cross-reference checks are read together.
"""

from __future__ import annotations

import ipaddress
import urllib.parse
from dataclasses import dataclass, field

from wire.sasl import is_loopback

from . import xmlschema as xs
from .configmodel import ANY_WORDS, DELIMITER, SINGLE_WORD, artemis_match
from .credentials import Credentials, CredentialsError
from .security import uri_tls
from .transformers import TransformerConfig, load_transformer
from .xmlschema import BrokerConfigError, Ctx, children, did_you_mean, local

#: The <core> children this module handles (broker/config.py dispatches them here).
CORE_ELEMENTS = ("connectors", "discovery-groups", "broadcast-groups", "federations")

#: What the federation runtime enforces today; the runtime's author edits this set. Every other key of
#: FEATURES that a configuration uses is refused at start-up with "FILE:LINE: <what> is parsed but not
#: implemented yet".
RUNTIME_SUPPORTS = {"address-policy", "queue-policy", "downstream", "transformer", "enable-divert-bindings",
                    "discovery-group", "broadcast-group", "circuit-breaker-timeout", "connection-ttl", "ha",
                    "share-connection", "check-period", "call-timeout", "call-failover-timeout"}

#: Feature key -> what the refusal calls it.
FEATURES = {
    "address-policy": "<address-policy> (address federation)",
    "queue-policy": "<queue-policy> (queue federation)",
    "downstream": "<downstream>",
    "discovery-group": "<discovery-group-ref> (connectors found by UDP discovery)",
    "broadcast-group": "<broadcast-group> (announcing connectors by UDP)",
    "transformer": "a federation transformer",
    "enable-divert-bindings": "enable-divert-bindings=\"true\"",
    "ha": "<ha>true",
    "share-connection": "<share-connection>true on an upstream and a downstream to the same broker (a shared connection)",
    "circuit-breaker-timeout": "<circuit-breaker-timeout>",
    "check-period": "<check-period>",
    "connection-ttl": "<connection-ttl>",
    "call-timeout": "<call-timeout>",
    "call-failover-timeout": "<call-failover-timeout>",
}

# --- defaults (Artemis' documented or code defaults) ---------------------------------------------------------------

#: FederationConnectionConfiguration.DEFAULT_CIRCUIT_BREAKER_TIMEOUT.
DEFAULT_CIRCUIT_BREAKER_TIMEOUT_MS = 30000
#: federation-address.adoc, "Upstream parameters".
DEFAULT_CHECK_PERIOD_MS = 30000
DEFAULT_CONNECTION_TTL_MS = 60000
DEFAULT_CALL_TIMEOUT_MS = 30000
DEFAULT_CALL_FAILOVER_TIMEOUT_MS = -1
DEFAULT_RETRY_INTERVAL_MS = 500
DEFAULT_RETRY_INTERVAL_MULTIPLIER = 1.0
DEFAULT_MAX_RETRY_INTERVAL_MS = 2000
DEFAULT_INITIAL_CONNECT_ATTEMPTS = -1
DEFAULT_RECONNECT_ATTEMPTS = -1
#: FederationAddressPolicyConfiguration: maxHops is an int field, 0 when the attribute is absent.
DEFAULT_MAX_HOPS = 0
#: FederatedQueue: a remote consumer's priority is the local one's plus this when the policy sets none.
DEFAULT_PRIORITY_ADJUSTMENT = -1
#: clusters.adoc: broadcast-period 2000 ms, refresh-timeout 10000 ms; the client-side initialWaitTimeout
#: 10000 ms; local-bind-port -1 (any).
DEFAULT_BROADCAST_PERIOD_MS = 2000
DEFAULT_REFRESH_TIMEOUT_MS = 10000
DEFAULT_INITIAL_WAIT_TIMEOUT_MS = 10000
DEFAULT_LOCAL_BIND_PORT = -1

#: Stream child element -> (Stream field, value kind, feature key when setting it needs the runtime to act).
STREAM_SETTINGS = {
    "ha": ("ha", "bool", "ha"),
    "circuit-breaker-timeout": ("circuit_breaker_timeout_ms", "long", "circuit-breaker-timeout"),
    "share-connection": ("share_connection", "bool", "share-connection"),
    "check-period": ("check_period_ms", "long", "check-period"),
    "connection-ttl": ("connection_ttl_ms", "long", "connection-ttl"),
    "call-timeout": ("call_timeout_ms", "long", "call-timeout"),
    "call-failover-timeout": ("call_failover_timeout_ms", "long", "call-failover-timeout"),
    "retry-interval": ("retry_interval_ms", "long", None),
    "retry-interval-multiplier": ("retry_interval_multiplier", "float", None),
    "max-retry-interval": ("max_retry_interval_ms", "long", None),
    "initial-connect-attempts": ("initial_connect_attempts", "int", None),
    "reconnect-attempts": ("reconnect_attempts", "int", None),
}
#: Least value of each numeric stream setting (-1 means "none"/"forever" where Artemis allows it).
_STREAM_MINIMUM = {
    "circuit_breaker_timeout_ms": 0, "check_period_ms": -1, "connection_ttl_ms": -1, "call_timeout_ms": 0,
    "call_failover_timeout_ms": -1, "retry_interval_ms": 0, "max_retry_interval_ms": 0,
    "initial_connect_attempts": -1, "reconnect_attempts": -1,
}
STREAM_ATTRS = ("name", "user", "password")
FEDERATION_ATTRS = ("name", "user", "password")
ADDRESS_POLICY_ATTRS = ("name", "max-hops", "auto-delete", "auto-delete-delay", "auto-delete-message-count",
                        "transformer-ref", "enable-divert-bindings")
QUEUE_POLICY_ATTRS = ("name", "include-federated", "priority-adjustment", "transformer-ref")
FEDERATION_CHILDREN = ("upstream", "downstream", "policy-set", "address-policy", "queue-policy", "transformer")


# --- the configuration objects ------------------------------------------------------------------------------------

@dataclass
class Connector:
    """One ``<connector name>tcp://host:port?...</connector>``: where a federation stream connects.

    ``tls`` is a wire.tls.ClientTls from Artemis' TLS parameters (sslEnabled=true ...), None for plaintext;
    ``params`` holds the URI's other parameters, which a stream may not use (refused when referenced)."""

    name: str
    host: str
    port: int
    tls: object | None = None
    line: int = 0
    params: dict = field(default_factory=dict)


@dataclass
class DiscoveryGroup:
    """One ``<discovery-group name>``: the UDP multicast group where connectors are announced."""

    name: str
    group_address: str
    group_port: int
    refresh_timeout_ms: int = DEFAULT_REFRESH_TIMEOUT_MS
    line: int = 0
    local_bind_address: str | None = None
    local_bind_port: int = DEFAULT_LOCAL_BIND_PORT
    initial_wait_timeout_ms: int = DEFAULT_INITIAL_WAIT_TIMEOUT_MS


@dataclass
class BroadcastGroup:
    """One ``<broadcast-group name>``: announces ``connector_refs`` on a UDP multicast group."""

    name: str
    group_address: str
    group_port: int
    broadcast_period_ms: int = DEFAULT_BROADCAST_PERIOD_MS
    connector_refs: list[str] = field(default_factory=list)
    line: int = 0
    local_bind_address: str | None = None
    local_bind_port: int = DEFAULT_LOCAL_BIND_PORT


@dataclass
class Stream:
    """One ``<upstream>`` or ``<downstream>`` of a federation. ``user``/``password`` are resolved: the
    stream's own, else the federation's; a user without a password takes it from the credentials store
    (broker/credentials.py)."""

    kind: str                 # "upstream" | "downstream"
    name: str
    user: str | None
    password: str | None = field(repr=False)
    static_connectors: list[str] = field(default_factory=list)
    discovery_group: str | None = None
    ha: bool = False
    circuit_breaker_timeout_ms: int = DEFAULT_CIRCUIT_BREAKER_TIMEOUT_MS
    share_connection: bool = False
    check_period_ms: int = DEFAULT_CHECK_PERIOD_MS
    connection_ttl_ms: int = DEFAULT_CONNECTION_TTL_MS
    call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS
    call_failover_timeout_ms: int = DEFAULT_CALL_FAILOVER_TIMEOUT_MS
    retry_interval_ms: int = DEFAULT_RETRY_INTERVAL_MS
    retry_interval_multiplier: float = DEFAULT_RETRY_INTERVAL_MULTIPLIER
    max_retry_interval_ms: int = DEFAULT_MAX_RETRY_INTERVAL_MS
    initial_connect_attempts: int = DEFAULT_INITIAL_CONNECT_ATTEMPTS
    reconnect_attempts: int = DEFAULT_RECONNECT_ATTEMPTS
    policy_refs: list[str] = field(default_factory=list)
    upstream_connector_ref: str | None = None   # downstream only: how the remote broker connects back
    line: int = 0


def _matches(includes, excludes, test) -> bool:
    """Artemis' rule: an exclude that matches wins; no includes means everything; else any include."""
    if any(test(m) for m in excludes):
        return False
    return not includes or any(test(m) for m in includes)


@dataclass
class AddressPolicy:
    """One ``<address-policy>``: which multicast addresses are federated, and how."""

    name: str
    max_hops: int = DEFAULT_MAX_HOPS
    auto_delete: bool | None = None               # None: the runtime's default (Artemis: true)
    auto_delete_delay_ms: int | None = None
    auto_delete_message_count: int | None = None
    transformer_ref: str | None = None
    enable_divert_bindings: bool = False
    includes: list[str] = field(default_factory=list)
    excludes: list[str] = field(default_factory=list)
    line: int = 0

    def matches(self, address: str) -> bool:
        """Whether ``address`` is federated by this policy (Artemis wildcards '#' and '*')."""
        return _matches(self.includes, self.excludes, lambda pattern: artemis_match(pattern, address))


@dataclass
class QueuePolicy:
    """One ``<queue-policy>``: which queues pull from the same queue upstream when their consumers idle."""

    name: str
    include_federated: bool = False
    priority_adjustment: int = DEFAULT_PRIORITY_ADJUSTMENT
    transformer_ref: str | None = None
    includes: list[tuple[str, str]] = field(default_factory=list)   # (queue_match, address_match)
    excludes: list[tuple[str, str]] = field(default_factory=list)
    line: int = 0

    def matches(self, queue: str, address: str) -> bool:
        """Whether the queue ``queue`` bound to ``address`` is federated by this policy."""
        return _matches(self.includes, self.excludes,
                        lambda m: artemis_match(m[0], queue) and artemis_match(m[1], address))


@dataclass
class Federation:
    """One ``<federation name>``: its streams, policies, policy sets and transformers."""

    name: str
    user: str | None
    password: str | None = field(repr=False)
    upstreams: list[Stream] = field(default_factory=list)
    downstreams: list[Stream] = field(default_factory=list)
    address_policies: dict[str, AddressPolicy] = field(default_factory=dict)
    queue_policies: dict[str, QueuePolicy] = field(default_factory=dict)
    policy_sets: dict[str, list[str]] = field(default_factory=dict)
    transformers: dict[str, TransformerConfig] = field(default_factory=dict)
    line: int = 0

    def policies_for(self, stream: Stream) -> tuple[list[AddressPolicy], list[QueuePolicy]]:
        """The address and queue policies ``stream`` applies, policy sets expanded, each once, in order."""
        names: list[str] = []
        for ref in stream.policy_refs:
            self._expand(ref, names, ())
        return ([self.address_policies[n] for n in names if n in self.address_policies],
                [self.queue_policies[n] for n in names if n in self.queue_policies])

    def _expand(self, ref: str, out: list[str], path: tuple) -> None:
        if ref in path:
            raise ValueError(f"policy-set {ref!r} contains itself ({' -> '.join(path + (ref,))})")
        if ref in self.policy_sets:
            for inner in self.policy_sets[ref]:
                self._expand(inner, out, path + (ref,))
        elif ref in self.address_policies or ref in self.queue_policies:
            if ref not in out:
                out.append(ref)
        else:
            known = list(self.address_policies) + list(self.queue_policies) + list(self.policy_sets)
            hint = did_you_mean(ref, known).replace("<", "").replace(">", "")
            raise ValueError(f"no address-policy, queue-policy or policy-set named {ref!r} in federation "
                             f"{self.name!r}{hint}")


# --- helpers ------------------------------------------------------------------------------------------------------

def _unknown(ctx: Ctx, elem, parent: str, choices) -> BrokerConfigError:
    return ctx.error(elem, f"unknown element <{local(elem)}> in <{parent}>{did_you_mean(local(elem), choices)}")


def _once(ctx: Ctx, seen: dict, name: str, elem) -> None:
    if name in seen:
        raise ctx.error(elem, f"duplicate <{name}> (first at line {seen[name]})")
    seen[name] = elem.line


def _unique(ctx: Ctx, seen: dict, what: str, name: str, elem) -> None:
    if name in seen:
        raise ctx.error(elem, f"duplicate {what} name {name!r} (first at line {seen[name]})")
    seen[name] = elem.line


def _no_children(ctx: Ctx, elem) -> None:
    for name, child in children(ctx, elem):
        raise _unknown(ctx, child, local(elem), [])


def _value(ctx: Ctx, elem, kind: str):
    if kind == "float":
        raw = ctx.text(elem)
        try:
            return float(raw)
        except ValueError:
            raise ctx.error(elem, f"<{local(elem)}> must be a number, got {raw!r}") from None
    return ctx.value(elem, kind)


def _check_pattern(ctx: Ctx, elem, what: str, pattern: str) -> str:
    if not pattern:
        raise ctx.error(elem, f"{what} must not be empty")
    for word in pattern.split(DELIMITER):
        if word not in (ANY_WORDS, SINGLE_WORD) and (ANY_WORDS in word or SINGLE_WORD in word):
            raise ctx.error(elem, f"{what} {pattern!r}: '#' and '*' must stand for a whole word between "
                                  f"'{DELIMITER}' separators")
    return pattern


def _multicast_group(ctx: Ctx, elem) -> str:
    raw = ctx.text(elem)
    try:
        addr = ipaddress.ip_address(raw)
    except ValueError:
        raise ctx.error(elem, f"<group-address> must be a multicast IP address, got {raw!r}") from None
    if not addr.is_multicast:
        raise ctx.error(elem, f"<group-address> {raw} is not a multicast address (224.0.0.0/4 or ff00::/8)")
    return raw


def _port(ctx: Ctx, elem, *, allow_any: bool = False) -> int:
    port = ctx.value(elem, "int")
    if not (allow_any and port == -1) and not 0 < port <= xs.MAX_PORT:
        raise ctx.error(elem, f"<{local(elem)}> must be a port number 1-{xs.MAX_PORT}"
                              f"{' or -1 (any)' if allow_any else ''}, got {port}")
    return port


# --- <connectors> -------------------------------------------------------------------------------------------------

def parse_connectors(ctx: Ctx, elem) -> dict[str, Connector]:
    """``<connectors>``: name -> :class:`Connector`. Only ``tcp://`` connectors can be used (tdbroker
    speaks AMQP over TCP); another scheme (``vm://`` ...) is skipped with a warning, and a stream that
    references it gets an error."""
    out: dict[str, Connector] = {}
    lines: dict[str, int] = {}
    for name, el in children(ctx, elem):
        if name != "connector":
            raise _unknown(ctx, el, "connectors", ["connector"])
        ctx.check_attrs(el, ("name",))
        cname = ctx.attr(el, "name", required=True)
        _unique(ctx, lines, "connector", cname, el)
        _no_children(ctx, el)
        uri = ctx.text(el)
        try:
            parts = urllib.parse.urlsplit(uri)
            port = parts.port
        except ValueError as exc:
            raise ctx.error(el, f"connector {cname!r}: {uri!r} is not a valid URI: {exc}") from None
        if parts.scheme != "tcp":
            ctx.warn(el, f"connector {cname!r} ({parts.scheme or 'no'} scheme) is skipped: tdbroker connects "
                         "with tcp:// only")
            continue
        if parts.path not in ("", "/"):
            raise ctx.error(el, f"connector {cname!r}: {uri!r} has an unexpected path {parts.path!r}")
        params: dict[str, str] = {}
        for item in filter(None, parts.query.replace("&", ";").split(";")):
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise ctx.error(el, f"connector {cname!r}: query parameter {item!r} is not key=value")
            params[key] = urllib.parse.unquote(value)
        tls = uri_tls(ctx, el, f"connector {cname!r}", params, server=False)
        out[cname] = Connector(cname, parts.hostname or xs.DEFAULT_ACCEPTOR_HOST,
                               xs.DEFAULT_ACCEPTOR_PORT if port is None else port, tls, el.line, params)
    return out


# --- <discovery-groups> and <broadcast-groups> (clusters.adoc) -----------------------------------------------------

_JGROUPS = ("jgroups-file", "jgroups-channel")


def _group_common(ctx: Ctx, name: str, el, values: dict, seen: dict, where: str) -> bool:
    """The UDP elements both group kinds share; True when ``name`` was one of them."""
    if name in _JGROUPS:
        raise ctx.error(el, f"<{name}>: JGroups is not supported by tdbroker; use the UDP elements "
                            "(group-address, group-port)")
    if name == "local-bind-address":
        _once(ctx, seen, name, el)
        values["local_bind_address"] = ctx.text(el)
    elif name == "local-bind-port":
        _once(ctx, seen, name, el)
        values["local_bind_port"] = _port(ctx, el, allow_any=True)
    elif name == "group-address":
        _once(ctx, seen, name, el)
        values["group_address"] = _multicast_group(ctx, el)
    elif name == "group-port":
        _once(ctx, seen, name, el)
        values["group_port"] = _port(ctx, el)
    else:
        return False
    return True


def _positive_ms(ctx: Ctx, el) -> int:
    value = ctx.value(el, "long")
    if value <= 0:
        raise ctx.error(el, f"<{local(el)}> must be a positive number of ms, got {value}")
    return value


def _need_group(ctx: Ctx, el, kind: str, gname: str, values: dict) -> None:
    for key, elname in (("group_address", "group-address"), ("group_port", "group-port")):
        if key not in values:
            raise ctx.error(el, f"<{kind} name=\"{gname}\"> needs <{elname}>")


def parse_discovery_groups(ctx: Ctx, elem) -> dict[str, DiscoveryGroup]:
    """``<discovery-groups>``: name -> :class:`DiscoveryGroup`."""
    out: dict[str, DiscoveryGroup] = {}
    lines: dict[str, int] = {}
    choices = ("local-bind-address", "local-bind-port", "group-address", "group-port", "refresh-timeout",
               "initial-wait-timeout")
    for name, el in children(ctx, elem):
        if name != "discovery-group":
            raise _unknown(ctx, el, "discovery-groups", ["discovery-group"])
        ctx.check_attrs(el, ("name",))
        gname = ctx.attr(el, "name", required=True)
        _unique(ctx, lines, "discovery-group", gname, el)
        values: dict = {}
        seen: dict[str, int] = {}
        for cname, child in children(ctx, el):
            if _group_common(ctx, cname, child, values, seen, "discovery-group"):
                continue
            if cname == "refresh-timeout":
                _once(ctx, seen, cname, child)
                values["refresh_timeout_ms"] = _positive_ms(ctx, child)
            elif cname == "initial-wait-timeout":
                _once(ctx, seen, cname, child)
                values["initial_wait_timeout_ms"] = _positive_ms(ctx, child)
            else:
                raise _unknown(ctx, child, "discovery-group", choices)
        _need_group(ctx, el, "discovery-group", gname, values)
        out[gname] = DiscoveryGroup(name=gname, line=el.line, **values)
    return out


def parse_broadcast_groups(ctx: Ctx, elem) -> dict[str, BroadcastGroup]:
    """``<broadcast-groups>``: name -> :class:`BroadcastGroup` (connector references are checked by
    :func:`parse_core_elements`, which knows the connectors)."""
    out: dict[str, BroadcastGroup] = {}
    lines: dict[str, int] = {}
    choices = ("local-bind-address", "local-bind-port", "group-address", "group-port", "broadcast-period",
               "connector-ref")
    for name, el in children(ctx, elem):
        if name != "broadcast-group":
            raise _unknown(ctx, el, "broadcast-groups", ["broadcast-group"])
        ctx.check_attrs(el, ("name",))
        gname = ctx.attr(el, "name", required=True)
        _unique(ctx, lines, "broadcast-group", gname, el)
        values: dict = {"connector_refs": []}
        seen: dict[str, int] = {}
        for cname, child in children(ctx, el):
            if _group_common(ctx, cname, child, values, seen, "broadcast-group"):
                continue
            if cname == "broadcast-period":
                _once(ctx, seen, cname, child)
                values["broadcast_period_ms"] = _positive_ms(ctx, child)
            elif cname == "connector-ref":
                values["connector_refs"].append(ctx.text(child))
            else:
                raise _unknown(ctx, child, "broadcast-group", choices)
        _need_group(ctx, el, "broadcast-group", gname, values)
        if not values["connector_refs"]:
            raise ctx.error(el, f"<broadcast-group name=\"{gname}\"> needs a <connector-ref> to announce")
        out[gname] = BroadcastGroup(name=gname, line=el.line, **values)
    return out


# --- <federations> ------------------------------------------------------------------------------------------------

class _Uses:
    """The first line at which each FEATURES key is used (the start-up refusal names it)."""

    def __init__(self) -> None:
        self.lines: dict[str, int] = {}

    def add(self, key: str, line: int) -> None:
        self.lines.setdefault(key, line)


def refuse_unsupported(ctx: Ctx, uses: dict[str, int]) -> None:
    """FILE:LINE error for the first used feature (by line) that :data:`RUNTIME_SUPPORTS` lacks."""
    missing = sorted((line, key) for key, line in uses.items() if key not in RUNTIME_SUPPORTS)
    if missing:
        line, key = missing[0]
        raise ctx.error(line, f"{FEATURES[key]} is parsed but not implemented yet; remove it (implemented: "
                              f"{', '.join(sorted(RUNTIME_SUPPORTS)) or 'nothing'})")


def _login(ctx: Ctx, el, credentials: Credentials, what: str):
    try:
        return credentials.resolve(ctx.attr(el, "user"), ctx.attr(el, "password"), line=el.line, what=what,
                                   warn=lambda message: ctx.warn(el, message))
    except CredentialsError as exc:
        raise BrokerConfigError(exc.path, exc.line, exc.message) from None


def _connector_ref(ctx: Ctx, el, connectors: dict, what: str) -> str:
    ref = ctx.text(el)
    if ref not in connectors:
        raise ctx.error(el, f"{what}: no <connector name=\"{ref}\"> in <connectors>"
                            f"{did_you_mean(ref, connectors)}")
    conn = connectors[ref]
    if conn.params:
        raise ctx.error(el, f"{what}: connector {ref!r} (line {conn.line}) has URI parameters tdbroker does not "
                            f"act on for federation: {', '.join(sorted(conn.params))}; remove them")
    return ref


def _parse_stream(ctx: Ctx, kind: str, el, fed_login, credentials: Credentials, connectors: dict,
                  discovery_groups: dict, uses: _Uses, policy_ref_lines: list) -> Stream:
    ctx.check_attrs(el, STREAM_ATTRS)
    sname = ctx.attr(el, "name", required=True)
    what = f"<{kind} name=\"{sname}\">"
    if el.attrib.get("user") is not None or el.attrib.get("password") is not None:
        login = _login(ctx, el, credentials, f"{kind} {sname!r}")
    else:
        login = fed_login
    values: dict = {}
    seen: dict[str, int] = {}
    static: list[str] = []
    discovery = None
    policy_refs: list[str] = []
    upstream_connector = None
    choices = (set(STREAM_SETTINGS) | {"static-connectors", "discovery-group-ref", "policy"}
               | ({"upstream-connector-ref"} if kind == "downstream" else set()))
    for name, child in children(ctx, el):
        if name in STREAM_SETTINGS:
            _once(ctx, seen, name, child)
            fld, vkind, feature = STREAM_SETTINGS[name]
            value = _value(ctx, child, vkind)
            minimum = _STREAM_MINIMUM.get(fld)
            if minimum is not None and value < minimum:
                raise ctx.error(child, f"<{name}> must be at least {minimum}, got {value}")
            if fld == "retry_interval_multiplier" and value <= 0:
                raise ctx.error(child, f"<{name}> must be positive, got {value}")
            if feature is not None and value is not False and feature != "share-connection":
                uses.add(feature, child.line)   # ha false is the default; share-connection: see _parse_federation
            values[fld] = value
        elif name == "static-connectors":
            _once(ctx, seen, name, child)
            for rname, ref in children(ctx, child):
                if rname != "connector-ref":
                    raise _unknown(ctx, ref, "static-connectors", ["connector-ref"])
                static.append(_connector_ref(ctx, ref, connectors, what))
            if not static:
                raise ctx.error(child, f"{what}: <static-connectors> needs at least one <connector-ref>")
        elif name == "discovery-group-ref":
            _once(ctx, seen, name, child)
            ctx.check_attrs(child, ("discovery-group-name",))
            _no_children(ctx, child)
            discovery = ctx.attr(child, "discovery-group-name", required=True)
            if discovery not in discovery_groups:
                raise ctx.error(child, f"{what}: no <discovery-group name=\"{discovery}\"> in "
                                       f"<discovery-groups>{did_you_mean(discovery, discovery_groups)}")
            uses.add("discovery-group", child.line)
        elif name == "policy":
            ctx.check_attrs(child, ("ref",))
            _no_children(ctx, child)
            ref = ctx.attr(child, "ref", required=True)
            policy_refs.append(ref)
            policy_ref_lines.append((ref, child.line))
        elif name == "upstream-connector-ref" and kind == "downstream":
            _once(ctx, seen, name, child)
            upstream_connector = _connector_ref(ctx, child, connectors, what + " upstream-connector-ref")
            if connectors[upstream_connector].tls is not None:
                # the command carries host and port only: the remote broker could not check our certificate
                raise ctx.error(child, f"{what} upstream-connector-ref {upstream_connector!r} uses TLS: the "
                                       "remote broker dials back in plain AMQP only (not implemented yet)")
        else:
            raise _unknown(ctx, child, kind, choices)
    if static and discovery:
        raise ctx.error(el, f"{what} has both <static-connectors> and <discovery-group-ref>; use one")
    if not static and not discovery:
        raise ctx.error(el, f"{what} needs <static-connectors> (with <connector-ref>) or <discovery-group-ref>")
    if not policy_refs:
        raise ctx.error(el, f"{what} has no <policy ref=\"...\">: it would federate nothing")
    if kind == "downstream":
        uses.add("downstream", el.line)
        if upstream_connector is None:
            raise ctx.error(el, f"{what} needs <upstream-connector-ref>: the connector the remote broker "
                                "uses to connect back")
    if login.user and not is_loopback_target(static, connectors):
        ctx.warn(el, f"{what} logs in as {login.user!r} without TLS to a remote host: a peer that offers only "
                     "PLAIN gets the password in clear; add sslEnabled=true to the connector")
    return Stream(kind=kind, name=sname, user=login.user, password=login.password, static_connectors=static,
                  discovery_group=discovery, policy_refs=policy_refs, upstream_connector_ref=upstream_connector,
                  line=el.line, **values)


def is_loopback_target(static: list[str], connectors: dict) -> bool:
    """True when every static connector uses TLS or stays on this host (a password is safe on it)."""
    return all(connectors[r].tls is not None or is_loopback(connectors[r].host) for r in static)


def _parse_matchers(ctx: Ctx, el, kind: str, attrs) -> tuple[list, list]:
    includes: list = []
    excludes: list = []
    for name, child in children(ctx, el):
        if name not in ("include", "exclude"):
            raise _unknown(ctx, child, kind, ["include", "exclude"])
        ctx.check_attrs(child, attrs)
        _no_children(ctx, child)
        if len(attrs) == 1:
            pattern = ctx.attr(child, attrs[0], required=True)
            entry = _check_pattern(ctx, child, f"<{name}> {attrs[0]}", pattern)
        else:
            got = [ctx.attr(child, a) for a in attrs]
            if all(g is None for g in got):
                raise ctx.error(child, f"<{name}> needs {' and/or '.join(a + '=...' for a in attrs)}")
            entry = tuple(_check_pattern(ctx, child, f"<{name}> {a}", g if g is not None else ANY_WORDS)
                          for a, g in zip(attrs, got))
        (includes if name == "include" else excludes).append(entry)
    return includes, excludes


def _parse_address_policy(ctx: Ctx, el, uses: _Uses) -> AddressPolicy:
    ctx.check_attrs(el, ADDRESS_POLICY_ATTRS)
    uses.add("address-policy", el.line)
    policy = AddressPolicy(
        name=ctx.attr(el, "name", required=True),
        max_hops=ctx.attr(el, "max-hops", "int", DEFAULT_MAX_HOPS),
        auto_delete=ctx.attr(el, "auto-delete", "bool"),
        auto_delete_delay_ms=ctx.attr(el, "auto-delete-delay", "long"),
        auto_delete_message_count=ctx.attr(el, "auto-delete-message-count", "long"),
        transformer_ref=ctx.attr(el, "transformer-ref"),
        enable_divert_bindings=ctx.attr(el, "enable-divert-bindings", "bool", False),
        line=el.line)
    if policy.max_hops < -1:
        raise ctx.error(el, f"max-hops must be -1 (no limit) or >= 0, got {policy.max_hops}")
    if policy.auto_delete_delay_ms is not None and policy.auto_delete_delay_ms < 0:
        raise ctx.error(el, f"auto-delete-delay must be >= 0 ms, got {policy.auto_delete_delay_ms}")
    if policy.auto_delete_message_count is not None and policy.auto_delete_message_count < -1:
        raise ctx.error(el, "auto-delete-message-count must be -1 (any) or >= 0, got "
                            f"{policy.auto_delete_message_count}")
    if policy.enable_divert_bindings:
        uses.add("enable-divert-bindings", el.line)
    policy.includes, policy.excludes = _parse_matchers(ctx, el, "address-policy", ("address-match",))
    return policy


def _parse_queue_policy(ctx: Ctx, el, uses: _Uses) -> QueuePolicy:
    ctx.check_attrs(el, QUEUE_POLICY_ATTRS)
    uses.add("queue-policy", el.line)
    policy = QueuePolicy(
        name=ctx.attr(el, "name", required=True),
        include_federated=ctx.attr(el, "include-federated", "bool", False),
        priority_adjustment=ctx.attr(el, "priority-adjustment", "int", DEFAULT_PRIORITY_ADJUSTMENT),
        transformer_ref=ctx.attr(el, "transformer-ref"),
        line=el.line)
    policy.includes, policy.excludes = _parse_matchers(ctx, el, "queue-policy", ("queue-match", "address-match"))
    return policy


def _parse_transformer(ctx: Ctx, el) -> TransformerConfig:
    ctx.check_attrs(el, ("name",))
    tname = ctx.attr(el, "name", required=True)
    class_name = None
    properties: dict[str, str] = {}
    seen: dict[str, int] = {}
    for name, child in children(ctx, el):
        if name == "class-name":
            _once(ctx, seen, name, child)
            class_name = ctx.text(child)
        elif name == "property":
            ctx.check_attrs(child, ("key", "value"))
            key = ctx.attr(child, "key", required=True)
            if key in properties:
                raise ctx.error(child, f"transformer {tname!r}: duplicate property {key!r}")
            properties[key] = ctx.attr(child, "value", default="")
        else:
            raise _unknown(ctx, child, "transformer", ["class-name", "property"])
    if class_name is None:
        raise ctx.error(el, f"<transformer name=\"{tname}\"> needs <class-name>package.module:Class</class-name>")
    return TransformerConfig(tname, class_name, properties, el.line)


def _parse_policy_set(ctx: Ctx, el, ref_lines: list) -> list[str]:
    ctx.check_attrs(el, ("name",))
    refs: list[str] = []
    for name, child in children(ctx, el):
        if name != "policy":
            raise _unknown(ctx, child, "policy-set", ["policy"])
        ctx.check_attrs(child, ("ref",))
        _no_children(ctx, child)
        ref = ctx.attr(child, "ref", required=True)
        refs.append(ref)
        ref_lines.append((ref, child.line))
    return refs


def _parse_federation(ctx: Ctx, el, credentials: Credentials, connectors: dict, discovery_groups: dict,
                      uses: _Uses) -> Federation:
    ctx.check_attrs(el, FEDERATION_ATTRS)
    fname = ctx.attr(el, "name", required=True)
    login = _login(ctx, el, credentials, f"federation {fname!r}")
    fed = Federation(name=fname, user=login.user, password=login.password, line=el.line)
    policy_names: dict[str, int] = {}
    stream_names: dict[str, int] = {}
    transformer_lines: dict[str, int] = {}
    ref_lines: list[tuple[str, int]] = []
    transformer_refs: list[tuple[str, int]] = []
    for name, child in children(ctx, el):
        if name in ("upstream", "downstream"):
            stream = _parse_stream(ctx, name, child, login, credentials, connectors, discovery_groups, uses,
                                   ref_lines)
            _unique(ctx, stream_names, "upstream/downstream", stream.name, child)
            (fed.upstreams if name == "upstream" else fed.downstreams).append(stream)
        elif name in ("address-policy", "queue-policy"):
            policy = (_parse_address_policy if name == "address-policy" else _parse_queue_policy)(ctx, child, uses)
            _unique(ctx, policy_names, "policy", policy.name, child)
            (fed.address_policies if name == "address-policy" else fed.queue_policies)[policy.name] = policy
            if policy.transformer_ref is not None:
                transformer_refs.append((policy.transformer_ref, child.line))
        elif name == "policy-set":
            sname = ctx.attr(child, "name", required=True)
            _unique(ctx, policy_names, "policy", sname, child)
            fed.policy_sets[sname] = _parse_policy_set(ctx, child, ref_lines)
        elif name == "transformer":
            tcfg = _parse_transformer(ctx, child)
            _unique(ctx, transformer_lines, "transformer", tcfg.name, child)
            fed.transformers[tcfg.name] = tcfg
            uses.add("transformer", child.line)
        else:
            raise _unknown(ctx, child, "federation", FEDERATION_CHILDREN)
    known = set(fed.address_policies) | set(fed.queue_policies) | set(fed.policy_sets)
    for ref, line in ref_lines:        # every reference names a policy or policy-set ...
        if ref not in known:
            hint = did_you_mean(ref, known).replace("<", "").replace(">", "")
            raise ctx.error(line, f"no address-policy, queue-policy or policy-set named {ref!r} in federation "
                                  f"{fname!r}{hint}")
    for ref, line in ref_lines:        # ... and no policy-set contains itself
        try:
            fed._expand(ref, [], ())
        except ValueError as exc:
            raise ctx.error(line, str(exc)) from None
    for ref, line in transformer_refs:
        if ref not in fed.transformers:
            raise ctx.error(line, f"transformer-ref {ref!r}: no <transformer name=\"{ref}\"> in federation "
                                  f"{fname!r}{did_you_mean(ref, fed.transformers)}")
        uses.add("transformer", line)
    # Artemis shares a connection only between an upstream and a downstream to the same broker that both
    # set share-connection; without such a pair the flag has no effect there either. The pair shares the
    # upstream's connection (broker/fedruntime.py), so they must name the same connectors and log in alike.
    for down in fed.downstreams:
        if not down.share_connection:
            continue
        for up in fed.upstreams:
            if not up.share_connection or not set(up.static_connectors) & set(down.static_connectors):
                continue
            if set(up.static_connectors) != set(down.static_connectors):
                raise ctx.error(down.line, f"<downstream name=\"{down.name}\"> and <upstream name=\"{up.name}\"> "
                                           "set share-connection but name different connectors "
                                           f"({', '.join(down.static_connectors)} / {', '.join(up.static_connectors)}): "
                                           "one connection goes to one broker; name the same connector-refs, or "
                                           "leave share-connection out of one of them")
            if (up.user, up.password) != (down.user, down.password):
                raise ctx.error(down.line, f"<downstream name=\"{down.name}\"> and <upstream name=\"{up.name}\"> "
                                           "set share-connection but log in differently: one connection has one "
                                           "login; give them the same user and password")
            uses.add("share-connection", down.line)
            break
    if not fed.upstreams and not fed.downstreams:
        ctx.warn(el, f"federation {fname!r} has no <upstream> or <downstream>: it does nothing")
    return fed


def parse_federations(ctx: Ctx, elem, credentials: Credentials, connectors: dict,
                      discovery_groups: dict) -> list[Federation]:
    """``<federations>``: every federation, checked, with its references resolved; then the start-up
    refusal of what the runtime does not implement (:data:`RUNTIME_SUPPORTS`); then, when transformers
    are supported, each transformer class loaded (an import failure is a FILE:LINE error)."""
    out: list[Federation] = []
    names: dict[str, int] = {}
    uses = _Uses()
    for name, el in children(ctx, elem):
        if name != "federation":
            raise _unknown(ctx, el, "federations", ["federation"])
        fed = _parse_federation(ctx, el, credentials, connectors, discovery_groups, uses)
        _unique(ctx, names, "federation", fed.name, el)
        out.append(fed)
    refuse_unsupported(ctx, uses.lines)
    if "transformer" in RUNTIME_SUPPORTS:
        for fed in out:
            for tcfg in fed.transformers.values():
                try:
                    tcfg.instance = load_transformer(tcfg)
                except ValueError as exc:
                    raise ctx.error(tcfg.line, str(exc)) from None
    return out


def parse_core_elements(ctx: Ctx, elements: dict, credentials: Credentials):
    """The four :data:`CORE_ELEMENTS` (name -> element, absent ones missing) parsed in dependency order:
    ``(connectors, discovery_groups, broadcast_groups, federations)``."""
    connectors = parse_connectors(ctx, elements["connectors"]) if "connectors" in elements else {}
    discovery = (parse_discovery_groups(ctx, elements["discovery-groups"])
                 if "discovery-groups" in elements else {})
    broadcast = (parse_broadcast_groups(ctx, elements["broadcast-groups"])
                 if "broadcast-groups" in elements else {})
    uses: dict[str, int] = {}
    for group in broadcast.values():
        for ref in group.connector_refs:
            if ref not in connectors:
                raise ctx.error(group.line, f"broadcast-group {group.name!r}: no <connector name=\"{ref}\"> in "
                                            f"<connectors>{did_you_mean(ref, connectors)}")
        uses.setdefault("broadcast-group", group.line)
    refuse_unsupported(ctx, uses)
    federations = (parse_federations(ctx, elements["federations"], credentials, connectors, discovery)
                   if "federations" in elements else [])
    return connectors, discovery, broadcast, federations
