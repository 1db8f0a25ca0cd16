"""tdbroker's configuration objects (what :mod:`broker.config` parses broker.xml into) and Artemis'
address wildcards: :func:`artemis_match` and the specificity order :meth:`BrokerConfig.settings_for`
merges ``<address-setting>`` elements by."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields

from . import xmlschema as xs
from .largemessage import DEFAULT_DIRECTORY_NAME as LARGE_DIRECTORY_NAME
from .largemessage import DEFAULT_MIN_LARGE_MESSAGE_SIZE

#: Artemis' default wildcard syntax (``<wildcard-addresses>`` is not supported).
DELIMITER = "."
ANY_WORDS = "#"
SINGLE_WORD = "*"


def check_wildcard_words(ctx, elem, what: str, pattern: str) -> None:
    """Refuse a pattern where ``#`` or ``*`` is part of a word (Artemis matches them only as whole words);
    ``ctx`` is the parse's :class:`broker.xmlschema.Ctx`."""
    for word in pattern.split(DELIMITER):
        if word not in (ANY_WORDS, SINGLE_WORD) and (ANY_WORDS in word or SINGLE_WORD in word):
            raise ctx.error(elem, f"{what} {pattern!r}: '#' and '*' must stand for a whole word "
                                  f"between '{DELIMITER}' separators")


# --- the configuration objects ----------------------------------------------

@dataclass
class Acceptor:
    """One ``<acceptor>``: where tdbroker listens for AMQP connections."""

    name: str
    host: str
    port: int                 # 0 = ephemeral (tests)
    protocols: tuple          # upper-case protocol names; always includes "AMQP"
    params: dict              # the other URI query parameters, as strings
    line: int
    connections_allowed: int = -1   # Artemis' connectionsAllowed: -1 = no limit
    handshake_timeout: float = 10.0  # Artemis' handshake-timeout (seconds): 0 = none
    tls: object = None  # wire.tls.ServerTls from sslEnabled=true (TLS required), None = plaintext
    auto_start: bool = True  # Artemis' autoStart: False = not listening until started (broker/acceptors.py)
    #: Artemis' amqpMinLargeMessageSize (bytes): a durable message at least this long is stored as a large
    #: message, a file of its own (broker/largemessage.py); -1 = never.
    min_large_message_size: int = DEFAULT_MIN_LARGE_MESSAGE_SIZE


@dataclass
class QueueConfig:
    """One ``<queue>`` declared under an address's ``<anycast>`` or ``<multicast>``."""

    name: str
    address: str
    routing_type: str         # "anycast" | "multicast"
    durable: bool
    max_consumers: int        # -1 = unlimited
    filter: str | None        # a JMS selector: only matching messages enter the queue (broker/selector.py)
    line: int


@dataclass
class AddressConfig:
    """One ``<address>`` with the routing types it declares and its queues."""

    name: str
    routing_types: set        # subset of {"anycast", "multicast"}
    queues: list              # list[QueueConfig]
    line: int


@dataclass
class AddressSettings:
    """One ``<address-setting match=...>``; a field is None when the element left it unset.

    :meth:`BrokerConfig.settings_for` returns a merged instance with every field
    filled in; its ``match`` is the most specific matching pattern (None when no
    setting matched and only defaults apply) and ``line`` is that setting's line.
    """

    match: str | None = None
    dead_letter_address: str | None = None
    expiry_address: str | None = None
    expiry_delay: int | None = None
    max_delivery_attempts: int | None = None
    redelivery_delay: int | None = None
    auto_create_queues: bool | None = None
    auto_create_addresses: bool | None = None
    auto_delete_queues: bool | None = None
    default_queue_routing_type: str | None = None     # "anycast" | "multicast"
    default_address_routing_type: str | None = None   # "anycast" | "multicast"
    max_size_bytes: int | None = None
    address_full_policy: str | None = None            # PAGE | DROP | FAIL | BLOCK
    page_size_bytes: int | None = None                # size of one page file (paging)
    line: int = 0


