"""The broker.xml vocabulary tdbroker accepts, and the safe, line-aware XML loader.

This module holds the *tables* (which Artemis elements are handled, which are
accepted and ignored with a warning, which are refused) and the *value
parsers* (boolean, integer, byte size, enum).  :mod:`broker.config` walks the
tree and builds the typed configuration from them.

Facts (element names, defaults) come from the Artemis user manual
(``configuration-index.adoc``, ``address-settings.adoc``, ``address-model.adoc``,
``amqp-broker-connections.adoc``) and ``artemis-configuration.xsd``; see
``docs/broker-configuration.md``.
"""

from __future__ import annotations

import difflib
import re
import urllib.parse
import xml.etree.ElementTree as ET

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser

from wire.errors import LocatedError

# --- namespaces --------------------------------------------------------------

#: Namespace of the root ``<configuration>`` element.
ROOT_NS = "urn:activemq"
#: Namespace of ``<core>`` and everything inside it.
CORE_NS = "urn:activemq:core"
#: Namespaces accepted for elements inside <core>: the proper one, none at all (a
#: hand-written file), or the root's (a <core> written without its own xmlns).
CORE_NAMESPACES = ("", CORE_NS, ROOT_NS)
XINCLUDE_NS = "http://www.w3.org/2001/XInclude"

# --- defaults (Artemis' documented defaults unless said otherwise) -----------

#: configuration-index: persistence-enabled defaults to true.
DEFAULT_PERSISTENCE_ENABLED = True
#: configuration-index: journal-directory defaults to data/journal.
DEFAULT_JOURNAL_DIRECTORY = "data/journal"
#: configuration-index: journal-file-size defaults to 10MB (binary: 10 * 1024 * 1024).
DEFAULT_JOURNAL_FILE_SIZE = 10 * 1024 * 1024
#: configuration-index: both journal-sync flags default to true.
DEFAULT_JOURNAL_SYNC = True
#: Artemis' TransportConstants default host/port when an acceptor URI omits them.
DEFAULT_ACCEPTOR_HOST = "localhost"
DEFAULT_ACCEPTOR_PORT = 61616
#: The highest TCP port number.
MAX_PORT = 65535
#: address-model: a queue's max-consumers defaults to -1 (unlimited).
DEFAULT_MAX_CONSUMERS = -1
#: A configured queue is durable unless <durable>false</durable>.
DEFAULT_QUEUE_DURABLE = True
#: Acceptor URI parameters tdbroker acts on, with Artemis' defaults: connections beyond
#: connectionsAllowed are refused (-1 = no limit); a client that has not completed the AMQP handshake
#: within handshake-timeout seconds is disconnected (0 = never).
DEFAULT_CONNECTIONS_ALLOWED = -1
DEFAULT_HANDSHAKE_TIMEOUT_SECONDS = 10
#: Artemis' acceptor autoStart: false leaves the acceptor stopped until management starts it
#: (broker/acceptors.py).
DEFAULT_ACCEPTOR_AUTO_START = True

#: The protocol of every acceptor except an HTTP one (protocols=HTTP).
AMQP_PROTOCOL = "AMQP"
#: An acceptor with protocols=HTTP serves the web console, /metrics and /healthz (broker/httpserve.py).
HTTP_PROTOCOL = "HTTP"
ROUTING_TYPES = ("ANYCAST", "MULTICAST")
ADDRESS_FULL_POLICIES = ("PAGE", "DROP", "FAIL", "BLOCK")

#: Broker connection attribute defaults (artemis-configuration.xsd, amqp-connectionUriType).
DEFAULT_RETRY_INTERVAL_MS = 5000      # fixed interval, no backoff
DEFAULT_RECONNECT_ATTEMPTS = -1       # -1 = retry forever
DEFAULT_AUTO_START = True

#: <mirror> attributes and their defaults (amqp-mirror-type; source-mirror-address from the Artemis manual,
#: "AMQP Broker Connections", Mirror).  Kinds: "bool" or "str".  broker/configconn.py refuses sync="true"
#: (not implemented), an empty source-mirror-address and an address-filter with an empty item.
MIRROR_ATTRS = {
    "message-acknowledgements": ("bool", True),
    "queue-creation": ("bool", True),
    "queue-removal": ("bool", True),
    "durable": ("bool", True),
    "sync": ("bool", False),
    "source-mirror-address": ("str", None),
    "address-filter": ("str", None),
}

