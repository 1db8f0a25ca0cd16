"""Networks of brokers, configuration side: ActiveMQ Classic's ``<networkConnectors>`` and the
``conditionalNetworkBridgeFilterFactory`` destination policy, read from broker.xml's ``<core>``.

The vocabulary is ActiveMQ's, so that a block pasted from the ActiveMQ "Networks of Brokers" page or
from Amazon MQ's network-of-brokers blueprints works once host and port are changed. The defaults are
those of ActiveMQ's code (``NetworkBridgeConfiguration.java``, ``SimpleDiscoveryAgent.java``,
``ConditionalNetworkBridgeFilterFactory.java`` in activemq-broker / activemq-client), which differ from
its web page in places; docs/networks.md lists each difference. Every attribute ActiveMQ knows that
tdbroker does not act on is refused at ``FILE:LINE`` (:data:`UNSUPPORTED_CONNECTOR_ATTRS`), as is every
attribute nobody knows.

What this module gives the network runtime:

* :class:`NetworkConnector` (one ``<networkConnector>``): discovery, targets with their TLS, reconnect
  settings, credentials, and the bridge's properties; :meth:`NetworkConnector.permissible` is ActiveMQ's
  ``isPermissableDestination``; :meth:`NetworkConnector.to_properties` /
  :meth:`NetworkConnector.from_properties` carry a duplex connector's configuration to the remote
  side, which validates it like any input from the network;
* :class:`DestinationFilter` and :func:`amq_match`: ActiveMQ destination wildcards;
* :class:`BridgeFilterPolicy` and :func:`policy_for`: replay-when-no-consumers and rate limits.

The module is longer than most: it holds one vocabulary (the connector, its URIs, its destination
lists and the bridge's destination policy) whose tables, objects and parser are read together.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass, field

from wire.sasl import is_loopback

from . import xmlschema as xs
from .credentials import CredentialsError
from .security import uri_tls
from .xmlschema import BrokerConfigError, Ctx, children, did_you_mean, local

# --- ActiveMQ destination wildcards (activemq-client filter/DestinationFilter.java) ---------------------------------

#: Separates the words of a destination name.
DELIMITER = "."
#: Matches exactly one word.
ANY_CHILD = "*"
#: As the last word: matches the remaining words, zero or more (PrefixDestinationFilter: "A.>" matches "A").
ANY_DESCENDANT = ">"
KINDS = ("queue", "topic")

#: Bounds on a duplex peer's properties (from the network): a peer cannot make this broker hold more.
MAX_REMOTE_FILTERS = 1000           # destination filters per list
MAX_PATTERN_LENGTH = 4096           # characters in one destination pattern

# --- <networkConnector> attributes -------------------------------------------------------------------------------

#: The <core> children this module handles (broker/config.py dispatches them here).
CORE_ELEMENTS = ("networkConnectors", "networkConnectorStartAsync", "destinationPolicy")

#: attribute -> (NetworkConnector field, value kind). Defaults are the dataclass's (ActiveMQ's code).
CONNECTOR_ATTRS = {
    "duplex": ("duplex", "bool"),
    "dynamicOnly": ("dynamic_only", "bool"),
    "decreaseNetworkConsumerPriority": ("decrease_network_consumer_priority", "bool"),
    "consumerPriorityBase": ("consumer_priority_base", "int"),
    "networkTTL": ("network_ttl", "int"),
    "messageTTL": ("message_ttl", "int"),
    "consumerTTL": ("consumer_ttl", "int"),
    "conduitSubscriptions": ("conduit_subscriptions", "bool"),
    "prefetchSize": ("prefetch_size", "int"),
    "suppressDuplicateQueueSubscriptions": ("suppress_duplicate_queue_subscriptions", "bool"),
    "suppressDuplicateTopicSubscriptions": ("suppress_duplicate_topic_subscriptions", "bool"),
    "bridgeTempDestinations": ("bridge_temp_destinations", "bool"),
    "alwaysSyncSend": ("always_sync_send", "bool"),
    "staticBridge": ("static_bridge", "bool"),
}
#: Attributes read separately (not properties carried to a duplex peer).
CONNECTOR_OTHER_ATTRS = ("name", "uri", "userName", "password")

#: ActiveMQ NetworkConnector / NetworkBridgeConfiguration attributes tdbroker does not act on: refused.
UNSUPPORTED_CONNECTOR_ATTRS = {
    "useVirtualDestSubs": "virtual destinations are not implemented",
    "destinationFilter": "demand travels in tdbroker's own advisories; use <dynamicallyIncludedDestinations>",
    "useCompression": "messages cross a bridge as they are",
    "advisoryPrefetchSize": "demand is not carried by OpenWire advisory consumers",
    "advisoryAckPercentage": "demand is not carried by OpenWire advisory consumers",
    "advisoryForFailedForward": "failed forwards are not published as advisories",
    "checkDuplicateMessagesOnDuplex": "not implemented",
    "syncDurableSubs": "durable subscriptions are not synchronised across a bridge",
    "gcDestinationViews": "there are no JMX destination views",
    "gcSweepTime": "there are no JMX destination views",
    "conduitNetworkQueueSubscriptions": "not implemented",
    "dispatchAsync": "not implemented",
    "useBrokerNameAsIdSees": "broker ids are tdbroker's own",
    "brokerName": "the broker's name is <core><name>",
    "brokerURL": "not implemented",
    "localUri": "a bridge works inside the broker, it does not connect to its own broker",
    "clientIdToken": "not implemented",
    "remoteUserName": "use userName (the remote broker's login)",
    "remotePassword": "use password or the credentials store",
    "objectName": "there is no JMX",
}
#: ActiveMQ <networkConnector> children tdbroker does not act on: refused.
UNSUPPORTED_CONNECTOR_CHILDREN = {
    "durableDestinations": "durable subscriptions are not synchronised across a bridge",
    "connectionFilter": "not implemented",
    "bridgeFactory": "not implemented",
    "sslContext": "give TLS parameters on the ssl:// URI instead",
    "discoveryAgent": "use the static:, masterslave: or multicast:// URI",
}
DESTINATION_LISTS = {
    "excludedDestinations": "excluded",
    "dynamicallyIncludedDestinations": "dynamically_included",
    "staticallyIncludedDestinations": "statically_included",
}
#: Other <networkConnectors> children of ActiveMQ: refused.
UNSUPPORTED_CONNECTOR_KINDS = {
    "multicastNetworkConnector": "use <networkConnector uri=\"multicast://...\">",
    "ldapNetworkConnector": "LDAP discovery is not implemented",
}

# --- discovery URIs ----------------------------------------------------------------------------------------------

DISCOVERY_KINDS = ("static", "masterslave", "multicast")
TARGET_SCHEMES = ("tcp", "amqp", "ssl", "amqps")
TLS_SCHEMES = ("ssl", "amqps")
#: ActiveMQ's multicast discovery (MulticastDiscoveryAgent.java): "default" is this group and port.
DEFAULT_MULTICAST_HOST = "239.255.2.3"
DEFAULT_MULTICAST_PORT = 6155
DEFAULT_MULTICAST_GROUP = "default"
MULTICAST_DEFAULT_HOST_NAME = "default"
#: static:/masterslave: options (SimpleDiscoveryAgent setters) -> (ReconnectSettings field, kind).
RECONNECT_OPTIONS = {
    "initialReconnectDelay": ("initial_reconnect_delay_ms", "long"),
    "maxReconnectDelay": ("max_reconnect_delay_ms", "long"),
    "useExponentialBackOff": ("use_exponential_backoff", "bool"),
    "backOffMultiplier": ("backoff_multiplier", "float"),
    "maxReconnectAttempts": ("max_reconnect_attempts", "int"),
    "minConnectTime": ("min_connect_time_ms", "long"),
}
_PARAM_SPLIT = re.compile(r"[;&]")
_SECRET_PARAMS = re.compile(r"((?:keyStorePassword|trustStorePassword)=)[^;&#,)]*")


# --- the objects -------------------------------------------------------------------------------------------------

@dataclass
class DestinationFilter:
    """One ``<queue physicalName>`` / ``<topic physicalName>`` of a destination list or policy."""

    kind: str                 # "queue" | "topic"
    pattern: str
    line: int = 0

    def matches(self, kind: str, name: str) -> bool:
        """True for a destination of the same kind whose name the pattern matches (:func:`amq_match`)."""
        return kind == self.kind and amq_match(self.pattern, name)

    def text(self) -> str:
        """``"queue:PATTERN"`` / ``"topic:PATTERN"``, the form :meth:`NetworkConnector.to_properties` uses."""
        return f"{self.kind}:{self.pattern}"


def amq_match(pattern: str, name: str) -> bool:
    """ActiveMQ's destination wildcard match: words separated by ``.``; ``*`` matches one word; ``>`` as
    the last word matches the rest, zero or more words, so ``A.>`` matches ``A``, ``A.B`` and ``A.B.C``
    (activemq-client ``PrefixDestinationFilter``: "the case where A matches A.>"), but not ``AB``."""
    pwords = pattern.split(DELIMITER)
    nwords = name.split(DELIMITER)
    while len(pwords) > 1 and pwords[-1] == ANY_DESCENDANT and pwords[-2] == ANY_DESCENDANT:
        pwords.pop()                        # "A.>.>" is "A.>" (as PrefixDestinationFilter collapses it)
    if pwords[-1] == ANY_DESCENDANT:
        prefix = pwords[:-1]
        if len(nwords) < len(prefix):
            return False
        return all(_word_matches(p, n) for p, n in zip(prefix, nwords))
    return len(pwords) == len(nwords) and all(_word_matches(p, n) for p, n in zip(pwords, nwords))


def _word_matches(pword: str, word: str) -> bool:
    return pword == ANY_CHILD or pword == word


def is_wildcard(pattern: str) -> bool:
    """True when ``pattern`` has a ``*`` or ``>`` word."""
    return any(w in (ANY_CHILD, ANY_DESCENDANT) for w in pattern.split(DELIMITER))


def pattern_problem(pattern: str, *, wildcards: bool = True) -> str | None:
    """Why ``pattern`` is not a usable destination pattern, or None."""
    if not pattern:
        return "must not be empty"
    if len(pattern) > MAX_PATTERN_LENGTH:
        return f"is longer than {MAX_PATTERN_LENGTH} characters"
    if "," in pattern:
        return "is a composite destination (',' separated): list each destination in an element of its own"
    words = pattern.split(DELIMITER)
    for i, word in enumerate(words):
        if word not in (ANY_CHILD, ANY_DESCENDANT) and (ANY_CHILD in word or ANY_DESCENDANT in word):
            return f"'{ANY_CHILD}' and '{ANY_DESCENDANT}' must stand for a whole word between '{DELIMITER}' separators"
        if word == ANY_DESCENDANT and i != len(words) - 1:
            return f"'{ANY_DESCENDANT}' may only be the last word"
    if not wildcards and is_wildcard(pattern):
        return "names a destination: wildcards are allowed in excluded and dynamically included destinations only"
    return None


@dataclass
class NetworkTarget:
    """One broker a connector dials: ``ssl``/``amqps`` (or ``sslEnabled=true``) means TLS."""

    scheme: str               # "tcp" | "amqp" | "ssl" | "amqps"
    host: str
    port: int
    tls: object | None = None  # wire.tls.ClientTls, or None for plaintext


@dataclass
class ReconnectSettings:
    """Reconnect backoff of ``static:``/``masterslave:`` discovery, ActiveMQ ``SimpleDiscoveryAgent``'s code
    defaults: a connection that fails within ``min_connect_time_ms`` of being made counts as a connect
    failure (the delay grows by ``backoff_multiplier`` up to ``max_reconnect_delay_ms``); a later failure
    starts again from ``initial_reconnect_delay_ms``."""

    initial_reconnect_delay_ms: int = 1000
    max_reconnect_delay_ms: int = 30000
    use_exponential_backoff: bool = True
    backoff_multiplier: float = 2.0
    max_reconnect_attempts: int = 0       # 0 = unlimited
    min_connect_time_ms: int = 5000


@dataclass
class MulticastGroup:
    """``multicast://`` discovery: brokers announce themselves to this UDP group under ``group``."""

    host: str = DEFAULT_MULTICAST_HOST
    port: int = DEFAULT_MULTICAST_PORT
    group: str = DEFAULT_MULTICAST_GROUP


