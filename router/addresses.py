"""Addresses: how a link's or a message's address becomes a routing-table key, and what is bound to it.

Keys follow Qpid Dispatch's one-letter classes (1.19 src/iterator.c) so that management and the inter-router
protocol can show and exchange them unchanged: ``M<phase><addr>`` for mobile addresses, ``L<name>`` for
router-local ones (``_local/x``, ``_topo/0/<this router>/x``, ``_topo/0/all/x``), ``R<router>`` for
another router's topological addresses.
"""

from __future__ import annotations

from dataclasses import dataclass

from router.patterns import PatternTable

MULTICAST = "multicast"
CLOSEST = "closest"
BALANCED = "balanced"
UNAVAILABLE = "unavailable"
DISTRIBUTIONS = (MULTICAST, CLOSEST, BALANCED, UNAVAILABLE)

# Bounded memo of message `to` strings to keys: anonymous senders repeat a handful of addresses.
TO_KEY_CACHE_LIMIT = 10_000


@dataclass(frozen=True)
class AddressSemantics:
    """What the best-matching ``address`` configuration says about an address (or the defaults)."""

    distribution: str
    in_phase: int = 0
    out_phase: int = 0
    waypoint: bool = False
    pattern: str | None = None  # the configured pattern that matched, for management


def strip_scheme(address: str) -> str:
    """`amqp://host:port/addr`, `amqp:/addr` and `addr` all reduce to `addr` (Dispatch's no-host view)."""
    if address.startswith("amqp:"):
        rest = address[5:]
        if rest.startswith("//"):
            slash = rest.find("/", 2)
            return "" if slash < 0 else rest[slash + 1:]
        return rest[1:] if rest.startswith("/") else rest
    return address


class AddressParser:
    """Turns address strings into routing keys for one router id."""

    def __init__(self, router_id: str):
        self.router_id = router_id
        self._to_cache: dict[str, str] = {}

    def parse(self, address: str) -> tuple[str, str]:
        """(class, name): ('M', 'queue1'), ('L', 'temp.x'), ('R', 'Router.B')."""
        a = strip_scheme(address)
        if a.startswith("_local/"):
            return "L", a[7:]
        if a.startswith("_topo/"):
            parts = a.split("/", 3)
            if len(parts) == 4:
                _, _area, router, rest = parts
                if router in (self.router_id, "all"):
                    return "L", rest
                return "R", router
        if a.startswith("_edge/"):
            parts = a.split("/", 2)
            if parts[1] == self.router_id:
                return "L", parts[2] if len(parts) == 3 else ""
            return "H", parts[1]  # an edge router's addresses, as interiors key them
        return "M", a

    def key(self, address: str, phase: int = 0) -> str:
        klass, name = self.parse(address)
        if klass == "M":
            return f"M{phase}{name}"
        return klass + name

    @property
    def memoised(self) -> int:
        """How many ``to`` strings the memo holds (at most TO_KEY_CACHE_LIMIT)."""
        return len(self._to_cache)

    def key_for_to(self, to: str) -> str:
        """Key for a message's `to` (phase 0), memoised because it runs per anonymous message."""
        k = self._to_cache.get(to)
        if k is None:
            if len(self._to_cache) >= TO_KEY_CACHE_LIMIT:
                self._to_cache.clear()
            k = self._to_cache[to] = self.key(to)
        return k


class AddressConfigTable:
    """The configured ``address`` entities, looked up by best pattern match (token trie, not a scan)."""

    def __init__(self, default_distribution: str = BALANCED):
        self.default_distribution = default_distribution
        self._table: PatternTable = PatternTable()

    def add(self, entity) -> None:
        """Add one ``address`` entity (prefix or pattern). Raises ValueError on a duplicate."""
        waypoint = bool(entity.get("waypoint"))
        in_phase = entity.get("ingressPhase")
        out_phase = entity.get("egressPhase")
        sem = AddressSemantics(
            distribution=entity.get("distribution") or self.default_distribution,
            in_phase=0 if in_phase is None else int(in_phase),
            out_phase=(1 if waypoint else 0) if out_phase is None else int(out_phase),
            waypoint=waypoint,
            pattern=entity.get("pattern") or entity.get("prefix"),
        )
        if entity.get("prefix") is not None:
            self._table.add_prefix(entity["prefix"], sem)
        else:
            self._table.add(entity["pattern"], sem)

    def remove(self, entity) -> None:
        if entity.get("prefix") is not None:
            self._table.remove_prefix(entity["prefix"])
        else:
            self._table.remove(entity["pattern"])

    def semantics(self, name: str) -> AddressSemantics:
        """Semantics for a mobile address name (no class, no phase)."""
        sem = self._table.lookup(name)
        if sem is None:
            return AddressSemantics(distribution=self.default_distribution)
        return sem


class Address:
    """One routing-table entry: the links bound to a key, and its forwarding state.

    ``rlinks`` are outgoing links (consumers) the router delivers to; ``inlinks`` are producer links
    bound to the key, which get credit only while there is a destination.
    """

    __slots__ = (
        "key", "name", "phase", "distribution", "rlinks", "inlinks", "rr",
        "deliveries_ingress", "deliveries_egress", "deliveries_dropped", "pattern",
        # mesh: routers with a destination for this key (id -> True), the distinct data links towards
        # them (cheapest first), and a router-internal endpoint (e.g. $management) that consumes it
        "rnodes", "remote", "handler", "deliveries_transit", "deliveries_to_container",
        "deliveries_from_container",
        # balanced: unsettled deliveries of this address sent to each neighbour router (connection ->
        # count; Qpid Dispatch's outstanding_deliveries), which weigh that neighbour's data link
        "outstanding", "remote_costs", "closest_remotes",
    )

    def __init__(self, key: str, name: str, phase: int, distribution: str, pattern: str | None = None):
        self.key = key
        self.name = name
        self.phase = phase
        self.distribution = distribution
        self.pattern = pattern
        self.rlinks: list = []
        self.inlinks: set = set()
        self.rr = 0
        self.deliveries_ingress = 0
        self.deliveries_egress = 0
        self.deliveries_dropped = 0
        self.deliveries_transit = 0
        self.deliveries_to_container = 0
        self.deliveries_from_container = 0
        self.rnodes: dict = {}
        self.remote: list = []
        self.outstanding: dict = {}
        self.remote_costs: dict = {}  # data link in ``remote`` -> path cost to the cheapest router behind it
        # closest: the data link towards each router at the least cost (one entry per router, by id)
        self.closest_remotes: list = []
        self.handler = None

    @property
    def has_destination(self) -> bool:
        return bool(self.rlinks or self.remote or self.handler is not None)

    @property
    def unused(self) -> bool:
        return not self.rlinks and not self.inlinks and not self.rnodes and self.handler is None

    def __repr__(self) -> str:
        return f"<Address {self.key} {self.distribution} out={len(self.rlinks)} in={len(self.inlinks)}>"


class AddressTable(dict):
    """The routing table: key -> :class:`Address`. A dict (management and the forwarder read it as one)
    with the two writes every part of the router makes the same way."""

    def bind(self, key: str, name: str, distribution: str, phase: int = 0, pattern: str | None = None) -> Address:
        """The entry for ``key``, created with these semantics when there is none."""
        addr = self.get(key)
        if addr is None:
            addr = self[key] = Address(key, name, phase, distribution, pattern)
        return addr

    def discard_unused(self, addr: Address) -> None:
        """Forget ``addr`` once nothing is bound to it (and it is still this table's entry for its key)."""
        if addr.unused and self.get(addr.key) is addr:
            del self[addr.key]
