"""The Trio runtime of a broker: the tasks that give the sans-IO core (:mod:`broker.server`) its time and
its I/O.

* the **timer task** sleeps until :meth:`broker.server.Broker.next_deadline` (woken earlier when the core
  reports an earlier one, :meth:`BrokerRuntime.deadline_changed`) and calls ``tick(now)``;
* the **group committer** (:class:`broker.journal_io.GroupCommitter`) syncs the journal in a worker thread
  and reports each sync to the core (``durable_up_to``), which settles the durable deliveries waiting for it;
* the **pager** (:class:`broker.paging.Pager`) writes and reads page files in a worker thread;
* the **disk task** reads the file systems' usage every ``disk-scan-period`` ms (Artemis' disk monitor);
* the **bindings task** rewrites the bindings file (in a thread) whenever the queue table changed.

:meth:`BrokerRuntime.run` starts them all in a nursery (the daemon's); each can also be started alone
(tests start only what they need).
"""

from __future__ import annotations

import logging

import trio

from broker.addressing import write_bindings
from broker.server import Broker

log = logging.getLogger("broker.runtime")


class BrokerRuntime:
    """Drives one :class:`Broker` from Trio (see the module docstring); the broker's ``runtime`` hooks."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self._timer_wakeup = trio.Event()
        self._bindings_wakeup = trio.Event()
        broker.runtime = self

    # -- the core's hooks (called from the Trio thread, never block) ----------------------------------
    def deadline_changed(self) -> None:
        self._timer_wakeup.set()

    def bindings_changed(self) -> None:
        self._bindings_wakeup.set()

    # -- tasks ----------------------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Every task of the broker's runtime; runs until cancelled."""
        storage = self.broker.storage
        async with trio.open_nursery() as nursery:
            if storage.committer is not None:
                await nursery.start(storage.committer.run)
            if storage.pager is not None:
                await nursery.start(storage.pager.run)
            nursery.start_soon(self.disk_loop)
            nursery.start_soon(self.timer_loop)
            nursery.start_soon(self.bindings_loop)
            task_status.started()

    async def timer_loop(self) -> None:
        """Sleep until the core's next deadline (or until it reports an earlier one), then tick."""
        broker = self.broker
        while True:
            nxt = broker.next_deadline()
            if nxt is None:
                await self._timer_wakeup.wait()
            else:
                with trio.move_on_after(max(0.0, (nxt - broker.clock()) / 1000.0)):
                    await self._timer_wakeup.wait()
            self._timer_wakeup = trio.Event()
            broker.tick(broker.clock())

    async def disk_loop(self) -> None:
        """Read the file systems' usage every disk-scan-period ms (nothing when no limit is set)."""
        storage = self.broker.storage
        period = storage.disk_scan_seconds
        if period is None:
            return
        while True:
            await trio.sleep(period)
            storage.check_disk()

    async def bindings_loop(self) -> None:
        """Write the bindings file (in a thread) whenever the queue table changed."""
        addressing = self.broker.addressing
        if addressing.bindings_dirty:
            self._bindings_wakeup.set()
        while True:
            await self._bindings_wakeup.wait()
            self._bindings_wakeup = trio.Event()
            snapshot = addressing.take_bindings()
            if snapshot is None:
                continue
            path = addressing.bindings_path()
            try:
                await trio.to_thread.run_sync(write_bindings, path, snapshot)
            except OSError as exc:  # the broker keeps running; a restart may rebind by name only
                log.error("%s: cannot write bindings: %s", path, exc)