#: Keys of NetworkConnector.to_properties (ActiveMQ's attribute names) -> (field, kind).
PROPERTY_FIELDS = {
    **CONNECTOR_ATTRS,
    "excludedDestinations": ("excluded", "filters"),
    "dynamicallyIncludedDestinations": ("dynamically_included", "filters"),
    "staticallyIncludedDestinations": ("statically_included", "filters"),
}


@dataclass
class NetworkConnector:
    """One ``<networkConnector>``: a bridge from this broker to the brokers its URI names or discovers.

    Defaults are ActiveMQ's code (NetworkBridgeConfiguration.java), not its web page: the connector's name
    is ``NC``, network consumers' priority decreases (since 5.18), every forward waits for the remote
    broker's confirmation (``alwaysSyncSend``). TTLs: -1 is unlimited."""

    name: str = "NC"
    uri: str = ""             # as written, key and trust store passwords shown as ***
    discovery: str = "static"  # "static" | "masterslave" | "multicast"
    targets: list = field(default_factory=list)   # list[NetworkTarget]; masterslave: master first
    multicast: MulticastGroup | None = None
    reconnect: ReconnectSettings = field(default_factory=ReconnectSettings)
    user_name: str | None = None
    password: str | None = field(default=None, repr=False)
    duplex: bool = False
    dynamic_only: bool = False
    decrease_network_consumer_priority: bool = True
    consumer_priority_base: int = -5
    network_ttl: int = 1
    message_ttl: int = 1
    consumer_ttl: int = 1
    conduit_subscriptions: bool = True
    excluded: list = field(default_factory=list)              # list[DestinationFilter]
    dynamically_included: list = field(default_factory=list)  # list[DestinationFilter]
    statically_included: list = field(default_factory=list)   # list[DestinationFilter], exact names
    prefetch_size: int = 1000
    suppress_duplicate_queue_subscriptions: bool = False
    suppress_duplicate_topic_subscriptions: bool = True
    bridge_temp_destinations: bool = True
    always_sync_send: bool = True
    static_bridge: bool = False
    line: int = 0
    #: Where the password came from: broker.credentials.FROM_CONFIG, FROM_STORE, or None (no login).
    password_source: str | None = None

    def permissible(self, kind: str, name: str, *, temporary: bool = False) -> bool:
        """ActiveMQ's ``isPermissableDestination``: temporary destinations iff bridgeTempDestinations; an
        excluded match is refused; a static match is allowed; with dynamically included destinations,
        only a match is allowed; otherwise everything is."""
        if temporary:
            return self.bridge_temp_destinations
        if any(f.matches(kind, name) for f in self.excluded):
            return False
        if any(f.matches(kind, name) for f in self.statically_included):
            return True
        if self.dynamically_included:
            return any(f.matches(kind, name) for f in self.dynamically_included)
        return True

    def static_destinations(self) -> list:
        """The statically included destinations that no exclusion matches (ActiveMQ's code checks the
        exclusions first, so an excluded static destination is skipped)."""
        return [f for f in self.statically_included
                if not any(e.matches(f.kind, f.pattern) for e in self.excluded)]

    def to_properties(self) -> dict:
        """The bridge's properties for the duplex peer: ActiveMQ attribute name -> str/int/bool/list[str]
        (filters as ``"queue:PATTERN"``). Without name, URI, targets, user or password."""
        out = {}
        for key, (fld, kind) in PROPERTY_FIELDS.items():
            value = getattr(self, fld)
            out[key] = [f.text() for f in value] if kind == "filters" else value
        return out

    @classmethod
    def from_properties(cls, props: dict, *, name: str) -> NetworkConnector:
        """The connector a duplex peer described with :meth:`to_properties`. The input comes from the
        network: ValueError for a missing or unknown key, a value of the wrong type or out of range."""
        if not isinstance(props, dict):
            raise ValueError(f"network connector properties must be a map, got {type(props).__name__}")
        keys = {str(k) for k in props}
        unknown = sorted(keys - set(PROPERTY_FIELDS))
        if unknown:
            raise ValueError(f"unknown network connector properties: {', '.join(unknown)}")
        missing = [k for k in PROPERTY_FIELDS if k not in keys]
        if missing:
            raise ValueError(f"missing network connector properties: {', '.join(missing)}")
        values = {}
        for key, raw in props.items():
            key = str(key)
            fld, kind = PROPERTY_FIELDS[key]
            if kind == "bool":
                if not isinstance(raw, bool):
                    raise ValueError(f"{key} must be a boolean, got {type(raw).__name__}")
                values[fld] = bool(raw)
            elif kind == "int":
                if isinstance(raw, bool) or not isinstance(raw, int):
                    raise ValueError(f"{key} must be an integer, got {type(raw).__name__}")
                lo, hi = xs.INT_RANGE
                if not lo <= raw <= hi:
                    raise ValueError(f"{key} {raw} is out of range")
                values[fld] = int(raw)
            else:
                values[fld] = _filters_from_texts(key, raw)
        connector = cls(name=name, **values)
        problem = connector.value_problem()
        if problem:
            raise ValueError(problem)
        return connector

    def value_problem(self) -> str | None:
        """Why a property value cannot be acted on, or None (shared by the XML and the duplex path)."""
        if self.prefetch_size <= 0:
            return (f"prefetchSize must be > 0 because network consumers do not poll for messages, "
                    f"got {self.prefetch_size}")
        for attr in ("networkTTL", "messageTTL", "consumerTTL"):
            value = getattr(self, CONNECTOR_ATTRS[attr][0])
            if value < -1:
                return f"{attr} must be -1 (unlimited) or >= 0, got {value}"
        return None


