"""One AMQP connection's engine, sans-IO: bytes in, events to a handler, bytes out.

``EngineConnection`` owns a proton Connection, Transport and Collector. The Trio layer
(:mod:`wire.driver`) feeds it received bytes and writes out what it produces; everything in between is
plain method calls, so routing logic can be tested without sockets.

Events are drained from the collector with raw engine calls. The two that happen per message
(``PN_DELIVERY`` and ``PN_LINK_FLOW``) go to the owner of their link (:meth:`EngineConnection.own_link`;
incoming deliveries through :class:`wire.assembly.MessageAssembler`, which hands over whole messages), or
to the handler with raw pointers for links nobody owns. The rest (open, attach, detach, close) are
handled here with the object API and reported to the handler as cold calls.

When the settings ask for it (``sasl_users`` on a listener, ``sasl_client_mechanisms`` on a connector),
our SASL layer (:mod:`wire.saslserver`, :mod:`wire.sasl`) stands between the socket and the engine until
the exchange succeeded; ``user`` and ``sasl_mechanism`` then tell who logged in and how.

Why one module of ~690 lines: the byte path (SASL in front, output accounting, back-pressure) and the
event dispatch (with its re-entrancy guard and the session hook) share the engine's state and must be read
together.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import proton
from proton import Transport

from wire import raw
from wire.assembly import MessageAssembler
from wire.logformat import escape_unprintable

log = logging.getLogger("wire.connection")

# AMQP 1.0's default max-frame-size is unbounded; Dispatch listens with 16 KiB frames by default.
DEFAULT_MAX_FRAME_SIZE = 16384
# Dispatch's default idle timeout for listeners and connectors.
DEFAULT_IDLE_TIMEOUT_SECONDS = 16
#: An AMQP empty frame (AMQP 1.0 §2.3.1, §2.4.5: size 8, data offset 2, type 0 (AMQP), channel 0, no body):
#: what a side sends to show it is alive when it has nothing else to say.
EMPTY_FRAME = b"\x00\x00\x00\x08\x02\x00\x00\x00"
# channel-max is sessions - 1; Dispatch's maxSessions default.
DEFAULT_MAX_SESSIONS = 32768

ANONYMOUS_RELAY = proton.symbol("ANONYMOUS-RELAY")

# Output is copied out of the engine through one buffer shared by every connection (each write gets
# its own bytes): a per-connection 256 KiB buffer would cost 2.5 GB at 10,000 connections.
OUTPUT_CHUNK = 256 * 1024
_OUTPUT = raw.OutputBuffer(OUTPUT_CHUNK)

_conn_ids = itertools.count(1)


@dataclass
class ConnectionSettings:
    """What a listener or connector configures on each of its connections."""

    role: str = "normal"
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_sessions: int = DEFAULT_MAX_SESSIONS
    idle_timeout_seconds: float = DEFAULT_IDLE_TIMEOUT_SECONDS
    sasl_mechanisms: str = "ANONYMOUS"
    authenticate_peer: bool = False
    # A client with a user name logs in with SASL PLAIN (see wire/sasl.py); None = ANONYMOUS.
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)  # kept out of logged reprs
    # Server: a wire.users.Users puts our SASL layer (wire/saslserver.py) in front of the engine, which
    # checks PLAIN and SCRAM logins against it; None = proton's SASL (ANONYMOUS only), as before.
    sasl_users: object | None = field(default=None, repr=False)
    # Client: mechanisms to log in with through our SASL layer ("SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"),
    # first offered wins; None = proton's SASL (PLAIN with sasl_username, else ANONYMOUS), as before.
    sasl_client_mechanisms: str | None = None
    container_id: str = "trio-dispatch"
    link_capacity: int = 250  # credit window per incoming link (Dispatch's linkCapacity default)
    max_message_size: int = 0  # bytes; 0 = no limit
    offered_capabilities: tuple = (ANONYMOUS_RELAY,)
    properties: dict = field(default_factory=dict)
    name: str = ""  # listener/connector name, for management and logs
    cost: int = 1  # inter-router role: this connection's routing cost (Dispatch's `cost`)
    strip_annotations: str = "both"  # router annotations removed on ingress (in), egress (out), both, no
    policy_vhost: str | None = None  # router listener: the vhost policy of its connections (policyVhost)


class ConnectionHandler:
    """What an application (the router, the broker, a test) implements to receive engine events.

    Hot calls receive raw pointers (see :mod:`wire.raw`); cold calls receive raw pointers too so the
    application can key its tables by them, and may use :func:`wire.raw.link_object` to inspect termini.
    """

    def on_delivery(self, conn: "EngineConnection", delivery) -> None:  # hot
        """A delivery event on a link nobody owns (see :meth:`EngineConnection.own_link`)."""

    def on_link_flow(self, conn: "EngineConnection", link) -> None:  # hot
        """A flow event on a link nobody owns."""

    def on_connection_open(self, conn: "EngineConnection") -> None:
        pass

    def session_refusal(self, conn: "EngineConnection", session) -> tuple[str, str] | None:
        """The peer began a session: None to take it, or (condition, description) to end it at once."""
        return None

    def on_link_open(self, conn: "EngineConnection", link) -> None:
        """The peer attached a link. Open or close it; an unopened link is closed with an error."""

    def on_link_opened(self, conn: "EngineConnection", link) -> None:
        """The peer answered the attach of a link we opened ourselves."""

    def on_link_close(self, conn: "EngineConnection", link, closed: bool) -> None:
        """The peer detached (closed=False) or closed (closed=True) a link, or its session/connection went."""

    def on_connection_close(self, conn: "EngineConnection") -> None:
        """Called exactly once when the connection is over (closed by either side or lost)."""

    def on_batch_end(self) -> None:
        """Called after each drained batch of events: the place to do work once per batch, not per event."""

    def on_output_drained(self, conn: "EngineConnection") -> None:
        """``conn.output_blocked`` was set and the bytes queued for the socket fell to
        ``conn.output_resume_at`` (the application may send to this connection again), or they fell
        to ``conn.output_watch_at``, which the application set to hear of it."""


class EngineConnection:
    """A proton engine for one connection, driven by explicit calls (no I/O, no reactor)."""

    def __init__(self, handler: ConnectionHandler, settings: ConnectionSettings, *, server: bool,
                 remote_host: str = "", virtual_host: str | None = None,
                 assembler: MessageAssembler | None = None):
        self.id = next(_conn_ids)
        # link pointer -> the application's record of a link it owns (see own_link)
        self.link_records: dict = {}
        # Shared by an application's engines when it wants one view of every message in progress.
        self.assembler = assembler if assembler is not None else MessageAssembler()
        self.handler = handler
        self.settings = settings
        self.server = server
        self.remote_host = remote_host
        self.app = None  # the application's per-connection state (router: its Connection record)
        self.connection = proton.Connection()
        self.transport = Transport(Transport.SERVER if server else Transport.CLIENT)
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        t = self.transport
        t.max_frame_size = settings.max_frame_size
        t.channel_max = max(0, settings.max_sessions - 1)
        if settings.idle_timeout_seconds:
            t.idle_timeout = settings.idle_timeout_seconds
        from wire.sasl import sasl_layer

        # Our SASL layer when the settings ask for it (users to check, or SCRAM to log in with); the
        # engine then runs without SASL and sees only what follows a successful exchange.
        self.sasl = sasl_layer(settings, server=server)
        self._sasl_pending = self.sasl is not None  # the layer still stands between socket and engine
        if self.sasl is None:
            self._setup_sasl(server)
        t.bind(self.connection)
        c = self.connection
        c.container = settings.container_id
        if virtual_host is not None:
            c.hostname = virtual_host
        if settings.offered_capabilities:
            c.offered_capabilities = proton.SymbolList(list(settings.offered_capabilities))
        if settings.properties:
            c.properties = {proton.symbol(k): v for k, v in settings.properties.items()}
        self._coll = raw.pointer(self.collector)
        self._transport_ptr = raw.pointer(t)
        self._closed_reported = False
        self.remote_closed = False
        self.eof = False
        self.wake = _noop  # the driver installs its wake-up function
        self.error: str | None = None
        # Set when handling one of this connection's events raised: the connection is being closed
        # and its remaining per-message events are dropped (the handler's state for it is suspect).
        self.failed = False
        # Back-pressure (see pause_reading): the driver stops reading the socket while this is set.
        self.read_paused = False
        self._pause_asked = False  # pause_reading in force (the router's memory budget)
        self.read_holds = 0  # hold_reading in force (streamed messages without room downstream)
        self.on_resume_reading = _noop  # the driver installs its wake-up for a paused reader
        self._idle_saved_ms = 0  # our idle time-out while suspended by a read pause (0: not suspended)
        self._idle_resumed_at: float | None = None  # when the writer first ticked after reading resumed
        self.opened_at_remote = False  # the peer's OPEN arrived (the handshake is done)
        # Output accounting: bytes the application handed to the engine for this peer (it adds them) and
        # that have not yet been taken out for the socket (take_output subtracts what it returns, framing
        # included, so this slightly under-counts). The driver takes output only as fast as the socket
        # accepts it, so a peer that stops reading keeps this high. While output_blocked is set the
        # application sends nothing more and is told (on_output_drained) once out_pending is down to
        # output_resume_at.
        self.out_pending = 0
        # Deliveries of this connection still arriving (wire.assembly keeps the count): while there is one,
        # the driver reads and feeds in large pieces (a large message is coming).
        self.arriving = 0
        self.output_blocked = False
        self.output_resume_at = 0
        # An application that only wants to hear when output falls to a mark, without stopping its
        # sends (a streamed message waiting for its consumer's socket): on_output_drained once, at it.
        self.output_watch_at = -1
        self.refusal: tuple[str, str] | None = None  # see refuse()
        self._heartbeat_due = False  # see send_heartbeat
        self._processing = False  # process() is draining events (see there)
        if not server:
            c.open()

    # -- SASL -----------------------------------------------------------------------------------
    def _setup_sasl(self, server: bool) -> None:
        """Servers offer ANONYMOUS; clients use PLAIN when the settings carry a user name (wire/sasl.py).

        Runs before the transport is bound: proton copies the connection's credentials at bind."""
        from wire.sasl import configure_sasl

        configure_sasl(self.transport, self.settings, server=server, connection=self.connection,
                       remote_host=self.remote_host)

    @property
    def user(self) -> str | None:
        """The user this connection authenticated as (None: anonymous, or proton's SASL did the login)."""
        return self.sasl.user if self.sasl is not None and self.sasl.done else None

    @property
    def sasl_mechanism(self) -> str | None:
        """The SASL mechanism our layer ran (None when proton's SASL ran or the client skipped SASL)."""
        return self.sasl.mechanism if self.sasl is not None and self.sasl.done else None

    def _sasl_output(self) -> bytes | None:
        """Output while our SASL layer stands in front: its frames, then the engine's own (held back until
        the exchange succeeded); None once it failed and its last frame is out."""
        layer = self.sasl
        layer.hold(_OUTPUT.take_bytes(self._transport_ptr))  # the driver must not see bytes it cannot send yet
        out = layer.take_output()
        if out:
            return out
        if layer.failed:
            self._end_after_sasl_failure()
            return None
        if layer.done:
            self._sasl_pending = False
        return b""

    def _end_after_sasl_failure(self) -> None:
        """The SASL exchange failed and its last frame is written: end the engine (the handler hears
        on_connection_close) and keep the layer's reason as this connection's error."""
        # Set before the engine ends, so that the handler's on_connection_close already sees why (the
        # engine's own transport error that follows does not replace it).
        self.error = self.sasl.error
        if not self.finished:
            log.info("connection %d (%s): SASL: %s", self.id, printable(self.remote_host), printable(self.sasl.error))
            raw.transport_close_tail(self._transport_ptr)
            raw.transport_close_head(self._transport_ptr)
            self.process()

    # -- bytes in/out ---------------------------------------------------------------------------
    def feed(self, data: bytes) -> None:
        """Push received bytes into the engine and handle the resulting events."""
        if self._sasl_pending:
            data = self.sasl.feed(data)  # what follows a successful exchange, for the engine
            if not data:
                self.wake()  # the layer may have something to say
                return
        tp = self._transport_ptr
        view = data
        while view:
            n = raw.transport_push(tp, view)
            if n < 0:
                break  # tail closed: the transport already reported the error
            if n == len(view):
                break
            self.process()
            view = view[n:]
        if self._idle_saved_ms and not self.read_paused:
            self._restore_idle_timeout()  # bytes read again: proton's next tick starts a fresh time-out
        self.process()

    def frames_in(self) -> int:
        """How many frames the engine has read from the peer so far (every kind, empty ones included)."""
        return raw.transport_frames_input(self._transport_ptr)

    def feed_eof(self) -> None:
        """The peer closed its sending side. Whatever the engine still has to say may be written, then
        the connection is over (the driver stops once output runs dry), even mid-frame."""
        self.eof = True
        if self._sasl_pending and not self.sasl.done:
            self.sasl.fail("amqp:connection:framing-error: peer closed the connection during SASL")
            self._end_after_sasl_failure()
            return
        raw.transport_close_tail(self._transport_ptr)
        self.process()

    def _output_taken(self, n: int) -> None:
        """``n`` bytes of output left the engine for the socket."""
        pending = self.out_pending - n
        self.out_pending = pending if pending > 0 else 0
        if ((self.output_blocked and self.out_pending <= self.output_resume_at)
                or self.out_pending <= self.output_watch_at) and not self.failed:
            self.output_watch_at = -1
            try:
                self.handler.on_output_drained(self)
            except Exception as exc:  # noqa: BLE001 - as in process(): this connection alone fails
                self._handler_failed(exc)

    def take_output(self) -> bytes | None:
        """Pending output (up to OUTPUT_CHUNK bytes); b"" when none; None once the head is closed."""
        if self._sasl_pending:
            return self._sasl_output()
        return self._output_out(_OUTPUT.take_bytes(self._transport_ptr))

    def take_output_view(self):
        """As :meth:`take_output`, but the bytes are a view of the output buffer every connection shares:
        valid until the next take of any connection, so the caller writes (or copies) them before it
        awaits anything. Saves a copy of every write."""
        if self._sasl_pending:
            return self._sasl_output()
        return self._output_out(_OUTPUT.take(self._transport_ptr))

    def _output_out(self, out):
        if out:
            self._heartbeat_due = False  # traffic shows we are alive
            if self.out_pending:
                self._output_taken(len(out))
        elif self._heartbeat_due and out is not None:
            self._heartbeat_due = False
            # Nothing pending in the transport: everything it framed has been taken, so we stand between
            # two frames and an empty frame can go in. Only while both OPENs are through and nobody closed.
            state = self.connection.state
            if (state & proton.Endpoint.LOCAL_ACTIVE and state & proton.Endpoint.REMOTE_ACTIVE
                    and not self.eof):
                return EMPTY_FRAME
        return out

    def send_heartbeat(self) -> None:
        """Send an empty frame at the next chance unless other output goes first (a keepalive of our own
        schedule, such as a federation stream's check-period; proton sends the ones the peer's idle
        time-out asks for by itself)."""
        self._heartbeat_due = True
        self.wake()

    def tick(self, now: float) -> float | None:
        """Run idle-timeout processing; return the next deadline (seconds) or None."""
        deadline_ms = raw.transport_tick(self._transport_ptr, int(now * 1000))
        self.process()
        deadline = deadline_ms / 1000.0 if deadline_ms else None
        if self._idle_saved_ms and not self.read_paused:
            # Reading resumed and nothing has come since: the peer gets a whole time-out from the resumption.
            if self._idle_resumed_at is None:
                self._idle_resumed_at = now
            due = self._idle_resumed_at + self._idle_saved_ms / 1000.0
            if now >= due:
                self._restore_idle_timeout()  # silent for a whole time-out since: proton expires it now
                return self.tick(now)
            deadline = due if deadline is None else min(deadline, due)
        return deadline

    def _suspend_idle_timeout(self) -> None:
        """Reading is paused by this side: the peer's frames wait in the socket, so its silence is ours and
        must not expire our idle time-out (a healthy producer held off by Q2 would be closed). proton's
        local idle time-out is set to 0 until bytes are read again (or a whole time-out passes after
        reading resumed without any); the value announced in our OPEN is unchanged."""
        if self._idle_saved_ms:
            return
        tp = self._transport_ptr
        ms = raw.lib.pn_transport_get_idle_timeout(tp)
        if ms:
            raw.lib.pn_transport_set_idle_timeout(tp, 0)
            self._idle_saved_ms = ms
            self._idle_resumed_at = None

    def _restore_idle_timeout(self) -> None:
        raw.lib.pn_transport_set_idle_timeout(self._transport_ptr, self._idle_saved_ms)
        self._idle_saved_ms = 0
        self._idle_resumed_at = None

    @property
    def finished(self) -> bool:
        return raw.transport_closed(self._transport_ptr)

    @property
    def closing(self) -> bool:
        """We closed (or are closing) the connection: nothing more should be asked of it."""
        return bool(self.connection.state & proton.Endpoint.LOCAL_CLOSED)

    def close(self, condition: str | None = None, description: str | None = None) -> None:
        """Close the connection with an optional AMQP error condition (graceful: a close frame is sent)."""
        c = self.connection
        if c.state & proton.Endpoint.LOCAL_CLOSED:
            return
        if condition:
            c.condition = proton.Condition(condition, description)
        if c.state & proton.Endpoint.LOCAL_UNINIT:
            c.open()
        c.close()
        self.process()
        self.wake()

    def refuse(self, condition: str, description: str) -> None:
        """Answer the peer's OPEN with an open and a close carrying ``condition`` (the AMQP way to turn
        a connection away, AMQP 1.0 §2.4.1) instead of handing it to the handler."""
        self.refusal = (condition, description)

    def abort(self) -> None:
        """Give up on the connection without a close handshake (socket gone)."""
        if self.finished:
            self._report_closed()
            return
        raw.transport_close_tail(self._transport_ptr)
        raw.transport_close_head(self._transport_ptr)
        self.process()
        self._report_closed()

    def dispose(self) -> None:
        """The connection is over (the driver calls this last): drop the references that tie this engine
        to the application and the driver in cycles, so that the engine's memory (the proton connection
        with every delivery buffer it pooled) goes as soon as nothing else refers to it, not at the
        next full garbage collection."""
        self.app = None
        self.wake = _noop
        self.on_resume_reading = _noop

    # -- events ---------------------------------------------------------------------------------
    def process(self) -> None:
        """Drain the collector: per-message events go straight to the handler, others to _cold().

        An exception from the handler fails this connection only (see :meth:`_handler_failed`): the
        event that raised is dropped so that nothing (the driver's clean-up included) runs it twice,
        and draining carries on so that the close is processed and reported.
        """
        if self._processing:
            # Called from a handler (close() during on_connection_open): the event being handled is
            # still at the head of the collector, so draining here would hand it over a second time.
            # The outer drain goes on to the events this call would have seen.
            return
        self._processing = True
        try:
            while True:
                try:
                    if self.failed:
                        self._drain_failed()
                    else:
                        self._drain()
                    return
                except Exception as exc:  # noqa: BLE001 - any handler bug must stay inside its connection
                    if raw.collector_peek(self._coll):
                        raw.collector_pop(self._coll)  # the event being handled when the handler raised
                    self._handler_failed(exc)
        finally:
            self._processing = False

    def _drain(self) -> None:
        coll = self._coll
        peek = raw.collector_peek
        pop = raw.collector_pop
        etype = raw.event_type
        event_delivery = raw.event_delivery
        delivery_link = raw.delivery_link
        records = self.link_records.get
        incoming = self.assembler.incoming
        delivery_event = raw.PN_DELIVERY
        while True:
            ev = peek(coll)
            if not ev:
                self.handler.on_batch_end()
                return
            t = etype(ev)
            if t == delivery_event:
                d = event_delivery(ev)
                lp = delivery_link(d)
                rec = records(lp)
                if rec is None:
                    self.handler.on_delivery(self, d)
                elif rec.incoming:
                    incoming(self, rec, d, lp)
                else:
                    rec.owner.on_delivery_update(self, rec, d)
            elif t == raw.PN_LINK_FLOW:
                link = raw.event_link(ev)
                rec = records(link)
                if rec is None:
                    self.handler.on_link_flow(self, link)
                else:
                    rec.owner.on_link_flow(self, rec)
            elif t in _COLD_EVENTS:
                self._cold(t, ev)
            pop(coll)

    def _drain_failed(self) -> None:
        """Drain events of a failed connection: only those that end it still reach the handler."""
        coll = self._coll
        while True:
            ev = raw.collector_peek(coll)
            if not ev:
                return
            t = raw.event_type(ev)
            if t in _ENDING_EVENTS:
                self._cold(t, ev)
            raw.collector_pop(coll)

    def _handler_failed(self, exc: BaseException) -> None:
        """Close this connection after its handler raised: ``amqp:decode-error`` when a peer-supplied
        value could not be decoded (invalid UTF-8 in a container-id or an address), else
        ``amqp:internal-error``. One log line names the peer; the daemon and other connections carry on."""
        if isinstance(exc, UnicodeError):
            condition, description = DECODE_ERROR, "invalid UTF-8 in a peer-supplied string"
        else:
            condition, description = INTERNAL_ERROR, f"internal error handling this connection ({type(exc).__name__})"
        first = not self.failed
        self.failed = True
        if first:
            log.error("connection %d (%s, container %s): closed with %s: %s: %s", self.id,
                      printable(self.remote_host), printable(self._remote_container_quietly()), condition,
                      type(exc).__name__, printable(str(exc)))
            log.debug("connection %d: handler traceback", self.id, exc_info=exc)
        try:
            self.error = self.error or f"{condition}: {description}"
            c = self.connection
            if not c.state & proton.Endpoint.LOCAL_CLOSED:
                c.condition = proton.Condition(condition, description)
                if c.state & proton.Endpoint.LOCAL_UNINIT:
                    c.open()
                c.close()
        except Exception:  # noqa: BLE001 - the engine itself is broken: drop the socket instead
            log.debug("connection %d: close after handler failure failed", self.id, exc_info=True)
            raw.transport_close_tail(self._transport_ptr)
            raw.transport_close_head(self._transport_ptr)
        self.wake()

    def _remote_container_quietly(self) -> str:
        """The peer's container-id for a log line, whatever bytes it sent."""
        try:
            ptr = raw.lib.pn_connection_remote_container(raw.pointer(self.connection))
            return raw.ffi.string(ptr).decode("utf-8", "backslashreplace") if ptr else "?"
        except Exception:  # noqa: BLE001 - only for logging
            return "?"

    # -- back-pressure ----------------------------------------------------------------------------
    def pause_reading(self) -> None:
        """Stop taking bytes from the peer (TCP back-pressure) until :meth:`resume_reading`.

        Bytes already fed are still processed; the driver's reader waits before its next read."""
        self._pause_asked = True
        self.read_paused = True
        self._suspend_idle_timeout()

    def resume_reading(self) -> None:
        self._pause_asked = False
        if self.read_paused and not self.read_holds:
            self.read_paused = False
            self._reading_resumed()

    def hold_reading(self) -> None:
        """Like :meth:`pause_reading`, for one of several independent reasons (a streamed message whose
        destination has no room, one hold each): reading resumes when every hold is released and no
        pause is asked."""
        self.read_holds += 1
        self.read_paused = True
        self._suspend_idle_timeout()

    def release_reading(self) -> None:
        """Release one :meth:`hold_reading`."""
        if self.read_holds:
            self.read_holds -= 1
        if self.read_paused and not self.read_holds and not self._pause_asked:
            self.read_paused = False
            self._reading_resumed()

    def _reading_resumed(self) -> None:
        self.on_resume_reading()
        if self._idle_saved_ms:
            self.wake()  # the writer's tick starts the peer's time-out again (see tick)

    def _cold(self, t: int, ev) -> None:
        lib = raw.lib
        if t == raw.PN_CONNECTION_REMOTE_OPEN:
            self.opened_at_remote = True
            c = self.connection
            if self.refusal is not None:
                self.close(*self.refusal)  # the handler never sees a refused connection open
                return
            if c.state & proton.Endpoint.LOCAL_UNINIT:
                c.open()
            self.handler.on_connection_open(self)
        elif t == raw.PN_SESSION_REMOTE_OPEN:
            s = raw.event_session(ev)
            if lib.pn_session_state(s) & raw.LOCAL_UNINIT:
                refusal = self.handler.session_refusal(self, s)
                lib.pn_session_open(s)
                if refusal is not None:  # begun and ended, as AMQP refuses a session (§2.7.2, §2.7.7)
                    raw.set_session_error(s, *refusal)
                    lib.pn_session_close(s)
        elif t == raw.PN_LINK_REMOTE_OPEN:
            link = raw.event_link(ev)
            if raw.link_state(link) & raw.LOCAL_UNINIT:
                self.handler.on_link_open(self, link)
            else:
                self.handler.on_link_opened(self, link)
        elif t in (raw.PN_LINK_REMOTE_CLOSE, raw.PN_LINK_REMOTE_DETACH):
            link = raw.event_link(ev)
            self._link_gone(link, closed=(t == raw.PN_LINK_REMOTE_CLOSE))
        elif t == raw.PN_SESSION_REMOTE_CLOSE:
            s = raw.event_session(ev)
            self._session_gone(s)
            if not lib.pn_session_state(s) & raw.LOCAL_CLOSED:
                lib.pn_session_close(s)
            # Freed once our END is written (the engine keeps what it still needs): a connection that
            # opens and ends sessions for ever must not keep every one of them until it closes.
            lib.pn_session_free(s)
        elif t == raw.PN_CONNECTION_REMOTE_CLOSE:
            self.remote_closed = True
            name, description = raw.connection_remote_condition(raw.pointer(self.connection))
            if name is not None:
                log.info("connection %d closed by peer: %s %s", self.id, printable(name),
                         printable(description or ""))
            self._report_closed()
            c = self.connection
            if not c.state & proton.Endpoint.LOCAL_CLOSED:
                c.close()
        elif t == raw.PN_TRANSPORT_ERROR:
            name, description = raw.transport_condition(self._transport_ptr)
            if name is not None:
                self.error = self.error or printable(f"{name}: {description}")
                # After the peer's close frame a socket closing is the normal end; without one it is a
                # client that vanished: worth a line, not an alarm.
                level = logging.DEBUG if self.remote_closed or self._closed_reported else logging.INFO
                log.log(level, "connection %d (%s): transport error %s", self.id, self.remote_host, self.error)
        elif t == raw.PN_TRANSPORT_CLOSED:
            self._report_closed()

    def _link_gone(self, link, closed: bool, *, free: bool = True) -> None:
        """The peer detached a link (or its session ended): tell the handler once, close our end.

        The link is freed after its detach so that a long-lived connection that churns links does not
        keep them all (proton still sends our detach). Links of an ended session are not freed here:
        they go with the connection, and freeing twice must never happen.
        """
        lib = raw.lib
        if not lib.pn_link_state(link) & raw.LOCAL_CLOSED:
            self.handler.on_link_close(self, link, closed)
            if closed:
                lib.pn_link_close(link)
            else:
                lib.pn_link_detach(link)
        self.disown_link(link)
        if free:
            lib.pn_link_free(link)

    def _session_gone(self, session) -> None:
        """A session end implicitly detaches its links: report each one still open."""
        lib = raw.lib
        link = lib.pn_link_head(raw.pointer(self.connection), 0)
        gone = []
        while link:
            if lib.pn_link_session(link) == session:
                gone.append(link)
            link = lib.pn_link_next(link, 0)
        for link in gone:
            self._link_gone(link, closed=True, free=False)

    def _report_closed(self) -> None:
        if not self._closed_reported:
            self._closed_reported = True
            try:
                self.handler.on_connection_close(self)
            except Exception:  # noqa: BLE001 - the connection is gone either way; keep the daemon
                log.exception("connection %d: error while cleaning up after it closed", self.id)
            for link in list(self.link_records):
                self.disown_link(link)

    # -- helpers for handlers --------------------------------------------------------------------
    @property
    def remote_container(self) -> str | None:
        return self.connection.remote_container

    def own_link(self, link, record) -> None:
        """From now on this link's delivery and flow events go to ``record.owner`` (a
        :class:`wire.assembly.LinkOwner`), incoming messages whole (see :mod:`wire.assembly`)."""
        self.link_records[link] = record

    def disown_link(self, link):
        """Stop routing this link's events to its owner and forget its half-received messages; the
        record it had (None when nobody owned it)."""
        record = self.link_records.pop(link, None)
        if record is not None and self.assembler.partials:
            self.assembler.drop_owner(record)
        return record

    def link_record(self, link):
        """The record the application registered for this link (None when nobody owns it)."""
        return self.link_records.get(link)

    def open_link_like_remote(self, link, *, source_address: str | None = None,
                              dynamic_source: bool = False) -> None:
        """Accept an attach: mirror the peer's termini (optionally with an assigned source address)."""
        lo = raw.link_object(link)
        lo.source.copy(lo.remote_source)
        lo.target.copy(lo.remote_target)
        if source_address is not None:
            lo.source.address = source_address
        if dynamic_source:
            lo.source.dynamic = True
        lo.snd_settle_mode = lo.remote_snd_settle_mode
        lo.rcv_settle_mode = proton.Link.RCV_FIRST
        if self.settings.max_message_size and lo.is_receiver:
            lo.max_message_size = self.settings.max_message_size
        lo.open()

    def close_link(self, link, condition: str, description: str) -> None:
        """Detach (close) an open link with an error condition; the link is disowned."""
        self.disown_link(link)
        lo = raw.link_object(link)
        lo.condition = proton.Condition(condition, description)
        lo.close()
        self.wake()

    def refuse_link(self, link, condition: str, description: str) -> None:
        """Refuse an attach the AMQP way: attach with a null terminus, then detach with an error."""
        lo = raw.link_object(link)
        # The terminus that would have named the node is null (AMQP's refusal); the other is mirrored.
        if lo.is_sender:
            lo.target.copy(lo.remote_target)
            lo.source.type = proton.Terminus.UNSPECIFIED
        else:
            lo.source.copy(lo.remote_source)
            lo.target.type = proton.Terminus.UNSPECIFIED
        lo.condition = proton.Condition(condition, description)
        lo.open()
        lo.close()


