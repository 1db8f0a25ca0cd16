"""The router's records for connections, links and in-flight deliveries.

Kept small (``__slots__``) because an ``InDelivery`` exists for every message in flight: it is the only
per-message object the router builds.
"""

from __future__ import annotations

import itertools
from collections import deque

_link_ids = itertools.count(1)


def next_link_id() -> int:
    """A link identity from the same sequence as RouterLink's (management lists every link by it)."""
    return next(_link_ids)


class RouterConnection:
    """The router's view of one AMQP connection."""

    __slots__ = ("engine", "links", "role", "opened_at", "name", "mesh", "last_delivery_at", "remote_open",
                 "held", "out_unsettled", "paused", "policy", "gate", "admission")

    def __init__(self, engine, role: str, name: str, opened_at: float):
        self.engine = engine
        self.links: dict = {}  # raw link pointer -> RouterLink
        self.role = role
        self.name = name
        self.opened_at = opened_at
        self.mesh = None  # router.interrouter.MeshConnection on an inter-router connection
        self.last_delivery_at = None  # router clock when a message last left on this connection
        self.remote_open = False  # the peer's OPEN arrived (after SASL): usable as a container
        # Memory accounting (router/budget.py): bytes of this peer's complete messages the router still
        # buffers; an upper bound of the bytes of unsettled deliveries sent to this peer (proton keeps
        # their buffers until they settle; counted exactly only at the limit); and whether reading from
        # this peer is paused because it holds too much.
        self.held = 0
        self.out_unsettled = 0
        self.paused = 0  # router/budget.py: 0, or why reading is paused
        # Vhost policy (router/policy.py): what this connection may do, and the owner of its incoming
        # links that checks their messages (router/policygate.py); None where no policy applies.
        self.policy = None
        self.gate = None
        # An inter-router or edge connection admitted by its listener's policyVhost (who may join the
        # mesh); it counts against that vhost until it closes.
        self.admission = None