#: Address-setting element -> (AddressSettings field, value kind, default applied by
#: settings_for).  Defaults are the configuration-index "address-setting type" table.
ADDRESS_SETTING_FIELDS = {
    "dead-letter-address": ("dead_letter_address", "str", None),
    "expiry-address": ("expiry_address", "str", None),
    "expiry-delay": ("expiry_delay", "long", -1),          # -1 = don't override
    "max-delivery-attempts": ("max_delivery_attempts", "int", 10),
    "redelivery-delay": ("redelivery_delay", "long", 0),
    "auto-create-queues": ("auto_create_queues", "bool", True),
    "auto-create-addresses": ("auto_create_addresses", "bool", True),
    "auto-delete-queues": ("auto_delete_queues", "bool", True),
    "default-queue-routing-type": ("default_queue_routing_type", "routing", "multicast"),
    "default-address-routing-type": ("default_address_routing_type", "routing", "multicast"),
    "max-size-bytes": ("max_size_bytes", "size", -1),      # -1 = no limit
    "address-full-policy": ("address_full_policy", "policy", "PAGE"),
    "page-size-bytes": ("page_size_bytes", "size", 10 * 1024 * 1024),  # paging.adoc: 10MB per page file
}

#: Artemis address-setting elements tdbroker accepts but does not act on (warning).
ADDRESS_SETTING_IGNORED = frozenset("""
    auto-create-dead-letter-resources dead-letter-queue-prefix dead-letter-queue-suffix
    auto-create-expiry-resources expiry-queue-prefix expiry-queue-suffix min-expiry-delay
    max-expiry-delay redelivery-delay-multiplier redelivery-collision-avoidance-factor
    max-redelivery-delay max-read-page-messages
    max-read-page-bytes message-counter-history-day-limit last-value-queue
    default-last-value-queue default-last-value-key default-non-destructive
    default-exclusive-queue default-group-rebalance default-group-buckets
    default-consumers-before-dispatch default-delay-before-dispatch redistribution-delay
    send-to-dla-on-no-route slow-consumer-threshold slow-consumer-threshold-measurement-unit
    slow-consumer-policy slow-consumer-check-period auto-delete-created-queues
    auto-delete-queues-delay auto-delete-queues-message-count
    auto-delete-queues-skip-usage-check config-delete-queues config-delete-addresses
    config-delete-diverts auto-delete-addresses auto-delete-addresses-delay
    auto-delete-addresses-skip-usage-check management-browse-page-size
    default-purge-on-no-consumers default-max-consumers default-consumer-window-size
    default-ring-size retroactive-message-count enable-metrics enable-ingress-timestamp
    id-cache-size auto-create-jms-queues auto-delete-jms-queues auto-create-jms-topics
    auto-delete-jms-topics prefetch-page-bytes prefetch-page-messages
    default-group-rebalance-pause-dispatch default-group-first-key
""".split())

#: <core> children that tdbroker handles (see broker.config).
CORE_HANDLED = (
    "name", "persistence-enabled", "journal-directory", "journal-file-size",
    "journal-sync-transactional", "journal-sync-non-transactional", "acceptors",
    "addresses", "address-settings", "broker-connections", "flow-records", "global-max-size",
    "paging-directory", "max-disk-usage", "min-disk-free", "disk-scan-period", "large-messages-directory",
)

#: configuration-index: max-disk-usage is a percentage of the journal's file system, default 90; -1 turns
#: the check off. disk-scan-period (ms) is how often the usage is read, default 5000.
DEFAULT_MAX_DISK_USAGE = 90
DEFAULT_DISK_SCAN_PERIOD_MS = 5000
#: Where page files go when <paging-directory> is absent: "paging" beside the journal directory (the
#: default journal-directory data/journal thus pages to data/paging, Artemis' default paging-directory).
DEFAULT_PAGING_DIRECTORY_NAME = "paging"

#: <flow-records directory="..." sample="1.0" rotate-mb="64"/> (a tdbroker extension, not Artemis).
FLOW_RECORDS_ATTRS = ("directory", "sample", "rotate-mb")
DEFAULT_FLOW_SAMPLE = 1.0
#: Segment size at which the recorder starts a new file.
DEFAULT_FLOW_ROTATE_MB = 64

