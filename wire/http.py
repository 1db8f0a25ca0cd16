"""HTTP/1.1 and WebSocket serving for the daemons' web console, ``/metrics`` and ``/healthz``.

The protocols are sans-IO libraries: h11 (HTTP/1.1, RFC 9112) and wsproto (WebSocket, RFC 6455), both from
python-hyper. This module's Trio layer only moves bytes between a socket and them; what a request means
is an *application*'s business (router/httpserve.py, broker/httpserve.py), which gets a parsed
:class:`HttpRequest` and returns an :class:`HttpResponse`, or, for a WebSocket upgrade on one of its
``websocket_paths``, gets a :class:`WebSocketSession` to read and write text messages on.

Shared by both daemons: :func:`serve_http` (one connection), :func:`basic_credentials` (RFC 7617),
:func:`static_file` (the console's files, never outside their root) and the JSON/text response helpers.

HTTPS (and WSS): :func:`serve_http_listeners` with a :class:`wire.tls.ServerTls` -- the same object an
AMQP listener of either daemon is given (router/security.py from an ``sslProfile``, broker/security.py
from Artemis's ``sslEnabled`` parameters) -- serves each connection over TLS with that context
(certificate, key, ciphers, protocols, and a client certificate when the context requires one). As on
an AMQP listener (wire/driver.py ``connection_handler``), the first byte decides: a TLS handshake record
is TLS; anything else is plain HTTP, served when ``required`` is false (Dispatch's ``requireSsl: no``) and
otherwise answered ``400`` in plain text naming the scheme to use, then closed. What the handshake
established (protocol, cipher, the verified client certificate) is the request's ``tls``.
Bad input (malformed HTTP, an oversized header or body, a stalled client) gets a 4xx where HTTP can still
say so, and closes that connection only.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import mimetypes
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import h11
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Ping, RejectConnection,
                            Request as WsRequest, TextMessage)

from wire.driver import TLS_HANDSHAKE_RECORD, TlsHandshakeError, tls_handshake
from wire.tls import ServerTls, TlsPeerInfo, peer_info

log = logging.getLogger("wire.http")

#: Largest request head (request line and headers) accepted; a browser's are a few KiB.
MAX_HEAD_BYTES = 16 * 1024
#: Largest request body accepted: a management request is a few hundred bytes (the AMQP agents refuse
#: requests over wire.management.MAX_REQUEST_BYTES, 1 MiB, too).
MAX_BODY_BYTES = 1024 * 1024
#: Largest WebSocket message accepted (one JSON management request), as for a body.
MAX_WS_MESSAGE_BYTES = 1024 * 1024
#: A client that sends nothing for this long (between or inside requests) is disconnected, so idle
#: keep-alive connections do not pile up.
IDLE_TIMEOUT_SECONDS = 60.0
#: How much is read from the socket at a time.
READ_CHUNK = 64 * 1024
#: Most HTTP connections one HTTP listener serves at once; a further one is answered 503 and closed. A
#: console tab holds one or two; the limit keeps a flood of clients from taking the daemon's memory.
MAX_HTTP_CONNECTIONS = 256
#: A client of an HTTPS listener must have sent its first byte and finished the TLS handshake within
#: this long; a browser does it in milliseconds, and a socket that stalls here holds a connection slot.
TLS_HANDSHAKE_TIMEOUT_SECONDS = 10.0
#: How long a plaintext client on a TLS-only listener gets to send its request head before the socket is
#: closed without an answer (the answer is only a courtesy that names the scheme to use).
PLAINTEXT_REFUSAL_SECONDS = 1.0

SERVER_HEADER = b"trio-dispatch"
JSON_TYPE = "application/json"
TEXT_TYPE = "text/plain; charset=utf-8"
#: Prometheus text exposition format, version 0.0.4.
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass
class HttpRequest:
    """One request: method, path (percent-decoded), query (name -> list of values), lower-case headers,
    the whole body, the client's ``host:port`` and, over HTTPS, what the TLS handshake established
    (``tls.peer_subject`` is the verified client certificate's subject; None without one)."""

    method: str
    path: str
    query: dict
    headers: dict
    body: bytes = b""
    remote: str = ""
    tls: TlsPeerInfo | None = None

    def header(self, name: str, default: str | None = None) -> str | None:
        return self.headers.get(name.lower(), default)


@dataclass
class HttpResponse:
    """One response: status, body and content type; ``headers`` adds (name, value) pairs."""

    status: int
    body: bytes = b""
    content_type: str = TEXT_TYPE
    headers: list = field(default_factory=list)


def json_response(status: int, value: Any, headers=()) -> HttpResponse:
    """``value`` as JSON; values JSON has no type for (AMQP symbols, binary, timestamps) as their text."""
    body = json.dumps(value, default=_json_default, separators=(",", ":")).encode()
    return HttpResponse(status, body, JSON_TYPE, list(headers))


def _json_default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)


