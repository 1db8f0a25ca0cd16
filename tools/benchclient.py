"""tdbench's load client: lean AMQP senders and receivers on the raw engine layer (:mod:`wire.raw`).

Why not proton's reactor: it costs ~55 µs of CPU per message per side, so a reactor client pair tops
out near 18k msg/s and would measure itself, not the router (measured for this project before it began: see
the README's performance section).
Here every connection is a :class:`wire.connection.EngineConnection` driven by
:func:`wire.driver.run_connection` over a Trio TCP stream, all in one thread. Links are attached with
the object API (cold path); everything per message is a handful of raw engine calls:

- a sender writes a pre-encoded message whose body starts with the send time
  (``time.perf_counter_ns``, 8 bytes little-endian) patched in at a fixed offset from the end;
- a receiver reads the message, takes the timestamp back from the same offset, accepts and settles
  (or just settles a pre-settled delivery) and returns credit in batches.

One :class:`LoadRun` holds the counters and the measurement window of one load (via a router, or
sender-to-receiver directly). This module is the per-message machinery (template, senders, receivers,
the event handler); :mod:`tools.benchrun` opens the connections and runs a load with it
(:func:`~tools.benchrun.run_via_peer`, :func:`~tools.benchrun.run_direct`).
"""

from __future__ import annotations

import math
import os
import struct
import time
from array import array

import trio

from wire import raw
from wire.codec import encode_message, message_body_bytes, properties_fields
from wire.flowrecords import message_id_str
from wire.connection import ConnectionHandler, EngineConnection

# Direct mode: the receiving end's credit window per incoming link (the router's linkCapacity default
# is 250, we give the same so both runs see the same flow control)...
DIRECT_LINK_CAPACITY = 250
# ...replenished in batches of a tenth, like the router does.
DIRECT_CREDIT_BATCH = 25
TIMESTAMP_BYTES = 8
# The max-frame-size the bench's clients advertise. A message may still arrive in several transfer
# frames whatever its size (a router may forward the start of a message before its end has arrived, as
# Qpid Dispatch does), so receivers never assume one frame per message.
CLIENT_MAX_FRAME = 65536
# Of a message that arrives in parts, a receiver keeps only this much of its start: the sections before
# the body (router annotations, properties) and the body's timestamp are there, and the rest is counted,
# not kept, so a 1 GB message costs the client no more memory than a small one.
KEEP_PREFIX = 64 * 1024
# How much of a partial delivery is read from the engine per call.
PART_READ_CHUNK = 256 * 1024

# Flow records (--records): message-ids are the sender's prefix and a sequence number this wide.
ID_DIGITS = 12

_now = time.perf_counter_ns
_pack_ts = struct.Struct("<q").pack
_unpack_ts = struct.Struct("<q").unpack_from
_pack_tag = struct.Struct("<I").pack

_delivery_link = raw.delivery_link
_readable = raw.delivery_readable
_partial = raw.delivery_partial
_remote_settled = raw.delivery_settled
_remote_state = raw.delivery_remote_state
_update = raw.delivery_update
_settle = raw.delivery_settle
_advance = raw.link_advance
_credit = raw.link_credit
_flow = raw.link_flow
_recv_all = raw.recv_all
_pn_delivery = raw.lib.pn_delivery
_pn_link_send = raw.lib.pn_link_send
_pn_link_recv = raw.lib.pn_link_recv
_aborted = raw.delivery_aborted
_part_buf = bytearray(PART_READ_CHUNK)
_part_ptr = raw.ffi.from_buffer(_part_buf)
ACCEPTED = raw.ACCEPTED
TERMINAL_STATES = raw.TERMINAL_STATES
OUTCOME_NAMES = {raw.ACCEPTED: "accepted", raw.REJECTED: "rejected", raw.RELEASED: "released",
                 raw.MODIFIED: "modified", raw.RECEIVED: "received", 0: "none"}