def _filters_from_texts(key: str, raw) -> list:
    if not isinstance(raw, (list, tuple)):
        raise ValueError(f"{key} must be a list of strings, got {type(raw).__name__}")
    if len(raw) > MAX_REMOTE_FILTERS:
        raise ValueError(f"{key} has more than {MAX_REMOTE_FILTERS} entries")
    out = []
    for item in raw:
        if not isinstance(item, str):
            raise ValueError(f"{key} entries must be strings, got {type(item).__name__}")
        kind, sep, pattern = str(item).partition(":")
        if not sep or kind not in KINDS:
            raise ValueError(f"{key} entry {item[:80]!r} must be queue:PATTERN or topic:PATTERN")
        problem = pattern_problem(pattern, wildcards=key != "staticallyIncludedDestinations")
        if problem:
            raise ValueError(f"{key} entry {item[:80]!r}: the pattern {problem}")
        out.append(DestinationFilter(kind, pattern))
    return out


@dataclass
class BridgeFilterPolicy:
    """A ``<policyEntry queue|topic>`` with a ``conditionalNetworkBridgeFilterFactory``: whether messages
    may be replayed to the broker they came from when no local consumer is left (queues only, after
    ``replay_delay_ms`` since arrival), and a rate limit on network consumers (``rate_limit`` messages per
    ``rate_duration_ms``; 0 = unlimited). Defaults are the factory's code."""

    kind: str                 # "queue" | "topic"
    pattern: str
    replay_when_no_consumers: bool = False
    replay_delay_ms: int = 0
    rate_limit: int = 0
    rate_duration_ms: int = 1000
    selector_aware: bool = False  # replay only when no local consumer's selector matches the message
    line: int = 0


