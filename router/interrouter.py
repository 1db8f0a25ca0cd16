"""Inter-router connections: the link layout of Qpid Dispatch 1.x and the control-message plumbing.

On an ``inter-router`` connection the connector side attaches (Qpid Dispatch 1.19
src/router_core/connections.c):

* one incoming and one outgoing **control** link (capability ``qd.router``), in their own session;
* ten incoming and ten outgoing **data** links (capability ``qd.router-data``), one session per
  priority 0..9. Data links are anonymous; messages are routed by their router annotations.

The listener side accepts whatever the peer attaches and classifies links by capability. This module
moves control messages between those links and the routing engine (:mod:`router.mesh`), which owns the
protocol; data links become ordinary :class:`~router.links.RouterLink` records flagged ``inter_router``
so the forwarder can use them. A message goes on the data link of its header priority (4, Dispatch's
default, when it has no header); messages are accepted on any of them.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque

import proton

from wire import raw
from wire.connection import printable
from wire.terminus import capabilities
from router.addresses import Address
from router.links import RouterConnection, RouterLink
from router.mesh.protocol import DUPLICATE_ID_CONDITION, DUPLICATE_ID_REASON

log = logging.getLogger("router.mesh")

CONTROL_CAPABILITY = "qd.router"
DATA_CAPABILITY = "qd.router-data"
PRIORITIES = 10
DEFAULT_PRIORITY = 4  # QDR_DEFAULT_PRIORITY
# A control link's credit: control traffic is small, but a burst of MAUs/LSUs after a restart must not
# stall the protocol.
CONTROL_CREDIT = 1000
OPEN_COST_PROPERTY = "qd.inter-router-cost"
OPEN_ANNOTATIONS_VERSION = "qd.annotations-version"

_tags = itertools.count(1)


class MeshConnection:
    """Per inter-router connection state: its control links, its data links, the neighbour's id."""

    __slots__ = ("rc", "peer_id", "cost", "control_in", "control_out", "data_out", "data_links", "pending",
                 "up", "placeholder")

    def __init__(self, rc: RouterConnection, cost: int):
        self.rc = rc
        self.peer_id = rc.engine.remote_container or ""
        self.cost = cost
        self.control_in = None  # raw link pointers
        self.control_out = None
        self.data_out: RouterLink | None = None  # the default-priority link (routing uses it)
        self.data_links: dict[int, RouterLink] = {}  # priority -> outgoing data link
        self.pending: deque = deque()  # control messages waiting for credit
        self.up = False
        # Outgoing data links count their egress on an address record of their own (not in the table).
        self.placeholder = Address("R" + self.peer_id, self.peer_id, 0, "closest")


def _name(rc: RouterConnection) -> str:
    """A connection as the logs name it: its number and the peer's container id."""
    return f"{rc.engine.id} ({printable(rc.engine.remote_container or '')})"


def _set_capability(terminus, cap: str) -> None:
    terminus.capabilities.put_array(False, proton.Data.SYMBOL)
    terminus.capabilities.enter()
    terminus.capabilities.put_symbol(cap)
    terminus.capabilities.exit()


