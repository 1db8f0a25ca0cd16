"""The router: connection and link life cycle (the cold paths) on top of the forwarder (the hot path).

``Router`` is sans-IO: it implements :class:`wire.connection.ConnectionHandler` and never touches a
socket. The daemon (router/daemon.py) creates listeners and connectors whose engines report to it.
"""

from __future__ import annotations

import logging
import secrets
import time

import proton

from wire import raw
from wire.assembly import MessageAssembler
from wire.memory import HeapTrimmer
from wire.terminus import capabilities
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from router.addresses import CLOSEST, UNAVAILABLE, Address, AddressConfigTable, AddressParser
from router.autolinks import AutoLinkManager
from router.budget import RESOURCE_LIMIT_EXCEEDED, BufferBudget
from router.linkroutes import LinkRouter
from router.edge import UPLINK_ROLE, EdgeUplink
from router.flowhooks import FlowHooks
from router.forwarder import Forwarder
from router.interrouter import OPEN_ANNOTATIONS_VERSION, OPEN_COST_PROPERTY, InterRouterLinks
from router.links import RouterConnection, RouterLink
from router.meshforward import MeshForwarding

log = logging.getLogger("router.core")

PRODUCT = "trio-dispatch"
VERSION = "0.1.0"


WAYPOINT_CAPABILITY = "qd.waypoint"
# Dispatch accepts qd.waypoint.1 .. qd.waypoint.9 (phases 0..9).
MAX_WAYPOINT_ORDINAL = 9


def waypoint_ordinal(terminus) -> int | None:
    """N from a ``qd.waypoint`` (= 1) or ``qd.waypoint.N`` capability, given as a single symbol or an
    array of symbols (DISPATCH-1430: Artemis sends an array); None when the terminus has none."""
    for sym in capabilities(terminus.capabilities):
        if sym == WAYPOINT_CAPABILITY:
            return 1
        if sym.startswith(WAYPOINT_CAPABILITY + "."):
            suffix = sym[len(WAYPOINT_CAPABILITY) + 1:]
            if suffix.isdigit() and 1 <= int(suffix) <= MAX_WAYPOINT_ORDINAL:
                return int(suffix)
    return None


# Link counter attribute -> management name, summed over closed links (router entity totals).
CLOSED_LINK_COUNTERS = (
    ("presettled", "presettledDeliveries"), ("dropped_presettled", "droppedPresettledDeliveries"),
    ("accepted", "acceptedDeliveries"), ("rejected", "rejectedDeliveries"),
    ("released", "releasedDeliveries"), ("modified", "modifiedDeliveries"),
)

# Router entity timers (seconds) handed to the routing engine in interior mode, with Dispatch's defaults.
MESH_TIMER_DEFAULTS = {
    "hello_interval": 1.0, "hello_max_age": 3.0, "ra_interval": 30.0, "ra_interval_flux": 4.0,
    "remote_ls_max_age": 60.0,
}