#: Artemis <core> children that only tune Artemis internals, security or clustering:
#: accepted and ignored with a warning so that a stock Artemis broker.xml loads.
CORE_IGNORED = frozenset("""
    security-invalidation-interval
    authentication-cache-size authorization-cache-size cluster-user cluster-password
    ha-policy cluster-connections
    jmx-management-enabled jmx-domain
    jmx-use-broker-name management-address management-notification-address
    message-counter-enabled message-counter-sample-period message-counter-max-day-history
    thread-pool-max-size scheduled-thread-pool-max-size graceful-shutdown-enabled
    graceful-shutdown-timeout journal-type journal-datasync journal-min-files
    journal-pool-files journal-buffer-timeout journal-buffer-size journal-max-io
    journal-compact-min-files journal-compact-percentage journal-file-open-timeout
    bindings-directory create-bindings-dir
    create-journal-dir node-manager-lock-directory page-sync-timeout
    page-max-concurrent-io read-whole-page
    critical-analyzer critical-analyzer-timeout
    critical-analyzer-check-period critical-analyzer-policy message-expiry-scan-period
    message-expiry-thread-priority address-queue-scan-period connection-ttl-override
    connection-ttl-check-interval configuration-file-refresh-period id-cache-size
    persist-id-cache persist-delivery-count-before-delivery max-redelivery-records
    transaction-timeout transaction-timeout-scan-period async-connection-execution-enabled
    resolve-protocols system-property-prefix populate-validated-user metrics
    metrics-plugin network-check-list network-check-period network-check-timeout
    network-check-NIC network-check-URL-list memory-measure-interval
    memory-warning-threshold server-dump-interval log-delegate-factory-class-name
    amqp-use-core-subscription-naming journal-device-block-size journal-lock-monitor-timeout
    journal-lock-acquisition-timeout journal-retention-directory large-message-sync
    jmx-notification-enabled
""".split())

#: Artemis limits tdbroker does not enforce. Accepting one and ignoring it would promise a bound that does
#: not hold, so a value that sets a limit is refused at start-up (FILE:LINE); ``-1``, Artemis' "no limit",
#: is accepted. element -> what to use instead.
ADDRESS_SETTING_LIMITS_UNENFORCED = {
    "max-size-messages": "use max-size-bytes",
    "max-size-bytes-reject-threshold": "use max-size-bytes with address-full-policy FAIL",
    "page-limit-bytes": "paged messages are bounded by max-disk-usage / min-disk-free",
    "page-limit-messages": "paged messages are bounded by max-disk-usage / min-disk-free",
}
#: page-full-policy only means something with a page limit: accepted (and unused) only without one.
ADDRESS_SETTING_NEEDS_PAGE_LIMIT = frozenset(("page-full-policy",))
CORE_LIMITS_UNENFORCED = {
    "global-max-messages": "use global-max-size",
}

#: Security elements tdbroker enforces: ``<security-enabled>`` (true: SASL logins against the properties
#: login module's users file beside broker.xml, see broker/security.py; false: open) and
#: ``<security-settings>`` (the permission types in broker.security.ENFORCED_PERMISSIONS).
CORE_SECURITY_ENFORCED = ("security-enabled", "security-settings")

#: Security settings tdbroker does not enforce yet (issue 12). Accepting one and ignoring it would promise a
#: protection that does not hold (permissions applied, passwords masked), so each is refused at start-up
#: with FILE:LINE unless its value means "off": ``<mask-password>false``. element -> why it is refused.
CORE_SECURITY_UNENFORCED = {
    "mask-password": "tdbroker does not decode masked passwords; remove it (or set false) and write the "
                     "password in clear",
    "password-codec": "tdbroker does not decode masked passwords; remove it",
}
#: Of those, the elements whose text is a boolean: ``false`` means "off" and is accepted.
CORE_SECURITY_BOOLEANS = frozenset(("mask-password",))

