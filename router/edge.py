"""Edge mode: a router with one active uplink (role ``edge``) to an interior router and no routing protocol.

Qpid Dispatch 1.19's edge mode (src/router_core/modules/edge_router/):

* For every mobile address with a **local consumer** the edge keeps an incoming link from the interior
  (a receiver on the uplink with that source address), so the interior — and through it the mesh —
  sees a destination. Messages arriving on it go to the local consumers only.
* For every address with a **local producer** the edge keeps an outgoing link to the interior (a sender
  with that target address). For a mobile address that link is a destination here only while the
  interior says, on the address-tracking link, that a destination exists beyond this edge (addr_proxy.c;
  router/edgeproxy.py reads the updates). A local producer therefore has credit only while a consumer
  exists somewhere in the mesh or on the edge, and when the last remote consumer goes the link stops
  being a destination: the producer's credit is withheld and what was queued on the link is released.
  Other routers' addresses (``_topo/...``, ``_edge/...``) are not tracked: their link becomes a
  destination with its first credit from the interior.
* Anonymous producers' messages for addresses without a local entry go up an anonymous sender.
* Everything addressed to the edge itself (``_edge/<id>/...``, its dynamic reply addresses) comes down
  one link whose router annotations are kept: it is routed by ``x-opt-qd.to``, since a link-addressed
  producer's message has no ``to``.
* Nothing that came down the uplink is sent back up (edge-echo prevention, DISPATCH-1156), and edges
  neither add nor read ``x-opt-qd.trace``/``ingress``.
* With several ``role: edge`` connectors, the first connection to open is the uplink; the others stay
  open as standbys, carrying no links, and the oldest takes over when the uplink is lost
  (src/router_core/modules/edge_router/connection_manager.c).

When the interior detaches the tracking link (one that does not serve it), the edge falls back to what
links alone can express: a producer address's uplink sender becomes a destination with its first credit
and stays one. The interior treats an ``edge`` connection like a client connection, apart from serving
the tracking link (router/edgetracking.py).
"""

from __future__ import annotations

import logging
from typing import Protocol

from wire import raw
from router.addresses import Address
from router.edgeproxy import TRACKING_CREDIT, TrackingReceiver
from router.links import InDelivery, RouterConnection, RouterLink

log = logging.getLogger("router.edge")

UPLINK_ROLE = "edge"


class UplinkForwarding(Protocol):
    """What the uplink needs of the forwarder (router/forwarder.py's Forwarder): it is also the owner
    the uplink hands its links' events on to."""

    def grant_initial_credit(self, il: RouterLink) -> None: ...

    def enqueue(self, ind: InDelivery, links) -> None: ...

    def destination_appeared(self, addr: Address) -> None: ...

    def on_message(self, engine, rl: RouterLink, d, msg: bytes | None) -> None: ...

    def on_partial(self, engine, rl: RouterLink, d, held: int) -> int: ...

    def on_delivery_update(self, engine, rl: RouterLink, d) -> None: ...

    def on_link_flow(self, engine, rl: RouterLink) -> None: ...

    def on_oversized(self, engine, rl: RouterLink, d, limit: int) -> None: ...

    def fail_outgoing(self, ol: RouterLink) -> None: ...

    def release_queued(self, ol: RouterLink) -> None: ...

    def destination_lost(self, addr: Address) -> None: ...


class LinkUnbinder(Protocol):
    """What the uplink needs of the router when it drops one of its links (router/core.py)."""

    def unbind_link(self, rl: RouterLink) -> None: ...


