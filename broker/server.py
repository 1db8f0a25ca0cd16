"""The tdbroker AMQP endpoint: queues, journal and links, sans-IO like the router.

``Broker`` implements :class:`wire.connection.ConnectionHandler`. Links the peer attaches are bound to a
queue by the terminus that names the node (target of a link the peer sends on, source of one it receives
on); links the broker attaches itself (broker connections, :mod:`broker.connections`) are bound with
:meth:`Broker.attach_local`. Per-message work uses the raw calls of :mod:`wire.raw`.

Durability: a message whose header says durable is appended to the journal and enqueued at once (the
journal's order puts any later acknowledgement after it), but its delivery is settled ``accepted`` only
once the group committer reports its record on disk (:meth:`durability_loop`). Non-durable messages are
accepted at once. Journal recovery, paging and the disk limits are in :mod:`broker.storage`; what size a
message may have and its refusal while it still arrives in :mod:`broker.admission`.

Dead letters and expiry follow Artemis: a message rejected by a consumer, or whose delivery-count reaches
the address-settings ``max-delivery-attempts``, moves to the queue of the ``dead-letter-address``; one
whose ttl / absolute-expiry-time passes moves to the ``expiry-address`` (its expiry cleared there). The
target queue is created if it does not exist. A durable message's move is journaled as a new message
record on the target queue plus the acknowledgement of the old record. With no such address configured
(or when it names the queue the message is leaving) the message is dropped and only counted.
Expiry is time-driven (:mod:`broker.timers`); the clock is injectable (``Broker(cfg, clock=...)``,
milliseconds since the epoch).

Address limits (``max-size-bytes``, ``address-full-policy``, ``global-max-size``) are decided in
:mod:`broker.limits`; this module applies the verdicts (reject, drop, withhold credit, page).

The connection and link records are in :mod:`broker.links`. Addresses, routing types, subscriptions
and temporary queues live in :mod:`broker.addressing`; the
management facade (``mgmt_*``, ``create_queue`` ...) in :mod:`broker.facade`. A link attached to
``$management`` hands each message to ``self.management.handle(bytes)`` and delivers the reply to the
queue its ``properties.to`` names (the client's dynamic-source receiver). Flow records
(``self.recorder``, see :mod:`wire.flowrecords`) are written only when configured: ``store``,
``deliver`` and ``settle`` events for the messages the recorder samples.
"""

from __future__ import annotations

import itertools
import logging
import time

import proton
import trio

from broker.addressing import MULTICAST, AddressModel
from broker.admission import Admission
from broker.config import BrokerConfig
from broker.connections import BridgeControl
from broker.facade import ManagementFacade
from broker.limits import DISCARD, PAGED, REJECT, STORE_BLOCKED, AddressLimits, SizeMeter
from broker.links import BrokerConnection, BrokerLink
from broker.queue import ACCEPTED, MODIFIED, REJECTED, RELEASED, Queue, QueuedMessage
from broker.storage import Storage
from broker.timers import Timers
from wire import raw
from wire.terminus import capabilities
from wire.validate import validate_message
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection

log = logging.getLogger("broker.server")

PRODUCT = "tdbroker"
VERSION = "0.1.0"
# Credit window of a link the broker receives on, refilled one by one as messages are stored (durable
# ones: once on disk). Artemis' default amqpCredits. It bounds what one fsync can cover: with 250 a
# sender waited for the group commit every 250 messages (measured: 13k -> 17k durable msg/s direct).
LINK_CAPACITY = 1000
# The node a management client sends requests to (Artemis' and Dispatch's name).
MANAGEMENT_ADDRESS = "$management"
# Terminus durability values (AMQP 1.0 §3.5.5) and expiry policy that make a subscription durable.
_TERMINUS_DURABLE = (proton.Terminus.CONFIGURATION, proton.Terminus.DELIVERIES)

_consumer_ids = itertools.count(1)


def _now_ms() -> int:
    return int(time.time() * 1000)