def policy_for(policies: list, kind: str, name: str) -> BridgeFilterPolicy | None:
    """The most specific policy matching the destination: an exact name over any wildcard; then more
    literal words; then ``*`` over ``>``; then more words; then the first in the file."""
    best, best_key = None, None
    for index, policy in enumerate(policies):
        if policy.kind != kind or not amq_match(policy.pattern, name):
            continue
        words = policy.pattern.split(DELIMITER)
        key = (is_wildcard(policy.pattern), -sum(w not in (ANY_CHILD, ANY_DESCENDANT) for w in words),
               ANY_DESCENDANT in words, -len(words), index)
        if best_key is None or key < best_key:
            best, best_key = policy, key
    return best


# --- parsing: <networkConnectors> --------------------------------------------------------------------------------

def parse_network_connectors(ctx: Ctx, elem, credentials) -> list:
    """``<networkConnectors>`` -> list[NetworkConnector]; ``credentials`` is broker.credentials.Credentials
    (a user without a password logs in with the password stored for it)."""
    out: list[NetworkConnector] = []
    names: dict[str, int] = {}
    for kind, el in children(ctx, elem):
        if kind in UNSUPPORTED_CONNECTOR_KINDS:
            raise ctx.error(el, f"<{kind}> is not supported by tdbroker: {UNSUPPORTED_CONNECTOR_KINDS[kind]}")
        if kind != "networkConnector":
            raise ctx.error(el, f"unknown element <{kind}> in <networkConnectors>"
                                f"{did_you_mean(kind, ['networkConnector'])}")
        connector = _parse_connector(ctx, el, credentials)
        if connector.name in names:
            raise ctx.error(el, f"duplicate networkConnector name {connector.name!r} (first at line "
                                f"{names[connector.name]}); give each connector a name=\"...\" of its own")
        names[connector.name] = el.line
        out.append(connector)
    return out


