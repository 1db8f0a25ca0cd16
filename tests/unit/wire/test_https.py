"""wire/http.py over TLS in process: serve_http_listeners with a ServerTls serves HTTPS on loopback, hands the
handshake's peer information to the application, answers plain HTTP 400 when TLS is required (serves it when
not), and disconnects a client that never starts its handshake. Certificates are made by trustme."""

from __future__ import annotations

import json
import ssl

import h11
import pytest
import trio
import trustme

from tests.unit.wire.test_http import EchoApp, exchange
from wire import http as wh
from wire.tls import ServerTls


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def server_tls(ca, *, required=True, verify_client=False) -> ServerTls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("localhost").configure_cert(ctx)
    if verify_client:
        ca.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ServerTls(ctx, required=required)


class PeerApp(EchoApp):
    async def handle(self, request):
        self.seen.append(request)
        tls = request.tls
        return wh.json_response(200, {"protocol": tls.protocol if tls else None,
                                      "subject": tls.peer_subject if tls else None})


async def start(nursery, app, tls) -> int:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(lambda: wh.serve_http_listeners(app, listeners, nursery, tls=tls))
    return listeners[0].socket.getsockname()[1]


async def tls_client(ca, port, cert=None) -> trio.SSLStream:
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    if cert is not None:
        cert.configure_cert(ctx)
    stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), ctx, server_hostname="localhost")
    await stream.do_handshake()
    return stream


async def test_https_request_carries_the_handshake_and_the_client_certificate(ca):
    app = PeerApp()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, app, server_tls(ca, verify_client=True))
        stream = await tls_client(ca, port, cert=ca.issue_cert("client.example", common_name="client.example"))
        status, _, body = await exchange(stream, h11.Connection(h11.CLIENT), "GET", "/x")
        answer = json.loads(body)
        assert status == 200 and answer["protocol"].startswith("TLSv1.")
        assert answer["subject"].startswith("CN=client.example,")
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_plain_http_is_answered_400_when_tls_is_required_and_served_when_not(ca):
    for required, expected in ((True, 400), (False, 200)):
        app = PeerApp()
        async with trio.open_nursery() as nursery:
            port = await start(nursery, app, server_tls(ca, required=required))
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            status, _, body = await exchange(stream, h11.Connection(h11.CLIENT), "GET", "/x")
            assert status == expected, body
            if required:
                assert b"https://" in body and not app.seen   # the application never saw it
            else:
                assert json.loads(body)["protocol"] is None
            await stream.aclose()
            nursery.cancel_scope.cancel()


async def test_a_client_that_never_starts_its_handshake_is_disconnected(ca):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server_side = await listeners[0].accept()
    # The client never sends a byte, so a short timeout is as certain to expire as the real one.
    assert await wh.secure_http_stream(server_side, server_tls(ca), "test", timeout=0.2) is None
    assert await client.receive_some(10) == b""   # closed by the server
    await client.aclose()
    for lst in listeners:
        await lst.aclose()
