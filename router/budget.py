"""Bounded memory: the router's budget of buffered message bytes, and back-pressure when it is spent.

Credit alone does not bound the router: every incoming link gets ``linkCapacity`` credit, and a peer
chooses how many links it opens, how large its messages are, whether its consumers grant credit, settle,
or even read their socket. So the bytes the router holds are counted and limited:

* **Held bytes** — the bytes of a complete message that could not leave in the batch of input it
  arrived in, until its last copy has been handed to the engine of every destination — are charged to
  the connection the message came from (``RouterConnection.held``) and to the router-wide total. (A
  message that goes straight through is never charged: that keeps the common path free of accounting;
  the bytes of one batch, at most one socket read, are what that leaves uncounted.) A connection over its own limit
  (``maxConnectionBufferedBytes``), or any connection holding bytes while the router-wide total is over
  ``maxBufferedBytes``, has its socket left unread (TCP back-pressure, as Dispatch's Q2 hold-off does for
  one delivery: ``router_core/delivery.c``, ``qd_message_Q2_holdoff_*``) until it is back under half its
  limit (``CONNECTION_LOW_FRACTION``) and the total under three quarters (``TOTAL_LOW_FRACTION``). Other
  connections, consumers above all, keep flowing, and that is what drains the backlog.
* **Bytes still arriving** (multi-frame deliveries, :mod:`wire.assembly`) count in the router-wide total
  but never pause their own connection: the delivery could then never complete. Their size is bounded by
  ``maxMessageSize`` and their time by ``stalledDeliveryTimeoutSeconds``.
* **Output** — bytes handed to a connection's engine and not yet written to its socket, and bytes of
  deliveries sent to it and not yet settled (the engine keeps each delivery's buffer until it settles) —
  is limited per connection (``output_limit``, ``unsettled_limit``). Over either, the router stops
  sending to that connection; its messages wait in the router, charged to their producers, which are
  then paused as above. A consumer that stops reading its socket, or never settles, therefore slows its
  producers instead of growing the router.

Connections to other routers (inter-router, edge) are never paused (``UNPAUSED_ROLES``): their backlog
is bounded by credit, and each router pauses its own producers.

Deadlock guard: a paused connection's unread bytes may be exactly what would drain its backlog (credit,
settlements for its own consumer links). So a connection is not paused — and is resumed if it was — while
one of its own outgoing links has messages waiting; the bytes it can then make the router hold are
bounded by its links' credit, and past ``HARD_LIMIT_FACTOR`` times its limit the connection is closed
with ``amqp:resource-limit-exceeded`` (AMQP 1.0 §2.8.15): memory is never the peer's to decide.
"""

from __future__ import annotations

import logging

log = logging.getLogger("router.budget")

# Defaults (router entity attributes maxBufferedBytes and maxConnectionBufferedBytes). One connection may
# hold 64 MiB before it is paused: a credit window of 250 messages of 256 KiB, far above what a steady
# flow keeps in the router; the router as a whole 512 MiB.
DEFAULT_MAX_BUFFERED_BYTES = 512 * 1024 * 1024
DEFAULT_MAX_CONNECTION_BUFFERED_BYTES = 64 * 1024 * 1024
# Smaller limits would pause connections for every few messages: 1 MiB is the floor either may be set to.
MIN_BUFFERED_BYTES = 1024 * 1024
# A partial (multi-frame) delivery that gets no new bytes for this long is aborted (its link detached).
DEFAULT_STALLED_DELIVERY_TIMEOUT_SECONDS = 60.0

# Resume marks: well below the pause marks, so a connection is not paused and resumed per message.
CONNECTION_LOW_FRACTION = 0.5
TOTAL_LOW_FRACTION = 0.75
# Output to one connection: bytes not yet written to its socket, as a fraction of the connection limit
# (8 MiB by default: several socket buffers' worth), and bytes of unsettled deliveries (the full limit).
OUTPUT_LIMIT_FRACTION = 0.125
OUTPUT_LOW_FRACTION = 0.5
UNSETTLED_LOW_FRACTION = 0.75
# A connection that cannot be paused (deadlock guard) is closed past this multiple of its limit.
HARD_LIMIT_FACTOR = 4
# Why a connection is paused.
PAUSED_FOR_CONNECTION = 1
PAUSED_FOR_TOTAL = 2

RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
# Connections to other routers are never paused: a neighbour we do not read misses HELLOs and is declared
# lost (hello max age) with every route through it. Their backlog is bounded by the data links' credit,
# which the neighbour gets back only as messages leave this router, and is charged there to its producers.
UNPAUSED_ROLES = frozenset(("inter-router", "edge"))