def _parse_connector(ctx: Ctx, el, credentials) -> NetworkConnector:
    for attr in el.attrib:
        if "}" in attr:
            continue
        if attr in UNSUPPORTED_CONNECTOR_ATTRS:
            raise ctx.error(el, f"networkConnector attribute {attr} is not supported by tdbroker: "
                                f"{UNSUPPORTED_CONNECTOR_ATTRS[attr]}; remove it")
    ctx.check_attrs(el, CONNECTOR_OTHER_ATTRS + tuple(CONNECTOR_ATTRS))
    name = ctx.attr(el, "name", default=NetworkConnector.name)
    if not name.strip():
        raise ctx.error(el, "<networkConnector> name=\"\" must not be empty")
    what = f"networkConnector {name!r}"
    uri = ctx.attr(el, "uri", required=True)
    connector = NetworkConnector(name=name, uri=_SECRET_PARAMS.sub(r"\1***", uri), line=el.line)
    _parse_uri(ctx, el, what, uri.strip(), connector)
    values = {fld: ctx.attr(el, attr, kind) for attr, (fld, kind) in CONNECTOR_ATTRS.items()
              if el.attrib.get(attr) is not None}
    for fld, value in values.items():
        setattr(connector, fld, value)
    # networkTTL sets both messageTTL and consumerTTL unless they are given (NetworkBridgeConfiguration).
    if "network_ttl" in values:
        connector.message_ttl = values.get("message_ttl", connector.network_ttl)
        connector.consumer_ttl = values.get("consumer_ttl", connector.network_ttl)
    problem = connector.value_problem()
    if problem:
        raise ctx.error(el, f"{what}: {problem}")
    _parse_destination_lists(ctx, el, connector)
    _login(ctx, el, credentials, what, connector)
    return connector


def _login(ctx: Ctx, el, credentials, what: str, connector: NetworkConnector) -> None:
    try:
        login = credentials.resolve(ctx.attr(el, "userName"), ctx.attr(el, "password"), line=el.line,
                                    what=what, warn=lambda message: ctx.warn(el, message))
    except CredentialsError as exc:
        raise BrokerConfigError(exc.path, exc.line, exc.message) from None
    connector.user_name, connector.password, connector.password_source = login.user, login.password, login.source
    if login.user:
        clear = [t.host for t in connector.targets if t.tls is None and not is_loopback(t.host)]
        if clear:
            ctx.warn(el, f"{what} logs in as {login.user!r} without TLS to {clear[0]}: a peer that offers only "
                         "PLAIN gets the password in clear; use ssl:// or amqps://")


