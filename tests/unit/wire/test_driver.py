"""wire.driver: Backoff, run_connector, serve_listener/run_connection, idle timeout (Trio, trio.testing).

Tests that must wait use ``autojump_clock`` (pytest-trio's MockClock(autojump_threshold=0) fixture):
virtual time jumps to the next deadline as soon as every task is blocked, so a 16 s idle timeout or a
minute of reconnect back-off take no real time. Loopback TCP I/O completes inside the kernel before
Trio polls, so it does not race the jumps.
"""

from __future__ import annotations

import functools
import socket

import pytest
import trio
from proton import Endpoint

from router.core import Router
from wire.connection import ConnectionSettings, EngineConnection
from wire.driver import (FEED_SLICE, READ_CHUNK, SLICE_FRAMES, Backoff, next_feed_slice, run_connection, run_connector,
                         serve_listener)
from tests.unit.enginepair import ACCEPTED, ConsumerHandler, Peer, outcome, settle
from tests.unit.wire.fixtures import tcp_peer

# -- Backoff ---------------------------------------------------------------------------------------------

BACKOFF_TABLE = [
    # (Backoff kwargs, failures, expected delay)
    ({}, 0, 1.0),
    ({}, 1, 1.0),
    ({}, 2, 2.0),
    ({}, 3, 4.0),
    ({}, 6, 32.0),
    ({}, 7, 60.0),   # 64 capped at max_delay
    ({}, 50, 60.0),
    ({"multiplier": 1.0, "initial": 5.0}, 1, 5.0),   # fixed
    ({"multiplier": 1.0, "initial": 5.0}, 10, 5.0),
    ({"multiplier": 1.0, "initial": 5.0}, 10_000, 5.0),
    ({"initial": 0.5, "multiplier": 3.0, "max_delay": 10.0}, 1, 0.5),
    ({"initial": 0.5, "multiplier": 3.0, "max_delay": 10.0}, 2, 1.5),
    ({"initial": 0.5, "multiplier": 3.0, "max_delay": 10.0}, 3, 4.5),
    ({"initial": 0.5, "multiplier": 3.0, "max_delay": 10.0}, 4, 10.0),
    ({"initial": 30.0, "max_delay": 10.0}, 1, 10.0),  # the cap applies to the first delay too
    ({"max_attempts": 3}, 1, 1.0),
    ({"max_attempts": 3}, 2, 2.0),
    ({"max_attempts": 3}, 3, None),  # three failed attempts: give up
    ({"max_attempts": 3}, 4, None),
    ({"max_attempts": 1}, 1, None),
    ({"max_attempts": 0}, 500, 60.0),  # 0 = for ever
]


@pytest.mark.parametrize("kw,failures,expected", BACKOFF_TABLE)
def test_backoff_delay(kw, failures, expected):
    assert Backoff(**kw).delay(failures) == expected


@pytest.mark.parametrize("failures", [1025, 10**6])
def test_backoff_delay_after_very_many_failures(failures):
    assert Backoff().delay(failures) == 60.0


# -- run_connector against a closed port -------------------------------------------------------------------

def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _record_attempts(monkeypatch) -> list[float]:
    attempts: list[float] = []
    real = trio.open_tcp_stream

    async def spy(*args, **kw):
        attempts.append(trio.current_time())
        return await real(*args, **kw)

    monkeypatch.setattr(trio, "open_tcp_stream", spy)
    return attempts


def _no_engine(remote):  # never called: nothing accepts
    raise AssertionError("connected to a closed port")


@pytest.mark.parametrize("backoff,expected_starts", [
    (Backoff(initial=1.0, multiplier=2.0, max_delay=3.0, max_attempts=4), [0, 1, 3, 6]),
    (Backoff(initial=2.0, multiplier=1.0, max_attempts=3), [0, 2, 4]),
    (Backoff(initial=0.5, multiplier=10.0, max_delay=60.0, max_attempts=5), [0, 0.5, 5.5, 55.5, 115.5]),
    (Backoff(max_attempts=1), [0]),
])
async def test_run_connector_retries_then_gives_up(autojump_clock, monkeypatch, backoff, expected_starts):
    attempts = _record_attempts(monkeypatch)
    states = []
    port = _closed_port()
    t0 = trio.current_time()
    with trio.fail_after(1000):
        await run_connector("127.0.0.1", port, _no_engine, backoff, on_state=states.append)
    assert [round(t - t0, 6) for t in attempts] == expected_starts
    assert states[-1] == "FAILED"
    assert "SUCCESS" not in states
    assert round(trio.current_time() - t0, 6) == expected_starts[-1]  # gives up without a last sleep


