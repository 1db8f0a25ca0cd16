"""One bad peer never takes a daemon down (issue 10): handler exceptions, undecodable peer strings,
connection limits, the initial handshake timeout and running out of file descriptors.

In-process (a real Router as the engine's handler, proton peers as clients) and over loopback TCP with
``autojump_clock`` where time matters.
"""

from __future__ import annotations

import errno
import logging
import socket

import proton
import pytest
import trio
from proton import Endpoint

from router.core import Router
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection, printable
from wire.driver import ConnectionLimit, backing_off, serve_listener
from wire.logformat import OneLineFormatter
from tests.unit.enginepair import Peer
from tests.unit.wire.fixtures import tcp_peer, TcpPeer

AMQP_HEADER = b"AMQP\x00\x01\x00\x00"
MARKER = "MARKERMARKER"  # replaced in the encoded OPEN by bytes that are not UTF-8, same length


def client_stream(container: str = "client", target: str | None = None) -> bytes:
    """A client's bytes (no SASL): header, OPEN, and optionally BEGIN + ATTACH of a sender to target."""
    t = proton.Transport()
    c = proton.Connection()
    t.bind(c)
    c.container = container
    c.open()
    if target is not None:
        s = c.session()
        s.open()
        snd = s.sender("sender")
        snd.target.address = target
        snd.open()
    return bytes(t.peek(t.pending()))


def with_invalid_utf8(data: bytes) -> bytes:
    bad = b"\xff\xfe" + b"x" * (len(MARKER) - 2)
    assert data.count(MARKER.encode()) == 1
    return data.replace(MARKER.encode(), bad)


def server_engine(handler) -> EngineConnection:
    return EngineConnection(handler, ConnectionSettings(sasl_mechanisms="ANONYMOUS"), server=True,
                            remote_host="10.0.0.9:4242")


def drain(engine: EngineConnection) -> bytes:
    out = b""
    while True:
        chunk = engine.take_output()
        if not chunk:
            return out
        out += chunk


class Exploding(ConnectionHandler):
    """Raises while handling the peer's OPEN; counts the close reports."""

    def __init__(self):
        self.closed = 0

    def on_connection_open(self, conn):
        raise RuntimeError("bug in the handler")

    def on_connection_close(self, conn):
        self.closed += 1


def test_handler_exception_closes_that_connection_with_internal_error(caplog):
    handler = Exploding()
    engine = server_engine(handler)
    with caplog.at_level(logging.ERROR, logger="wire.connection"):
        engine.feed(client_stream())  # must not raise
    out = drain(engine)
    assert b"amqp:internal-error" in out
    assert engine.failed
    # The driver's clean-up must not run the failing event again (it used to, outside any try).
    engine.abort()
    assert handler.closed == 1
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "10.0.0.9:4242" in errors[0].getMessage()


def test_invalid_utf8_container_id_is_a_decode_error_and_the_router_carries_on():
    router = Router("RT")
    settings = router.connection_settings()
    bad = router.new_engine(settings, server=True, remote_host="bad")
    bad.feed(with_invalid_utf8(client_stream(container=MARKER)))
    assert b"amqp:decode-error" in drain(bad)
    bad.abort()
    assert all(rc.engine is not bad for rc in router.connections)
    # The same router still serves a well-behaved client.
    good = router.new_engine(settings, server=True, remote_host="good")
    peer = Peer(sasl=False)
    for _ in range(5):
        good.feed(peer.take_output() or b"")
        peer.feed(drain(good))
    assert peer.connection.state & Endpoint.REMOTE_ACTIVE
    assert not good.failed


def test_invalid_utf8_in_an_attach_address_is_a_decode_error():
    router = Router("RT")
    engine = router.new_engine(router.connection_settings(), server=True, remote_host="bad")
    engine.feed(with_invalid_utf8(client_stream(target=MARKER)))
    out = drain(engine)
    assert b"amqp:decode-error" in out
    engine.abort()
    assert not router.connections


def test_printable_escapes_what_could_forge_log_lines():
    assert printable("ok container é") == "ok container é"
    assert printable("evil\n2026 CRITICAL x") == "evil\\n2026 CRITICAL x"
    assert printable("\x1b[31m") == "\\x1b[31m"
    assert len(printable("y" * 10_000)) < 300


def test_log_formatter_keeps_a_record_on_one_line():
    fmt = OneLineFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "container %s", ("a\nCRITICAL b\r",), None)
    assert fmt.format(record) == "INFO container a\\nCRITICAL b\\r"


# -- over loopback TCP --------------------------------------------------------------------------------

async def _router_listener(nursery, router, **kw):
    settings = router.connection_settings()
    listeners = await nursery.start(
        lambda task_status: serve_listener(
            "127.0.0.1", 0, lambda remote: router.new_engine(settings, server=True, remote_host=remote),
            task_status=task_status, **kw))
    return listeners[0].socket.getsockname()[1]