#: Acceptor and <amqp-connection> URI parameters of Artemis' TLS family (TransportConstants). Those
#: wire.tls.ARTEMIS_TLS_PARAMETERS names are enforced (broker/config.py _uri_tls); the others are refused
#: at start-up unless one of TLS_URI_PARAMS_OFF set to false.
TLS_URI_PARAMS = frozenset("""
    sslEnabled keyStorePath keyStorePassword keyStoreType keyStoreProvider keyStoreAlias
    trustStorePath trustStorePassword trustStoreType trustStoreProvider needClientAuth wantClientAuth
    verifyHost trustAll enabledCipherSuites enabledProtocols sslProvider sniHost crlPath sslAutoReload
    trustManagerFactoryPlugin securityDomain forceSSLParameters
""".split())
TLS_URI_PARAMS_OFF = frozenset(("sslEnabled", "needClientAuth", "wantClientAuth", "verifyHost", "trustAll"))

#: Artemis <core> children that would change message routing or naming if silently
#: ignored: refused, with the reason.
CORE_UNSUPPORTED = {
    "wildcard-addresses": "tdbroker uses the default wildcard syntax ('.', '*', '#') only",
    "literal-match-markers": "literal address-setting matches are not supported",
    "bridges": "core bridges are not implemented; use <broker-connections>",
    "queues": "the deprecated <queues> element is not supported; use <addresses>",
    "internal-naming-prefix": "internal address naming is fixed",
    "resource-limit-settings": "resource limits are not implemented",
    "broker-plugins": "broker plugins are not supported",
    "grouping-handler": "message grouping is not implemented",
    "remoting-incoming-interceptors": "interceptors are not supported",
    "remoting-outgoing-interceptors": "interceptors are not supported",
}

#: <amqp-connection> attributes.
AMQP_CONNECTION_ATTRS = ("uri", "name", "user", "password", "retry-interval",
                         "reconnect-attempts", "auto-start")
#: <amqp-connection> children (broker/configconn.py parses each; <bridge> is refused there).
AMQP_CONNECTION_CHILDREN = ("peer", "sender", "receiver", "mirror", "federation")
#: <peer>/<sender>/<receiver> attributes (amqp-address-match-type).
MATCH_ELEMENT_ATTRS = ("address-match", "queue-name")
#: <queue> attributes tdbroker reads; other Artemis queue attributes warn.
QUEUE_ATTRS = ("name", "max-consumers")
QUEUE_IGNORED_ATTRS = frozenset("""
    purge-on-no-consumers exclusive group-rebalance group-rebalance-pause-dispatch
    group-buckets group-first-key last-value last-value-key non-destructive
    consumers-before-dispatch delay-before-dispatch ring-size enabled
""".split())


# --- errors and context ------------------------------------------------------

class BrokerConfigError(LocatedError):
    """A broker.xml problem at ``path:line``; ``str()`` is ``"path:line: message"``."""


def did_you_mean(word: str, choices) -> str:
    """``" (did you mean <x>?)"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean <{close[0]}>?)" if close else ""


def unknown_element(ctx: "Ctx", elem, parent: str, choices) -> BrokerConfigError:
    """The error for a child ``elem`` that ``<parent>`` does not have, with the closest of ``choices``."""
    return ctx.error(elem, f"unknown element <{local(elem)}> in <{parent}>{did_you_mean(local(elem), choices)}")


class Ctx:
    """Path and collected warnings while one file is parsed; typed value readers."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.warnings: list[str] = []

    def error(self, elem_or_line, message: str) -> BrokerConfigError:
        line = elem_or_line if isinstance(elem_or_line, int) else elem_or_line.line
        return BrokerConfigError(self.path, line, message)

    def warn(self, elem, message: str) -> None:
        self.warnings.append(f"{self.path}:{elem.line}: warning: {message}")

    # Element text ------------------------------------------------------------

    def text(self, elem, *, required: bool = True) -> str | None:
        """The stripped text of ``elem``; an error when required and empty."""
        value = (elem.text or "").strip()
        if "${" in value:
            raise self.error(elem, f"<{local(elem)}>: ${{...}} property substitution is not supported")
        if not value:
            if required:
                raise self.error(elem, f"<{local(elem)}> must not be empty")
            return None
        return value

    def value(self, elem, kind: str):
        """Parse ``elem``'s text as ``kind`` (see :func:`convert`)."""
        return convert(self, elem, f"<{local(elem)}>", self.text(elem), kind)

    def attr(self, elem, name: str, kind: str = "str", default=None, *, required: bool = False):
        """Attribute ``name`` of ``elem`` converted to ``kind``; ``default`` when absent."""
        raw = elem.attrib.get(name)
        if raw is None or (kind != "str" and raw.strip() == ""):
            if required:
                raise self.error(elem, f"<{local(elem)}> needs a {name}=\"...\" attribute")
            return default
        if "${" in raw:
            shown = "..." if "password" in name.lower() else raw   # never echo a password
            raise self.error(elem, f"{name}=\"{shown}\": ${{...}} property substitution is not supported")
        if kind == "str":
            if required and not raw.strip():
                raise self.error(elem, f"<{local(elem)}> {name}=\"\" must not be empty")
            return raw
        return convert(self, elem, f"<{local(elem)}> attribute {name}", raw.strip(), kind)

    def check_attrs(self, elem, known, ignored=frozenset()) -> None:
        """Refuse attributes outside ``known``; warn for those in ``ignored``."""
        for name in elem.attrib:
            if "}" in name:          # xsi:schemaLocation and friends
                continue
            if name in ignored:
                self.warn(elem, f"<{local(elem)}> attribute {name} is ignored by tdbroker")
            elif name not in known:
                hint = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
                tip = f" (did you mean {hint[0]}?)" if hint else ""
                raise self.error(elem, f"unknown attribute {name} on <{local(elem)}>{tip}")


