"""A small blocking AMQP client on wire's sans-IO engine, for tools that must log in with SCRAM.

Why it exists: proton's Python binding ships its SASL without Cyrus SASL, so its clients
(``proton.utils.BlockingConnection``, the reactor) log in with ANONYMOUS, PLAIN or EXTERNAL only, never
SCRAM-SHA-256/512 (RFC 5802, RFC 7677). wire's own SASL client (:class:`wire.sasl.SaslClient`) does SCRAM in
front of a :class:`wire.connection.EngineConnection`, which is how connectors and tdbench log in; this
module drives one such engine over a stdlib socket (and the stdlib ``ssl`` module for TLS) so that tdstat
and tdmanage (:mod:`tools.mgmtclient`) can log in with SCRAM too, without a Trio loop.

It does only what a request/response tool needs: :meth:`EngineClient.connect`, a dynamic receiver
(:meth:`EngineClient.dynamic_receiver`, its address assigned by the peer's attach, AMQP 1.0 §3.5.3
``dynamic``), senders by address (:meth:`EngineClient.sender`), :meth:`Sender.send` of one message (bytes)
waiting for its outcome, :meth:`Receiver.receive` of the next message, and :meth:`EngineClient.close`.
Every wait has a timeout; failures are :class:`EngineClientError` subclasses whose text carries the AMQP
error condition (a refused SASL login is :class:`LoginRefused` and says so). Passwords never appear in
messages.

Both links are owned through :mod:`wire.assembly` (whole messages to :meth:`EngineClient.on_message`,
outcomes to :meth:`EngineClient.on_delivery_update`), and per-delivery work uses :mod:`wire.raw`, as the
router and the broker do. Received messages are accepted and settled as they arrive (a management reply
needs no other outcome); credit is granted only while :meth:`Receiver.receive` waits, ``RECEIVER_CREDIT``
at a time, so what waits to be taken stays bounded.
"""

from __future__ import annotations

import socket
import ssl
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlparse

import proton

from wire import raw
from wire.assembly import KEEP
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from wire.sasl import warn_plaintext_password
from wire.saslserver import AUTH_FAILED

DEFAULT_TIMEOUT = 10.0
AMQP_PORT = 5672
AMQPS_PORT = 5671
READ_CHUNK = 64 * 1024
# Credit a receiver grants when the application asks for a message and none is waiting: replies come one
# per request, so one is enough and nothing piles up. proton's BlockingReceiver does the same (credit only
# while receive() waits), so the tool's own reply link looks the same in tdstat -l whichever client made it.
RECEIVER_CREDIT = 1
# The largest message a receiver takes (bytes, advertised as the link's max-message-size): a management
# reply to a paged query stays far below it; a peer sending more must not make the tool hold without limit.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
# How long close() waits for the peer's CLOSE before the socket goes anyway.
CLOSE_GRACE_SECONDS = 2.0
# A tool sends requests only while it is pumping the engine, so it asks the peer for no heartbeats (idle
# time-out 0); it still answers the peer's own idle time-out with empty frames while it waits.
CLIENT_IDLE_TIMEOUT = 0


class EngineClientError(Exception):
    """The connection or a link failed; the text says why (with the AMQP condition when there was one)."""


class LoginRefused(EngineClientError):
    """The SASL exchange failed: wrong user or password, no common mechanism, or a server that could not
    prove it knows the password (SCRAM's server signature)."""


class LinkRefused(EngineClientError):
    """The peer refused or detached a link."""


class DeliveryRefused(EngineClientError):
    """A sent message was not accepted (rejected, released or modified)."""


class Timeout(EngineClientError, TimeoutError):
    """Something awaited did not happen in time."""


_OUTCOMES = {raw.ACCEPTED: "accepted", raw.REJECTED: "rejected", raw.RELEASED: "released",
             raw.MODIFIED: "modified"}


def _condition_text(name: str | None, description: str | None) -> str:
    if name is None:
        return ""
    return f"{name}: {description}" if description else name