class Broker(AddressModel, Storage, Admission, Timers, ManagementFacade, ConnectionHandler):
    """The broker: queues and journal behind AMQP links (see the module docstring).

    ``clock``: () -> milliseconds since the epoch; ``disk_usage``: path -> (total, available) bytes of
    its file system (see :mod:`broker.disk`); ``journal_write``: the journal's ``write(fd, data)``. All
    are injectable for tests (a full disk, without filling one)."""

    def __init__(self, cfg: BrokerConfig, *, clock=None, disk_usage=None, journal_write=None):
        self.cfg = cfg
        self.clock = clock or _now_ms  # () -> milliseconds since the epoch
        self.name = cfg.name or "tdbroker"
        self.management = None  # an object with handle(request bytes) -> reply bytes | None
        self.recorder = None    # a wire.flowrecords.FlowRecorder when <flow-records> is configured
        self.bridges: dict = {}  # broker connection name -> broker.connections.BridgeControl
        self.connections: set[BrokerConnection] = set()
        self.consumers: dict = {}  # consumer id -> BrokerLink
        self._partial: dict = {}  # delivery -> PartialDelivery (multi-frame messages still arriving)
        self._dirty: set[Queue] = set()
        self._wake: set = set()
        self._expiry_wakeup = trio.Event()
        self._expiry_armed: int | None = None  # the expires_at the expiry loop sleeps until
        self._bindings_wakeup: trio.Event | None = None  # set by bindings_loop while it runs
        self.messages_dead_lettered = 0  # moved to a dead-letter address
        self.messages_moved_expired = 0  # moved to an expiry address
        self.messages_dropped = 0  # dead-lettered or expired with nowhere to go
        # Queues that are some address-setting's expiry address: messages recovered there never expire.
        self._expiry_targets = {s.expiry_address for s in cfg.address_settings if s.expiry_address}
        self.meter = SizeMeter()  # bytes held by every queue (global-max-size); queues update it
        self.limits = AddressLimits(cfg, self.meter)
        self._init_storage(disk_usage, journal_write)
        self._init_addressing()
        for conn in cfg.broker_connections:
            BridgeControl(self, conn)

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
                self._partial_chunk(engine, bl, d, chunk)
            elif raw.delivery_aborted(d):
                self._partial.pop(d, None)
                raw.link_advance(lp)
                raw.delivery_settle(d)
            return
        payload = raw.recv_all(lp)
        if self._partial:
            payload = self._partial_end(bl, d, payload)
            if payload is None:
                return
        raw.link_advance(lp)
        if not payload and raw.delivery_aborted(d):
            raw.delivery_settle(d)
            return
        self._store(bl, d, payload)

    def _answer(self, bl: BrokerLink, d, accepted: bool = True) -> None:
        if accepted:
            raw.delivery_update(d, raw.ACCEPTED)
        raw.delivery_settle(d)
        self._give_credit(bl)

    def _give_credit(self, bl: BrokerLink) -> None:
        """One credit back for a stored (or refused) message, unless its address is full under the BLOCK
        policy: then it is owed until consumers make room (see broker.limits)."""
        limits = self.limits
        if limits.active and bl.mode != BrokerLink.MANAGEMENT:
            address, queues = self._scope(bl)
            if queues and limits.blocking(address, queues):
                limits.owe(bl, address, queues)
                return
        raw.link_flow(bl.ptr, 1)

    def _scope(self, bl: BrokerLink) -> tuple[str, list]:
        """(address, queues) a receiving link stores into."""
        if bl.mode == BrokerLink.FANOUT:
            return bl.address, self.multicast_queues(bl.address)
        info = self.queue_info.get(bl.queue.name) if bl.queue is not None else None
        return (info.address, [bl.queue]) if info is not None else ("", [])

    def _store(self, bl: BrokerLink, d, payload: bytes) -> None:
        if bl.closed:  # in flight while its queue was deleted: the sender may try elsewhere
            raw.delivery_update(d, raw.RELEASED)
            raw.delivery_settle(d)
            return
        if bl.mode == BrokerLink.MANAGEMENT:
            self._management_request(bl, d, payload)
            return
        now = self.clock()
        try:
            validate_message(payload)  # stored and replayed: the whole section grammar, not only the header
            msg = QueuedMessage.from_bytes(payload, now)
        except Exception as exc:  # a malformed message: reject it, keep the link
            raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
            self._answer(bl, d, accepted=False)
            return
        targets = [bl.queue] if bl.mode is None else self.multicast_queues(bl.address)
        address = bl.address if bl.mode is not None else self.queue_info[bl.queue.name].address
        page_all = False
        if self.limits.active:
            largest, what = self.largest_message(bl)
            if len(payload) > largest:
                self._refuse(bl, d, f"message larger than {largest} bytes ({what})")
                return
            verdict = self.limits.verdict(address, targets, len(payload))
            if verdict == REJECT:
                self._refuse(bl, d, f"Address is full: {address}")
                return
            if verdict == DISCARD:
                self._answer(bl, d)
                return
            if verdict == STORE_BLOCKED and not self.limits.blocked:
                log.info("address %s is full (BLOCK policy): producers get no more credit until it drains",
                         address)
            page_all = verdict == PAGED
        journal = self.journal
        info = self.queue_info
        durable = msg.durable
        if durable and journal is not None and any(info[q.name].durable for q in targets):
            refusal = self.durable_refusal()
            if refusal is not None:
                self.messages_refused_disk += 1
                self._refuse(bl, d, f"durable message refused: {refusal}")
                return
        if page_all or (self.pager is not None and any(self.must_page(q) for q in targets)):
            refusal = self.paging_refusal()
            if refusal is not None:
                self.messages_refused_disk += 1
                self._refuse(bl, d, f"Address is full: {address} and cannot page: {refusal}")
                return
        rid = None
        expires = msg.expires_at
        for i, q in enumerate(targets):
            m = msg if i == 0 else QueuedMessage(payload, priority=msg.priority, expires_at=expires,
                                                 delivery_count=msg.delivery_count, enqueued_at=now)
            qi = info[q.name]
            if expires is None and qi.expiry_delay > 0:
                m.expires_at = now + qi.expiry_delay  # Artemis' expiry-delay: only for messages without one
            if durable and journal is not None and qi.durable:
                try:
                    rid = m.record_id = journal.append_message(q.name, payload, delivery_count=m.delivery_count)
                except ValueError as exc:  # beyond the journal's record limits: refuse, keep the link
                    self._refuse(bl, d, str(exc))
                    return
                m.durable = True
            else:
                m.durable = False
            if page_all or self.must_page(q):
                self._page(q, m, address)
            else:
                q.enqueue(m)
                self._dirty.add(q)
        rec = self.recorder
        if rec is not None:
            self._record_store(rec, bl, targets, payload)
        if rid is not None and not raw.delivery_settled(d):
            self._pending_durable.append((bl, d, rid))  # accepted once on disk (durability_loop)
            return
        # Non-durable, or pre-settled by the sender: nothing to wait for. A multicast address without
        # subscribers drops the message and still accepts it, as Artemis does.
        self._answer(bl, d)

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
        journal = self.journal
        if msg.record_id is not None and journal is not None:
            if outcome == ACCEPTED:
                journal.append_ack(msg.record_id)
            elif failed:
                # The count went up and the message is still here (a dead-lettered one has no record
                # any more): make the count survive a restart.
                journal.append_update(msg.record_id, delivery_count=msg.delivery_count)
        raw.delivery_settle(d)
        if outcome != ACCEPTED:
            self._dirty.add(q)
        self._wake.add(bl.engine)
        if self.recorder is not None:
            self._record(self.recorder, "settle", msg.payload, address=self.queue_info[q.name].address,
                         link=bl.name, outcome=outcome)

    def on_link_flow(self, engine, link) -> None:
        bl = engine.app.links.get(link)
        if bl is None or bl.incoming or bl.closed:
            return
        q = bl.queue
        q.set_credit(bl.consumer_id, max(0, raw.link_credit(link)))
        if raw.link_get_drain(link):
            q.drain(bl.consumer_id)
        self._dirty.add(q)

    def on_batch_end(self) -> None:
        if self.pager is not None and self.pager.spools:
            self._depage()
        if self.limits.blocked:
            for bl, owed in self.limits.unblocked():
                if not bl.closed:
                    raw.link_flow(bl.ptr, owed)
                    self._wake.add(bl.engine)
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
        if self._bindings_dirty and self._bindings_wakeup is not None:
            self._bindings_wakeup.set()

    def _dispatch(self) -> None:
        dirty, self._dirty = self._dirty, set()
        now = self.clock()
        consumers = self.consumers
        wake = self._wake
        send = raw.send_unique_tagged
        rec = self.recorder
        for q in dirty:
            if q.name not in self.queues:
                continue  # deleted in this batch
            for cid, token, msg in q.next_deliveries(now):
                bl = consumers[cid]
                d = send(bl.ptr, bl.seq, msg.outgoing(), len(bl.unsettled))
                bl.seq += 1
                if rec is not None:
                    self._record(rec, "deliver", msg.payload, address=self.queue_info[q.name].address,
                                 link=bl.name)
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
        try:
            self._link_open(engine, link)
        except ValueError as exc:
            engine.refuse_link(link, "amqp:invalid-field", str(exc)[:200])
        engine.wake()

    def _link_open(self, engine, link) -> None:
        lo = raw.link_object(link)
        terminus = lo.remote_source if lo.is_sender else lo.remote_target
        address = terminus.address
        if lo.is_sender and terminus.dynamic:
            q = self.temporary_queue()
            engine.open_link_like_remote(link, source_address=q.name, dynamic_source=True)
            bl = self.attach_local(engine, link, q, incoming=False, name=lo.name,
                                   presettled=lo.remote_snd_settle_mode == proton.Link.SND_SETTLED)
            bl.owned_queue = True
            return
        if not address:
            engine.refuse_link(link, "amqp:not-implemented", "tdbroker needs a named node (no anonymous relay)")
            return
        if address == MANAGEMENT_ADDRESS and not lo.is_sender:
            if self.management is None:
                engine.refuse_link(link, "amqp:not-found", "management is not available on this broker")
                return
            engine.open_link_like_remote(link)
            bl = BrokerLink(link, engine, None, True, lo.name)
            bl.mode = BrokerLink.MANAGEMENT
            engine.app.links[link] = bl
            raw.link_flow(link, LINK_CAPACITY)
            return
        caps = capabilities(terminus.capabilities)
        if "::" not in address and address not in self.queues and \
                self.routing_type_for(address, caps) == MULTICAST:
            self._multicast_link(engine, link, lo, address)
            return
        q = self.lookup_queue(address)
        if q is None:
            engine.refuse_link(link, "amqp:not-found", f"queue {address} does not exist")
            return
        if not lo.is_sender:
            self._advertise_largest(lo, self.queue_info[q.name].address)
        engine.open_link_like_remote(link)
        bl = self.attach_local(engine, link, q, incoming=not lo.is_sender, name=lo.name,
                               presettled=lo.is_sender and lo.remote_snd_settle_mode == proton.Link.SND_SETTLED)
        log.debug("link %s attached to queue %s (%s)", lo.name, q.name, "in" if bl.incoming else "out")

    def _multicast_link(self, engine, link, lo, address: str) -> None:
        """A producer fans out to every multicast queue of the address; a consumer gets a subscription."""
        self.addresses.setdefault(address, set()).add(MULTICAST)
        if not lo.is_sender:
            self._advertise_largest(lo, address)
            engine.open_link_like_remote(link)
            bl = BrokerLink(link, engine, None, True, lo.name)
            bl.mode, bl.address = BrokerLink.FANOUT, address
            engine.app.links[link] = bl
            raw.link_flow(link, LINK_CAPACITY)
            return
        src = lo.remote_source
        durable = src.durability in _TERMINUS_DURABLE or src.expiry_policy == proton.Terminus.EXPIRE_NEVER
        sub_name = f"{engine.remote_container or 'client'}.{lo.name}" if durable else None
        q = self.subscription_queue(address, durable_name=sub_name)
        engine.open_link_like_remote(link)
        bl = self.attach_local(engine, link, q, incoming=False, name=lo.name,
                               presettled=lo.remote_snd_settle_mode == proton.Link.SND_SETTLED)
        bl.durable_sub = durable
        bl.owned_queue = not durable
        log.debug("link %s subscribed to %s with queue %s", lo.name, address, q.name)

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
        if bl is not None and bl.queue is not None:
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
        if q.name not in self.queues:
            return  # the queue was deleted under the link
        back = q.remove_consumer(bl.consumer_id, failed=failed)
        if failed and self.journal is not None:
            for msg in back:
                if msg.record_id is not None:  # still here (not dead-lettered): its count went up
                    self.journal.append_update(msg.record_id, delivery_count=msg.delivery_count)
        self._dirty.add(q)

    def _drop_owned(self, bl: BrokerLink, closed: bool) -> None:
        """A temporary queue goes with its link; a durable subscription only when the link is closed."""
        if bl.incoming or bl.queue is None or bl.queue.name not in self.queues:
            return
        if bl.owned_queue or (bl.durable_sub and closed):
            self._remove_queue(bl.queue.name, "closed with its link")

    def on_link_close(self, engine, link, closed: bool) -> None:
        bl = engine.app.links.pop(link, None)
        if bl is not None:
            self._unbind(bl, failed=False)
            self._drop_owned(bl, closed)
            cond = raw.link_object(link).remote_condition
            if cond is not None:
                log.info("link %s closed by peer: %s %s", bl.name, cond.name, cond.description or "")
        engine.wake()

    def on_connection_close(self, engine) -> None:
        bc = engine.app
        self.connections.discard(bc)  # first: a queue removed below must not try to detach links here
        for bl in list(bc.links.values()):
            self._unbind(bl, failed=True)
            self._drop_owned(bl, False)
        bc.links.clear()
        self.connections.discard(bc)
        self.on_batch_end()  # hand back what the connection's consumers held to other consumers
        log.info("connection %d (%s) closed%s", engine.id, engine.remote_host,
                 f" ({engine.error})" if engine.error else "")

