"""wire/http.py over real loopback sockets: requests, keep-alive, limits, static files, Basic credentials and
the WebSocket upgrade (h11 and wsproto on the client side too)."""

from __future__ import annotations

import base64
import json

import h11
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request as WsRequest, TextMessage

from wire import http as wh


class EchoApp:
    websocket_paths = ("/ws",)

    def __init__(self):
        self.seen = []

    async def handle(self, request):
        self.seen.append(request)
        if request.path == "/boom":
            raise RuntimeError("application bug")
        return wh.json_response(200, {"method": request.method, "path": request.path, "query": request.query,
                                      "body": request.body.decode(), "remote": request.remote})

    def websocket_refusal(self, request):
        return None if request.header("x-allow") == "yes" else wh.text_response(403, "no\n")

    async def websocket(self, request, session):
        while True:
            text = await session.receive()
            await session.send(text.upper())


async def start(nursery, app):
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    nursery.start_soon(wh.serve_http_listeners, app, listeners, nursery)
    return listeners[0].socket.getsockname()[1]


async def exchange(stream, conn, method, path, headers=(), body=b""):
    hdrs = [("Host", "x"), *headers]
    if body:
        hdrs.append(("Content-Length", str(len(body))))
    data = conn.send(h11.Request(method=method, target=path, headers=hdrs))
    if body:
        data += conn.send(h11.Data(data=body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)
    response, chunks = None, []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(65536))
            continue
        if isinstance(event, h11.Response):
            response = event
        elif isinstance(event, h11.Data):
            chunks.append(event.data)
        elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
            break
    return response.status_code, dict((k.decode().lower(), v.decode()) for k, v in response.headers), b"".join(chunks)


async def test_request_body_query_and_keep_alive():
    app = EchoApp()
    async with trio.open_nursery() as nursery:
        port = await start(nursery, app)
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        conn = h11.Connection(h11.CLIENT)
        status, headers, body = await exchange(stream, conn, "POST", "/a%20b?x=1&x=2", body=b"hello")
        assert status == 200 and headers["content-type"] == wh.JSON_TYPE
        got = json.loads(body)
        assert got["path"] == "/a b" and got["query"] == {"x": ["1", "2"]} and got["body"] == "hello"
        assert got["remote"].startswith("127.0.0.1:")
        conn.start_next_cycle()   # the same connection serves a second request
        status, _, body = await exchange(stream, conn, "GET", "/second")
        assert status == 200 and json.loads(body)["path"] == "/second"
        await stream.aclose()
        nursery.cancel_scope.cancel()


async def test_application_error_is_500_and_the_server_carries_on():
    async with trio.open_nursery() as nursery:
        port = await start(nursery, EchoApp())
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        status, _, _ = await exchange(stream, h11.Connection(h11.CLIENT), "GET", "/boom")
        assert status == 500
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        status, _, _ = await exchange(stream, h11.Connection(h11.CLIENT), "GET", "/fine")
        assert status == 200
        nursery.cancel_scope.cancel()


async def test_malformed_request_gets_400_and_oversized_body_413():
    async with trio.open_nursery() as nursery:
        port = await start(nursery, EchoApp())
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"NOT HTTP AT ALL\r\n\r\n")
        reply = b""
        while chunk := await stream.receive_some(4096):
            reply += chunk
        assert reply.startswith(b"HTTP/1.1 400")
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        big = b"x" * (wh.MAX_BODY_BYTES + 10)
        status, _, _ = await exchange(stream, h11.Connection(h11.CLIENT), "POST", "/", body=big)
        assert status == 413
        nursery.cancel_scope.cancel()


async def test_websocket_upgrade_refused_then_echoes():
    async with trio.open_nursery() as nursery:
        port = await start(nursery, EchoApp())
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(WsRequest(host="x", target="/ws")))
        assert (await stream.receive_some(4096)).startswith(b"HTTP/1.1 403")
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(WsRequest(host="x", target="/ws", extra_headers=[(b"x-allow", b"yes")])))
        texts = []
        accepted = False
        while len(texts) < 1:
            ws.receive_data(await stream.receive_some(4096))
            for ev in ws.events():
                if isinstance(ev, AcceptConnection):
                    accepted = True
                    await stream.send_all(ws.send(TextMessage(data="hello")))
                elif isinstance(ev, TextMessage):
                    texts.append(ev.data)
        assert accepted and texts == ["HELLO"]
        nursery.cancel_scope.cancel()


def test_basic_credentials():
    def req(value):
        return wh.HttpRequest("GET", "/", {}, {"authorization": value} if value else {})

    token = base64.b64encode(b"alice:se:cret").decode()
    assert wh.basic_credentials(req(f"Basic {token}")) == ("alice", "se:cret")
    assert wh.basic_credentials(req(None)) is None
    assert wh.basic_credentials(req("Bearer abc")) is None
    assert wh.basic_credentials(req("Basic !!!")) is None
    assert wh.basic_credentials(req("Basic " + base64.b64encode(b"nocolon").decode())) is None


def test_static_files_stay_under_their_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "index.html").write_text("<p>hi</p>")
    (root / "app.js").write_text("1")
    (tmp_path / "secret.txt").write_text("secret")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    ok = wh.static_file(root, "/")
    assert ok.status == 200 and ok.body == b"<p>hi</p>" and ok.content_type.startswith("text/html")
    assert wh.static_file(root, "/app.js").content_type.startswith("text/javascript")
    for bad in ("/../secret.txt", "/link", "/nothing", "/%2e%2e/secret.txt"):
        assert wh.static_file(root, bad).status == 404, bad


@pytest.mark.parametrize("value,expected", [(b"\xff", "\ufffd"), ((1, 2), [1, 2])])
def test_json_of_amqp_values(value, expected):
    assert json.loads(wh.json_response(200, {"v": value}).body) == {"v": expected}
