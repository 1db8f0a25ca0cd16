"""Edge mode: a router with one active uplink (role ``edge``) to an interior router and no routing protocol.

Qpid Dispatch 1.19's edge mode (src/router_core/modules/edge_router/), simplified to what links can
express (no address-tracking link yet):

* For every mobile address with a **local consumer** the edge keeps an incoming link from the interior
  (a receiver on the uplink with that source address), so the interior — and through it the mesh —
  sees a destination. Messages arriving on it go to the local consumers only.
* For every address with a **local producer** the edge keeps an outgoing link to the interior (a sender
  with that target address). The interior grants it credit only while the address has a destination
  somewhere in the mesh; the first credit makes the uplink a destination here, which in turn gives the
  local producer credit. Credit therefore still flows end to end.
* Anonymous producers' messages for addresses without a local entry go up an anonymous sender.
* Everything addressed to the edge itself (``_edge/<id>/...``, its dynamic reply addresses) comes down
  one link whose router annotations are kept: it is routed by ``x-opt-qd.to``, since a link-addressed
  producer's message has no ``to``.
* Nothing that came down the uplink is sent back up (edge-echo prevention, DISPATCH-1156), and edges
  neither add nor read ``x-opt-qd.trace``/``ingress``.
* With several ``role: edge`` connectors, the first connection to open is the uplink; the others stay
  open as standbys, carrying no links, and the oldest takes over when the uplink is lost
  (src/router_core/modules/edge_router/connection_manager.c).

The interior treats an ``edge`` connection like a client connection; that is all it needs for this.
"""

from __future__ import annotations

import logging
from typing import Protocol

from wire import raw
from router.addresses import Address
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


class LinkUnbinder(Protocol):
    """What the uplink needs of the router when it drops one of its links (router/core.py)."""

    def unbind_link(self, rl: RouterLink) -> None: ...


class EdgeUplink:
    """The uplink's links for one edge router. It owns the senders it attaches (wire's LinkOwner): the
    first credit on one tells it the mesh has a destination; every event then goes on to the forwarder."""

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

    # -- events ------------------------------------------------------------------------------------
    def credit_arrived(self, rl: RouterLink) -> None:
        """The interior granted credit on an uplink sender: the mesh has a destination for it."""
        self.waiting.discard(rl.ptr)
        addr = rl.address
        if addr is None or rl in addr.remote:
            return
        had = addr.has_destination
        addr.remote = addr.remote + [rl]
        if not had:
            self.forwarder.destination_appeared(addr)

    def link_lost(self, rl: RouterLink) -> None:
        """An uplink link was detached (by the interior or the connection)."""
        for table in (self.receivers, self.senders):
            for key, other in list(table.items()):
                if other is rl:
                    del table[key]
        self._drop_remote(rl)
        self.waiting.discard(rl.ptr)
        if rl is self.anonymous:
            self.anonymous = None

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

    def on_oversized(self, engine, rl: RouterLink, d, limit: int) -> None:
        self.forwarder.on_oversized(engine, rl, d, limit)
