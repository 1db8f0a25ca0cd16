"""Forwarding beyond this router's own links: neighbour routers (the mesh) and router-internal endpoints.

The standalone hot path in :mod:`router.forwarder` stays as it was; an address takes this path only when
other routers have destinations for it (``addr.remote``), when a router-internal endpoint consumes it
(``addr.handler``, e.g. ``$management``), or when the message came from a neighbour router.

Mesh semantics (Qpid Dispatch 1.19 src/router_core/forwarder.c, src/amqp.c,
python/qpid_dispatch_internal/router/):

* A message leaving for a neighbour carries ``x-opt-qd.ingress`` (kept if present, else this router),
  ``x-opt-qd.trace`` (received list + this router), ``x-opt-qd.to`` for link-addressed producers and
  ``x-opt-qd.phase`` when the phase is not 0. A message leaving for a client or broker has none of them.
* Never back to a router already in the trace or the connection it came from; a message whose trace is
  longer than radius + 1 is looping and is released.
* closest: a local consumer first, else the cheapest router. balanced: the least backlog, remote links
  weighted by their cost. multicast: every local consumer plus one copy per next-hop connection that is
  on the shortest path from the message's ingress router (valid origins).
* The routing engine (:mod:`router.mesh`) tells us, through the MeshListener methods below, which routers
  have destinations for which keys and which connection leads to each router.

Longer than ~600 lines on purpose: arrival from a neighbour, the special forwarding path and the remote
routes it reads are one class whose per-message methods call each other directly, as in the forwarder.
"""

from __future__ import annotations

import logging
from typing import Protocol

from wire import raw
from wire.annotations import (SECTION_CACHE_LIMIT, RouterAnnotations, insert_router_section, router_section,
                              set_router_annotations, split_router_annotations)
from wire.codec import CodecError, message_to
from wire.header import DEFAULT_PRIORITY, read_header
from router.addresses import BALANCED, CLOSEST, MULTICAST, UNAVAILABLE, Address, AddressConfigTable, AddressParser
from router.forwarder import Forwarder
from router.links import InDelivery
from router.mesh import protocol as P

log = logging.getLogger("router.mesh")

ACCEPTED = raw.ACCEPTED
RELEASED = raw.RELEASED

# Treatment hints carried in MAU (router/mesh/protocol.py, after Qpid Dispatch 1.19
# include/qpid/dispatch/router.h): code -> our distribution, and back.
HINT_DISTRIBUTION = {code: dist for code, dist in P.HINT_DISTRIBUTIONS.items()
                     if code in (P.HINT_MULTICAST_FLOOD, P.HINT_MULTICAST_ONCE, P.HINT_ANYCAST_CLOSEST,
                                 P.HINT_ANYCAST_BALANCED)}
DISTRIBUTION_HINT = {MULTICAST: P.HINT_MULTICAST_ONCE, CLOSEST: P.HINT_ANYCAST_CLOSEST,
                     BALANCED: P.HINT_ANYCAST_BALANCED}

_EMPTY_RA = RouterAnnotations()
# Dispatch has ten priority data links (0..9); higher message priorities share the top one.
MAX_PRIORITY = P.DATA_LINK_PRIORITIES - 1


def _router_section_at(msg: bytes) -> int:
    """Where a message-annotations section encoded as a map8 starts when it is the first section or
    follows a header encoded as list0 or list8 (what routers send on: the section is theirs), else -1.
    The section's bytes are only looked up, never parsed here: unknown bytes take the full path."""
    n = len(msg)
    if n < 6 or msg[0] != 0 or msg[1] != 0x53:
        return -1
    pos = 0
    if msg[2] == 0x70:  # a header first
        code = msg[3]
        if code == 0x45:
            pos = 4
        elif code == 0xC0:
            pos = 5 + msg[4]
        else:
            return -1
        if n < pos + 6 or msg[pos] != 0 or msg[pos + 1] != 0x53:
            return -1
    if msg[pos + 2] == 0x72 and msg[pos + 3] == 0xC1:
        return pos
    return -1