class EdgeUplink:
    """The uplink's links for one edge router. It owns the senders it attaches (wire's LinkOwner) and
    passes their events on to the forwarder; a sender becomes a destination of its address when the
    interior's address tracking says so (or, untracked, with its first credit)."""

    def __init__(self, router_id: str, addresses: dict, forwarder: UplinkForwarding, links: LinkUnbinder):
        self.id = router_id
        self.addresses = addresses
        self.forwarder = forwarder
        self.links = links
        self.uplink: RouterConnection | None = None
        self.session = None
        self.anonymous: RouterLink | None = None
        self.down: RouterLink | None = None
        self.receivers: dict[str, RouterLink] = {}  # address key -> incoming link from the interior
        self.senders: dict[str, RouterLink] = {}  # address key -> outgoing link to the interior
        self.waiting: set = set()  # sender link pointers that have not seen credit yet
        # The address-tracking receiver on the uplink (None before the uplink, and once the interior has
        # detached it), and the mobile keys whose sender the interior last said can send.
        self.tracker = TrackingReceiver(self)
        self.tracking: RouterLink | None = None
        self.can_send: set[str] = set()
        # Other open edge connections, oldest first: unused until the uplink is lost.
        self.standby: list[RouterConnection] = []

    # -- the uplink connection -------------------------------------------------------------------
    def connection_opened(self, rc: RouterConnection) -> None:
        """An edge connection (this router's connector) opened: the uplink if there is none, else a standby
        that takes over when the uplink is lost (Dispatch 1.19 edge_router/connection_manager.c keeps one
        edge connection active)."""
        if self.uplink is not None:
            if rc not in self.standby:
                self.standby.append(rc)
            log.info("edge router: connection %d to %s is a standby uplink", rc.engine.id,
                     rc.engine.remote_container)
            return
        self._activate(rc)

    def _activate(self, rc: RouterConnection) -> None:
        self.uplink = rc
        self.session = rc.engine.connection.session()
        self.session.open()
        lo = self.session.sender(f"{self.id}.edge.anonymous")
        lo.open()
        # Egress on the anonymous link is counted on an address record of its own (not in the table).
        self.anonymous = self._track(lo, Address("-edge-uplink", "(uplink)", 0, "closest"), incoming=False)
        self.waiting.discard(self.anonymous.ptr)  # anonymous: usable whenever it has credit
        # Everything addressed to this edge (its dynamic reply addresses) comes down one link: the
        # interior binds _edge/<id> (key H<id>) to it and advertises it to the mesh.
        down = self.session.receiver(f"{self.id}.edge.down")
        down.source.address = f"_edge/{self.id}"
        down.open()
        self.down = self._track(down, None, incoming=True)
        # What comes down it is routed by its x-opt-qd.to (a link-addressed producer's message has no
        # ``to``): annotations on an edge connection are never stripped (Dispatch 1.19 router_node.c).
        self.down.keep_in = True
        # Which producer addresses have a destination beyond this edge (addr_proxy.c): attached before the
        # senders, so that the interior's answer for each of them is already on its way when they attach.
        lo = TrackingReceiver.attach(self.session, f"{self.id}.edge.tracking")
        self.tracking = RouterLink(raw.pointer(lo), rc, True, None, TRACKING_CREDIT, lo.name, self.tracker)
        rc.links[self.tracking.ptr] = self.tracking
        rc.engine.own_link(self.tracking.ptr, self.tracking)
        self.tracker.grant_initial_credit(self.tracking)
        for addr in list(self.addresses.values()):
            if addr.key[0] != "M":
                continue
            if addr.rlinks:
                self.consumer_added(addr)
            if any(il.conn is not rc for il in addr.inlinks):
                self.producer_added(addr)
        log.info("edge router: uplink connection %d to %s up", rc.engine.id, rc.engine.remote_container)

    def connection_closed(self, rc: RouterConnection) -> None:
        if rc in self.standby:
            self.standby.remove(rc)
            return
        if rc is not self.uplink:
            return
        self.uplink = None
        self.session = None
        self.anonymous = None
        self.down = None
        self.tracking = None
        self.can_send.clear()
        for rl in list(self.senders.values()):
            self._drop_remote(rl)
        self.receivers.clear()
        self.senders.clear()
        self.waiting.clear()
        log.info("edge router: uplink lost")
        if self.standby:
            standby = self.standby.pop(0)
            log.info("edge router: standby connection %d takes over as the uplink", standby.engine.id)
            self._activate(standby)

    def _track(self, lo, addr, *, incoming: bool) -> RouterLink:
        rc = self.uplink
        ptr = raw.pointer(lo)
        # Incoming links go straight to the forwarder; senders through this uplink (first credit).
        owner = self.forwarder if incoming else self
        rl = RouterLink(ptr, rc, incoming, addr, rc.engine.settings.link_capacity, lo.name, owner)
        rc.links[ptr] = rl
        rc.engine.own_link(ptr, rl)
        if incoming:
            if addr is not None:
                addr.inlinks.add(rl)
            self.forwarder.grant_initial_credit(rl)
        else:
            self.waiting.add(ptr)
        rc.engine.wake()
        return rl

    # -- local consumers and producers --------------------------------------------------------------
    def consumer_added(self, addr) -> None:
        if self.uplink is None or addr.key in self.receivers or addr.key[0] != "M":
            return
        lo = self.session.receiver(f"{self.id}.edge.in.{addr.key}")
        lo.source.address = addr.name
        lo.target.address = addr.name
        lo.open()
        self.receivers[addr.key] = self._track(lo, addr, incoming=True)

    def consumer_removed(self, addr) -> None:
        rl = self.receivers.pop(addr.key, None)
        if rl is not None:
            self._close(rl)

    def producer_added(self, addr, link_address: str | None = None) -> None:
        """A local producer attached to ``addr``: a sender up to the interior for it. Mobile addresses go
        by name; another router's (``_topo/0/<id>/...``, ``_edge/<id>/...``) by the producer's own
        target address, which the interior routes."""
        if self.uplink is None or addr.key in self.senders or addr.key[0] == "L":
            return
        target = addr.name if addr.key[0] == "M" else link_address
        if not target:
            return
        lo = self.session.sender(f"{self.id}.edge.out.{addr.key}")
        lo.target.address = target
        lo.source.address = target
        lo.open()
        self.senders[addr.key] = self._track(lo, addr, incoming=False)

    def producer_removed(self, addr) -> None:
        if any(il.conn is not self.uplink for il in addr.inlinks):
            return
        rl = self.senders.pop(addr.key, None)
        self.can_send.discard(addr.key)
        if rl is not None:
            self._drop_remote(rl)
            self._close(rl)

    def _close(self, rl: RouterLink) -> None:
        rc = rl.conn
        rc.links.pop(rl.ptr, None)
        self.waiting.discard(rl.ptr)
        self.links.unbind_link(rl)
        raw.link_object(rl.ptr).close()
        rc.engine.wake()

    def _drop_remote(self, rl: RouterLink) -> None:
        addr = rl.address
        if addr is not None and rl in addr.remote:
            addr.remote = [ol for ol in addr.remote if ol is not rl]

    def _add_remote(self, rl: RouterLink) -> None:
        """``rl`` (an uplink sender) becomes a destination of its address."""
        addr = rl.address
        if addr is None or rl.closed or rl in addr.remote:
            return
        had = addr.has_destination
        addr.remote = addr.remote + [rl]
        if not had:
            self.forwarder.destination_appeared(addr)

    def _remove_remote(self, rl: RouterLink) -> None:
        """``rl`` is no destination any more: what is queued on it, waiting for the interior's credit, is
        released to its producers, as when an address loses a consumer link; what the interior has taken
        stays unsettled on the link until the interior answers. With no destination left, the address's
        producers are given no more credit (the forwarder withholds it)."""
        self._drop_remote(rl)
        if rl.address is not None:
            # a waypoint's store feeding this edge must not be sent back what is released (forwarder.py)
            self.forwarder.destination_lost(rl.address)
        if rl.undelivered and not rl.closed:
            self.forwarder.release_queued(rl)

    # -- events ------------------------------------------------------------------------------------
    def credit_arrived(self, rl: RouterLink) -> None:
        """The interior granted credit on an uplink sender: without address tracking, the mesh has a
        destination for it. Tracked (mobile) addresses wait for the interior's word instead."""
        self.waiting.discard(rl.ptr)
        addr = rl.address
        if addr is None or (self.tracking is not None and addr.key[0] == "M"):
            return
        self._add_remote(rl)

    def tracking_update(self, key: str, can_send: bool) -> None:
        """The interior says whether the edge's producers for ``key`` have a destination beyond this edge
        (router/edgeproxy.py). An update for an address without a sender here is stale: the sender was
        closed after the interior sent it, and the next sender is told afresh."""
        rl = self.senders.get(key)
        if rl is None or rl.closed:
            return
        if can_send:
            self.can_send.add(key)
            self._add_remote(rl)
        else:
            self.can_send.discard(key)
            self._remove_remote(rl)
        log.debug("edge router: the interior says %s %s", key, "can send" if can_send else "cannot send")

    def link_lost(self, rl: RouterLink) -> None:
        """An uplink link was detached (by the interior or the connection)."""
        if rl is self.tracking:
            self._tracking_lost()
            return
        for table in (self.receivers, self.senders):
            for key, other in list(table.items()):
                if other is rl:
                    del table[key]
                    if table is self.senders:
                        self.can_send.discard(key)
        self._drop_remote(rl)
        self.waiting.discard(rl.ptr)
        if rl is self.anonymous:
            self.anonymous = None

    def _tracking_lost(self) -> None:
        """The interior detached the tracking link (it does not serve it): from now on a sender is a
        destination once it has seen credit, as before there was tracking."""
        self.tracking = None
        self.can_send.clear()
        log.warning("edge router: the interior detached the address-tracking link; producer addresses are "
                    "now served whenever the interior gives credit")
        for rl in list(self.senders.values()):
            if rl.ptr not in self.waiting:
                self._add_remote(rl)

    def fallback(self, ind) -> bool:
        """A message with no local address: send it up the anonymous link. False when there is none
        (or it came down the uplink: never echo it back)."""
        up = self.anonymous
        if up is None or ind.link.conn is self.uplink or up.closed:
            return False
        self.forwarder.enqueue(ind, (up,))
        return True

    # -- LinkOwner of the uplink's senders (wire/assembly.py): credit first, then the forwarder -------
    def on_link_flow(self, engine, rl: RouterLink) -> None:
        if rl.ptr in self.waiting and raw.link_credit(rl.ptr) > 0:
            self.credit_arrived(rl)
        self.forwarder.on_link_flow(engine, rl)

    def on_delivery_update(self, engine, rl: RouterLink, d) -> None:
        self.forwarder.on_delivery_update(engine, rl, d)

    def on_message(self, engine, rl: RouterLink, d, msg: bytes | None) -> None:
        self.forwarder.on_message(engine, rl, d, msg)

    def on_partial(self, engine, rl: RouterLink, d, held: int) -> int:
        return self.forwarder.on_partial(engine, rl, d, held)

    def on_chunk(self, engine, rl: RouterLink, d, chunk: bytes, end: int) -> None:
        self.forwarder.on_chunk(engine, rl, d, chunk, end)

    def on_oversized(self, engine, rl: RouterLink, d, limit: int) -> None:
        self.forwarder.on_oversized(engine, rl, d, limit)