class MessageTemplate:
    """A message encoded once; each send patches the timestamp into the body at a fixed offset.

    The body (one data section of ``size`` bytes) is the last section, so the timestamp sits
    ``size`` bytes before the end of the message whatever a router adds in front of the body.
    """

    def __init__(self, size: int, address: str | None = None, *, durable: bool = False,
                 id_prefix: str | None = None):
        if size < TIMESTAMP_BYTES:
            raise ValueError(f"message size must be at least {TIMESTAMP_BYTES} bytes (the timestamp)")
        self.size = size
        body = bytes(TIMESTAMP_BYTES) + b"\xa5" * (size - TIMESTAMP_BYTES)
        # With flow records every message needs its own message-id: a fixed-width placeholder that
        # each send overwrites (id_prefix + ID_DIGITS digits).
        message_id = None if id_prefix is None else id_prefix + "0" * ID_DIGITS
        # durable: a header with durable=true, which brokers store (and fsync) before accepting.
        msg = encode_message(body=body, to=address, durable=durable, message_id=message_id)
        self.id_prefix = id_prefix
        self.id_off = None if message_id is None else msg.index(message_id.encode()) + len(id_prefix)
        off = len(msg) - size
        assert msg[off:] == body and message_body_bytes(msg) == body
        self.head = msg[:off]
        self.tail = msg[off + TIMESTAMP_BYTES:]
        self.encoded_size = len(msg)

    def encode(self, ts_ns: int) -> bytes:
        return self.head + _pack_ts(ts_ns) + self.tail

    def timestamp(self, msg: bytes) -> int:
        """The send time carried by a received message (checked with the codec; cold path)."""
        body = message_body_bytes(msg)
        if body is None or len(body) != self.size:
            raise ValueError("not a tdbench message")
        return _unpack_ts(body, 0)[0]


def process_cpu_seconds(pid) -> float | None:
    """utime + stime of a process from /proc/<pid>/stat, in seconds (None when unreadable). Given a
    list of pids (the routers of a mesh run), the sum over them."""
    if isinstance(pid, (list, tuple)):
        parts = [process_cpu_seconds(p) for p in pid]
        return None if any(p is None for p in parts) else sum(parts)
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class LoadRun:
    """Counters and the measurement window of one load. Single-threaded (Trio): no locks."""

    def __init__(self, total: int, warmup: int, size: int, presettled: bool, router_pid: int | None = None):
        self.total = total
        self.warmup = max(1, min(warmup, total - 1)) if total > 1 else 0
        self.size = size
        self.presettled = presettled
        self.router_pid = router_pid
        self.recorder = None  # wire.flowrecords.FlowRecorder with --records: sent/received/settled
        self.sent = 0
        self.received = 0
        self.accepted = 0
        self.outcomes: dict[str, int] = {}  # non-accepted outcomes seen by senders
        self.settled_out = 0  # senders' deliveries that got their final outcome
        self.aborted = 0  # deliveries the peer aborted part-way (not counted as received)
        self.rx_bytes = 0  # bytes of messages that arrived in parts (progress while a large one arrives)
        self.latencies = array("q")
        self.t0 = self.t1 = None  # perf_counter_ns at the start/end of the measured window
        self.cpu0 = self.cpu1 = None  # client process CPU seconds
        self.rcpu0 = self.rcpu1 = None  # router CPU seconds
        self.errors: list[str] = []
        self.done = trio.Event()

    # -- measurement window ----------------------------------------------------------------------
    def mark_start(self) -> None:
        self.t0 = _now()
        self.cpu0 = time.process_time()
        if self.router_pid:
            self.rcpu0 = process_cpu_seconds(self.router_pid)

    def mark_end(self) -> None:
        self.t1 = _now()
        self.cpu1 = time.process_time()
        if self.router_pid:
            self.rcpu1 = process_cpu_seconds(self.router_pid)

    def check_done(self) -> None:
        if self.received >= self.total and (self.presettled or self.settled_out >= self.total):
            self.done.set()
        elif (self.outcomes and self.settled_out >= self.total
              and self.received + sum(self.outcomes.values()) >= self.total):
            # Every outcome is in and the messages not accepted (released, rejected...) will not come:
            # the run is over (a failed one), with no need to wait for the stall watchdog.
            self.done.set()

    def progress(self) -> tuple:
        return (self.sent, self.received, self.settled_out, self.aborted, self.rx_bytes)

    # -- results ---------------------------------------------------------------------------------
    def result(self) -> dict:
        measured = self.received - self.warmup if self.t0 is not None else 0
        t1 = self.t1
        cpu1 = self.cpu1
        rcpu1 = self.rcpu1
        complete = self.t1 is not None
        if self.t0 is not None and t1 is None:  # cut short: measure what we have
            t1 = _now()
            cpu1 = time.process_time()
            rcpu1 = process_cpu_seconds(self.router_pid) if self.router_pid else None
        secs = (t1 - self.t0) / 1e9 if self.t0 is not None else 0.0
        lat = sorted(self.latencies)
        r = {
            "sent": self.sent,
            "received": self.received,
            "accepted": self.accepted,
            "non_accepted": dict(self.outcomes),
            "aborted": self.aborted,
            "lost": max(0, self.sent - self.received),
            "complete": complete and not self.errors,
            "measured_messages": measured,
            "measured_seconds": round(secs, 6),
            "msgs_per_s": round(measured / secs, 1) if secs > 0 and measured > 0 else 0.0,
            "p50_us": _pct(lat, 0.50),
            "p99_us": _pct(lat, 0.99),
            "max_us": round(lat[-1] / 1000, 1) if lat else None,
            "client_cpu_us_per_msg": _per_msg(self.cpu0, cpu1, measured),
            "router_cpu_us_per_msg": _per_msg(self.rcpu0, rcpu1, measured),
            # Share of one core busy over the window: near 1.0 means that process was the bottleneck.
            "client_cpu_busy": _busy(self.cpu0, cpu1, secs),
            "router_cpu_busy": _busy(self.rcpu0, rcpu1, secs),
            "errors": list(self.errors),
        }
        return r


