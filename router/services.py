"""Listeners and connectors as services that can be added and removed while the router runs.

The daemon starts the configured ones through :class:`ServiceManager` and the management agent adds and
removes others (CREATE/DELETE of ``listener`` and ``connector``). ``add`` is synchronous so that the
agent can answer a CREATE with the outcome: a listener's sockets are bound and listening before ``add``
returns (a port in use is an ``OSError`` the agent reports as 400), and accepting starts at the next
schedule point. Each service runs in its own cancel scope inside the daemon's nursery:

* removing a listener closes its listening sockets; connections it already accepted stay up (as in
  Dispatch), because they run in the daemon's nursery, not in the listener's scope;
* removing a connector closes its connection with a close frame and stops reconnecting.
"""

from __future__ import annotations

import errno
import logging
import socket
from dataclasses import dataclass, field
from typing import Any, Callable

import trio

from wire.driver import Backoff, ConnectionLimit, backing_off, connection_handler, run_connector

log = logging.getLogger("router.services")

# How long a removed connector's peer gets to answer our close frame before the socket is dropped.
CONNECTOR_CLOSE_GRACE_SECONDS = 2.0
# How often a removed connector's closing connection is looked at during that grace period.
CLOSE_POLL_SECONDS = 0.02


def bind_tcp_listeners(host: str, port: int) -> list[trio.SocketListener]:
    """Bind and listen now (synchronously), as trio.open_tcp_listeners would: every address ``host``
    resolves to (all IPv4 and IPv6 interfaces for an empty host), SO_REUSEADDR, IPv6 sockets v6-only.
    Raises OSError (address in use, unknown host...) with nothing left open."""
    infos = socket.getaddrinfo(host or None, port, socket.AF_UNSPEC, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    seen = set()
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _canon, sockaddr in infos:
            if (family, sockaddr) in seen:
                continue
            seen.add((family, sockaddr))
            try:
                sock = socket.socket(family, type_, proto)
            except OSError as exc:
                if exc.errno == errno.EAFNOSUPPORT:
                    continue  # a family this kernel does not have: skip it, as trio does
                raise
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(sockaddr)
            sock.listen(socket.SOMAXCONN)
        if not socks:
            raise OSError(errno.EADDRNOTAVAIL, f"no usable address for {host!r}")
    except BaseException:
        for s in socks:
            s.close()
        raise
    return [trio.SocketListener(trio.socket.from_stdlib_socket(s)) for s in socks]


@dataclass(eq=False)
class Service:
    """One listener or connector: its configuration entity and the scope its task runs in."""

    kind: str
    entity: Any
    settings: Any
    tls: Any = None  # listener: wire.tls.ServerTls; connector: wire.tls.ClientTls; None: plaintext
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    listeners: list = field(default_factory=list)
    bound: list = field(default_factory=list)  # (host, port) of each listening socket
    engine: Any = None  # connector: the current connection's engine
    state: str = "CONNECTING"
    message: str = ""
    stopping: bool = False

    @property
    def name(self) -> str:
        return self.entity["name"]

    def status(self) -> dict:
        """Extra management attributes (connector: connectionStatus/connectionMsg, as Dispatch)."""
        if self.kind != "connector":
            return {}
        host, port = self.entity.get("host") or "127.0.0.1", self.entity.get("port")
        scheme = "amqps" if self.tls is not None else "amqp"
        return {"connectionStatus": self.state, "connectionMsg": self.message,
                "failoverUrls": f"{scheme}://{host}:{port}"}


def role_refusal(mode: str, kind: str, role: str | None) -> str | None:
    """Why a router in ``mode`` cannot have a ``kind`` (listener/connector) of ``role``, as Qpid Dispatch
    refuses it (its connection manager checks the router mode): a standalone router joins no mesh, and an
    edge router has one kind of router connection, its uplink connector. None when allowed."""
    role = role or "normal"
    if mode == "standalone" and role == "inter-router":
        return f"a standalone router cannot have an inter-router {kind}; set router mode: interior"
    if mode == "edge" and kind == "listener" and role in ("inter-router", "edge"):
        return f"an edge router cannot have an {role} listener (only interior routers accept them)"
    if mode == "edge" and kind == "connector" and role == "inter-router":
        return "an edge router cannot have an inter-router connector; connect to an interior with role: edge"
    return None


class ServiceManager:
    """The running listeners and connectors, by kind and name."""

    def __init__(self, router, nursery: trio.Nursery, settings_for: Callable, *, announce=print,
                 connection_limit: ConnectionLimit | None = None):
        self.router = router
        # Router-wide limit on connections accepted by all listeners (Dispatch's policy maxConnections).
        self.connection_limit = connection_limit or ConnectionLimit(0)
        self.nursery = nursery
        self.settings_for = settings_for  # (router, entity, server=bool) -> (ConnectionSettings, TLS or None)
        self.announce = announce
        self._services: dict[str, dict[str, Service]] = {"listener": {}, "connector": {}}

    def services(self, kind: str) -> list[Service]:
        return list(self._services[kind].values())

    def add(self, kind: str, entity) -> Service:
        """Start a listener (bound before this returns) or a connector. ValueError on a taken name."""
        table = self._services[kind]
        if entity["name"] in table:
            raise ValueError(f"name '{entity['name']}' is already in use")
        refusal = role_refusal(self.router.mode, kind, entity.get("role"))
        if refusal is not None:
            raise ValueError(refusal)
        settings, tls = self.settings_for(self.router, entity, server=kind == "listener")
        svc = Service(kind, entity, settings, tls)
        if kind == "listener":
            svc.listeners = bind_tcp_listeners(entity.get("host") or "", int(entity["port"]))
            for lst in svc.listeners:
                h, p = lst.socket.getsockname()[:2]
                svc.bound.append((h, p))
                self.announce(f"tdrouterd: listening on {h}:{p} "
                              f"(listener {svc.settings.name or '-'}, role {svc.settings.role})", flush=True)
            self.nursery.start_soon(self._serve, svc)
        else:
            self.nursery.start_soon(self._connect, svc)
        table[svc.name] = svc
        return svc

    def remove(self, kind: str, name: str) -> None:
        """Stop a service; KeyError when there is none of that name."""
        svc = self._services[kind].pop(name)
        svc.stopping = True
        if kind == "listener":
            svc.scope.cancel()  # the task closes the sockets as it leaves the scope
            log.info("listener %s removed", name)
            return
        engine = svc.engine
        if engine is None or engine.finished:
            svc.scope.cancel()
        else:
            engine.close()  # a close frame first; the task is cancelled when the handshake is over
            self.nursery.start_soon(self._finish_close, svc)
        log.info("connector %s removed", name)

    # -- tasks ----------------------------------------------------------------------------------
    async def _serve(self, svc: Service) -> None:
        router, settings = self.router, svc.settings

        def make_engine(remote: str):
            return router.new_engine(settings, server=True, remote_host=remote)

        handle = connection_handler(
            make_engine, limits=(self.connection_limit,),
            handshake_timeout=float(svc.entity.get("initialHandshakeTimeoutSeconds") or 0), tls=svc.tls)
        svc.listeners = backing_off(svc.listeners)

        with svc.scope:
            try:
                # Accepted connections live in the daemon's nursery: removing the listener keeps them.
                await trio.serve_listeners(handle, svc.listeners, handler_nursery=self.nursery)
            except Exception:  # an accept error ends this listener, never the daemon
                log.exception("listener %s stopped", svc.name)
            finally:
                for lst in svc.listeners:
                    lst.socket.close()

    async def _connect(self, svc: Service) -> None:
        e = svc.entity
        host, port = e.get("host") or "127.0.0.1", int(e["port"])
        backoff = Backoff(
            initial=float(e.get("retryDelaySeconds") or 1.0),
            multiplier=float(e.get("retryMultiplier") or 2.0),
            max_delay=float(e.get("retryMaxDelaySeconds") or 60.0),
            max_attempts=int(e.get("retryMaxAttempts") or 0),
        )

        def make_engine(remote: str):
            svc.engine = self.router.new_engine(svc.settings, server=False, remote_host=remote)
            svc.message = f"Connection to {remote} opened"
            return svc.engine

        def on_state(state: str) -> None:
            svc.state = state
            if state == "CONNECTING" and svc.stopping:
                svc.scope.cancel()  # removed: never reconnect

        with svc.scope:
            await run_connector(host, port, make_engine, backoff, on_state=on_state, tls=svc.tls)

    async def _finish_close(self, svc: Service) -> None:
        with trio.move_on_after(CONNECTOR_CLOSE_GRACE_SECONDS):
            while svc.engine is not None and not svc.engine.finished:
                await trio.sleep(CLOSE_POLL_SECONDS)
        svc.scope.cancel()
