"""Link routes: a client's link is proxied, attach to detach, to a container (a broker), as in Qpid
Dispatch 1.19 (src/router_core/route_control.c; link-route attach forwarding in forwarder.c).

An attach whose address matches a ``linkRoute`` (``direction: in`` for client senders, ``out`` for client
receivers) is not message-routed: the router attaches a link with the same name and termini on a
connection to the route's container (``connection`` = listener/connector name, or ``containerId``), and
opens the client's link only when the container has answered, with the container's termini. From then
on the two links are one: credit and drain, transfers (same delivery tags, bytes untouched),
dispositions and settlement, and the detach with its error pass through. No container connection:
the attach is refused with ``qd:no-route-to-dest``. The container's connection drops: the client's link
is detached with ``qd:routed-link-lost``.

Transactions (Qpid Dispatch 1.19 src/router_core/terminus.c, modules/address_lookup_client/lookup_client.c):
a coordinator target (AMQP 1.0 §4.5.1) has no address; Dispatch looks it up as ``$coordinator``
(:data:`COORDINATOR_ADDRESS`), so a ``linkRoute`` for that prefix, direction ``in``, sends transaction
coordinators to its container, and the coordinator terminus goes there as it came (no prefix rewriting).
A coordinator no route covers is refused (:meth:`LinkRouter.refused_coordinator`): the router cannot
coordinate transactions itself. Outcomes and delivery states beyond the four terminal ones (``declared``,
§4.5.5; ``transactional-state``, §4.5.6) pass through with their contents, on dispositions and on transfers.

Large deliveries (256 KiB and more, arriving in several frames) stream through frame by frame
(router/routedstreams.py): the router never holds a whole large link-routed message.

Routed links are kept out of the message router's link table, so the message hot path pays nothing
for them: their engines hand their deliveries and flow here (:class:`LinkRouter` is their
:class:`wire.assembly.LinkOwner`); :class:`router.core.Router` hands their attach and detach here.
Each side counts its deliveries and their outcomes (integer additions per delivery, nothing logged), which
management lists in ``router.link`` as Dispatch lists its link-routed links: ``endpoint`` links owned by the
route's address (``C``/``D`` prefix, ``E``/``F`` pattern), each naming the other side as its ``peer``
(:meth:`LinkRouter.management_rows`).

Just over ~600 lines: matching, attach forwarding, the traffic and the detach of a routed pair are read
together; large deliveries' streaming is already apart (router/routedstreams.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import proton
from cproton_ffi import lib

from router.links import next_link_id
from router.patterns import PatternTable
from wire import raw
from wire.assembly import KEEP, MESSAGE_SIZE_EXCEEDED, STREAM
from router.policy import UNAUTHORIZED_ACCESS
from router.routedstreams import RoutedStreams, bound_neighbour_session

log = logging.getLogger("router.linkroutes")

NO_ROUTE = "qd:no-route-to-dest"
ROUTED_LINK_LOST = "qd:routed-link-lost"
# The refusal of a durable or expiring terminus when resumable link routes are not allowed (Qpid Dispatch 1.19
# src/router_core/connections.c QDR_CONDITION_INVALID_LINK_EXPIRATION, router allowResumableLinkRoute).
LINK_EXPIRATION = "qd:link-expiration"

# The address a coordinator target is routed by, and the refusal of one no link route covers (Qpid Dispatch
# 1.19 src/router_core/terminus.c QDR_COORDINATOR_ADDRESS; connections.c
# QDR_CONDITION_COORDINATOR_PRECONDITION_FAILED: Dispatch's own words, as clients may match on them).
COORDINATOR_ADDRESS = "$coordinator"
COORDINATOR_REFUSED = "amqp:precondition-failed"
COORDINATOR_REFUSED_DESCRIPTION = ("The router can't coordinate transactions by itself, a linkRoute to a "
                                   "coordinator must be configured to use transactions.")

# Delivery states whose contents raw.copy_outcome carries; any other (declared, transactional-state) has
# its contents copied as they are.
_PLAIN_STATES = frozenset((0, raw.RECEIVED, raw.ACCEPTED, raw.REJECTED, raw.RELEASED, raw.MODIFIED))


def is_coordinator(lo: proton.Link) -> bool:
    """Whether the peer's attach is a sender to a transaction coordinator (AMQP 1.0 §4.5.1)."""
    return not lo.is_sender and lo.remote_target.type == proton.Terminus.COORDINATOR


