"""The broker's acceptors as things that start and stop: Artemis' ``AcceptorControl``.

Each ``<acceptor>`` gets an :class:`AcceptorControl` in ``broker.acceptors`` (by name). Its Trio task
(:meth:`AcceptorControl.run`, in the daemon's nursery) serves the acceptor's connections while it is
started. An acceptor whose URI says ``autoStart=false`` (Artemis' acceptor parameter, "Configuring the
Transport": default true) stays stopped at start-up: nothing listens on its port until :meth:`start`
(the management operation ``startAcceptor``). :meth:`stop` stops listening and closes the acceptor's open
connections with a close frame, as Artemis' ``AcceptorControl.stop`` closes the acceptor's connections.

:meth:`start` binds the listening sockets before it returns, so that a management reply saying "started"
means a client may connect now, and a port that cannot be bound is that call's failure (logged, and
:meth:`describe`'s ``lastError``), not a later one. Binding is a few system calls on the Trio thread; the
host name was resolved once, asynchronously, when the task began.
"""

from __future__ import annotations

import errno
import logging
import socket
import weakref
from typing import Callable

import trio

from wire.connection import EngineConnection
from wire.driver import ConnectionLimit, backing_off, connection_handler

from .configmodel import Acceptor

log = logging.getLogger("broker.acceptors")

#: Listen backlog asked for, as trio.open_tcp_listeners does: the kernel clips it to its own maximum
#: (net.core.somaxconn), so this means "as many as the system allows".
LISTEN_BACKLOG = 0xFFFF
#: The AMQP condition a connection of a stopped acceptor is closed with (AMQP 1.0 §2.8.15: the connection
#: was closed by the container for an administrative reason).
STOPPED_CONDITION = "amqp:connection:forced"


