"""The Trio layer: moves bytes between sockets and :class:`wire.connection.EngineConnection`.

One task tree per connection (a reader and a writer in a nursery). The reader reads in large chunks and
lets the engine handle everything the chunk produced; the writer wakes when any engine work happened
(on this connection, or on another one that forwarded to it) and writes all pending output at once.
A failing connection ends its own task tree and nothing else.

A connection's deadlines (proton's heartbeat and idle time-out, the handshake and close deadlines) are
kept by the one timer of :mod:`wire.timers`, which wakes the writer like any other work: a wake-up enters
no cancel scope and puts nothing into Trio's deadline heap, and an idle connection costs nothing until
its next deadline.
"""

from __future__ import annotations

import errno
import logging
import math
import socket
import ssl
from dataclasses import dataclass
from typing import Callable

import trio

from wire.connection import EngineConnection, printable
from wire.sasl import warn_plaintext_password
from wire.saslserver import SaslServer
from wire.sockio import READ_SIZE, READ_VIEW, plain_socket
from wire.timers import current_timers
from wire.tls import CertificateUserIds, ClientTls, ServerTls, peer_info

log = logging.getLogger("wire.driver")

# Reading 64 KiB at a time keeps the per-wakeup overhead low (2 KiB reads cost +28% CPU when measured).
READ_CHUNK = 64 * 1024
# A large read is handled in slices of this size with a schedule point between them, so the output it
# causes (forwarded messages, credit) is written while the rest is still being processed; otherwise a
# producer's whole credit window is read, routed and only then sent, and the two sides take turns
# instead of working in parallel. Measured with tdbench 1x1: +27% msgs/s at 8 KiB (4 KiB: +20%,
# 16 KiB: +11%, 32 KiB: -3%), for ~0.5-1 us more router CPU per message.
FEED_SLICE = 8 * 1024
# ...measured with 100-byte messages, about 60 frames per 8 KiB. A slice is sized to hold about this many
# frames of the size the connection's last large read carried (between FEED_SLICE and READ_CHUNK): at 8 KiB,
# 5 kB messages came 1.6 to a slice, each slice paying a schedule point, a batch end and a socket write for
# so few messages, and cost the router 95-118 us per message against 41-48 us at 64 KiB (tdbench --size
# 5000, interleaved), while 100-byte messages keep their 8 KiB.
SLICE_FRAMES = 64
# While a large message arrives, a plain socket is read this much at a time: fewer wake-ups per message.
LARGE_READ_CHUNK = READ_SIZE
# After we send a close frame, how long the peer gets to answer with its own before the socket goes.
CLOSE_GRACE_SECONDS = 2.0
# Beyond this many doublings every sane max delay is long reached.
MAX_BACKOFF_EXPONENT = 64
# Out of file descriptors (EMFILE/ENFILE) or socket buffers: the accept loop waits before trying again,
# doubling from the first to the last delay while the condition lasts, so a full descriptor table costs
# a few wake-ups a second instead of a busy loop; new clients get in at the first try after one frees.
ACCEPT_BACKOFF_FIRST = 0.01
ACCEPT_BACKOFF_MAX = 1.0
# At most one "out of descriptors" log line per listener this often (seconds); the rest are counted.
ACCEPT_ERROR_LOG_INTERVAL = 10.0
# A connection over its listener's limit is not dropped in silence: it gets an AMQP open + close with
# amqp:resource-limit-exceeded. It may take this long for that; beyond this many of them at once, further
# ones are simply closed (an answer must not cost more than the limit protects).
REFUSE_GRACE_SECONDS = 5.0
MAX_REFUSING = 64
# A TLS record starts with its content type; a handshake record (the ClientHello) is 22 (RFC 8446 §5.1,
# RFC 5246 §6.2.1). An AMQP client starts with "AMQP" (AMQP 1.0 §2.2), so the first byte tells a listener
# whose TLS is optional which one is coming (as Dispatch does on such listeners).
TLS_HANDSHAKE_RECORD = 0x16
# A connector's TLS handshake must finish within this time: a server that accepts TCP and then says
# nothing must not hold the connector for ever (listeners use their handshake timeout instead).
CONNECT_TLS_HANDSHAKE_SECONDS = 30.0
# The AMQP handshake's share of a listener's handshake timeout after TLS used nearly all of it: a tiny
# positive time (0 would mean "no timeout").
MIN_HANDSHAKE_REMAINDER = 1e-3
_ACCEPT_RETRY_ERRNOS = frozenset((errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM))


