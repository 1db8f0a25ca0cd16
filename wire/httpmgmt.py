"""The HTTP face of a daemon: the console's files, ``/metrics``, ``/healthz`` and AMQP management as JSON.

:class:`ConsoleApp` is the :class:`wire.http.HttpApp` both daemons serve on an HTTP listener (tdrouterd's
``listener { http: yes }``, tdbroker's acceptor ``protocols=HTTP``); what differs between them (who may
log in, what they may do, the metrics, readiness, how a management request reaches an agent) is a
:class:`Site` (router/httpserve.py, broker/httpserve.py). docs/console.md describes the endpoints:

* ``GET /healthz``: 200 when ready, 503 when not, with a small JSON body (no login asked: it says nothing
  but ready or not and why, as a load balancer's or Kubernetes' probe needs);
* ``GET /metrics``: Prometheus text (login as the listener asks, and the right to manage);
* ``POST /api/management``: one management request as a JSON object (below), answered with
  ``{"status", "description", "body"}`` (login and the right to manage);
* ``GET /api/ws``: WebSocket; each text message is such a request with an ``id``, answered with the
  response and the same ``id`` (login at the upgrade);
* ``GET /api/whoami``: the logged-in user, whether they may manage (the console hides CREATE/DELETE
  otherwise), and what serves the page (``kind`` router or broker, its ``id``);
* anything else: the console's static files.

A JSON management request names the AMQP management request's application properties (``operation``,
``type``, ``name``, ``identity``, ``entityType``, ``offset``, ``count`` and any other string or number
property an operation takes) and its ``body``; ``attributeNames`` (QUERY) may be given at the top as
well. ``node`` asks another router of the mesh (its id), as ``qdmanage -r`` does. The request becomes
an AMQP management message and goes through the agent's ordinary entry point, so it is checked and
answered exactly as one that came over AMQP.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import trio

from wire import management as wm
from wire.http import (JSON_TYPE, PROMETHEUS_TYPE, HttpRequest, HttpResponse, WebSocketSession, basic_credentials,
                       json_response, static_file, text_response, to_json, unauthorized)

log = logging.getLogger("wire.httpmgmt")

MANAGEMENT_PATH = "/api/management"
WEBSOCKET_PATH = "/api/ws"
WHOAMI_PATH = "/api/whoami"
METRICS_PATH = "/metrics"
HEALTHZ_PATH = "/healthz"
#: Where the console's files are when no httpRootDir is configured: in the installed package.
CONSOLE_DIR = Path(__file__).resolve().parent / "console"
#: Keys of a JSON request that are not application properties.
_NOT_PROPERTIES = ("body", "node", "id", "attributeNames")
#: A verified (user, password) pair is remembered this long, so a console polling every two seconds
#: does not pay a password-hash check (thousands of PBKDF2 rounds) per request.
CREDENTIAL_CACHE_SECONDS = 60.0
#: Most remembered pairs; past it the memo starts again (a client cycling passwords cannot grow it).
CREDENTIAL_CACHE_MAX = 64


@dataclass
class Principal:
    """Who sent a request: ``user`` (None: anonymous) and whether they may use management and metrics;
    ``release`` is called when the request is over (a vhost policy's connection count)."""

    user: str | None
    may_manage: bool
    release: Any = None

    def done(self) -> None:
        if self.release is not None:
            self.release()
            self.release = None


class Site(Protocol):
    """What a daemon gives its ConsoleApp."""

    realm: str
    kind: str   # "router" or "broker": which pages the console shows

    def node_id(self) -> str:
        """The router id or broker name."""

    def authenticate(self, request: HttpRequest, credentials: tuple[str, str] | None) -> Principal | HttpResponse:
        """The principal, or the response refusing the request (401 without valid credentials where a
        login is required, 403 where a policy refuses the user)."""

    def metrics(self) -> str: ...

    def health(self) -> tuple[bool, dict]: ...

    async def management(self, message: bytes, node: str | None) -> bytes | None:
        """Answer one AMQP management request message (bytes) as the agent would; None: no answer."""


def request_message(obj: Any, correlation_id: Any) -> bytes:
    """The AMQP management request for a JSON request object; ManagementError 400 when it is not one."""
    if not isinstance(obj, dict):
        raise wm.bad_request("a management request is a JSON object")
    operation = obj.get("operation")
    if not isinstance(operation, str) or not operation:
        raise wm.bad_request("missing 'operation'")
    props = {}
    for key, value in obj.items():
        if key in _NOT_PROPERTIES or key == "operation":
            continue
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise wm.bad_request(f"'{key}' must be a string or an integer")
        props[key] = value
    body = obj.get("body")
    names = obj.get("attributeNames")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise wm.bad_request("'attributeNames' must be a list of strings")
        body = dict(body or {}, attributeNames=names)
    kind = props.pop("type", wm.NODE_TYPE)
    return wm.build_request(operation, type=kind, body=body, reply_to="$http", correlation_id=correlation_id,
                            **props)


def response_object(reply: bytes | None) -> dict:
    """A management response message as the JSON object the console gets."""
    if reply is None:
        return {"status": wm.INTERNAL_ERROR, "description": "no answer", "body": {}}
    resp = wm.parse_response(reply)
    return {"status": resp.status, "description": resp.description, "body": resp.body}


class _CredentialMemo:
    """(user, password digest) pairs verified recently (see CREDENTIAL_CACHE_SECONDS)."""

    def __init__(self):
        self._seen: dict[tuple[str, bytes], float] = {}

    @staticmethod
    def _key(user: str, password: str) -> tuple[str, bytes]:
        return user, hashlib.sha256(password.encode("utf-8", "surrogatepass")).digest()

    def known(self, user: str, password: str) -> bool:
        t = self._seen.get(self._key(user, password))
        return t is not None and trio.current_time() - t < CREDENTIAL_CACHE_SECONDS

    def remember(self, user: str, password: str) -> None:
        if len(self._seen) >= CREDENTIAL_CACHE_MAX:
            self._seen.clear()
        self._seen[self._key(user, password)] = trio.current_time()


def check_password(users, memo: _CredentialMemo, user: str, password: str) -> bool:
    """``users.check_plain`` (wire/users.py) with the memo in front of it."""
    if memo.known(user, password):
        return True
    if users is None or not users.check_plain(user, password):
        return False
    memo.remember(user, password)
    return True


class ConsoleApp:
    """The HTTP application of one HTTP listener (wire.http.HttpApp)."""

    websocket_paths = (WEBSOCKET_PATH,)

    def __init__(self, site: Site, console_root: Path | None = None, *, metrics: bool = True,
                 healthz: bool = True, websockets: bool = True):
        self.site = site
        self.console_root = Path(console_root) if console_root else CONSOLE_DIR
        self.serve_metrics = metrics
        self.serve_healthz = healthz
        self.websocket_paths = (WEBSOCKET_PATH,) if websockets else ()
        self._next_id = 0

    # -- plain requests -------------------------------------------------------------------------------
    async def handle(self, request: HttpRequest) -> HttpResponse:
        if request.path == HEALTHZ_PATH and self.serve_healthz and request.method in ("GET", "HEAD"):
            ready, detail = self.site.health()
            return json_response(200 if ready else 503, dict(detail, status="ready" if ready else "not ready"))
        principal = self._principal(request)
        if isinstance(principal, HttpResponse):
            return principal
        try:
            return await self._handle(request, principal)
        finally:
            principal.done()

    async def _handle(self, request: HttpRequest, principal: Principal) -> HttpResponse:
        path, method = request.path, request.method
        if path == WHOAMI_PATH:
            return json_response(200, {"user": principal.user, "mayManage": principal.may_manage,
                                       "kind": self.site.kind, "id": self.site.node_id()})
        if path == METRICS_PATH and self.serve_metrics:
            if method not in ("GET", "HEAD"):
                return _not_allowed("GET")
            if not principal.may_manage:
                return text_response(403, "forbidden: this user may not read management data\n")
            return text_response(200, self.site.metrics(), PROMETHEUS_TYPE)
        if path == MANAGEMENT_PATH:
            if method != "POST":
                return _not_allowed("POST")
            refusal = _cross_site_refusal(request)
            if refusal is not None:
                return refusal
            try:
                obj = json.loads(request.body)
            except (ValueError, UnicodeDecodeError) as exc:
                return json_response(400, {"status": 400, "description": f"body is not JSON: {exc}", "body": {}})
            answer = await self.call(obj, principal)
            return json_response(200 if answer["status"] < 400 else answer["status"], answer)
        if method not in ("GET", "HEAD"):
            return _not_allowed("GET")
        return static_file(self.console_root, path)

    def _principal(self, request: HttpRequest) -> Principal | HttpResponse:
        credentials = basic_credentials(request)
        if request.header("authorization") and credentials is None:
            return unauthorized(self.site.realm)
        return self.site.authenticate(request, credentials)

    async def call(self, obj: Any, principal: Principal) -> dict:
        """One JSON management request, answered as a JSON object."""
        if not principal.may_manage:
            who = principal.user or "anonymous"
            return {"status": wm.FORBIDDEN, "description": f"user {who!r} may not use management", "body": {}}
        self._next_id += 1
        try:
            message = request_message(obj, f"http-{self._next_id}")
        except wm.ManagementError as exc:
            return {"status": exc.status, "description": exc.description, "body": {}}
        node = obj.get("node")
        if node is not None and not isinstance(node, str):
            return {"status": wm.BAD_REQUEST, "description": "'node' must be a router id", "body": {}}
        try:
            return response_object(await self.site.management(message, node))
        except wm.ManagementError as exc:
            return {"status": exc.status, "description": exc.description, "body": {}}

    # -- WebSocket ------------------------------------------------------------------------------------
    def websocket_refusal(self, request: HttpRequest) -> HttpResponse | None:
        if not _same_origin(request):
            return text_response(403, "forbidden: cross-origin WebSocket\n")
        principal = self._principal(request)
        if isinstance(principal, HttpResponse):
            return principal
        principal.done()
        return None

    async def websocket(self, request: HttpRequest, session: WebSocketSession) -> None:
        principal = self._principal(request)
        if isinstance(principal, HttpResponse):
            return
        try:
            while True:
                text = await session.receive()
                try:
                    obj = json.loads(text)
                except ValueError as exc:
                    await session.send(to_json({"status": 400, "description": f"not JSON: {exc}", "body": {}}))
                    continue
                answer = await self.call(obj, principal)
                if isinstance(obj, dict) and "id" in obj:
                    answer["id"] = obj["id"]
                await session.send(to_json(answer))
        finally:
            principal.done()


def _same_origin(request: HttpRequest) -> bool:
    """A browser names the page's origin in ``Origin``; a request from another site's page must not use the
    credentials the browser keeps for this one (tools send no Origin and are not affected). An origin is
    scheme, host and port (RFC 6454 §4): a plain-HTTP page at the same host and port is another origin
    than this HTTPS listener, and the other way round."""
    origin = request.header("origin")
    if origin is None:
        return True
    scheme = "https" if request.tls is not None else "http"
    return origin.rstrip("/") == f"{scheme}://{request.header('host') or ''}"


def _cross_site_refusal(request: HttpRequest) -> HttpResponse | None:
    """Management changes things: a POST must be JSON (another site's page cannot send that without a CORS
    preflight, which is never answered) and, from a browser, from this origin."""
    ctype = (request.header("content-type") or "").split(";")[0].strip().lower()
    if ctype != JSON_TYPE:
        return text_response(415, "a management request is Content-Type: application/json\n")
    if not _same_origin(request):
        return text_response(403, "forbidden: cross-origin request\n")
    return None


def _not_allowed(allowed: str) -> HttpResponse:
    return text_response(405, "method not allowed\n", headers=[("Allow", allowed)])