_INT_RE = re.compile(r"^[+-]?\d+$")
#: Artemis byte notation (ByteUtil.convertTextBytes): digits, optional K/M/G with an
#: optional 'i', optional 'B', case-insensitive, all binary multiples.
_SIZE_RE = re.compile(r"^\s*(\d+)\s*(?:([kmg])i?)?b?\s*$", re.IGNORECASE)
_SIZE_UNITS = {None: 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}
#: Java int and long ranges (Artemis xsd:int / xsd:long).
INT_RANGE = (-(2 ** 31), 2 ** 31 - 1)
LONG_RANGE = (-(2 ** 63), 2 ** 63 - 1)
_BOOLS = {"true": True, "false": False, "1": True, "0": False}


def convert(ctx: Ctx, elem, what: str, raw: str, kind: str):
    """Convert ``raw`` to ``kind``: str, bool, int, long, size, routing, policy."""
    if kind == "str":
        return raw
    if kind == "bool":
        try:
            return _BOOLS[raw.lower()]
        except KeyError:
            raise ctx.error(elem, f"{what} must be true or false, got {raw!r}") from None
    if kind in ("int", "long"):
        lo, hi = INT_RANGE if kind == "int" else LONG_RANGE
        if not _INT_RE.match(raw):
            raise ctx.error(elem, f"{what} must be an integer, got {raw!r}")
        n = int(raw)
        if not lo <= n <= hi:
            raise ctx.error(elem, f"{what} is out of range ({lo}..{hi}), got {raw!r}")
        return n
    if kind == "size":
        if _INT_RE.match(raw):
            return int(raw)          # plain numbers, including -1 for "no limit"
        m = _SIZE_RE.match(raw)
        if not m:
            raise ctx.error(elem, f"{what} must be a byte size such as 10485760, 10M or 10MiB, got {raw!r}")
        return int(m.group(1)) * _SIZE_UNITS[m.group(2) and m.group(2).lower()]
    if kind == "routing":
        if raw.upper() not in ROUTING_TYPES:
            raise ctx.error(elem, f"{what} must be ANYCAST or MULTICAST, got {raw!r}")
        return raw.lower()
    if kind == "policy":
        if raw.upper() not in ADDRESS_FULL_POLICIES:
            raise ctx.error(elem, f"{what} must be one of {', '.join(ADDRESS_FULL_POLICIES)}, got {raw!r}")
        return raw.upper()
    raise AssertionError(f"unknown value kind {kind}")


# --- URIs --------------------------------------------------------------------

#: Artemis separates URI parameters with ';'; '&' (written &amp; in XML) is accepted too.
_PARAM_SPLIT = re.compile(r"[;&]")