def _pct(sorted_ns, q: float):
    if not sorted_ns:
        return None
    i = min(len(sorted_ns) - 1, max(0, math.ceil(q * len(sorted_ns)) - 1))
    return round(sorted_ns[i] / 1000, 1)


def _busy(c0, c1, secs: float):
    if c0 is None or c1 is None or secs <= 0:
        return None
    return round((c1 - c0) / secs, 2)


def _per_msg(c0, c1, n: int):
    if c0 is None or c1 is None or n <= 0:
        return None
    return round((c1 - c0) * 1e6 / n, 2)


class Sender:
    """One sending link: keeps at most ``window`` deliveries unsettled and never exceeds its credit.

    Per message: ``pn_delivery`` with a pre-built tag, ``pn_link_send``, ``pn_link_advance`` (and
    ``pn_delivery_settle`` when pre-settled). Tags cycle through a ring larger than the window, so no two
    unsettled deliveries share one. Every message of one batch carries the same send timestamp: they
    leave in the same socket write.
    """

    __slots__ = ("ptr", "obj", "engine", "run", "remaining", "unsettled", "window", "refill", "presettled",
                 "seq", "head", "tail", "tags", "ring", "_tag_owner", "template", "mids", "address")

    def __init__(self, obj, engine: EngineConnection, run: LoadRun, count: int, window: int,
                 template: MessageTemplate):
        self.obj = obj  # keep the object-API wrapper alive for the link's life
        self.ptr = raw.pointer(obj)
        self.engine = engine
        self.run = run
        self.remaining = count
        self.unsettled = 0
        self.window = window
        self.refill = max(1, window // 10)
        self.presettled = run.presettled
        self.seq = 0
        self.head = template.head
        self.tail = template.tail
        self.template = template
        self.mids: dict = {}  # with records: delivery pointer -> message-id, until its outcome
        self.address = ""
        self.ring = ring = window + 1024
        self._tag_owner, self.tags = _tag_ring(ring)

    def pump(self) -> None:
        ptr = self.ptr
        n = _credit(ptr)
        if self.remaining < n:
            n = self.remaining
        presettled = self.presettled
        if not presettled:
            free = self.window - self.unsettled
            if free < n:
                n = free
        if n <= 0:
            return
        if self.run.recorder is not None:
            self._pump_recorded(n)
            return
        payload = self.head + _pack_ts(_now()) + self.tail
        size = len(payload)
        tags = self.tags
        ring = self.ring
        seq = self.seq
        new_delivery = _pn_delivery
        link_send = _pn_link_send
        advance = _advance
        if presettled:
            settle = _settle
            for _ in range(n):
                seq += 1
                d = new_delivery(ptr, tags[seq % ring])
                link_send(ptr, payload, size)
                advance(ptr)
                settle(d)
        else:
            for _ in range(n):
                seq += 1
                new_delivery(ptr, tags[seq % ring])
                link_send(ptr, payload, size)
                advance(ptr)
            self.unsettled += n
        self.seq = seq
        self.remaining -= n
        self.run.sent += n
        self.engine.wake()


    def _pump_recorded(self, n: int) -> None:
        """The same sends, one message-id and one ``sent`` record per message (the --records run)."""
        ptr = self.ptr
        head, tail, t = self.head, self.tail, self.template
        off = t.id_off
        rec = self.run.recorder
        seq = self.seq
        ts = _pack_ts(_now())
        for _ in range(n):
            seq += 1
            num = b"%0*d" % (ID_DIGITS, seq)
            payload = head[:off] + num + head[off + ID_DIGITS:] + ts + tail
            d = _pn_delivery(ptr, self.tags[seq % self.ring])
            _pn_link_send(ptr, payload, len(payload))
            _advance(ptr)
            mid = t.id_prefix + num.decode()
            rec.record("sent", mid=mid, address=self.address, size=len(payload))
            if self.presettled:
                _settle(d)
            else:
                self.mids[d] = mid
        if not self.presettled:
            self.unsettled += n
        self.seq = seq
        self.remaining -= n
        self.run.sent += n
        self.engine.wake()


def _tag_ring(n: int):
    """``n`` distinct 4-byte delivery tags as ready-made ``pn_bytes_t`` values (and their memory)."""
    buf = raw.ffi.new("char[]", 4 * n)
    structs = raw.ffi.new("pn_bytes_t[]", n)
    raw.ffi.memmove(buf, b"".join(_pack_tag(i) for i in range(n)), 4 * n)
    tags = []
    for i in range(n):
        t = structs[i]
        t.size = 4
        t.start = buf + 4 * i
        tags.append(t)
    return (buf, structs), tags


class Receiver:
    """One receiving link: grants credit and hands it back ``batch`` at a time.

    While the link's current delivery arrives in parts, ``part`` holds its first ``KEEP_PREFIX`` bytes
    and ``part_len`` counts every byte read so far (``part`` is None between messages).
    """

    __slots__ = ("ptr", "obj", "owed", "batch", "received", "address", "part", "part_len")

    def __init__(self, ptr, obj, batch: int, address: str = ""):
        self.ptr = ptr
        self.obj = obj
        self.owed = 0
        self.batch = batch
        self.received = 0
        self.address = address
        self.part: bytearray | None = None
        self.part_len = 0

    def read_part(self, link) -> int:
        """Read what has arrived of the link's current delivery: keep up to KEEP_PREFIX bytes of the
        message's start, count the rest. Returns the bytes read by this call."""
        part = self.part
        got = 0
        while True:
            n = _pn_link_recv(link, _part_ptr, PART_READ_CHUNK)
            if n <= 0:
                break
            room = KEEP_PREFIX - len(part)
            if room > 0:
                part += memoryview(_part_buf)[:n if n < room else room]
            got += n
        self.part_len += got
        return got


class BenchHandler(ConnectionHandler):
    """Engine events for the bench's connections (both client ends, and direct mode's listening end).

    ``accept_links`` makes it the direct-mode receiving end: every attach from the peer is accepted and
    an incoming link becomes a :class:`Receiver` with ``DIRECT_LINK_CAPACITY`` credit.

    Receiving: a delivery is accepted and settled (at-least-once) or just settled (pre-settled) once
    all of it has arrived, so it never raises another event. One that arrives in several frames is read
    as it comes (see :meth:`Receiver.read_part`) and counted only when complete; one the peer aborts is
    settled and counted in ``LoadRun.aborted``, not as received.
    """

    def __init__(self, run: LoadRun, *, accept_links: bool = False):
        self.run = run
        self.accept_links = accept_links
        self.rx: dict = {}  # link pointer -> Receiver
        self.tx: dict = {}  # link pointer -> Sender

    def on_delivery(self, conn, d) -> None:
        link = _delivery_link(d)
        r = self.rx.get(link)
        if r is not None:
            if _partial(d) or r.part is not None or not _readable(d):
                got = self._assemble(conn, link, d, r)
                if got is None:
                    return  # more of it is on its way (or it was aborted, or it is not ours to read)
                msg, total = got
            else:
                msg = _recv_all(link)
                total = len(msg)
                if not total:  # nothing to read: an aborted first frame, or an empty transfer
                    got = self._assemble(conn, link, d, r)
                    if got is None:
                        return
                    msg, total = got
            _advance(link)
            run = self.run
            if not run.presettled:
                _update(d, ACCEPTED)
            _settle(d)
            if run.recorder is not None:
                run.recorder.record("received", mid=message_id_str(properties_fields(msg, 1)[0]),
                                    address=r.address, size=total,
                                    outcome=None if run.presettled else "accepted")
            n = run.received + 1
            run.received = n
            r.received += 1
            if n > run.warmup:
                run.latencies.append(_now() - _unpack_ts(msg, total - run.size)[0])
                if n >= run.total:
                    run.mark_end()
                    run.check_done()
            elif n == run.warmup:
                run.mark_start()
            self._return_credit(conn, link, r)
            return
        s = self.tx.get(link)
        if s is None:
            return
        # An outcome for one of our deliveries.
        state = _remote_state(d)
        run = self.run
        if state == ACCEPTED:
            run.accepted += 1
        elif _remote_settled(d) or state in TERMINAL_STATES:
            name = OUTCOME_NAMES.get(state, str(state))
            run.outcomes[name] = run.outcomes.get(name, 0) + 1
        else:
            return  # not final yet
        if run.recorder is not None:
            run.recorder.record("settled", mid=s.mids.pop(d, None), address=s.address,
                                outcome=OUTCOME_NAMES.get(state, str(state)))
        _settle(d)
        run.settled_out += 1
        s.unsettled -= 1
        if s.remaining:
            free = s.window - s.unsettled
            if free >= s.refill or free >= s.remaining:
                s.pump()
        elif run.settled_out >= run.total:
            run.check_done()

    def _assemble(self, conn, link, d, r: Receiver):
        """A delivery that is arriving in parts: read what has come. Returns (the message's start as
        kept, its total length) once it is complete; None while more is to come, when the delivery is not
        the link's current one (an update to one we have finished with), or when it was aborted."""
        if not _readable(d):
            return None
        if r.part is None:
            r.part = bytearray()
            r.part_len = 0
        if _aborted(d):
            # AMQP 1.0 §2.7.5 (transfer, aborted): the sender gave up on it; drop what came, settle it,
            # and hand its credit back as if it had been received.
            r.part = None
            _advance(link)
            _settle(d)
            self.run.aborted += 1
            self._return_credit(conn, link, r)
            return None
        self.run.rx_bytes += r.read_part(link)
        if _partial(d):
            return None
        msg, total = bytes(r.part), r.part_len
        r.part = None
        if total - self.run.size < 0 or total - self.run.size + TIMESTAMP_BYTES > len(msg):
            raise ValueError(f"a {total}-byte message is not a tdbench message of {self.run.size} bytes")
        return msg, total

    def _return_credit(self, conn, link, r: Receiver) -> None:
        owed = r.owed + 1
        if owed >= r.batch:
            _flow(link, owed)
            r.owed = 0
            conn.wake()
        else:
            r.owed = owed

    def on_link_flow(self, conn, link) -> None:
        s = self.tx.get(link)
        if s is not None and s.remaining:
            s.pump()

    def on_link_open(self, conn, link) -> None:
        if not self.accept_links:
            conn.refuse_link(link, "amqp:not-allowed", "tdbench client does not accept attaches")
            return
        conn.open_link_like_remote(link)
        if not raw.link_is_sender(link):  # the peer sends to us
            self.rx[link] = Receiver(link, None, DIRECT_CREDIT_BATCH)
            _flow(link, DIRECT_LINK_CAPACITY)
        conn.wake()

    def on_link_close(self, conn, link, closed: bool) -> None:
        run = self.run
        if not run.done.is_set():
            lo = raw.link_object(link)
            cond = lo.remote_condition
            why = f": {cond.name} {cond.description or ''}" if cond is not None else ""
            run.errors.append(f"link {lo.name} {'closed' if closed else 'detached'} by the peer{why}")
            run.done.set()
        self.rx.pop(link, None)
        self.tx.pop(link, None)

    def on_connection_close(self, conn) -> None:
        run = self.run
        if not run.done.is_set():
            cond = conn.connection.remote_condition
            why = f": {cond.name} {cond.description or ''}" if cond is not None else ""
            sasl = conn.sasl
            if sasl is not None and sasl.failed:  # our SASL client's reason says more than the engine's
                run.errors.append(f"connection {conn.id} to {conn.remote_host}: SASL login failed: {sasl.error}")
                run.done.set()
                return
            run.errors.append(f"connection {conn.id} to {conn.remote_host} lost{why}{' ' + conn.error if conn.error else ''}")
            run.done.set()