def _parse_destination_lists(ctx: Ctx, el, connector: NetworkConnector) -> None:
    seen: dict[str, int] = {}
    for kind, child in children(ctx, el):
        if kind in UNSUPPORTED_CONNECTOR_CHILDREN:
            raise ctx.error(child, f"<{kind}> is not supported by tdbroker: {UNSUPPORTED_CONNECTOR_CHILDREN[kind]}")
        if kind not in DESTINATION_LISTS:
            raise ctx.error(child, f"unknown element <{kind}> in <networkConnector>"
                                   f"{did_you_mean(kind, DESTINATION_LISTS)}")
        if kind in seen:
            raise ctx.error(child, f"duplicate <{kind}> (first at line {seen[kind]})")
        seen[kind] = child.line
        ctx.check_attrs(child, ())
        wildcards = kind != "staticallyIncludedDestinations"
        getattr(connector, DESTINATION_LISTS[kind]).extend(
            _parse_destination(ctx, d, kind, wildcards) for _, d in children(ctx, child))


def _parse_destination(ctx: Ctx, el, parent: str, wildcards: bool) -> DestinationFilter:
    kind = local(el)
    if kind in ("tempQueue", "tempTopic"):
        raise ctx.error(el, f"<{kind}> in <{parent}> is not supported by tdbroker: temporary destinations "
                            "are bridged or not as a whole, with bridgeTempDestinations")
    if kind not in KINDS:
        raise ctx.error(el, f"unknown element <{kind}> in <{parent}>; use <queue physicalName=\"...\"/> or "
                            "<topic physicalName=\"...\"/>")
    ctx.check_attrs(el, ("physicalName",))
    for child in el:
        if isinstance(child.tag, str):
            raise ctx.error(child, f"unknown element <{local(child)}> in <{kind}>")
    pattern = ctx.attr(el, "physicalName", required=True).strip()
    problem = pattern_problem(pattern, wildcards=wildcards)
    if problem:
        raise ctx.error(el, f"<{kind} physicalName=\"{pattern}\"> in <{parent}>: the name {problem}")
    return DestinationFilter(kind, pattern, el.line)


# --- discovery URIs ----------------------------------------------------------------------------------------------

def _split_query(ctx: Ctx, el, what: str, uri: str, query: str) -> dict:
    params: dict[str, str] = {}
    for item in filter(None, _PARAM_SPLIT.split(query)):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ctx.error(el, f"{what}: query parameter {item.split('=')[0]!r} of {uri!r} is not key=value")
        if key in params:
            raise ctx.error(el, f"{what}: query parameter {key} is given twice")
        params[key] = urllib.parse.unquote(value)
    return params


def _parse_uri(ctx: Ctx, el, what: str, uri: str, connector: NetworkConnector) -> None:
    scheme, colon, rest = uri.partition(":")
    if not colon or scheme not in DISCOVERY_KINDS:
        raise ctx.error(el, f"{what}: uri {connector.uri!r} must start with static:, masterslave: or "
                            "multicast:// (failover:, rendezvous:, zeroconf: and a bare tcp:// are not supported)")
    connector.discovery = scheme
    if scheme == "multicast":
        connector.multicast = _parse_multicast(ctx, el, what, uri)
        return
    if rest.startswith("("):
        depth, end = 0, -1
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                end = i
                break
        if end < 0:
            raise ctx.error(el, f"{what}: uri {connector.uri!r} has no closing ')'")
        inner, tail = rest[1:end], rest[end + 1:]
        if tail and not tail.startswith("?"):
            raise ctx.error(el, f"{what}: unexpected {tail[:40]!r} after ')' in the uri")
        options = _split_query(ctx, el, what, connector.uri, tail[1:])
        target_uris = [u.strip() for u in inner.split(",")]
        shared: dict[str, str] = {}
    else:
        # static:tcp://h:p?k=v: the reconnect options go to the discovery, the others to the one target.
        target, _, query = rest.partition("?")
        shared = _split_query(ctx, el, what, connector.uri, query)
        options = {k: shared.pop(k) for k in list(shared) if k in RECONNECT_OPTIONS}
        target_uris = [target.strip()]
    if any(not u for u in target_uris):
        raise ctx.error(el, f"{what}: uri {connector.uri!r} has an empty broker URI in its list")
    connector.reconnect = _parse_reconnect(ctx, el, what, options)
    connector.targets = [_parse_target(ctx, el, what, u, dict(shared)) for u in target_uris]
    if scheme == "masterslave" and len(connector.targets) < 2:
        raise ctx.error(el, f"{what}: masterslave: lists the master and at least one slave, in that order")


