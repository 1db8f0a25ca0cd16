"""The broker's records of its AMQP connections and links (what ``engine.app`` and ``links`` hold).

A :class:`BrokerLink` is also the link record :meth:`wire.connection.EngineConnection.own_link` is given:
wire reads its ``owner`` (the :class:`wire.assembly.LinkOwner` that gets the link's deliveries, the
broker's :class:`broker.delivery.DeliveryPath`), ``incoming`` and ``max_message_size``.
"""

from __future__ import annotations

from broker.largemessage import DEFAULT_MIN_LARGE_MESSAGE_SIZE
from broker.queue import Queue
from wire.connection import EngineConnection


class Arriving:
    """Admission's view of the one multi-frame message in progress on an incoming link (a link carries the
    transfer frames of one delivery at a time, AMQP 1.0 §2.7.5 ``more``: a new delivery starts once the
    previous one is complete or aborted; wire drops an aborted one without telling the owner, so a new
    delivery is recognised by its pointer or by its byte count not growing): whether its header says durable, the size it may grow to before it is refused
    (``cap``), the size at which admission looks at it again, and why it was refused, if it was (its
    remaining bytes are then dropped by wire as they arrive)."""

    __slots__ = ("delivery", "held", "durable", "cap", "next_check", "refused")

    def __init__(self, delivery, durable: bool):
        self.delivery = delivery
        self.held = 0          # bytes arrived at the last look (they only grow within one delivery)
        self.durable = durable
        self.cap = -1          # set by the first check (which runs at once)
        self.next_check = 0
        self.refused: str | None = None


class BrokerLink:
    """One attached link: the queue it is bound to and, for a sending link, its consumer state."""

    __slots__ = ("ptr", "engine", "owner", "queue", "incoming", "max_message_size", "consumer_id",
                 "unsettled", "seq", "closed", "presettled", "name", "mode", "address", "owned_queue",
                 "durable_sub", "arriving", "selector", "transform", "demand", "priority", "pulled",
                 "writing", "streaming", "backlog", "drain_pending")

    # mode of a receiving link: None (into ``queue``), FANOUT (a copy per multicast queue of
    # ``address``), MANAGEMENT (requests for the management agent); of a sending link: None (a consumer
    # of ``queue``), BROWSE (a queue browser, broker.browse).
    FANOUT, MANAGEMENT, BROWSE = "fanout", "management", "browse"

    def __init__(self, ptr, engine, owner, queue: Queue | None, incoming: bool, name: str):
        self.ptr = ptr
        self.engine = engine
        self.owner = owner
        self.queue = queue
        self.incoming = incoming
        # Wire's own size check is off (0): the largest message a link takes depends on the broker's
        # state (disk space, address limits) and a complete message over it is refused with the link
        # kept, so admission decides (broker.admission), not a fixed number.
        self.max_message_size = 0
        self.name = name
        self.consumer_id = None
        self.unsettled: dict = {}  # delivery pointer -> queue delivery token
        self.seq = 0
        self.closed = False
        self.presettled = False
        self.mode: str | None = None
        self.address: str | None = None
        self.owned_queue = False   # a temporary queue that goes when this link goes
        self.durable_sub = False   # a durable subscription: deleted only when the link is closed
        self.arriving: Arriving | None = None  # a multi-frame message in progress (incoming links)
        self.selector: str | None = None  # a consumer's JMS selector text
        self.transform = None      # QueuedMessage -> bytes sent, instead of its outgoing() (network bridges)
        self.demand = None         # the network demand a consumer stands for (broker.network)
        self.priority = 0          # a consumer's priority on its queue
        self.pulled = False        # a receiving link whose owner gives its credit (DeliveryPath.attach)
        # Large messages (broker.largestream): the file a message arriving is written to; the message being
        # sent from its file; what the queue handed this consumer meanwhile ([(queue, token, msg, bytes)]),
        # sent after it; a drain the queue answered meanwhile.
        self.writing = None
        self.streaming = None
        self.backlog: list | None = None
        self.drain_pending = False


class BrokerConnection:
    """Per-connection state (``engine.app``)."""

    def __init__(self, engine: EngineConnection):
        self.engine = engine
        self.links: dict = {}  # link pointer -> BrokerLink
        # Temporary queues whose link closed without the deleteNonDurableQueue permission: removed when
        # this connection closes (broker.server.Broker._drop_owned).
        self.kept_queues: list[str] = []
        self.on_open = None  # broker connections: called once the peer answered our open
        self.network_peer: str | None = None  # the peer's network broker id (broker.network)
        self.link_capacity: int | None = None  # credit per incoming link, when not LINK_CAPACITY
        # amqpMinLargeMessageSize of the acceptor (broker.largemessage): a durable message at least this long
        # is streamed to a file of its own; -1: never.
        self.min_large_message_size = DEFAULT_MIN_LARGE_MESSAGE_SIZE