#: AddressSettings fields that hold settings (not match/line), in declaration order.
SETTING_FIELDS = tuple(f.name for f in fields(AddressSettings) if f.name not in ("match", "line"))
#: Default for each setting field (from the table in broker.xmlschema).
SETTING_DEFAULTS = {fld: default for fld, _kind, default in xs.ADDRESS_SETTING_FIELDS.values()}


@dataclass
class BrokerConnectionElement:
    """A child of ``<amqp-connection>``: peer, sender, receiver, mirror or federation.

    ``attrs`` holds the element's attributes: for ``mirror`` converted and with
    defaults filled in (plus ``properties`` from ``<property key value>``), for
    ``federation`` the raw attributes plus ``xml`` (the element as text; federation
    is accepted and stored, and implemented later).
    """

    kind: str                 # "peer" | "sender" | "receiver" | "mirror" | "federation"
    address_match: str | None
    queue_name: str | None
    attrs: dict
    line: int


@dataclass
class BrokerConnection:
    """One ``<amqp-connection>``: an outgoing connection tdbroker opens (e.g. to a router)."""

    name: str
    uri: str                  # the attribute as written, password parameters shown as *** (management, logs)
    host: str                 # of the first URI
    port: int
    user: str | None          # None = anonymous
    password: str | None = field(repr=False)  # a repr can reach a log line: never with the password
    retry_interval_ms: int
    reconnect_attempts: int   # -1 = forever
    auto_start: bool
    elements: list            # list[BrokerConnectionElement]
    line: int
    params: dict = field(default_factory=dict)          # query parameters of the first URI
    alternate_uris: list = field(default_factory=list)  # after '#', tried in turn on retry
    tls: list = field(default_factory=list)  # wire.tls.ClientTls or None per URI: the first, then alternates
    #: Where the password came from: broker.credentials.FROM_CONFIG (the password attribute),
    #: FROM_STORE (the credentials store beside broker.xml), or None (no login: ANONYMOUS).
    password_source: str | None = None


@dataclass
class FlowRecordsConfig:
    """``<flow-records>``: where and how much the broker records for flow analytics (tdbroker only)."""

    directory: str
    sample: float             # fraction of messages recorded, 0 < sample <= 1
    rotate_mb: int
    line: int


