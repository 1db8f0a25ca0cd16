"""The Trio side of federation: one dial loop per ``<upstream>`` (the network connectors' loop,
:func:`broker.netruntime.keep_up`) with Artemis' retry settings.

Artemis reconnects a federation stream every ``retry-interval`` ms (500), multiplied by
``retry-interval-multiplier`` (1) after each failure up to ``max-retry-interval`` (2000), and gives up after
``reconnect-attempts`` failures in a row (-1: never). Those are the schedule's settings here; a connection
counts as made once the upstream's OPEN came back. ``static-connectors`` are tried in turn.
"""

from __future__ import annotations

import trio

import logging
import urllib.parse

import proton

from broker.fedcommand import command_body
from broker.fedcalls import StreamChecks, learned_targets
from broker.federation import CONTROL_ADDRESS, Upstream
from broker.netconfig import NetworkTarget
from broker.netruntime import ConnectorControl, keep_up
from wire import raw
from wire.discovery import DiscoveryAgent, run_multicast_discovery
from wire.reconnect import ReconnectSchedule

log = logging.getLogger("broker.federation")


class StreamControl(ConnectorControl):
    """The dial loop's view of one federation upstream (its targets, schedule and engines); with
    ``share-connection``, also the downstream to the same broker whose command rides on its connection."""

    def __init__(self, upstream: Upstream, targets: list[NetworkTarget]):
        broker = upstream.part.broker
        super().__init__(broker.network, None, targets, ",".join(f"{t.host}:{t.port}" for t in targets))
        self.upstream = upstream
        self.learned: set[tuple[str, int]] = set()   # targets added from failover-server-list (ha)
        self.shared: DownstreamCommand | None = None  # a downstream sharing this connection
        upstream.control = self
        self.checks = StreamChecks(upstream.name, upstream.stream, calls=self._calls, limit_ms=self._limit_ms)

    def new_schedule(self) -> ReconnectSchedule:
        return _schedule(self.upstream.stream)

    def share_with(self, command: DownstreamCommand) -> None:
        self.shared = command

    def make_engine(self, remote: str):
        up = self.upstream
        broker = up.part.broker
        s = up.stream
        settings = broker.connection_settings(
            name=f"federation:{up.name}", sasl_username=s.user or None, sasl_password=s.password,
            sasl_client_mechanisms="SCRAM-SHA-512 SCRAM-SHA-256 PLAIN" if s.user else None,
            properties=broker.network.open_properties(), **_ttl(s))
        engine = broker.new_engine(settings, server=False, remote_host=remote)

        def opened(e):
            self.opened(e)
            up.opened(e)
            if up.stream.ha:
                self._learn(e)
            if self.shared is not None and not e.closing:
                self.shared.send(e, self)

        engine.app.on_open = opened
        self.remote = remote
        self.dialled = engine
        return engine

    def _learn(self, engine) -> None:
        """ha: the upstream's failover-server-list joins the targets (after the configured ones)."""
        if self.target is None:
            return
        props = self.network.remote_properties(engine)
        for t in learned_targets(props, self.target, self.network.local_urls):
            if not any((x.host, x.port) == (t.host, t.port) for x in self.targets):
                self.targets.append(t)
                self.learned.add((t.host, t.port))
                log.info("federation %s: ha: %s:%d can take over from %s", self.upstream.name, t.host, t.port,
                         self.remote)
        self.label = ",".join(f"{t.host}:{t.port}" for t in self.targets)

    def _limit_ms(self) -> int:
        s = self.upstream.stream
        on_failover = self.target is not None and (self.target.host, self.target.port) in self.learned
        return s.call_failover_timeout_ms if on_failover else s.call_timeout_ms

    def _calls(self) -> list[str]:
        return self.shared.calls() if self.shared is not None else []

    def describe(self) -> list[dict]:
        rows = [self.upstream.describe()]
        if self.shared is not None:
            rows.append(self.shared.describe(self, shared_with=self.upstream.stream.name))
        return rows


class _CommandLink:
    """Wire's owner of the downstream's control sender: records the remote broker's answer."""

    incoming = False
    max_message_size = 0

    def __init__(self, command: DownstreamCommand, control):
        self.owner = self
        self.command = command
        self.control = control

    def on_delivery_update(self, engine, link, d) -> None:
        state = raw.delivery_remote_state(d)
        if state == raw.ACCEPTED:
            self.command.commanded = "accepted"
        elif state == raw.REJECTED:
            name, description = raw.remote_condition(d)
            self.command.commanded = "refused"
            self.control.note_error(f"{name}: {description}")
            log.warning("federation %s: the remote broker refused the downstream's command: %s %s",
                        self.command.label, name, description)
        if raw.delivery_settled(d) or state:
            raw.delivery_settle(d)

    def on_message(self, engine, link, d, msg) -> None:
        pass

    def on_partial(self, engine, link, d, held: int) -> int:
        return 0

    def on_link_flow(self, engine, link) -> None:
        pass

    def on_oversized(self, engine, link, d, limit: int) -> None:
        pass


