"""The broker's timers: expiry (Artemis' expiry-address / ttl) and the end of redelivery delays, sans-IO.

:class:`Timers` is a part of :class:`broker.server.Broker`: it says when there is timed work
(:meth:`Timers.next_timer`, the earliest ``next_expiry()`` or ``next_redelivery()`` of any queue) and does
what is due at a given time (:meth:`Timers.run_due`). It never sleeps: the broker's ``tick(now)`` calls it,
and the Trio runtime (:mod:`broker.runtime`) or a test decides when ``now`` is. Times are the broker's
clock (milliseconds since the epoch).
"""

from __future__ import annotations

from typing import Callable

from broker.addressing import AddressModel
from broker.queue import Queue


class Timers:
    """Time-driven work of a broker's queues."""

    def __init__(self, addressing: AddressModel, queue_changed: Callable[[Queue], None]):
        self.addressing = addressing
        self.queue_changed = queue_changed  # a queue has messages to hand out again

    def _timed_queues(self) -> list[Queue]:
        """The queues with a ready message that has an expiry or a redelivery delay; a queue that has
        none any more leaves ``addressing.timed`` here (it rejoins with its next such message)."""
        timed = self.addressing.timed
        if not timed:
            return []
        idle = [q for q in timed if not q.has_timers]
        timed.difference_update(idle)
        return list(timed)

    def next_expiry(self) -> int | None:
        """The earliest expires_at of a ready message in any queue, or None."""
        times = [t for t in (q.next_expiry() for q in self._timed_queues()) if t is not None]
        return min(times) if times else None

    def next_timer(self) -> int | None:
        """The earliest time there is work: an expiry or the end of a redelivery delay. It looks at the
        timed queues only (``addressing.timed``): every batch asks, and a broker may hold many queues."""
        times = [t for q in self._timed_queues() for t in (q.next_expiry(), q.next_redelivery())
                 if t is not None]
        return min(times) if times else None

    def run_due(self, now: int) -> tuple[int, bool]:
        """Expire (move or drop) every ready message whose time has come and end the redelivery delays
        that are over: ``(messages expired, whether any delay ended)``."""
        n = 0
        ended = False
        for q in self._timed_queues():
            t = q.next_expiry()
            if t is not None and t <= now:
                n += q.expire(now)
            t = q.next_redelivery()
            if t is not None and t <= now and q.end_delays(now):
                self.queue_changed(q)  # a redelivery delay ended: hand the message out
                ended = True
        return n, ended