def survives_disconnect(terminus: proton.Terminus) -> bool:
    """Whether the peer asks for a terminus that outlives its link (AMQP 1.0 §3.5.3 timeout, §3.5.6
    expiry-policy ``never``), as Qpid Dispatch 1.19 src/router_core/terminus.c qdr_terminus_survives_disconnect
    decides: a timeout above 0 or expiry-policy never."""
    return terminus.timeout > 0 or terminus.expiry_policy == proton.Terminus.EXPIRE_NEVER


def copy_state(src, dst) -> None:
    """The remote state of delivery ``src`` becomes the local state of ``dst``, with its contents: a
    terminal outcome through raw.copy_outcome, any other state (a transaction's ``declared`` and
    ``transactional-state``) with its fields copied as they are."""
    state = raw.delivery_remote_state(src)
    if state in _PLAIN_STATES:
        raw.copy_outcome(src, dst)
        return
    lib.pn_data_copy(lib.pn_disposition_data(lib.pn_delivery_local(dst)),
                     lib.pn_disposition_data(lib.pn_delivery_remote(src)))
    raw.delivery_update(dst, state)


@dataclass(eq=False)
class LinkRoute:
    """One configured linkRoute."""

    name: str
    pattern: str
    direction: str
    connection: str | None
    container_id: str | None
    add_prefix: str | None
    del_prefix: str | None
    next_index: int = 0  # round robin over matching containers (linkBalanced)
    is_pattern: bool = False

    @classmethod
    def from_entity(cls, entity, index: int = 0) -> "LinkRoute":
        """The route a validated ``linkRoute`` entity (configuration file or management CREATE) describes:
        ``pattern`` makes a pattern route (mesh key E/F), ``prefix`` a prefix route (C/D)."""
        pattern = entity.get("pattern")
        return cls(
            name=entity.get("name") or f"linkRoute/{index}", pattern=pattern or entity.get("prefix"),
            direction=entity["direction"], connection=entity.get("connection"),
            container_id=entity.get("containerId"), add_prefix=entity.get("addExternalPrefix"),
            del_prefix=entity.get("delExternalPrefix"), is_pattern=pattern is not None,
        )

    @property
    def key(self) -> str:
        """The hash key other routers learn through MAU (Qpid Dispatch 1.19 src/iterator.c): C/D prefix,
        E/F pattern."""
        if self.is_pattern:
            return ("E" if self.direction == "in" else "F") + self.pattern
        return ("C" if self.direction == "in" else "D") + self.pattern

    def transit(self) -> "LinkRoute":
        """The same route without prefix rewriting: used toward the next router, which rewrites."""
        return LinkRoute(self.name, self.pattern, self.direction, None, None, None, None, is_pattern=self.is_pattern)

    def external(self, address: str) -> str:
        """The address as the container knows it (delExternalPrefix, then addExternalPrefix)."""
        if self.del_prefix and address.startswith(self.del_prefix):
            address = address[len(self.del_prefix):]
        if self.add_prefix:
            address = self.add_prefix + address
        return address

    def internal(self, address: str | None) -> str | None:
        """The container's address as the client should see it (the inverse of external)."""
        if address is None:
            return None
        if self.add_prefix and address.startswith(self.add_prefix):
            address = address[len(self.add_prefix):]
        if self.del_prefix:
            address = self.del_prefix + address
        return address