class InterRouterLinks:
    """Glue between inter-router connections and the router's routing engine."""

    def __init__(self, router):
        self.router = router

    @property
    def engine(self):
        return self.router.mesh

    # -- connection life -------------------------------------------------------------------------
    def connection_opened(self, rc: RouterConnection) -> None:
        engine = rc.engine
        if self.engine is not None:
            refusal = self.engine.check_open(engine.remote_container, _name(rc), self.router.now())
            if refusal is not None:
                engine.close(DUPLICATE_ID_CONDITION, refusal)
                return
        props = engine.connection.remote_properties or {}
        peer_cost = 1
        try:
            peer_cost = int(props.get(proton.symbol(OPEN_COST_PROPERTY), props.get(OPEN_COST_PROPERTY, 1)) or 1)
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
        _set_capability(snd.target, CONTROL_CAPABILITY)
        _set_capability(snd.source, CONTROL_CAPABILITY)
        snd.snd_settle_mode = proton.Link.SND_SETTLED
        snd.open()
        rcv = ssn.receiver("qdlink.control.in")
        _set_capability(rcv.source, CONTROL_CAPABILITY)
        _set_capability(rcv.target, CONTROL_CAPABILITY)
        rcv.snd_settle_mode = proton.Link.SND_SETTLED
        rcv.open()
        self._register_control(rc, snd._impl, outgoing=True)
        self._register_control(rc, rcv._impl, outgoing=False)
        for prio in range(PRIORITIES):
            ssn = conn.session()
            ssn.open()
            snd = ssn.sender(f"qdlink.data.out.{prio}")
            _set_capability(snd.target, DATA_CAPABILITY)
            snd.open()
            rcv = ssn.receiver(f"qdlink.data.in.{prio}")
            _set_capability(rcv.source, DATA_CAPABILITY)
            rcv.open()
            self._register_data(rc, snd._impl, outgoing=True, priority=prio)
            self._register_data(rc, rcv._impl, outgoing=False, priority=prio)

    def link_open(self, engine, link, lo) -> bool:
        """A peer-initiated attach on an inter-router connection: True if it was a mesh link."""
        rc: RouterConnection = engine.app
        if rc.mesh is None:
            return False
        caps = set(capabilities(lo.remote_source.capabilities)) | set(capabilities(lo.remote_target.capabilities))
        if CONTROL_CAPABILITY in caps:
            engine.open_link_like_remote(link)
            self._register_control(rc, link, outgoing=lo.is_sender)
            return True
        if DATA_CAPABILITY in caps:
            engine.open_link_like_remote(link)
            prio = DEFAULT_PRIORITY
            name = lo.name or ""
            if name[-1:].isdigit():
                prio = int(name[-1])
            self._register_data(rc, link, outgoing=lo.is_sender, priority=prio)
            return True
        return False

    def _register_control(self, rc: RouterConnection, link, *, outgoing: bool) -> None:
        m = rc.mesh
        if outgoing:
            m.control_out = link
        else:
            m.control_in = link
            raw.link_flow(link, CONTROL_CREDIT)
        self._maybe_up(rc)

    def _register_data(self, rc: RouterConnection, link, *, outgoing: bool, priority: int) -> None:
        m = rc.mesh
        capacity = rc.engine.settings.link_capacity
        if outgoing:
            rl = RouterLink(link, rc, False, m.placeholder, capacity, f"data.out.{priority}")
            rl.inter_router = rl.annotate_out = True
            rc.links[link] = rl
            m.data_links[priority] = rl
            if priority == DEFAULT_PRIORITY or m.data_out is None:
                m.data_out = rl
        else:
            rl = RouterLink(link, rc, True, None, capacity, f"data.in.{priority}")
            rl.inter_router = rl.keep_in = True
            rc.links[link] = rl
            self.router.grant_initial_credit(rl)
        if m.up:
            self.router.mesh_data_links_changed()

    def _maybe_up(self, rc: RouterConnection) -> None:
        m = rc.mesh
        if m.up or m.control_in is None or m.control_out is None:
            return
        m.up = True
        log.info("inter-router connection %d to %s up (cost %d)", rc.engine.id, m.peer_id, m.cost)
        if self.engine is not None:
            self.engine.link_up(rc, m.cost, self.router.now())
            self.flush()

    def connection_closed(self, rc: RouterConnection) -> None:
        m = rc.mesh
        if m is None:
            return
        rc.mesh = None
        _, description = raw.connection_remote_condition(rc.engine.connection._impl)
        if self.engine is not None and printable(description or "").startswith(DUPLICATE_ID_REASON):
            self.engine.peer_refused(_name(rc), printable(description), self.router.now())
        if m.up and self.engine is not None:
            log.info("inter-router connection %d to %s lost", rc.engine.id, m.peer_id)
            self.engine.link_lost(rc, self.router.now())
            self.flush()

    def link_closed(self, rc: RouterConnection, link) -> bool:
        """A control link went away: the neighbour is lost now (Dispatch's linkLost)."""
        m = rc.mesh
        if m is None or link not in (m.control_in, m.control_out):
            return False
        if m.up and self.engine is not None:
            m.up = False
            self.engine.link_lost(rc, self.router.now())
            self.flush()
        if link == m.control_in:
            m.control_in = None
        else:
            m.control_out = None
        return True

    # -- control traffic ------------------------------------------------------------------------
    def is_control(self, rc: RouterConnection, link) -> bool:
        m = rc.mesh
        return m is not None and (link == m.control_in or link == m.control_out)

    def control_delivery(self, rc: RouterConnection, d) -> None:
        m = rc.mesh
        lp = raw.delivery_link(d)
        if lp != m.control_in:
            raw.delivery_settle(d)  # our pre-settled control messages: nothing to do
            return
        if raw.delivery_partial(d):
            return  # wait for the whole message (control messages are small)
        msg = raw.recv_all(lp)
        raw.link_advance(lp)
        raw.delivery_settle(d)
        raw.link_flow(lp, 1)
        if self.engine is not None:
            self.engine.receive(rc, msg, self.router.now())
            self.flush()
        rc.engine.wake()

    def control_flow(self, rc: RouterConnection) -> None:
        self._drain(rc)

    def flush(self) -> None:
        """Send what the routing engine produced."""
        engine = self.engine
        if engine is None:
            return
        for rc, description in engine.take_refusals():
            if isinstance(rc, RouterConnection):
                rc.engine.close(DUPLICATE_ID_CONDITION, description)
        out = engine.take_output()
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
        sent = False
        while m.pending and raw.link_credit(link) > 0:
            msg = m.pending.popleft()
            d = raw.send_message(link, b"c%x" % next(_tags), msg)
            raw.delivery_settle(d)
            sent = True
        if sent:
            rc.engine.wake()