def _parse_reconnect(ctx: Ctx, el, what: str, options: dict) -> ReconnectSettings:
    settings = ReconnectSettings()
    for key, raw in options.items():
        if key not in RECONNECT_OPTIONS:
            raise ctx.error(el, f"{what}: uri option {key} is not supported by tdbroker (supported: "
                                f"{', '.join(RECONNECT_OPTIONS)})")
        fld, kind = RECONNECT_OPTIONS[key]
        if kind == "float":
            try:
                value = float(raw)
            except ValueError:
                raise ctx.error(el, f"{what}: uri option {key} must be a number, got {raw!r}") from None
            if not 1.0 <= value <= 1000.0:
                raise ctx.error(el, f"{what}: uri option {key} must be between 1 and 1000, got {raw}")
        else:
            value = xs.convert(ctx, el, f"{what}: uri option {key}", raw.strip(), kind)
            if kind != "bool":
                minimum = -1 if key == "maxReconnectAttempts" else 0
                if value < minimum:
                    raise ctx.error(el, f"{what}: uri option {key} must be >= {minimum}, got {value}")
                if key == "maxReconnectAttempts" and value < 0:
                    value = 0          # -1, as for the failover transport: unlimited, like 0 here
        setattr(settings, fld, value)
    if settings.max_reconnect_delay_ms < settings.initial_reconnect_delay_ms:
        raise ctx.error(el, f"{what}: maxReconnectDelay {settings.max_reconnect_delay_ms} is below "
                            f"initialReconnectDelay {settings.initial_reconnect_delay_ms}")
    return settings


