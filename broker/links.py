"""The broker's records of its AMQP connections and links (what ``engine.app`` and ``links`` hold)."""

from __future__ import annotations

from broker.queue import Queue
from wire.connection import EngineConnection


class BrokerLink:
    """One attached link: the queue it is bound to and, for a sending link, its consumer state."""

    __slots__ = ("ptr", "engine", "queue", "incoming", "consumer_id", "unsettled", "seq", "closed",
                 "presettled", "name", "mode", "address", "owned_queue", "durable_sub")

    # mode of a receiving link: None (into ``queue``), FANOUT (a copy per multicast queue of
    # ``address``), MANAGEMENT (requests for the management agent).
    FANOUT, MANAGEMENT = "fanout", "management"

    def __init__(self, ptr, engine, queue: Queue | None, incoming: bool, name: str):
        self.ptr = ptr
        self.engine = engine
        self.queue = queue
        self.incoming = incoming
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


class PartialDelivery:
    """A multi-frame message still arriving: its chunks so far, whether its header says durable, the size
    it may grow to before it is refused (``cap``), the size at which the broker looks at it again, and
    why it was refused, if it was (its remaining bytes are then dropped as they arrive)."""

    __slots__ = ("chunks", "size", "durable", "cap", "next_check", "refused")

    def __init__(self, durable: bool):
        self.chunks: list[bytes] = []
        self.size = 0
        self.refused: str | None = None  # rejected while arriving: the rest is dropped, not kept
        self.durable = durable
        self.cap = -1          # set by the first check (which runs at once)
        self.next_check = 0


class BrokerConnection:
    """Per-connection state (``engine.app``)."""

    def __init__(self, engine: EngineConnection):
        self.engine = engine
        self.links: dict = {}  # link pointer -> BrokerLink
        self.on_open = None  # broker connections: called once the peer answered our open
