"""Large messages on the wire, sans-IO apart from their files: streamed into a file as they arrive, and out
of it to a consumer a piece at a time (see :mod:`broker.largemessage` for what is stored and why).

:class:`LargeStreams` is a part of :class:`broker.delivery.DeliveryPath`:

* **In.** When a durable message still arriving on a producer's link passes the connection's
  ``amqpMinLargeMessageSize`` (:meth:`LargeStreams.wants`), the path answers wire's ``on_partial`` with
  ``STREAM`` (:mod:`wire.assembly`): from then on each read of the socket goes straight to the message's
  file (:meth:`LargeStreams.chunk`, one synchronous ``os.write`` of at most what one read brought, so
  nothing accumulates), and when the last frame is in, the file is fsynced and renamed and the path stores
  a reference (:meth:`broker.delivery.DeliveryPath.store`): the journal record refers to a file already on
  disk, and the producer hears ``accepted`` only once that record is (the guarantee of any durable message).
  An aborted delivery (AMQP 1.0 §2.7.5), or its link going, removes the file.
* **Out.** A reference handed to a consumer (:meth:`LargeStreams.start`) becomes one delivery whose head
  is the reference's (as the queue changed it: delivery-count, annotations) and whose rest is read from
  the file in :data:`SEND_CHUNK` pieces, written with ``pn_link_send`` without advancing (transfer frames
  with ``more``, AMQP 1.0 §2.7.5) while the connection has fewer than :data:`OUTPUT_HIGH` bytes waiting for
  its socket (:attr:`wire.connection.EngineConnection.out_pending`); then the path waits for
  ``on_output_drained`` (at :data:`OUTPUT_LOW`) before reading more. The link is advanced after the last
  piece. Messages the queue hands to that consumer meanwhile wait behind it in order (a link has one
  current delivery); a consumer that leaves mid-message gets the delivery aborted and the queue takes the
  message back.

File reads and writes are synchronous in the Trio thread, as the journal's reads of paged messages are:
each is one bounded chunk from or to the page cache; the fsync of a completed message is the one longer
wait (see docs/broker-configuration.md, "Large messages").
"""

from __future__ import annotations

import logging
import os

from broker.largemessage import is_reference, make_reference, parse_reference, reference_head
from broker.queue import ACCEPTED
from wire import assembly, codec, raw
from wire.assembly import MESSAGE_SIZE_EXCEEDED
from wire.amqptypes import CodecError
from wire.header import read_header

log = logging.getLogger("broker.server")

#: Bytes read from a large message file per ``pn_link_send`` (proton frames them by max-frame-size).
SEND_CHUNK = 64 * 1024
#: Stop reading a large message file for a connection while this many bytes wait for its socket ...
OUTPUT_HIGH = 1024 * 1024
#: ... and go on once they are down to this many. Together they bound what a streamed message holds in
#: memory per connection (plus what proton frames from one chunk).
OUTPUT_LOW = 256 * 1024


def head_end(prefix: bytes) -> int | None:
    """Where a message's head (the sections before its body) ends in its first bytes, or None while they
    end before it. A malformed head raises :class:`wire.amqptypes.CodecError` only once the prefix is long
    enough that truncation cannot explain it."""
    try:
        sections = codec.scan(prefix)
    except CodecError:
        return None
    return sections.body_start


class LargeSend:
    """One large message being sent on a consumer's link."""

    __slots__ = ("bl", "q", "token", "msg", "d", "fd", "offset", "end")

    def __init__(self, bl, q, token, msg, d, fd: int, offset: int, end: int) -> None:
        self.bl, self.q, self.token, self.msg, self.d = bl, q, token, msg, d
        self.fd, self.offset, self.end = fd, offset, end