def _parse_target(ctx: Ctx, el, what: str, uri: str, params: dict) -> NetworkTarget:
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise ctx.error(el, f"{what}: {uri!r} is not a valid URI: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in TARGET_SCHEMES:
        raise ctx.error(el, f"{what}: {uri.split('?')[0]!r}: scheme {parts.scheme!r} is not supported "
                            f"(use {', '.join(TARGET_SCHEMES)})")
    if not parts.hostname:
        raise ctx.error(el, f"{what}: {uri.split('?')[0]!r} has no host")
    if port is None:
        raise ctx.error(el, f"{what}: {uri.split('?')[0]!r} has no port")
    if parts.path not in ("", "/"):
        raise ctx.error(el, f"{what}: {uri.split('?')[0]!r} has an unexpected path {parts.path!r}")
    params.update(_split_query(ctx, el, what, uri.split("?")[0], parts.query))
    if scheme in TLS_SCHEMES:
        if params.get("sslEnabled", "true").strip().lower() == "false":
            raise ctx.error(el, f"{what}: {scheme}:// means TLS; sslEnabled=false contradicts it")
        params["sslEnabled"] = "true"
    tls = uri_tls(ctx, el, f"{what} {scheme}://{parts.hostname}:{port}", params, server=False)
    if params:
        key = sorted(params)[0]
        raise ctx.error(el, f"{what}: URI parameter {key} of {scheme}://{parts.hostname}:{port} is not "
                            "supported by tdbroker (network connector URIs take TLS parameters only)")
    return NetworkTarget(scheme, parts.hostname, port, tls)


def _parse_multicast(ctx: Ctx, el, what: str, uri: str) -> MulticastGroup:
    if not uri.startswith("multicast://"):
        raise ctx.error(el, f"{what}: write multicast discovery as multicast://default or "
                            "multicast://GROUP-ADDRESS:PORT")
    try:
        parts = urllib.parse.urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise ctx.error(el, f"{what}: {uri!r} is not a valid URI: {exc}") from None
    if parts.path not in ("", "/"):
        raise ctx.error(el, f"{what}: {uri!r} has an unexpected path {parts.path!r}")
    host = parts.hostname or MULTICAST_DEFAULT_HOST_NAME
    if host == MULTICAST_DEFAULT_HOST_NAME:
        host = DEFAULT_MULTICAST_HOST
    else:
        try:
            is_multicast = ipaddress.ip_address(host).is_multicast
        except ValueError:
            is_multicast = False
        if not is_multicast:
            raise ctx.error(el, f"{what}: {host!r} is not a multicast group address (224.0.0.0/4 or ff00::/8); "
                                "use multicast://default for ActiveMQ's group")
    params = _split_query(ctx, el, what, uri, parts.query)
    group = params.pop("group", DEFAULT_MULTICAST_GROUP)
    if not group.strip():
        raise ctx.error(el, f"{what}: multicast group=\"\" must not be empty")
    if any(c.isspace() or not c.isprintable() for c in group):
        # the group name is a field of the announcement datagram (wire/discovery.py)
        raise ctx.error(el, f"{what}: multicast group {group!r} must not contain spaces or control characters")
    if params:
        key = sorted(params)[0]
        raise ctx.error(el, f"{what}: multicast option {key} is not supported by tdbroker (supported: group)")
    return MulticastGroup(host, DEFAULT_MULTICAST_PORT if port is None else port, group)


# --- parsing: <destinationPolicy> --------------------------------------------------------------------------------

#: conditionalNetworkBridgeFilterFactory attribute -> (BridgeFilterPolicy field, kind, minimum).
FILTER_FACTORY_ATTRS = {
    "replayWhenNoConsumers": ("replay_when_no_consumers", "bool", None),
    "replayDelay": ("replay_delay_ms", "int", 0),
    "rateLimit": ("rate_limit", "int", 0),
    "rateDuration": ("rate_duration_ms", "int", 1),
    "selectorAware": ("selector_aware", "bool", None),
}


def parse_destination_policy(ctx: Ctx, elem) -> list:
    """``<destinationPolicy><policyMap><policyEntries><policyEntry>`` -> list[BridgeFilterPolicy]. Only
    the network bridge filter of a policy entry is supported; any other policy is refused."""
    ctx.check_attrs(elem, ())
    policy_map = _only_child(ctx, elem, "policyMap")
    ctx.check_attrs(policy_map, ())
    out: list[BridgeFilterPolicy] = []
    seen: dict[tuple, int] = {}
    entries_seen = None
    for name, entries in children(ctx, policy_map):
        if name == "defaultEntry":
            raise ctx.error(entries, "<defaultEntry> is not supported by tdbroker; write <policyEntry queue=\">\"> "
                                     "or <policyEntry topic=\">\"> inside <policyEntries>")
        if name != "policyEntries":
            raise ctx.error(entries, f"unknown element <{name}> in <policyMap>{did_you_mean(name, ['policyEntries'])}")
        if entries_seen is not None:
            raise ctx.error(entries, f"duplicate <policyEntries> (first at line {entries_seen})")
        entries_seen = entries.line
        ctx.check_attrs(entries, ())
        for ename, entry in children(ctx, entries):
            if ename != "policyEntry":
                raise ctx.error(entry, f"unknown element <{ename}> in <policyEntries>"
                                       f"{did_you_mean(ename, ['policyEntry'])}")
            policy = _parse_policy_entry(ctx, entry)
            key = (policy.kind, policy.pattern)
            if key in seen:
                raise ctx.error(entry, f"duplicate policyEntry {policy.kind}=\"{policy.pattern}\" (first at line "
                                       f"{seen[key]})")
            seen[key] = entry.line
            out.append(policy)
    return out


def _only_child(ctx: Ctx, elem, expected: str):
    found = None
    for name, child in children(ctx, elem):
        if name != expected:
            raise ctx.error(child, f"unknown element <{name}> in <{local(elem)}>{did_you_mean(name, [expected])}")
        if found is not None:
            raise ctx.error(child, f"duplicate <{expected}> (first at line {found.line})")
        found = child
    if found is None:
        raise ctx.error(elem, f"<{local(elem)}> needs a <{expected}>")
    return found


def _parse_policy_entry(ctx: Ctx, entry) -> BridgeFilterPolicy:
    for attr in entry.attrib:
        if "}" not in attr and attr not in KINDS:
            raise ctx.error(entry, f"policyEntry attribute {attr} is not supported by tdbroker: only the "
                                   "<networkBridgeFilterFactory> of a policy entry is; remove it")
    given = [k for k in KINDS if k in entry.attrib]
    if len(given) != 1:
        raise ctx.error(entry, "<policyEntry> needs exactly one of queue=\"...\" or topic=\"...\"")
    kind = given[0]
    pattern = ctx.attr(entry, kind, required=True).strip()
    problem = pattern_problem(pattern)
    if problem:
        raise ctx.error(entry, f"policyEntry {kind}=\"{pattern}\": the pattern {problem}")
    policy = BridgeFilterPolicy(kind, pattern, line=entry.line)
    factory_parent = None
    for name, child in children(ctx, entry):
        if name != "networkBridgeFilterFactory":
            raise ctx.error(child, f"<{name}> in <policyEntry> is not supported by tdbroker: only "
                                   "<networkBridgeFilterFactory> is")
        if factory_parent is not None:
            raise ctx.error(child, f"duplicate <networkBridgeFilterFactory> (first at line {factory_parent})")
        factory_parent = child.line
        ctx.check_attrs(child, ())
        factory = _only_child(ctx, child, "conditionalNetworkBridgeFilterFactory")
        _parse_filter_factory(ctx, factory, policy)
    if factory_parent is None:
        ctx.warn(entry, f"policyEntry {kind}=\"{pattern}\" has no <networkBridgeFilterFactory>: it has no effect")
    return policy


def _parse_filter_factory(ctx: Ctx, el, policy: BridgeFilterPolicy) -> None:
    ctx.check_attrs(el, tuple(FILTER_FACTORY_ATTRS))
    for child in el:
        if isinstance(child.tag, str):
            raise ctx.error(child, f"unknown element <{local(child)}> in <conditionalNetworkBridgeFilterFactory>")
    for attr, (fld, kind, minimum) in FILTER_FACTORY_ATTRS.items():
        value = ctx.attr(el, attr, kind)
        if value is None:
            continue
        if minimum is not None and value < minimum:
            raise ctx.error(el, f"conditionalNetworkBridgeFilterFactory {attr} must be >= {minimum}, got {value}")
        setattr(policy, fld, value)
    if policy.kind == "topic" and policy.replay_when_no_consumers:
        raise ctx.error(el, "replayWhenNoConsumers applies to queues only (ActiveMQ replays queue messages); "
                            "a topic message has no queue to wait in")