async def test_run_connector_retries_for_ever_with_capped_delay(autojump_clock, monkeypatch):
    attempts = _record_attempts(monkeypatch)
    port = _closed_port()
    with trio.move_on_after(200):
        await run_connector("127.0.0.1", port, _no_engine, Backoff(initial=1, multiplier=2, max_delay=10))
    gaps = [round(b - a, 6) for a, b in zip(attempts, attempts[1:])]
    assert gaps[:6] == [1, 2, 4, 8, 10, 10]
    assert set(gaps[4:]) == {10}


# -- real loopback TCP: a Peer client driven over a trio socket (tests/unit/wire/fixtures.py) ---------------

async def start_router(nursery, router: Router | None = None, **settings_kw):
    router = router or Router("RT")
    settings = router.connection_settings(**settings_kw)
    listeners = await nursery.start(
        serve_listener, "127.0.0.1", 0,
        lambda remote: router.new_engine(settings, server=True, remote_host=remote),
    )
    port = listeners[0].socket.getsockname()[1]
    return router, port


async def test_listener_exchanges_messages():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        cons = await tcp_peer(nursery, port)
        prod = await tcp_peer(nursery, port, Peer(sasl=False))
        rcv = cons.peer.receiver("q", credit=50)
        await cons.until(lambda: rcv.state & Endpoint.REMOTE_ACTIVE)
        snd = prod.peer.sender("q")
        await prod.until(lambda: snd.credit == 250)
        ds = [prod.peer.send(snd, body=i) for i in range(20)]
        await prod.flush()
        await cons.until(lambda: len(cons.peer.received(rcv)) == 20)
        assert cons.peer.bodies(rcv) == list(range(20))
        for g in cons.peer.received(rcv):
            settle(g, ACCEPTED)
        await cons.flush()
        await prod.until(lambda: all(d.settled for d in ds))
        assert all(outcome(d)["state"] == "accepted" for d in ds)
        assert len(router.connections) == 2
        nursery.cancel_scope.cancel()


async def test_garbage_client_closed_and_others_unaffected():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        cons = await tcp_peer(nursery, port)
        rcv = cons.peer.receiver("q", credit=10)
        await cons.until(lambda: rcv.state & Endpoint.REMOTE_ACTIVE)
        assert len(router.connections) == 1

        bad = await trio.open_tcp_stream("127.0.0.1", port)
        await bad.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)))
        got = b""
        with trio.fail_after(10):
            while True:
                try:
                    data = await bad.receive_some(65536)
                except trio.BrokenResourceError:
                    break
                if not data:
                    break  # the router closed the connection
                got += data
        await bad.aclose()
        with trio.fail_after(5):
            while len(router.connections) != 1:
                await trio.sleep(0.01)

        prod = await tcp_peer(nursery, port)
        snd = prod.peer.sender("q")
        await prod.until(lambda: snd.credit > 0)
        d = prod.peer.send(snd, body="still works")
        await prod.flush()
        await cons.until(lambda: cons.peer.bodies(rcv) == ["still works"])
        settle(cons.peer.received(rcv)[0], ACCEPTED)
        await cons.flush()
        await prod.until(lambda: d.settled)
        nursery.cancel_scope.cancel()


async def test_client_disconnect_releases_and_router_forgets_connection():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, link_capacity=10)
        cons = await tcp_peer(nursery, port)
        rcv = cons.peer.receiver("q", credit=1)
        await cons.until(lambda: rcv.state & Endpoint.REMOTE_ACTIVE)
        prod = await tcp_peer(nursery, port)
        snd = prod.peer.sender("q")
        await prod.until(lambda: snd.credit == 10)
        ds = [prod.peer.send(snd, body=i) for i in range(3)]
        await prod.flush()
        await cons.until(lambda: len(cons.peer.received(rcv)) == 1)
        await cons.stream.aclose()  # the consumer's socket goes away without a close frame
        await prod.until(lambda: all(d.settled for d in ds))
        assert [outcome(d)["state"] for d in ds] == ["modified", "released", "released"]
        with trio.fail_after(5):
            while len(router.connections) != 1:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


