"""The Trio side of network connectors: dialling, reconnecting with ActiveMQ's backoff, and discovery.

Each ``<networkConnector>`` gets a :class:`NetworkConnectorTask`:

* ``static:(uri,uri,...)``: one bridge per URI (ActiveMQ creates one bridge per discovered service), each
  with its own :class:`ConnectorControl` and reconnect schedule (:class:`wire.reconnect.ReconnectSchedule`:
  ``initialReconnectDelay``, ``maxReconnectDelay``, ``useExponentialBackOff``, ``backOffMultiplier``,
  ``maxReconnectAttempts``, ``minConnectTime``);
* ``masterslave:(master,slave,...)``: one bridge that goes to the next URI of the list after each failed
  attempt, so it finds whichever of the pair is up;
* ``multicast://group``: the broker announces its first acceptor on the UDP group
  (:mod:`wire.discovery`) and bridges to every broker it hears there, until that broker goes silent.

The sans-IO part -- bridges, advisories, forwarding -- is :mod:`broker.network` and :mod:`broker.netbridge`;
here only connections are made and ended. ``networkConnectorStartAsync="false"`` (the default) makes the
daemon wait, connector after connector, for each first attempt (or :data:`FIRST_ATTEMPT_WAIT_SECONDS`)
before it reports ready; ``true`` starts them all at once.
"""

from __future__ import annotations

import logging
import urllib.parse

import trio

from broker.netconfig import NetworkConnector, NetworkTarget
from broker.network import Network
from wire.discovery import DiscoveryAgent, run_multicast_discovery
from wire.driver import Backoff, run_connector
from wire.reconnect import ReconnectSchedule

log = logging.getLogger("broker.network")

STOPPED, CONNECTING, CONNECTED, FAILED = "stopped", "connecting", "connected", "failed"
#: How long a serial start (networkConnectorStartAsync false) waits for one connector's first attempt.
FIRST_ATTEMPT_WAIT_SECONDS = 10.0
#: How long a stopped connector waits for the peer's close frame before the socket is dropped.
STOP_GRACE_SECONDS = 2.0
_ONE_ATTEMPT = Backoff(initial=0.0, multiplier=1.0, max_delay=0.0, max_attempts=1)


class ConnectorControl:
    """One bridge target of a connector: what management shows and the switch it turns."""

    def __init__(self, network: Network, connector: NetworkConnector, targets: list[NetworkTarget], label: str):
        self.network = network
        self.connector = connector
        self.targets = targets
        self.label = label               # "host:port" (or the list of a masterslave pair)
        self.wanted = True
        self.status = STOPPED
        self.attempts = 0                # failures in a row
        self.connections = 0             # connections made
        self.engine = None
        self.bridge = None
        self.target: NetworkTarget | None = None   # the target dialled now (or last)
        self.dialled = None              # the engine of the attempt in progress, once made
        self.checks = None               # an object whose run(ctl, scope) watches each attempt, or None
        self.last_error = ""
        self.remote = ""
        self._opened = False
        self.opened_at = 0.0
        self.changed = trio.Event()
        self.first_attempt = trio.Event()   # set by the first connection made or attempt failed

    def new_schedule(self) -> ReconnectSchedule:
        """The reconnect schedule of one dial loop (:func:`keep_up`)."""
        return ReconnectSchedule.from_settings(self.connector.reconnect)

    @property
    def broker(self):
        return self.network.broker

    def make_engine(self, remote: str):
        engine = self.network.broker.new_engine(self.network.client_settings(self.connector), server=False,
                                                remote_host=remote)
        engine.app.on_open = lambda e: self.network.outbound_opened(e, self.connector, self)
        self.remote = remote
        return engine

    def opened(self, engine) -> None:
        self.opened_at = trio.current_time() * 1000.0
        self._opened = True
        self.first_attempt.set()
        self.engine = engine
        self.status = CONNECTED
        self.connections += 1
        self.last_error = ""

    def note_error(self, text: str) -> None:
        self.last_error = text

    def start(self) -> None:
        self.wanted = True
        if self.status == FAILED:
            self.status = STOPPED
        self.changed.set()

    def stop(self) -> None:
        self.wanted = False
        self.changed.set()

    def describe(self) -> list[dict]:
        bridge = self.bridge if self.status == CONNECTED else None
        row = {"name": self.connector.name, "remote": self.remote or self.label, "direction": "out",
               "duplex": self.connector.duplex, "state": self.status, "reconnectAttempts": self.attempts,
               "connections": self.connections, "lastError": self.last_error, "peer": "", "peerId": "",
               "demand": [], "forwarded": 0}
        if bridge is not None:
            row.update(bridge.describe())
            row["direction"] = "duplex" if self.connector.duplex else "out"
        return [row]