def to_json(value: Any) -> str:
    """JSON text of a management value (the same conversions as :func:`json_response`)."""
    return json.dumps(value, default=_json_default, separators=(",", ":"))


def text_response(status: int, text: str, content_type: str = TEXT_TYPE, headers=()) -> HttpResponse:
    return HttpResponse(status, text.encode(), content_type, list(headers))


def unauthorized(realm: str) -> HttpResponse:
    """401 asking for Basic credentials (RFC 7617 §2)."""
    return text_response(401, "authentication required\n",
                         headers=[("WWW-Authenticate", f'Basic realm="{realm}", charset="UTF-8"')])


def basic_credentials(request: HttpRequest) -> tuple[str, str] | None:
    """(user, password) from an ``Authorization: Basic`` header (RFC 7617), None when there is none or
    it is not well formed (the caller then answers 401)."""
    value = request.header("authorization")
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    user, sep, password = text.partition(":")
    if not sep or not user:
        return None
    return user, password


# -- static files -----------------------------------------------------------------------------------------
_CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                  ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".json": JSON_TYPE,
                  ".png": "image/png", ".ico": "image/x-icon", ".txt": TEXT_TYPE}
#: A console file bigger than this is not served (it would be read whole into memory).
MAX_STATIC_FILE_BYTES = 8 * 1024 * 1024


def static_file(root: Path, path: str) -> HttpResponse:
    """The file at URL ``path`` under ``root`` (``/`` is ``index.html``): 404 when it is missing or would
    be outside ``root`` (``..``, symbolic links out), 403 when it cannot be read."""
    relative = path.lstrip("/") or "index.html"
    if relative.endswith("/"):
        relative += "index.html"
    try:
        base = root.resolve()
        target = (base / relative).resolve()
    except (OSError, RuntimeError):
        return text_response(404, "not found\n")
    if base != target and base not in target.parents:
        return text_response(404, "not found\n")
    try:
        if not target.is_file() or target.stat().st_size > MAX_STATIC_FILE_BYTES:
            return text_response(404, "not found\n")
        data = target.read_bytes()
    except OSError:
        return text_response(403, "cannot read file\n")
    ctype = _CONTENT_TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    return HttpResponse(200, data, ctype, [("Cache-Control", "no-cache")])


# -- applications -----------------------------------------------------------------------------------------
class HttpApp(Protocol):
    """What :func:`serve_http` serves: ``handle`` answers requests; a WebSocket upgrade on one of
    ``websocket_paths`` goes to ``websocket`` (after ``websocket_refusal`` returned None for it)."""

    websocket_paths: tuple

    async def handle(self, request: HttpRequest) -> HttpResponse: ...

    def websocket_refusal(self, request: HttpRequest) -> HttpResponse | None: ...

    async def websocket(self, request: HttpRequest, session: "WebSocketSession") -> None: ...


class WebSocketClosed(Exception):
    """The peer closed the WebSocket (or the connection went)."""


