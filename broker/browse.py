"""Queue browsers, sans-IO: a receiving link whose source asks ``distribution-mode`` ``copy`` (AMQP 1.0
§3.5.3; what qpid-jms attaches for a JMS ``QueueBrowser``) on a queue is shown the queue's messages without
taking them.

What a browser sees (Artemis' semantics, user manual "Queue browsers" / JMS ``QueueBrowser``: a browser
walks the messages still in the queue):

* At attach, the messages ready in the queue, in queue order (priority, then arrival); after them every
  message enqueued later, in arrival order -- new messages, messages moved in (dead letters, expiry) and
  paged messages as they come back into memory (:meth:`broker.storage.Storage.depage`, in their FIFO
  order). Paged messages still on disk are not shown until they are read back: a queue pages only behind
  its in-memory messages and reads back as consumers make room, so a browser on a paging queue without
  consumers sees the in-memory part.
* A message is shown only if, when the browser's credit reaches it, it is still in the queue and not out
  with a consumer (:meth:`broker.queue.Queue.is_ready`); one acknowledged, expired or being delivered by
  then is skipped (Artemis' browser likewise skips messages that are delivering). Each message is shown
  once per browser.
* Nothing about the message changes: it is not acquired, consumers still get it, its delivery-count and
  acknowledgement state are untouched. The browser's outcomes (accepted, released, rejected, modified)
  only settle the transfer.
* Credit and drain work as for consumers: a message per credit; a drain uses what is available and
  gives the rest of the credit back.

The browser's cursor is a deque of message references: the queue appends every message it enqueues
(:attr:`broker.queue.Queue.arrivals`), so ordinary consumers' per-message path is unchanged (one empty
list test per enqueue). References to messages that have left the queue are pruned when the cursor grows
past twice the queue's ready messages, so a browser without credit holds no more than the queue does.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Callable

from broker.largemessage import MAGIC as LARGE_MAGIC
from broker.links import BrokerLink
from broker.queue import Queue
from wire import assembly, raw

log = logging.getLogger("broker.server")

# A cursor is pruned of references to messages that left its queue once it holds more than twice the
# queue's ready messages plus this many (so small queues are not filtered on every arrival).
PRUNE_SLACK = 64


class Browsing:
    """The browsers of every queue: the :class:`wire.assembly.LinkOwner` of their links (credit, drain,
    outcomes) and the cursors :meth:`dispatch` sends from (see the module docstring)."""

    def __init__(self, clock: Callable[[], int], whole: Callable[[bytes], bytes | None] = lambda b: b):
        self.clock = clock
        # bytes -> the whole message: a large message reference is read from its file (browsers get a copy
        # whole, not streamed: broker.largestream streams to consumers only); None when it cannot be read
        self.whole = whole
        self.cursors: dict[BrokerLink, deque] = {}  # browser link -> messages to show, next first

    def attach(self, engine, link, q: Queue, *, name: str, presettled: bool) -> BrokerLink:
        """Make ``link`` a browser of ``q``: the ready messages now, then every later arrival."""
        bl = BrokerLink(link, engine, self, q, False, name)
        bl.mode = BrokerLink.BROWSE
        bl.presettled = presettled
        cursor = deque(q.ready())
        q.arrivals.append(cursor)
        self.cursors[bl] = cursor
        engine.app.links[link] = bl
        engine.own_link(link, bl)
        return bl

    def unbind(self, bl: BrokerLink) -> None:
        """The browser's link goes: forget its cursor."""
        if bl.closed:
            return
        bl.closed = True
        cursor = self.cursors.pop(bl, None)
        if cursor is not None:
            try:
                bl.queue.arrivals.remove(cursor)
            except ValueError:
                pass
        bl.unsettled.clear()

    def dispatch(self) -> None:
        """Show each browser with credit what its cursor has; answer drains."""
        now = self.clock()
        send = raw.send_unique_tagged
        for bl, cursor in self.cursors.items():
            q = bl.queue
            link = bl.ptr
            ready = q.ready_count
            if len(cursor) > 2 * ready + PRUNE_SLACK:
                kept = [m for m in cursor if q.is_ready(m)]
                cursor.clear()
                cursor.extend(kept)
            credit = raw.link_credit(link)
            sent = False
            while credit > 0 and cursor:
                msg = cursor.popleft()
                if not q.is_ready(msg) or (msg.expires_at is not None and now >= msg.expires_at):
                    continue
                out = msg.outgoing()
                if out[-8:] == LARGE_MAGIC:
                    out = self.whole(out)
                    if out is None:
                        continue
                d = send(link, bl.seq, out, len(bl.unsettled))
                bl.seq += 1
                if bl.presettled:
                    raw.delivery_settle(d)
                else:
                    bl.unsettled[d] = None
                credit -= 1
                sent = True
            if credit > 0 and raw.link_get_drain(link):
                raw.link_drained(link)
                sent = True
            if sent:
                bl.engine.wake()

    # -- LinkOwner: a browser's link only sends ------------------------------------------------------
    def on_message(self, engine, bl: BrokerLink, d, payload) -> None:
        """Not reached: a browser's link is outgoing."""

    def on_partial(self, engine, bl: BrokerLink, d, held: int) -> int:
        """Not reached: a browser's link is outgoing."""
        return assembly.KEEP

    def on_oversized(self, engine, bl: BrokerLink, d, limit: int) -> None:
        """Not reached: a browser's link is outgoing."""

    def on_link_flow(self, engine, bl: BrokerLink) -> None:
        """New credit or a drain: :meth:`dispatch` (at the end of the batch) uses it."""

    def on_delivery_update(self, engine, bl: BrokerLink, d) -> None:
        """The browser's outcome settles the transfer and changes nothing of the message."""
        if raw.delivery_remote_state(d) in raw.TERMINAL_STATES or raw.delivery_settled(d):
            bl.unsettled.pop(d, None)
            raw.delivery_settle(d)
