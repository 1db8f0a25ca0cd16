"""The broker's timers: expiry (Artemis' expiry-address / ttl) and the end of redelivery delays. A mixin of
:class:`broker.server.Broker`: :meth:`Timers.expiry_loop` sleeps until the earliest ``next_expiry()`` or
``next_redelivery()`` of any queue (re-armed after every batch of events) and then acts; the clock is the
broker's (injectable, milliseconds since the epoch)."""

from __future__ import annotations

import trio


class Timers:
    """Mixin: time-driven work of a Broker."""

    def next_expiry(self) -> int | None:
        """The earliest expires_at of a ready message in any queue, or None."""
        times = [t for t in (q.next_expiry() for q in self.queues.values()) if t is not None]
        return min(times) if times else None

    def next_timer(self) -> int | None:
        """The earliest time the timer loop has work: an expiry or the end of a redelivery delay."""
        times = [t for q in self.queues.values() for t in (q.next_expiry(), q.next_redelivery())
                 if t is not None]
        return min(times) if times else None

    def expire_due(self, now: int | None = None) -> int:
        """Expire (move or drop) every ready message whose time has come; returns how many. Runs the
        batch-end work (dispatch to the expiry queues, journal kick) when anything expired."""
        now = self.clock() if now is None else now
        n = 0
        due = False
        for q in list(self.queues.values()):
            t = q.next_expiry()
            if t is not None and t <= now:
                n += q.expire(now)
            t = q.next_redelivery()
            if t is not None and t <= now and q.end_delays(now):
                self._dirty.add(q)  # a redelivery delay ended: hand the message out
                due = True
        if n or due:
            self.on_batch_end()
        return n

    async def expiry_loop(self) -> None:
        """Sleep until the earliest expiry (re-armed by :meth:`_arm_expiry` after each batch), then
        expire what is due."""
        while True:
            nxt = self.next_timer()
            self._expiry_armed = nxt
            if nxt is None:
                await self._expiry_wakeup.wait()
            else:
                with trio.move_on_after(max(0.0, (nxt - self.clock()) / 1000.0)):
                    await self._expiry_wakeup.wait()
            self._expiry_wakeup = trio.Event()
            self.expire_due()

    def _arm_expiry(self) -> None:
        """Wake the expiry loop when a message now expires before the time it sleeps until."""
        nxt = self.next_timer()
        if nxt is not None and (self._expiry_armed is None or nxt < self._expiry_armed):
            self._expiry_armed = nxt
            self._expiry_wakeup.set()