class WebSocketSession:
    """An accepted server-side WebSocket: :meth:`receive` text messages, :meth:`send` text."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection):
        self._stream = stream
        self._ws = ws
        self._parts: list[str] = []
        self._size = 0
        self._pending: list[str] = []
        self._send_lock = trio.Lock()

    async def _flush(self, data: bytes) -> None:
        if data:
            async with self._send_lock:
                await self._stream.send_all(data)

    async def send(self, text: str) -> None:
        await self._flush(self._ws.send(TextMessage(data=text)))

    async def receive(self) -> str:
        """The next complete text message; WebSocketClosed when the peer closes or goes idle."""
        while not self._pending:
            for event in self._ws.events():
                if isinstance(event, TextMessage):
                    self._size += len(event.data)
                    if self._size > MAX_WS_MESSAGE_BYTES:
                        await self._close(1009, "message too big")
                        raise WebSocketClosed("message too big")
                    self._parts.append(event.data)
                    if event.message_finished:
                        self._pending.append("".join(self._parts))
                        self._parts, self._size = [], 0
                elif isinstance(event, BytesMessage):
                    await self._close(1003, "text messages only")
                    raise WebSocketClosed("binary message")
                elif isinstance(event, Ping):
                    await self._flush(self._ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    try:
                        await self._flush(self._ws.send(event.response()))
                    except Exception:  # noqa: BLE001 - the peer may be gone already
                        pass
                    raise WebSocketClosed("closed by peer")
            if self._pending:
                break
            with trio.move_on_after(IDLE_TIMEOUT_SECONDS):
                data = await self._stream.receive_some(READ_CHUNK)
                if not data:
                    raise WebSocketClosed("connection closed")
                self._ws.receive_data(data)
                continue
            await self._close(1001, "idle")
            raise WebSocketClosed("idle")
        return self._pending.pop(0)

    async def _close(self, code: int, reason: str) -> None:
        try:
            await self._flush(self._ws.send(CloseConnection(code=code, reason=reason)))
        except Exception:  # noqa: BLE001 - closing a socket the peer may have dropped
            pass


# -- one connection -------------------------------------------------------------------------------------
def _is_websocket_upgrade(request: HttpRequest) -> bool:
    return ("websocket" in (request.header("upgrade") or "").lower()
            and "upgrade" in (request.header("connection") or "").lower())


def _parse_target(target: bytes) -> tuple[str, dict]:
    parts = urlsplit(target.decode("latin-1"))
    return unquote(parts.path or "/"), parse_qs(parts.query)


async def _send_response(stream: trio.abc.Stream, conn: h11.Connection, response: HttpResponse, *,
                         head_only: bool = False) -> None:
    headers = [("Content-Type", response.content_type), ("Content-Length", str(len(response.body))),
               ("Server", SERVER_HEADER.decode()), *response.headers]
    data = conn.send(h11.Response(status_code=response.status, headers=headers))
    if response.body and not head_only:
        data += conn.send(h11.Data(data=response.body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)


async def _next_event(stream: trio.abc.Stream, conn: h11.Connection):
    """The next h11 event, reading as needed; None when the client went quiet past IDLE_TIMEOUT_SECONDS."""
    while True:
        event = conn.next_event()
        if event is not h11.NEED_DATA:
            return event
        with trio.move_on_after(IDLE_TIMEOUT_SECONDS):
            data = await stream.receive_some(READ_CHUNK)
            conn.receive_data(data)
            continue
        return None


async def serve_http(stream: trio.abc.Stream, app: HttpApp, remote: str = "", tls: TlsPeerInfo | None = None) -> None:
    """Serve one HTTP connection (keep-alive, one request at a time) until the client closes it, goes
    idle, sends something malformed or upgrades to a WebSocket (served until it closes). ``tls`` is what
    the connection's TLS handshake established (None: plain HTTP); every request carries it."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            try:
                event = await _next_event(stream, conn)
                if event is None or isinstance(event, h11.ConnectionClosed):
                    return
                if not isinstance(event, h11.Request):
                    return
                request = HttpRequest(event.method.decode("ascii", "replace").upper(), *_parse_target(event.target),
                                      {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers},
                                      remote=remote, tls=tls)
                body = bytearray()
                while True:
                    event = await _next_event(stream, conn)
                    if event is None or isinstance(event, h11.ConnectionClosed):
                        return
                    if isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > MAX_BODY_BYTES:
                            await _send_response(stream, conn, text_response(413, "request body too large\n"))
                            return
                    elif isinstance(event, h11.EndOfMessage):
                        break
                request.body = bytes(body)
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await _send_response(stream, conn, text_response(exc.error_status_hint, f"bad request: {exc}\n"))
                return
            if _is_websocket_upgrade(request) and request.path in app.websocket_paths:
                await _upgrade(stream, conn, app, request, event)
                return
            try:
                response = await app.handle(request)
            except Exception:  # an application bug answers 500 and ends this connection only
                log.exception("HTTP %s %s failed", request.method, request.path)
                response = text_response(500, "internal error\n")
            await _send_response(stream, conn, response, head_only=request.method == "HEAD")
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.LocalProtocolError):
        return
    finally:
        with trio.CancelScope(shield=True):
            await _aclose(stream)


