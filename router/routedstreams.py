"""Large messages on link-routed links, streamed frame by frame (issue 17; the message-routed path is
router/streams.py).

A routed link pair carries each delivery from one side to the other with its tag and bytes untouched
(router/linkroutes.py). A multi-frame delivery of ``STREAM_AFTER_BYTES`` or more is not assembled: its
bytes go on to the partner delivery as they arrive (:func:`wire.raw.begin_tagged` / :func:`send_more`), it
ends when the sender's last frame arrives, and it is aborted when the sender aborts it or its link goes.
An outcome the receiver gives before the end goes to the sender at once; settlement waits for the end (an
incoming delivery still arriving must stay open). Q2 hold-off as in router/streams.py: while the partner's
connection has more than ``STREAM_OUTPUT_HIGH`` bytes not yet written to its socket, the stream reads no more
(a client sender's connection is not read either) until that output falls to ``STREAM_OUTPUT_LOW``. A
neighbour router's connection is never paused: a routed link the router receives on from a neighbour has
the bounded session window of the message-routed data links instead (:func:`bound_neighbour_session`).

Not streamed: a policed client's messages whose user-id the policy checks (the check needs the message;
they are assembled whole, bounded by the policy's maxMessageSize).
"""

from __future__ import annotations

from typing import Protocol

from wire import raw
from wire.assembly import ABORTED, LAST, MORE
from router.streams import (INTER_ROUTER_SESSION_WINDOW, STREAM_AFTER_BYTES, STREAM_OUTPUT_HIGH,
                            STREAM_OUTPUT_LOW, watch_output)

# Connections whose socket a held stream never pauses: a neighbour router that is not read misses HELLOs.
NEIGHBOUR_ROLES = ("inter-router", "edge")


def bound_neighbour_session(side) -> None:
    """Give a routed link the router receives on from a neighbour router the bounded session window of
    message-routed data links (INTER_ROUTER_SESSION_WINDOW): the neighbour's socket is never paused, so
    a held stream stops at the window of the link's own session (AMQP 1.0 §2.5.6; the routers open one
    session per routed link) instead of filling this router's memory with the rest of the message."""
    if side.receiving and side.rc.role in NEIGHBOUR_ROLES:
        raw.session_set_incoming_capacity(raw.link_session(side.ptr), INTER_ROUTER_SESSION_WINDOW)


class PairCalls(Protocol):
    """What a stream asks of router/linkroutes.py's LinkRouter."""

    def count_passed(self, side, peer) -> None: ...

    def sync_credit(self, side) -> None: ...

    @staticmethod
    def copy_state(src, dst) -> None: ...


class RoutedStream:
    """One delivery streaming from ``side`` to its partner ``out`` on ``side.peer``."""

    __slots__ = ("d", "side", "peer", "out", "held_off", "reading_held")

    def __init__(self, d, side, peer, out) -> None:
        self.d, self.side, self.peer, self.out = d, side, peer, out
        self.held_off = False
        self.reading_held = False


