"""Dispatch's edge address tracking on an interior router (``_$qd.edge_addr_tracking``, mobile, balanced):
the interior tells each connected Qpid Dispatch edge router, for every mobile address the edge produces
to, whether a consumer exists anywhere but on that edge (Qpid Dispatch 1.19
src/router_core/modules/edge_addr_tracking/edge_addr_tracking.c; the edge side is
src/router_core/modules/edge_router/addr_proxy.c, and tdrouterd's own edge, router/edgeproxy.py with
router/edge.py). An edge forwards its local producers' messages up its uplink only while the interior has
said so.

What the module does, as Dispatch's:

* An edge router (a connection accepted on a ``role: edge`` listener) attaches a receiver whose source is
  ``_$qd.edge_addr_tracking``: the interior sends on it. The same attach on any other connection, or as a
  sender, is attached and detached at once, without an error.
* For every producer link of that edge connection (an incoming link owning a mobile address: the edge's
  uplink sender for an address with a local producer) the interior works out whether the edge *can send*:
  more than one local receiver link, or any other router with the address, or exactly one local receiver
  link that is on another connection (the edge's own consumer is no reason to send up: no echo).
* Each message is pre-settled, header ``durable=false``, body an amqp-value list ``[key, can_send]`` where
  ``key`` is the address's routing key (``M0queue``).

How it is done here: instead of Dispatch's address events (became/no longer local destination, one/two
destinations), the module keeps for each tracking endpoint what the edge was told per address key and
recomputes can-send for the affected (edge, address) pairs whenever an address's destinations change
(local receivers attached or detached, another router's address added or removed, a router lost) or the
edge attaches or detaches a producer; only changes are sent. The result is what Dispatch sends, with two
deliberate differences that only add messages Dispatch's edge acts on correctly: producers already attached
when the tracking link arrives are told their state (Dispatch tells only producers attached after it), and
``false`` is also sent when the last *remote* destination goes (Dispatch waits for a local event). Dispatch
also repeats a ``true`` the edge already has when the edge attaches a consumer link (connections.c raises
the same link event for both directions); a repeat changes nothing, so it is not sent. Nothing of this is
on the per-message path.

Memory is bounded by the edge's producer links: while the edge gives no credit, the changes wait as the
latest value per key (a value that flips back before it could be sent is not sent at all). A second
tracking link on the same connection is detached like a misplaced one (Dispatch would accept it and never
send on it).
"""

from __future__ import annotations

import logging

from wire import raw
from wire.amqptypes import encode_value
from wire.assembly import DISCARD
from wire.codec import encode_message

log = logging.getLogger("router.edgetracking")

TRACKING_ADDRESS = "_$qd.edge_addr_tracking"
TRACKING_KEY = "M0" + TRACKING_ADDRESS

#: The connection role of an edge router's uplink as its interior accepts it.
EDGE_ROLE = "edge"

# Header section with durable = false, as Dispatch composes it (the other header fields are defaults).
_HEADER_NOT_DURABLE = b"\x00\x53\x70" + encode_value([False])


def tracking_message(key: str, can_send: bool) -> bytes:
    """The bytes of one update: header durable=false, amqp-value ``[key, can_send]``."""
    return _HEADER_NOT_DURABLE + encode_message(body_value=[key, bool(can_send)])


def accept_message(msg: bytes) -> None:
    """A message sent *to* the tracking address (its internal endpoint's handler): accepted, and nothing
    to act on; edges only receive from it."""


def can_send(addr, conn) -> bool:
    """Whether a producer on ``conn`` has a destination for ``addr`` other than ``conn`` itself: more than
    one local receiver link, another router with the address, or one local receiver on another
    connection (edge_addr_tracking.c qdrc_can_send_address)."""
    rlinks = addr.rlinks
    if len(rlinks) > 1 or addr.rnodes:
        return True
    return len(rlinks) == 1 and rlinks[0].conn is not conn


def _is_edge_producer(rl) -> bool:
    """An incoming link from an edge router's connection that owns a mobile address."""
    addr = rl.address
    return rl.from_edge and not rl.closed and addr is not None and addr.key[0] == "M"


class TrackingLink:
    """One edge's tracking link: the engine's record of it (wire/assembly.py reads ``owner``,
    ``incoming``, ``max_message_size``) and what that edge was told.

    ``told`` holds the last value sent per address key (a key never sent counts as false, which is what an
    edge assumes); ``pending`` the values decided but not yet sent for lack of credit, oldest first.
    """

    __slots__ = ("ptr", "conn", "engine", "owner", "incoming", "max_message_size", "told", "pending",
                 "tag_seq", "closed", "sent")

    def __init__(self, ptr, conn, owner):
        self.ptr = ptr
        self.conn = conn
        self.engine = conn.engine
        self.owner = owner
        self.incoming = False
        self.max_message_size = 0
        self.told: dict[str, bool] = {}
        self.pending: dict[str, bool] = {}
        self.tag_seq = 0
        self.closed = False
        self.sent = 0

    def decide(self, key: str, value: bool) -> None:
        """The edge should now know ``value`` for ``key``: queue it unless the edge knows it already (or
        will, when what is queued for the key is dropped instead)."""
        pending = self.pending
        if key in pending:
            if pending[key] != value:   # it flips back to what the edge was last told: nothing to send
                del pending[key]
        elif self.told.get(key, False) != value:
            pending[key] = value

    def forget(self, key: str) -> None:
        """The edge has no producer for ``key`` any more: its next producer starts afresh, as Dispatch tells
        a producer its state when it attaches."""
        self.told.pop(key, None)
        self.pending.pop(key, None)


