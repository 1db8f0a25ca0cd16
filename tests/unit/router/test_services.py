"""router/services.py: listeners and connectors added and removed while a router runs (real sockets on
127.0.0.1, one Trio loop, no subprocess)."""

from __future__ import annotations

import socket

import pytest
import trio

from router.config import validate_entity
from router.core import Router
from router.daemon import _settings
from router.services import ServiceManager, bind_tcp_listeners


def entity(kind, **attrs):
    e = validate_entity(kind, {k: str(v) for k, v in attrs.items()})
    return e


async def wait_for(predicate, timeout=5.0):
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)


async def test_bind_reports_port_in_use_and_leaves_nothing_open():
    [first] = bind_tcp_listeners("127.0.0.1", 0)
    port = first.socket.getsockname()[1]
    try:
        with pytest.raises(OSError):
            bind_tcp_listeners("127.0.0.1", port)
    finally:
        first.socket.close()


async def test_listener_added_accepts_and_removed_stops(nursery):
    router = Router("S1", clock=trio.current_time)
    lines = []
    svc = ServiceManager(router, nursery, _settings, announce=lambda text, **kw: lines.append(text))
    s = svc.add("listener", entity("listener", name="extra", host="127.0.0.1", port=0))
    host, port = s.bound[0]
    assert lines == [f"tdrouterd: listening on 127.0.0.1:{port} (listener extra, role normal)"]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    await client.send_all(b"AMQP\x00\x01\x00\x00")  # an AMQP header: the router answers with its own
    with trio.fail_after(5):
        data = await client.receive_some(8)
    assert data.startswith(b"AMQP")
    await wait_for(lambda: len(router.connections) == 1)
    with pytest.raises(ValueError):
        svc.add("listener", entity("listener", name="extra", host="127.0.0.1", port=0))
    svc.remove("listener", "extra")
    await trio.sleep(0.05)

    def refused():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return False
        except OSError:
            return True

    await wait_for(refused)
    assert len(router.connections) == 1  # the accepted connection stays
    assert svc.services("listener") == []
    await client.aclose()


async def test_connector_removed_closes_and_stops_reconnecting(nursery):
    accepted = []

    async def peer(stream):
        accepted.append(stream)
        try:
            while await stream.receive_some(1024):
                pass
        except trio.BrokenResourceError:
            pass

    listeners = await nursery.start(trio.serve_tcp, peer, 0)
    port = listeners[0].socket.getsockname()[1]
    router = Router("S2", clock=trio.current_time)
    svc = ServiceManager(router, nursery, _settings, announce=lambda *a, **k: None)
    s = svc.add("connector", entity("connector", name="out", host="127.0.0.1", port=port,
                                     retryDelaySeconds=0.05))
    await wait_for(lambda: s.engine is not None and len(router.connections) == 1)
    assert s.status()["connectionStatus"] == "SUCCESS"
    svc.remove("connector", "out")
    await wait_for(lambda: not router.connections)
    await trio.sleep(0.3)  # six retry delays: a connector still running would have reconnected
    assert len(accepted) == 1 and not router.connections
    assert svc.services("connector") == []
