"""Incoming deliveries, sans-IO: whole messages for the owner of each link, whatever the framing.

A message larger than the connection's max-frame-size arrives as several transfer frames (AMQP 1.0
§2.7.5, ``more``); a sender may abort a delivery it has begun (§2.7.5, ``aborted``). Router and broker
alike want a complete message as bytes, a size limit enforced while the bytes arrive (a message over it
is refused before it is complete, not after), and no memory pinned by a peer that starts a message and
never finishes it. :class:`MessageAssembler` does that once for every application.

Who gets what: an application registers each link it accepts or attaches with
:meth:`wire.connection.EngineConnection.own_link`, giving its own per-link record. The record names the
link's :class:`LinkOwner` and carries ``incoming`` (the peer sends on it) and ``max_message_size``
(bytes, 0 = no limit; AMQP 1.0 §2.7.3). The engine hands every delivery and flow event of an owned link to
its owner: whole messages through ``on_message``, everything else through ``on_delivery_update`` and
``on_link_flow``. Events of links nobody owns go to the connection handler's ``on_delivery`` /
``on_link_flow`` as before.

Streaming: an owner that wants a large message's bytes as they arrive instead of whole (the router
forwards it frame by frame; the broker writes it to a file) answers ``STREAM`` from
:meth:`LinkOwner.on_partial`. From then on the assembler keeps nothing of that delivery: each read goes
to :meth:`LinkOwner.on_chunk` (the bytes kept so far in the first call), ending with ``LAST`` (the link is
advanced) or ``ABORTED`` (the sender aborted it, AMQP 1.0 §2.7.5; advanced and settled). An owner that
cannot take more bytes for a while calls :meth:`MessageAssembler.hold_off`: the bytes stay in proton (and
the socket or the session window stops the sender), and the delivery does not count as stalled, until
:meth:`MessageAssembler.resume` reads what waits. The size limit still applies to a streamed message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

from wire import raw

# Verdicts of LinkOwner.on_partial.
KEEP = 0     # go on assembling
DISCARD = 1  # drop the bytes (now and as they arrive); on_message(msg=None) when the message is complete
FORGET = 2   # the owner answered the delivery and closed or disowned its link: drop what was kept
STREAM = 3   # hand the bytes to the owner as they arrive (on_chunk), keeping none

# The ``end`` argument of LinkOwner.on_chunk.
MORE = 0     # more bytes follow
LAST = 1     # the delivery is complete (the link is advanced past it)
ABORTED = 2  # the sender aborted the delivery (advanced and settled)

# AMQP 1.0 §2.8.18: the link error for a message larger than the link takes.
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"


class LinkRecord(Protocol):
    """What the engine reads of an application's per-link record."""

    owner: "LinkOwner"
    incoming: bool          # the peer sends on this link (we are its receiver)
    max_message_size: int   # bytes; 0 = no limit


class LinkOwner(Protocol):
    """The part of an application that handles one kind of link (the router's forwarder, its
    inter-router control links, its link routes; the broker's queues ...)."""

    def on_message(self, engine, link: LinkRecord, d, msg: bytes | None) -> None:
        """A whole message arrived on an incoming link, which is already advanced past it. ``msg`` is
        None when the owner asked (``DISCARD``) to drop it while it arrived: answer the delivery now."""

    def on_partial(self, engine, link: LinkRecord, d, held: int) -> int:
        """More bytes of a multi-frame message arrived (``held``: its bytes so far). Return ``KEEP``,
        ``DISCARD`` or ``FORGET``."""

    def on_chunk(self, engine, link: LinkRecord, d, chunk: bytes, end: int) -> None:
        """Bytes of a delivery the owner streams (it answered ``STREAM``); ``end`` is ``MORE``, ``LAST``
        or ``ABORTED``. Only owners that ever answer ``STREAM`` need this."""

    def on_delivery_update(self, engine, link: LinkRecord, d) -> None:
        """Any other delivery event: a delivery sent on an outgoing link changed state or was settled,
        or an incoming delivery already taken is now settled by the peer."""

    def on_link_flow(self, engine, link: LinkRecord) -> None:
        """The peer's flow frame changed the link's credit or drain."""

    def on_oversized(self, engine, link: LinkRecord, d, limit: int) -> None:
        """A message grew past ``link.max_message_size``. The engine has rejected it with
        ``amqp:link:message-size-exceeded``, settled it, dropped its bytes and disowned the link, and
        closes the link with that condition (the one way to stop a sender mid-message) after this
        returns. The owner forgets the link."""


