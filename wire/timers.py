"""One timer for every connection's deadlines (heartbeats, idle time-out, handshake and close deadlines).

Each connection's writer used to sleep in a ``trio.move_on_at(deadline)`` of its own, entered anew on every
wake-up: every wake-up on data created a cancel scope and put its deadline into Trio's deadline heap, and
every expiry (a heartbeat due, every few seconds on every connection) went through Trio's cancellation
machinery (``Deadlines.expire`` -> ``CancelScope._cancel`` -> a ``Cancelled`` raised into the task and
caught). With thousands of connections that was most of the router's CPU while they sat idle, and at
10,000 connections it could not keep up with their heartbeats at all (README, "Many connections and links").

Here one task per Trio run owns a heap of ``[deadline, seq, entry]`` and sleeps until the earliest; a due
entry's callback wakes its connection's writer (an ``Event.set``, no cancellation). A connection asks for
a deadline with :meth:`DeadlineTimers.schedule`, which costs an attribute store when the deadline is not
earlier than the one already queued (the usual case: traffic moves proton's deadlines later), and a heap
push otherwise. The heap is lazy: an entry whose deadline moved later keeps its queued item and is
re-queued when that item comes due; items left behind by an earlier deadline or a cancel are skipped when
popped, and the heap is rebuilt when they outnumber the live ones, so its size stays bounded by the
connections that exist.

Due entries are gathered: the timer sleeps until the earliest deadline rounded up to
TIMER_RESOLUTION_SECONDS, and then fires every entry due by then, so 10,000 connections' heartbeats cost
at most a few hundred timer wake-ups a second, not one each.

Time is Trio's clock (``trio.current_time``), so unit tests drive it with ``MockClock``.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from typing import Callable

import trio

log = logging.getLogger("wire.timers")

# Deadlines due within this much of each other fire in one timer wake-up. The deadlines served are
# seconds apart (heartbeats at half the peer's idle time-out, which AMQP 1.0 §2.4.5 expresses in ms and
# peers set to seconds; handshake and close deadlines of seconds), so a wake-up up to 5 ms late changes
# nothing a peer can tell, and it bounds the timer to 200 wake-ups a second however many connections.
TIMER_RESOLUTION_SECONDS = 0.005
# An entry fires at least this long after its deadline. Proton reads the time in whole
# milliseconds (EngineConnection.tick passes int(now * 1000)); a deadline of D ms read back from a float
# a hair below D would be D - 1 ms, proton would find nothing due and hand back the same deadline, and
# the connection would spin on it.
DEADLINE_MARGIN_SECONDS = 0.0005
# The heap is rebuilt without its dead items once they are more than this many and more than the live
# ones (each rebuild is O(live), paid for by at least as many dead items).
MIN_DEAD_ITEMS_TO_COMPACT = 1024


def _noop() -> None:
    pass


class TimerEntry:
    """One connection's place in :class:`DeadlineTimers`: the deadline it wants (``math.inf`` = none) and
    the callback that runs (in the timer's task, so it must not block or raise) once it is due."""

    __slots__ = ("on_due", "deadline", "item")

    def __init__(self, on_due: Callable[[], None]):
        self.on_due = on_due
        self.deadline = math.inf
        self.item: list | None = None  # its live heap item, [deadline, seq, entry]; None = not queued


class DeadlineTimers:
    """The deadlines of many connections, served by one task (:meth:`run`).

    ``schedule(entry, deadline)`` replaces the entry's deadline; the entry's ``on_due`` runs once at
    (or up to TIMER_RESOLUTION_SECONDS after) it, and then the entry has no deadline until scheduled
    again. ``cancel(entry)`` forgets it. :func:`current_timers` gives the one of the running Trio run.
    """

    def __init__(self, resolution: float = TIMER_RESOLUTION_SECONDS):
        self.resolution = resolution
        self._heap: list[list] = []
        self._seq = itertools.count()
        self._dead = 0  # heap items that no longer stand for their entry's deadline
        self._scope: trio.CancelScope | None = None  # the timer task's sleep, while it sleeps
        self.wakeups = 0  # times the timer task woke (statistics, and for tests)
        self.fired = 0  # entries whose deadline came

    def entry(self, on_due: Callable[[], None]) -> TimerEntry:
        return TimerEntry(on_due)

    def __len__(self) -> int:
        """The number of entries waiting for a deadline (dead heap items not counted)."""
        return len(self._heap) - self._dead

    def schedule(self, entry: TimerEntry, deadline: float) -> None:
        entry.deadline = deadline
        item = entry.item
        if item is not None and item[0] <= deadline:
            return  # its queued item comes first; when it does, the entry is queued for the later time
        if deadline == math.inf:
            return
        if item is not None:
            self._dead += 1
        entry.item = item = [deadline, next(self._seq), entry]
        heapq.heappush(self._heap, item)
        scope = self._scope
        if scope is not None:
            wake_at = self._wake_time(deadline)
            if wake_at < scope.deadline:
                scope.deadline = wake_at

    def cancel(self, entry: TimerEntry) -> None:
        entry.deadline = math.inf
        entry.on_due = _noop  # its heap item may outlive it for a while: keep nothing of the connection
        if entry.item is not None:
            entry.item = None
            self._dead += 1

    def _wake_time(self, deadline: float) -> float:
        resolution = self.resolution
        return math.ceil((deadline + DEADLINE_MARGIN_SECONDS) / resolution) * resolution

    def fire_due(self, now: float) -> None:
        """Run the callback of every entry due at ``now`` (the timer task does this when it wakes)."""
        heap = self._heap
        pop, push = heapq.heappop, heapq.heappush
        due = now - DEADLINE_MARGIN_SECONDS  # see there: never at the very time of a deadline
        while heap and heap[0][0] <= due:
            item = pop(heap)
            entry = item[2]
            if entry.item is not item:
                self._dead -= 1
                continue
            entry.item = None
            if entry.deadline > due:  # moved later since it was queued
                if entry.deadline != math.inf:
                    entry.item = new = [entry.deadline, next(self._seq), entry]
                    push(heap, new)
                continue
            entry.deadline = math.inf
            self.fired += 1
            try:
                entry.on_due()
            except Exception:  # noqa: BLE001 - one connection's callback must not stop every connection's timer
                log.exception("timer callback failed")
        if self._dead > MIN_DEAD_ITEMS_TO_COMPACT and self._dead > len(heap) - self._dead:
            self._heap = [item for item in heap if item[2].item is item]
            heapq.heapify(self._heap)
            self._dead = 0

    async def run(self) -> None:
        """Serve the deadlines for ever (until cancelled)."""
        while True:
            self.fire_due(trio.current_time())
            heap = self._heap
            with trio.CancelScope(deadline=self._wake_time(heap[0][0]) if heap else math.inf) as scope:
                self._scope = scope
                try:
                    await trio.sleep_forever()
                finally:
                    self._scope = None
            self.wakeups += 1


_CURRENT: trio.lowlevel.RunVar = trio.lowlevel.RunVar("wire.timers")


def current_timers() -> DeadlineTimers:
    """The :class:`DeadlineTimers` of the running Trio run, its task started (as a system task, so that
    every caller of :func:`wire.driver.run_connection` shares it without a nursery of its own) on first
    use; it ends with the run."""
    timers = _CURRENT.get(None)
    if timers is None:
        timers = DeadlineTimers()
        trio.lowlevel.spawn_system_task(timers.run, name="wire.timers")
        _CURRENT.set(timers)
    return timers