class AcceptorControl:
    """One ``<acceptor>`` that can be started and stopped while the broker runs.

    ``name``, ``host``, ``port`` are as configured (port 0: an ephemeral port per start); ``bound`` is
    the ``(host, port)`` list actually listened on while started (empty when stopped). ``start()`` and
    ``stop()`` are synchronous (call them from the Trio thread); the connections themselves are served by
    the task :meth:`run`. ``on_change`` is called after every start and stop (the daemon re-announces
    the broker's listening addresses with it).
    """

    def __init__(self, acceptor: Acceptor, make_engine: Callable[[str], EngineConnection], *,
                 on_change: Callable[[], None] = lambda: None) -> None:
        self.name = acceptor.name
        self.host = acceptor.host
        self.port = acceptor.port
        self.line = acceptor.line
        self.auto_start = acceptor.auto_start
        self.tls = acceptor.tls
        self.started = False
        self.bound: list[tuple[str, int]] = []
        self.last_error: str | None = None
        self._make_engine = make_engine
        self._on_change = on_change
        limits = ()
        if acceptor.connections_allowed >= 0:
            limits = (ConnectionLimit(acceptor.connections_allowed,
                                      f"connections (acceptor {acceptor.name} connectionsAllowed)"),)
        self._handle = connection_handler(self._new_engine, limits=limits,
                                          handshake_timeout=acceptor.handshake_timeout, tls=acceptor.tls)
        # Engines of this acceptor's connections; weak, so a finished one goes with its connection.
        self._engines: weakref.WeakSet[EngineConnection] = weakref.WeakSet()
        self._addresses: list | None = None   # getaddrinfo results, resolved by run()
        self._serving: tuple[list, trio.CancelScope] | None = None   # this start's listeners and scope
        self._nursery: trio.Nursery | None = None
        self._to_close: list[EngineConnection] = []
        self._changed = trio.Event()

    # -- the operations (Artemis AcceptorControl: start, stop, isStarted) --------------------------
    def listen(self) -> None:
        """Start listening; raises OSError when the port cannot be bound (the daemon's start-up turns
        that into FILE:LINE). Does nothing when started already."""
        if self.started:
            return
        listeners = backing_off(self._bind())
        self.bound = [lst.socket.getsockname()[:2] for lst in listeners]
        self._serving = (listeners, trio.CancelScope())
        self.started = True
        self.last_error = None
        if self._nursery is not None:
            self._nursery.start_soon(self._serve, *self._serving)
        self._on_change()

    def start(self) -> bool:
        """Start listening (management ``startAcceptor``); True when listening. A failure is logged and
        kept as ``last_error`` (describe's ``lastError``), and False returned."""
        if self.started:
            return True
        try:
            self.listen()
        except OSError as exc:
            self.last_error = f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            log.error("acceptor %s: %s", self.name, self.last_error)
            return False
        for host, port in self.bound:
            log.info("acceptor %s: listening on %s:%d", self.name, host, port)
        return True

    def stop(self) -> None:
        """Stop listening and close this acceptor's connections (management ``stopAcceptor``)."""
        if not self.started:
            return
        listeners, scope = self._serving
        self._serving = None
        scope.cancel()   # first: the accepting tasks end cancelled, not with "socket closed" errors
        for lst in listeners:
            lst.socket.close()
        self.started = False
        self.bound = []
        # Closed by run(), outside whatever called stop(): management answers from inside one of these
        # connections' own event processing.
        self._to_close.extend(engine for engine in self._engines if not engine.finished)
        self._changed.set()
        log.info("acceptor %s: stopped (closing %d connections)", self.name, len(self._to_close))
        self._on_change()

    @property
    def connections(self) -> int:
        """This acceptor's open connections."""
        return sum(1 for engine in self._engines if not engine.finished)

    def describe(self) -> dict:
        """The management view (entity ``acceptor``): Artemis AcceptorControl's name and started, plus
        where it listens, its TLS, its connections and the last start failure."""
        return {"name": self.name, "host": self.host, "port": self.port, "started": self.started,
                "autoStart": self.auto_start, "tls": self.tls is not None, "connections": self.connections,
                "bound": [f"{host}:{port}" for host, port in self.bound], "lastError": self.last_error}

    # -- the Trio side ----------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Resolve the host, listen when auto-started (OSError before ``started`` when that fails), then
        serve this acceptor's connections for as long as the broker runs."""
        self._addresses = await trio.socket.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM,
                                                        flags=socket.AI_PASSIVE)
        if self.auto_start:
            self.listen()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                if self._serving is not None:
                    nursery.start_soon(self._serve, *self._serving)
                task_status.started(self)
                while True:
                    await self._changed.wait()
                    self._changed = trio.Event()
                    closing, self._to_close = self._to_close, []
                    for engine in closing:
                        engine.close(STOPPED_CONDITION, f"acceptor {self.name} stopped")
            finally:
                self._nursery = None

    async def _serve(self, listeners: list, scope: trio.CancelScope) -> None:
        with scope:
            await trio.serve_listeners(self._handle, listeners, handler_nursery=self._nursery)

    def _new_engine(self, remote: str) -> EngineConnection:
        engine = self._make_engine(remote)
        if not self.started:
            # Accepted just before stop() (e.g. still in its TLS handshake then): turned away politely.
            engine.refuse(STOPPED_CONDITION, f"acceptor {self.name} is stopped")
        self._engines.add(engine)
        return engine

    def _bind(self) -> list[trio.SocketListener]:
        """Listening sockets on every address of host:port, as trio.open_tcp_listeners makes them, but
        synchronously (see the module docstring)."""
        addresses = self._addresses
        if addresses is None:   # start() before run() resolved the host (tests)
            addresses = socket.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM,
                                           flags=socket.AI_PASSIVE)
        listeners = []
        try:
            for family, kind, proto, _name, address in addresses:
                try:
                    sock = socket.socket(family, kind, proto)
                except OSError as exc:
                    if exc.errno == errno.EAFNOSUPPORT:   # e.g. IPv6 disabled: that address is skipped
                        continue
                    raise
                try:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:   # one socket per family, as trio does
                        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    sock.bind(address)
                    sock.listen(LISTEN_BACKLOG)
                except BaseException:
                    sock.close()
                    raise
                listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        except BaseException:
            for lst in listeners:
                lst.socket.close()
            raise
        if not listeners:
            raise OSError(errno.EAFNOSUPPORT, f"no usable address for {self.host}")
        return listeners


def listening(controls) -> list[tuple[str, int, bool]]:
    """``(host, port, tls)`` of every address the started ``controls`` listen on (what
    broker.network.set_local_acceptors takes)."""
    return [(host, port, ctl.tls is not None) for ctl in controls if ctl.started for host, port in ctl.bound]