async def _upgrade(stream: trio.abc.Stream, conn: h11.Connection, app: HttpApp, request: HttpRequest,
                   _last_event) -> None:
    refusal = app.websocket_refusal(request)
    if refusal is not None:
        await _send_response(stream, conn, refusal)
        return
    ws = WSConnection(ConnectionType.SERVER)
    ws.initiate_upgrade_connection([(k.encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()],
                                   request.path)
    accepted = False
    for ev in ws.events():
        if isinstance(ev, WsRequest):
            await stream.send_all(ws.send(AcceptConnection()))
            accepted = True
        elif isinstance(ev, RejectConnection):
            return
    if not accepted:
        return
    leftover, _closed = conn.trailing_data
    if leftover:
        ws.receive_data(bytes(leftover))
    session = WebSocketSession(stream, ws)
    try:
        await app.websocket(request, session)
    except WebSocketClosed:
        return


async def _aclose(stream: trio.abc.Stream) -> None:
    try:
        await stream.aclose()
    except Exception:  # noqa: BLE001 - the socket may be broken already
        pass


async def serve_http_listeners(app: HttpApp, listeners, handler_nursery: trio.Nursery,
                               max_connections: int = MAX_HTTP_CONNECTIONS, *, tls: ServerTls | None = None) -> None:
    """Accept on ``listeners`` (bound already) and serve each connection with :func:`serve_http` in
    ``handler_nursery``; beyond ``max_connections`` at once a client gets 503 and is closed. With ``tls``
    the listener serves HTTPS (see the module docstring)."""
    open_count = 0

    async def handler(stream: trio.abc.Stream) -> None:
        nonlocal open_count
        remote = _remote(stream)
        if open_count >= max_connections:
            await _answer_and_close(stream, text_response(503, "too many HTTP connections\n"))
            return
        open_count += 1
        try:
            info = None
            if tls is not None:
                secured = await secure_http_stream(stream, tls, remote)
                if secured is None:
                    return
                stream, info = secured
            await serve_http(stream, app, remote, info)
        finally:
            open_count -= 1

    await trio.serve_listeners(handler, listeners, handler_nursery=handler_nursery)


async def secure_http_stream(stream: trio.SocketStream, tls: ServerTls, remote: str = "",
                             timeout: float = TLS_HANDSHAKE_TIMEOUT_SECONDS):
    """The stream to serve HTTP on for a client of an HTTPS listener, and its TLS (None on plaintext):
    TLS when its first byte starts a handshake, the plain stream when ``tls.required`` is false. None
    (the socket closed) when the client closed or stalled first, the handshake failed (untrusted or
    missing client certificate, no common protocol...) or it spoke plain HTTP to a TLS-only listener
    (answered 400 first)."""
    with trio.move_on_after(timeout):
        try:
            data = await stream.socket.recv(1, socket.MSG_PEEK)
        except OSError:
            data = b""
        if not data:
            await _aclose(stream)
            return None
        if data[0] != TLS_HANDSHAKE_RECORD:
            if not tls.required:
                return stream, None
            log.info("HTTP client %s refused: plain HTTP on a listener that requires TLS", remote)
            await _answer_and_close(stream, text_response(
                400, "this port serves HTTPS only (TLS required): use https:// (wss:// for WebSockets)\n"))
            return None
        try:
            secured = await tls_handshake(stream, tls.context, server_side=True)
        except TlsHandshakeError as exc:
            log.info("HTTPS client %s: %s", remote, exc)
            return None
        return secured, peer_info(secured)
    log.info("HTTPS client %s: no TLS handshake within %gs of connecting: disconnected", remote, timeout)
    await _aclose(stream)
    return None


async def _answer_and_close(stream: trio.abc.Stream, response: HttpResponse) -> None:
    """Read one request head (briefly), answer it with ``response`` and close: for clients turned away."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        with trio.move_on_after(PLAINTEXT_REFUSAL_SECONDS):
            event = await _next_event(stream, conn)
            if isinstance(event, h11.Request):
                await _send_response(stream, conn, response)
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    await _aclose(stream)


def _remote(stream: trio.abc.Stream) -> str:
    sock = getattr(stream, "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return ""
    if not peer:
        return ""
    host, port = peer[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