@dataclass(eq=False)
class _Link:
    """The client's record of one of its links (the engine's ``own_link`` record, wire/assembly.py)."""

    client: "EngineClient"
    obj: proton.Link  # the object-API view, kept for the link's life
    incoming: bool
    address: str | None
    max_message_size: int = 0
    opened: bool = False   # the peer answered our attach
    error: str | None = None  # set when the peer detached it (or the connection ended)
    messages: deque = field(default_factory=deque)
    outcomes: dict = field(default_factory=dict)  # delivery pointer -> (outcome code, rejection text), once final

    @property
    def owner(self) -> "EngineClient":
        return self.client

    @property
    def ptr(self):
        return raw.pointer(self.obj)


class Sender:
    """A sending link to one address."""

    def __init__(self, client: "EngineClient", link: _Link):
        self._client = client
        self._link = link
        self._seq = 0

    @property
    def address(self) -> str | None:
        return self._link.address

    def send(self, data: bytes, timeout: float | None = None) -> str:
        """Send one encoded message and wait until the peer settles it; returns ``"accepted"``.

        Timeout when no credit or no outcome came in time; DeliveryRefused for any other outcome."""
        client, link = self._client, self._link
        deadline = client.deadline(timeout)
        client.pump(lambda: link.error is not None or raw.link_credit(link.ptr) > 0, deadline,
                    f"credit to send to {link.address}")
        client.check_link(link)
        self._seq += 1
        d = raw.send_ring_tagged(link.ptr, self._seq, bytes(data))
        client.pump(lambda: link.error is not None or d in link.outcomes, deadline,
                    f"an outcome for the message sent to {link.address}")
        if d not in link.outcomes:
            client.check_link(link)
        outcome, condition = link.outcomes.pop(d)
        if outcome != raw.ACCEPTED:
            name = _OUTCOMES.get(outcome, f"outcome {outcome}")
            raise DeliveryRefused(f"message to {link.address} {name}" + (f": {condition}" if condition else ""))
        return "accepted"


class Receiver:
    """A receiving link; messages are accepted as they arrive and handed out by :meth:`receive`."""

    def __init__(self, client: "EngineClient", link: _Link):
        self._client = client
        self._link = link

    @property
    def address(self) -> str | None:
        """The source address: for a dynamic receiver, the one the peer assigned (a reply-to address)."""
        return self._link.address

    def receive(self, timeout: float | None = None) -> bytes:
        """The next message (encoded bytes); Timeout when none came in time."""
        client, link = self._client, self._link
        if not link.messages:
            if link.error is None and raw.link_credit(link.ptr) == 0:
                raw.link_flow(link.ptr, RECEIVER_CREDIT)
            client.pump(lambda: bool(link.messages) or link.error is not None, client.deadline(timeout),
                        f"a message from {link.address}")
        if not link.messages:
            client.check_link(link)
        return link.messages.popleft()


class _Handler(ConnectionHandler):
    """The engine's cold events for the client (its links' per-delivery events go to the link owner)."""

    def __init__(self, client: "EngineClient"):
        self.client = client

    def on_link_open(self, conn, link) -> None:
        conn.refuse_link(link, "amqp:not-allowed", "this client does not accept links from its peer")

    def on_link_opened(self, conn, link) -> None:
        rec = self.client.links.get(link)
        if rec is not None:
            rec.opened = True
            if rec.incoming:
                rec.address = raw.link_object(link).remote_source.address

    def on_link_close(self, conn, link, closed: bool) -> None:
        rec = self.client.links.pop(link, None)
        if rec is not None:
            # The engine frees the link after this call: the record must not touch it again.
            text = _condition_text(*raw.link_remote_condition(link))
            rec.error = f"link to {rec.address} {'closed' if closed else 'detached'} by the peer" + \
                (f": {text}" if text else "")

    def on_connection_close(self, conn) -> None:
        self.client.connection_ended()


