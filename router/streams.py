"""Large messages streamed through the router frame by frame, with bounded memory.

A message that arrives in several transfer frames (AMQP 1.0 §2.7.5, ``more``) is streamed once
``STREAM_AFTER_BYTES`` of it have arrived and its head is in: the sections the router reads and may
rewrite (header, delivery-annotations, message-annotations, properties: :func:`wire.codec.head_end`). The
head is routed like any message (:meth:`router.forwarder.Forwarder.arrive`); each copy the forwarder then
sends starts a delivery on its outgoing link with the head (annotated for a neighbour router) and every byte
kept so far, and is left unfinished: later bytes go to every started copy as they arrive, and the last ones
end it (the outgoing link sends nothing else meanwhile: a link's deliveries go in order). So no router holds
a whole large message: Qpid Dispatch streams the same way (src/message.c, one buffer chain per message read
by every outgoing copy).

What is kept, and for whom: bytes are kept only while some copy has not started yet (it is queued behind
other messages or waits for credit); once every copy has started, bytes go straight to the engines and the
router keeps none.

Q2 hold-off (Dispatch's name: include/qpid/dispatch/message.h, stop reading a message that holds more than
its buffer limit, resume below half): a stream stops taking its producer's bytes when it keeps more than
``STREAM_HOLD_BYTES`` for copies not started, or when a started copy's connection has more than
``STREAM_OUTPUT_HIGH`` bytes not yet written to its socket; it resumes under ``STREAM_RESUME_BYTES`` and
``STREAM_OUTPUT_LOW``. Holding off leaves the bytes in the engine
(:meth:`wire.assembly.MessageAssembler.hold_off`) and stops the sender:

* a client producer's connection is not read (TCP back-pressure, :meth:`EngineConnection.hold_reading`);
* a neighbour router's connection is never left unread (it carries the HELLOs that keep the neighbour
  alive, and streams in the other direction); its data links' sessions have a bounded incoming window
  instead (``INTER_ROUTER_SESSION_WINDOW``, AMQP 1.0 §2.5.6), so only the held data session stops.

Ends: when the producer aborts the delivery or goes away mid-message, every started copy is aborted (a
transfer with ``aborted`` set) and copies not started are dropped. When a consumer leaves mid-message, its
copy is forgotten (nothing counts as delivered on its link); the producer is told the outcome as for any
copy that failed (modified, delivery-failed) but settled only once it has sent the whole message (settling
an incoming delivery still arriving would leave its remaining frames without a delivery). When no copy is
left to feed, the rest of the message is read and dropped.

A message whose head did not fit in the bytes first read (it began at the end of a read) is looked at again
over everything kept each time that doubles; one with no head in ``MAX_HEAD_BYTES`` is dropped as it arrives
and rejected (``amqp:decode-error``) at its end.

A stream routed to a router-internal endpoint (which takes whole messages) is read and dropped, and the
delivery rejected with ``amqp:resource-limit-exceeded`` (router/meshforward.py). Not streamed: one arriving on
a policed connection whose check needs the head refused (the check runs on the head: a refused message is
read and dropped, then rejected).
"""

from __future__ import annotations

import logging

from wire import raw
from wire.codec import head_end

log = logging.getLogger("router.core")

# A multi-frame message is streamed once this many bytes of it arrived (smaller ones are assembled whole:
# one pass through the engine costs less than a stream's bookkeeping).
STREAM_AFTER_BYTES = 256 * 1024
# Bytes a stream keeps for copies not started before it stops reading (Dispatch's Q2 limit is 256 buffers
# of 512 B; ours is larger because a read hands over up to a socket buffer at once), and where it resumes.
STREAM_HOLD_BYTES = 1024 * 1024
STREAM_RESUME_BYTES = 512 * 1024
# Bytes written to a started copy's engine and not yet to its socket before the stream stops reading, and
# where it resumes: a few socket buffers, so a slow consumer slows its producer, not the router's memory.
STREAM_OUTPUT_HIGH = 2 * 1024 * 1024
STREAM_OUTPUT_LOW = 512 * 1024
# The most a message may hold without its head (header, annotations and properties: what the router
# parses) being complete: a legitimate head is a few KiB; one longer than this, or bytes that never
# parse as a message start, are refused with amqp:decode-error instead of held whole (the router could
# neither route nor stream them).
MAX_HEAD_BYTES = 16 * 1024 * 1024
# Incoming window of an inter-router data session, in bytes the router has not read (AMQP 1.0 §2.5.6):
# what a held stream can leave buffered per data session; large enough not to slow small messages.
INTER_ROUTER_SESSION_WINDOW = 8 * 1024 * 1024


def watch_output(engine) -> None:
    """Be told (Router.on_output_drained) when ``engine``'s unwritten output is down to
    STREAM_OUTPUT_LOW (wire.connection: ``output_watch_at``)."""
    if engine.output_watch_at < STREAM_OUTPUT_LOW:
        engine.output_watch_at = STREAM_OUTPUT_LOW