# -- idle timeout (virtual time) ----------------------------------------------------------------------------

async def _idle_peer(nursery, idle):
    kw = {} if idle == 16 else {"idle_timeout_seconds": idle}
    router, port = await start_router(nursery, **kw)
    tp = await tcp_peer(nursery, port)  # opens, then never sends again (no heartbeats: never ticked)
    rcv = tp.peer.receiver("q", credit=1)
    await tp.until(lambda: rcv.state & Endpoint.REMOTE_ACTIVE)
    closed_at = []
    feed = tp.peer.feed

    def spy(data):
        feed(data)
        if not closed_at and tp.peer.connection.state & Endpoint.REMOTE_CLOSED:
            closed_at.append(trio.current_time())

    tp.peer.feed = spy
    return router, tp, closed_at


@pytest.mark.parametrize("idle", [16, 3])
async def test_idle_peer_is_closed(autojump_clock, idle):
    async with trio.open_nursery() as nursery:
        router, tp, closed_at = await _idle_peer(nursery, idle)
        t0 = trio.current_time()
        with trio.fail_after(2 * idle + 30):
            await tp.eof.wait()
        c = tp.peer.connection
        assert c.state & Endpoint.REMOTE_CLOSED
        assert c.remote_condition is not None
        assert c.remote_condition.name == "amqp:resource-limit-exceeded"
        assert closed_at and idle <= closed_at[0] - t0
        # lenient bound (the exact bound is tested below): closed within twice the timeout + grace
        assert trio.current_time() - t0 <= 2 * idle + 2 + 1
        with trio.fail_after(5):
            while router.connections:
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("idle", [16, 3])
async def test_idle_close_frame_sent_at_the_timeout(autojump_clock, idle):
    async with trio.open_nursery() as nursery:
        router, tp, closed_at = await _idle_peer(nursery, idle)
        t0 = trio.current_time()
        with trio.fail_after(2 * idle + 30):
            await tp.eof.wait()
        assert closed_at[0] - t0 <= idle + 0.5
        assert trio.current_time() - t0 <= idle + 2 + 0.5  # then at most the close grace
        nursery.cancel_scope.cancel()


async def test_peer_sending_heartbeats_stays_open(autojump_clock):
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, idle_timeout_seconds=4)
        tp = await tcp_peer(nursery, port)
        for _ in range(40):  # 20 virtual seconds; the client's engine sends heartbeats as proton decides
            await trio.sleep(0.5)
            tp.peer.transport.tick(trio.current_time())
            await tp.flush()
        assert not tp.eof.is_set()
        assert not tp.peer.connection.state & Endpoint.REMOTE_CLOSED
        assert len(router.connections) == 1
        nursery.cancel_scope.cancel()


# -- run_connector to a live listener, with an EngineConnection client ---------------------------------------

async def test_run_connector_connects_exchanges_and_reconnects():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        handler = ConsumerHandler("q")
        states: list[str] = []
        nursery.start_soon(functools.partial(
            run_connector, "127.0.0.1", port,
            lambda remote: EngineConnection(handler, ConnectionSettings(container_id="connector-client"),
                                            server=False, remote_host=remote),
            Backoff(initial=0.05, multiplier=1.0, max_attempts=3),
            on_state=states.append,
        ))
        prod = await tcp_peer(nursery, port)
        snd = prod.peer.sender("q")
        await prod.until(lambda: snd.credit == 250)
        d = prod.peer.send(snd, body="to the connector")
        await prod.until(lambda: d.settled)
        assert handler.bodies == ["to the connector"]
        assert outcome(d)["state"] == "accepted"

        # the router drops every connection: the connector comes back (the open reset its failures)
        for rc in list(router.connections):
            if rc.engine.remote_container == "connector-client":
                rc.engine.close()
        def consumer_back():
            addr = router.addresses.get("M0q")
            return handler.opens == 2 and addr is not None and addr.rlinks

        with trio.fail_after(10):
            while not consumer_back():
                await trio.sleep(0.01)
        await prod.until(lambda: snd.credit > 0)
        d2 = prod.peer.send(snd, body="after reconnect")
        await prod.until(lambda: d2.settled)
        assert handler.bodies == ["to the connector", "after reconnect"]
        assert handler.closes == 1
        assert states.count("SUCCESS") == 2
        assert "FAILED" not in states
        nursery.cancel_scope.cancel()


