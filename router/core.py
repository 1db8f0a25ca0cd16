"""The router: a small object that owns its parts and does the connection and link life cycle (the cold
paths) between them.

``Router`` is sans-IO: it implements :class:`wire.connection.ConnectionHandler` and never touches a
socket. The daemon (router/daemon.py) creates listeners and connectors whose engines report to it. Its
parts, each with the interface it offers and the collaborators it is given (typing.Protocol where a part
calls back), in the manner of Dispatch's routing core holding its sub-engines:

* ``forwarder`` (router/forwarder.py): the per-message path; the engines hand it every message,
  outcome and credit of the router's message links (it is their :class:`wire.assembly.LinkOwner`);
* ``mesh_forwarding`` (router/meshforward.py): messages from and to other routers, router-internal
  endpoints, the routes the routing engine reports;
* ``flow_hooks`` (router/flowhooks.py): flow records, None unless configured;
* ``mesh`` (router/mesh/): the routing engine, interior mode only; it reports to the router
  (:class:`router.mesh.engine.MeshListener`), which relays to mesh forwarding and link routes;
* ``inter_router`` (router/interrouter.py): inter-router connections' links and control messages;
* ``edge`` (router/edge.py): the uplink of an edge router, edge mode only;
* ``edge_tracking`` (router/edgetracking.py): what Dispatch edge routers connected to an interior may send;
* ``auto_links`` (router/autolinks.py), ``link_router`` (router/linkroutes.py);
* ``control`` (router/control.py): what management changes, as methods;
* ``policing`` (router/policing.py): the vhost policy (router/policy.py) applied to connections, sessions
  and attaches, with a gate (router/policygate.py) owning a policed connection's incoming links.

One :class:`wire.assembly.MessageAssembler` serves every engine of the router, so that the bytes of
messages still arriving count in the router's budget and stalled ones are found in one place.

A little over ~600 lines: every part's logic lives in its module, but the attach, detach and
destination events that several parts must hear are dispatched here, one call per part, so that the
order between them is visible in one place.
"""

from __future__ import annotations

import logging
import secrets
import time

import proton

from wire import raw
from wire.assembly import MessageAssembler
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from wire.memory import HeapTrimmer
from wire.terminus import waypoint_ordinal
from router.addresses import BALANCED, CLOSEST, UNAVAILABLE, Address, AddressConfigTable, AddressParser, AddressTable
from router.autolinks import AutoLinkManager
from router.control import RouterControl
from router.budget import RESOURCE_LIMIT_EXCEEDED, BufferBudget
from router.edge import UPLINK_ROLE, EdgeUplink
from router.edgetracking import TRACKING_KEY, EdgeAddressTracking, TrackingLink, accept_message
from router.flowhooks import FlowHooks
from router.forwarder import Forwarder
from router.interrouter import ControlLink, InterRouterLinks
from router.linkroutes import LinkRouter, RoutedLink
from router.links import InDelivery, RouterConnection, RouterLink
from router.mesh import protocol as P
from router.meshforward import DISTRIBUTION_HINT, MeshForwarding
from router.policing import Policing
from router.policy import Policy
from router.streams import Streams

log = logging.getLogger("router.core")

#: Dispatch's heartbeat address (include/qpid/dispatch/amqp.h QD_TERMINUS_HEARTBEAT): edge routers send to it.
HEARTBEAT_ADDRESS = "_$qd.edge_heartbeat"


def _accept_heartbeat(msg: bytes) -> None:
    """A heartbeat carries nothing to act on: accepting it is all Dispatch's heartbeat server does with it."""

# OPEN `product`: this implementation's own name. Qpid Dispatch does not check it: a real qdrouterd 1.19
# meshes with a router that sends this value (inter-router and edge connections are recognised by the
# listener's role and the qd.router link capabilities, never by product).
PRODUCT = "trio-dispatch"
VERSION = "0.1.0"


# Key classes of link routes (Qpid Dispatch 1.19 src/iterator.c): C/D prefix, E/F pattern, in/out. The
# routing engine reports them with mobile addresses; they go to the link router, not the address table.
LINK_ROUTE_KEY_CLASSES = frozenset("CDEF")


# Link counter attribute -> management name, summed over closed links (router entity totals).
CLOSED_LINK_COUNTERS = (
    ("presettled", "presettledDeliveries"), ("dropped_presettled", "droppedPresettledDeliveries"),
    ("accepted", "acceptedDeliveries"), ("rejected", "rejectedDeliveries"),
    ("released", "releasedDeliveries"), ("modified", "modifiedDeliveries"),
)