class EngineClient:
    """One blocking AMQP connection on :class:`wire.connection.EngineConnection`; a context manager.

    ``settings``: the engine's :class:`wire.connection.ConnectionSettings`; its ``sasl_client_mechanisms``,
    ``sasl_username`` and ``sasl_password`` choose the SASL login exactly as for a connector (our
    SaslClient for SCRAM and PLAIN, else ANONYMOUS). ``ssl_context`` (a client context, e.g.
    :meth:`wire.tls.TlsProfile.client_context`) turns TLS on; ``server_hostname`` is the name the server's
    certificate must carry (and SNI sends), the host dialled by default.
    """

    def __init__(self, host: str, port: int, settings: ConnectionSettings | None = None, *,
                 ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT):
        self.timeout = timeout
        self.peer = f"{host}:{port}"
        self.links: dict = {}  # link pointer -> _Link, while the link is attached
        self.ended: str | None = None  # why the connection is over, once it is
        self._closing = False
        self._login_refused = False
        settings = settings or ConnectionSettings()
        self.container_id = settings.container_id
        deadline = self.deadline(timeout)
        self.sock = self._open_socket(host, port, ssl_context, server_hostname or host, timeout)
        if ssl_context is None:
            warn_plaintext_password(settings, self.peer)  # PLAIN in clear to another machine: a warning
        try:
            self.engine = EngineConnection(_Handler(self), settings, server=False, remote_host=self.peer,
                                           virtual_host=host)
            self.pump(lambda: self.engine.opened_at_remote, deadline, "the connection to open")
            self.check_connection()  # a refusal is an OPEN followed at once by a CLOSE (AMQP 1.0 §2.4.1)
            self._session = self.engine.connection.session()
            self._session.open()
        except BaseException:
            self._close_socket()
            raise

    @classmethod
    def connect(cls, url: str, *, username: str | None = None, password: str | None = None,
                mechanisms: str | None = None, ssl_context: ssl.SSLContext | None = None,
                server_hostname: str | None = None, timeout: float = DEFAULT_TIMEOUT,
                container_id: str | None = None) -> "EngineClient":
        """Connect to ``amqp[s]://host[:port]``; ``amqps`` needs ``ssl_context``. With ``username``, log in
        with the first of ``mechanisms`` ("SCRAM-SHA-512 SCRAM-SHA-256 PLAIN" by default) the server
        offers; without, ANONYMOUS."""
        parts = urlparse(url if "://" in url else "amqp://" + url)
        tls = parts.scheme.lower() == "amqps"
        if parts.scheme.lower() not in ("amqp", "amqps") or not parts.hostname:
            raise EngineClientError(f"{url}: not an amqp:// or amqps:// URL")
        if tls and ssl_context is None:
            raise EngineClientError(f"{url}: amqps:// needs a TLS context")
        sasl: dict = {}
        if username:
            sasl = {"sasl_username": username, "sasl_password": password or "",
                    "sasl_client_mechanisms": mechanisms or "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"}
        settings = ConnectionSettings(container_id=container_id or str(uuid.uuid4()),  # as proton names containers
                                      offered_capabilities=(), idle_timeout_seconds=CLIENT_IDLE_TIMEOUT, **sasl)
        return cls(parts.hostname, parts.port or (AMQPS_PORT if tls else AMQP_PORT), settings,
                   ssl_context=ssl_context if tls else None, server_hostname=server_hostname, timeout=timeout)

    # -- links --------------------------------------------------------------------------------------------
    def dynamic_receiver(self, timeout: float | None = None, *, credit: int = 0) -> Receiver:
        """A receiver whose source the peer creates; its address (for reply-to) is the peer's choice.

        ``credit``: messages the peer may send before :meth:`Receiver.receive` is called (the caller's bound
        on what waits); with 0, credit is granted only while receive() waits."""
        obj = self._session.receiver(f"{self.container_id}-{uuid.uuid4()}")  # link names as proton's
        obj.source.dynamic = True
        obj.max_message_size = MAX_MESSAGE_BYTES
        rec = self._attach(obj, incoming=True, address=None, timeout=timeout)
        if not rec.address:
            raise LinkRefused(f"{self.peer} attached the dynamic receiver without assigning an address")
        if credit:
            raw.link_flow(rec.ptr, credit)
            self.flush()
        return Receiver(self, rec)

    def sender(self, address: str, timeout: float | None = None) -> Sender:
        """A sender to ``address`` (attached; credit comes when the peer gives it)."""
        obj = self._session.sender(f"{self.container_id}-{address}")
        obj.target.address = address
        obj.source.address = None
        return Sender(self, self._attach(obj, incoming=False, address=address, timeout=timeout))

    def _attach(self, obj: proton.Link, *, incoming: bool, address: str | None, timeout: float | None) -> _Link:
        self.check_connection()
        rec = _Link(self, obj, incoming, address, MAX_MESSAGE_BYTES if incoming else 0)
        self.links[rec.ptr] = rec
        self.engine.own_link(rec.ptr, rec)
        obj.open()
        what = "the dynamic receiver" if incoming else f"the sender to {address}"
        self.pump(lambda: rec.opened or rec.error is not None, self.deadline(timeout), f"{what} to attach")
        self.check_link(rec)
        return rec

    # -- wire.assembly.LinkOwner: whole messages and outcomes of our links -----------------------------------
    def on_message(self, engine, rec: _Link, d, msg: bytes | None) -> None:
        if not raw.delivery_settled(d):
            raw.delivery_update(d, raw.ACCEPTED)
        raw.delivery_settle(d)
        if msg is not None:
            rec.messages.append(msg)

    def on_partial(self, engine, rec: _Link, d, held: int) -> int:
        return KEEP  # the link's max_message_size bounds what is kept

    def on_delivery_update(self, engine, rec: _Link, d) -> None:
        if rec.incoming:
            return  # an incoming delivery already settled on arrival
        state = raw.delivery_remote_state(d)
        if state in raw.TERMINAL_STATES or raw.delivery_settled(d):
            condition = _condition_text(*raw.remote_condition(d)) if state == raw.REJECTED else ""
            rec.outcomes[d] = (state, condition)
            raw.delivery_settle(d)

    def on_link_flow(self, engine, rec: _Link) -> None:
        pass  # senders look at their credit when they need it

    def on_oversized(self, engine, rec: _Link, d, limit: int) -> None:
        self.links.pop(rec.ptr, None)
        rec.error = f"a message from {rec.address} was larger than this client's {limit}-byte limit"

    # -- the blocking loop ----------------------------------------------------------------------------------
    def deadline(self, timeout: float | None) -> "Deadline":
        return Deadline(self.timeout if timeout is None else timeout)

    def pump(self, done: Callable[[], bool], deadline: "Deadline", what: str) -> None:
        """Move bytes between the socket and the engine until ``done()``, or raise: the reason the
        connection ended, or Timeout naming ``what`` once ``deadline`` has passed."""
        engine = self.engine
        while True:
            self.flush()
            if done():
                return
            self.check_connection()
            now = time.monotonic()
            if now >= deadline.at:
                raise Timeout(f"no {what} within {deadline.seconds:g} s")
            tick = engine.tick(now)
            self.flush()
            wait = deadline.at - now
            if tick:
                wait = min(wait, max(tick - now, 0.0))
            self._read(max(wait, 0.001))

    def flush(self) -> None:
        """Write everything the engine has to say."""
        engine = self.engine
        while True:
            out = engine.take_output()
            if not out:
                return  # b"": nothing more now; None: the engine has said its last
            try:
                self.sock.sendall(out)
            except OSError as exc:
                self._lost(_os_error_text(exc))
                return

    def _read(self, wait: float) -> None:
        try:
            self.sock.settimeout(wait)
            data = self.sock.recv(READ_CHUNK)
        except (socket.timeout, ssl.SSLWantReadError):
            return
        except OSError as exc:
            self._lost(_os_error_text(exc))
            return
        if data:
            self.engine.feed(data)
        else:
            self.engine.feed_eof()

    def _lost(self, why: str) -> None:
        if self.ended is None and not self._closing:
            self.ended = f"connection to {self.peer} lost: {why}"
        self.engine.abort()

    def connection_ended(self) -> None:
        """The engine reports the connection over (the handler's on_connection_close)."""
        for rec in self.links.values():
            rec.error = rec.error or "the connection ended"
        self.links.clear()
        if self.ended is not None or self._closing:
            return
        engine = self.engine
        sasl = engine.sasl
        if sasl is not None and sasl.failed:  # our SASL client (SCRAM, PLAIN) says why
            verdict = "refused" if (sasl.error or "").startswith(AUTH_FAILED) else "failed"
            self._login_refused = True
            self.ended = f"SASL login to {self.peer} {verdict}: {sasl.error}"
            return
        if engine.remote_closed:
            text = _condition_text(*raw.connection_remote_condition(raw.pointer(engine.connection)))
            self.ended = f"connection closed by {self.peer}" + (f": {text}" if text else "")
            return
        # proton's SASL (ANONYMOUS) reports through the transport's condition, possibly only after this call
        name, description = raw.transport_condition(raw.pointer(engine.transport))
        if name == AUTH_FAILED and not engine.opened_at_remote:
            self._login_refused = True
            self.ended = (f"SASL login to {self.peer} refused: {_condition_text(name, description)}"
                          + ("" if engine.settings.sasl_username else
                             " (an anonymous login: the server asks for a user name and password)"))
            return
        why = engine.error or _condition_text(name, description)
        self.ended = f"connection to {self.peer} lost" + (f": {why}" if why else "")

    def check_connection(self) -> None:
        """Raise the reason the connection ended, if it did."""
        if self.ended is None and self.engine.finished and not self._closing:
            self.connection_ended()
        if self.ended is not None:
            raise (LoginRefused if self._login_refused else EngineClientError)(self.ended)

    def check_link(self, rec: _Link) -> None:
        self.check_connection()
        if rec.error is not None:
            raise LinkRefused(rec.error)

    # -- opening and closing --------------------------------------------------------------------------------
    @staticmethod
    def _open_socket(host: str, port: int, context: ssl.SSLContext | None, server_hostname: str,
                     timeout: float) -> socket.socket:
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise EngineClientError(f"cannot connect to {host}:{port}: {_os_error_text(exc)}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if context is None:
            return sock
        try:
            return context.wrap_socket(sock, server_hostname=server_hostname)
        except ssl.SSLCertVerificationError as exc:
            sock.close()
            raise EngineClientError(f"TLS with {host}:{port}: certificate verify failed: "
                                    f"{exc.verify_message or exc}") from None
        except (ssl.SSLError, OSError) as exc:
            sock.close()
            raise EngineClientError(f"TLS with {host}:{port} failed: {_os_error_text(exc)}") from None

    def close(self) -> None:
        """Close the connection (a CLOSE frame, and the peer's answer for up to CLOSE_GRACE_SECONDS)."""
        if self._closing:
            return
        try:
            if self.ended is None and not self.engine.finished:
                self.engine.close()
                self._closing = True
                try:
                    self.pump(lambda: self.engine.remote_closed or self.engine.finished,
                              Deadline(CLOSE_GRACE_SECONDS),
                              "answer to our close")
                except EngineClientError:
                    pass  # closing: the peer's answer is a courtesy
        finally:
            self._closing = True
            self.engine.abort()
            self.engine.dispose()
            self._close_socket()

    def _close_socket(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> "EngineClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Deadline:
    """When a wait ends (time.monotonic()), and the timeout it came from (for the message)."""

    __slots__ = ("at", "seconds")

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.at = time.monotonic() + seconds


def _os_error_text(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