def parse_tcp_uri(ctx: Ctx, elem, uri: str, what: str) -> tuple[str, int, dict]:
    """``tcp://HOST:PORT?k=v;k=v`` -> (host, port, params); HOST and PORT default as in Artemis."""
    try:
        parts = urllib.parse.urlsplit(uri.strip())
        port = parts.port
    except ValueError as exc:
        raise ctx.error(elem, f"{what} {uri!r} is not a valid URI: {exc}") from None
    if parts.scheme != "tcp":
        raise ctx.error(elem, f"{what} {uri!r} must start with tcp:// (got scheme {parts.scheme!r})")
    if parts.path not in ("", "/"):
        raise ctx.error(elem, f"{what} {uri!r} has an unexpected path {parts.path!r}")
    if port is None and parts.netloc.endswith(":"):
        raise ctx.error(elem, f"{what} {uri!r} has an empty port")
    params = {}
    for item in filter(None, _PARAM_SPLIT.split(parts.query)):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ctx.error(elem, f"{what} {uri!r}: query parameter {item!r} is not key=value")
        params[key] = urllib.parse.unquote(value)
    host = parts.hostname or DEFAULT_ACCEPTOR_HOST
    return host, DEFAULT_ACCEPTOR_PORT if port is None else port, params


# --- the XML loader ----------------------------------------------------------

class LinedElement(ET.Element):
    """An Element that remembers the line of its start tag (``.line``)."""

    line = 0


class _LineTreeBuilder(ET.TreeBuilder):
    """TreeBuilder that stamps each element with the expat parser's current line."""

    def __init__(self) -> None:
        super().__init__(element_factory=LinedElement)
        self.expat = None            # set once the parser exists

    def start(self, tag, attrs):
        elem = super().start(tag, attrs)
        elem.line = self.expat.CurrentLineNumber
        return elem


def load_tree(text: str, path: str) -> LinedElement:
    """Parse ``text`` with defusedxml (no DTDs, entities or external references)."""
    builder = _LineTreeBuilder()
    # forbid_dtd: Artemis configurations never need a DTD, and refusing it outright
    # also refuses entity-expansion bombs before any entity is declared.
    parser = DefusedXMLParser(target=builder, forbid_dtd=True, forbid_entities=True,
                              forbid_external=True)
    builder.expat = parser.parser
    try:
        parser.feed(text)
        return parser.close()
    except DefusedXmlException as exc:
        kind = type(exc).__name__
        raise BrokerConfigError(path, parser.parser.CurrentLineNumber,
                                f"refused unsafe XML ({kind}): DTDs, entity declarations and "
                                f"external references are not allowed in broker.xml") from None
    except ET.ParseError as exc:
        line = exc.position[0] if getattr(exc, "position", None) else 0
        msg = str(exc).split(": line ")[0]
        raise BrokerConfigError(path, line, f"malformed XML: {msg}") from None
    except (LookupError, ValueError, UnicodeError) as exc:
        # The declared encoding is one Python has no codec for, is not a text codec, or the bytes do
        # not decode in it: expat hands that back as these, not as a ParseError.
        line = parser.parser.CurrentLineNumber or 1
        raise BrokerConfigError(path, line, f"unusable XML encoding: {exc}") from None


def split_tag(tag: str) -> tuple[str, str]:
    """``"{ns}name"`` -> ``("ns", "name")``; no namespace -> ``("", name)``."""
    if tag.startswith("{"):
        ns, _, name = tag[1:].partition("}")
        return ns, name
    return "", tag


def local(elem) -> str:
    """The element's name without its namespace."""
    return split_tag(elem.tag)[1]


def children(ctx: Ctx, elem, allowed=CORE_NAMESPACES):
    """Yield ``(name, child)`` for the element children of ``elem``, checking namespaces."""
    for child in elem:
        if not isinstance(child.tag, str):   # comments / processing instructions
            continue
        cns, name = split_tag(child.tag)
        if cns == XINCLUDE_NS:
            raise ctx.error(child, f"<xi:{name}> (XInclude) is not supported; put the included "
                                   "elements into broker.xml itself")
        if cns not in allowed:
            raise ctx.error(child, f"element <{name}> in namespace {cns!r} is not allowed in "
                                   f"<{local(elem)}> (expected namespace {CORE_NS!r})")
        yield name, child


def has_text(elem) -> bool:
    """True when ``elem`` has non-whitespace text of its own."""
    return bool((elem.text or "").strip())