class DownstreamCommand:
    """What a ``<downstream>`` says on each connection to the remote broker: the command that makes it
    create the upstream back to this broker (``upstream-connector-ref``). Sent on the downstream's own
    connection (:class:`DownstreamControl`) or on an upstream's that it shares (``share-connection``)."""

    def __init__(self, broker, federation, stream, address_policies: list):
        self.broker = broker
        self.federation = federation
        self.stream = stream
        self.address_policies = address_policies
        self.commanded = ""
        self.label = f"{federation.name}/{stream.name}"

    def send(self, engine, control) -> None:
        back = self.broker.cfg.connectors[self.stream.upstream_connector_ref]
        body = command_body(self.federation, self.stream, self.address_policies, back.host, back.port)
        session = engine.connection.session()
        session.open()
        snd = session.sender(f"federation.{self.federation.name}.{self.stream.name}.command")
        snd.target.address = CONTROL_ADDRESS
        snd.open()
        engine.own_link(raw.pointer(snd), _CommandLink(self, control))
        raw.send_message(raw.pointer(snd), b"cmd", proton.Message(body=body).encode())
        self.commanded = "sent"
        engine.wake()

    def calls(self) -> list[str]:
        """The command, while the remote broker has not settled it (a call-timeout call)."""
        return ["the downstream's command"] if self.commanded == "sent" else []

    def describe(self, ctl, *, shared_with: str = "") -> dict:
        return {"federation": self.federation.name, "stream": self.stream.name, "kind": "downstream",
                "state": ctl.status, "peer": "", "reconnectAttempts": ctl.attempts,
                "remote": ctl.remote or ctl.label, "command": self.commanded, "lastError": ctl.last_error,
                "addresses": [], "copied": 0, "sharedWith": shared_with}


class DownstreamControl(ConnectorControl):
    """A ``<downstream>`` on a connection of its own: dials the remote broker and, on each connection,
    sends its :class:`DownstreamCommand`."""

    def __init__(self, broker, federation, stream, address_policies: list, targets: list[NetworkTarget]):
        super().__init__(broker.network, None, targets, ",".join(f"{t.host}:{t.port}" for t in targets))
        self.federation = federation
        self.stream = stream
        self.command = DownstreamCommand(broker, federation, stream, address_policies)
        self.checks = StreamChecks(self.command.label, stream, calls=self.command.calls)

    @property
    def commanded(self) -> str:
        return self.command.commanded

    def new_schedule(self) -> ReconnectSchedule:
        return _schedule(self.stream)

    def make_engine(self, remote: str):
        broker = self.network.broker
        s = self.stream
        settings = broker.connection_settings(
            name=f"federation:{self.federation.name}/{s.name}", sasl_username=s.user or None,
            sasl_password=s.password, sasl_client_mechanisms="SCRAM-SHA-512 SCRAM-SHA-256 PLAIN" if s.user else None,
            properties=broker.network.open_properties(), **_ttl(s))
        engine = broker.new_engine(settings, server=False, remote_host=remote)
        engine.app.on_open = self._send_command
        self.remote = remote
        self.dialled = engine
        return engine

    def _send_command(self, engine) -> None:
        self.opened(engine)
        self.command.send(engine, self)

    def describe(self) -> list[dict]:
        return [self.command.describe(self)]


class _StreamSchedule(ReconnectSchedule):
    """Artemis' retry settings with its two attempt limits: ``initial-connect-attempts`` failures in a row
    until the stream first connected, ``reconnect-attempts`` after (-1: no limit for either)."""

    __slots__ = ("initial_attempts", "reconnect_attempts", "ever_connected")

    def __init__(self, s):
        super().__init__(initial_ms=s.retry_interval_ms, max_ms=max(s.retry_interval_ms, s.max_retry_interval_ms),
                         exponential=s.retry_interval_multiplier > 1, multiplier=max(1.0, s.retry_interval_multiplier),
                         max_attempts=0, min_connect_time_ms=0)
        self.initial_attempts = s.initial_connect_attempts
        self.reconnect_attempts = s.reconnect_attempts
        self.ever_connected = False

    def connected(self, now_ms: float) -> None:
        self.ever_connected = True
        super().connected(now_ms)

    def failed(self, now_ms: float) -> int | None:
        delay = super().failed(now_ms)
        limit = self.reconnect_attempts if self.ever_connected else self.initial_attempts
        return None if 0 < limit <= self.attempts else delay


def _schedule(s) -> ReconnectSchedule:
    return _StreamSchedule(s)


def _ttl(s) -> dict:
    """connection-ttl: the stream's connection is dropped (and redialled) when nothing came from the peer
    for that long -- the AMQP idle time-out (AMQP 1.0 §2.4.5), which also makes the peer send empty frames
    often enough. Absent (or -1): the engine's default."""
    ttl = getattr(s, "connection_ttl_ms", -1)
    return {"idle_timeout_seconds": ttl / 1000.0} if ttl and ttl > 0 else {}