def _noop() -> None:
    pass


# Connection error conditions (AMQP 1.0 §2.8.15).
DECODE_ERROR = "amqp:decode-error"
INTERNAL_ERROR = "amqp:internal-error"

# Longest peer-supplied text put into one log line; the rest is cut (a log line is not a data channel).
MAX_LOGGED_PEER_TEXT = 200


def printable(value) -> str:
    """A peer-supplied value made safe for a log line: control characters (newlines above all, which
    could forge whole log lines) and non-printable characters escaped, length capped."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > MAX_LOGGED_PEER_TEXT:
        text = text[:MAX_LOGGED_PEER_TEXT] + "..."
    return escape_unprintable(text)


# What a failed connection still handles: the events that end it.
_ENDING_EVENTS = frozenset((raw.PN_CONNECTION_REMOTE_CLOSE, raw.PN_TRANSPORT_ERROR, raw.PN_TRANSPORT_CLOSED))

_COLD_EVENTS = frozenset(
    (
        raw.PN_CONNECTION_REMOTE_OPEN,
        raw.PN_SESSION_REMOTE_OPEN,
        raw.PN_LINK_REMOTE_OPEN,
        raw.PN_LINK_REMOTE_CLOSE,
        raw.PN_LINK_REMOTE_DETACH,
        raw.PN_SESSION_REMOTE_CLOSE,
        raw.PN_CONNECTION_REMOTE_CLOSE,
        raw.PN_TRANSPORT_ERROR,
        raw.PN_TRANSPORT_CLOSED,
    )
)
