"""The per-message path: receive a complete message, choose destinations, send, carry outcomes back.

Everything here runs once per message (or per copy), so it touches only raw engine pointers
(:mod:`wire.raw`), bytes, and ``__slots__`` records; no logging at default level.

Credit (Qpid Dispatch 1.19 src/router_core/connections.c): an incoming link is given ``capacity`` credit
only while its address has a destination; credit comes back as each delivery leaves the router's buffers
(sent on an outgoing link, or released/rejected/dropped). When the address loses its last destination, queued
deliveries are released back to their producers and credit is withheld until a destination returns: what
they earn back while there is no destination is owed, not given (DISPATCH-1012).

Waypoints (no release ping-pong): a link fed by a waypoint (a broker's queue: its sender declared
``qd.waypoint``, or an ``in`` auto-link; ``RouterLink.from_waypoint``) would not stop there. A store puts a
released message back at the head of its queue and sends it again at once on the same link while it has
credit, so withholding alone leaves the credit it still has (up to ``capacity``) to be spent bouncing the
same few messages between broker and router — Qpid Dispatch 1.19 does that with in-auto-links. So when its
address loses its last destination the router also takes back the credit the store has not used: a flow
with link-credit 0, which a receiver may send at any time (AMQP 1.0 §2.6.7, Flow Control: "If the
link-credit is reduced by the receiver when transfers are in-flight, the receiver MAY either handle the
excess messages normally or detach the link"). The broker stops; the messages the router held for the
departed consumer go back once (released, or modified when the consumer had them); deliveries the broker
sent before it heard the flow are released once each, as any message without a route, and the store keeps
them. Nothing is held in the router while there is no consumer. Every credit taken back, released or
earned back is owed, so :meth:`Forwarder.destination_appeared` gives the store exactly ``capacity`` again.
Proton counts a delivery that was in flight against credit the receiver no longer has and would announce
the negative result as an unsigned link-credit near 2**32; so as each one is released the receiver's
credit is brought back to zero from what is owed (``_credit_not_below_zero``). The flow goes
out before the dispositions of the same batch (proton writes a receiver's flow before transfers and
dispositions), so the store sees its credit gone before it sees the releases. A plain client producer keeps
the Dispatch behaviour: its credit is withheld, not taken back.

Settlement: nothing is settled upstream before the downstream peer settled (end to end); an anycast
delivery mirrors the consumer's outcome with its details; an unsettled multicast delivery settles after
every copy reached a terminal outcome, with the merged outcome, except that when a consumer gave its
outcome without settling (rcv-settle-mode second) the merged outcome goes to the producer unsettled and
the producer settles first (Qpid Dispatch 1.19 src/router_core/delivery.c).

Memory (router/budget.py): a message that cannot leave in the batch of input it arrived in is charged to
its producer's connection until its last copy is handed to the engine (then the router drops its bytes:
nothing after that needs them), and each unsettled outgoing copy to its consumer's connection until it
settles; past the limits, producers are paused and output to a connection stops. A message that goes
straight through costs one counter per queue and a few additions per send.

Delayed, stuck and rate (Qpid Dispatch 1.19 src/router_core/delivery.c, qdr_delivery_increment_counters_CT;
src/router_core/modules/stuck_delivery_detection): every unsettled delivery carries the router's coarse clock
at arrival (``coarse_now``, moved by the periodic :meth:`Forwarder.on_tick`, as Dispatch uses its once-a-second
``uptime_ticks``: no clock read per message). When the delivery is settled back to its producer, and when a
copy of it is settled by its consumer, it counts as delayed over 10 s or, failing that, over 1 s on that link
(the incoming link's counts are also summed router-wide). A periodic scan (cold path, once a
``STUCK_SCAN_SECONDS``) counts the deliveries queued on or unsettled at an outgoing link that have just passed
``STUCK_SECONDS`` in the router, on that link and on their incoming link, once each: a delivery counts at the
one scan whose window its age crosses. The same scan samples each link's settled count; ``settle_rate`` is
the average over the samples of the last ``RATE_WINDOW_SECONDS``. Pre-settled deliveries are settled on
arrival and count in the rate only.

Longer than ~600 lines on purpose: arrival, queueing, sending and outcomes are one class so that the
per-message methods call each other directly, without an indirection per message.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import Callable, Protocol

from wire import raw
from wire.annotations import ROUTER_PREFIX, may_carry_router_annotations, strip_router_annotations
from wire.assembly import DISCARD, KEEP, STREAM
from wire.codec import CodecError, message_to
from router.addresses import CLOSEST, MULTICAST, UNAVAILABLE, Address, AddressConfigTable, AddressParser
from router.budget import BufferBudget
from router.links import InDelivery, RouterLink
from router.streams import INTER_ROUTER_SESSION_WINDOW, MAX_HEAD_BYTES

log = logging.getLogger("router.core")

ACCEPTED = raw.ACCEPTED
REJECTED = raw.REJECTED
RELEASED = raw.RELEASED
MODIFIED = raw.MODIFIED

# A delivery settled after more than this many seconds in the router counts as delayed (Dispatch's thresholds).
DELAYED_1S = 1.0
DELAYED_10S = 10.0
# A delivery still unsettled after this long counts as stuck (Dispatch's stuck-delivery age, 10 s).
STUCK_SECONDS = 10.0
# How often the cold-path scan for stuck deliveries and rate samples runs.
STUCK_SCAN_SECONDS = 1.0
# settleRate averages settlements over about this many seconds (Dispatch's QDR_LINK_RATE_DEPTH, 5 ticks).
RATE_WINDOW_SECONDS = 5
# The scan visits every link (about 1 µs each): on a router with more links than this it runs once every
# links/SCAN_LINKS_PER_SECOND seconds instead of every second, so that 100,000 idle links cost ~2% of a core,
# not ~9%; stuck deliveries, zero-credit times and settle rates are then that much coarser.
SCAN_LINKS_PER_SECOND = 20_000
#: Dispatch's linksBlocked: outgoing links that have had no credit for longer than this (seconds).
BLOCKED_SECONDS = 10.0

# Up to this size a message from a client is searched whole for the router annotations' prefix (a few
# hundred ns, less than reading its first sections); above it, its first sections tell whether it has a
# message-annotations section at all (wire.annotations.may_carry_router_annotations).
SCAN_WHOLE_BELOW = 512

# Multicast merge order (Dispatch: rejected > accepted > modified > released).
OUTCOME_PRIORITY = {RELEASED: 1, MODIFIED: 2, ACCEPTED: 3, REJECTED: 4}


_delivery_settle = raw.delivery_settle
_delivery_update = raw.delivery_update
_delivery_settled = raw.delivery_settled
_delivery_remote_state = raw.delivery_remote_state
_link_credit = raw.link_credit
_link_flow = raw.link_flow
_link_get_drain = raw.link_get_drain
_link_queued = raw.link_queued
_send_message = raw.send_message
_send_ring_tagged = raw.send_ring_tagged


def unsettled_bytes(rc) -> int:
    """The bytes of the deliveries sent to ``rc`` that it has not settled (the engine keeps their buffers)."""
    return sum(ind.size for rl in rc.links.values() if not rl.incoming for ind in rl.unsettled.values())


class SpecialPath(Protocol):
    """What the forwarder hands to :class:`router.meshforward.MeshForwarding`: messages that do not take
    the plain path (from or to other routers, to router-internal endpoints, without an address)."""

    def mesh_message_in(self, ind: InDelivery, msg: bytes) -> None: ...

    def forward_special(self, ind: InDelivery, addr: Address) -> None: ...

    def annotated(self, ind: InDelivery, addr: Address, msg: bytes) -> bytes: ...

    def unaddressed(self, ind: InDelivery, to: str | None) -> None: ...


class LinkKeeper(Protocol):
    """What the forwarder asks of the router when it must drop a link (router/core.py's Router)."""

    def unbind_link(self, rl: RouterLink) -> None: ...


class FlowRecords(Protocol):
    """The flow-record calls of :class:`router.flowhooks.FlowHooks` (set only when flow records are on)."""

    def ingress(self, ind: InDelivery, rl: RouterLink, msg: bytes) -> None: ...

    def egress(self, ol: RouterLink, ind: InDelivery) -> None: ...

    def settle(self, ind: InDelivery, state: int) -> None: ...


class Forwarder:
    """Message forwarding for one router, and the :class:`wire.assembly.LinkOwner` of its message links
    (the engine hands it whole messages, outcomes and credit of every :class:`RouterLink`).

    Collaborators are explicit: ``links`` (the router, to drop a link it must close), ``flow`` (flow
    records or None) and, once :meth:`use_special_path` is called, the mesh/special path.
    """

    def __init__(self, *, addresses: dict, parser: AddressParser, address_config: AddressConfigTable,
                 budget: BufferBudget, clock: Callable[[], float], links: LinkKeeper,
                 flow: FlowRecords | None = None):
        self.addresses = addresses
        self.parser = parser
        self.address_config = address_config
        self.budget = budget
        self._clock = clock
        self.links = links
        self.flow = flow
        self.special: SpecialPath | None = None
        self.streams = None  # router/streams.py Streams, once use_streams is called
        # incoming delivery -> (outgoing link, outgoing delivery, InDelivery) for anycast outcomes that
        # reached the producer before either side settled; (None, None, InDelivery) for a multicast
        # outcome given to the producer unsettled (see _mcast_unsettled)
        self._mirrored: dict = {}
        # multicast deliveries with a copy whose consumer gave its outcome without settling (rcv-settle-mode
        # second): the merged outcome goes to the producer unsettled and the producer settles first, as
        # Dispatch 1.19 does (src/router_core/delivery.c: the incoming delivery settles only once every
        # copy has settled, or when its sender settles)
        self._mcast_unsettled: set = set()
        self._dirty: list = []  # outgoing links with deliveries queued in this batch
        self._output_rechecks: list = []  # connections with blocked output that settled in this batch
        self.dropped_presettled = 0
        self.deliveries_no_route = 0
        self.rejected_unavailable = 0
        # Delayed/stuck (see the module docstring): the coarse clock deliveries are stamped with, when the
        # last scan ran, and router-wide counts (deliveries, i.e. their incoming side; kept here so that
        # they outlive the links).
        try:
            self.coarse_now = clock()
        except RuntimeError:  # a Trio clock read before Trio runs: the first tick sets it
            self.coarse_now = 0.0
        self.last_scan = self.coarse_now
        self._scan_interval = STUCK_SCAN_SECONDS
        self.delayed_1s = 0
        self.delayed_10s = 0
        self.deliveries_stuck = 0

    def use_special_path(self, special: SpecialPath) -> None:
        """Hand special messages (mesh, router-internal endpoints, no address) to ``special``. The one
        wiring step after construction: the special path forwards through this forwarder in turn."""
        self.special = special

    def use_streams(self, streams) -> None:
        """Stream large messages through ``streams`` (router/streams.py)."""
        self.streams = streams

    # -- LinkOwner: the engine's events of a RouterLink (wire/assembly.py) -------------------------------
    def on_partial(self, engine, rl: RouterLink, d, held: int) -> int:
        """Bytes of a multi-frame message arrived; the assembler has charged them to the budget's total
        (Router.on_held). They never pause their own connection (the message could not complete), but
        past the router-wide limit the connections holding bytes are paused. A large one is streamed
        (router/streams.py) once its head is in."""
        streams = self.streams
        if streams is not None:
            if streams.wanted(rl, d, held):
                return STREAM
            if streams.head_too_long(held):
                return DISCARD  # dropped as it arrives; on_message(None) refuses it once complete
        budget = self.budget
        if budget.total > budget.total_high:
            budget.over(rl.conn)
        return KEEP

    def _refuse_headless(self, rl: RouterLink, d) -> None:
        """on_message for a delivery dropped while it arrived (no head in MAX_HEAD_BYTES): rejected, or
        settled and counted as dropped when it came pre-settled (as on_message settles one)."""
        if _delivery_settled(d):
            _delivery_settle(d)
            rl.presettled += 1
            ind = InDelivery(None, rl, b"")
        else:
            ind = InDelivery(d, rl, b"", self.coarse_now)
        rl.delivery_count += 1
        rl.outstanding += 1
        self.reject(ind, "amqp:decode-error", f"no message head (header, annotations, properties) in its "
                                              f"first {MAX_HEAD_BYTES} bytes")

    def on_chunk(self, engine, rl: RouterLink, d, chunk: bytes, end: int) -> None:
        """Bytes of a streamed message (router/streams.py)."""
        self.streams.on_chunk(engine, rl, d, chunk, end)

    def on_oversized(self, engine, rl: RouterLink, d, limit: int) -> None:
        """The engine refused a message over maxMessageSize and closes the link: forget the link."""
        streams = self.streams
        if streams is not None and streams.by_delivery:
            st = streams.by_delivery.get(d)
            if st is not None:
                streams.abort(st)
        rl.conn.links.pop(rl.ptr, None)
        self.links.unbind_link(rl)
        log.warning("connection %d: message larger than the %d-byte limit of this connection on link %s",
                    engine.id, limit, rl.name)

    def on_link_flow(self, engine, rl: RouterLink) -> None:
        if rl.incoming:
            return
        if rl.undelivered:
            self.pump(rl)
        link = rl.ptr
        if _link_get_drain(link) and not rl.undelivered:
            raw.link_drained(link)
            engine.wake()

    # -- arrival ------------------------------------------------------------------------------------
    def on_message(self, engine, rl: RouterLink, d, msg: bytes | None) -> None:
        """A complete message arrived on incoming link ``rl`` (already advanced past). None: one whose
        head never came (dropped while it arrived, see on_partial), refused here."""
        if msg is None:
            self._refuse_headless(rl, d)
            return
        presettled = _delivery_settled(d)
        if presettled:
            _delivery_settle(d)
            ind = InDelivery(None, rl, msg)
            rl.presettled += 1
        else:
            ind = InDelivery(d, rl, msg, self.coarse_now)
        self._route(ind, rl, msg)

    def arrive(self, engine, rl: RouterLink, d, head: bytes, stream) -> None:
        """A large message begins to stream in (router/streams.py): route it by ``head``, its sections up
        to the properties. A pre-settled one is settled by the stream when complete (settling an incoming
        delivery still arriving would end it)."""
        if _delivery_settled(d):
            ind = InDelivery(None, rl, head)
            rl.presettled += 1
        else:
            ind = InDelivery(d, rl, head, self.coarse_now)
        ind.stream = stream
        stream.ind = ind
        self._route(ind, rl, head)

    def _route(self, ind: InDelivery, rl: RouterLink, msg: bytes) -> None:
        rl.delivery_count += 1
        rl.outstanding += 1
        if self.flow is not None:
            self.flow.ingress(ind, rl, msg)
        if rl.keep_in:  # from a neighbour router, or a connection whose annotations are trusted
            self.special.mesh_message_in(ind, msg)
            return
        # Sections come in order, so when the first one is properties (0x73) or later there is no
        # message-annotations section to look into. A small message is searched for the prefix (cheaper
        # than reading its sections); a larger one is told by its first sections, not its body.
        if msg[2:3] < b"\x73" and (ROUTER_PREFIX in msg if len(msg) <= SCAN_WHOLE_BELOW
                                   else may_carry_router_annotations(msg)):
            # Router annotations from a normal connection are not trusted (stripAnnotations both).
            try:
                ind.msg = strip_router_annotations(msg)
            except CodecError as exc:
                self.reject(ind, "amqp:decode-error", f"malformed message annotations: {exc}")
                return
        addr = rl.address
        if addr is None:
            try:
                to = message_to(msg)
            except CodecError as exc:
                self.reject(ind, "amqp:decode-error", f"malformed message: {exc}")
                return
            addr = self.addresses.get(self.parser.key_for_to(to)) if to else None
            if addr is None:
                self.special.unaddressed(ind, to)
                return
        if rl.from_edge:  # never back down the edge it came up from (DISPATCH-1156)
            self.special.forward_special(ind, addr)
            return
        self.forward(ind, addr)

    def refuse_arrival(self, rl: RouterLink, d, msg: bytes, condition: str, description: str) -> None:
        """A message the link's gate (router/policygate.py) refused as it arrived: counted like any arrival
        on ``rl``, then rejected with ``condition`` (or dropped and counted when it came pre-settled)."""
        presettled = _delivery_settled(d)
        if presettled:
            _delivery_settle(d)
            rl.presettled += 1
        ind = InDelivery(None if presettled else d, rl, msg, self.coarse_now)
        rl.delivery_count += 1
        rl.outstanding += 1
        self.reject(ind, condition, description)

    def forward(self, ind: InDelivery, addr) -> None:
        if addr.remote or addr.handler is not None:
            # Other routers or a router-internal endpoint take this address (router/meshforward.py).
            self.special.forward_special(ind, addr)
            return
        rlinks = addr.rlinks
        if not rlinks:
            self.no_route(ind, addr.name)
            return
        addr.deliveries_ingress += 1
        dist = addr.distribution
        if dist == MULTICAST:
            ind.multicast = True
            self.enqueue(ind, rlinks)
            return
        if dist == UNAVAILABLE:  # attaches are refused, so only a reconfigured address gets here
            self.reject(ind, "amqp:not-found", f"address {addr.name} is unavailable")
            return
        if len(rlinks) == 1:
            ol = rlinks[0]
        elif dist == CLOSEST:
            ol = rlinks[addr.rr % len(rlinks)]
            addr.rr += 1
        else:
            ol = self._pick_balanced(addr, rlinks)
        ind.copies += 1
        ind.buffered += 1
        ol.undelivered.append(ind)
        ol.fresh += 1
        if not ol.dirty:
            ol.dirty = True
            self._dirty.append(ol)

    def mark_dirty(self, ol: RouterLink) -> None:
        """``ol`` got its first delivery of this batch (the caller set ``ol.dirty``): it is pumped at the
        batch end. For callers that queue a single copy inline, as :meth:`forward` does."""
        self._dirty.append(ol)

    def enqueue(self, ind: InDelivery, links) -> None:
        """Queue one copy on each link, to go at the end of the batch. Every copy is counted before any
        is sent: credit and the message bytes are released when the last copy has left, not the first."""
        n = len(links)
        ind.copies += n
        ind.buffered += n
        dirty = self._dirty
        for ol in links:
            ol.undelivered.append(ind)
            ol.fresh += 1
            if not ol.dirty:
                ol.dirty = True
                dirty.append(ol)

    @staticmethod
    def _pick_balanced(addr, rlinks):
        """Least undelivered+unsettled among links under capacity; rotate so ties spread (DISPATCH-367)."""
        n = len(rlinks)
        start = addr.rr % n
        addr.rr += 1
        best = None
        best_value = None
        best_eligible = False
        for i in range(n):
            ol = rlinks[(start + i) % n]
            value = len(ol.undelivered) + len(ol.unsettled)
            if value == 0:
                return ol
            eligible = value < ol.capacity
            if best is None or (eligible and not best_eligible) or (eligible == best_eligible and value < best_value):
                best, best_value, best_eligible = ol, value, eligible
        return best

    def on_batch_end(self) -> None:
        """Send what this batch of events queued: one credit check and one wake-up per link and batch."""
        if self._output_rechecks:
            rechecks, self._output_rechecks = self._output_rechecks, []
            for rc in rechecks:
                self.output_room(rc)
        # A link may become dirty while others are pumped (a streamed copy ends, router/streams.py): go on
        # until none is left, so nothing waits for a batch end that may not come.
        while self._dirty:
            dirty = self._dirty
            self._dirty = []
            for ol in dirty:
                ol.dirty = False
                if not ol.closed:
                    self.pump(ol)
                fresh = ol.fresh
                if fresh:
                    ol.fresh = 0
                    if ol.undelivered:
                        self._charge_waiting(ol, fresh)

    def _charge_waiting(self, ol: RouterLink, fresh: int) -> None:
        """Messages queued on ``ol`` in this batch could not be sent at once: from now on they count
        against their producers' connections (router/budget.py). A message sent within the batch it
        arrived in, the common case, is never charged: the accounting costs nothing on that path."""
        q = ol.undelivered
        budget = self.budget
        charged = []
        for ind in itertools.islice(reversed(q), min(fresh, len(q))):
            if ind.held:
                continue  # a multicast copy charged through another link
            rc = ind.link.conn
            if rc is None:
                continue  # the router's own message
            n = ind.held = ind.size
            rc.held += n
            budget.total += n
            charged.append(rc)
        for rc in charged:
            if rc.held > budget.conn_high or budget.total > budget.total_high:
                budget.over(rc)

    # -- departure -------------------------------------------------------------------------------
    def pump(self, ol: RouterLink) -> None:
        """Send queued deliveries on an outgoing link while it has credit."""
        q = ol.undelivered
        if not q or ol.streaming is not None:  # a streamed copy unfinished here goes first (in order)
            return
        ptr = ol.ptr
        credit = _link_credit(ptr)
        engine = ol.engine
        rc = ol.conn
        if credit <= 0 or engine.output_blocked:
            if rc.paused:  # what it sends next (credit, settlements) is what we wait for
                self.budget.peer_needed(rc)
            return
        unsettled = ol.unsettled
        presettled_out = ol.presettled_out
        mesh = ol.annotate_out  # a neighbour router (or stripAnnotations in/no) gets the annotated form
        seq = ol.tag_seq
        sent = 0
        budget = self.budget
        # Room before this connection's output limits (router/budget.py); one message always fits.
        room = budget.output_high - engine.out_pending
        unsettled_room = budget.unsettled_high - rc.out_unsettled
        if unsettled_room < room:
            room = unsettled_room
        out_bytes = 0
        ring_ok = len(unsettled) + credit < raw.TAG_RING
        while credit > 0 and q and out_bytes < room:
            ind = q.popleft()
            st = ind.stream
            if st is not None and st.aborted:  # its producer aborted it: this copy goes nowhere
                ind.copies -= 1
                ind.buffered -= 1
                if ind.buffered == 0:
                    self.left_buffer(ind)
                continue
            seq += 1
            body = ind.msg
            if mesh:
                body = ind.mesh_msg
                if body is None:  # a client connection that keeps annotations: made on first need
                    body = ind.mesh_msg = self.special.annotated(ind, ol.address, ind.msg)
            if st is not None:
                credit -= 1
                if self._start_streamed(ol, ind, st, seq, body, ring_ok, presettled_out):
                    sent += 1
                if ol.streaming is not None:
                    break  # unfinished: the link's next delivery waits for its end
                continue
            if ring_ok:
                od = _send_ring_tagged(ptr, seq, body)
            else:  # more unsettled than the tag ring holds: unique tags the slow way
                od = _send_message(ptr, b"x%x" % seq, body)
            credit -= 1
            sent += 1
            out_bytes += len(body)
            if ind.flow is not None:
                self.flow.egress(ol, ind)
            if ind.ptr is None or presettled_out:
                _delivery_settle(od)
                ind.copies -= 1
                if ind.ptr is not None:
                    # The consumer takes settled deliveries: the copy counts as accepted.
                    self._copy_done(ind, ACCEPTED, None)
            else:
                unsettled[od] = ind
            ind.buffered -= 1
            if ind.buffered == 0:
                self.left_buffer(ind)
        ol.tag_seq = seq
        engine.out_pending += out_bytes
        # An upper bound of the bytes unsettled at this connection: settlements do not subtract (that
        # would cost every message); it is counted exactly when it reaches the limit.
        rc.out_unsettled += out_bytes
        if credit > 0 and q:  # stopped by an output limit, not by credit
            self._output_limited(ol)
        rc.last_delivery_at = self._clock()  # once per pump (a batch), not per message
        ol.delivery_count += sent
        ol.address.deliveries_egress += sent
        engine.wake()

    def _start_streamed(self, ol: RouterLink, ind: InDelivery, st, seq: int, head: bytes, ring_ok: bool,
                        presettled_out: bool) -> bool:
        """Begin a streamed message's copy on ``ol`` (router/streams.py); True when it is already whole
        (sent and counted now; an unfinished one counts when it ends: Streams calls copy_finished)."""
        od, n = self.streams.start_copy(st, ol, seq, head, ring_ok)
        ol.engine.out_pending += n
        ol.conn.out_unsettled += n
        if ind.flow is not None:
            self.flow.egress(ol, ind)
        if ind.ptr is None or presettled_out:
            if st.complete:
                self._sent_settled(ind, od)
        else:
            ol.unsettled[od] = ind
        ind.buffered -= 1
        self.streams.copy_started(st)
        if ind.buffered == 0:
            self.left_buffer(ind)
        return st.complete

    def copy_finished(self, ol: RouterLink, od, ind: InDelivery) -> None:
        """A streamed copy on ``ol`` got its last bytes: count it, settle it when it goes settled, and let
        the link send what waits behind it (at the batch end)."""
        ol.delivery_count += 1
        if ol.address is not None:
            ol.address.deliveries_egress += 1
        if ind.ptr is None or ol.presettled_out:
            self._sent_settled(ind, od)
        ol.engine.wake()
        if ol.undelivered and not ol.dirty:
            ol.dirty = True
            self._dirty.append(ol)

    def _sent_settled(self, ind: InDelivery, od) -> None:
        """A whole streamed copy went settled (a pre-settled message, or a consumer taking settled
        deliveries, which counts as accepted): as pump does inline for a message sent whole."""
        _delivery_settle(od)
        ind.copies -= 1
        if ind.ptr is not None:
            self._copy_done(ind, ACCEPTED, None)

    def copy_aborted(self, ol: RouterLink, od, ind: InDelivery) -> None:
        """A streamed copy on ``ol`` was aborted (its producer aborted or left): it is settled and over."""
        if ol.unsettled.pop(od, None) is not None or ind.ptr is None or ol.presettled_out:
            ind.copies -= 1
        if ind.remote_addr is not None:
            self.remote_settled(ind)
        ol.engine.wake()
        if ol.undelivered and not ol.dirty:
            ol.dirty = True
            self._dirty.append(ol)

    def _output_limited(self, ol: RouterLink) -> None:
        """A pump on ``ol`` stopped at an output limit. The unsettled figure may only be an upper bound:
        count it; if there is room after all, go on sending, else stop sending to this connection until
        its socket drains (on_output_drained) or its consumers settle (output_room at the batch end)."""
        rc = ol.conn
        engine = ol.engine
        budget = self.budget
        rc.out_unsettled = unsettled_bytes(rc)
        if engine.out_pending < budget.output_high and rc.out_unsettled < budget.unsettled_high:
            self.pump(ol)  # room after all: the exact count leaves at least one message of room
            return
        engine.output_blocked = True
        engine.output_resume_at = budget.output_low
        if rc.paused:
            budget.peer_needed(rc)

    def output_room(self, rc) -> None:
        """Output to ``rc`` may have dropped under both output limits: if so, send what waits for it."""
        engine = rc.engine
        budget = self.budget
        if not engine.output_blocked or engine.out_pending > budget.output_low:
            return
        rc.out_unsettled = unsettled_bytes(rc)
        if rc.out_unsettled > budget.unsettled_low:
            return
        engine.output_blocked = False
        for rl in list(rc.links.values()):
            if not rl.incoming and rl.undelivered and not rl.closed:
                self.pump(rl)

    def left_buffer(self, ind: InDelivery) -> None:
        """The last queued copy of a delivery left the router: the producer earns its credit back."""
        il = ind.link
        il.outstanding -= 1
        # Every copy is in an engine now: the router needs the bytes no more (outcomes need only ptr).
        ind.msg = None
        ind.mesh_msg = None
        n = ind.held  # charged only if it waited past a batch; it leaves the buffer once
        if n:
            rc = il.conn
            rc.held -= n
            budget = self.budget
            budget.total -= n
            if budget.paused:
                budget.released(rc)
        if il.closed:
            return
        addr = il.address
        if addr is not None and not addr.rlinks and not addr.remote and not addr.has_destination:
            il.owed_credit += 1
            il.withheld = True
            if il.from_waypoint:
                self._credit_not_below_zero(il)
            return
        owed = il.owed_credit + 1
        if owed >= il.credit_batch:
            il.owed_credit = 0
            il.withheld = False
            _link_flow(il.ptr, owed)
            il.engine.wake()
        else:
            il.owed_credit = owed

    # -- outcomes ---------------------------------------------------------------------------------
    def on_delivery_update(self, engine, ol: RouterLink, d) -> None:
        """A disposition arrived for one of our outgoing deliveries; or, on an incoming link, the producer
        settled a delivery already taken (only one whose outcome was mirrored matters)."""
        if ol.incoming:
            if self._mirrored and _delivery_settled(d):
                self.producer_settled(d)
            return
        state = _delivery_remote_state(d)
        if not _delivery_settled(d):
            if state in raw.TERMINAL_STATES:
                self._mirror_unsettled(ol, d, state)
            return  # received / non-terminal: nothing to pass on
        ind = ol.unsettled.pop(d, None)
        if ol.engine.output_blocked:
            self._recheck_output(ol.conn)
        if ind is not None and ind.remote_addr is not None:
            self.remote_settled(ind)
        if state == ACCEPTED and ind is not None and not ind.multicast:
            # The common case, inlined: an anycast copy accepted and settled by its consumer.
            ol.accepted += 1
            _delivery_settle(d)
            in_ptr = ind.ptr
            late = self.coarse_now - ind.arrived > DELAYED_1S
            if late:
                self._delayed(ol, ind)
            if in_ptr is not None:
                ind.ptr = None
                ind.copies = 0
                if self._mirrored:
                    self._mirrored.pop(in_ptr, None)
                il = ind.link
                il.settled += 1
                if late:
                    self._delayed_in(il, ind)
                if ind.flow is not None:
                    self.flow.settle(ind, ACCEPTED)
                if not il.closed:
                    _delivery_update(in_ptr, ACCEPTED)
                    if ind.stream is None:
                        _delivery_settle(in_ptr)
                    else:
                        self._settle_streamed(ind, in_ptr)
                    il.engine.wake()
            return
        if state == ACCEPTED or state == RELEASED:
            src = None  # no details to carry: a plain state update upstream
        elif state == 0 or state == raw.RECEIVED:
            state = ACCEPTED  # settled without an outcome: the spec's default outcome
            src = None
        else:
            src = d
        if state == ACCEPTED:
            ol.accepted += 1
        else:
            self._count_outcome(ol, state)
        if ind is not None:
            if self.coarse_now - ind.arrived > DELAYED_1S:
                self._delayed(ol, ind)
            ind.copies -= 1
            self._copy_done(ind, state, src)
        _delivery_settle(d)

    def _recheck_output(self, rc) -> None:
        """A consumer whose output is blocked settled something: look at its room at the batch end (once
        per batch, not per settlement: counting its unsettled bytes walks them all)."""
        if rc not in self._output_rechecks:
            self._output_rechecks.append(rc)

    @staticmethod
    def _count_outcome(ol: RouterLink, state: int) -> None:
        if state == ACCEPTED:
            ol.accepted += 1
        elif state == RELEASED:
            ol.released += 1
        elif state == REJECTED:
            ol.rejected += 1
        else:
            ol.modified += 1

    def _mirror_unsettled(self, ol: RouterLink, d, state: int) -> None:
        """The consumer gave an outcome but has not settled (rcv-settle-mode second, or later).

        Anycast: the outcome goes to the producer now, unsettled; settlement follows from whichever
        side settles first (the consumer's settle reaches the producer, the producer's the consumer).
        A multicast copy's outcome is final at once: the merged outcome can only go upstream at the end.
        """
        ind = ol.unsettled.get(d)
        if ind is None or ind.ptr is None:
            return
        if ind.multicast:
            del ol.unsettled[d]
            if ol.engine.output_blocked:
                self._recheck_output(ol.conn)
            self._count_outcome(ol, state)
            if self.coarse_now - ind.arrived > DELAYED_1S:
                self._delayed(ol, ind)
            ind.copies -= 1
            self._mcast_unsettled.add(ind)
            self._copy_done(ind, state, d)
            _delivery_settle(d)
            return
        if ind.outcome:
            return  # already mirrored
        ind.outcome = state
        self._mirrored[ind.ptr] = (ol, d, ind)
        if not ind.link.closed:
            raw.copy_outcome(d, ind.ptr)
            ind.link.engine.wake()

    @property
    def awaiting_producers(self) -> int:
        """Deliveries whose producer has an outcome and the router waits for it to settle."""
        return len(self._mirrored)

    def forget_producer(self, il: RouterLink) -> None:
        """An incoming link went away: outcomes it was given unsettled wait for a settlement that will not
        come, and its delivery pointers may be reused, so they are forgotten; its streams are aborted."""
        if self.streams is not None:
            self.streams.producer_gone(il)
        if self._mirrored:
            for in_ptr in [p for p, (_, _, ind) in self._mirrored.items() if ind.link is il]:
                del self._mirrored[in_ptr]

    def producer_settled(self, in_ptr) -> None:
        """The producer settled a delivery whose outcome we mirrored: settle the consumer's copy too."""
        entry = self._mirrored.pop(in_ptr, None)
        if entry is None:
            return
        ol, od, ind = entry
        ind.ptr = None
        _delivery_settle(in_ptr)
        self._settled_in(ind)
        if ol is None:  # a multicast outcome: its copies are settled already
            return
        if ind.remote_addr is not None:
            self.remote_settled(ind)
        if ol.unsettled.pop(od, None) is not None:
            if ol.engine.output_blocked:
                self._recheck_output(ol.conn)
            ind.copies -= 1
            self._count_outcome(ol, ind.outcome)
            if self.coarse_now - ind.arrived > DELAYED_1S:
                self._delayed(ol, ind)
            if not ol.closed:
                _delivery_settle(od)
                ol.engine.wake()

    def _copy_done(self, ind: InDelivery, state: int, src) -> None:
        """One copy reached a terminal state; settle upstream when the last one has."""
        if ind.multicast:
            if OUTCOME_PRIORITY.get(state, 0) > OUTCOME_PRIORITY.get(ind.outcome, 0):
                ind.outcome = state
            if ind.copies > 0:
                return
            state = ind.outcome
            src = None
            if self._mcast_unsettled and ind in self._mcast_unsettled:
                self._mcast_unsettled.discard(ind)
                self._outcome_unsettled(ind, state)
                return
        in_ptr = ind.ptr
        if in_ptr is None:
            return
        ind.ptr = None
        if ind.flow is not None:
            self.flow.settle(ind, state)
        mirrored = False
        if self._mirrored and self._mirrored.pop(in_ptr, None) is not None:
            mirrored = True  # the producer already has an outcome; only settlement is missing
        il = ind.link
        if il.closed:
            return
        self._settled_in(ind)
        if src is not None:
            raw.copy_outcome(src, in_ptr)
        elif mirrored:
            pass
        elif state == MODIFIED:
            raw.set_modified(in_ptr, failed=True)
        else:
            _delivery_update(in_ptr, state)
        self._settle_in_ptr(ind, in_ptr)
        il.engine.wake()

    def _settle_in_ptr(self, ind: InDelivery, in_ptr) -> None:
        """Settle a delivery towards its producer (its outcome is set)."""
        if ind.stream is None:
            _delivery_settle(in_ptr)
        else:
            self._settle_streamed(ind, in_ptr)

    @staticmethod
    def _settle_streamed(ind: InDelivery, in_ptr) -> None:
        """A streamed message still arriving has its outcome now (it went upstream unsettled) and is
        settled when its producer has sent the rest (router/streams.py)."""
        st = ind.stream
        if st.unfinished:
            st.settle_when_complete = True
        else:
            _delivery_settle(in_ptr)

    # -- delayed, stuck and rate (see the module docstring) -----------------------------------------------
    def _settled_in(self, ind: InDelivery) -> None:
        """An unsettled delivery was settled back to its producer: count it on its incoming link."""
        il = ind.link
        il.settled += 1
        if self.coarse_now - ind.arrived > DELAYED_1S:
            self._delayed_in(il, ind)

    def _delayed(self, rl: RouterLink, ind: InDelivery) -> None:
        """``ind`` (or its copy on ``rl``) settled more than DELAYED_1S after it arrived."""
        if self.coarse_now - ind.arrived > DELAYED_10S:
            rl.delayed_10s += 1
        else:
            rl.delayed_1s += 1

    def _delayed_in(self, il: RouterLink, ind: InDelivery) -> None:
        """The incoming side of a delayed delivery: the link's count and the router-wide one."""
        if self.coarse_now - ind.arrived > DELAYED_10S:
            il.delayed_10s += 1
            self.delayed_10s += 1
        else:
            il.delayed_1s += 1
            self.delayed_1s += 1

    def on_tick(self, now: float, connections) -> None:
        """The router's periodic tick: move the coarse clock; once a STUCK_SCAN_SECONDS (longer with more
        than SCAN_LINKS_PER_SECOND links), scan the links of ``connections`` for deliveries that have just
        become stuck and sample their settled counts."""
        self.coarse_now = now
        if now - self.last_scan < self._scan_interval:
            return
        # A delivery is stuck at the scan whose window (previous scan, this scan] its age crosses
        # STUCK_SECONDS: it is counted exactly once, with no mark kept on it.
        newest = now - STUCK_SECONDS
        oldest = self.last_scan - STUCK_SECONDS
        self.last_scan = now
        counted_in = set()
        scanned = 0
        for rc in connections:
            scanned += len(rc.links)
            for rl in rc.links.values():
                if not isinstance(rl, RouterLink) or rl.closed:
                    continue
                samples = rl.rate_samples
                if samples is None:
                    samples = rl.rate_samples = deque(maxlen=RATE_WINDOW_SECONDS)
                samples.append((now, self.settled_count(rl)))
                if rl.incoming:
                    continue
                # zeroCreditSeconds and linksBlocked: as of the scan that first saw the consumer's credit
                # at zero (so to a second), until a scan sees some again
                if _link_credit(rl.ptr) > 0:
                    rl.zero_credit_since = None
                elif rl.zero_credit_since is None:
                    rl.zero_credit_since = now
                for ind in itertools.chain(rl.undelivered, rl.unsettled.values()):
                    if ind.ptr is None or not oldest < ind.arrived <= newest:
                        continue
                    rl.stuck += 1
                    if id(ind) not in counted_in:  # a multicast delivery counts once on its incoming side
                        counted_in.add(id(ind))
                        ind.link.stuck += 1
                        self.deliveries_stuck += 1
        self._scan_interval = max(STUCK_SCAN_SECONDS, scanned / SCAN_LINKS_PER_SECOND)

    def zero_credit_seconds(self, rl: RouterLink) -> int:
        """Whole seconds ``rl`` (outgoing) has had no credit from its consumer, 0 while it has some."""
        since = rl.zero_credit_since
        return int(self.coarse_now - since) if since is not None and not rl.closed else 0

    def links_blocked(self, connections) -> int:
        """Outgoing links without credit for more than :data:`BLOCKED_SECONDS` (Dispatch's linksBlocked)."""
        limit = self.coarse_now - BLOCKED_SECONDS
        return sum(1 for rc in connections for rl in rc.links.values()
                   if isinstance(rl, RouterLink) and not rl.closed and rl.zero_credit_since is not None
                   and rl.zero_credit_since < limit)

    @staticmethod
    def settled_count(rl: RouterLink) -> int:
        """Deliveries settled on ``rl`` so far: outcomes of copies sent (outgoing), or deliveries settled back
        to the producer and pre-settled arrivals (incoming)."""
        if rl.incoming:
            return rl.settled + rl.presettled
        return rl.accepted + rl.rejected + rl.released + rl.modified

    def settle_rate(self, rl: RouterLink) -> int:
        """Deliveries settled per second on ``rl``, averaged since the oldest sample of the last
        RATE_WINDOW_SECONDS (0 before the first sample)."""
        samples = rl.rate_samples
        if not samples:
            return 0
        then, count = samples[0]
        elapsed = self._clock() - then
        if elapsed <= 0:
            return 0
        return round((self.settled_count(rl) - count) / elapsed)

    def _outcome_unsettled(self, ind: InDelivery, state: int) -> None:
        """Give a multicast delivery's merged outcome to its producer without settling it: the producer
        settles (producer_settled then settles our side)."""
        in_ptr = ind.ptr
        if in_ptr is None:
            return
        if ind.flow is not None:
            self.flow.settle(ind, state)
        il = ind.link
        if il.closed:
            ind.ptr = None
            return
        if state == MODIFIED:
            raw.set_modified(in_ptr, failed=True)
        else:
            _delivery_update(in_ptr, state)
        self._mirrored[in_ptr] = (None, None, ind)
        il.engine.wake()

    def settle_upstream(self, ind: InDelivery, state: int) -> None:
        """Settle a delivery that went nowhere (no route, rejected here)."""
        in_ptr = ind.ptr
        ind.ptr = None
        if ind.flow is not None and in_ptr is not None:
            self.flow.settle(ind, state)
        if in_ptr is not None and not ind.link.closed:
            if state == MODIFIED:
                raw.set_modified(in_ptr, failed=True)
            else:
                _delivery_update(in_ptr, state)
            self._settle_in_ptr(ind, in_ptr)
            self._settled_in(ind)
            ind.link.engine.wake()

    def no_route(self, ind: InDelivery, to) -> None:
        """Fanout 0: released when unsettled, dropped and counted when pre-settled; unavailable rejects."""
        if to and self._is_unavailable(to):
            self.rejected_unavailable += 1
            self.reject(ind, "amqp:not-found", f"address {to} is unavailable")
            return
        if ind.ptr is None:
            self.dropped_presettled += 1
        else:
            self.deliveries_no_route += 1
            self.settle_upstream(ind, RELEASED)
        ind.msg = None
        self.left_buffer(ind)

    def reject(self, ind: InDelivery, condition: str, description: str) -> None:
        """Reject a delivery here (settled with ``condition``), or count it when it came pre-settled."""
        in_ptr = ind.ptr
        if ind.flow is not None and in_ptr is not None:
            self.flow.settle(ind, REJECTED)
        ind.ptr = None
        ind.msg = None
        if in_ptr is not None and not ind.link.closed:
            raw.set_rejected(in_ptr, condition, description)
            self._settle_in_ptr(ind, in_ptr)
            self._settled_in(ind)
            ind.link.engine.wake()
        elif in_ptr is None:
            self.dropped_presettled += 1
        self.left_buffer(ind)

    def _is_unavailable(self, to: str) -> bool:
        klass, name = self.parser.parse(to)
        return klass == "M" and self.address_config.semantics(name).distribution == UNAVAILABLE

    # -- an outgoing link goes away ------------------------------------------------------------------
    def fail_outgoing(self, ol: RouterLink) -> None:
        """Return everything queued on or unsettled at a departing consumer to its producers.

        Undelivered copies were never seen by the consumer: released. Copies sent but not settled may
        have been processed: modified with delivery-failed, so the producer may resend. The same holds
        for a link to a neighbour router that is lost.
        """
        if ol.streaming is not None:
            self.streams.copy_lost(ol)
        self.release_queued(ol)
        unsettled = ol.unsettled
        ol.unsettled = {}
        if unsettled and ol.engine.output_blocked:
            self._recheck_output(ol.conn)
        # Sent and not settled: through a lost neighbour as much as to a departing consumer, the copy may
        # have reached a consumer and been processed, so the producer hears modified (delivery-failed),
        # never released ("not delivered", AMQP 1.0 §3.4.4), which would invite a duplicate; as Dispatch
        # does for deliveries in flight on a lost link (router_core/connections.c).
        for ind in unsettled.values():
            if ind.remote_addr is not None:
                self.remote_settled(ind)
            ind.copies -= 1
            self._copy_done(ind, MODIFIED, None)

    def release_queued(self, ol: RouterLink) -> None:
        """Release to their producers the copies queued on ``ol`` and not sent yet (the link stops being
        a destination, as an edge's uplink sender does when the interior says nobody consumes beyond the
        edge); what it has sent stays unsettled on it until its peer answers."""
        q = ol.undelivered
        ol.undelivered = type(q)()
        for ind in q:
            if ind.remote_addr is not None:
                self.remote_settled(ind)
            ind.copies -= 1
            ind.buffered -= 1
            self._copy_done(ind, RELEASED, None)
            if ind.buffered == 0:
                self.left_buffer(ind)

    @staticmethod
    def remote_settled(ind: InDelivery) -> None:
        """A balanced copy sent to a neighbour router settled or failed: it no longer weighs that
        neighbour (``InDelivery.remote_addr``)."""
        addr = ind.remote_addr
        if addr is None:
            return
        conn = ind.remote_conn
        ind.remote_addr = ind.remote_conn = None
        outstanding = addr.outstanding
        n = outstanding[conn] - 1
        if n:
            outstanding[conn] = n
        else:
            del outstanding[conn]  # no reference kept to a connection that may go away

    def grant_initial_credit(self, il: RouterLink) -> None:
        """Credit for a new incoming link: capacity now if it can go somewhere, else withheld. A data link
        from a neighbour router gets a bounded session window first (router/streams.py: a held stream
        stops its session, not the connection)."""
        if il.inter_router:
            raw.session_set_incoming_capacity(raw.link_session(il.ptr), INTER_ROUTER_SESSION_WINDOW)
        addr = il.address
        if addr is None or addr.has_destination:
            _link_flow(il.ptr, il.capacity)
        else:
            il.withheld = True
            il.owed_credit = il.capacity

    def destination_lost(self, addr) -> None:
        """``addr`` may have lost its last destination: take back the credit its waypoint-fed links have
        not used (see the module docstring: a store would send what the router releases straight back).
        Idempotent, and a no-op while the address has a destination; the credit is owed until
        :meth:`destination_appeared`."""
        if addr.has_destination:
            return
        for il in addr.inlinks:
            if not il.from_waypoint or il.closed:
                continue
            il.withheld = True
            ptr = il.ptr
            # What the next flow frame would announce: the receiver's credit less the deliveries it holds
            # that are not yet advanced past (a multi-frame one arriving). Zero or less: nothing to take.
            credit = _link_credit(ptr) - _link_queued(ptr)
            if credit > 0:
                il.owed_credit += credit
                _link_flow(ptr, -credit)  # the flow frame carries link-credit 0
                il.engine.wake()

    @staticmethod
    def _credit_not_below_zero(il: RouterLink) -> None:
        """A delivery the store sent before it heard that its credit was taken back has left the router
        (released): bring the receiver's credit back up to zero. Proton counts such deliveries against
        credit it no longer has, and a flow frame would carry the negative figure as an unsigned
        link-credit near 2**32 — endless credit for any peer but proton. The flow says link-credit 0 with
        the new delivery-count; the credit used for it comes out of what is owed."""
        ptr = il.ptr
        deficit = _link_queued(ptr) - _link_credit(ptr)
        if deficit > 0:
            il.owed_credit -= deficit
            _link_flow(ptr, deficit)
            il.engine.wake()

    def destination_appeared(self, addr) -> None:
        """The first consumer arrived: give withheld credit to the address's producers."""
        for il in addr.inlinks:
            if il.withheld and not il.closed:
                il.withheld = False
                owed = il.owed_credit
                il.owed_credit = 0
                if owed:
                    _link_flow(il.ptr, owed)
                    il.engine.wake()
