"""The Trio runtime of a broker: the tasks that give the sans-IO core (:mod:`broker.server`) its time and
its I/O.

* the **timer task** sleeps until :meth:`broker.server.Broker.next_deadline` (woken earlier when the core
  reports an earlier one, :meth:`BrokerRuntime.deadline_changed`) and calls ``tick(now)``;
* the **group committer** (:class:`broker.journal_io.GroupCommitter`) syncs the journal in a worker thread
  and reports each sync to the core (``durable_up_to``), which settles the durable deliveries waiting for it;
* the **pager** (:class:`broker.paging.Pager`) writes and reads page files in a worker thread;
* the **disk task** reads the file systems' usage every ``disk-scan-period`` ms (Artemis' disk monitor);
* the **bindings task** rewrites the bindings file (in a thread) whenever the queue table changed;
* a **bridge task** (:class:`BridgeTask`) per broker connection dials, retries and fails over, and closes
  the connection on stop (its state and links are :class:`broker.connections.BridgeControl`'s).

:meth:`BrokerRuntime.run` starts them all in a nursery (the daemon's); each can also be started alone
(tests start only what they need).
"""

from __future__ import annotations

import logging

import trio

from broker.addressing import write_bindings
from broker.connections import CONNECTING, FAILED, STOPPED, BridgeControl, failover_targets
from broker.server import Broker
from wire.driver import Backoff, run_connector

log = logging.getLogger("broker.runtime")

# How long a stopped broker connection waits for the peer's close frame before the socket is dropped.
STOP_GRACE_SECONDS = 2.0
_POLL_SECONDS = 0.02
# run_connector is used for one connection at a time: the retry loop (interval, failover, attempt
# count) is BridgeTask._connect's.
ONE_ATTEMPT = Backoff(initial=0.0, multiplier=1.0, max_delay=0.0, max_attempts=1)


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


class BridgeTask:
    """The Trio task of one broker connection (:class:`BridgeControl`): waits for start, keeps the
    connection up until stop."""

    def __init__(self, ctl: BridgeControl):
        self.ctl = ctl
        self._changed = trio.Event()
        ctl.on_change = self._poke

    def _poke(self) -> None:
        self._changed.set()

    async def _wait_change(self) -> None:
        await self._changed.wait()
        self._changed = trio.Event()

    async def run(self) -> None:
        """Forever (the broker's nursery ends it)."""
        ctl = self.ctl
        ctl.report_unimplemented()
        while True:
            while not ctl.wanted:
                await self._wait_change()
            ctl.status = CONNECTING
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._connect, nursery.cancel_scope)
                nursery.start_soon(self._watch_stop, nursery.cancel_scope)
            ctl.engine = None
            if ctl.status != FAILED:
                ctl.status = STOPPED

    async def _connect(self, scope: trio.CancelScope) -> None:
        """Connect, and reconnect every retry-interval. A failed attempt moves on to the next failover
        URI (``uri="tcp://a:1#tcp://b:2"``); a connection that got as far as the peer's open resets the
        attempt count, as Artemis does; more than reconnect-attempts failures in a row give up."""
        ctl = self.ctl
        conn = ctl.conn
        targets = failover_targets(conn)
        failures = 0
        i = 0
        while True:
            host, port, tls = targets[i % len(targets)]
            ctl.opened = False
            await run_connector(host, port, ctl.make_engine, ONE_ATTEMPT, on_state=ctl.on_state, tls=tls)
            if ctl.opened:
                failures = 0
            else:
                failures += 1
                i += 1
            if 0 <= conn.reconnect_attempts < failures:
                break
            ctl.status = CONNECTING
            await trio.sleep(max(conn.retry_interval_ms, 1) / 1000.0)
        log.warning("broker connection %s (%s) gave up after %d attempts", conn.name, conn.uri, failures)
        ctl.status = FAILED
        ctl.wanted = False
        scope.cancel()

    async def _watch_stop(self, scope: trio.CancelScope) -> None:
        ctl = self.ctl
        while ctl.wanted:
            await self._wait_change()
        engine = ctl.engine
        if engine is not None and not engine.finished:
            engine.close()
            engine.wake()
            with trio.move_on_after(STOP_GRACE_SECONDS):
                while not engine.finished and engine.app in ctl.broker.connections:
                    await trio.sleep(_POLL_SECONDS)
        log.info("broker connection %s stopped", ctl.conn.name)
        scope.cancel()