class BufferBudget:
    """The limits, the router-wide total, and the set of paused connections.

    The forwarder charges and releases (``total`` and ``RouterConnection.held`` are plain integers it
    updates inline on the per-message path) and calls :meth:`over` when a charge crosses a limit and
    :meth:`released` when bytes are released while connections are paused.
    """

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BUFFERED_BYTES,
                 max_connection_bytes: int = DEFAULT_MAX_CONNECTION_BUFFERED_BYTES,
                 stalled_delivery_timeout: float = DEFAULT_STALLED_DELIVERY_TIMEOUT_SECONDS):
        self.total = 0
        self.total_high = max_bytes
        self.total_low = int(max_bytes * TOTAL_LOW_FRACTION)
        self.conn_high = max_connection_bytes
        self.conn_low = int(max_connection_bytes * CONNECTION_LOW_FRACTION)
        self.hard_limit = max_connection_bytes * HARD_LIMIT_FACTOR
        self.output_high = max(1, int(max_connection_bytes * OUTPUT_LIMIT_FRACTION))
        self.output_low = int(self.output_high * OUTPUT_LOW_FRACTION)
        self.unsettled_high = max_connection_bytes
        self.unsettled_low = int(max_connection_bytes * UNSETTLED_LOW_FRACTION)
        self.stalled_delivery_timeout = stalled_delivery_timeout
        self.paused: set = set()  # RouterConnections not being read
        self.under_pressure = False  # the router-wide total passed total_high and has not yet fallen to total_low
        self.connections: set = set()  # every RouterConnection (the router's own set)
        # Counters for management and tests.
        self.pauses = 0
        self.closed_over_limit = 0
        self.stalled_aborted = 0

    def over(self, rc) -> None:
        """``rc`` was just charged and it or the router-wide total is over a pause mark: pause reading
        from it (and, when the total just went over, from every connection holding bytes)."""
        if self.under_pressure and self.total <= self.total_low:
            self.under_pressure = False  # it passed the low mark while nobody was paused to notice
        if self.total > self.total_high and not self.under_pressure:
            self.under_pressure = True
            log.info("router-wide buffered bytes %d over %d: pausing the connections that hold them",
                     self.total, self.total_high)
            for other in list(self.connections):
                if other.held > 0 and other is not rc:
                    self._pause(other)
        if rc.held > self.conn_high or (self.under_pressure and rc.held > 0):
            self._pause(rc)

    def _pause(self, rc) -> None:
        reason = PAUSED_FOR_TOTAL if self.under_pressure else PAUSED_FOR_CONNECTION
        if rc.paused:
            rc.paused = max(rc.paused, reason)
            return
        engine = rc.engine
        if engine.failed or engine.closing or rc.role in UNPAUSED_ROLES:
            return
        if awaits_peer(rc):
            if rc.held > self.hard_limit:
                self.closed_over_limit += 1
                log.warning("connection %d: closed: holds %d buffered bytes, over %d, and its own consumers "
                            "wait for it", engine.id, rc.held, self.hard_limit)
                engine.close(RESOURCE_LIMIT_EXCEEDED,
                             f"this connection's messages buffered in the router passed {self.hard_limit} bytes")
            return
        rc.paused = reason
        self.paused.add(rc)
        self.pauses += 1
        engine.pause_reading()
        log.debug("connection %d: reading paused (%d bytes held, %d router-wide)", engine.id, rc.held, self.total)

    def released(self, rc) -> None:
        """Bytes held for ``rc`` were released while some connection is paused: resume whoever is back
        under the marks."""
        if self.under_pressure and self.total <= self.total_low:
            self.under_pressure = False
            for p in list(self.paused):
                if p.paused == PAUSED_FOR_TOTAL:
                    p.paused = PAUSED_FOR_CONNECTION
                    if p.held <= self.conn_low:
                        self.resume(p)
        if rc.paused and rc.held <= self.conn_low and not (self.under_pressure and rc.paused == PAUSED_FOR_TOTAL):
            self.resume(rc)

    def resume(self, rc) -> None:
        if not rc.paused:
            return
        rc.paused = 0
        self.paused.discard(rc)
        rc.engine.resume_reading()
        log.debug("connection %d: reading resumed (%d bytes held, %d router-wide)", rc.engine.id, rc.held,
                  self.total)

    def peer_needed(self, rc) -> None:
        """The router waits for something only ``rc`` can send (credit, settlements): never leave it
        unread (the deadlock guard)."""
        self.resume(rc)

    def forget(self, rc) -> None:
        """``rc`` is closing."""
        self.paused.discard(rc)
        rc.paused = 0


def awaits_peer(rc) -> bool:
    """True when one of ``rc``'s outgoing links has messages waiting: what it reads next may be the
    credit or settlements they need."""
    for rl in rc.links.values():
        if not rl.incoming and rl.undelivered:
            return True
    return False