def next_feed_slice(nbytes: int, frames: int) -> int:
    """The slice for a connection's next large read, after one of ``nbytes`` held ``frames`` frames:
    SLICE_FRAMES frames of that average size, no less than FEED_SLICE and no more than READ_CHUNK (a
    read that completed no frame, part of a large one, has nothing to interleave)."""
    if frames <= 0:
        return READ_CHUNK
    return min(READ_CHUNK, max(FEED_SLICE, nbytes // frames * SLICE_FRAMES))


async def run_connection(stream: trio.abc.Stream, engine: EngineConnection, *,
                         handshake_timeout: float = 0.0) -> None:
    """Drive one connection until it is closed by either side or the socket fails.

    ``handshake_timeout`` (seconds, 0 = none): a peer that has not completed the AMQP (and SASL)
    handshake, i.e. whose OPEN has not arrived, by then is disconnected (Dispatch's listener attribute
    ``initialHandshakeTimeoutSeconds``, Artemis's acceptor ``handshake-timeout``).
    """
    wakeup = trio.Event()
    handshake_deadline = trio.current_time() + handshake_timeout if handshake_timeout > 0 else math.inf

    def wake() -> None:
        wakeup.set()

    engine.wake = wake
    timers = current_timers()
    timer = timers.entry(wake)  # the writer's deadlines wake it through the shared timer

    whole_reads = engine.settings.role == "inter-router"
    plain = plain_socket(stream)  # plain TCP: one system call per read or write (wire/sockio.py)

    async def reader(cancel_scope: trio.CancelScope) -> None:
        feed_slice = FEED_SLICE  # adapted to the frames this peer sends (next_feed_slice)
        try:
            while True:
                if engine.read_paused:
                    # Back-pressure: the application holds too many of this peer's bytes. Not reading
                    # lets TCP's window close on the peer; the application resumes us when it drains.
                    resumed = trio.Event()
                    engine.on_resume_reading = resumed.set
                    await resumed.wait()
                if plain is not None:
                    n = await plain.read(LARGE_READ_CHUNK if engine.arriving else READ_CHUNK)
                    if not n:
                        break
                    if n <= FEED_SLICE or whole_reads or engine.arriving:
                        engine.feed(READ_VIEW[:n])  # the engine copies it: nothing awaited before
                        wakeup.set()
                        await trio.lowlevel.checkpoint()  # the read itself placed none
                        continue
                    # fed at once (the engine copies it) or copied, to be sliced with schedule points
                    data = READ_VIEW[:n] if n <= feed_slice else bytes(READ_VIEW[:n])
                else:
                    data = await stream.receive_some(READ_CHUNK)
                    if not data:
                        break
                    n = len(data)
                    if n <= FEED_SLICE or whole_reads or engine.arriving:
                        # Whole: a small read; a neighbour router's (it sends in bursts another router
                        # already paced: slicing only adds socket writes downstream, -4% router CPU on a
                        # 2-router line); or a large message is arriving (its bytes would otherwise go out
                        # in FEED_SLICE pieces, a socket write each, when the router streams it on).
                        engine.feed(data)
                        wakeup.set()
                        continue
                # A large read: in slices of about SLICE_FRAMES frames, sized by the frames it held.
                frames_before = engine.frames_in()
                if n <= feed_slice:
                    engine.feed(data)
                    wakeup.set()
                    if plain is not None:
                        await trio.lowlevel.checkpoint()
                else:
                    view = memoryview(data)
                    for off in range(0, n, feed_slice):
                        engine.feed(view[off:off + feed_slice])
                        wakeup.set()
                        await trio.lowlevel.checkpoint()
                feed_slice = next_feed_slice(n, engine.frames_in() - frames_before)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection %d read ended: %r", engine.id, exc)
        engine.feed_eof()
        wakeup.set()

    async def writer(cancel_scope: trio.CancelScope) -> None:
        nonlocal wakeup, handshake_deadline
        close_deadline = math.inf
        try:
            while True:
                engine.process()
                if plain is not None:
                    out = engine.take_output_view()
                    if out is None:
                        break
                    if out:
                        n = plain.try_send(out)
                        if n < len(out):
                            await plain.send_all(bytes(out[n:]))  # the view is only good until we await
                        continue
                else:
                    out = engine.take_output()
                    if out is None:
                        break  # head closed: everything (including any close frame) is written
                    if out:
                        await stream.send_all(out)
                        continue
                if engine.eof:
                    break  # the peer stopped sending and everything we had is written
                deadline = engine.tick(trio.current_time())
                if engine.finished:
                    break
                if engine.transport.pending() > 0:
                    continue  # tick produced a heartbeat or an idle-timeout close: write it now
                if engine.connection.state & 4 and close_deadline == math.inf:  # LOCAL_CLOSED
                    close_deadline = trio.current_time() + CLOSE_GRACE_SECONDS
                now = trio.current_time()
                if now >= close_deadline:
                    break
                if now >= handshake_deadline:
                    if not engine.opened_at_remote:
                        log.info("connection %d (%s): no AMQP open within %gs of connecting: disconnected",
                                 engine.id, printable(engine.remote_host), handshake_timeout)
                        break
                    handshake_deadline = math.inf
                timers.schedule(timer, min(deadline or math.inf, close_deadline, handshake_deadline))
                await wakeup.wait()
                wakeup = trio.Event()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("connection %d write ended: %r", engine.id, exc)
        cancel_scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader, nursery.cancel_scope)
            nursery.start_soon(writer, nursery.cancel_scope)
    except Exception:
        log.exception("connection %d failed", engine.id)
    finally:
        timers.cancel(timer)
        engine.abort()
        engine.dispose()
        with trio.CancelScope(shield=True):
            await _aclose_quietly(stream)


async def _aclose_quietly(stream: trio.abc.Stream) -> None:
    # A TLS stream sends close_notify first, which blocks on a peer that does not read: bounded (when the
    # time is up, trio closes the socket anyway).
    with trio.move_on_after(CLOSE_GRACE_SECONDS):
        try:
            await stream.aclose()
        except Exception:  # the peer may already be gone; nothing to tell anyone
            pass


class TlsHandshakeError(OSError):
    """A TLS handshake failed (untrusted or expired certificate, wrong name, no common protocol...);
    an OSError so that a connector counts it as a failed connection attempt."""


def _tls_failure(exc: BaseException) -> str:
    """The reason a handshake failed, from trio's BrokenResourceError and the SSLError behind it."""
    cause = exc.__cause__ or exc.__context__ or exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {cause.verify_message or cause}"
    if isinstance(cause, ssl.SSLError):
        return cause.reason or str(cause)
    return str(cause) or type(cause).__name__


async def tls_handshake(stream: trio.abc.Stream, context: ssl.SSLContext, *, server_side: bool,
                        server_hostname: str | None = None) -> trio.SSLStream:
    """Wrap ``stream`` in TLS and complete the handshake; raises :class:`TlsHandshakeError`."""
    tls_stream = trio.SSLStream(stream, context, server_side=server_side, server_hostname=server_hostname)
    try:
        await tls_stream.do_handshake()
    except trio.BrokenResourceError as exc:
        await _aclose_quietly(tls_stream)
        raise TlsHandshakeError(f"TLS handshake failed: {_tls_failure(exc)}") from exc
    return tls_stream


async def open_stream(host: str, port: int, tls: ClientTls | None = None) -> trio.abc.Stream:
    """A client stream to host:port, over TLS when ``tls`` is given (the server is verified as the
    context says; the name checked is ``tls.server_hostname`` or ``host``). Raises OSError."""
    stream = await trio.open_tcp_stream(host, port)
    if tls is None:
        return stream
    try:
        with trio.fail_after(CONNECT_TLS_HANDSHAKE_SECONDS):
            return await tls_handshake(stream, tls.context, server_side=False,
                                       server_hostname=tls.server_hostname or host)
    except trio.TooSlowError:
        await _aclose_quietly(stream)
        raise TlsHandshakeError(f"TLS handshake with {host}:{port} took over "
                                f"{CONNECT_TLS_HANDSHAKE_SECONDS:g}s") from None


async def _first_byte(stream: trio.SocketStream) -> int | None:
    """The first byte the peer sent, left unread (MSG_PEEK); None if it closed first."""
    data = await stream.socket.recv(1, socket.MSG_PEEK)
    return data[0] if data else None


def _attach_tls(engine: EngineConnection, stream: trio.abc.Stream, user_ids: CertificateUserIds | None = None) -> None:
    """Tell the engine what TLS established, before its first byte: ``engine.tls`` (a
    :class:`wire.tls.TlsPeerInfo`, None on plaintext) and ``engine.tls_peer_subject`` (the verified
    client certificate's subject). A server SASL layer takes the name ``user_ids`` makes of that
    certificate (the subject, or the listener profile's uidFormat) as the name SASL EXTERNAL logs in with
    (wire/saslserver.py); without a verified certificate EXTERNAL is not offered."""
    info = peer_info(stream) if isinstance(stream, trio.SSLStream) else None
    engine.tls = info
    engine.tls_peer_subject = info.peer_subject if info else None
    if engine.tls_peer_subject is not None and isinstance(engine.sasl, SaslServer):
        engine.sasl.external_user = (user_ids or CertificateUserIds()).user_for(info)


def _remote_host(stream: trio.abc.Stream) -> str:
    try:
        host, port = stream.socket.getpeername()[:2]  # type: ignore[attr-defined]
        return f"{host}:{port}"
    except Exception:
        return "?"


class ConnectionLimit:
    """A count of open connections against a maximum (0 = no limit), shared by the listeners it
    governs: Dispatch's ``maxConnections`` (router-wide) or Artemis's acceptor ``connectionsAllowed``."""

    def __init__(self, maximum: int = 0, what: str = "connections"):
        self.maximum = maximum
        self.what = what
        self.open = 0
        self.refused = 0

    def try_acquire(self) -> bool:
        if self.maximum and self.open >= self.maximum:
            self.refused += 1
            return False
        self.open += 1
        return True

    def release(self) -> None:
        self.open -= 1


def connection_handler(make_engine: Callable[[str], EngineConnection], *,
                       limits: tuple[ConnectionLimit, ...] = (), handshake_timeout: float = 0.0,
                       tls: ServerTls | None = None):
    """The per-accepted-socket task of a listener: make an engine and run the connection.

    Each of ``limits`` must have room for a new connection, else the peer's OPEN is answered with
    ``amqp:resource-limit-exceeded`` (at most MAX_REFUSING such answers at once; past that the socket is
    simply closed). ``handshake_timeout`` (0 = none) bounds the TLS handshake and the AMQP handshake
    together (see :func:`run_connection`).

    With ``tls``, the connection runs over TLS; the engine is made after the TLS handshake and carries
    what it established (:func:`_attach_tls`). When ``tls.required`` is false, a peer whose first byte
    is not a TLS handshake record gets plaintext; when it is true, such a peer is answered in plaintext
    with ``amqp:unauthorized-access`` ("TLS required") and closed. A failed TLS handshake (untrusted,
    expired or missing client certificate...) closes the socket with a log line naming the reason.
    """
    refusing = 0

    async def refuse(stream: trio.abc.Stream, engine: EngineConnection, condition: str, description: str):
        nonlocal refusing
        engine.refuse(condition, description)
        refusing += 1
        try:
            with trio.move_on_after(REFUSE_GRACE_SECONDS):
                await run_connection(stream, engine)
        finally:
            refusing -= 1

    async def secure(stream: trio.SocketStream, remote: str, deadline: float):
        """The stream to run AMQP on: TLS, or plaintext where the listener allows it; None when the
        connection is to be dropped, and the reason when it is to be refused."""
        with trio.move_on_at(deadline) as timer:
            first = await _first_byte(stream)
            if first is None:
                return None, None
            if first != TLS_HANDSHAKE_RECORD:
                if tls.required:
                    log.info("connection from %s refused: plaintext on a listener that requires TLS",
                             printable(remote))
                    return stream, "this listener requires TLS (requireSsl)"
                return stream, None
            try:
                return await tls_handshake(stream, tls.context, server_side=True), None
            except TlsHandshakeError as exc:
                log.info("connection from %s: %s", printable(remote), exc)
                return None, None
        if timer.cancelled_caught:
            log.info("connection from %s: no TLS handshake within %gs of connecting: disconnected",
                     printable(remote), handshake_timeout)
        return None, None

    async def handle(stream: trio.SocketStream) -> None:
        remote = _remote_host(stream)
        started = trio.current_time()
        taken = []
        for limit in limits:
            if not limit.try_acquire():
                break
            taken.append(limit)
        over = len(taken) < len(limits)
        try:
            if over and refusing >= MAX_REFUSING:
                await _aclose_quietly(stream)
                return
            plaintext_refused = None
            if tls is not None:
                deadline = started + handshake_timeout if handshake_timeout > 0 else math.inf
                secured, plaintext_refused = await secure(stream, remote, deadline)
                if secured is None:
                    await _aclose_quietly(stream)
                    return
                stream = secured
            try:
                engine = make_engine(remote)
            except Exception:
                log.exception("refusing connection from %s", printable(remote))
                await _aclose_quietly(stream)
                return
            _attach_tls(engine, stream, tls.user_ids if tls is not None else None)
            if plaintext_refused:
                if refusing >= MAX_REFUSING:
                    await _aclose_quietly(stream)
                    return
                await refuse(stream, engine, "amqp:unauthorized-access", plaintext_refused)
                return
            if not over:
                timeout = handshake_timeout
                if timeout > 0:  # what the TLS handshake left of it (0 would mean "none")
                    timeout = max(timeout - (trio.current_time() - started), MIN_HANDSHAKE_REMAINDER)
                await run_connection(stream, engine, handshake_timeout=timeout)
                return
            limit = limits[len(taken)]
            log.warning("connection %d from %s refused: %d %s open, the limit", engine.id,
                        printable(remote), limit.open, limit.what)
            await refuse(stream, engine, "amqp:resource-limit-exceeded",
                         f"connection limit reached ({limit.maximum} {limit.what})")
        finally:
            for limit in taken:
                limit.release()

    return handle


def backing_off(listeners) -> list:
    """Wrap bound trio SocketListeners so that running out of descriptors does not spin (see
    :class:`_BackingOffListener`)."""
    return [lst if isinstance(lst, _BackingOffListener) else _BackingOffListener(lst) for lst in listeners]


async def serve_listener(host: str, port: int, make_engine: Callable[[str], EngineConnection], *,
                         limits: tuple[ConnectionLimit, ...] = (), handshake_timeout: float = 0.0,
                         tls: ServerTls | None = None, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Listen on host:port and run each accepted connection; reports the bound listeners via start().

    An empty host or 0.0.0.0 binds every IPv4 interface; "::" every IPv6 one. ``limits``,
    ``handshake_timeout`` and ``tls``: see :func:`connection_handler`.
    """
    listeners = backing_off(await trio.open_tcp_listeners(port, host=host or None))
    handle = connection_handler(make_engine, limits=limits, handshake_timeout=handshake_timeout, tls=tls)
    async with trio.open_nursery() as nursery:
        task_status.started(listeners)
        await trio.serve_listeners(handle, listeners, handler_nursery=nursery)


class _BackingOffListener(trio.abc.Listener):
    """A SocketListener whose accept() waits and retries when the process is out of descriptors
    (EMFILE, ENFILE) or kernel buffers, with one log line per ACCEPT_ERROR_LOG_INTERVAL, instead of
    letting trio.serve_listeners log every failed accept (hundreds a minute) at a full core."""

    def __init__(self, inner: trio.SocketListener):
        self.inner = inner
        self.socket = inner.socket  # callers read the bound address from it
        self._failures_since_log = 0
        self._last_log = -math.inf

    async def accept(self):
        delay = ACCEPT_BACKOFF_FIRST
        while True:
            try:
                return await self.inner.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                    raise
                self._note(exc)
                await trio.sleep(delay)
                delay = min(delay * 2, ACCEPT_BACKOFF_MAX)

    def _note(self, exc: OSError) -> None:
        self._failures_since_log += 1
        now = trio.current_time()
        if now - self._last_log >= ACCEPT_ERROR_LOG_INTERVAL:
            log.error("listener %s: cannot accept connections: %s (%d failed accepts since the last line); "
                      "retrying", _sockname(self.inner.socket), exc.strerror or exc, self._failures_since_log)
            self._last_log = now
            self._failures_since_log = 0

    async def aclose(self) -> None:
        await self.inner.aclose()


def _sockname(sock) -> str:
    try:
        host, port = sock.getsockname()[:2]
        return f"{host}:{port}"
    except Exception:  # noqa: BLE001 - only for a log line
        return "?"


@dataclass
class Backoff:
    """Reconnect delays: fixed (multiplier 1) or exponential, capped, with an optional attempt limit."""

    initial: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 60.0
    max_attempts: int = 0  # 0 = retry for ever

    def delay(self, failures: int) -> float | None:
        """Delay before the next attempt after ``failures`` consecutive failures; None = give up."""
        if self.max_attempts and failures >= self.max_attempts:
            return None
        # Cap the exponent: a peer down for days must not overflow the float (it would end the daemon).
        exponent = min(max(0, failures - 1), MAX_BACKOFF_EXPONENT)
        return min(self.max_delay, self.initial * (self.multiplier ** exponent))


async def run_connector(host: str, port: int, make_engine: Callable[[str], EngineConnection], backoff: Backoff,
                        *, on_state: Callable[[str], None] | None = None, tls: ClientTls | None = None) -> None:
    """Keep a connection to host:port up, reconnecting with backoff. Returns when attempts run out.

    A connection that reached the open state resets the failure count. With ``tls`` the connection runs
    over TLS (:func:`open_stream`); a failed handshake (untrusted server, wrong name) is a failed attempt.
    """
    failures = 0
    state = on_state or (lambda s: None)
    while True:
        state("CONNECTING")
        try:
            stream = await open_stream(host, port, tls)
        except OSError as exc:
            failures += 1
            log.info("connector to %s:%s failed (attempt %d): %s", host, port, failures, exc)
        else:
            engine = make_engine(f"{host}:{port}")
            _attach_tls(engine, stream)
            if tls is None:
                warn_plaintext_password(engine.settings, f"{host}:{port}")
            state("SUCCESS")
            await run_connection(stream, engine)
            failures = 0 if engine.connection.remote_container else failures + 1
            log.info("connection to %s:%s ended", host, port)
        delay = backoff.delay(max(1, failures))
        if delay is None:
            state("FAILED")
            return
        state("CONNECTING")
        await trio.sleep(delay)


async def shut_down_on_signal(signals, close_all: Callable[[], None], connections_open: Callable[[], bool],
                              grace_seconds: float) -> None:
    """A daemon's graceful end: wait for the first signal, close every connection (peers get a close
    frame), and give the close handshakes up to ``grace_seconds`` before returning."""
    async for signum in signals:
        log.info("signal %d: shutting down", signum)
        break
    close_all()
    with trio.move_on_after(grace_seconds):
        while connections_open():
            await trio.sleep(0.02)