@dataclass
class BrokerConfig:
    """A parsed broker.xml.  ``warnings`` lists ``"FILE:LINE: warning: ..."`` strings."""

    path: str
    name: str | None
    persistence_enabled: bool
    journal_directory: str
    journal_file_size: int
    acceptors: list
    addresses: list
    address_settings: list
    broker_connections: list
    warnings: list
    journal_sync_transactional: bool = xs.DEFAULT_JOURNAL_SYNC
    journal_sync_non_transactional: bool = xs.DEFAULT_JOURNAL_SYNC
    flow_records: FlowRecordsConfig | None = None
    global_max_size: int | None = None  # bytes over every address; None or -1 = no global limit
    global_max_size_line: int = 0
    paging_directory: str | None = None  # None: "paging" beside the journal directory
    large_messages_directory: str | None = None  # None: "large-messages" beside the journal directory
    max_disk_usage: int = xs.DEFAULT_MAX_DISK_USAGE  # percent of the journal's file system; -1 = no check
    min_disk_free: int = -1  # bytes that must stay free on the journal's file system; -1 = no check
    disk_scan_period_ms: int = xs.DEFAULT_DISK_SCAN_PERIOD_MS
    #: <security-enabled>: True when logins are required (set true, or absent with a users file beside
    #: broker.xml), None when absent without a users file (open, warned at start), False when set false.
    security_enabled: bool | None = None
    #: broker.security.BrokerSecurity (users and roles) when security_enabled is True.
    security: object = field(default=None, repr=False)
    #: ActiveMQ networks of brokers (broker/netconfig.py): list[NetworkConnector], the broker attribute
    #: networkConnectorStartAsync, and list[BridgeFilterPolicy] from <destinationPolicy>.
    network_connectors: list = field(default_factory=list)
    network_connector_start_async: bool = False
    bridge_policies: list = field(default_factory=list)
    #: Artemis core federation (broker/fedconfig.py): <connectors> (name -> Connector), <discovery-groups>
    #: (name -> DiscoveryGroup), <broadcast-groups> (name -> BroadcastGroup), <federations> (list[Federation]).
    connectors: dict = field(default_factory=dict)
    discovery_groups: dict = field(default_factory=dict)
    broadcast_groups: dict = field(default_factory=dict)
    federations: list = field(default_factory=list)
    #: <diverts> (broker/diverts.py): list[DivertConfig].
    diverts: list = field(default_factory=list)

    @property
    def paging_path(self) -> str:
        """Where page files go (see :data:`broker.xmlschema.DEFAULT_PAGING_DIRECTORY_NAME`)."""
        if self.paging_directory:
            return self.paging_directory
        parent = os.path.dirname(os.path.normpath(self.journal_directory))
        return os.path.join(parent, xs.DEFAULT_PAGING_DIRECTORY_NAME)

    @property
    def large_messages_path(self) -> str:
        """Where large message files go (see :data:`broker.largemessage.DEFAULT_DIRECTORY_NAME`)."""
        if self.large_messages_directory:
            return self.large_messages_directory
        parent = os.path.dirname(os.path.normpath(self.journal_directory))
        return os.path.join(parent, LARGE_DIRECTORY_NAME)

    def settings_for(self, address: str) -> AddressSettings:
        """The merged settings for ``address``, with Artemis' defaults for unset fields."""
        matching = [s for s in self.address_settings if artemis_match(s.match, address)]
        matching.sort(key=functools.cmp_to_key(lambda a, b: match_specificity_cmp(a.match, b.match)))
        merged = {}
        for name in SETTING_FIELDS:
            merged[name] = next((getattr(s, name) for s in matching if getattr(s, name) is not None),
                                SETTING_DEFAULTS[name])
        best = matching[0] if matching else None
        return AddressSettings(match=best.match if best else None, line=best.line if best else 0,
                               **merged)

    def queues(self) -> list:
        """Every configured queue, in file order."""
        return [q for a in self.addresses for q in a.queues]

    def address(self, name: str) -> AddressConfig | None:
        """The configured address called ``name``, or None."""
        return next((a for a in self.addresses if a.name == name), None)


# --- wildcards ---------------------------------------------------------------

def artemis_match(pattern: str, address: str) -> bool:
    """True when ``address`` matches the Artemis wildcard ``pattern``.

    Words are separated by ``.``; ``*`` matches exactly one non-empty word and
    ``#`` zero or more words, so ``a.#`` matches ``a``, ``a.b`` and ``a.b.c``
    but not ``ab``.  Other words match literally.
    """
    words = address.split(DELIMITER)
    reachable = {0}            # positions in ``words`` reachable after each pattern word
    for pw in pattern.split(DELIMITER):
        nxt: set[int] = set()
        for j in reachable:
            if pw == ANY_WORDS:
                nxt.update(range(j, len(words) + 1))
            elif j < len(words) and (words[j] != "" if pw == SINGLE_WORD else words[j] == pw):
                nxt.add(j + 1)
        if not nxt:
            return False
        reachable = nxt
    return len(words) in reachable


def match_specificity_cmp(a: str, b: str) -> int:
    """Negative when ``a`` is more specific than ``b`` (Artemis' ordering).

    A pattern without ``#`` beats one with it (two with ``#``: the longer wins);
    then one without ``*`` beats one with it (two with ``*``: compared word by
    word, a literal word beats ``*``, and more words win); otherwise the shorter.
    """
    a_any, b_any = ANY_WORDS in a, ANY_WORDS in b
    if a_any != b_any:
        return 1 if a_any else -1
    if a_any:
        return len(b) - len(a)
    a_one, b_one = SINGLE_WORD in a, SINGLE_WORD in b
    if a_one != b_one:
        return 1 if a_one else -1
    if a_one:
        aw, bw = a.split(DELIMITER), b.split(DELIMITER)
        for i, left in enumerate(aw):
            if i >= len(bw):
                return -1
            if (left == SINGLE_WORD) != (bw[i] == SINGLE_WORD):
                return 1 if left == SINGLE_WORD else -1
    return len(a) - len(b)