class Stream:
    """One incoming delivery being streamed, and the copies fed from it."""

    __slots__ = ("d", "rl", "ind", "kept", "kept_bytes", "copies", "complete", "aborted", "held_off",
                 "reading_held", "settle_when_complete", "presettled", "dropping", "refusal")

    def __init__(self, d, rl, presettled: bool) -> None:
        self.d = d              # the incoming delivery (valid until complete or aborted)
        self.rl = rl            # its incoming link
        self.ind = None         # the InDelivery routed for it
        self.kept: list = []    # bytes after the head, kept for copies not started
        self.kept_bytes = 0
        self.copies: list = []  # started and unfinished copies: (outgoing link, outgoing delivery)
        self.complete = False
        self.aborted = False
        self.held_off = False
        self.reading_held = False   # hold_reading asked of the producer's engine
        self.settle_when_complete = False  # its outcome went upstream; settlement waits for the end
        self.presettled = presettled
        self.dropping = False   # nobody is left to feed: the rest is read and dropped
        self.refusal = None     # (condition, description): refused on its head, answered at the end

    @property
    def unfinished(self) -> bool:
        """The producer is still sending it."""
        return not self.complete and not self.aborted


class Streams:
    """Every stream of one router: started by the forwarder's link owner, fed by the engine's chunks."""

    def __init__(self, forwarder, assembler) -> None:
        self.forwarder = forwarder
        self.assembler = assembler
        self.by_delivery: dict = {}  # incoming delivery -> Stream, while it arrives
        self.held: set = set()       # streams held off
        # Counters (management, tests).
        self.started = 0
        self.aborted = 0

    def __len__(self) -> int:
        return len(self.by_delivery)

    # -- starting ---------------------------------------------------------------------------------
    def wanted(self, rl, d, held: int) -> bool:
        """Stream this delivery? Once it is large enough and its head is in. The head is looked for in the
        first chunk kept; when it did not fit there (a message can begin at the end of a read), the kept
        chunks are joined and looked at again each time the bytes kept have doubled since."""
        if held < STREAM_AFTER_BYTES:
            return False
        first = self.assembler.first_bytes(d)
        if first is None:
            return False
        if head_end(first) is not None:
            return True
        if held < 2 * len(first):
            return False
        return head_end(self.assembler.coalesce(d)) is not None

    @staticmethod
    def head_too_long(held: int) -> bool:
        """After :meth:`wanted` said no: has the delivery kept MAX_HEAD_BYTES without a head? (Then it
        is refused rather than held whole: its sections before application-properties are absurdly long,
        or it does not begin as a message.)"""
        return held > MAX_HEAD_BYTES

    def on_chunk(self, engine, rl, d, chunk: bytes, end: int) -> None:
        """The engine's bytes of a streamed delivery (wire.assembly: MORE 0, LAST 1, ABORTED 2)."""
        st = self.by_delivery.get(d)
        if st is None:
            if end == 2:
                return
            st = self._start(engine, rl, d, chunk)
            if end == 1:
                self._finish(st)
            return
        if end == 0:
            self._append(st, chunk)
        elif end == 1:
            self._append(st, chunk)
            self._finish(st)
        else:
            self.abort(st)

    def _start(self, engine, rl, d, first: bytes) -> Stream:
        h = head_end(first)
        head, rest = first[:h], first[h:]
        st = Stream(d, rl, raw.delivery_settled(d))
        self.by_delivery[d] = st
        self.started += 1
        if rest:
            st.kept.append(rest)
            st.kept_bytes = len(rest)
        gate = rl.conn.gate
        if gate is not None:
            why = gate.refusal(head, rl.address is None)
            if why is not None:
                st.refusal = ("amqp:unauthorized-access", why)
                self._drop(st)
                return st
        self.forwarder.arrive(engine, rl, d, head, st)
        ind = st.ind
        if ind is None or ind.buffered == 0:
            # Routed nowhere (released, rejected, or to an endpoint that takes no stream): read and drop.
            self._drop(st)
        else:
            self._check_hold(st)
        return st

    # -- the outgoing side (called by Forwarder.pump) ---------------------------------------------
    def start_copy(self, st: Stream, ol, seq: int, head: bytes, ring_ok: bool):
        """Begin ``st``'s copy on ``ol`` (it has credit and nothing unfinished): the head and what is kept.
        Returns (outgoing delivery, bytes written); the copy is finished at once when the message is."""
        ptr = ol.ptr
        if ring_ok:
            od = raw.begin_ring_tagged(ptr, seq, head)
        else:
            od = raw.begin_tagged(ptr, b"x%x" % seq, head)
        n = len(head)
        for chunk in st.kept:
            raw.send_more(ptr, chunk)
        n += st.kept_bytes
        if st.complete:
            raw.link_advance(ptr)
        else:
            st.copies.append((ol, od))
            ol.streaming = st
        return od, n

    def copy_started(self, st: Stream) -> None:
        """The forwarder started a copy; when it was the last one waiting, nothing needs keeping."""
        if st.ind.buffered == 0 and st.kept:
            st.kept = []
            st.kept_bytes = 0
            if st.held_off:
                self._try_resume(st)

    # -- arriving bytes ---------------------------------------------------------------------------
    def _append(self, st: Stream, chunk: bytes) -> None:
        n = len(chunk)
        if not n or st.dropping:
            return
        if not st.copies and not st.ind.buffered:  # its destinations went before it started anywhere
            self._drop(st)
            return
        for ol, _ in st.copies:
            raw.send_more(ol.ptr, chunk)
            engine = ol.engine
            engine.out_pending += n
            ol.conn.out_unsettled += n
            engine.wake()
        if st.ind.buffered:
            st.kept.append(chunk)
            st.kept_bytes += n
        self._check_hold(st)

    def _finish(self, st: Stream) -> None:
        """The producer sent the last bytes: end every started copy, settle what waited for the end."""
        st.complete = True
        del self.by_delivery[st.d]
        self._unhold(st)
        forwarder = self.forwarder
        for ol, od in st.copies:
            raw.link_advance(ol.ptr)
            ol.streaming = None
            forwarder.copy_finished(ol, od, st.ind)
        st.copies = []
        if st.ind is not None and st.ind.buffered == 0:
            st.kept = []
            st.kept_bytes = 0
        d = st.d
        if st.refusal is not None:
            raw.set_rejected(d, *st.refusal)
            raw.delivery_settle(d)
            st.rl.engine.wake()
        elif st.presettled or st.settle_when_complete or (st.ind is not None and st.ind.ptr is None):
            if not st.rl.closed:
                raw.delivery_settle(d)
                st.rl.engine.wake()

    def abort(self, st: Stream) -> None:
        """The producer aborted the delivery or went away mid-message: abort every started copy; copies
        not started are dropped when the forwarder reaches them."""
        if not st.unfinished:
            return
        st.aborted = True
        self.aborted += 1
        self.by_delivery.pop(st.d, None)
        self._unhold(st)
        st.kept = []
        st.kept_bytes = 0
        forwarder = self.forwarder
        for ol, od in st.copies:
            ol.streaming = None
            raw.delivery_abort(od)
            forwarder.copy_aborted(ol, od, st.ind)
        st.copies = []
        ind = st.ind
        if ind is not None:
            ind.ptr = None  # the engine settled the aborted delivery: no outcome goes upstream

    def producer_gone(self, rl) -> None:
        """Incoming link ``rl`` left routing: abort its streams."""
        if not self.by_delivery:
            return
        for st in [s for s in self.by_delivery.values() if s.rl is rl]:
            self.abort(st)

    def copy_lost(self, ol) -> None:
        """Outgoing link ``ol`` went away with an unfinished copy: forget the copy (its link is gone; the
        forwarder fails it towards the producer as any unsettled copy)."""
        st = ol.streaming
        ol.streaming = None
        if st is None:
            return
        st.copies = [(l, od) for l, od in st.copies if l is not ol]
        if not st.copies and st.ind is not None and st.ind.buffered == 0:
            self._drop(st)
        elif st.held_off:
            self._try_resume(st)

    def _drop(self, st: Stream) -> None:
        """Nobody is left to feed: read the rest and drop it."""
        st.dropping = True
        st.kept = []
        st.kept_bytes = 0
        if st.held_off:
            self._unhold(st)
            if st.unfinished and not st.rl.closed:
                self.assembler.resume(st.rl.engine, st.d)

    # -- Q2 hold-off ------------------------------------------------------------------------------
    def _check_hold(self, st: Stream) -> None:
        if st.held_off:
            return
        over = st.kept_bytes > STREAM_HOLD_BYTES
        for ol, _ in st.copies:
            engine = ol.engine
            if engine.out_pending > STREAM_OUTPUT_HIGH:
                over = True
                watch_output(engine)
        if not over:
            return
        st.held_off = True
        self.held.add(st)
        self.assembler.hold_off(st.d)
        rl = st.rl
        if not rl.inter_router and rl.conn.role not in ("inter-router", "edge"):
            st.reading_held = True
            rl.engine.hold_reading()

    def _try_resume(self, st: Stream) -> None:
        ind = st.ind
        if ind is not None and ind.buffered == 0 and not st.copies:
            # Every copy it waited for went (released with its link): nobody is left to feed.
            self._drop(st)
            return
        if st.kept_bytes > STREAM_RESUME_BYTES:
            return
        for ol, _ in st.copies:
            if ol.engine.out_pending > STREAM_OUTPUT_LOW:
                watch_output(ol.engine)
                return
        self._unhold(st)
        if st.unfinished and not st.rl.closed:
            self.assembler.resume(st.rl.engine, st.d)

    def _unhold(self, st: Stream) -> None:
        if not st.held_off:
            return
        st.held_off = False
        self.held.discard(st)
        if st.reading_held:
            st.reading_held = False
            st.rl.engine.release_reading()

    def recheck(self) -> None:
        """Output drained somewhere (or the periodic tick): resume the held streams that have room."""
        if self.held:
            for st in list(self.held):
                self._try_resume(st)