class EdgeAddressTracking:
    """The tracking endpoints of an interior router, one per edge connection, and the decisions of what
    to tell each. The router (router/core.py) calls it when links attach and detach and when an address's
    destinations change; it is the engine's :class:`wire.assembly.LinkOwner` of the tracking links."""

    def __init__(self, parser, *, enabled: bool = True):
        self.parser = parser   # router.addresses.AddressParser
        # Dispatch enables the module on interior routers only; disabled, it takes no attach and so never
        # has an endpoint, and every other call returns at once.
        self.enabled = enabled
        self.endpoints: dict = {}   # RouterConnection -> TrackingLink

    # -- attaches --------------------------------------------------------------------------------
    def is_tracking_attach(self, lo) -> bool:
        """Whether an attach names the tracking address (as the source of a receiver, the target of a
        sender)."""
        node = lo.remote_source if lo.is_sender else lo.remote_target
        address = node.address
        if not address or not address.endswith(TRACKING_ADDRESS) or node.dynamic:
            return False
        return self.parser.parse(address) == ("M", TRACKING_ADDRESS)

    def link_open(self, engine, link, lo) -> bool:
        """Take an attach to the tracking address (True), or leave it to the router (False). An edge's
        receiver becomes its tracking endpoint; anything else is attached and detached, without error."""
        if not self.enabled or not self.is_tracking_attach(lo):
            return False
        rc = engine.app
        engine.open_link_like_remote(link)
        if not lo.is_sender or rc.role != EDGE_ROLE or rc in self.endpoints:
            log.info("connection %d: link %s to %s detached: not an edge router's tracking receiver",
                     engine.id, lo.name, TRACKING_ADDRESS)
            lo.close()
            engine.wake()
            return True
        ep = TrackingLink(link, rc, self)
        engine.own_link(link, ep)
        self.endpoints[rc] = ep
        for rl in list(rc.links.values()):   # producers attached before the tracking link
            if _is_edge_producer(rl):
                ep.decide(rl.address.key, can_send(rl.address, rc))
        self.flush(ep)
        engine.wake()
        log.debug("connection %d: edge address tracking link attached", engine.id)
        return True

    def link_closed(self, ep: TrackingLink) -> None:
        """The edge detached its tracking link (the engine detaches our side)."""
        ep.closed = True
        if self.endpoints.get(ep.conn) is ep:
            del self.endpoints[ep.conn]

    def connection_closed(self, rc) -> None:
        ep = self.endpoints.pop(rc, None)
        if ep is not None:
            ep.closed = True

    # -- producers --------------------------------------------------------------------------------
    def producer_attached(self, rl) -> None:
        """An incoming link attached (the router calls this for links from edge connections)."""
        ep = self.endpoints.get(rl.conn) if self.endpoints else None
        if ep is not None and _is_edge_producer(rl):
            ep.decide(rl.address.key, can_send(rl.address, rl.conn))
            self.flush(ep)

    def producer_detached(self, rl) -> None:
        """An incoming link from an edge connection left its address (already out of ``inlinks``)."""
        ep = self.endpoints.get(rl.conn) if self.endpoints else None
        addr = rl.address
        if ep is None or addr is None or addr.key[0] != "M":
            return
        conn = rl.conn
        if not any(other.conn is conn and not other.closed for other in addr.inlinks):
            ep.forget(addr.key)

    # -- destinations -------------------------------------------------------------------------------
    def destinations_changed(self, addr) -> None:
        """``addr``'s local receivers or remote routers changed: tell the edges producing to it."""
        if not self.endpoints or addr is None or addr.key[0] != "M":
            return
        touched = []
        for rl in addr.inlinks:
            if not rl.from_edge:
                continue
            ep = self.endpoints.get(rl.conn)
            if ep is not None and not rl.closed:
                ep.decide(addr.key, can_send(addr, rl.conn))
                touched.append(ep)
        for ep in touched:
            self.flush(ep)

    def recheck_all(self) -> None:
        """A router was lost: every address it served may have lost its last remote destination."""
        for rc, ep in list(self.endpoints.items()):
            for rl in list(rc.links.values()):
                if _is_edge_producer(rl):
                    ep.decide(rl.address.key, can_send(rl.address, rc))
            self.flush(ep)

    # -- sending ------------------------------------------------------------------------------------
    def flush(self, ep: TrackingLink) -> None:
        """Send what is pending, pre-settled, as far as the edge's credit goes."""
        if ep.closed or not ep.pending:
            return
        ptr = ep.ptr
        credit = raw.link_credit(ptr)
        pending = ep.pending
        told = ep.told
        sent = 0
        while credit > 0 and pending:
            key = next(iter(pending))
            value = pending.pop(key)
            told[key] = value
            ep.tag_seq += 1
            d = raw.send_ring_tagged(ptr, ep.tag_seq, tracking_message(key, value))
            raw.delivery_settle(d)
            credit -= 1
            sent += 1
        if sent:
            ep.sent += sent
            ep.engine.wake()

    # -- LinkOwner (wire/assembly.py): only flow matters on a link the router sends pre-settled on ----
    def on_link_flow(self, engine, ep: TrackingLink) -> None:
        if ep.pending:
            self.flush(ep)
        if raw.link_get_drain(ep.ptr) and not ep.pending:
            raw.link_drained(ep.ptr)
            engine.wake()

    def on_delivery_update(self, engine, ep: TrackingLink, d) -> None:
        """Deliveries go pre-settled; an edge's disposition changes nothing."""

    def on_message(self, engine, ep, d, msg) -> None:  # never: the link is outgoing
        """Not called: the router only sends on a tracking link."""

    def on_partial(self, engine, ep, d, held: int) -> int:  # never: the link is outgoing
        return DISCARD

    def on_oversized(self, engine, ep, d, limit: int) -> None:
        """Not called: the router only sends on a tracking link."""