async def test_cancelled_connection_is_forgotten():
    """Cancelling a connection's task tree aborts its engine: the router forgets the connection."""
    router = Router("RC")
    left, right = trio.socket.socketpair()
    engine = router.new_engine(router.connection_settings(), server=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_connection, trio.SocketStream(left), engine)
        await trio.sleep(0.05)
        assert len(router.connections) == 1
        nursery.cancel_scope.cancel()
    right.close()
    assert router.connections == set()
    assert engine.finished


async def test_a_peer_we_stop_reading_is_not_timed_out_for_our_silence(autojump_clock):
    """While the router holds reading a connection (Q2: a streamed message's destination has no room; or
    its memory budget), the peer's heartbeats wait in the socket: that silence is the router's doing, and
    an idle time-out then would close a healthy producer. Once reading resumes the time-out applies
    again (a peer that then says nothing is closed)."""
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, idle_timeout_seconds=4)
        tp = await tcp_peer(nursery, port)
        with trio.fail_after(5):
            while len(router.connections) != 1:
                await trio.sleep(0.01)
        [rc] = list(router.connections)
        engine = rc.engine
        engine.hold_reading()
        for _ in range(40):  # 20 virtual seconds, 5 idle time-outs, the peer heartbeating into the socket
            await trio.sleep(0.5)
            tp.peer.transport.tick(trio.current_time())
            await tp.flush()
        assert not tp.eof.is_set() and not tp.peer.connection.state & Endpoint.REMOTE_CLOSED
        engine.release_reading()
        for _ in range(8):  # reading again: heartbeats are read, the connection stays
            await trio.sleep(0.5)
            tp.peer.transport.tick(trio.current_time())
            await tp.flush()
        assert not tp.eof.is_set() and len(router.connections) == 1
        with trio.fail_after(30):  # the peer falls silent: the time-out applies again
            await tp.eof.wait()
        assert tp.peer.connection.remote_condition.name == "amqp:resource-limit-exceeded"
        nursery.cancel_scope.cancel()


async def test_a_peer_silent_after_we_resume_reading_is_timed_out_from_the_resumption(autojump_clock):
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, idle_timeout_seconds=4)
        tp = await tcp_peer(nursery, port)  # opens, then never sends again
        with trio.fail_after(5):
            while len(router.connections) != 1:
                await trio.sleep(0.01)
        [rc] = list(router.connections)
        rc.engine.hold_reading()
        await trio.sleep(20)
        assert not tp.eof.is_set()
        rc.engine.release_reading()
        t0 = trio.current_time()
        with trio.fail_after(30):
            await tp.eof.wait()
        assert 4 <= trio.current_time() - t0 <= 4 + 2 + 1  # a whole time-out from the resumption (+ close grace)
        nursery.cancel_scope.cancel()


# -- feed slices ------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("nbytes", "frames", "expected"), [
    (65536, 546, FEED_SLICE),        # 100-byte bodies (~120-byte frames): the measured 8 KiB
    (65536, 13, READ_CHUNK),         # 5 kB messages: a slice of 64 frames would be 320 KiB; one read
    (40000, 5, READ_CHUNK),          # 8 kB frames: capped at what one read takes
    (65536, 0, READ_CHUNK),          # part of one large frame: nothing to interleave
    (65536, 64, 65536),              # 1 KiB frames: 64 of them
    (30000, 100, 300 * SLICE_FRAMES),  # 300-byte frames: 19,200 bytes
])
def test_a_large_read_is_sliced_into_about_slice_frames_frames_within_the_bounds(nbytes, frames, expected):
    assert next_feed_slice(nbytes, frames) == expected