class Uplink(Protocol):
    """What mesh forwarding asks of an edge router's uplink (router/edge.py's EdgeUplink)."""

    uplink: object  # the RouterConnection to the interior, or None

    def fallback(self, ind: InDelivery) -> bool: ...


class LocalSource:
    """Stands in for the incoming link of messages the router itself sends (management replies)."""

    closed = True  # nothing to give credit back to
    id = None
    address = None
    conn = None
    inter_router = False
    from_edge = False
    engine = None
    name = "(router)"

    def __init__(self) -> None:
        self.outstanding = 0


class MeshForwarding:
    """The special forwarding path of one router (:class:`router.forwarder.SpecialPath`): messages from
    and to neighbour routers, router-internal endpoints, the edge uplink; and the routes the routing
    engine reports (the router relays its :class:`router.mesh.engine.MeshListener` calls here).

    It forwards through ``forwarder`` (queues, outcomes, credit) and keeps addresses in the router's
    ``addresses`` table; ``edge`` is the edge uplink in edge mode, else None.
    """

    def __init__(self, router_id: str, forwarder: Forwarder, *, addresses, parser: AddressParser,
                 address_config: AddressConfigTable, edge: Uplink | None = None):
        self.id = router_id
        self.forwarder = forwarder
        self.addresses = addresses  # router.addresses.AddressTable
        self.parser = parser
        self.address_config = address_config
        self.edge = edge
        self.next_hops: dict = {}  # router id -> RouterConnection of the neighbour to send through
        self.costs: dict = {}
        self.valid_origins: dict = {}
        self.radius = 0
        self._local_source = LocalSource()
        self.deliveries_transit = 0
        self.deliveries_radius_dropped = 0
        # The router-annotation sections this router sends on (see annotated): for messages entering the
        # mesh here by (to-override, phase); for messages from a neighbour by (arrival section,
        # to-override, phase).
        self._ingress_sections: dict = {}
        self._transit_sections: dict = {}
        # The same ingress sections by the key of the mobile address a producer's link is attached to
        # (forward_special's shortcut for link-addressed producers: the key says both name and phase).
        self._ingress_by_key: dict = {}
        # Router-only sections that arrived in front of a message -> (their annotations, the routing key
        # of their to-override): see _remember_arrival.
        self._arrivals: dict = {}

    # -- router-internal endpoints ------------------------------------------------------------------
    def add_local_endpoint(self, name: str, handler) -> None:
        """Deliver messages for ``name``, ``_local/name`` and ``_topo/0/<this router>/name`` to
        ``handler(msg_bytes)``. They are accepted once the handler returns (even if it raised)."""
        for key in ("L" + name, "M0" + name):
            addr = self.addresses.bind(key, name, CLOSEST)
            addr.handler = handler
            self.forwarder.destination_appeared(addr)

    def send_local(self, msg: bytes) -> bool:
        """Send a message from the router itself (pre-settled), routed by its ``to``. False: no route."""
        try:
            to = message_to(msg)
        except CodecError as exc:
            log.warning("router-internal message not sent: %s", exc)
            return False
        addr = self.addresses.get(self.parser.key_for_to(to)) if to else None
        if addr is None or not addr.has_destination:
            log.debug("router-internal message to %s dropped: no route", to)
            return False
        src = self._local_source
        src.outstanding += 1
        ind = InDelivery(None, src, msg)
        forwarder = self.forwarder
        forwarder.forward(ind, addr)
        forwarder.on_batch_end()
        return True

    # -- arrival from a neighbour -----------------------------------------------------------------
    def mesh_message_in(self, ind: InDelivery, msg: bytes) -> None:
        """A message from a neighbour router's data link: route by its annotations. ``ind.msg`` becomes
        the message without them (for local consumers); ``ind.ra`` keeps them for the next router."""
        link_addr = ind.link.address  # None on router data links (anonymous)
        if link_addr is None and type(msg) is bytes and len(msg) > 5:
            if msg[2] == 0x72 and msg[3] == 0xC1 and msg[0] == 0 and msg[1] == 0x53:
                pos = 0  # no header: the common form, checked inline
            else:
                pos = _router_section_at(msg)
            if pos >= 0:  # the mesh's common form: a router-only section first (see _remember_arrival)
                send = pos + 5 + msg[pos + 4]
                known = self._arrivals.get(msg[pos:send])
                if known is not None:
                    ind.ra, key = known
                    ind.msg = msg[:pos] + msg[send:] if pos else msg[send:]
                    addr = self.addresses.get(key)
                    if addr is None:
                        self.forwarder.no_route(ind, None)
                        return
                    self.forward_special(ind, addr)
                    return
        try:
            ra, stripped = split_router_annotations(msg, area_names=True)  # "0/A" -> "A", as Dispatch names
            if ra is None:
                # None from a client (a trusting connection) means "entered the network here"; from
                # a router it means an ingress router that set nothing, which is still a mesh arrival.
                ra = _EMPTY_RA if ind.link.inter_router else None
            elif self.edge is not None and (ra.trace is not None or ra.ingress is not None):
                # What came down an edge's uplink: an edge router neither reads nor passes on trace and
                # ingress (Dispatch 1.19 router_node.c router_annotate_message), only to and phase.
                ra = RouterAnnotations(to_override=ra.to_override, phase=ra.phase)
            to = None if link_addr is not None else \
                (ra.to_override if ra is not None else None) or message_to(stripped)
        except CodecError as exc:
            self.forwarder.reject(ind, "amqp:decode-error", f"malformed message: {exc}")
            return
        ind.ra = ra
        ind.msg = stripped
        if link_addr is not None:
            addr = link_addr  # a targeted link (stripAnnotations out/no) routes by its own address
        elif not to:
            addr = None
        elif ra is not None and ra.phase:
            addr = self.addresses.get(self.parser.key(to, ra.phase))
        else:
            key = self.parser.key_for_to(to)  # memoised: addresses repeat
            addr = self.addresses.get(key)
            if ra is not None and ra.section is not None and ra.to_override and self.edge is None:
                self._remember_arrival(msg, ra, key)
        if addr is None:
            self.forwarder.no_route(ind, None)
            return
        self.forward_special(ind, addr)

    def _remember_arrival(self, msg: bytes, ra: RouterAnnotations, key: str) -> None:
        """Remember what a router-only section at the front of a message (or after its header) says and
        the routing key of its ``x-opt-qd.to``: the next message with the same bytes there is routed
        without a parse (the same section recurs for every message of an address and path; the key
        depends on ``to`` alone; the address is looked up each time, as entries come and go). Only
        sections without a phase, from a router (not an edge's uplink view)."""
        section = ra.section
        if ra.phase or type(msg) is not bytes:
            return
        pos = _router_section_at(msg)
        if pos < 0 or not msg.startswith(section, pos):
            return
        if len(self._arrivals) >= SECTION_CACHE_LIMIT:
            self._arrivals.clear()
        self._arrivals[section] = (ra, key)

    def unaddressed(self, ind: InDelivery, to: str | None) -> None:
        """A message from an anonymous link whose ``to`` has no entry here: up the edge uplink when there
        is one, else nowhere."""
        edge = self.edge
        if edge is None or not edge.fallback(ind):
            self.forwarder.no_route(ind, to)

    # -- the special forwarding path --------------------------------------------------------------
    def forward_special(self, ind: InDelivery, addr: Address) -> None:
        handler = addr.handler
        if handler is not None:
            self._to_handler(ind, addr, handler)
            return
        ra = ind.ra
        rlinks = addr.rlinks
        remote = addr.remote
        if ind.link.from_edge:
            came_up = ind.link.conn
            rlinks = [ol for ol in rlinks if ol.conn is not came_up]
        if ra is not None:
            trace = ra.trace or ()
            if len(trace) > self.radius + 1:
                self.deliveries_radius_dropped += 1
                self.forwarder.no_route(ind, None)
                return
            came_from = ind.link.conn
            if remote:  # only routers, never back where it came from nor to one it has crossed
                remote = [ol for ol in remote if ol.inter_router and ol.conn is not came_from
                          and ol.conn.mesh.peer_id not in trace]
        elif self.edge is not None and remote and ind.link.conn is self.edge.uplink:
            remote = []  # never echo what came down the uplink
        if not rlinks and not remote:
            self.forwarder.no_route(ind, addr.name)
            return
        dist = addr.distribution
        if dist == MULTICAST:
            if remote and ra is not None and ra.ingress and ra.ingress != self.id:
                remote = self._valid_for_origin(addr, remote, ra.ingress)
            targets = list(rlinks) + remote
            if not targets:
                self.forwarder.no_route(ind, addr.name)
                return
            ind.multicast = True
        elif dist == UNAVAILABLE:
            self.forwarder.reject(ind, "amqp:not-found", f"address {addr.name} is unavailable")
            return
        elif dist == CLOSEST:
            if rlinks:
                targets = [rlinks[addr.rr % len(rlinks)]]
                addr.rr += 1
            else:
                targets = [self._closest_remote(addr, remote)]
        elif not remote and len(rlinks) == 1:
            targets = rlinks  # one local consumer: nothing to weigh
        elif not rlinks and len(remote) == 1 and remote[0].inter_router:
            # One neighbour: nothing to weigh now, but what is outstanding there weighs later choices.
            targets = remote
            if ind.ptr is not None:
                conn = ind.remote_conn = remote[0].conn
                ind.remote_addr = addr
                outstanding = addr.outstanding
                outstanding[conn] = outstanding.get(conn, 0) + 1
        else:
            chosen = self._pick_balanced_mesh(ind, addr, rlinks, remote)
            if chosen is None:  # no router behind these links is reached through here from its ingress
                self.forwarder.no_route(ind, addr.name)
                return
            targets = [chosen]
        if ra is None:
            addr.deliveries_ingress += 1
        # Transit: each copy sent to another router, counted by the router that sends it (Dispatch 1.19
        # forwarder.c), so every router along a path counts it, the ingress router too.
        to_routers = 0
        annotate = False
        for ol in targets:
            if ol.inter_router:
                to_routers += 1
            if ol.annotate_out:
                annotate = True
        if to_routers:
            addr.deliveries_transit += to_routers
            self.deliveries_transit += to_routers
        if annotate:
            msg = ind.msg
            out = None
            if ra is None and ind.link.address is addr:
                # Entering the mesh from a producer's link to this address: its section depends on the
                # address alone (see annotated), so it is looked up by the address's key.
                section = self._ingress_by_key.get(addr.key)
                if section is not None:
                    out = insert_router_section(msg, section)
            ind.mesh_msg = out if out is not None else self.annotated(ind, addr, msg)
            if msg[2:3] == b"\x70":  # a header: its priority picks the data link (§4.2)
                targets = self._by_priority(targets, msg)
        if len(targets) == 1:  # the common case, as Forwarder.forward queues one copy (no call per message)
            ol = targets[0]
            ind.copies += 1
            ind.buffered += 1
            ol.undelivered.append(ind)
            ol.fresh += 1
            if not ol.dirty:
                ol.dirty = True
                self.forwarder.mark_dirty(ol)
            return
        self.forwarder.enqueue(ind, targets)

    @staticmethod
    def _by_priority(targets: list, msg: bytes) -> list:
        try:
            prio = min(read_header(msg).priority, MAX_PRIORITY)
        except CodecError:
            return targets
        if prio == DEFAULT_PRIORITY:
            return targets
        return [ol.conn.mesh.data_links.get(prio, ol) if ol.inter_router else ol for ol in targets]

    def annotated(self, ind: InDelivery, addr: Address, msg: bytes) -> bytes:
        """``msg`` with the router annotations it leaves for a neighbour router with.

        The section they make is the same for every message of an address and path, so it is built once
        per (arrival section or ingress, to-override, phase) and then only put in front of the message
        (a transit router appends itself to the trace without re-encoding it per message). A message
        with user annotations has them merged (set_router_annotations)."""
        ra = ind.ra
        phase = addr.phase if addr.phase and addr.key[0] == "M" else None
        if ra is None:
            link = ind.link
            if link.address is None:
                to_override = None
            elif addr.key[0] == "M":
                to_override = addr.name
            else:   # another router's node through a link-addressed sender (Dispatch's Node.connect(router=))
                to_override = link.target_override
            if phase is not None and to_override is None:
                to_override = addr.name
            key = (to_override, phase)
            section = self._ingress_sections.get(key)
            if section is None:
                section = self._cache_section(self._ingress_sections, key, to_override, phase, self.id, [self.id])
            if link.address is addr and addr.key[0] == "M":  # else the link's target names the router
                by_key = self._ingress_by_key
                if len(by_key) >= SECTION_CACHE_LIMIT:
                    by_key.clear()
                by_key[addr.key] = section
        else:
            to_override = ra.to_override
            if phase is not None and to_override is None:
                to_override = addr.name
            from_section = ra.section
            section = None
            if from_section is not None:  # a router-only arrival section: keyed by its bytes
                key = (from_section, to_override, phase)
                section = self._transit_sections.get(key)
            if section is None:
                ingress = ra.ingress or self.id
                trace = list(ra.trace or ()) + [self.id]
                if from_section is None:
                    return self._set(msg, to_override, phase, ingress, trace)
                section = self._cache_section(self._transit_sections, key, to_override, phase, ingress, trace)
        out = insert_router_section(msg, section)
        if out is None:  # user annotations: merge ours into their map
            if ra is None:
                return self._set(msg, to_override, phase, self.id, [self.id])
            return self._set(msg, to_override, phase, ra.ingress or self.id, list(ra.trace or ()) + [self.id])
        return out

    def _set(self, msg: bytes, to_override, phase, ingress, trace) -> bytes:
        if self.edge is not None:  # an edge router neither adds nor passes on trace and ingress (router_node.c)
            ingress = trace = None
        return set_router_annotations(msg, to_override=to_override, phase=phase, ingress=ingress, trace=trace,
                                      area_names=True)  # routers named "0/<id>" (Dispatch's router_node.c)

    def _cache_section(self, cache: dict, key, to_override, phase, ingress, trace) -> bytes:
        if self.edge is not None:  # an edge router neither adds nor passes on trace and ingress (router_node.c)
            ingress = trace = None
        section = router_section(to_override=to_override, phase=phase, ingress=ingress, trace=trace,
                                 area_names=True)  # routers named "0/<id>" (Dispatch's router_node.c)
        if len(cache) >= SECTION_CACHE_LIMIT:
            cache.clear()
        cache[key] = section
        return section

    def _valid_for_origin(self, addr: Address, remote: list, origin: str) -> list:
        """Keep a next-hop link only if this router is on the origin's shortest path to some router
        behind it with a destination (no duplicate copies through two paths)."""
        keep = []
        next_hops = self.next_hops
        valid = self.valid_origins
        for ol in remote:
            conn = ol.conn
            for rid in addr.rnodes:
                if next_hops.get(rid) is conn and origin in valid.get(rid, ()):
                    keep.append(ol)
                    break
        return keep

    def _pick_balanced_mesh(self, ind: InDelivery, addr: Address, rlinks: list, remote: list):
        """Qpid Dispatch 1.19's balanced choice (src/router_core/forwarder.c, qdr_forward_balanced_CT).

        A local link is worth its undelivered + unsettled deliveries; a neighbour's data link the
        unsettled deliveries of this address sent through it (``addr.outstanding``) plus the path cost to
        the cheapest router behind it that has a destination. Eligible means below the link's capacity;
        the least eligible value wins, else the least ineligible one. Local links come first and a later
        candidate must be strictly better, so ties stay local; a local link with nothing outstanding is
        taken at once (routers are not looked at), and only then are the local links rotated
        (DISPATCH-367). None when there is no candidate.
        """
        best = spare = None
        best_value = spare_value = 0
        routers = remote
        if remote and not remote[0].inter_router:
            # An edge router's uplink links are its local links towards the interior (Dispatch's edge
            # address proxy attaches them as ordinary links), weighed like any local link.
            rlinks = list(rlinks) + remote
            routers = ()
        for ol in rlinks:
            value = len(ol.undelivered) + len(ol.unsettled)
            if ol.capacity > value:
                if best is None or value < best_value:
                    best, best_value = ol, value
                    if value == 0:
                        break
            elif spare is None or value < spare_value:
                spare, spare_value = ol, value
        if best is not None and best_value == 0:
            own = addr.rlinks
            if len(own) > 1:
                own.append(own.pop(0))
            return best
        if routers:
            outstanding = addr.outstanding
            for ol, cost in self._remote_costs(ind, addr, routers):
                n = outstanding.get(ol.conn, 0)
                value = n + cost
                if ol.capacity > n:
                    if best is None or value < best_value:
                        best, best_value = ol, value
                elif best is None and (spare is None or value < spare_value):
                    spare, spare_value = ol, value
        chosen = best if best is not None else spare
        if chosen is not None and chosen.inter_router and ind.ptr is not None:
            self._outstanding_at(ind, addr, chosen.conn)
        return chosen

    def _outstanding_at(self, ind: InDelivery, addr: Address, conn) -> None:
        """An unsettled balanced copy goes to the neighbour on ``conn``: it weighs that neighbour until it
        settles or fails (Forwarder.remote_settled)."""
        ind.remote_addr = addr
        ind.remote_conn = conn
        outstanding = addr.outstanding
        outstanding[conn] = outstanding.get(conn, 0) + 1

    @staticmethod
    def _closest_remote(addr: Address, remote: list):
        """closest with no local consumer: round robin over the routers at the least cost, through each
        one's next hop (Dispatch 1.19 forwarder.c qdr_forward_closest_CT, closest_remotes); ``remote``
        is what this message may take (not back where it came from)."""
        links = addr.closest_remotes
        n = len(links)
        if n > 1:
            for _ in range(n):
                ol = links[addr.rr % n]
                addr.rr += 1
                if ol in remote:
                    return ol
        elif n == 1 and links[0] in remote:
            return links[0]
        return remote[0]

    def _remote_costs(self, ind: InDelivery, addr: Address, remote: list) -> list:
        """(data link, cost) for each of ``remote``: the path cost to the cheapest router behind that link
        with a destination for ``addr`` and, for a message that entered the mesh elsewhere, for which
        this router is on the shortest path from the message's ingress router (valid origins)."""
        ra = ind.ra
        origin = ra.ingress if ra is not None and ra.ingress and ra.ingress != self.id else None
        if origin is None:  # entered the mesh here: every router behind a link counts (recompute_remote)
            cached = addr.remote_costs
            return [(ol, cached[ol]) for ol in remote if ol in cached]
        cheapest: dict = {}
        next_hops = self.next_hops
        costs = self.costs
        valid = self.valid_origins
        for rid in addr.rnodes:
            conn = next_hops.get(rid)
            if conn is None or (origin is not None and origin not in valid.get(rid, ())):
                continue
            cost = costs.get(rid, 1)
            if cost < cheapest.get(conn, cost + 1):
                cheapest[conn] = cost
        return [(ol, cheapest[ol.conn]) for ol in remote if ol.conn in cheapest]

    def _to_handler(self, ind: InDelivery, addr: Address, handler) -> None:
        if ind.stream is not None:  # a router-internal endpoint takes whole messages, never a large stream
            self.forwarder.reject(ind, "amqp:resource-limit-exceeded",
                                  f"message too large for router-internal endpoint {addr.name}")
            return
        addr.deliveries_ingress += 1
        msg = ind.msg  # without router annotations (stripped at arrival from a client or a router)
        ind.msg = None
        try:
            handler(msg)
        except Exception:  # a management bug must not take the router down
            log.exception("router-internal endpoint %s failed", addr.name)
        self.forwarder.settle_upstream(ind, ACCEPTED)
        self.forwarder.left_buffer(ind)

    # -- routes (the routing engine's MeshListener calls, relayed by the router) ---------------------
    def routes_changed(self, next_hops: dict, costs: dict, valid_origins: dict, radius: int) -> None:
        self.next_hops = dict(next_hops)
        self.costs = dict(costs)
        self.valid_origins = {k: set(v) for k, v in valid_origins.items()}
        self.radius = radius
        # Topological addresses of the other routers: _topo/0/<id>/... goes to its next hop.
        bind = self.addresses.bind
        for rid in next_hops:
            addr = bind("R" + rid, rid, CLOSEST)
            addr.rnodes[rid] = True
        for key in [k for k in self.addresses if k[0] == "R" and k[1:] not in next_hops]:
            addr = self.addresses[key]
            addr.rnodes.clear()
            self.recompute_remote(addr)
        self.data_links_changed()
        log.info("routes: %s", {r: c.mesh.peer_id for r, c in self.next_hops.items() if c.mesh})

    def router_lost(self, router_id: str) -> None:
        for addr in list(self.addresses.values()):
            if addr.rnodes.pop(router_id, None) is not None:
                self.recompute_remote(addr)

    def remote_address_added(self, router_id: str, key: str, hint: int) -> None:
        addr = self.addresses.get(key)
        if addr is None:
            addr = self._remote_address(key, hint)
            if addr is None:
                return
        addr.rnodes[router_id] = True
        self.recompute_remote(addr)

    def remote_address_removed(self, router_id: str, key: str) -> None:
        addr = self.addresses.get(key)
        if addr is not None and addr.rnodes.pop(router_id, None) is not None:
            self.recompute_remote(addr)

    def data_links_changed(self) -> None:
        """Data links to neighbours came or went: every remotely served address picks its links again."""
        for addr in list(self.addresses.values()):
            if addr.rnodes:
                self.recompute_remote(addr)

    def _remote_address(self, key: str, hint: int) -> Address | None:
        if key[0] == "H":  # an edge router attached to another interior
            return self.addresses.bind(key, key[1:], CLOSEST)
        if key[0] != "M" or len(key) < 3 or not key[1].isdigit():
            return None  # link-route keys are not routed as message addresses here
        phase = int(key[1])
        name = key[2:]
        sem = self.address_config.semantics(name)
        if sem.pattern is None and hint in HINT_DISTRIBUTION:
            distribution = HINT_DISTRIBUTION[hint]
        else:
            distribution = sem.distribution
        return self.addresses.bind(key, name, distribution, phase, sem.pattern)

    def recompute_remote(self, addr: Address) -> None:
        """Which neighbour data links lead to the routers that serve ``addr``, cheapest first."""
        had = addr.has_destination
        best: dict = {}
        costs = self.costs
        closest: list = []  # (router id, data link) of the routers at the least cost
        least = None
        for rid in addr.rnodes:
            conn = self.next_hops.get(rid)
            if conn is None or conn.mesh is None or conn.mesh.data_out is None:
                continue
            ol = conn.mesh.data_out
            cost = costs.get(rid, 1)
            if ol not in best or cost < best[ol]:
                best[ol] = cost
            if least is None or cost < least:
                least, closest = cost, [(rid, ol)]
            elif cost == least:
                closest.append((rid, ol))
        addr.remote = sorted(best, key=lambda ol: (best[ol], ol.conn.mesh.peer_id))
        addr.remote_costs = best
        addr.closest_remotes = [ol for _, ol in sorted(closest, key=lambda c: c[0])]
        if not had and addr.has_destination:
            self.forwarder.destination_appeared(addr)
        else:
            self.addresses.discard_unused(addr)
