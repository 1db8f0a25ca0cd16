"""The tdbroker AMQP endpoint: queues, journal and links, sans-IO like the router.

``Broker`` implements :class:`wire.connection.ConnectionHandler`. Links the peer attaches are bound to a
queue by the terminus that names the node (target of a link the peer sends on, source of one it receives
on); links the broker attaches itself (broker connections, :mod:`broker.connections`) are bound with
:meth:`Broker.attach_local`. Per-message work uses the raw calls of :mod:`wire.raw`.

Durability: a message whose header says durable is appended to the journal and enqueued at once (the
journal's order puts any later acknowledgement after it), but its delivery is settled ``accepted`` only
once the group committer reports its record on disk (:meth:`durability_loop`). Non-durable messages are
accepted at once.

Dead letters and expiry follow Artemis: a message rejected by a consumer, or whose delivery-count reaches
the address-settings ``max-delivery-attempts``, moves to the queue of the ``dead-letter-address``; one
whose ttl / absolute-expiry-time passes moves to the ``expiry-address`` (its expiry cleared there). The
target queue is created if it does not exist. A durable message's move is journaled as a new message
record on the target queue plus the acknowledgement of the old record. With no such address configured
(or when it names the queue the message is leaving) the message is dropped and only counted.
Expiry is time-driven: :meth:`Broker.expiry_loop` sleeps until the earliest ``next_expiry()`` of any queue
(re-armed after every batch of events) and then calls ``Queue.expire``; the clock is injectable
(``Broker(cfg, clock=...)``, milliseconds since the epoch).
"""

from __future__ import annotations

import itertools
import logging
import time
from collections import deque

import proton
import trio

from broker.config import BrokerConfig
from broker.journal import Journal
from broker.journal_io import GroupCommitter
from broker.queue import ACCEPTED, MODIFIED, REJECTED, RELEASED, Queue, QueuedMessage
from wire import raw
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection

log = logging.getLogger("broker.server")

PRODUCT = "tdbroker"
VERSION = "0.1.0"
# Credit window of a link the broker receives on (refilled as messages are stored).
LINK_CAPACITY = 250

_consumer_ids = itertools.count(1)


def _now_ms() -> int:
    return int(time.time() * 1000)


class BrokerLink:
    """One attached link: the queue it is bound to and, for a sending link, its consumer state."""

    __slots__ = ("ptr", "engine", "queue", "incoming", "consumer_id", "unsettled", "seq", "closed",
                 "presettled", "name")

    def __init__(self, ptr, engine, queue: Queue, incoming: bool, name: str):
        self.ptr = ptr
        self.engine = engine
        self.queue = queue
        self.incoming = incoming
        self.name = name
        self.consumer_id = None
        self.unsettled: dict = {}  # delivery pointer -> queue delivery token
        self.seq = 0
        self.closed = False
        self.presettled = False


class BrokerConnection:
    """Per-connection state (``engine.app``)."""

    def __init__(self, engine: EngineConnection):
        self.engine = engine
        self.links: dict = {}  # link pointer -> BrokerLink
        self.on_open = None  # broker connections: called once the peer answered our open