def _count_outcome(side: "RoutedLink", state: int) -> None:
    """A delivery of ``side`` settled with ``state``: count its terminal outcome (router.link acceptedCount
    and the like); other states (a transaction's declared) count as none of the four, as in Dispatch."""
    if state == raw.ACCEPTED:
        side.accepted += 1
    elif state == raw.REJECTED:
        side.rejected += 1
    elif state == raw.RELEASED:
        side.released += 1
    elif state == raw.MODIFIED:
        side.modified += 1


def route_serves(route: LinkRoute, rc) -> bool:
    """Whether connection ``rc`` leads to a container of ``route`` (by connection name or container id)."""
    return ((route.connection is not None and rc.name == route.connection)
            or (route.container_id is not None and rc.engine.remote_container == route.container_id))


class RoutedLink:
    """One side of a proxied link pair, and the engine's record of it (wire/assembly.py reads ``owner``,
    ``incoming`` and ``max_message_size``)."""

    __slots__ = ("ptr", "rc", "peer", "route", "deliveries", "receiving", "open", "owner", "incoming",
                 "max_message_size", "gate", "container", "id", "name", "delivery_count", "presettled",
                 "accepted", "rejected", "released", "modified")

    def __init__(self, ptr, rc, route: LinkRoute, receiving: bool, owner: "LinkRouter", container: bool = False,
                 name: str = ""):
        self.ptr = ptr
        self.id = next_link_id()  # router.link identity, from the same sequence as message-routed links
        self.name = name          # both sides carry the client's link name
        # Management counters (router.link): deliveries through this side and the outcomes they settled with.
        self.delivery_count = self.presettled = 0
        self.accepted = self.rejected = self.released = self.modified = 0
        # The side attached to the route's container itself (not to a neighbour router on the way to it):
        # its deliveries count as from/to a route container (LinkRouter.deliveries_from_container).
        self.container = container
        self.rc = rc
        self.owner = owner
        self.incoming = receiving
        self.max_message_size = 0  # the container behind the route enforces its own limit
        # A policed client's side (router/policygate.py): its messages are checked; its policy's message
        # size limit is max_message_size.
        self.gate = None
        self.peer: RoutedLink | None = None
        self.route = route
        self.deliveries: dict = {}  # delivery pointer on this link -> partner delivery pointer
        self.receiving = receiving  # the router receives messages on this link
        self.open = False