@dataclass(slots=True)
class Partial:
    """What arrived so far of one delivery."""

    owner: object  # the link record
    engine: object = None  # the connection it arrives on (its ``arriving`` count includes it)
    chunks: list = field(default_factory=list)
    size: int = 0   # bytes arrived
    held: int = 0   # bytes kept (0 once discarded)
    last_progress: float = 0.0
    discarding: bool = False
    streaming: bool = False  # the owner takes the bytes as they arrive (STREAM)
    held_off: bool = False   # ... and asked for no more for now (hold_off)


_recv_all = raw.recv_all
_link_advance = raw.link_advance
_link_current = raw.link_current
_delivery_readable = raw.delivery_readable
_delivery_partial = raw.delivery_partial
_delivery_aborted = raw.delivery_aborted


class MessageAssembler:
    """Deliveries in progress, with the bytes they hold and the time each last grew.

    ``on_held(link_record, delta)`` is told whenever the bytes held change (a daemon's memory budget);
    ``clock`` gives the time of progress (seconds). :meth:`stalled` lists the deliveries that have not
    grown for a while; the application decides what to do about them (the router detaches their links).
    """

    __slots__ = ("partials", "total", "on_held", "clock")

    def __init__(self, on_held: Callable | None = None, clock: Callable[[], float] | None = None) -> None:
        self.partials: dict = {}  # delivery pointer -> Partial
        self.total = 0  # bytes held over every delivery in progress
        self.on_held = on_held
        self.clock = clock or time.monotonic

    def __bool__(self) -> bool:
        return bool(self.partials)

    # -- the engine's entry point (once per delivery event of an owned incoming link) -------------
    def incoming(self, engine, rec, d, lp) -> None:
        """A delivery event on incoming link ``lp`` owned by ``rec``."""
        if not _delivery_readable(d):
            rec.owner.on_delivery_update(engine, rec, d)
            return
        if self.partials:
            p = self.partials.get(d)
            if p is not None and p.streaming:
                if not p.held_off:
                    self._stream(engine, rec, d, lp, p)
                return
        if _delivery_partial(d):
            chunk = _recv_all(lp)
            if chunk:
                self._grow(engine, rec, d, lp, chunk)
            elif _delivery_aborted(d):
                self._aborted(lp, d)
            return
        msg = _recv_all(lp)
        if not msg and _delivery_aborted(d):
            self._aborted(lp, d)
            return
        if self.partials:
            p = self.partials.get(d)
            if p is not None:
                self._release(d, p)
                if p.discarding:
                    _link_advance(lp)
                    rec.owner.on_message(engine, rec, d, None)
                    return
                p.chunks.append(msg)
                msg = b"".join(p.chunks)
        limit = rec.max_message_size
        if limit and len(msg) > limit:
            self._oversized(engine, rec, d, lp, limit)
            return
        _link_advance(lp)
        rec.owner.on_message(engine, rec, d, msg)

    def _grow(self, engine, rec, d, lp, chunk: bytes) -> None:
        p = self.partials.get(d)
        if p is None:
            p = self.partials[d] = Partial(rec, engine)
            engine.arriving += 1
        n = len(chunk)
        p.size += n
        p.last_progress = self.clock()
        if p.discarding:
            return
        p.chunks.append(chunk)
        p.held += n
        self.total += n
        if self.on_held is not None:
            self.on_held(rec, n)
        limit = rec.max_message_size
        if limit and p.size > limit:
            self._oversized(engine, rec, d, lp, limit)
            return
        verdict = rec.owner.on_partial(engine, rec, d, p.size)
        if verdict == STREAM:
            first = b"".join(p.chunks)
            p.chunks = []
            self._unhold(p)
            p.streaming = True
            rec.owner.on_chunk(engine, rec, d, first, MORE)
        elif verdict == DISCARD:
            self._unhold(p)
            p.chunks.clear()
            p.discarding = True
        elif verdict == FORGET:
            self.drop(d)

    def _stream(self, engine, rec, d, lp, p: Partial) -> None:
        """Hand what arrived of a streamed delivery to its owner."""
        if _delivery_aborted(d):
            self._forget(d)
            _link_advance(lp)
            raw.delivery_settle(d)
            rec.owner.on_chunk(engine, rec, d, b"", ABORTED)
            self._next_after_held(engine, rec, lp)
            return
        chunk = _recv_all(lp)
        n = len(chunk)
        p.size += n
        limit = rec.max_message_size
        if limit and p.size > limit:
            self._oversized(engine, rec, d, lp, limit)
            return
        if _delivery_partial(d):
            if n:
                p.last_progress = self.clock()
                rec.owner.on_chunk(engine, rec, d, chunk, MORE)
            return
        self._forget(d)
        _link_advance(lp)
        rec.owner.on_chunk(engine, rec, d, chunk, LAST)
        self._next_after_held(engine, rec, lp)

    def _next_after_held(self, engine, rec, lp) -> None:
        """A streamed delivery ended and the link moved to its next one. While the stream was held off it
        stayed the link's current delivery, so the events of every delivery behind it found them
        unreadable and were passed over; those all in the engine already get no further event. Read them
        now, one after the other, until one stays current (it is still arriving, or it is held): its own
        events will come. Harmless for a delivery whose events are still to come (nothing new to read)."""
        while True:
            nd = _link_current(lp)
            if not nd or nd in self.partials:
                return
            self.incoming(engine, rec, nd, lp)
            if _link_current(lp) == nd:
                return

    def hold_off(self, d) -> None:
        """Read no more of streamed delivery ``d`` until :meth:`resume` (its owner has no room)."""
        p = self.partials.get(d)
        if p is not None and p.streaming:
            p.held_off = True

    def resume(self, engine, d) -> None:
        """Read what waits of streamed delivery ``d`` again (the owner has room)."""
        p = self.partials.get(d)
        if p is None or not p.held_off:
            return
        p.held_off = False
        p.last_progress = self.clock()
        # Still the link's current delivery (it is advanced only when complete): read what waits, or
        # finish it if its end arrived meanwhile.
        self._stream(engine, p.owner, d, raw.delivery_link(d), p)

    def is_streaming(self, d) -> bool:
        """True while ``d`` is a streamed delivery still arriving."""
        p = self.partials.get(d)
        return p is not None and p.streaming

    def _oversized(self, engine, rec, d, lp, limit: int) -> None:
        self.drop(d)
        description = f"message larger than the {limit}-byte limit of this connection"
        raw.set_rejected(d, MESSAGE_SIZE_EXCEEDED, description)
        raw.delivery_settle(d)
        engine.disown_link(lp)
        rec.owner.on_oversized(engine, rec, d, limit)
        engine.close_link(lp, MESSAGE_SIZE_EXCEEDED, description)

    def _aborted(self, lp, d) -> None:
        """The sender aborted the delivery: forget what arrived of it."""
        self.drop(d)
        _link_advance(lp)
        raw.delivery_settle(d)

    # -- bookkeeping ------------------------------------------------------------------------------
    def _unhold(self, p: Partial) -> None:
        if p.held:
            self.total -= p.held
            if self.on_held is not None:
                self.on_held(p.owner, -p.held)
            p.held = 0

    def _forget(self, d) -> None:
        """``d`` is no longer in progress (complete, aborted, refused or dropped)."""
        p = self.partials.pop(d)
        p.engine.arriving -= 1

    def _release(self, d, p: Partial) -> None:
        self._forget(d)
        self._unhold(p)

    def __len__(self) -> int:
        """How many deliveries are in progress."""
        return len(self.partials)

    def first_bytes(self, key) -> bytes | None:
        """The first chunk kept of a delivery in progress (a message's header comes first), or None."""
        p = self.partials.get(key)
        return p.chunks[0] if p is not None and p.chunks else None

    def coalesce(self, key) -> bytes | None:
        """Join the chunks kept of a delivery in progress into one (its first); that chunk, or None."""
        p = self.partials.get(key)
        if p is None or not p.chunks:
            return None
        if len(p.chunks) > 1:
            p.chunks = [b"".join(p.chunks)]
        return p.chunks[0]

    def size_of(self, key) -> int:
        """Bytes arrived so far of a delivery in progress (0 when none)."""
        p = self.partials.get(key)
        return p.size if p is not None else 0

    def drop(self, key) -> int:
        """Forget a delivery (refused, aborted, or its link went); the bytes it held."""
        p = self.partials.pop(key, None)
        if p is None:
            return 0
        p.engine.arriving -= 1
        held = p.held
        self._unhold(p)
        return held

    def drop_owner(self, owner) -> int:
        """Forget every delivery of link record ``owner``; the bytes they held."""
        keys = [k for k, p in self.partials.items() if p.owner is owner]
        return sum(self.drop(k) for k in keys)

    def touch(self, key, now: float) -> None:
        """Count the delivery as progressing now (e.g. the application is not reading from its peer, so
        the lack of progress is the application's, not the peer's)."""
        p = self.partials.get(key)
        if p is not None:
            p.last_progress = now

    def stalled(self, now: float, timeout: float) -> list:
        """The deliveries that have not grown for ``timeout`` seconds."""
        limit = now - timeout
        return [k for k, p in self.partials.items() if p.last_progress <= limit and not p.held_off]

    def owner_of(self, key):
        """The link record of a delivery in progress (None when none)."""
        p = self.partials.get(key)
        return p.owner if p is not None else None