class Router(MeshForwarding, FlowHooks, Forwarder, ConnectionHandler):
    """One router's routing state and its AMQP endpoint logic."""

    def __init__(self, router_id: str, *, default_distribution: str = "balanced", address_entities=(),
                 auto_link_entities=(), link_route_entities=(), clock=None, mode: str = "standalone",
                 mesh_timers: dict | None = None, flow_recorder=None, budget: BufferBudget | None = None):
        self.id = router_id
        self.mode = mode or "standalone"
        self.parser = AddressParser(router_id)
        self.address_config = AddressConfigTable(default_distribution)
        for entity in address_entities:
            self.address_config.add(entity)
        self.addresses: dict[str, Address] = {}
        self.connections: set[RouterConnection] = set()
        self.assembly = MessageAssembler()  # multi-frame deliveries still arriving, by delivery pointer
        self._clock = clock or (lambda: 0.0)
        self._init_forwarder(budget)
        self.budget.connections = self.connections
        self.trimmer = HeapTrimmer()
        # Counters of links that have gone, so router-wide totals (management) do not fall back.
        self.closed_link_totals: dict[str, int] = {}
        self.flow = flow_recorder
        self._init_mesh()
        self.inter_router = InterRouterLinks(self)
        if self.mode == "interior":
            from router.mesh.engine import RoutingEngine

            timers = dict(MESH_TIMER_DEFAULTS, **(mesh_timers or {}))
            self.mesh = RoutingEngine(router_id, self, instance=int(time.time()), **timers)
        elif self.mode == "edge":
            self.edge = EdgeUplink(self)
        self.auto_links = AutoLinkManager(self, auto_link_entities)
        self.link_router = LinkRouter(self, link_route_entities)

    def tick(self, now: float) -> None:
        """Time-driven work (auto-link retries, the routing protocol). The daemon calls it every
        TICK_SECONDS."""
        self.auto_links.tick(now)
        if self.assembly:
            self._abort_stalled(now)
        self._trim_heap(now)
        if self.mesh is not None:
            self.mesh.tick(now)
            self.inter_router.flush()
            self.on_batch_end()

    def now(self) -> float:
        return self._clock()

    def mesh_flush(self) -> None:
        self.inter_router.flush()

    def mesh_data_links_changed(self) -> None:
        for addr in list(self.addresses.values()):
            if addr.rnodes:
                self._recompute_remote(addr)

    # -- engines ---------------------------------------------------------------------------------
    def connection_settings(self, **kw) -> ConnectionSettings:
        """Settings with this router's identity filled in (container id = router id, as Dispatch)."""
        kw.setdefault("container_id", self.id)
        props = {"product": PRODUCT, "version": VERSION}
        if kw.get("role") in ("inter-router", "edge"):
            props[OPEN_ANNOTATIONS_VERSION] = 1
            if int(kw.get("cost") or 1) > 1:
                props[OPEN_COST_PROPERTY] = int(kw["cost"])
        kw.setdefault("properties", props)
        return ConnectionSettings(**kw)

    def new_engine(self, settings: ConnectionSettings, *, server: bool, remote_host: str = "") -> EngineConnection:
        engine = EngineConnection(self, settings, server=server, remote_host=remote_host)
        rc = RouterConnection(engine, settings.role, settings.name, self._clock())
        engine.app = rc
        self.connections.add(rc)
        return engine

    def close_all(self) -> None:
        """Graceful shutdown: every connection gets a close frame."""
        for rc in list(self.connections):
            rc.engine.close()

    # -- hot events --------------------------------------------------------------------------------
    def on_delivery(self, engine, d) -> None:
        lp = raw.delivery_link(d)
        rl = engine.app.links.get(lp)
        if rl is None:
            rc = engine.app
            if rc.mesh is not None and self.inter_router.is_control(rc, lp):
                self.inter_router.control_delivery(rc, d)
                return
            routed = self.link_router.links.get(lp) if self.link_router.links else None
            if routed is not None:
                self.link_router.on_delivery(routed, d)
            return
        if rl.incoming:
            if not raw.delivery_readable(d):
                # A delivery we already took: only the producer settling after our mirrored outcome
                # matters (see Forwarder.producer_settled).
                if self._mirrored and raw.delivery_settled(d):
                    self.producer_settled(d)
                return
            limit = rl.max_message_size
            if raw.delivery_partial(d):
                chunk = raw.recv_all(lp)
                if chunk:
                    budget = self.budget
                    budget.total += len(chunk)  # counted router-wide; never pauses its own connection
                    if self.assembly.feed(d, rl, chunk, self._clock(), limit):
                        self._oversized(engine, rl, d, limit)
                    elif budget.total > budget.total_high:
                        budget.over(rl.conn)
                elif raw.delivery_aborted(d):
                    self._drop_aborted(lp, d)
                return
            msg = raw.recv_all(lp)
            if not msg and raw.delivery_aborted(d):
                self._drop_aborted(lp, d)
                return
            if self.assembly.partials:
                held = self.assembly.size_of(d)
                if held:
                    self.budget.total -= held  # message_in charges the whole message
                    msg = self.assembly.finish(d, msg)
            if limit and len(msg) > limit:
                self._oversized(engine, rl, d, limit)
                return
            raw.link_advance(lp)
            self.message_in(rl, d, msg)
        else:
            self.outgoing_update(rl, d)

    def _oversized(self, engine, rl: RouterLink, d, limit: int) -> None:
        """A message over maxMessageSize: reject it and detach its link (AMQP's link error for this)."""
        self.budget.total -= self.assembly.drop(d)
        condition = "amqp:link:message-size-exceeded"
        description = f"message larger than the {limit}-byte limit of this connection"
        raw.set_rejected(d, condition, description)
        raw.delivery_settle(d)
        lp = rl.ptr
        engine.app.links.pop(lp, None)
        self._unbind(rl)
        engine.close_link(lp, condition, description)
        log.warning("connection %d: %s on link %s", engine.id, description, rl.name)

    def _drop_aborted(self, lp, d) -> None:
        """The sender aborted a (multi-frame) delivery: forget what arrived of it."""
        self.budget.total -= self.assembly.drop(d)
        raw.link_advance(lp)
        raw.delivery_settle(d)

    def _abort_stalled(self, now: float) -> None:
        """Detach the links of partial deliveries that got no new bytes for stalledDeliveryTimeoutSeconds
        (a peer must not pin memory by starting a message and never finishing it). A delivery of a
        connection we are not reading from (paused) is not stalled by its sender: its clock restarts."""
        timeout = self.budget.stalled_delivery_timeout
        for d in self.assembly.stalled(now, timeout):
            rl = self.assembly.owner_of(d)
            if rl.conn.paused:
                self.assembly.touch(d, now)
                continue
            self.budget.stalled_aborted += 1
            size = self.assembly.size_of(d)
            description = f"delivery made no progress for {timeout:g} s ({size} bytes received)"
            log.warning("connection %d: link %s detached: %s", rl.engine.id, rl.name, description)
            rl.conn.links.pop(rl.ptr, None)
            self._unbind(rl)  # forgets the delivery's bytes
            rl.engine.close_link(rl.ptr, RESOURCE_LIMIT_EXCEEDED, description)

    def _trim_heap(self, now: float) -> None:
        """Hand freed memory back to the OS after a burst (wire/memory.py). What the router knows it
        uses: the buffered bytes (the engines' delivery buffers it does not count; the trimmer backs off
        when a trim gives little back)."""
        self.trimmer.tick(now, self.budget.total)

    def on_output_drained(self, engine) -> None:
        self.output_room(engine.app)
        self.on_batch_end()

    def on_link_flow(self, engine, link) -> None:
        rl = engine.app.links.get(link)
        if rl is None:
            rc = engine.app
            if rc.mesh is not None and self.inter_router.is_control(rc, link):
                self.inter_router.control_flow(rc)
                return
            routed = self.link_router.links.get(link) if self.link_router.links else None
            if routed is not None:
                self.link_router.on_flow(routed)
            return
        if rl.incoming:
            return
        if self.edge is not None and link in self.edge.waiting and raw.link_credit(link) > 0:
            self.edge.credit_arrived(rl)
        if rl.undelivered:
            self.pump(rl)
        if raw.link_get_drain(link) and not rl.undelivered:
            raw.link_drained(link)
            engine.wake()

    # -- cold events -----------------------------------------------------------------------------
    def on_connection_open(self, engine) -> None:
        log.info("connection %d from %s opened (container %s, role %s)", engine.id, engine.remote_host,
                 engine.remote_container, engine.settings.role)
        engine.app.remote_open = True
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

    # -- links the router attaches itself (auto-links) --------------------------------------------
    def register_auto_link(self, rc: RouterConnection, link, auto_link) -> RouterLink:
        """Track a link an auto-link attached; it joins the routing table when the container answers."""
        incoming = auto_link.direction == "in"
        phase_name = auto_link.address
        rl = RouterLink(link, rc, incoming, None, rc.engine.settings.link_capacity, auto_link.name)
        rl.auto_link = auto_link
        key = f"M{auto_link.phase}{phase_name}"
        sem = self.address_config.semantics(phase_name)
        rl.address = self._bind_address(key, phase_name, sem.distribution, auto_link.phase, sem.pattern)
        rc.links[link] = rl
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
            self.grant_initial_credit(rl)
        else:
            first = not addr.rlinks
            addr.rlinks.append(rl)
            if first:
                self.destination_appeared(addr)
                self.local_destination_added(addr)
        rl.engine.wake()

    def on_link_open(self, engine, link) -> None:
        lo = raw.link_object(link)
        rc: RouterConnection = engine.app
        capacity = engine.settings.link_capacity
        if rc.mesh is not None and self.inter_router.link_open(engine, link, lo):
            engine.wake()
            return
        if self.link_router:
            node = lo.remote_source if lo.is_sender else lo.remote_target
            if not node.dynamic and self.link_router.try_attach(engine, link, lo, node.address):
                return
        if lo.is_sender:  # the peer receives: an outgoing link
            src = lo.remote_source
            if src.dynamic:
                # An edge router's dynamic addresses are reached through its interior (key H<edge id>).
                scope = f"_edge/{self.id}" if self.edge is not None else f"_topo/0/{self.id}"
                address = f"amqp:/{scope}/temp.{secrets.token_urlsafe(9)}"
                addr = self._bind_address(self.parser.key(address), address, CLOSEST)
                engine.open_link_like_remote(link, source_address=address, dynamic_source=True)
            else:
                if not src.address:
                    engine.refuse_link(link, "amqp:invalid-field", "receiver needs a source address")
                    return
                addr = self._address_for(src.address, outgoing=True, waypoint=waypoint_ordinal(src))
                if addr is None:
                    engine.refuse_link(link, "amqp:not-found", "Node not found")
                    return
                engine.open_link_like_remote(link)
            rl = RouterLink(link, rc, False, addr, capacity, lo.name)
            rl.presettled_out = lo.remote_snd_settle_mode == proton.Link.SND_SETTLED
            if src.dynamic:
                rl.dynamic_address = address
            rc.links[link] = rl
            first = not addr.rlinks
            addr.rlinks.append(rl)
            if first:
                self.destination_appeared(addr)
                self.local_destination_added(addr)
            log.debug("outgoing link %s attached to %s", lo.name, addr.key)
        else:  # the peer sends: an incoming link
            tgt = lo.remote_target
            if tgt.dynamic:
                engine.refuse_link(link, "amqp:not-implemented", "dynamic targets are not supported")
                return
            addr = None
            if tgt.address:
                addr = self._address_for(tgt.address, outgoing=False, waypoint=waypoint_ordinal(tgt))
                if addr is None:
                    engine.refuse_link(link, "amqp:not-found", "Node not found")
                    return
            engine.open_link_like_remote(link)
            rl = RouterLink(link, rc, True, addr, capacity, lo.name)
            rc.links[link] = rl
            if addr is not None:
                addr.inlinks.add(rl)
                if self.edge is not None:
                    self.edge.producer_added(addr, tgt.address)
            self.grant_initial_credit(rl)
            log.debug("incoming link %s attached to %s", lo.name, addr.key if addr else "(anonymous)")
        engine.wake()

    def on_link_close(self, engine, link, closed: bool) -> None:
        if self.link_router.links and self.link_router.link_closed(link):
            engine.wake()
            return
        rc = engine.app
        if rc.mesh is not None and self.inter_router.link_closed(rc, link):
            engine.wake()
            return
        rl = rc.links.pop(link, None)
        if rl is not None:
            self._unbind(rl)
            if self.edge is not None and rc is self.edge.uplink:
                self.edge.link_lost(rl)
            if rl.auto_link is not None:
                name, description = raw.link_remote_condition(link)
                self.auto_links.link_closed(rl, f"{name}: {description}" if name else None)
        engine.wake()

    def on_connection_close(self, engine) -> None:
        rc: RouterConnection = engine.app
        for rl in list(rc.links.values()):
            self._unbind(rl)
        rc.links.clear()
        self.budget.forget(rc)
        self.trimmer.expect_release()
        self.inter_router.connection_closed(rc)
        if self.edge is not None:
            self.edge.connection_closed(rc)
        self.connections.discard(rc)
        self.auto_links.connection_closed(rc)
        if self.link_router.links:
            self.link_router.connection_closed(rc)
        if self.mesh is not None and self.link_router:
            self.link_router.refresh_advertised()
        log.info("connection %d from %s closed%s", engine.id, engine.remote_host,
                 f" ({engine.error})" if engine.error else "")

    # -- binding -----------------------------------------------------------------------------------
    def _address_for(self, address: str, *, outgoing: bool, waypoint: int | None = None) -> Address | None:
        """The routing entry a link attaches to; None for an unavailable address.

        A container that declares itself waypoint N (capability ``qd.waypoint[.N]`` on the terminus that
        names the node) consumes phase N-1 and produces phase N, whatever the address configuration says.
        """
        klass, name = self.parser.parse(address)
        if klass == "M":
            sem = self.address_config.semantics(name)
            if sem.distribution == UNAVAILABLE:
                return None
            if waypoint is not None:
                phase = waypoint - 1 if outgoing else waypoint
            else:
                phase = sem.out_phase if outgoing else sem.in_phase
            return self._bind_address(f"M{phase}{name}", name, sem.distribution, phase, sem.pattern)
        if klass == "L":
            return self._bind_address("L" + name, name, CLOSEST)
        # Another router's address: no mesh yet in standalone mode.
        return self._bind_address(klass + name, name, CLOSEST)

    def _keep_totals(self, rl: RouterLink) -> None:
        t = self.closed_link_totals
        for attr, key in CLOSED_LINK_COUNTERS:
            t[key] = t.get(key, 0) + getattr(rl, attr)
        direction = "deliveriesIngress" if rl.incoming else "deliveriesEgress"
        t[direction] = t.get(direction, 0) + rl.delivery_count
        if rl.conn is not None and rl.conn.role == "route-container":
            key = direction + "RouteContainer"
            t[key] = t.get(key, 0) + rl.delivery_count

    def _bind_address(self, key: str, name: str, distribution: str, phase: int = 0, pattern=None) -> Address:
        addr = self.addresses.get(key)
        if addr is None:
            addr = self.addresses[key] = Address(key, name, phase, distribution, pattern)
        return addr

    def _unbind(self, rl: RouterLink) -> None:
        if rl.closed:
            return
        rl.closed = True
        self._keep_totals(rl)
        addr = rl.address
        if rl.incoming:
            if addr is not None:
                addr.inlinks.discard(rl)
                if self.edge is not None:
                    self.edge.producer_removed(addr)
            if self.assembly:
                self.budget.total -= self.assembly.drop_owner(rl)
        else:
            try:
                addr.rlinks.remove(rl)
            except ValueError:
                pass
            else:
                if not addr.rlinks:
                    self.local_destination_removed(addr)
            self.fail_outgoing(rl)
        if addr is not None and addr.unused and self.addresses.get(addr.key) is addr:
            del self.addresses[addr.key]
