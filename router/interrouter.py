"""Inter-router connections: the link layout of Qpid Dispatch 1.x and the control-message plumbing.

On an ``inter-router`` connection the connector side attaches (Qpid Dispatch 1.19
src/router_core/connections.c):

* one incoming and one outgoing **control** link (capability ``qd.router``), in their own session;
* ten incoming and ten outgoing **data** links (capability ``qd.router-data``), one session per
  priority 0..9. Data links are anonymous; messages are routed by their router annotations.

The listener side accepts whatever the peer attaches and classifies links by capability. This module
moves control messages between those links and the routing engine (:mod:`router.mesh`), which owns the
protocol: it is the :class:`wire.assembly.LinkOwner` of the control links (:class:`ControlLink` records).
Data links become ordinary :class:`~router.links.RouterLink` records flagged ``inter_router``, owned by
the forwarder like any message link. A message goes on the data link of its header priority (4, Dispatch's
default, when it has no header); messages are accepted on any of them.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import Callable, Protocol

import proton

from wire import raw
from wire.assembly import KEEP
from wire.connection import printable
from wire.header import DEFAULT_PRIORITY
from wire.terminus import capabilities
from router.addresses import Address
from router.links import RouterConnection, RouterLink, next_link_id
from router.mesh.protocol import (CAP_ROUTER_CONTROL, CAP_ROUTER_DATA, DATA_LINK_PRIORITIES,
                                  DUPLICATE_ID_CONDITION, DUPLICATE_ID_REASON, OPEN_COST)

log = logging.getLogger("router.mesh")

# A control link's credit: control traffic is small, but a burst of MAUs/LSUs after a restart must not
# stall the protocol.
CONTROL_CREDIT = 1000
# How management shows control links, as Dispatch 1.19 does (qdstat -l: class "local", addr "qdhello", pri
# 9 = QDR_MAX_PRIORITY in include/qpid/dispatch/amqp.h).
CONTROL_OWNING_ADDRESS = "Lqdhello"
CONTROL_LINK_PRIORITY = 9

_tags = itertools.count(1)


class DataLinks(Protocol):
    """What inter-router data links need of the forwarder (router/forwarder.py)."""

    def grant_initial_credit(self, il: RouterLink) -> None: ...


class RemoteRoutes(Protocol):
    """What a change of data links needs of mesh forwarding (router/meshforward.py)."""

    def data_links_changed(self) -> None: ...


class ControlLink:
    """One control link of an inter-router connection, as the engine knows it (wire's link record), with
    the identity and delivery count management lists it by (Dispatch's ``router-control`` links)."""

    __slots__ = ("ptr", "rc", "owner", "incoming", "max_message_size", "id", "name", "delivery_count")

    def __init__(self, ptr, rc: RouterConnection, owner: "InterRouterLinks", *, incoming: bool, name: str = ""):
        self.ptr = ptr
        self.rc = rc
        self.owner = owner
        self.incoming = incoming
        self.max_message_size = 0  # control messages are small; the peer is a router we connected to
        self.id = next_link_id()
        self.name = name
        self.delivery_count = 0  # control messages received (incoming) or sent (outgoing)


class MeshConnection:
    """Per inter-router connection state: its control links, its data links, the neighbour's id."""

    __slots__ = ("rc", "peer_id", "cost", "control_in", "control_out", "data_out", "data_links", "pending",
                 "up", "placeholder", "data_in_count", "control_links")

    def __init__(self, rc: RouterConnection, cost: int):
        self.rc = rc
        self.peer_id = rc.engine.remote_container or ""
        self.cost = cost
        self.control_in = None  # raw link pointers
        self.control_out = None
        self.data_out: RouterLink | None = None  # the default-priority link (routing uses it)
        self.data_links: dict[int, RouterLink] = {}  # priority -> outgoing data link
        self.data_in_count = 0  # incoming data links so far (their priority is their attach order)
        self.control_links: list[ControlLink] = []  # open control links, in attach order (management)
        self.pending: deque = deque()  # control messages waiting for credit
        self.up = False
        # Outgoing data links count their egress on an address record of their own (not in the table).
        self.placeholder = Address("R" + self.peer_id, self.peer_id, 0, "closest")


def data_link_name(direction: str, priority: int) -> str:
    """The name of a data link this router attaches (the peer reads nothing from it: priorities go by
    attach order, as with Dispatch's own ``qdlink.<random>`` names)."""
    return f"qdlink.data.{direction}.{priority}"


def _name(rc: RouterConnection) -> str:
    """A connection as the logs name it: its number and the peer's container id."""
    return f"{rc.engine.id} ({printable(rc.engine.remote_container or '')})"


def _set_capability(terminus, cap: str) -> None:
    terminus.capabilities.put_array(False, proton.Data.SYMBOL)
    terminus.capabilities.enter()
    terminus.capabilities.put_symbol(cap)
    terminus.capabilities.exit()


class InterRouterLinks:
    """Glue between inter-router connections and the router's routing engine (``routing``: a
    :class:`router.mesh.engine.RoutingEngine`, None unless the router is interior)."""

    def __init__(self, routing, *, data_links: DataLinks, remote_routes: RemoteRoutes,
                 clock: Callable[[], float]):
        self.routing = routing
        self.data_links = data_links
        self.remote_routes = remote_routes
        self._clock = clock

    # -- connection life -------------------------------------------------------------------------
    def connection_opened(self, rc: RouterConnection) -> None:
        engine = rc.engine
        if self.routing is not None:
            refusal = self.routing.check_open(engine.remote_container, _name(rc), self._clock())
            if refusal is not None:
                engine.close(DUPLICATE_ID_CONDITION, refusal)
                return
        props = engine.connection.remote_properties or {}
        peer_cost = 1
        try:
            peer_cost = int(props.get(proton.symbol(OPEN_COST), props.get(OPEN_COST, 1)) or 1)
        except (TypeError, ValueError):
            pass
        cost = max(int(getattr(engine.settings, "cost", 1) or 1), peer_cost, 1)
        rc.mesh = MeshConnection(rc, cost)
        if not engine.server:
            self._attach_all(rc)
        engine.wake()

    def _attach_all(self, rc: RouterConnection) -> None:
        conn = rc.engine.connection
        ssn = conn.session()
        ssn.open()
        snd = ssn.sender("qdlink.control.out")
        _set_capability(snd.target, CAP_ROUTER_CONTROL)
        _set_capability(snd.source, CAP_ROUTER_CONTROL)
        snd.snd_settle_mode = proton.Link.SND_SETTLED
        snd.open()
        rcv = ssn.receiver("qdlink.control.in")
        _set_capability(rcv.source, CAP_ROUTER_CONTROL)
        _set_capability(rcv.target, CAP_ROUTER_CONTROL)
        rcv.snd_settle_mode = proton.Link.SND_SETTLED
        rcv.open()
        self._register_control(rc, raw.pointer(snd), outgoing=True, name=snd.name)
        self._register_control(rc, raw.pointer(rcv), outgoing=False, name=rcv.name)
        for prio in range(DATA_LINK_PRIORITIES):
            ssn = conn.session()
            ssn.open()
            snd = ssn.sender(data_link_name("out", prio))
            _set_capability(snd.target, CAP_ROUTER_DATA)
            snd.open()
            rcv = ssn.receiver(data_link_name("in", prio))
            _set_capability(rcv.source, CAP_ROUTER_DATA)
            rcv.open()
            self._register_data(rc, raw.pointer(snd), outgoing=True, priority=prio)
            self._register_data(rc, raw.pointer(rcv), outgoing=False, priority=prio)

    def link_open(self, engine, link, lo) -> bool:
        """A peer-initiated attach on an inter-router connection: True if it was a mesh link."""
        rc: RouterConnection = engine.app
        if rc.mesh is None:
            return False
        caps = set(capabilities(lo.remote_source.capabilities)) | set(capabilities(lo.remote_target.capabilities))
        if CAP_ROUTER_CONTROL in caps:
            engine.open_link_like_remote(link)
            self._register_control(rc, link, outgoing=lo.is_sender, name=lo.name or "")
            return True
        if CAP_ROUTER_DATA in caps:
            engine.open_link_like_remote(link)
            # Priority by attach order in each direction, 0..9, as Dispatch 1.19 gives its peer's data
            # links (router_core/connections.c): link names carry no priority (Dispatch's are
            # qdlink.<random>), and both routers attach the ten in priority order.
            m = rc.mesh
            if lo.is_sender:
                prio = min(len(m.data_links), DATA_LINK_PRIORITIES - 1)
            else:
                prio = min(m.data_in_count, DATA_LINK_PRIORITIES - 1)
                m.data_in_count += 1
            self._register_data(rc, link, outgoing=lo.is_sender, priority=prio)
            return True
        return False

    def _register_control(self, rc: RouterConnection, link, *, outgoing: bool, name: str) -> None:
        m = rc.mesh
        if outgoing:
            m.control_out = link
        else:
            m.control_in = link
            raw.link_flow(link, CONTROL_CREDIT)
        record = ControlLink(link, rc, self, incoming=not outgoing, name=name)
        m.control_links.append(record)
        rc.engine.own_link(link, record)
        self._maybe_up(rc)

    def _register_data(self, rc: RouterConnection, link, *, outgoing: bool, priority: int) -> None:
        m = rc.mesh
        capacity = rc.engine.settings.link_capacity
        owner = self.data_links
        if outgoing:
            rl = RouterLink(link, rc, False, m.placeholder, capacity, f"data.out.{priority}", owner)
            rl.inter_router = rl.annotate_out = True
            rc.links[link] = rl
            rc.engine.own_link(link, rl)
            m.data_links[priority] = rl
            if priority == DEFAULT_PRIORITY or m.data_out is None:
                m.data_out = rl
        else:
            rl = RouterLink(link, rc, True, None, capacity, f"data.in.{priority}", owner)
            rl.inter_router = rl.keep_in = True
            rc.links[link] = rl
            rc.engine.own_link(link, rl)
            self.data_links.grant_initial_credit(rl)
        if m.up:
            self.remote_routes.data_links_changed()

    def _maybe_up(self, rc: RouterConnection) -> None:
        m = rc.mesh
        if m.up or m.control_in is None or m.control_out is None:
            return
        m.up = True
        log.info("inter-router connection %d to %s up (cost %d)", rc.engine.id, m.peer_id, m.cost)
        if self.routing is not None:
            self.routing.link_up(rc, m.cost, self._clock())
            self.flush()

    def connection_closed(self, rc: RouterConnection) -> None:
        m = rc.mesh
        if m is None:
            return
        rc.mesh = None
        _, description = raw.connection_remote_condition(raw.pointer(rc.engine.connection))
        if self.routing is not None and printable(description or "").startswith(DUPLICATE_ID_REASON):
            self.routing.peer_refused(_name(rc), printable(description), self._clock())
        if m.up and self.routing is not None:
            log.info("inter-router connection %d to %s lost", rc.engine.id, m.peer_id)
            self.routing.link_lost(rc, self._clock())
            self.flush()

    def link_closed(self, rc: RouterConnection, link) -> bool:
        """A control link went away: the neighbour is lost now (Dispatch's linkLost)."""
        m = rc.mesh
        if m is None or link not in (m.control_in, m.control_out):
            return False
        if m.up and self.routing is not None:
            m.up = False
            self.routing.link_lost(rc, self._clock())
            self.flush()
        if link == m.control_in:
            m.control_in = None
        else:
            m.control_out = None
        m.control_links = [c for c in m.control_links if c.ptr != link]
        return True

    # -- control traffic: the LinkOwner of ControlLink records (wire/assembly.py) ---------------------
    def on_message(self, engine, rec: ControlLink, d, msg: bytes | None) -> None:
        """A control message from the neighbour (the engine assembled it; the link is advanced)."""
        raw.delivery_settle(d)
        raw.link_flow(rec.ptr, 1)
        rec.delivery_count += 1
        if self.routing is not None and msg is not None:
            self.routing.receive(rec.rc, msg, self._clock())
            self.flush()
        engine.wake()

    def on_partial(self, engine, rec: ControlLink, d, held: int) -> int:
        return KEEP  # wait for the whole message (control messages are small)

    def on_delivery_update(self, engine, rec: ControlLink, d) -> None:
        if not rec.incoming:
            raw.delivery_settle(d)  # our pre-settled control messages: nothing to do

    def on_link_flow(self, engine, rec: ControlLink) -> None:
        self._drain(rec.rc)

    def on_oversized(self, engine, rec: ControlLink, d, limit: int) -> None:
        """Not reached: control links have no size limit."""

    def flush(self) -> None:
        """Send what the routing engine produced."""
        routing = self.routing
        if routing is None:
            return
        for rc, description in routing.take_refusals():
            if isinstance(rc, RouterConnection):
                rc.engine.close(DUPLICATE_ID_CONDITION, description)
        out = routing.take_output()
        touched = set()
        for rc, msg in out:
            m = rc.mesh if isinstance(rc, RouterConnection) else None
            if m is None:
                continue
            m.pending.append(msg)
            touched.add(rc)
        for rc in touched:
            self._drain(rc)

    def _drain(self, rc: RouterConnection) -> None:
        m = rc.mesh
        if m is None or m.control_out is None:
            return
        link = m.control_out
        sent = 0
        while m.pending and raw.link_credit(link) > 0:
            msg = m.pending.popleft()
            d = raw.send_message(link, b"c%x" % next(_tags), msg)
            raw.delivery_settle(d)
            sent += 1
        if sent:
            for record in m.control_links:
                if record.ptr == link:
                    record.delivery_count += sent
            rc.engine.wake()

    # -- management ---------------------------------------------------------------------------------
    def management_rows(self, connections) -> list[dict]:
        """The router.link attributes (Qpid Dispatch 1.19 names) of every open control link of
        ``connections``, as Dispatch lists its ``router-control`` links (src/router_core/agent_link.c):
        priority 9, the outgoing one owned by the local ``qdhello`` address (``Lqdhello``; the incoming
        one by none). Control messages are pre-settled, so every delivery counts as presettled and none
        is ever undelivered or unsettled."""
        rows = []
        for rc in connections:
            m = rc.mesh
            if m is None:
                continue
            for c in m.control_links:
                try:
                    credit = raw.link_credit(c.ptr)
                except Exception:  # a link being torn down may already be freed by the engine
                    credit = 0
                rows.append({
                    "identity": str(c.id), "linkName": c.name, "linkType": "router-control",
                    "linkDir": "in" if c.incoming else "out",
                    "owningAddr": None if c.incoming else CONTROL_OWNING_ADDRESS, "capacity": CONTROL_CREDIT,
                    "undeliveredCount": 0, "unsettledCount": 0, "deliveryCount": c.delivery_count,
                    "presettledCount": c.delivery_count, "creditAvailable": credit,
                    "priority": CONTROL_LINK_PRIORITY, "connectionId": str(rc.engine.id),
                    "adminStatus": "enabled", "operStatus": "up",
                })
        return rows