class RoutedStreams:
    """The streams of every routed link pair of one router (composed into LinkRouter)."""

    def __init__(self, assembler) -> None:
        self.assembler = assembler
        self.by_delivery: dict = {}  # incoming delivery -> RoutedStream
        # Incoming deliveries still arriving whose partner is gone: read and dropped; the value is True when
        # the sender already has its outcome (settle it at the end), False to answer modified then.
        self.dropping: dict = {}
        self.held: set = set()
        self.started = 0
        self.aborted = 0

    def __len__(self) -> int:
        return len(self.by_delivery)

    @staticmethod
    def wanted(side, held: int) -> bool:
        gate = side.gate
        peer = side.peer
        return (held >= STREAM_AFTER_BYTES and peer is not None and peer.open
                and (gate is None or not gate.check_user_id))

    def on_chunk(self, engine, side, d, chunk: bytes, end: int, pairs: "PairCalls") -> None:
        """Bytes of a streamed delivery on the side where the router receives (wire.assembly's MORE, LAST,
        ABORTED)."""
        st = self.streaming(d)
        if st is not None:
            if end == MORE:
                self.more(d, chunk)
            elif end == LAST:
                self.more(d, chunk)
                self._stream_ended(side, d)
            else:
                self.abort(d)
                out = side.deliveries.pop(d, None)
                if st.peer is not None and out is not None:
                    st.peer.deliveries.pop(out, None)
            return
        if d in self.dropping:
            if end == MORE:
                return
            answered = self.dropping.pop(d)
            if end == LAST:
                if not answered:
                    raw.set_modified(d, failed=True)
                    side.modified += 1
                raw.delivery_settle(d)
                engine.wake()
            return
        if end == ABORTED:
            return
        side.delivery_count += 1
        out = self.start(side, d, chunk)
        if out is None:  # the partner went before the first bytes could go on
            if end == LAST:
                raw.set_modified(d, failed=True)
                raw.delivery_settle(d)
                side.modified += 1
            else:
                self.dropping[d] = False
            return
        peer = side.peer
        pairs.count_passed(side, peer)
        if raw.delivery_remote_state(d):
            pairs.copy_state(d, out)  # a transactional state on the transfer goes on with it
        if not raw.delivery_settled(d):
            side.deliveries[d] = out
            peer.deliveries[out] = d
        if end == LAST:
            self._stream_ended(side, d)
        pairs.sync_credit(side)

    def _stream_ended(self, side, d) -> None:
        """The sender's last bytes went on: end the partner delivery; settle what waited for the end."""
        st = self.end(d)
        peer = st.peer
        raw.link_advance(peer.ptr)
        if raw.delivery_settled(d):  # sent pre-settled
            raw.delivery_settle(st.out)
            raw.delivery_settle(d)
            side.presettled += 1
            peer.presettled += 1
        peer.rc.engine.wake()
        side.rc.engine.wake()

    def start(self, side, d, first: bytes):
        """The first bytes of a streamed delivery: begin the partner delivery. Returns it (or None when the
        partner is gone: the rest is read and dropped, the sender told modified at the end)."""
        peer = side.peer
        if peer is None or not peer.open:
            return None
        out = raw.begin_tagged(peer.ptr, raw.delivery_tag(d), first)
        self.by_delivery[d] = RoutedStream(d, side, peer, out)
        self.started += 1
        self._account(peer, len(first))
        return out

    def more(self, d, chunk: bytes) -> None:
        st = self.by_delivery.get(d)
        if st is None or not chunk:
            return
        raw.send_more(st.peer.ptr, chunk)
        self._account(st.peer, len(chunk))
        engine = st.peer.rc.engine
        if engine.out_pending > STREAM_OUTPUT_HIGH and not st.held_off:
            watch_output(engine)
            st.held_off = True
            self.held.add(st)
            self.assembler.hold_off(d)
            rc = st.side.rc
            if rc.role not in NEIGHBOUR_ROLES:
                st.reading_held = True
                rc.engine.hold_reading()

    def end(self, d) -> RoutedStream | None:
        """The last bytes were passed on (or the delivery aborted): forget the stream, return it."""
        st = self.by_delivery.pop(d, None)
        if st is not None:
            self._unhold(st)
        return st

    def abort(self, d) -> None:
        st = self.end(d)
        if st is not None:
            self.aborted += 1
            if st.peer.open:
                raw.delivery_abort(st.out)
                st.peer.rc.engine.wake()

    def streaming(self, d) -> RoutedStream | None:
        return self.by_delivery.get(d) if self.by_delivery else None

    def side_gone(self, side) -> None:
        """A side of a pair went: abort what it was sending, forget what went to it."""
        if not self.by_delivery:
            return
        for d, st in list(self.by_delivery.items()):
            if st.side is side:
                self.abort(d)
            elif st.peer is side:
                held = st.held_off
                self.end(d)  # the sender goes on; its bytes are dropped as they arrive (no partner)
                self.dropping[d] = False
                if held and not st.side.rc.engine.failed:
                    self.assembler.resume(st.side.rc.engine, d)

    def recheck(self) -> None:
        """Output drained somewhere: resume the streams whose partner has room."""
        for st in list(self.held):
            engine = st.peer.rc.engine
            if engine.out_pending > STREAM_OUTPUT_LOW and st.peer.open:
                watch_output(engine)
                continue
            self._unhold(st)
            if not st.side.rc.engine.failed:
                self.assembler.resume(st.side.rc.engine, st.d)

    def _unhold(self, st: RoutedStream) -> None:
        if st.held_off:
            st.held_off = False
            self.held.discard(st)
            if st.reading_held:
                st.reading_held = False
                st.side.rc.engine.release_reading()

    @staticmethod
    def _account(peer, n: int) -> None:
        engine = peer.rc.engine
        engine.out_pending += n
        engine.wake()