def stream_targets(cfg, stream) -> list[NetworkTarget]:
    """The targets of a stream's static-connectors; empty for a discovery-group-ref (filled as found)."""
    out = []
    for ref in stream.static_connectors:
        c = cfg.connectors[ref]
        out.append(NetworkTarget("tcp", c.host, c.port, c.tls))
    return out


def group_name(address: str, port: int) -> str:
    """The discovery group name broadcast and discovery groups share: their UDP address and port (Artemis'
    groups are the address and port; our datagrams carry a group name, wire/discovery.py)."""
    return f"artemis-{address}-{port}"


async def broadcast(group, connectors: dict) -> None:
    """A ``<broadcast-group>``: announce each of its connectors on its UDP group every broadcast-period."""
    async with trio.open_nursery() as nursery:
        for ref in group.connector_refs:
            c = connectors[ref]
            if c.tls is not None:
                log.warning("broadcast-group %s: connector %s uses TLS; discovery dials plain AMQP only, so it is "
                            "not announced", group.name, ref)
                continue
            agent = DiscoveryAgent(group_name(group.group_address, group.group_port), f"tcp://{c.host}:{c.port}",
                                   keepalive_ms=group.broadcast_period_ms)
            nursery.start_soon(lambda a=agent: run_multicast_discovery(
                a, group.group_address, group.group_port, on_found=lambda url: None, on_lost=lambda url: None,
                interface=group.local_bind_address or "0.0.0.0"))


async def discover(group, controls: list) -> None:
    """A ``<discovery-group>``: the connectors heard on its UDP group become the targets of the streams that
    name it (``discovery-group-ref``), until they go silent for refresh-timeout."""
    keepalive = min(1000, max(1, group.refresh_timeout_ms // 2))
    agent = DiscoveryAgent(group_name(group.group_address, group.group_port), None, keepalive_ms=keepalive,
                           expire_after_ms=max(group.refresh_timeout_ms, keepalive + 1))

    def found(url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        if not parts.hostname or not parts.port:
            return
        for ctl in controls:
            if not any((t.host, t.port) == (parts.hostname, parts.port) for t in ctl.targets):
                ctl.targets.append(NetworkTarget("tcp", parts.hostname, parts.port, None))
                ctl.label = ",".join(f"{t.host}:{t.port}" for t in ctl.targets)
                ctl.changed.set()

    def lost(url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        for ctl in controls:
            ctl.targets[:] = [t for t in ctl.targets if (t.host, t.port) != (parts.hostname, parts.port)]

    await run_multicast_discovery(agent, group.group_address, group.group_port, on_found=found, on_lost=lost,
                                  interface=group.local_bind_address or "0.0.0.0")


async def run_federation(broker, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Every upstream and downstream of every federation, each in its dial loop, and the upstreams that
    downstreams' commands create later, until cancelled."""
    part = broker.federation
    async with trio.open_nursery() as nursery:
        def spawn(up: Upstream) -> None:
            ctl = StreamControl(up, up.targets if up.targets is not None else stream_targets(broker.cfg, up.stream))
            part.controls.append(ctl)
            nursery.start_soon(keep_up, ctl, f"federation {up.name}")

        part.spawn = spawn
        for up in list(part.upstreams):
            spawn(up)
        for fed, stream, policies in part.downstreams:
            sharing = shared_upstream(part.controls, fed, stream)
            if sharing is not None:
                sharing.share_with(DownstreamCommand(broker, fed, stream, policies))
                log.info("federation %s: downstream %s shares upstream %s's connection", fed.name, stream.name,
                         sharing.upstream.stream.name)
                continue
            ctl = DownstreamControl(broker, fed, stream, policies, stream_targets(broker.cfg, stream))
            part.controls.append(ctl)
            nursery.start_soon(keep_up, ctl, f"federation {fed.name} downstream {stream.name}")
        cfg = broker.cfg
        for group in (getattr(cfg, "broadcast_groups", None) or {}).values():
            nursery.start_soon(broadcast, group, cfg.connectors)
        for name, group in (getattr(cfg, "discovery_groups", None) or {}).items():
            users = [ctl for ctl in part.controls if getattr(_stream_of(ctl), "discovery_group", None) == name]
            if users:
                nursery.start_soon(discover, group, users)
        task_status.started()
        await trio.sleep_forever()  # the upstreams a downstream's command makes later start in this nursery


def shared_upstream(controls: list, fed, down) -> StreamControl | None:
    """The upstream whose connection a downstream shares: Artemis shares one connection between an
    upstream and a downstream of the same federation to the same broker when both set share-connection
    (broker/fedconfig.py checks that they name the same connectors and log in alike)."""
    if not down.share_connection:
        return None
    for ctl in controls:
        if not isinstance(ctl, StreamControl) or ctl.shared is not None or ctl.upstream.commanded_by:
            continue
        up = ctl.upstream.stream
        if (ctl.upstream.federation is fed and up.share_connection and up.static_connectors
                and set(up.static_connectors) == set(down.static_connectors)):
            return ctl
    return None


def _stream_of(ctl):
    return ctl.upstream.stream if isinstance(ctl, StreamControl) else getattr(ctl, "stream", None)