class Router(ConnectionHandler):
    """One router: its routing state, its parts, and the AMQP endpoint logic that ties them together."""

    def __init__(self, router_id: str, *, default_distribution: str = "balanced", address_entities=(),
                 auto_link_entities=(), link_route_entities=(), clock=None, mode: str = "standalone",
                 mesh_timers: dict | None = None, flow_recorder=None, budget: BufferBudget | None = None,
                 policy: Policy | None = None):
        self.id = router_id
        # Vhost policy (router/policy.py); while not enabled every connection may do anything.
        self.policy = policy if policy is not None else Policy()
        self.mode = mode or "standalone"
        self.parser = AddressParser(router_id)
        self.address_config = AddressConfigTable(default_distribution)
        for entity in address_entities:
            self.address_config.add(entity)
        self.addresses = AddressTable()
        self.connections: set[RouterConnection] = set()
        self.clock = clock or (lambda: 0.0)
        self.budget = budget or BufferBudget()
        self.budget.connections = self.connections
        # Messages still arriving on any of this router's engines (their bytes count in the budget).
        self.assembly = MessageAssembler(on_held=self._on_held, clock=self.clock)
        self.trimmer = HeapTrimmer()
        # Counters of links that have gone, so router-wide totals (management) do not fall back.
        self.closed_link_totals: dict[str, int] = {}
        self.flow = flow_recorder  # wire.flowrecords.FlowRecorder, or None
        self.flow_hooks = FlowHooks(router_id, flow_recorder) if flow_recorder is not None else None
        self.forwarder = Forwarder(addresses=self.addresses, parser=self.parser, address_config=self.address_config,
                                   budget=self.budget, clock=self.clock, links=self, flow=self.flow_hooks)
        # Large messages stream through frame by frame (router/streams.py).
        self.streams = Streams(self.forwarder, self.assembly)
        self.forwarder.use_streams(self.streams)
        self.policing = Policing(self.policy, self.forwarder)  # applies it to engines (router/policing.py)
        self.mesh = None  # router.mesh.engine.RoutingEngine in interior mode
        self.edge: EdgeUplink | None = None  # in edge mode
        if self.mode == "interior":
            from router.mesh.engine import RoutingEngine

            self.mesh = RoutingEngine(router_id, self, instance=int(time.time()), **(mesh_timers or {}))
        elif self.mode == "edge":
            self.edge = EdgeUplink(router_id, self.addresses, self.forwarder, self)
        self.mesh_forwarding = MeshForwarding(router_id, self.forwarder, addresses=self.addresses,
                                              parser=self.parser, address_config=self.address_config,
                                              edge=self.edge)
        self.forwarder.use_special_path(self.mesh_forwarding)
        self.inter_router = InterRouterLinks(self.mesh, data_links=self.forwarder,
                                             remote_routes=self.mesh_forwarding, clock=self.clock)
        self.auto_links = AutoLinkManager(self, auto_link_entities)
        self.link_router = LinkRouter(self, link_route_entities)
        self.control = RouterControl(self)  # what management changes (router/control.py)
        # Dispatch's heartbeat server (src/router_core/modules/heartbeat_server/heartbeat_server.c): edge
        # routers' heartbeats to it are accepted and need nothing else here.
        self.add_internal_endpoint("M0" + HEARTBEAT_ADDRESS, BALANCED, _accept_heartbeat)
        # What a Dispatch edge router's producers can send to: interior mode only, as Dispatch.
        self.edge_tracking = EdgeAddressTracking(self.parser, enabled=self.mode == "interior")
        if self.edge_tracking.enabled:
            self.add_internal_endpoint(TRACKING_KEY, BALANCED, accept_message)

    # -- counters and routes of the parts (management and tests read them here) ---------------------
    @property
    def dropped_presettled(self) -> int:
        return self.forwarder.dropped_presettled

    @property
    def deliveries_no_route(self) -> int:
        return self.forwarder.deliveries_no_route

    @property
    def rejected_unavailable(self) -> int:
        return self.forwarder.rejected_unavailable

    @property
    def deliveries_transit(self) -> int:
        return self.mesh_forwarding.deliveries_transit

    @property
    def deliveries_radius_dropped(self) -> int:
        return self.mesh_forwarding.deliveries_radius_dropped

    @property
    def next_hops(self) -> dict:
        """Router id -> the RouterConnection of the neighbour to send through."""
        return self.mesh_forwarding.next_hops

    @property
    def costs(self) -> dict:
        return self.mesh_forwarding.costs

    @property
    def valid_origins(self) -> dict:
        return self.mesh_forwarding.valid_origins

    @property
    def radius(self) -> int:
        return self.mesh_forwarding.radius

    # -- time ----------------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Time-driven work (auto-link retries, stalled deliveries, the routing protocol). The daemon
        calls it every TICK_SECONDS."""
        self.forwarder.on_tick(now, self.connections)  # coarse clock, stuck deliveries, settle rates
        if self.streams.held:  # a stream held off whose room came back unnoticed resumes here at worst
            self.streams.recheck()
        if self.link_router.streams.held:
            self.link_router.streams.recheck()
            self.forwarder.on_batch_end()
        self.auto_links.tick(now)
        if self.assembly:
            self._abort_stalled(now)
        self._trim_heap(now)
        if self.mesh is not None:
            self.mesh.tick(now)
            self.inter_router.flush()
            self.forwarder.on_batch_end()

    def now(self) -> float:
        return self.clock()

    def _on_held(self, record, delta: int) -> None:
        """The bytes of messages still arriving changed (wire/assembly.py): they count router-wide."""
        self.budget.total += delta

    def _abort_stalled(self, now: float) -> None:
        """Detach the links of partial deliveries that got no new bytes for stalledDeliveryTimeoutSeconds
        (a peer must not pin memory by starting a message and never finishing it). A delivery of a
        connection we are not reading from (paused) is not stalled by its sender: its clock restarts."""
        timeout = self.budget.stalled_delivery_timeout
        assembly = self.assembly
        for d in assembly.stalled(now, timeout):
            rl = assembly.owner_of(d)
            if not isinstance(rl, RouterLink):
                continue  # gone with an earlier one, or a neighbour router's control message
            if rl.conn.paused:
                assembly.touch(d, now)
                continue
            self.budget.stalled_aborted += 1
            size = assembly.size_of(d)
            description = f"delivery made no progress for {timeout:g} s ({size} bytes received)"
            log.warning("connection %d: link %s detached: %s", rl.engine.id, rl.name, description)
            rl.conn.links.pop(rl.ptr, None)
            self.unbind_link(rl)  # the engine forgets the delivery's bytes
            rl.engine.close_link(rl.ptr, RESOURCE_LIMIT_EXCEEDED, description)

    def _trim_heap(self, now: float) -> None:
        """Hand freed memory back to the OS after a burst (wire/memory.py). What the router knows it
        uses: the buffered bytes (the engines' delivery buffers it does not count; the trimmer backs off
        when a trim gives little back)."""
        self.trimmer.tick(now, self.budget.total)

    # -- engines ---------------------------------------------------------------------------------
    def connection_settings(self, **kw) -> ConnectionSettings:
        """Settings with this router's identity filled in (container id = router id, as Dispatch)."""
        kw.setdefault("container_id", self.id)
        props = {P.OPEN_PRODUCT: PRODUCT, P.OPEN_VERSION: VERSION}
        if kw.get("role") in ("inter-router", "edge"):
            props[P.OPEN_ANNOTATIONS_VERSION] = P.ANNOTATIONS_VERSION
            if int(kw.get("cost") or 1) > 1:
                props[P.OPEN_COST] = int(kw["cost"])
        kw.setdefault("properties", props)
        return ConnectionSettings(**kw)

    def new_engine(self, settings: ConnectionSettings, *, server: bool, remote_host: str = "") -> EngineConnection:
        engine = EngineConnection(self, settings, server=server, remote_host=remote_host, assembler=self.assembly)
        rc = RouterConnection(engine, settings.role, settings.name, self.clock())
        engine.app = rc
        self.connections.add(rc)
        return engine

    def close_all(self) -> None:
        """Graceful shutdown: every connection gets a close frame."""
        for rc in list(self.connections):
            rc.engine.close()

    # -- hot events ------------------------------------------------------------------------------------
    # Every link the router keeps is owned through its engine (wire/assembly.py): message links
    # (RouterLink) by the forwarder, inter-router control links (ControlLink) by inter_router, link-routed
    # links (RoutedLink) by link_router; their deliveries and flow go straight there. Events of a link
    # nobody owns (one the router has closed while the peer still sends) need nothing: on_delivery and
    # on_link_flow are ConnectionHandler's, which do nothing.
    def on_batch_end(self) -> None:
        self.forwarder.on_batch_end()

    def on_output_drained(self, engine) -> None:
        forwarder = self.forwarder
        forwarder.output_room(engine.app)
        if self.streams.held:
            self.streams.recheck()
        if self.link_router.streams.held:
            self.link_router.streams.recheck()
        forwarder.on_batch_end()

    # -- cold events -----------------------------------------------------------------------------
    def on_connection_open(self, engine) -> None:
        log.info("connection %d from %s opened (container %s, role %s)", engine.id, engine.remote_host,
                 engine.remote_container, engine.settings.role)
        engine.app.remote_open = True
        if self.policy.enabled and not self.policing.connection_opened(engine):
            return
        if engine.settings.role == "inter-router":
            if self.mesh is None:
                log.error("connection %d: inter-router connection refused: router mode is %s, not interior",
                          engine.id, self.mode)
                engine.close("amqp:not-allowed", f"router {self.id} is not an interior router")
                return
            self.inter_router.connection_opened(engine.app)
            return
        if self.edge is not None and engine.settings.role == UPLINK_ROLE and not engine.server:
            self.edge.connection_opened(engine.app)
            return
        self.auto_links.connection_opened(engine.app)
        if self.mesh is not None and self.link_router:
            self.link_router.refresh_advertised()

    def session_refusal(self, engine, session) -> tuple[str, str] | None:
        return self.policing.session_refusal(engine, session)

    # -- links the router attaches itself (auto-links) --------------------------------------------
    def register_auto_link(self, rc: RouterConnection, link, auto_link) -> RouterLink:
        """Track a link an auto-link attached; it joins the routing table when the container answers."""
        incoming = auto_link.direction == "in"
        phase_name = auto_link.address
        rl = RouterLink(link, rc, incoming, None, rc.engine.settings.link_capacity, auto_link.name,
                        self.forwarder)
        rl.auto_link = auto_link
        rl.from_waypoint = incoming  # the container's queue feeds the phase (see Forwarder.destination_lost)
        key = f"M{auto_link.phase}{phase_name}"
        sem = self.address_config.semantics(phase_name)
        rl.address = self.addresses.bind(key, phase_name, sem.distribution, auto_link.phase, sem.pattern)
        self._own(rc, rl)
        return rl

    def on_link_opened(self, engine, link) -> None:
        if self.link_router.links and self.link_router.link_opened(link):
            return
        rl = engine.app.links.get(link)
        if rl is not None and rl.auto_link is not None:
            self.auto_links.link_opened(rl)

    def bind_auto_link(self, rl: RouterLink) -> None:
        """The container accepted an auto-link: it now carries traffic like any attached link."""
        addr = rl.address
        if rl.incoming:
            addr.inlinks.add(rl)
            self.forwarder.grant_initial_credit(rl)
        else:
            first = not addr.rlinks
            addr.rlinks.append(rl)
            if first:
                self._destination_added(addr)
            self.edge_tracking.destinations_changed(addr)
        rl.engine.wake()

    # -- links the peer attaches -------------------------------------------------------------------
    def on_link_open(self, engine, link) -> None:
        lo = raw.link_object(link)
        rc: RouterConnection = engine.app
        capacity = engine.settings.link_capacity
        if rc.mesh is not None and self.inter_router.link_open(engine, link, lo):
            engine.wake()
            return
        if rc.policy is not None and self.policing.link_refused(engine, link, lo, rc.policy):
            return
        if self.edge_tracking.link_open(engine, link, lo):
            return
        if self.link_router:
            node = lo.remote_source if lo.is_sender else lo.remote_target
            if not node.dynamic and self.link_router.try_attach(engine, link, lo, node.address):
                return
        if self.link_router.refused_coordinator(engine, link, lo):  # transactions only through a link route
            return
        if lo.is_sender:  # the peer receives: an outgoing link
            src = lo.remote_source
            if src.dynamic:
                # An edge router's dynamic addresses are reached through its interior (key H<edge id>).
                scope = f"_edge/{self.id}" if self.edge is not None else f"_topo/0/{self.id}"
                address = f"amqp:/{scope}/temp.{secrets.token_urlsafe(9)}"
                # Balanced, as Dispatch 1.19 binds a dynamic source's address (qdstat -a shows it so); it
                # has one receiver, so the distribution changes nothing else.
                addr = self.addresses.bind(self.parser.key(address), address, BALANCED)
                engine.open_link_like_remote(link, source_address=address, dynamic_source=True)
            else:
                if not src.address:
                    engine.refuse_link(link, "amqp:invalid-field", "receiver needs a source address")
                    return
                addr = self.address_for(src.address, outgoing=True, waypoint=waypoint_ordinal(src))
                if addr is None:
                    engine.refuse_link(link, "amqp:not-found", "Node not found")
                    return
                engine.open_link_like_remote(link)
            rl = RouterLink(link, rc, False, addr, capacity, lo.name, self.forwarder)
            rl.presettled_out = lo.remote_snd_settle_mode == proton.Link.SND_SETTLED
            if addr.key[0] == "H" and rc.role == UPLINK_ROLE:
                # An edge's own addresses (_edge/<edge>/...) come down with x-opt-qd.to, by which the edge
                # routes them: Dispatch never strips annotations on edge connections (router_node.c).
                rl.annotate_out = True
            if src.dynamic:
                rl.dynamic_address = address
            self._own(rc, rl)
            first = not addr.rlinks
            addr.rlinks.append(rl)
            if first:
                self._destination_added(addr)
            self.edge_tracking.destinations_changed(addr)
            log.debug("outgoing link %s attached to %s", lo.name, addr.key)
        else:  # the peer sends: an incoming link
            tgt = lo.remote_target
            addr = None
            waypoint = None
            if tgt.dynamic:
                addr = self._dynamic_target(engine, link)
            elif tgt.address:
                waypoint = waypoint_ordinal(tgt)
                addr = self.address_for(tgt.address, outgoing=False, waypoint=waypoint)
                if addr is None:
                    engine.refuse_link(link, "amqp:not-found", "Node not found")
                    return
            if not tgt.dynamic:
                engine.open_link_like_remote(link)
            rl = RouterLink(link, rc, True, addr, capacity, lo.name, rc.gate or self.forwarder)
            rl.from_waypoint = waypoint is not None  # a container's queue produces this phase
            if addr is not None and addr.key[0] in "RH":
                rl.target_override = tgt.address
            self._own(rc, rl)
            if addr is not None:
                addr.inlinks.add(rl)
                if self.edge is not None:
                    self.edge.producer_added(addr, tgt.address)
                elif rl.from_edge:
                    self.edge_tracking.producer_attached(rl)
            self.forwarder.grant_initial_credit(rl)
            log.debug("incoming link %s attached to %s", lo.name, addr.key if addr else "(anonymous)")
        engine.wake()

    def _dynamic_target(self, engine, link) -> Address:
        """Accept a sender's dynamic target: a fresh mobile address ``_$temp.<id>``, balanced whatever the
        address configuration says, that receivers anywhere in the mesh can attach to (Qpid Dispatch 1.19
        src/router_core/modules/address_lookup_client/address_lookup_client.c; a dynamic *source* gets a
        topological ``_topo/0/<router>/temp.<id>`` instead, above)."""
        address = f"amqp:/_$temp.{secrets.token_urlsafe(9)}"
        name = self.parser.parse(address)[1]
        addr = self.addresses.bind("M0" + name, name, BALANCED)
        engine.open_link_like_remote(link)
        # The attach frame goes out with the engine's next output, so the target it answers with can
        # still be given its address and dynamic flag here.
        target = raw.link_object(link).target
        target.address = address
        target.dynamic = True
        return addr

    @staticmethod
    def _own(rc: RouterConnection, rl: RouterLink) -> None:
        """``rl`` joins its connection's table, and its engine hands its events to ``rl.owner``."""
        rc.links[rl.ptr] = rl
        rc.engine.own_link(rl.ptr, rl)

    def on_link_close(self, engine, link, closed: bool) -> None:
        rc = engine.app
        rec = engine.link_record(link)
        if isinstance(rec, RouterLink):
            rc.links.pop(link, None)
            self.unbind_link(rec)
            if self.edge is not None and rc is self.edge.uplink:
                self.edge.link_lost(rec)
            if rec.auto_link is not None:
                name, description = raw.link_remote_condition(link)
                self.auto_links.link_closed(rec, description or name, name)
        elif isinstance(rec, ControlLink):
            self.inter_router.link_closed(rc, link)
        elif isinstance(rec, RoutedLink):
            self.link_router.link_closed(link)
        elif isinstance(rec, TrackingLink):
            self.edge_tracking.link_closed(rec)
        engine.wake()

    def on_connection_close(self, engine) -> None:
        rc: RouterConnection = engine.app
        for rl in list(rc.links.values()):
            self.unbind_link(rl)
        rc.links.clear()
        self.budget.forget(rc)
        self.trimmer.expect_release()
        self.inter_router.connection_closed(rc)
        if self.edge is not None:
            self.edge.connection_closed(rc)
        self.edge_tracking.connection_closed(rc)
        self.connections.discard(rc)
        self.policing.connection_closed(rc)
        self.auto_links.connection_closed(rc)
        if self.link_router.links:
            self.link_router.connection_closed(rc)
        if self.mesh is not None and self.link_router:
            self.link_router.refresh_advertised()
        log.info("connection %d from %s closed%s", engine.id, engine.remote_host,
                 f" ({engine.error})" if engine.error else "")

    # -- what other parts and management ask of the router --------------------------------------------
    def close_link(self, rl: RouterLink, condition: str, description: str) -> None:
        """Take a link out of routing, forget it and detach it towards its peer with ``condition``."""
        rc = rl.conn
        rc.links.pop(rl.ptr, None)
        self.unbind_link(rl)
        if self.edge is not None and rc is self.edge.uplink:
            self.edge.link_lost(rl)
        rl.engine.close_link(rl.ptr, condition, description)

    def unbind_link(self, rl: RouterLink) -> None:
        """A link leaves routing (detached, closed, lost with its connection): its address forgets it, what
        waits on or is unsettled at an outgoing link returns to its producers, its counters go to the
        router's totals, and its engine stops handing it events (and forgets its half-received bytes)."""
        if rl.closed:
            return
        rl.closed = True
        rl.engine.disown_link(rl.ptr)
        self._keep_totals(rl)
        addr = rl.address
        if rl.incoming:
            self.forwarder.forget_producer(rl)
            if addr is not None:
                addr.inlinks.discard(rl)
                if self.edge is not None:
                    self.edge.producer_removed(addr)
                elif rl.from_edge:
                    self.edge_tracking.producer_detached(rl)
        else:
            try:
                addr.rlinks.remove(rl)
            except ValueError:
                pass
            else:
                if not addr.rlinks:
                    self._destination_removed(addr)
                self.edge_tracking.destinations_changed(addr)
            self.forwarder.fail_outgoing(rl)
        if addr is not None:
            self.addresses.discard_unused(addr)

    def enqueue(self, ind: InDelivery, links) -> None:
        """Queue one copy of ``ind`` on each of ``links`` (see Forwarder.enqueue)."""
        self.forwarder.enqueue(ind, links)

    def add_local_endpoint(self, name: str, handler) -> None:
        """A router-internal endpoint (e.g. ``$management``): see MeshForwarding.add_local_endpoint."""
        self.mesh_forwarding.add_local_endpoint(name, handler)

    def add_internal_endpoint(self, key: str, distribution: str, handler) -> None:
        """A router-internal endpoint under one routing key only, with Dispatch's distribution for it
        (``L$_management_internal`` closest, ``M0_$qd.edge_heartbeat`` balanced); messages to it go to
        ``handler(msg_bytes)`` and are accepted, as for add_local_endpoint. Not advertised to the mesh."""
        addr = self.addresses.bind(key, key[2:] if key[0] == "M" else key[1:], distribution)
        addr.handler = handler
        self.forwarder.destination_appeared(addr)

    def send_local(self, msg: bytes) -> bool:
        """Send a message from the router itself, routed by its ``to``; False when it has no route."""
        return self.mesh_forwarding.send_local(msg)

    def advertise_key(self, key: str, present: bool) -> None:
        """A non-address key (a link route with a local container) to advertise or withdraw."""
        if self.mesh is None:
            return
        if present:
            self.mesh.add_local_address(key, 0)
        else:
            self.mesh.remove_local_address(key)
        self.inter_router.flush()

    def mesh_nodes(self) -> list:
        """The routing engine's node table (management ``router.node``); empty unless interior."""
        return self.mesh.nodes() if self.mesh is not None else []

    # -- MeshListener (router/mesh/engine.py): relayed to mesh forwarding and link routes ---------------
    def routes_changed(self, next_hops: dict, costs: dict, valid_origins: dict, radius: int) -> None:
        self.mesh_forwarding.routes_changed(next_hops, costs, valid_origins, radius)

    def router_lost(self, router_id: str) -> None:
        self.link_router.router_lost(router_id)
        self.mesh_forwarding.router_lost(router_id)
        self.edge_tracking.recheck_all()
        # Consumers behind the lost router are gone: stop the waypoints that fed them. A scan of the table,
        # on this cold path only (a router lost), instead of a per-address hook in mesh forwarding.
        for addr in list(self.addresses.values()):
            if addr.inlinks and not addr.has_destination:
                self.forwarder.destination_lost(addr)

    def remote_address_added(self, router_id: str, key: str, hint: int) -> None:
        if key[0] in LINK_ROUTE_KEY_CLASSES:
            self.link_router.remote_added(router_id, key)
        else:
            self.mesh_forwarding.remote_address_added(router_id, key, hint)
            self.edge_tracking.destinations_changed(self.addresses.get(key))

    def remote_address_removed(self, router_id: str, key: str) -> None:
        if key[0] in LINK_ROUTE_KEY_CLASSES:
            self.link_router.remote_removed(router_id, key)
        else:
            self.mesh_forwarding.remote_address_removed(router_id, key)
            addr = self.addresses.get(key)
            if addr is not None:
                self.forwarder.destination_lost(addr)  # the last consumer may have been that router's
            self.edge_tracking.destinations_changed(addr)

    # -- local destinations, told to the edge uplink and the routing engine ----------------------------
    def _destination_added(self, addr: Address) -> None:
        """``addr`` got its first local consumer."""
        self.forwarder.destination_appeared(addr)
        if self.edge is not None:
            self.edge.consumer_added(addr)
        if self.mesh is not None and P.is_synced_key(addr.key):
            self.mesh.add_local_address(addr.key, DISTRIBUTION_HINT.get(addr.distribution, P.HINT_ANYCAST_BALANCED))
            self.inter_router.flush()

    def _destination_removed(self, addr: Address) -> None:
        """``addr`` lost its last local consumer (called before what was queued for it goes back, so that a
        waypoint's credit is taken back first: see Forwarder.destination_lost)."""
        self.forwarder.destination_lost(addr)
        if self.edge is not None:
            self.edge.consumer_removed(addr)
        if self.mesh is not None and P.is_synced_key(addr.key):
            self.mesh.remove_local_address(addr.key)
            self.inter_router.flush()

    # -- binding -----------------------------------------------------------------------------------
    def address_for(self, address: str, *, outgoing: bool, waypoint: int | None = None) -> Address | None:
        """The routing entry a link attaches to; None for an unavailable address.

        A container that declares itself waypoint N (capability ``qd.waypoint[.N]`` on the terminus that
        names the node) consumes phase N-1 and produces phase N, whatever the address configuration says.
        """
        klass, name = self.parser.parse(address)
        bind = self.addresses.bind
        if klass == "M":
            own = self.addresses.get("M0" + name)
            if own is not None and own.handler is not None:
                return own   # the router's own nodes ($management) follow no address configuration
            sem = self.address_config.semantics(name)
            if sem.distribution == UNAVAILABLE:
                return None
            if waypoint is not None:
                phase = waypoint - 1 if outgoing else waypoint
            else:
                phase = sem.out_phase if outgoing else sem.in_phase
            return bind(f"M{phase}{name}", name, sem.distribution, phase, sem.pattern)
        if klass == "L":
            return bind("L" + name, name, CLOSEST)
        # Another router's address (R), or an edge router's (H): closest.
        return bind(klass + name, name, CLOSEST)

    def _keep_totals(self, rl: RouterLink) -> None:
        t = self.closed_link_totals
        for attr, key in CLOSED_LINK_COUNTERS:
            t[key] = t.get(key, 0) + getattr(rl, attr)
        direction = "deliveriesIngress" if rl.incoming else "deliveriesEgress"
        t[direction] = t.get(direction, 0) + rl.delivery_count
        if rl.conn is not None and rl.conn.role == "route-container":
            key = direction + "RouteContainer"
            t[key] = t.get(key, 0) + rl.delivery_count