async def test_connection_limit_refuses_with_resource_limit_exceeded_then_admits_again():
    router = Router("RT")
    limit = ConnectionLimit(2, "connections")
    async with trio.open_nursery() as nursery:
        port = await _router_listener(nursery, router, limits=(limit,))
        first = await tcp_peer(nursery, port)
        second = await tcp_peer(nursery, port)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        over = TcpPeer(stream, Peer())
        nursery.start_soon(over.reader)
        await over.until(lambda: over.peer.connection.state & Endpoint.REMOTE_CLOSED)
        assert over.peer.connection.remote_condition.name == "amqp:resource-limit-exceeded"
        assert limit.refused == 1 and limit.open == 2
        assert first.peer.connection.state & Endpoint.REMOTE_ACTIVE  # the others never noticed
        # One leaves: the next client gets in.
        await first.stream.aclose()
        with trio.fail_after(10):
            while limit.open > 1:
                await trio.sleep(0.01)
        third = await tcp_peer(nursery, port)
        assert not third.peer.connection.state & Endpoint.REMOTE_CLOSED
        assert second.peer.connection.state & Endpoint.REMOTE_ACTIVE
        nursery.cancel_scope.cancel()


async def test_silent_and_slow_sockets_are_dropped_after_the_handshake_timeout(autojump_clock):
    router = Router("RT")
    async with trio.open_nursery() as nursery:
        port = await _router_listener(nursery, router, handshake_timeout=3.0)
        t0 = trio.current_time()
        silent = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(5)]
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        client = await tcp_peer(nursery, port)  # completes its handshake: stays

        async def dribble():  # a slowloris: one byte of a valid header every second
            try:
                for b in AMQP_HEADER:
                    await slow.send_all(bytes([b]))
                    await trio.sleep(1.0)
            except trio.BrokenResourceError:
                pass

        nursery.start_soon(dribble)
        with trio.fail_after(30):
            for s in (*silent, slow):
                while True:
                    try:
                        if await s.receive_some(4096) == b"":
                            break
                    except trio.BrokenResourceError:
                        break
        assert 3.0 <= trio.current_time() - t0 < 5.0
        await trio.sleep(10)
        assert client.peer.connection.state & Endpoint.REMOTE_ACTIVE
        assert not client.eof.is_set()
        nursery.cancel_scope.cancel()


class _FakeListener(trio.abc.Listener):
    """Fails accept() with EMFILE a given number of times, then accepts."""

    def __init__(self, failures: int):
        self.failures = failures
        self.calls = 0
        self.socket = socket.socket()

    async def accept(self):
        self.calls += 1
        await trio.lowlevel.checkpoint()
        if self.calls <= self.failures:
            raise OSError(errno.EMFILE, "Too many open files")
        return "stream"

    async def aclose(self):
        self.socket.close()


async def test_out_of_descriptors_backs_off_with_one_log_line(autojump_clock, caplog):
    fake = _FakeListener(failures=200)
    (wrapped,) = backing_off([fake])
    t0 = trio.current_time()
    with caplog.at_level(logging.ERROR, logger="wire.driver"):
        assert await wrapped.accept() == "stream"
    elapsed = trio.current_time() - t0
    # 200 failures at <= 1 s apart after the first few doublings: a few wake-ups a second, not a spin...
    assert 150 < elapsed < 210
    # ...and about one line per ACCEPT_ERROR_LOG_INTERVAL instead of one per failure.
    lines = [r for r in caplog.records if "cannot accept" in r.getMessage()]
    assert 1 <= len(lines) <= 25
    await wrapped.aclose()


async def test_other_accept_errors_still_raise():
    class Broken(_FakeListener):
        async def accept(self):
            raise OSError(errno.EBADF, "bad")

    (wrapped,) = backing_off([Broken(0)])
    with pytest.raises(OSError):
        await wrapped.accept()
    await wrapped.aclose()


class ClosesOnOpen(ConnectionHandler):
    """Closes the connection from inside on_connection_open (a refusal decided by the handler)."""

    def __init__(self):
        self.opens = 0

    def on_connection_open(self, conn):
        self.opens += 1
        conn.close("amqp:resource-limit-exceeded", "not you")


def test_close_from_a_handler_does_not_hand_the_same_event_over_again():
    # close() drains events; from inside a handler it used to drain the OPEN being handled a second time
    # (a policy denial was counted and logged twice).
    handler = ClosesOnOpen()
    engine = server_engine(handler)
    engine.feed(client_stream())
    assert handler.opens == 1
    assert b"amqp:resource-limit-exceeded" in drain(engine)


class EndsSessions(ConnectionHandler):
    def session_refusal(self, conn, session):
        return "amqp:resource-limit-exceeded", "no sessions here"


def test_session_refusal_begins_and_ends_the_session_with_the_condition():
    engine = server_engine(EndsSessions())
    engine.feed(client_stream(target="q"))
    out = drain(engine)
    assert b"no sessions here" in out and b"amqp:resource-limit-exceeded" in out