class LinkRouter:
    """Matches attaches against link routes and proxies routed link pairs."""

    def __init__(self, router, entities=()):
        self.router = router
        self.tables = {"in": PatternTable(), "out": PatternTable()}
        self.links: dict = {}  # link pointer -> RoutedLink (both sides of every pair)
        self.remote: dict[str, set] = {}  # route key -> ids of routers with a container for it
        self.advertised: set[str] = set()  # route keys this router has a container for
        # Link-routed deliveries from and to a container of a route: the router's
        # deliveriesIngressRouteContainer and deliveriesEgressRouteContainer (qdstat's "Deliveries from
        # Route Container" and "... to Route Container").
        self.deliveries_from_container = 0
        self.deliveries_to_container = 0
        # Dispatch's router allowResumableLinkRoute (default yes): when False, an attach whose terminus
        # survives disconnect is refused with qd:link-expiration instead of routed (router/daemon.py sets it).
        self.allow_resumable = True
        # Large deliveries streamed through frame by frame (router/routedstreams.py).
        self.streams = RoutedStreams(router.assembly)
        for i, e in enumerate(entities):
            self._insert(LinkRoute.from_entity(e, i))

    def __bool__(self) -> bool:
        return bool(len(self.tables["in"]) or len(self.tables["out"]))

    # -- the route table (configuration at start-up; management while running) -----------------------
    def _insert(self, route: LinkRoute) -> None:
        table = self.tables[route.direction]
        if route.is_pattern:
            table.add(route.pattern, route)
        else:
            table.add_prefix(route.pattern, route)

    def add_route(self, route: LinkRoute) -> None:
        """Route attaches matching ``route`` from now on, and advertise it to the mesh at once when its
        container is already connected. ValueError when a route of the same direction has the same
        pattern (or prefix) or the same name."""
        if any(r.name == route.name for r in self.routes()):
            raise ValueError(f"a link route named '{route.name}' exists")
        self._insert(route)
        self.refresh_advertised()

    def remove_route(self, name: str) -> LinkRoute:
        """Stop routing attaches for the route called ``name`` (links already routed stay up) and withdraw
        its key from the mesh unless another route has it. KeyError when there is no such route."""
        route = next((r for r in self.routes() if r.name == name), None)
        if route is None:
            raise KeyError(name)
        table = self.tables[route.direction]
        if route.is_pattern:
            table.remove(route.pattern)
        else:
            table.remove_prefix(route.pattern)
        self.refresh_advertised()
        return route

    def routes(self) -> list[LinkRoute]:
        """Every route, ``in`` then ``out``, each table in its own order."""
        return [route for table in self.tables.values() for _, route in table.items()]

    def containers(self, route: LinkRoute) -> list:
        """The router's open connections to a container of ``route`` (by connection name or container id)."""
        return [rc for rc in self.router.connections if rc.remote_open and route_serves(route, rc)]

    # -- attach -------------------------------------------------------------------------------------
    def try_attach(self, engine, link, lo: proton.Link, address: str | None) -> bool:
        """Route the client's attach if its address matches a link route; True when handled. A
        coordinator is routed by :data:`COORDINATOR_ADDRESS`."""
        coordinator = is_coordinator(lo)
        if coordinator:
            address = COORDINATOR_ADDRESS
        if not address:
            return False
        direction = "out" if lo.is_sender else "in"  # client receiver -> router sender -> "out"
        route = self.tables[direction].lookup(self.router.parser.parse(address)[1])
        if route is None:
            return False
        if not self.allow_resumable and not coordinator and \
                survives_disconnect(lo.remote_source if lo.is_sender else lo.remote_target):
            engine.refuse_link(link, LINK_EXPIRATION, "Requested link expiration not allowed")
            return True
        container = self._container_for(route)
        direct = container is not None
        if container is None:
            container = self._next_hop_for(route)
            if container is None:
                engine.refuse_link(link, NO_ROUTE, f"no route to the container for {address}")
                return True
            route = route.transit()  # the router next to the container applies the prefixes
        session = container.engine.connection.session()
        session.open()
        out = session.receiver(lo.name) if lo.is_sender else session.sender(lo.name)
        out.source.copy(lo.remote_source)
        out.target.copy(lo.remote_target)
        if not coordinator:  # a coordinator terminus has no address to rewrite
            node = out.source if lo.is_sender else out.target
            node.address = route.external(address)
        out.snd_settle_mode = lo.remote_snd_settle_mode
        out.rcv_settle_mode = lo.remote_rcv_settle_mode
        out.open()
        client_side = RoutedLink(link, engine.app, route, not lo.is_sender, self, name=lo.name)
        gate = engine.app.gate
        if gate is not None and client_side.receiving:
            client_side.gate = gate
            client_side.max_message_size = gate.policy.max_message_size
        out_ptr = raw.pointer(out)
        container_side = RoutedLink(out_ptr, container, route, lo.is_sender, self, container=direct, name=lo.name)
        client_side.peer, container_side.peer = container_side, client_side
        bound_neighbour_session(client_side)
        bound_neighbour_session(container_side)
        self.links[link] = client_side
        self.links[out_ptr] = container_side
        engine.own_link(link, client_side)
        container.engine.own_link(out_ptr, container_side)
        container.engine.wake()
        return True

    @staticmethod
    def refused_coordinator(engine, link, lo: proton.Link) -> bool:
        """Refuse the attach if it is a coordinator (one no link route took), as Dispatch does: null
        target, then the detach with :data:`COORDINATOR_REFUSED`; the router cannot coordinate
        transactions itself. True when refused."""
        if not is_coordinator(lo):
            return False
        engine.refuse_link(link, COORDINATOR_REFUSED, COORDINATOR_REFUSED_DESCRIPTION)
        return True

    def _container_for(self, route: LinkRoute):
        candidates = self.containers(route)
        if not candidates:
            return None
        rc = candidates[route.next_index % len(candidates)]
        route.next_index += 1
        return rc

    def _next_hop_for(self, route: LinkRoute):
        """A neighbour connection toward another router that has a container for the route."""
        routers = self.remote.get(route.key)
        if not routers:
            return None
        next_hops = self.router.next_hops
        for rid in sorted(routers, key=lambda r: (self.router.costs.get(r, 1), r)):
            rc = next_hops.get(rid)
            if rc is not None:
                return rc
        return None

    # -- mesh-wide link routes (Qpid Dispatch 1.19 mobile_sync/mobile.c)
    # ---------------------------------------
    def refresh_advertised(self) -> None:
        """Advertise (or withdraw) each route's key as its local container connections come and go."""
        if self.router.mesh is None:
            return
        have = {route.key for route in self.routes() if self._has_container(route)}
        for key in have - self.advertised:
            self.router.advertise_key(key, True)
        for key in self.advertised - have:
            self.router.advertise_key(key, False)
        self.advertised = have

    def _has_container(self, route: LinkRoute) -> bool:
        return any(route_serves(route, rc) for rc in self.router.connections if rc.mesh is None and rc.remote_open)

    def remote_added(self, router_id: str, key: str) -> None:
        self.remote.setdefault(key, set()).add(router_id)

    def remote_removed(self, router_id: str, key: str) -> None:
        routers = self.remote.get(key)
        if routers is not None:
            routers.discard(router_id)
            if not routers:
                del self.remote[key]

    def router_lost(self, router_id: str) -> None:
        for key in list(self.remote):
            self.remote_removed(router_id, key)

    def link_opened(self, link) -> bool:
        """The container answered our attach: open the client's link with the container's termini."""
        side = self.links.get(link)
        if side is None:
            return False
        side.open = True
        client = side.peer
        lo = proton.Link.wrap(link)
        co = proton.Link.wrap(client.ptr)
        co.source.copy(lo.remote_source)
        co.target.copy(lo.remote_target)
        node = co.target if co.is_receiver else co.source
        if node.type not in (proton.Terminus.UNSPECIFIED, proton.Terminus.COORDINATOR):
            node.address = side.route.internal(node.address)
        co.snd_settle_mode = lo.remote_snd_settle_mode
        co.rcv_settle_mode = lo.remote_rcv_settle_mode
        co.open()
        client.open = True
        self._sync_credit(side)
        client.rc.engine.wake()
        return True

    # -- traffic: the LinkOwner of RoutedLink records (wire/assembly.py) -------------------------------
    def on_message(self, engine, side: RoutedLink, d, msg: bytes | None) -> None:
        """A whole message on the side where the router receives (the engine assembled it and advanced
        the link): it goes on to the other side with the same delivery tag."""
        peer = side.peer
        side.delivery_count += 1
        if peer is None or not peer.open or msg is None:
            raw.set_modified(d, failed=True)
            raw.delivery_settle(d)
            side.modified += 1
            return
        gate = side.gate
        if gate is not None and gate.check_user_id:
            why = gate.refusal(msg, False)
            if why is not None:
                gate.policy.message_denied()
                if not raw.delivery_settled(d):
                    raw.set_rejected(d, UNAUTHORIZED_ACCESS, why)
                raw.delivery_settle(d)
                side.rejected += 1
                self._sync_credit(side)
                side.rc.engine.wake()
                return
        out = raw.send_message(peer.ptr, raw.delivery_tag(d), msg)
        self.count_passed(side, peer)
        if raw.delivery_remote_state(d):
            # A state on the transfer (AMQP 1.0 §2.7.5: a message sent in a transaction carries its
            # transactional-state, §4.5.6) goes on with it; proton writes it into the transfer frame.
            copy_state(d, out)
        if raw.delivery_settled(d):
            raw.delivery_settle(out)
            raw.delivery_settle(d)
            side.presettled += 1
            peer.presettled += 1
        else:
            side.deliveries[d] = out
            peer.deliveries[out] = d
        peer.rc.engine.wake()
        self._sync_credit(side)

    def on_partial(self, engine, side: RoutedLink, d, held: int) -> int:
        return STREAM if self.streams.wanted(side, held) else KEEP

    def on_chunk(self, engine, side: RoutedLink, d, chunk: bytes, end: int) -> None:
        """Bytes of a streamed delivery on the side where the router receives (router/routedstreams.py)."""
        self.streams.on_chunk(engine, side, d, chunk, end, self)

    def count_passed(self, side: RoutedLink, peer: RoutedLink) -> None:
        """A delivery went from ``side`` to ``peer`` (counters; router/routedstreams.py calls it too)."""
        peer.delivery_count += 1
        if side.container:
            self.deliveries_from_container += 1
        elif peer.container:
            self.deliveries_to_container += 1

    copy_state = staticmethod(copy_state)  # for router/routedstreams.py

    def sync_credit(self, side: RoutedLink) -> None:
        """Credit between the pair after ``side`` changed (see _sync_credit)."""
        self._sync_credit(side)

    def on_delivery_update(self, engine, side: RoutedLink, d) -> None:
        """An outcome or settlement on one side goes to the partner delivery on the other."""
        peer = side.peer
        partner = side.deliveries.get(d)
        if partner is None or peer is None:
            return
        state = raw.delivery_remote_state(d)
        if state and (state != raw.delivery_local_state(partner) or state not in _PLAIN_STATES):
            copy_state(d, partner)
        if raw.delivery_settled(d):
            del side.deliveries[d]
            peer.deliveries.pop(partner, None)
            st = self.streams.streaming(partner)
            if st is not None:
                # Settled by the receiver while the sender still streams it: stop sending, read and drop
                # the rest, and settle the sender's delivery (its outcome is set) at its end.
                self.streams.end(partner)
                raw.delivery_abort(d)
                self.streams.dropping[partner] = True
                _count_outcome(side, state)
                _count_outcome(peer, state)
                peer.rc.engine.wake()
                return
            raw.delivery_settle(partner)
            raw.delivery_settle(d)
            _count_outcome(side, state)
            _count_outcome(peer, state)
        peer.rc.engine.wake()

    def on_link_flow(self, engine, side: RoutedLink) -> None:
        self._sync_credit(side)

    def on_oversized(self, engine, side: RoutedLink, d, limit: int) -> None:
        """A policed client sent a message over its policy's size (the engine rejected it and closes
        this side): the pair is undone and the container's side detached with the same condition."""
        if side.gate is not None:
            side.gate.policy.oversized()
        self.links.pop(side.ptr, None)
        peer = side.peer
        if peer is not None:
            self.links.pop(peer.ptr, None)
            peer.peer = None
            self._close(peer, MESSAGE_SIZE_EXCEEDED, f"message larger than {limit} bytes")

    def _sync_credit(self, side: RoutedLink) -> None:
        """Credit flows from the final receiver to the original sender; drain goes the same way and the
        sender's answer (drained) comes back."""
        a = side if not side.receiving else side.peer  # the side where the router sends
        if a is None or a.peer is None or not a.open or not a.peer.open:
            return
        sending, receiving = a.ptr, a.peer.ptr  # router sends on `sending`, receives on `receiving`
        want = raw.link_credit(sending) - raw.link_credit(receiving) - raw.link_queued(sending)
        if not raw.link_get_drain(sending):
            if want > 0:
                raw.link_flow(receiving, want)
        else:
            if not raw.link_get_drain(receiving) and raw.link_credit(receiving) + max(want, 0) > 0:
                raw.link_drain(receiving, max(want, 0))  # top up, then ask the origin to drain it all
            if raw.link_credit(receiving) == 0 and not raw.link_queued(sending):
                raw.link_drained(sending)  # the origin has nothing more: tell the final receiver
                raw.link_set_drain(receiving, False)
        a.rc.engine.wake()
        a.peer.rc.engine.wake()

    # -- management -----------------------------------------------------------------------------------
    def management_rows(self) -> list[dict]:
        """The router.link attributes (Qpid Dispatch 1.19 names) of both sides of every routed link pair,
        as Dispatch lists link-routed links (src/router_core/agent_link.c): ``endpoint`` links owned by the
        route's address (its C/D/E/F key), each naming the other side as its ``peer``. ``undeliveredCount``
        is what proton still holds to send, ``unsettledCount`` the deliveries awaiting the other side's
        outcome; ``operStatus`` is ``down`` until the container has answered the attach."""
        rows = []
        for side in self.links.values():
            engine = side.rc.engine
            try:
                credit = raw.link_credit(side.ptr)
                queued = 0 if side.receiving else raw.link_queued(side.ptr)
            except Exception:  # a link being torn down may already be freed by the engine
                credit = queued = 0
            peer = side.peer
            rows.append({
                "identity": str(side.id), "linkName": side.name, "linkType": "endpoint",
                "linkDir": "in" if side.receiving else "out", "owningAddr": side.route.key,
                "peer": str(peer.id) if peer is not None else None,
                "capacity": engine.settings.link_capacity, "undeliveredCount": queued,
                "unsettledCount": len(side.deliveries), "deliveryCount": side.delivery_count,
                "presettledCount": side.presettled, "acceptedCount": side.accepted,
                "rejectedCount": side.rejected, "releasedCount": side.released, "modifiedCount": side.modified,
                "creditAvailable": credit, "connectionId": str(engine.id),
                "adminStatus": "enabled", "operStatus": "up" if side.open else "down",
            })
        return rows

    # -- detach ---------------------------------------------------------------------------------------
    def link_closed(self, link) -> bool:
        """One side detached: detach the other with the same error. True when the link was routed."""
        side = self.links.pop(link, None)
        if side is None:
            return False
        self.streams.side_gone(side)
        peer = side.peer
        if peer is not None:
            self.streams.side_gone(peer)
        if peer is not None:
            self.links.pop(peer.ptr, None)
            peer.peer = None
            self._close(peer, *raw.link_remote_condition(link))
        return True

    def connection_closed(self, rc) -> None:
        """Every routed link on a lost connection: the other side is detached with routed-link-lost."""
        for ptr, side in list(self.links.items()):
            if side.rc is rc:
                self.links.pop(ptr, None)
                self.streams.side_gone(side)
                peer = side.peer
                if peer is not None:
                    self.streams.side_gone(peer)
                if peer is not None:
                    self.links.pop(peer.ptr, None)
                    peer.peer = None
                    self._close(peer, ROUTED_LINK_LOST, "the link's route was lost")

    def _close(self, side: RoutedLink, condition: str | None, description: str | None) -> None:
        side.rc.engine.disown_link(side.ptr)
        lo = proton.Link.wrap(side.ptr)
        if lo.state & proton.Endpoint.LOCAL_CLOSED:
            return
        if lo.state & proton.Endpoint.LOCAL_UNINIT:
            # Never opened: the client's attach is refused (null terminus, then the detach).
            side.rc.engine.refuse_link(side.ptr, condition or NO_ROUTE, description or "")
            return
        if condition:
            lo.condition = proton.Condition(condition, description)
        if side.receiving:
            # Messages we took from this sender whose outcome will never come: it may resend them.
            for d in side.deliveries:
                raw.set_modified(d, failed=True)
                raw.delivery_settle(d)
        side.deliveries.clear()
        lo.close()
        side.rc.engine.wake()