class Broker(ConnectionHandler):
    def __init__(self, cfg: BrokerConfig, *, clock=None):
        self.cfg = cfg
        self.clock = clock or _now_ms  # () -> milliseconds since the epoch
        self.name = cfg.name or "tdbroker"
        self.queues: dict[str, Queue] = {}
        self.queue_address: dict[str, str] = {}
        self.connections: set[BrokerConnection] = set()
        self.consumers: dict = {}  # consumer id -> BrokerLink
        self.journal: Journal | None = None
        self.committer: GroupCommitter | None = None
        self._partial: dict = {}
        self._dirty: set[Queue] = set()
        self._wake: set = set()
        self._pending_durable: deque = deque()  # (BrokerLink, delivery, record_id)
        self._durable_wakeup = trio.Event()
        self._expiry_wakeup = trio.Event()
        self._expiry_armed: int | None = None  # the expires_at the expiry loop sleeps until
        self.messages_dead_lettered = 0  # moved to a dead-letter address
        self.messages_moved_expired = 0  # moved to an expiry address
        self.messages_dropped = 0  # dead-lettered or expired with nowhere to go
        # Queues that are some address-setting's expiry address: messages recovered there never expire.
        self._expiry_targets = {s.expiry_address for s in cfg.address_settings if s.expiry_address}
        for q in cfg.queues():
            self._create_queue(q.name, q.address)

    # -- queues and journal -----------------------------------------------------------------------
    def _create_queue(self, name: str, address: str) -> Queue:
        settings = self.cfg.settings_for(address)
        dla, exa = settings.dead_letter_address, settings.expiry_address
        q = Queue(name, max_delivery_attempts=settings.max_delivery_attempts,
                  dead_letter=lambda msg, reason, n=name: self._move(msg, n, dla, expired=False),
                  expired=lambda msg, n=name: self._move(msg, n, exa, expired=True))
        self.queues[name] = q
        self.queue_address[name] = address
        return q

    def _target_queue(self, address: str) -> Queue:
        """The queue of a dead-letter / expiry address, created when missing (whatever auto-create says)."""
        if "::" in address:
            qn = address.split("::", 1)[1]
            return self.queues.get(qn) or self._create_queue(qn, address.split("::", 1)[0])
        q = self.queues.get(address)
        if q is None:
            name = next((n for n, a in self.queue_address.items() if a == address), None)
            if name is not None:
                return self.queues[name]
            q = self._create_queue(address, address)
            log.info("created queue %s", address)
        return q

    def _move(self, msg: QueuedMessage, source: str, address: str | None, *, expired: bool) -> None:
        """A message left queue ``source`` dead-lettered or expired: move it to ``address``'s queue, or
        drop it when there is none (or it is the queue it left). The queue has already forgotten it."""
        journal = self.journal
        target = self._target_queue(address) if address else None
        if target is None or target.name == source:
            self.messages_dropped += 1
            if msg.record_id is not None and journal is not None:
                journal.append_ack(msg.record_id)
            return
        moved = QueuedMessage(msg.payload, priority=msg.priority, expires_at=None,
                              delivery_count=msg.delivery_count, durable=msg.durable, enqueued_at=self.clock())
        if msg.record_id is not None and journal is not None:
            moved.record_id = journal.append_message(target.name, msg.payload, delivery_count=msg.delivery_count)
            journal.append_ack(msg.record_id)
        target.enqueue(moved)
        self._dirty.add(target)
        if expired:
            self.messages_moved_expired += 1
        else:
            self.messages_dead_lettered += 1
        log.debug("%s message moved from %s to %s", "expired" if expired else "dead-lettered", source,
                  target.name)

    def lookup_queue(self, address: str) -> Queue | None:
        """The queue a link names: a queue name, ``address::queue`` (FQQN), or an address with configured
        queues (its first one: anycast, no fan-out yet); else auto-created when the settings allow."""
        if "::" in address:
            return self.queues.get(address.split("::", 1)[1])
        q = self.queues.get(address)
        if q is None:
            name = next((n for n, a in self.queue_address.items() if a == address), None)
            if name is not None:
                return self.queues[name]
        if q is None and self.cfg.settings_for(address).auto_create_queues:
            q = self._create_queue(address, address)
            log.info("auto-created queue %s", address)
        return q

    def open_journal(self) -> int:
        """Open (recover) the journal and re-enqueue what it holds, in order. Returns the count."""
        if not self.cfg.persistence_enabled:
            return 0
        self.journal = Journal(self.cfg.journal_directory, fsync=self.cfg.journal_sync_non_transactional)
        stored = self.journal.recover()
        now = _now_ms()
        for sm in stored:
            q = self.queues.get(sm.queue) or self._create_queue(sm.queue, sm.queue)
            msg = QueuedMessage.from_bytes(sm.payload, now, record_id=sm.record_id)
            msg.delivery_count = sm.delivery_count
            msg.durable = True
            if sm.queue in self._expiry_targets:
                msg.expires_at = None
            q.enqueue(msg)
        self.committer = GroupCommitter(self.journal)
        log.info("journal %s: recovered %d messages", self.cfg.journal_directory, len(stored))
        return len(stored)

    def close_journal(self) -> None:
        if self.journal is not None:
            self.journal.close()

    async def durability_loop(self) -> None:
        """Settle durable deliveries once the group committer has their records on disk."""
        while True:
            await self._durable_wakeup.wait()
            self._durable_wakeup = trio.Event()
            while self._pending_durable:
                await self.committer.wait_durable(self._pending_durable[-1][2])
                self._settle_durable()

    def next_expiry(self) -> int | None:
        """The earliest expires_at of a ready message in any queue, or None."""
        times = [t for t in (q.next_expiry() for q in self.queues.values()) if t is not None]
        return min(times) if times else None

    def expire_due(self, now: int | None = None) -> int:
        """Expire (move or drop) every ready message whose time has come; returns how many. Runs the
        batch-end work (dispatch to the expiry queues, journal kick) when anything expired."""
        now = self.clock() if now is None else now
        n = 0
        for q in list(self.queues.values()):
            t = q.next_expiry()
            if t is not None and t <= now:
                n += q.expire(now)
        if n:
            self.on_batch_end()
        return n

    async def expiry_loop(self) -> None:
        """Sleep until the earliest expiry (re-armed by :meth:`_arm_expiry` after each batch), then
        expire what is due."""
        while True:
            nxt = self.next_expiry()
            self._expiry_armed = nxt
            if nxt is None:
                await self._expiry_wakeup.wait()
            else:
                with trio.move_on_after(max(0.0, (nxt - self.clock()) / 1000.0)):
                    await self._expiry_wakeup.wait()
            self._expiry_wakeup = trio.Event()
            self.expire_due()

    def _arm_expiry(self) -> None:
        """Wake the expiry loop when a message now expires before the time it sleeps until."""
        nxt = self.next_expiry()
        if nxt is not None and (self._expiry_armed is None or nxt < self._expiry_armed):
            self._expiry_armed = nxt
            self._expiry_wakeup.set()

    def _settle_durable(self) -> None:
        durable = self.journal.durable_id
        pending = self._pending_durable
        wake = set()
        accepted = raw.ACCEPTED
        while pending and pending[0][2] <= durable:
            bl, d, _rid = pending.popleft()
            if bl.closed:
                continue
            raw.delivery_update(d, accepted)
            raw.delivery_settle(d)
            raw.link_flow(bl.ptr, 1)
            wake.add(bl.engine)
        for engine in wake:
            engine.wake()

    # -- engines ----------------------------------------------------------------------------------
    def connection_settings(self, **kw) -> ConnectionSettings:
        kw.setdefault("container_id", self.name)
        kw.setdefault("properties", {"product": PRODUCT, "version": VERSION})
        kw.setdefault("offered_capabilities", ())
        return ConnectionSettings(**kw)

    def new_engine(self, settings: ConnectionSettings, *, server: bool, remote_host: str = "") -> EngineConnection:
        engine = EngineConnection(self, settings, server=server, remote_host=remote_host)
        bc = BrokerConnection(engine)
        engine.app = bc
        self.connections.add(bc)
        return engine

    def close_all(self) -> None:
        for bc in list(self.connections):
            bc.engine.close()

    # -- hot events -------------------------------------------------------------------------------
    def on_delivery(self, engine, d) -> None:
        lp = raw.delivery_link(d)
        bl = engine.app.links.get(lp)
        if bl is None:
            return
        if not bl.incoming:
            self._outgoing_update(bl, d)
            return
        if not raw.delivery_readable(d):
            return
        if raw.delivery_partial(d):
            chunk = raw.recv_all(lp)
            if chunk:
                self._partial.setdefault(d, []).append(chunk)
            elif raw.delivery_aborted(d):
                self._partial.pop(d, None)
                raw.link_advance(lp)
                raw.delivery_settle(d)
            return
        payload = raw.recv_all(lp)
        if self._partial:
            chunks = self._partial.pop(d, None)
            if chunks:
                chunks.append(payload)
                payload = b"".join(chunks)
        raw.link_advance(lp)
        if not payload and raw.delivery_aborted(d):
            raw.delivery_settle(d)
            return
        self._store(bl, d, payload)

    def _store(self, bl: BrokerLink, d, payload: bytes) -> None:
        try:
            msg = QueuedMessage.from_bytes(payload, self.clock())
        except Exception as exc:  # a malformed message: reject it, keep the link
            raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
            raw.delivery_settle(d)
            raw.link_flow(bl.ptr, 1)
            return
        q = bl.queue
        journal = self.journal
        if msg.durable and journal is not None:
            rid = journal.append_message(q.name, payload, delivery_count=msg.delivery_count)
            msg.record_id = rid
            q.enqueue(msg)
            self._dirty.add(q)
            if raw.delivery_settled(d):  # pre-settled by the sender: nothing to answer
                raw.delivery_settle(d)
                raw.link_flow(bl.ptr, 1)
            else:
                self._pending_durable.append((bl, d, rid))
            return
        msg.durable = False
        q.enqueue(msg)
        self._dirty.add(q)
        raw.delivery_update(d, raw.ACCEPTED)
        raw.delivery_settle(d)
        raw.link_flow(bl.ptr, 1)

    def _outgoing_update(self, bl: BrokerLink, d) -> None:
        state = raw.delivery_remote_state(d)
        settled = raw.delivery_settled(d)
        if state not in raw.TERMINAL_STATES and not settled:
            return
        token = bl.unsettled.pop(d, None)
        if token is None:
            if settled:
                raw.delivery_settle(d)
            return
        failed = undeliverable = False
        if state == raw.ACCEPTED or (settled and state not in raw.TERMINAL_STATES):
            outcome = ACCEPTED
        elif state == raw.RELEASED:
            outcome = RELEASED
        elif state == raw.REJECTED:
            outcome = REJECTED
        else:
            outcome = MODIFIED
            remote = raw.lib.pn_delivery_remote(d)
            failed = bool(raw.lib.pn_disposition_is_failed(remote))
            undeliverable = bool(raw.lib.pn_disposition_is_undeliverable(remote))
        q = bl.queue
        msg = q.settle(token, outcome, delivery_failed=failed, undeliverable_here=undeliverable)
        if outcome == ACCEPTED and msg.record_id is not None and self.journal is not None:
            self.journal.append_ack(msg.record_id)
        raw.delivery_settle(d)
        if outcome != ACCEPTED:
            self._dirty.add(q)
        self._wake.add(bl.engine)

    def on_link_flow(self, engine, link) -> None:
        bl = engine.app.links.get(link)
        if bl is None or bl.incoming:
            return
        q = bl.queue
        q.set_credit(bl.consumer_id, max(0, raw.link_credit(link)))
        if raw.link_get_drain(link):
            q.drain(bl.consumer_id)
        self._dirty.add(q)

    def on_batch_end(self) -> None:
        rounds = 0
        while self._dirty and rounds < 4:  # a dispatch may move messages to dead-letter/expiry queues
            self._dispatch()
            rounds += 1
        self._arm_expiry()
        if self._wake:
            wake, self._wake = self._wake, set()
            for engine in wake:
                engine.wake()
        if self.journal is not None and self.journal.pending and self.committer is not None:
            self.committer.kick()
            if self._pending_durable:
                self._durable_wakeup.set()

    def _dispatch(self) -> None:
        dirty, self._dirty = self._dirty, set()
        now = self.clock()
        consumers = self.consumers
        wake = self._wake
        send = raw.send_unique_tagged
        for q in dirty:
            for cid, token, msg in q.next_deliveries(now):
                bl = consumers[cid]
                d = send(bl.ptr, bl.seq, msg.outgoing(), len(bl.unsettled))
                bl.seq += 1
                if bl.presettled:
                    raw.delivery_settle(d)
                    q.settle(token, ACCEPTED)
                    if msg.record_id is not None and self.journal is not None:
                        self.journal.append_ack(msg.record_id)
                else:
                    bl.unsettled[d] = token
                wake.add(bl.engine)
            for cid, _n in q.take_drained().items():
                bl = consumers.get(cid)
                if bl is not None and not bl.closed:
                    raw.link_drained(bl.ptr)
                    wake.add(bl.engine)

    # -- cold events ------------------------------------------------------------------------------
    def on_connection_open(self, engine) -> None:
        log.info("connection %d (%s) opened, container %s", engine.id, engine.remote_host,
                 engine.remote_container)
        bc = engine.app
        if bc.on_open is not None:
            bc.on_open(engine)

    def on_link_open(self, engine, link) -> None:
        lo = raw.link_object(link)
        if lo.is_sender:  # the peer receives from a queue
            address = lo.remote_source.address
        else:
            address = lo.remote_target.address
        if not address:
            engine.refuse_link(link, "amqp:not-implemented", "tdbroker needs a named node (no anonymous relay)")
            engine.wake()
            return
        q = self.lookup_queue(address)
        if q is None:
            engine.refuse_link(link, "amqp:not-found", f"queue {address} does not exist")
            engine.wake()
            return
        engine.open_link_like_remote(link)
        bl = self.attach_local(engine, link, q, incoming=not lo.is_sender, name=lo.name,
                               presettled=lo.is_sender and lo.remote_snd_settle_mode == proton.Link.SND_SETTLED)
        log.debug("link %s attached to queue %s (%s)", lo.name, q.name, "in" if bl.incoming else "out")
        engine.wake()

    def attach_local(self, engine, link, q: Queue, *, incoming: bool, name: str = "",
                     presettled: bool = False) -> BrokerLink:
        """Bind a link to a queue: credit for a receiving link, a consumer for a sending one."""
        bl = BrokerLink(link, engine, q, incoming, name)
        engine.app.links[link] = bl
        if incoming:
            raw.link_flow(link, LINK_CAPACITY)
        else:
            bl.presettled = presettled
            bl.consumer_id = next(_consumer_ids)
            self.consumers[bl.consumer_id] = bl
            q.add_consumer(bl.consumer_id)
            credit = raw.link_credit(link)
            if credit > 0:
                q.set_credit(bl.consumer_id, credit)
                self._dirty.add(q)
        return bl

    def on_link_opened(self, engine, link) -> None:
        bl = engine.app.links.get(link)
        if bl is not None:
            log.info("link %s to queue %s attached by the peer", bl.name, bl.queue.name)

    def _unbind(self, bl: BrokerLink, *, failed: bool) -> None:
        if bl.closed:
            return
        bl.closed = True
        if bl.incoming:
            if self._partial:
                for d in [d for d in self._partial if raw.delivery_link(d) == bl.ptr]:
                    del self._partial[d]
            return
        self.consumers.pop(bl.consumer_id, None)
        bl.unsettled.clear()
        q = bl.queue
        q.remove_consumer(bl.consumer_id, failed=failed)
        self._dirty.add(q)

    def on_link_close(self, engine, link, closed: bool) -> None:
        bl = engine.app.links.pop(link, None)
        if bl is not None:
            self._unbind(bl, failed=False)
            cond = raw.link_object(link).remote_condition
            if cond is not None:
                log.info("link %s to queue %s closed by peer: %s %s", bl.name, bl.queue.name, cond.name,
                         cond.description or "")
        engine.wake()

    def on_connection_close(self, engine) -> None:
        bc = engine.app
        for bl in list(bc.links.values()):
            self._unbind(bl, failed=True)
        bc.links.clear()
        self.connections.discard(bc)
        self.on_batch_end()  # hand back what the connection's consumers held to other consumers
        log.info("connection %d (%s) closed%s", engine.id, engine.remote_host,
                 f" ({engine.error})" if engine.error else "")