class LargeStreams:
    """Large messages into files and out of them (see the module docstring); a part of the delivery path."""

    def __init__(self, path) -> None:
        self.path = path  # broker.delivery.DeliveryPath
        self.sending: dict = {}  # engine -> [LargeSend], the streams of each connection, oldest first
        self.streamed_in = 0     # large messages stored
        self.streamed_out = 0    # large messages sent in full
        self.aborted_out = 0     # sends aborted (the consumer left, the file could not be read)

    @property
    def store(self):
        return self.path.storage.large

    # -- in ---------------------------------------------------------------------------------------------
    def wants(self, engine, bl, d, held: int) -> bool:
        """Stream this message still arriving into a file? Yes when large messages are on (persistence
        enabled, the connection's threshold not -1), it has reached the threshold, and its header says
        durable (a non-durable message is assembled in memory as before), on a link the path owns itself."""
        if held < engine.app.min_large_message_size or not self.may_stream(bl):
            return False
        a = bl.arriving
        if a is not None and a.delivery == d:
            return a.durable
        first = engine.assembler.first_bytes(d)
        try:
            return bool(first) and read_header(first).durable
        except Exception:  # a malformed header: assembled whole and rejected then
            return False

    def may_stream(self, bl) -> bool:
        """Whether a durable message on producer link ``bl`` becomes a large message once it reaches the
        connection's threshold: large messages are on (persistence enabled, the threshold not -1) and the
        link is one the path owns itself, into a queue or an address (not $management; not a link another
        part owns and delegates to the path -- a federation receiver counts hops and applies its
        transformer, a mirror target applies events: their messages arrive whole, as before)."""
        return self.store is not None and bl.engine.app.min_large_message_size >= 0 and \
            bl.owner is self.path and (bl.mode is None or bl.mode == bl.FANOUT)

    def chunk(self, engine, bl, d, data: bytes, end: int) -> None:
        """wire's ``on_chunk``: bytes of a message being streamed into its file."""
        writer = bl.writing
        if writer is None:
            if bl.closed:
                return
            try:
                writer = bl.writing = self.store.create()
            except OSError as exc:
                log.error("large message file cannot be created in %s: %s", self.store.directory, exc)
                bl.writing = writer = _Failed(f"large message file cannot be created: {exc.strerror or exc}")
        if data:
            writer.write(data, head_end)
        if end == assembly.MORE:
            a = bl.arriving
            if a is not None and writer.error is None and (writer.size > a.cap or writer.size >= a.next_check):
                # the checks wire's on_partial no longer makes (disk space, address limits), as often
                condition, why = self.path.admission.check_arriving(bl, a, writer.size, large=True)
                if condition == MESSAGE_SIZE_EXCEEDED:
                    bl.writing = None
                    writer.discard()
                    engine.assembler.drop(d)
                    self.path.stop_arriving(bl, d, condition, why)
                elif condition is not None:
                    writer.error = why  # its bytes are dropped from now on; rejected when complete
            return
        bl.writing = None
        bl.arriving = None
        if end == assembly.ABORTED:
            writer.discard()
            self.path.give_credit(bl)  # the sender aborted it: its credit comes back
            return
        # LAST: the link is advanced past the delivery
        if bl.closed:
            writer.discard()
            return
        if writer.error is None and writer.head_len is None:
            writer.error = "message without a body section"
        if writer.error is not None or not writer.finish():
            why = writer.error
            writer.discard()
            self.path.refuse(bl, d, why)
            return
        fid = writer.file_id
        ref = make_reference(writer.head, fid, writer.size, writer.head_len)
        self.streamed_in += 1
        try:
            self.path.store(bl, d, ref, large_size=writer.size)
        finally:
            self.store.release(fid)  # nothing refers to it: refused, or routed to no queue

    def store_whole(self, engine, bl, d, payload: bytes) -> bool:
        """A message that arrived whole (in one read) but is at least the threshold long: written to its
        file and stored as a reference all the same (memory and the journal hold its head only). False
        when it is not to be a large message (not durable, a malformed header): store it as usual."""
        try:
            if not read_header(payload).durable:
                return False
        except Exception:  # malformed: the usual path rejects it
            return False
        self.chunk(engine, bl, d, payload, assembly.LAST)
        return True

    def link_gone(self, bl) -> None:
        """``bl`` is unbound: a message it was writing is dropped, one it was sending aborted."""
        writer = bl.writing
        if writer is not None:
            bl.writing = None
            writer.discard()
        s = bl.streaming
        if s is not None:
            bl.streaming = None
            self._close(s)
            streams = self.sending.get(bl.engine)
            if streams is not None and s in streams:
                streams.remove(s)
                if not streams:
                    del self.sending[bl.engine]
            try:
                raw.delivery_abort(s.d)
            except Exception:  # the link or its session is already gone in proton
                pass
            self.aborted_out += 1
        bl.backlog = None

    # -- out --------------------------------------------------------------------------------------------
    def start(self, bl, q, token, msg, out: bytes) -> None:
        """Begin sending reference ``out`` (the bytes the consumer is to get, head first) on ``bl`` (a file
        that cannot be opened drops the message)."""
        fid, size, head_len = parse_reference(out)
        path = self.store.path(fid)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            log.error("queue %s: large message file %s cannot be read (%s): message dropped", q.name, path, exc)
            self.drop_unreadable(q, token)
            return
        link = bl.ptr
        head = reference_head(out)
        if len(bl.unsettled) < raw.TAG_RING - 1:
            d = raw.begin_ring_tagged(link, bl.seq, head)
        else:
            d = raw.begin_tagged(link, b"x%x" % bl.seq, head)
        bl.seq += 1
        engine = bl.engine
        engine.out_pending += len(head)
        s = bl.streaming = LargeSend(bl, q, token, msg, d, fd, head_len, size)
        if not bl.presettled:
            bl.unsettled[d] = token
        self.sending.setdefault(engine, []).append(s)
        self.pump(engine)

    def pump(self, engine) -> None:
        """Read more of the engine's streams while its output is below :data:`OUTPUT_HIGH`."""
        streams = self.sending.get(engine)
        while streams and not engine.output_blocked:
            s = streams[0]
            if engine.out_pending >= OUTPUT_HIGH:
                engine.output_blocked = True
                engine.output_resume_at = OUTPUT_LOW
                break
            n = min(SEND_CHUNK, s.end - s.offset)
            try:
                data = os.pread(s.fd, n, s.offset) if n else b""
                if len(data) != n:
                    raise OSError(f"file shorter than the {s.end}-byte message")
            except OSError as exc:
                log.error("queue %s: large message file cannot be read (%s): delivery aborted", s.q.name, exc)
                streams.pop(0)
                self._abandon(s)
                continue
            if data:
                raw.send_more(s.bl.ptr, data)
                s.offset += n
                engine.out_pending += n
            if s.offset >= s.end:
                streams.pop(0)
                self._finish(s)
        if not streams:
            self.sending.pop(engine, None)
        engine.wake()

    def output_drained(self, engine) -> None:
        """The engine's output fell to :data:`OUTPUT_LOW`: go on reading."""
        engine.output_blocked = False
        if engine in self.sending:
            self.pump(engine)

    def _close(self, s: LargeSend) -> None:
        if s.fd >= 0:
            os.close(s.fd)
            s.fd = -1

    def _finish(self, s: LargeSend) -> None:
        self._close(s)
        bl = s.bl
        raw.link_advance(bl.ptr)
        bl.streaming = None
        self.streamed_out += 1
        self.path.sent(bl, s.q, s.token, s.msg, s.d)
        self.send_backlog(bl)

    def _abandon(self, s: LargeSend) -> None:
        """The file cannot be read: abort the delivery and drop the message (acknowledged: it cannot be
        delivered by anyone)."""
        self._close(s)
        bl = s.bl
        bl.streaming = None
        bl.unsettled.pop(s.d, None)
        raw.delivery_abort(s.d)
        self.aborted_out += 1
        self.drop_unreadable(s.q, s.token)
        self.send_backlog(bl)

    def send_backlog(self, bl) -> None:
        """A large message went out on ``bl`` (or was given up): send what the queue handed the consumer
        meanwhile, in order, up to the next large one; then a drain the queue answered meanwhile."""
        path = self.path
        backlog = bl.backlog
        while backlog and bl.streaming is None and not bl.closed:
            q, token, msg, out = backlog.pop(0)
            if q.name not in path.addressing.queues:
                continue  # deleted meanwhile (its messages went with it)
            if is_reference(out):
                self.start(bl, q, token, msg, out)
                continue
            d = raw.send_unique_tagged(bl.ptr, bl.seq, out, len(bl.unsettled))
            bl.seq += 1
            path.sent(bl, q, token, msg, d)
        if not backlog and bl.streaming is None and bl.drain_pending and not bl.closed:
            bl.drain_pending = False
            raw.link_drained(bl.ptr)
        path.wake.add(bl.engine)
        path.wake_engines()

    def drop_unreadable(self, q, token) -> None:
        """A large message whose file cannot be read: nobody can be given it, so it is acknowledged (the
        error is logged where the file was read)."""
        msg = q.settle(token, ACCEPTED)
        journal = self.path.storage.journal
        if msg.record_id is not None and journal is not None:
            journal.append_ack(msg.record_id)
            msg.record_id = None
        self.path.dirty.add(q)


class _Failed:
    """Stands in for a writer when the file could not be created: the message is refused once complete."""

    file_id = None
    head_len = None
    size = 0

    def __init__(self, error: str) -> None:
        self.error = error

    def write(self, chunk, head_end) -> None:
        pass

    def finish(self) -> bool:
        return False

    def discard(self) -> None:
        pass


__all__ = ["LargeStreams", "LargeSend", "SEND_CHUNK", "OUTPUT_HIGH", "OUTPUT_LOW", "head_end"]