class NetworkConnectorTask:
    """Keeps one ``<networkConnector>``'s bridges up (see the module docstring)."""

    def __init__(self, network: Network, connector: NetworkConnector, *, interface: str = "0.0.0.0"):
        self.network = network
        self.connector = connector
        self.interface = interface
        self.controls: list[ConnectorControl] = []
        self._first = trio.Event()

    def _control(self, targets: list[NetworkTarget], label: str) -> ConnectorControl:
        ctl = ConnectorControl(self.network, self.connector, targets, label)
        ctl.first_attempt = self._first
        key = self.connector.name if not self.network.controls.get(self.connector.name) else \
            f"{self.connector.name}@{label}"
        self.network.controls[key] = ctl
        self.controls.append(ctl)
        return ctl

    async def run(self, *, serial: bool = False, task_status=trio.TASK_STATUS_IGNORED) -> None:
        c = self.connector
        async with trio.open_nursery() as nursery:
            if c.discovery == "multicast":
                await self._multicast(nursery)
                task_status.started()
                return
            if c.discovery == "masterslave":
                groups = [(list(c.targets), ",".join(f"{t.host}:{t.port}" for t in c.targets))]
            else:
                groups = [([t], f"{t.host}:{t.port}") for t in c.targets]
            for targets, label in groups:
                nursery.start_soon(self.keep_up, self._control(targets, label))
            if serial:
                with trio.move_on_after(FIRST_ATTEMPT_WAIT_SECONDS):
                    await self._first.wait()
            task_status.started()

    async def _multicast(self, nursery: trio.Nursery) -> None:
        group = self.connector.multicast
        own = self.network.local_urls[0] if self.network.local_urls else None
        agent = DiscoveryAgent(group.group, own)
        scopes: dict[str, trio.CancelScope] = {}

        def found(url: str) -> None:
            parts = urllib.parse.urlsplit(url)
            if not parts.hostname or not parts.port or url in scopes or url in self.network.local_urls:
                return
            target = NetworkTarget(parts.scheme, parts.hostname, parts.port, None)
            if parts.scheme in ("amqps", "ssl"):
                log.warning("network connector %s: %s announced TLS; multicast bridges dial plain AMQP only",
                            self.connector.name, url)
                return
            ctl = self._control([target], f"{parts.hostname}:{parts.port}")
            scope = scopes[url] = trio.CancelScope()
            nursery.start_soon(self._scoped, scope, ctl)

        def lost(url: str) -> None:
            scope = scopes.pop(url, None)
            if scope is not None:
                scope.cancel()

        await nursery.start(lambda task_status: run_multicast_discovery(
            agent, group.host, group.port, on_found=found, on_lost=lost, interface=self.interface,
            task_status=task_status))

    async def _scoped(self, scope: trio.CancelScope, ctl: ConnectorControl) -> None:
        with scope:
            await self.keep_up(ctl)
        if ctl.engine is not None and not ctl.engine.finished:
            ctl.engine.close()
            ctl.engine.wake()
        ctl.status = STOPPED
        for key, value in list(self.network.controls.items()):
            if value is ctl:
                del self.network.controls[key]

    async def keep_up(self, ctl: ConnectorControl) -> None:
        await keep_up(ctl, f"network connector {self.connector.name}")


async def keep_up(ctl: ConnectorControl, what: str) -> None:
    """Keep ``ctl``'s connection up (a network connector's bridge, a federation stream): connect, and after
    each end or failure wait its schedule's delay; give up after the attempts it allows; wait while
    stopped. ``what`` names it in logs."""
    schedule = ctl.new_schedule()
    i = 0
    while True:
        while not ctl.wanted or not ctl.targets:  # stopped, or nothing discovered to dial yet
            if ctl.status != FAILED:
                ctl.status = STOPPED if not ctl.wanted else CONNECTING
            await ctl.changed.wait()
            ctl.changed = trio.Event()
        target = ctl.targets[i % len(ctl.targets)]
        ctl.status = CONNECTING
        ctl._opened = False
        ctl.target = target
        async with trio.open_nursery() as attempt:
            attempt.start_soon(_watch_stop, ctl, attempt.cancel_scope, what)
            if ctl.checks is not None:
                attempt.start_soon(ctl.checks.run, ctl, attempt.cancel_scope)
            await run_connector(target.host, target.port, ctl.make_engine, _ONE_ATTEMPT, tls=target.tls)
            attempt.cancel_scope.cancel()
        ctl.first_attempt.set()
        ctl.engine = None
        ctl.dialled = None
        now = trio.current_time() * 1000.0
        if ctl._opened:
            schedule.connected(ctl.opened_at)
        else:
            i += 1
        if not ctl.wanted:
            continue
        delay = schedule.failed(now)
        ctl.attempts = schedule.attempts
        if delay is None:
            ctl.status = FAILED
            ctl.wanted = False
            log.warning("%s to %s gave up after %d attempts", what, ctl.label, ctl.attempts)
            continue
        ctl.status = CONNECTING
        with trio.move_on_after(delay / 1000.0):
            await ctl.changed.wait()
            ctl.changed = trio.Event()


async def _watch_stop(ctl: ConnectorControl, scope: trio.CancelScope, what: str) -> None:
    while ctl.wanted:
        await ctl.changed.wait()
        ctl.changed = trio.Event()
    engine = ctl.engine
    if engine is not None and not engine.finished:
        engine.close()
        engine.wake()
        with trio.move_on_after(STOP_GRACE_SECONDS):
            while not engine.finished and engine.app in ctl.broker.connections:
                await trio.sleep(0.02)
    log.info("%s to %s stopped", what, ctl.label)
    scope.cancel()
