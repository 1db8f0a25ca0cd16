"""The Trio side of federation: one dial loop per ``<upstream>`` (the network connectors' loop,
:func:`broker.netruntime.keep_up`) with Artemis' retry settings.

Artemis reconnects a federation stream every ``retry-interval`` ms (500), multiplied by
``retry-interval-multiplier`` (1) after each failure up to ``max-retry-interval`` (2000), and gives up after
``reconnect-attempts`` failures in a row (-1: never). Those are the schedule's settings here; a connection
counts as made once the upstream's OPEN came back. ``static-connectors`` are tried in turn.
"""

from __future__ import annotations

import trio

from broker.federation import Upstream
from broker.netconfig import NetworkTarget
from broker.netruntime import ConnectorControl, keep_up
from wire.reconnect import ReconnectSchedule


class StreamControl(ConnectorControl):
    """The dial loop's view of one federation upstream (its targets, schedule and engines)."""

    def __init__(self, upstream: Upstream, targets: list[NetworkTarget]):
        broker = upstream.part.broker
        super().__init__(broker.network, None, targets, ",".join(f"{t.host}:{t.port}" for t in targets))
        self.upstream = upstream
        upstream.control = self

    def new_schedule(self) -> ReconnectSchedule:
        s = self.upstream.stream
        attempts = s.reconnect_attempts
        return ReconnectSchedule(initial_ms=s.retry_interval_ms, max_ms=max(s.retry_interval_ms, s.max_retry_interval_ms),
                                 exponential=s.retry_interval_multiplier > 1,
                                 multiplier=max(1.0, s.retry_interval_multiplier),
                                 max_attempts=attempts if attempts > 0 else 0, min_connect_time_ms=0)

    def make_engine(self, remote: str):
        up = self.upstream
        broker = up.part.broker
        s = up.stream
        settings = broker.connection_settings(
            name=f"federation:{up.name}", sasl_username=s.user or None, sasl_password=s.password,
            sasl_client_mechanisms="SCRAM-SHA-512 SCRAM-SHA-256 PLAIN" if s.user else None,
            properties=broker.network.open_properties())
        engine = broker.new_engine(settings, server=False, remote_host=remote)

        def opened(e):
            self.opened(e)
            up.opened(e)

        engine.app.on_open = opened
        self.remote = remote
        return engine

    def describe(self) -> list[dict]:
        return [self.upstream.describe()]


def stream_targets(cfg, stream) -> list[NetworkTarget]:
    out = []
    for ref in stream.static_connectors:
        c = cfg.connectors[ref]
        out.append(NetworkTarget("tcp", c.host, c.port, c.tls))
    return out


async def run_federation(broker, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Every upstream of every federation, each in its dial loop, until cancelled."""
    async with trio.open_nursery() as nursery:
        for up in broker.federation.upstreams:
            ctl = StreamControl(up, stream_targets(broker.cfg, up.stream))
            nursery.start_soon(keep_up, ctl, f"federation {up.name}")
        task_status.started()