class RouterLink:
    """One attached link as the router sees it, and the engine's record of it (wire/assembly.py reads
    ``owner``, ``incoming`` and ``max_message_size``).

    ``incoming`` links carry messages into the router (the peer is a sender); outgoing links carry them
    out (the peer is a receiver). ``address`` is None for an anonymous incoming link. ``owner`` is the
    :class:`wire.assembly.LinkOwner` the engine hands the link's events to: the forwarder, or a part
    that looks at some events first (the edge uplink).
    """

    __slots__ = (
        "id", "ptr", "conn", "engine", "incoming", "address", "capacity", "name", "owner",
        # incoming
        "outstanding", "owed_credit", "credit_batch", "withheld", "from_waypoint",
        # outgoing
        "undelivered", "unsettled", "tag_seq", "presettled_out", "dirty", "max_message_size", "fresh",
        # state and counters
        "closed", "dynamic_address", "target_override", "auto_link", "delivery_count", "accepted", "rejected", "released",
        "modified", "presettled", "dropped_presettled",
        # inter-router: a data link to/from a neighbour router (router annotations kept, not stripped)
        "inter_router",
        # stripAnnotations: keep_in = annotations arriving here are honoured (inter-router, or 'out'/'no');
        # annotate_out = messages leave with router annotations (inter-router, or 'in'/'no')
        "keep_in", "annotate_out",
        # an incoming link on an edge router's uplink connection (this router is its interior)
        "from_edge",
        # delay and settlement counters (router/forwarder.py, "Delayed, stuck and rate")
        "settled", "delayed_1s", "delayed_10s", "stuck", "rate_samples",
        # since when an outgoing link has had no credit (the periodic scan; None: it has credit)
        "zero_credit_since",
        # outgoing: the stream (router/streams.py) whose copy this link is sending, unfinished; None
        "streaming",
    )

    def __init__(self, ptr, conn: RouterConnection, incoming: bool, address, capacity: int, name: str, owner):
        self.id = next_link_id()
        self.owner = owner
        self.ptr = ptr
        self.conn = conn
        self.engine = conn.engine
        self.incoming = incoming
        self.address = address
        self.capacity = capacity
        self.name = name
        self.outstanding = 0  # deliveries received on this link still in the router's buffers
        self.owed_credit = 0  # credit earned back but not yet sent in a flow frame
        # Replenish credit in batches: fewer flow frames and engine calls; the sender still never drops
        # below capacity - batch credit while its messages keep moving.
        self.credit_batch = max(1, capacity // 10)
        self.withheld = False  # credit held back because the address has no destination
        # A waypoint's output (a broker's queue: its sender declared qd.waypoint, or an ``in`` auto-link):
        # credit it has not used is taken back when its address loses its last destination, because a
        # store sends again at once what the router releases (router/forwarder.py, destination_lost).
        self.from_waypoint = False
        self.undelivered: deque = deque()
        self.unsettled: dict = {}  # outgoing delivery pointer -> InDelivery
        self.tag_seq = 0
        self.presettled_out = False  # the receiver asked for settled deliveries
        self.dirty = False  # queued deliveries wait for the end of the event batch to be sent
        self.fresh = 0  # deliveries queued in this batch (not yet charged to their producers if they wait)
        self.max_message_size = conn.engine.settings.max_message_size
        self.closed = False
        self.dynamic_address = None
        # An incoming link whose target names another router's node (``_topo/0/<router>/<node>``,
        # ``_edge/<edge>/<node>``): that address, carried to the mesh as x-opt-qd.to (the routing key
        # keeps only the router).
        self.target_override = None
        self.auto_link = None  # the AutoLink that created this link, if the router attached it
        self.delivery_count = 0
        self.accepted = 0
        self.rejected = 0
        self.released = 0
        self.modified = 0
        self.presettled = 0
        self.dropped_presettled = 0
        self.inter_router = False
        strip = conn.engine.settings.strip_annotations
        self.keep_in = strip in ("out", "no")
        self.annotate_out = strip in ("in", "no")
        self.from_edge = incoming and conn.role == "edge" and conn.engine.server
        self.settled = 0  # incoming: unsettled deliveries settled back to the producer
        self.delayed_1s = 0
        self.delayed_10s = 0
        self.stuck = 0
        self.rate_samples = None  # deque of (time, settled so far), made by the first periodic scan
        self.zero_credit_since = None
        self.streaming = None

    @property
    def backlog(self) -> int:
        """undelivered + unsettled: the measure balanced distribution minimises."""
        return len(self.undelivered) + len(self.unsettled)

    def __repr__(self) -> str:
        d = "in" if self.incoming else "out"
        return f"<RouterLink {self.id} {d} {self.address and self.address.key}>"


class InDelivery:
    """A message received by the router and not yet finished with.

    ``ptr`` is the incoming delivery (None once settled upstream or when it arrived pre-settled).
    ``copies`` counts outgoing copies still awaiting an outcome; ``buffered`` counts copies still queued
    in the router (the producer's credit comes back when it reaches 0). ``outcome`` is the merged
    outcome for multicast (priority rejected > accepted > modified > released).
    """

    __slots__ = ("ptr", "link", "msg", "copies", "buffered", "outcome", "multicast", "ra", "mesh_msg", "flow",
                 "size", "held", "remote_addr", "remote_conn", "arrived", "stream")

    def __init__(self, ptr, link: RouterLink, msg: bytes, arrived: float = 0.0):
        self.ptr = ptr
        # The router's coarse clock when it arrived (Forwarder.coarse_now): how long it stayed is measured
        # from here at settlement (delayed counters) and by the periodic stuck scan.
        self.arrived = arrived
        self.link = link
        self.msg = msg
        # size: what each unsettled outgoing copy is charged to its consumer's connection; held: what is
        # charged to the producer's connection while it waits in the router past the batch it arrived in
        # (router/budget.py; 0 until then, and for the router's own messages).
        self.size = len(msg)
        self.held = 0
        self.copies = 0
        self.buffered = 0
        self.outcome = 0
        self.multicast = False
        # Mesh only: the router annotations a message arrived with from a neighbour (``msg`` then holds
        # the stripped form for local consumers), and the annotated form for the next router.
        self.ra = None
        self.mesh_msg = None
        self.flow = None  # the message-id string when flow records sample this message
        # A balanced copy sent unsettled to a neighbour router: the address whose count for the neighbour's
        # connection it adds to (``Address.outstanding``, as Dispatch's outstanding_deliveries) until it
        # settles or fails (Forwarder.remote_settled); None otherwise.
        self.remote_addr = None
        self.remote_conn = None
        # A large message streamed through (router/streams.py): ``msg`` is then only its head.
        self.stream = None
