"""wire.driver with wire.timers: a connection's deadlines (heartbeats, idle time-out) are served by the one
shared timer; its writer and reader never sleep in a cancel scope with a deadline of their own.

Before, each writer entered ``trio.move_on_at(deadline)`` on every wake-up, and each heartbeat went
through Trio's cancellation machinery; at 10,000 connections the router could not keep up (README, "Many
connections and links"). These tests count the deadline-bearing cancel scopes the connection tasks enter.
"""

from __future__ import annotations

import math

import pytest
import trio
from proton import Endpoint

from router.core import Router
from tests.unit.enginepair import ConsumerHandler, Peer
from tests.unit.wire.fixtures import tcp_peer
from wire.connection import ConnectionSettings, EngineConnection
from wire.driver import run_connection, serve_listener
from wire.timers import current_timers


@pytest.fixture
def connection_deadline_scopes(monkeypatch) -> list[str]:
    """The names of connection tasks (run_connection's reader and writer) each time one enters a cancel
    scope that has a deadline."""
    entered: list[str] = []
    original = trio.CancelScope.__enter__

    def counting(self):
        try:
            timed = self.deadline != math.inf
        except RuntimeError:  # an unentered move_on_after: its deadline is relative
            timed = self.relative_deadline != math.inf
        if timed:
            name = trio.lowlevel.current_task().name
            if "run_connection" in name:
                entered.append(name)
        return original(self)

    monkeypatch.setattr(trio.CancelScope, "__enter__", counting)
    return entered


async def _router(nursery, **settings_kw):
    router = Router("RT")
    settings = router.connection_settings(**settings_kw)
    listeners = await nursery.start(
        serve_listener, "127.0.0.1", 0,
        lambda remote: router.new_engine(settings, server=True, remote_host=remote))
    return router, listeners[0].socket.getsockname()[1]


async def _client(nursery, port: int, handler, **settings_kw) -> EngineConnection:
    """An EngineConnection client on run_connection (the same driver as the router's side)."""
    engine = EngineConnection(handler, ConnectionSettings(container_id="client", **settings_kw), server=False,
                              remote_host=f"127.0.0.1:{port}")
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    nursery.start_soon(run_connection, stream, engine)
    return engine


async def _wait(predicate, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_wake_ups_on_data_enter_no_deadline_scope(autojump_clock, connection_deadline_scopes):
    async with trio.open_nursery() as nursery:
        router, port = await _router(nursery)  # Dispatch's 16 s idle time-out: every writer has a deadline
        consumer = ConsumerHandler("q", credit=1000)
        await _client(nursery, port, consumer, idle_timeout_seconds=16)
        await _wait(lambda: (a := router.addresses.get("M0q")) is not None and a.rlinks)
        prod = await tcp_peer(nursery, port, Peer(sasl=False))
        snd = prod.peer.sender("q")
        await prod.until(lambda: snd.credit > 0)
        for i in range(50):  # one message per wake-up of the router's two writers and the client's
            prod.peer.send(snd, body=i)
            await prod.flush()
            await _wait(lambda: len(consumer.messages) == i + 1)
        assert consumer.bodies == list(range(50))
        assert connection_deadline_scopes == []
        nursery.cancel_scope.cancel()


async def test_idle_connections_keep_each_other_alive_with_heartbeats(autojump_clock,
                                                                      connection_deadline_scopes):
    """Both sides ask for a 2 s idle time-out: for a minute of silence each sends an empty frame every
    second (proton: half the peer's time-out) through the shared timer, and neither closes."""
    async with trio.open_nursery() as nursery:
        router, port = await _router(nursery, idle_timeout_seconds=2)
        handler = ConsumerHandler("q")
        clients = [await _client(nursery, port, handler, idle_timeout_seconds=2) for _ in range(20)]
        await _wait(lambda: handler.opens == 20)
        timers = current_timers()
        fired0 = timers.fired
        await trio.sleep(60)
        assert handler.closes == 0
        assert len(router.connections) == 20
        assert not any(c.connection.state & Endpoint.REMOTE_CLOSED for c in clients)
        # 40 engines, a heartbeat a second each: about 2,400 deadlines, gathered into far fewer wake-ups
        assert timers.fired - fired0 >= 40 * 55
        assert connection_deadline_scopes == []
        nursery.cancel_scope.cancel()


async def test_a_silent_client_is_still_closed_at_the_idle_timeout(autojump_clock, connection_deadline_scopes):
    """The router's idle time-out (served by the shared timer) closes a client that stopped sending."""
    async with trio.open_nursery() as nursery:
        router, port = await _router(nursery, idle_timeout_seconds=3)
        tp = await tcp_peer(nursery, port)  # never ticks its transport: sends no heartbeats
        t0 = trio.current_time()
        with trio.fail_after(30):
            await tp.eof.wait()
        c = tp.peer.connection
        assert c.remote_condition is not None and c.remote_condition.name == "amqp:resource-limit-exceeded"
        assert 3 <= trio.current_time() - t0 <= 3 + 2 + 0.5  # the time-out, then at most the close grace
        await _wait(lambda: not router.connections)
        assert connection_deadline_scopes == []
        nursery.cancel_scope.cancel()
