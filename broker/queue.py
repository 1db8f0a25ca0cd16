"""One broker queue's delivery state machine, sans-IO: fed events (enqueue, credit, settle, consumer
attach/detach) and the current time, it answers which message goes to which consumer. It never sleeps,
never touches a socket or a file; the broker sends what :meth:`Queue.next_deliveries` hands out and
journals what the callbacks and return values report.

Semantics follow ActiveMQ Artemis where AMQP leaves a choice:

* **Order** — JMS-style priority 0..9, higher first, FIFO within a priority. Every message gets a
  sequence number when first enqueued and keeps it, so a message that comes back (released, modified,
  its consumer gone) returns to its original place: ahead of everything enqueued after it.
* **Outcomes** — accepted: gone. released: back, delivery-count unchanged. modified: back; with
  delivery-failed the delivery-count goes up first and reaching ``max_delivery_attempts`` dead-letters
  it; with undeliverable-here it is never offered to that consumer again. rejected: dead-lettered at
  once.
* **Expiry** — a message whose ``expires_at`` has passed is never delivered: it is handed to the
  ``expired`` callback when a delivery pass meets it or when :meth:`Queue.expire` runs.
* **Consumers** — credit-driven, round robin among the consumers that have credit.

Messages stay bytes: :class:`QueuedMessage` carries the encoded message and the few header facts the
queue needs (read once with :mod:`wire.header`). Each queue keeps the encoded size of what it holds
(``size_bytes``, and a broker-wide meter) for :mod:`broker.limits`. The module is a little over the
project's ~600-line guide (about 140 lines) because the header fast paths live next to the one class that
uses them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from itertools import count as _counter

from sortedcontainers import SortedList

from broker.largemessage import MAGIC as LARGE_MAGIC
from broker.largemessage import stored_size  # a large message counts its full size (broker.largemessage)
from wire.header import absolute_expiry_time  # expires_at() without its second read_header (hot path)
from wire.header import properties_expiry  # the same, given where the properties are (from_validated)
from wire.header import DEFAULT_PRIORITY, read_header, set_delivery_count  # AMQP §3.2.1: 4

__all__ = ["QueuedMessage", "Queue", "ACCEPTED", "RELEASED", "MODIFIED", "REJECTED",
           "REASON_REJECTED", "REASON_MAX_DELIVERY_ATTEMPTS", "DEFAULT_MAX_DELIVERY_ATTEMPTS"]

# JMS priorities (and Artemis's priority levels) are 0..9; AMQP's ubyte priority above 9 is clamped
# so that a client sending 200 gets "highest", not a level of its own.
MIN_PRIORITY, MAX_PRIORITY = 0, 9
# Artemis address-settings default for max-delivery-attempts; 0 or less means unlimited (Artemis: -1).
DEFAULT_MAX_DELIVERY_ATTEMPTS = 10

# AMQP 1.0 outcomes (§3.4) as settle() takes them.
ACCEPTED, RELEASED, MODIFIED, REJECTED = "accepted", "released", "modified", "rejected"
_OUTCOMES = frozenset((ACCEPTED, RELEASED, MODIFIED, REJECTED))

# Reasons passed to the dead_letter callback.
REASON_REJECTED = "rejected"
REASON_MAX_DELIVERY_ATTEMPTS = "max-delivery-attempts"


_SECTION_AFTER_HEADER = frozenset(range(0x71, 0x78))   # delivery-annotations .. footer
_BOOL = {0x41: True, 0x42: False, 0x40: False}
_HEADER_DEFAULTS = (False, DEFAULT_PRIORITY, None, 0)
# The header a durable message has when nothing else in it is set, as AMQP client libraries write it: a
# list8 of one field, durable = true (§3.2.1). Recognised whole, without the field loop.
_DURABLE_ONLY = b"\xc0\x02\x01\x41"
_DURABLE_HEADER = b"\x00\x53\x70" + _DURABLE_ONLY  # that header as a section, small-ulong descriptor
_DURABLE_DEFAULTS = (True, DEFAULT_PRIORITY, None, 0)


def _uint_at(b: bytes, p: int):
    """A uint field (uint / smalluint / uint0 / null) at ``p``: (value or None, next position); None
    for any other encoding (the caller then uses the general parser)."""
    c = b[p]
    if c == 0x52:
        return b[p + 1], p + 2
    if c == 0x43:
        return 0, p + 1
    if c == 0x40:
        return None, p + 1
    if c == 0x70:
        return int.from_bytes(b[p + 1:p + 5], "big"), p + 5
    return None


def _fast_header(b: bytes):
    """``(durable, priority, ttl, delivery_count)`` for the encodings every client library writes (a
    header as a short list with the common field encodings, or no header before another section), or
    None to fall back to :func:`wire.header.read_header`. Runs once per stored message: the general
    parser costs about twice as much."""
    if len(b) < 4 or b[0] != 0 or b[1] != 0x53:
        return None
    code = b[2]
    if code in _SECTION_AFTER_HEADER:
        return _HEADER_DEFAULTS
    if code != 0x70:
        return None
    c = b[3]
    if c == 0x45:
        return _HEADER_DEFAULTS
    if b[3:7] == _DURABLE_ONLY:
        return _DURABLE_DEFAULTS
    if c != 0xC0 or len(b) < 6:
        return None
    end = 5 + b[4]
    count = b[5]
    if end > len(b) or count > 5:
        return None
    p = 6
    durable, priority, ttl, dc = False, DEFAULT_PRIORITY, None, 0
    try:
        for i in range(count):
            if p >= end:
                return None
            c = b[p]
            if i == 0 or i == 3:
                if c == 0x56:
                    v, p = bool(b[p + 1]), p + 2
                elif c in _BOOL:
                    v, p = _BOOL[c], p + 1
                else:
                    return None
                if i == 0:
                    durable = v
            elif i == 1:
                if c == 0x50:
                    priority, p = b[p + 1], p + 2
                elif c == 0x40:
                    p += 1
                else:
                    return None
            else:
                r = _uint_at(b, p)
                if r is None:
                    return None
                v, p = r
                if i == 2:
                    ttl = v
                elif v is not None:
                    dc = v
        if p != end:
            return None
    except IndexError:
        return None
    return durable, priority, ttl, dc


def _header_facts(payload: bytes) -> tuple:
    """``(durable, priority, ttl, delivery_count)`` of an encoded message: the fast path, else the general
    header reader (CodecError for a malformed header)."""
    fast = _fast_header(payload)
    if fast is None:
        h = read_header(payload)
        fast = (h.durable, h.priority, h.ttl, h.delivery_count)
    return fast


def _expires_at(absolute: int | None, ttl: int | None, now_ms: int) -> int | None:
    """As :func:`wire.header.expires_at`: an absolute-expiry-time > 0 wins, else a non-zero ttl counts from
    the arrival here (``now_ms``); None: never."""
    if absolute is not None and absolute > 0:
        return absolute
    return now_ms + ttl if ttl else None


class QueuedMessage:
    """A message held by a queue: its encoded bytes plus the header facts the queue acts on.

    ``record_id`` is the journal record (None for a non-durable message); ``priority`` is clamped to
    0..9; ``expires_at`` is milliseconds since the epoch (None: never); ``delivery_count`` is the AMQP
    header's count of prior unsuccessful delivery attempts. ``payload`` is never modified: use
    :meth:`outgoing` for the bytes to send, which carry the current delivery-count."""
    __slots__ = ("record_id", "payload", "priority", "expires_at", "delivery_count", "durable",
                 "enqueued_at", "seq", "excluded", "not_before", "mirror")

    # Positional or keyword: from_bytes passes them by position, once per message (half the cost of keywords).
    def __init__(self, payload: bytes, record_id: int | None = None, priority: int = DEFAULT_PRIORITY,
                 expires_at: int | None = None, delivery_count: int = 0, durable: bool = False,
                 enqueued_at: int = 0):
        self.record_id = record_id
        self.payload = payload
        # once per message: the clamp's three calls only for a priority outside 0..9 (or not an int)
        self.priority = priority if type(priority) is int and MIN_PRIORITY <= priority <= MAX_PRIORITY \
            else min(max(int(priority), MIN_PRIORITY), MAX_PRIORITY)
        self.expires_at = expires_at
        self.delivery_count = delivery_count
        self.durable = durable
        self.enqueued_at = enqueued_at
        self.seq: int | None = None              # position in its queue, set by Queue.enqueue
        self.excluded: set | None = None         # consumers that answered undeliverable-here
        self.not_before: int | None = None       # redelivery-delay: not handed out before this time
        self.mirror: tuple | None = None          # (origin broker id or "", id) when a mirror knows it (broker.mirror)

    @classmethod
    def from_bytes(cls, payload: bytes, now_ms: int, *, record_id: int | None = None) -> QueuedMessage:
        """Build from an encoded message arriving at ``now_ms``: durable, priority and delivery-count
        from its header, expiry from absolute-expiry-time or ttl (see :func:`wire.header.expires_at`).
        Raises :class:`wire.amqptypes.CodecError` for a malformed message."""
        durable, priority, ttl, delivery_count = _header_facts(payload)
        absolute = absolute_expiry_time(payload)  # CodecError for a malformed message
        return cls(payload, record_id, priority, _expires_at(absolute, ttl, now_ms), delivery_count, durable,
                   now_ms)

    @classmethod
    def from_validated(cls, payload: bytes, now_ms: int, properties: int) -> QueuedMessage:
        """:meth:`from_bytes` for a message :func:`wire.validate.validate_message` accepted, given the
        offset of its properties section's value that it returned (-1: none), so that the sections are
        not walked a second time. Same result and same errors as :meth:`from_bytes`."""
        if properties < 0 and payload[:7] == _DURABLE_HEADER:
            # the shape durable messages have most (see _DURABLE_ONLY): nothing else to read
            return cls(payload, None, DEFAULT_PRIORITY, None, 0, True, now_ms)
        durable, priority, ttl, delivery_count = _header_facts(payload)
        absolute = None if properties < 0 else properties_expiry(payload, properties)
        return cls(payload, None, priority, _expires_at(absolute, ttl, now_ms), delivery_count, durable, now_ms)

    def outgoing(self) -> bytes:
        """The bytes to transfer: ``payload`` with its header delivery-count brought up to date (the
        payload itself when the count is still 0, as it was on arrival)."""
        if self.delivery_count:
            return set_delivery_count(self.payload, self.delivery_count)
        return self.payload

    def __repr__(self):
        return (f"QueuedMessage(seq={self.seq}, record_id={self.record_id}, priority={self.priority}, "
                f"delivery_count={self.delivery_count}, expires_at={self.expires_at})")


class _Consumer:
    __slots__ = ("id", "credit", "drain", "unacked", "priority", "accepts")

    def __init__(self, consumer_id, priority: int = 0, accepts: Callable[[QueuedMessage], bool] | None = None):
        self.id = consumer_id
        self.credit = 0
        self.drain = False
        self.priority = priority
        self.accepts = accepts
        self.unacked: dict[int, QueuedMessage] = {}     # token -> message, in delivery order


class _ReadySet:
    """The ready messages of a queue: a deque per priority level, each in sequence order, plus a
    ``(-priority, seq) -> message`` map for removal by key.

    Why not one sorted map: the hot path is "append a new message" and "take the first one", O(1) on a
    deque; a sorted container spent ~4 µs per message bisecting for positions that are almost always the
    ends. A message coming back (released, modified, its consumer gone) is put back at its place by a
    scan from the front, where such messages are in practice.
    """

    __slots__ = ("levels", "by_key")

    def __init__(self):
        self.levels = [deque() for _ in range(MAX_PRIORITY + 1)]
        self.by_key: dict = {}

    def __len__(self) -> int:
        return len(self.by_key)

    def __getitem__(self, key) -> QueuedMessage:
        return self.by_key[key]

    def put(self, key, msg: QueuedMessage) -> None:
        level = self.levels[msg.priority]
        seq = msg.seq
        if not level or level[-1].seq < seq:
            level.append(msg)
        else:
            for i, other in enumerate(level):
                if other.seq > seq:
                    level.insert(i, msg)
                    break
        self.by_key[key] = msg

    def pop(self, key) -> QueuedMessage:
        msg = self.by_key.pop(key)
        level = self.levels[msg.priority]
        if level[0] is msg:
            level.popleft()
        else:
            level.remove(msg)
        return msg

    def values(self) -> list[QueuedMessage]:
        out = []
        for level in reversed(self.levels):
            out.extend(level)
        return out

    def clear(self) -> None:
        for level in self.levels:
            level.clear()
        self.by_key.clear()


class Queue:
    """A broker queue: JMS-style priority (higher first, FIFO within a priority), credit-driven delivery
    to consumers, redelivery, dead-lettering and expiry.

    Ready messages live in a :class:`_ReadySet` keyed by ``(-priority, seq)``; those with an expiry are
    also indexed by ``(expires_at, key)`` (sortedcontainers) so that :meth:`expire` and
    :meth:`next_expiry` cost O(log n) per message rather than a scan. Delivered, unsettled messages sit with their consumer under
    a delivery token until :meth:`settle` (or :meth:`remove_consumer`) says what became of them.

    Callbacks: ``dead_letter(msg, reason)`` for a message leaving by rejection or too many failed
    attempts (reason :data:`REASON_REJECTED` / :data:`REASON_MAX_DELIVERY_ATTEMPTS`); ``expired(msg)``
    for one whose time passed. Either may be None: the message is then dropped, as Artemis drops it when
    no dead-letter or expiry address is configured. The queue has forgotten the message by the time a
    callback runs; the broker routes it on and journals the removal.

    Counters (Artemis names): ``message_count`` (ready + delivering), ``delivering_count``,
    ``messages_added``, ``messages_acknowledged``, ``messages_expired``, ``messages_killed``
    (dead-lettered), ``messages_purged``, ``consumer_count``. At all times
    ``messages_added == message_count + messages_acknowledged + messages_expired + messages_killed +
    messages_purged``.
    """

    def __init__(self, name: str, *, max_delivery_attempts: int = DEFAULT_MAX_DELIVERY_ATTEMPTS,
                 dead_letter: Callable[[QueuedMessage, str], None] | None = None,
                 expired: Callable[[QueuedMessage], None] | None = None,
                 redelivery_delay: int = 0, clock: Callable[[], int] | None = None, meter=None,
                 timed: set | None = None):
        self.name = name
        # Encoded bytes of the messages held (ready or being delivered), here and in ``meter`` (an object
        # with a ``total`` shared by every queue of a broker: its global-max-size accounting).
        self.size_bytes = 0
        self._meter = meter
        self.max_delivery_attempts = max_delivery_attempts
        # Artemis' redelivery-delay (ms): a message back after a failed attempt waits this long. Needs
        # the clock (ms since the epoch) to stamp its not-before time; without one there is no delay.
        self.redelivery_delay = redelivery_delay if clock is not None else 0
        self._clock = clock
        # A set shared by a broker's queues (broker.addressing.AddressModel.timed): this queue joins it when
        # a message with an expiry or a delay comes in, so the broker's timers need not ask every queue.
        self._timed = timed if timed is not None else set()
        self._delayed: SortedList = SortedList()        # (not_before, key) of ready, delayed messages
        self._dead_letter = dead_letter
        self._expired = expired
        self._ready = _ReadySet()                       # (-priority, seq) -> QueuedMessage
        self._expiry: SortedList = SortedList()         # (expires_at, key) of ready messages
        self._consumers: dict[Hashable, _Consumer] = {}
        self._rr: deque = deque()                       # consumer ids, next in turn first
        self._ranked = False                            # consumers differ in priority (see _pick)
        self._deliveries: dict[int, tuple[_Consumer, QueuedMessage]] = {}
        self._drained: dict[Hashable, int] = {}
        self._seq = _counter()
        self._token = _counter(1)
        self.messages_added = 0
        self.messages_acknowledged = 0
        self.messages_expired = 0
        self.messages_killed = 0
        self.messages_purged = 0
        self.messages_delivered = 0                     # deliveries handed out (redeliveries included)
        # Queue browsers' cursors (broker.browse): deques that each get every message enqueued from now on.
        self.arrivals: list[deque] = []
        # removed(msg, reason): every message that leaves by acknowledgement ("normal"), expiry ("expired"),
        # dead-lettering ("killed") or purge ("normal"), before the journal forgets it (a broker mirror
        # sends the acknowledgement on, broker.mirror). Not for a queue being deleted (drop_all).
        self.removed: Callable[[QueuedMessage, str], None] | None = None

    # ---------------------------------------------------------------- counters

    @property
    def message_count(self) -> int:
        """Messages in the queue, ready or being delivered (as Artemis counts them)."""
        return len(self._ready) + len(self._deliveries)

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    @property
    def delivering_count(self) -> int:
        return len(self._deliveries)

    @property
    def consumer_count(self) -> int:
        return len(self._consumers)

    def __repr__(self):
        return (f"Queue({self.name!r}, ready={len(self._ready)}, delivering={len(self._deliveries)}, "
                f"consumers={len(self._consumers)})")

    # ---------------------------------------------------------------- ready set

    def _put(self, msg: QueuedMessage) -> None:
        key = (-msg.priority, msg.seq)
        self._ready.put(key, msg)
        if msg.expires_at is not None:
            self._expiry.add((msg.expires_at, key))
            self._timed.add(self)
        if msg.not_before is not None:
            self._delayed.add((msg.not_before, key))
            self._timed.add(self)

    @property
    def has_timers(self) -> bool:
        """A ready message here has an expiry or a redelivery delay."""
        return bool(self._expiry or self._delayed)

    def _take(self, key) -> QueuedMessage:
        msg = self._ready.pop(key)
        if msg.expires_at is not None:
            self._expiry.remove((msg.expires_at, key))
        if msg.not_before is not None:
            self._delayed.remove((msg.not_before, key))
            msg.not_before = None
        return msg

    def _gone(self, msg: QueuedMessage) -> None:
        p = msg.payload
        n = len(p) if p[-8:] != LARGE_MAGIC else stored_size(p)
        self.size_bytes -= n
        if self._meter is not None:
            self._meter.total -= n

    def _expire_one(self, msg: QueuedMessage) -> None:
        self._gone(msg)
        self.messages_expired += 1
        if self.removed is not None:
            self.removed(msg, "expired")
        if self._expired is not None:
            self._expired(msg)

    def _kill(self, msg: QueuedMessage, reason: str) -> None:
        self._gone(msg)
        self.messages_killed += 1
        if self.removed is not None:
            self.removed(msg, "killed")
        if self._dead_letter is not None:
            self._dead_letter(msg, reason)

    def enqueue(self, msg: QueuedMessage) -> None:
        """Add a new message at the tail of its priority. Recovery re-enqueues in journal order."""
        if msg.seq is not None:
            raise ValueError("message already belongs to a queue")
        msg.seq = seq = next(self._seq)
        self.messages_added += 1
        p = msg.payload
        n = len(p) if p[-8:] != LARGE_MAGIC else stored_size(p)
        self.size_bytes += n
        if self._meter is not None:
            self._meter.total += n
        if msg.expires_at is None and msg.not_before is None:
            # _put and _ReadySet.put inline for what every new message without an expiry is (once per
            # message): the newest of its priority level, so it goes at the level's tail
            ready = self._ready
            ready.levels[msg.priority].append(msg)
            ready.by_key[(-msg.priority, seq)] = msg
        else:
            self._put(msg)
        if self.arrivals:
            for cursor in self.arrivals:
                cursor.append(msg)

    def is_ready(self, msg: QueuedMessage) -> bool:
        """Whether ``msg`` is in this queue and not out with a consumer (what a browser may show)."""
        return self._ready.by_key.get((-msg.priority, msg.seq)) is msg

    def ready(self) -> list[QueuedMessage]:
        """The ready messages in delivery order (for management and tests; O(n))."""
        return list(self._ready.values())

    # ---------------------------------------------------------------- consumers and credit

    def add_consumer(self, consumer_id, *, priority: int = 0,
                     accepts: Callable[[QueuedMessage], bool] | None = None) -> None:
        """Attach a consumer. ``priority`` (Artemis consumer priority, ActiveMQ's network consumer
        priority): a message goes to the highest-priority consumer with credit, round robin among equals;
        a lower one gets messages only while every higher one is out of credit (or declines the message).
        ``accepts`` (a JMS selector, a network bridge's filter): a message it declines stays for
        another consumer."""
        if consumer_id in self._consumers:
            raise ValueError(f"consumer {consumer_id!r} already attached to {self.name!r}")
        self._consumers[consumer_id] = _Consumer(consumer_id, priority, accepts)
        self._rr.append(consumer_id)
        self._rank()

    def _rank(self) -> None:
        self._ranked = len({c.priority for c in self._consumers.values()}) > 1

    def consumer_priority(self, consumer_id) -> int:
        return self._consumers[consumer_id].priority

    def remove_consumer(self, consumer_id, *, failed: bool = False) -> list[QueuedMessage]:
        """Detach a consumer. Its unsettled deliveries return to the queue at their original positions
        for other consumers; all of them are returned (in delivery order). Consumer ids must be unique
        over the queue's life: an undeliverable-here refusal stays attached to the id.

        ``failed`` (the connection dropped rather than the link closing) counts each of them as a failed
        delivery attempt, as Artemis does: the consumer may have processed them, so the next receiver
        should see a non-zero delivery-count. One that reaches ``max_delivery_attempts`` is then
        dead-lettered instead of returning."""
        c = self._consumers.pop(consumer_id)
        self._rr.remove(consumer_id)
        self._rank()
        self._drained.pop(consumer_id, None)
        back = list(c.unacked.values())
        for token in c.unacked:
            del self._deliveries[token]
        c.unacked.clear()
        for msg in back:
            if failed:
                self._failed_attempt(msg)
            else:
                self._put(msg)
        return back

    def credit(self, consumer_id, n: int) -> None:
        """Give a consumer ``n`` more credit."""
        if n < 0:
            raise ValueError("credit must not be negative")
        self._consumers[consumer_id].credit += n

    def set_credit(self, consumer_id, n: int) -> None:
        """Set a consumer's credit (the link-credit of its latest flow frame)."""
        if n < 0:
            raise ValueError("credit must not be negative")
        self._consumers[consumer_id].credit = n

    def credit_of(self, consumer_id) -> int:
        return self._consumers[consumer_id].credit

    def drain(self, consumer_id) -> None:
        """The consumer asked to drain: the next :meth:`next_deliveries` uses what credit it can and
        discards the rest; :meth:`take_drained` then reports how much was discarded."""
        self._consumers[consumer_id].drain = True

    def take_drained(self) -> dict:
        """``{consumer_id: credit discarded}`` for each drain completed since the last call (the broker
        advances the link's delivery-count by that much and sends the drain reply)."""
        out, self._drained = self._drained, {}
        return out

    def unsettled(self, consumer_id) -> list[int]:
        """Delivery tokens a consumer has not settled yet, oldest first."""
        return list(self._consumers[consumer_id].unacked)

    # ---------------------------------------------------------------- delivery

    def _pick(self, msg: QueuedMessage) -> _Consumer | None:
        """The next consumer in turn with credit that has not refused ``msg`` and accepts it, of the
        highest priority among those; moves it to the back. ``accepts`` is asked in that order and only
        until one says yes, so a yes means the message goes to it (a rate limit may count it)."""
        excluded = msg.excluded
        if not self._ranked:
            for i, cid in enumerate(self._rr):
                c = self._consumers[cid]
                if c.credit > 0 and (excluded is None or cid not in excluded) and (
                        c.accepts is None or c.accepts(msg)):
                    if i == 0:
                        self._rr.rotate(-1)  # the usual case, in one call: the first goes to the back
                    else:
                        del self._rr[i]
                        self._rr.append(cid)
                    return c
            return None
        ready = [(i, self._consumers[cid]) for i, cid in enumerate(self._rr)
                 if self._consumers[cid].credit > 0 and (excluded is None or cid not in excluded)]
        ready.sort(key=lambda item: -item[1].priority)  # stable: round robin order within a priority
        for i, c in ready:
            if c.accepts is None or c.accepts(msg):
                del self._rr[i]
                self._rr.append(c.id)
                return c
        return None

    def next_deliveries(self, now_ms: int) -> list[tuple[object, int, QueuedMessage]]:
        """Hand ready messages to consumers with credit, in queue order, round robin among those
        consumers: ``[(consumer_id, delivery_token, message), ...]``; the broker sends
        ``message.outgoing()`` on each consumer's link. Expired messages met on the way go to the
        expired callback instead. A message every consumer with credit has refused (undeliverable-here)
        is skipped and stays for a later consumer."""
        out = []
        credit_left = sum(c.credit for c in self._consumers.values())
        if credit_left > 0 and self._ready.by_key:
            for level in reversed(self._ready.levels):
                if level:
                    credit_left = self._deliver_level(level, now_ms, credit_left, out)
                    if credit_left <= 0:
                        break
        for c in self._consumers.values():
            if c.drain:
                self._drained[c.id] = self._drained.get(c.id, 0) + c.credit
                c.credit = 0
                c.drain = False
        return out

    def _deliver_level(self, level: deque, now_ms: int, credit_left: int, out: list) -> int:
        """Hand out messages of one priority level in order; returns the credit left."""
        i = 0
        while credit_left > 0 and i < len(level):
            msg = level[i]
            if msg.expires_at is not None and now_ms >= msg.expires_at:
                self._take((-msg.priority, msg.seq))
                self._expire_one(msg)
                continue
            if msg.not_before is not None and now_ms < msg.not_before:
                i += 1                     # redelivery delay not over: later messages may go first
                continue
            c = self._pick(msg)
            if c is None:
                i += 1
                continue
            if i == 0 and msg.expires_at is None and msg.not_before is None:
                level.popleft()            # the common case: the head goes, no index to update
                del self._ready.by_key[(-msg.priority, msg.seq)]
            else:
                self._take((-msg.priority, msg.seq))
            token = next(self._token)
            c.credit -= 1
            credit_left -= 1
            c.unacked[token] = msg
            self._deliveries[token] = (c, msg)
            out.append((c.id, token, msg))
            self.messages_delivered += 1
        return credit_left

    def _failed_attempt(self, msg: QueuedMessage) -> None:
        """Count one failed delivery attempt; back to the queue, or dead-lettered at the limit."""
        msg.delivery_count += 1
        if 0 < self.max_delivery_attempts <= msg.delivery_count:
            self._kill(msg, REASON_MAX_DELIVERY_ATTEMPTS)
        else:
            if self.redelivery_delay > 0:
                msg.not_before = self._clock() + self.redelivery_delay
            self._put(msg)

    def settle(self, delivery_token: int, outcome: str, *, delivery_failed: bool = False,
               undeliverable_here: bool = False) -> QueuedMessage:
        """Apply a consumer's outcome to a delivery; returns the message.

        accepted: the message is gone (the broker journals the acknowledgement). released: back at its
        position, delivery-count unchanged. modified: with ``delivery_failed`` the delivery-count goes
        up and at ``max_delivery_attempts`` the message is dead-lettered; with ``undeliverable_here``
        it is never offered to this consumer again; then back at its position. rejected: dead-lettered.
        An unknown token raises KeyError, an unknown outcome ValueError."""
        if outcome not in _OUTCOMES:
            raise ValueError(f"unknown outcome {outcome!r}")
        c, msg = self._deliveries.pop(delivery_token)
        del c.unacked[delivery_token]
        if outcome == ACCEPTED:
            # _gone inline: once per acknowledged message
            p = msg.payload
            n = len(p) if p[-8:] != LARGE_MAGIC else stored_size(p)
            self.size_bytes -= n
            if self._meter is not None:
                self._meter.total -= n
            self.messages_acknowledged += 1
            if self.removed is not None:
                self.removed(msg, "normal")
        elif outcome == REJECTED:
            self._kill(msg, REASON_REJECTED)
        else:
            if undeliverable_here:
                if msg.excluded is None:
                    msg.excluded = set()
                msg.excluded.add(c.id)
            if outcome == MODIFIED and delivery_failed:
                self._failed_attempt(msg)
            else:
                self._put(msg)
        return msg

    # ---------------------------------------------------------------- housekeeping

    def next_expiry(self) -> int | None:
        """The earliest ``expires_at`` among ready messages (when the broker should call
        :meth:`expire` next), or None."""
        return self._expiry[0][0] if self._expiry else None

    def end_delays(self, now_ms: int) -> int:
        """Clear the redelivery delay of every ready message whose delay is over; returns how many
        (the broker then runs a delivery pass)."""
        n = 0
        delayed = self._delayed
        while delayed and delayed[0][0] <= now_ms:
            _, key = delayed.pop(0)
            self._ready[key].not_before = None
            n += 1
        return n

    def next_redelivery(self) -> int | None:
        """The earliest time a redelivery-delayed ready message becomes deliverable, or None."""
        return self._delayed[0][0] if self._delayed else None

    def expire(self, now_ms: int) -> int:
        """Expire every ready message whose time has come (``now_ms >= expires_at``); returns how many.
        Messages being delivered are left to their consumer's outcome."""
        n = 0
        exp = self._expiry
        while exp and exp[0][0] <= now_ms:
            _, key = exp[0]
            msg = self._take(key)
            self._expire_one(msg)
            n += 1
        return n

    def purge_messages(self) -> list[QueuedMessage]:
        """Remove every ready message (not those being delivered) and return them, in queue order, for
        the broker to journal their deletion."""
        gone = list(self._ready.values())
        self._ready.clear()
        self._expiry.clear()
        self._delayed.clear()
        self.messages_purged += len(gone)
        removed = self.removed
        for msg in gone:
            self._gone(msg)
            if removed is not None:
                removed(msg, "normal")
        return gone

    def take_ready(self, msg: QueuedMessage) -> bool:
        """Remove ``msg`` if it is ready here (not being delivered), as acknowledged (a mirror's replica
        applying the source's acknowledgement); False when it is not ready here."""
        if msg.seq is None:
            return False
        key = (-msg.priority, msg.seq)
        if self._ready.by_key.get(key) is not msg:
            return False
        self._take(key)
        self._gone(msg)
        self.messages_acknowledged += 1
        return True

    def record_ids(self) -> set[int]:
        """Journal record ids of the durable messages held, ready or being delivered."""
        held = list(self._ready.values()) + [msg for _c, msg in self._deliveries.values()]
        return {m.record_id for m in held if m.record_id is not None}

    def purge(self) -> int:
        """Remove every ready message; returns how many (see :meth:`purge_messages`)."""
        return len(self.purge_messages())

    def drop_all(self) -> list[QueuedMessage]:
        """Forget every message, ready or being delivered (the queue is being deleted); returns them
        for the broker to journal their removal. Consumers stay registered until they detach."""
        gone = list(self._ready.values()) + [msg for _c, msg in self._deliveries.values()]
        self._ready.clear()
        self._expiry.clear()
        self._delayed.clear()
        for c in self._consumers.values():
            c.unacked.clear()
        self._deliveries.clear()
        self.messages_purged += len(gone)
        for msg in gone:
            self._gone(msg)
        return gone
