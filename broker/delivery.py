"""The broker's data path, sans-IO: messages into queues from the links that send them, out of queues to
the links that consume them. :class:`DeliveryPath` is the :class:`wire.assembly.LinkOwner` of every link
the broker binds (its :class:`broker.links.BrokerLink` records are registered with
:meth:`wire.connection.EngineConnection.own_link`): wire hands it whole messages, however many frames they
took, and drops aborted ones itself. Per-message work uses the raw calls of :mod:`wire.raw`.

Routing (:meth:`DeliveryPath.store`): a producer's link bound to a queue stores into that queue when it
names the queue (its name, or ``address::queue``); when it names an address with anycast queues
(``BrokerLink.address`` set at attach), each message goes to one of them in turn; a link on a multicast
address copies to every multicast queue. With ``<diverts>`` configured, :meth:`AddressModel.route
<broker.addressing.AddressModel.route>` decides, and queues a divert reached get its copy.

Durability: a message whose header says durable is appended to the journal and enqueued at once (the
journal's order puts any later acknowledgement after it), but its delivery is settled ``accepted`` only
once the group committer reports its record on disk (:meth:`broker.server.Broker.durable_up_to`).
Non-durable messages are accepted at once.

Address limits (``max-size-bytes``, ``address-full-policy``, ``global-max-size``) are decided in
:mod:`broker.limits`; this module applies the verdicts (reject, drop, withhold credit, page). Refusal of a
message while it still arrives is :mod:`broker.admission`'s decision, acted on in :meth:`on_partial`.

A link attached to ``$management`` hands each message to ``management.handle(bytes)`` and delivers the
reply to the queue its ``properties.to`` names (the client's dynamic-source receiver). Flow records
(``recorder``, see :mod:`wire.flowrecords`) are written only when configured: ``store``, ``deliver`` and
``settle`` events for the messages the recorder samples.

Longer than ~600 lines on purpose: a message's way in (store) and out (dispatch, outcomes) are one link
owner whose per-message steps call each other directly; what is not per message lives beside it
(broker/largestream.py, broker/admission.py).
"""

from __future__ import annotations

import itertools
import logging
from typing import Callable

from broker.addressing import ANYCAST, MULTICAST, AddressModel
from broker.admission import Admission
from broker.limits import DISCARD, PAGED, REJECT, RESOURCE_LIMIT_EXCEEDED, STORE_BLOCKED, AddressLimits
from broker.largemessage import MAGIC as LARGE_MAGIC
from broker.largemessage import is_reference
from broker.largestream import LargeStreams
from broker.links import BrokerLink
from broker.queue import ACCEPTED, MODIFIED, REJECTED, RELEASED, Queue, QueuedMessage
from broker.storage import Storage
from wire import assembly, codec, raw
from wire.header import read_header
from wire.validate import validate_message

log = logging.getLogger("broker.server")

# Credit window of a link the broker receives on, refilled one by one as messages are stored (durable
# ones: once on disk). Artemis' default amqpCredits. It bounds what one fsync can cover: with 250 a
# sender waited for the group commit every 250 messages (measured: 13k -> 17k durable msg/s direct).
LINK_CAPACITY = 1000

_consumer_ids = itertools.count(1)


class DeliveryPath:
    """Links bound to queues: storing what arrives, handing out what consumers have credit for, and the
    outcomes they answer (see the module docstring). ``forget_link(bl)`` is the broker's: a link this
    path detached itself (too large a message) leaves the broker's tables."""

    def __init__(self, addressing: AddressModel, storage: Storage, admission: Admission, limits: AddressLimits,
                 clock: Callable[[], int], forget_link: Callable[[BrokerLink], None]):
        self.addressing = addressing
        self.storage = storage
        self.admission = admission
        self.limits = limits
        self.clock = clock
        self.forget_link = forget_link
        self.management = None  # an object with handle(request bytes) -> reply bytes | None
        self.recorder = None    # a wire.flowrecords.FlowRecorder when <flow-records> is configured
        self.consumers: dict = {}  # consumer id -> BrokerLink
        self.consumer_listeners: list = []  # (BrokerLink, added) -> None: network advisories
        self.duplicates = None  # broker.network.Network: duplicate detection of network peers' messages
        self.mirror = None      # broker.mirror.MirrorPart while a <mirror> captures events, else None
        self.dirty: set[Queue] = set()  # queues with something to hand out (or drained consumers)
        self.wake: set = set()  # engines with frames to send
        self.large = LargeStreams(self)  # large messages into and out of their files (broker.largestream)
        admission.may_stream = self.large.may_stream

    # -- binding links --------------------------------------------------------------------------------
    def register(self, engine, link, bl: BrokerLink) -> BrokerLink:
        """Make ``bl`` the broker's record of ``link``, and this path its owner in wire."""
        engine.app.links[link] = bl
        engine.own_link(link, bl)
        return bl

    def receiving(self, engine, link, name: str, mode: str, address: str | None = None) -> BrokerLink:
        """A link the peer sends on that stores into no single queue (fan-out, management)."""
        bl = BrokerLink(link, engine, self, None, True, name)
        bl.mode, bl.address = mode, address
        self.register(engine, link, bl)
        raw.link_flow(link, engine.app.link_capacity or LINK_CAPACITY)
        return bl

    def attach(self, engine, link, q: Queue, *, incoming: bool, name: str = "",
               presettled: bool = False, priority: int = 0, accepts=None, selector: str | None = None,
               transform=None, demand=None, pulled: bool = False) -> BrokerLink:
        """Bind a link to a queue: credit for a receiving link, a consumer for a sending one.

        For a consumer: ``priority`` and ``accepts`` as :meth:`broker.queue.Queue.add_consumer` takes
        them; ``selector`` the JMS selector text it was given (what network advisories report);
        ``transform`` (bytes -> bytes) rewrites each message as it leaves (a network bridge adds its
        broker to the path); ``demand`` the network demand the consumer stands for (None: a client).
        Every consumer added or removed is reported to ``consumer_listeners``.

        For a receiving link: ``pulled`` leaves its credit to its owner (a queue federation receiver pulls
        only while local consumers wait): no window, no credit back per message."""
        bl = self.register(engine, link, BrokerLink(link, engine, self, q, incoming, name))
        if incoming:
            bl.address = self._routing_address(link)
            bl.pulled = pulled
            if not pulled:
                raw.link_flow(link, engine.app.link_capacity or LINK_CAPACITY)
        else:
            bl.presettled = presettled
            bl.consumer_id = next(_consumer_ids)
            bl.selector, bl.transform, bl.demand, bl.priority = selector, transform, demand, priority
            self.consumers[bl.consumer_id] = bl
            q.add_consumer(bl.consumer_id, priority=priority, accepts=accepts)
            self._tell_consumer(bl, True)
            credit = raw.link_credit(link)
            if credit > 0:
                q.set_credit(bl.consumer_id, credit)
                self.dirty.add(q)
        return bl

    def _routing_address(self, link) -> str | None:
        """The address a producer's link bound to a queue routes by: the node it names, when that is an
        address with anycast queues (each message goes to one of them in turn, diverts apply); None when
        it names a queue (its name, or the FQQN ``address::queue``): then it stores into that queue."""
        lo = raw.link_object(link)
        named = lo.target.address or lo.remote_target.address
        if named and "::" not in named and named in self.addressing.anycast:
            return named
        return None

    def unbind(self, bl: BrokerLink, *, failed: bool) -> None:
        """The link goes: its consumer's unsettled messages go back to the queue (counted as a failed
        attempt when ``failed``: the connection dropped)."""
        if bl.closed:
            return
        bl.closed = True
        bl.arriving = None
        if bl.writing is not None or bl.streaming is not None or bl.backlog:
            self.large.link_gone(bl)
        if bl.incoming:
            return
        self.consumers.pop(bl.consumer_id, None)
        bl.unsettled.clear()
        self._tell_consumer(bl, False)
        q = bl.queue
        if q.name not in self.addressing.queues:
            return  # the queue was deleted under the link
        back = q.remove_consumer(bl.consumer_id, failed=failed)
        journal = self.storage.journal
        if failed and journal is not None:
            for msg in back:
                if msg.record_id is not None:  # still here (not dead-lettered): its count went up
                    journal.append_update(msg.record_id, delivery_count=msg.delivery_count)
        self.dirty.add(q)

    def _tell_consumer(self, bl: BrokerLink, added: bool) -> None:
        for listener in self.consumer_listeners:
            try:
                listener(bl, added)
            except Exception:  # a network bridge's bug must not stop a consumer attaching or leaving
                log.exception("consumer listener failed")

    # -- LinkOwner: what wire hands over ----------------------------------------------------------------
    def on_message(self, engine, bl: BrokerLink, d, payload: bytes | None) -> None:
        if payload is None:  # refused while it arrived (on_partial said DISCARD): answer it now
            a = bl.arriving
            bl.arriving = None
            self.refuse(bl, d, a.refused if a is not None and a.refused else "refused while arriving")
            return
        if bl.arriving is not None:
            bl.arriving = None
        if len(payload) >= engine.app.min_large_message_size >= 0 and self.storage.large is not None and \
                (bl.mode is None or bl.mode == BrokerLink.FANOUT) and self.large.store_whole(engine, bl, d, payload):
            return  # a large message that came in one read: a file of its own all the same
        self.store(bl, d, payload)

    def on_partial(self, engine, bl: BrokerLink, d, held: int) -> int:
        a = bl.arriving
        if a is not None and a.delivery == d and a.held < held <= a.cap and held < a.next_check:
            a.held = held  # once per frame: no check due (see Admission.arriving)
            condition = None
        else:
            condition, why = self.admission.arriving(bl, d, held, lambda: _first_bytes(engine, d))
        if condition is None:
            if held >= engine.app.min_large_message_size >= 0 and self.storage.large is not None and \
                    self.large.wants(engine, bl, d, held):
                return assembly.STREAM  # a large message: into its own file (broker.largestream)
            return assembly.KEEP
        if condition == RESOURCE_LIMIT_EXCEEDED:
            return assembly.DISCARD
        # Detaching is what stops the sender: the rest of the message is not sent, nor held here.
        self.stop_arriving(bl, d, condition, why)
        return assembly.FORGET

    def on_chunk(self, engine, bl: BrokerLink, d, chunk: bytes, end: int) -> None:
        self.large.chunk(engine, bl, d, chunk, end)

    def stop_arriving(self, bl: BrokerLink, d, condition: str, why: str) -> None:
        """Reject a message still arriving and detach its link: the one way to stop its sender."""
        engine = bl.engine
        bl.arriving = None
        raw.set_rejected(d, condition, why[:200])
        raw.delivery_settle(d)
        self.unbind(bl, failed=False)
        self.forget_link(bl)
        engine.close_link(bl.ptr, condition, why[:200])
        log.warning("connection %d: link %s: %s: refused while still arriving", engine.id, bl.name, why)

    def on_oversized(self, engine, bl: BrokerLink, d, limit: int) -> None:
        # Not reached while BrokerLink.max_message_size is 0 (admission decides); forget the link if it is.
        self.unbind(bl, failed=False)
        self.forget_link(bl)

    def on_link_flow(self, engine, bl: BrokerLink) -> None:
        if bl.incoming or bl.closed:
            return
        q = bl.queue
        link = bl.ptr
        q.set_credit(bl.consumer_id, max(0, raw.link_credit(link)))
        if raw.link_get_drain(link):
            q.drain(bl.consumer_id)
        self.dirty.add(q)

    def on_delivery_update(self, engine, bl: BrokerLink, d) -> None:
        """An outcome (or settlement) of a message this broker sent; nothing for an incoming link."""
        if bl.incoming:
            return
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
            failed, undeliverable = raw.remote_modified_flags(d)
        q = bl.queue
        msg = q.settle(token, outcome, delivery_failed=failed, undeliverable_here=undeliverable)
        journal = self.storage.journal
        if msg.record_id is not None and journal is not None:
            if outcome == ACCEPTED:
                journal.append_ack(msg.record_id)
            elif failed:
                # The count went up and the message is still here (a dead-lettered one has no record
                # any more): make the count survive a restart.
                journal.append_update(msg.record_id, delivery_count=msg.delivery_count)
        raw.delivery_settle(d)
        if outcome != ACCEPTED:
            self.dirty.add(q)
        self.wake.add(bl.engine)
        if self.recorder is not None:
            self._record(self.recorder, "settle", msg.payload, address=self.addressing.address_of(q.name),
                         link=bl.name, outcome=outcome)

    # -- into queues ------------------------------------------------------------------------------------
    def answer(self, bl: BrokerLink, d, accepted: bool = True) -> None:
        if accepted:
            raw.delivery_update(d, raw.ACCEPTED)
        raw.delivery_settle(d)
        self.give_credit(bl)

    def give_credit(self, bl: BrokerLink) -> None:
        """One credit back for a stored (or refused) message, unless its address is full under the BLOCK
        policy: then it is owed until consumers make room (see broker.limits). A pulled link's owner
        gives its credit itself."""
        if bl.pulled:
            return
        limits = self.limits
        if limits.active and bl.mode != BrokerLink.MANAGEMENT:
            address, queues = self.admission.scope(bl)
            if queues and limits.blocking(address, queues):
                limits.owe(bl, address, queues)
                return
        raw.link_flow(bl.ptr, 1)

    def refuse(self, bl: BrokerLink, d, why: str) -> None:
        """Reject a message the broker cannot take (AMQP 1.0 §2.8.15 resource-limit-exceeded); the link stays."""
        raw.set_rejected(d, RESOURCE_LIMIT_EXCEEDED, why[:200])
        self.answer(bl, d, accepted=False)

    def store(self, bl: BrokerLink, d, payload: bytes, *, large_size: int = 0) -> None:
        """Route and store one message. ``large_size`` > 0: ``payload`` is a reference to a large message
        file of that many bytes (broker.largemessage), which is journaled instead of the message."""
        if bl.closed:  # in flight while its queue was deleted: the sender may try elsewhere
            raw.delivery_update(d, raw.RELEASED)
            raw.delivery_settle(d)
            return
        if bl.mode == BrokerLink.MANAGEMENT:
            self._management_request(bl, d, payload)
            return
        now = self.clock()
        try:
            if large_size:
                codec.scan(payload)  # the head's grammar (the body is in the file, passed on as it came)
                msg = QueuedMessage.from_bytes(payload, now)
            else:
                # stored and replayed: the whole section grammar, not only the header; the message is walked
                # once (validate_message says where its properties are)
                msg = QueuedMessage.from_validated(payload, now, validate_message(payload))
        except Exception as exc:  # a malformed message: reject it, keep the link
            raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
            self.answer(bl, d, accepted=False)
            return
        net_key = None
        duplicates = self.duplicates
        if duplicates is not None and bl.engine.app.network_peer is not None:
            # A network peer resends what it had no confirmation of (a reconnect, its restart): a message
            # whose network id we stored already is accepted again and dropped (broker.network).
            net_key = duplicates.duplicate_key(payload)
            if net_key is not None and duplicates.is_duplicate(net_key):
                self.answer(bl, d)
                return
        addressing = self.addressing
        info = addressing.queue_info
        anycast = bl.mode is None
        direct = bl.queue if anycast and bl.address is None else None  # a link naming a queue
        address = bl.address if direct is None else info[direct.name].address
        copies = None  # per target: the payload a divert made for it, when diverts made copies
        # Queues with a <filter> take only the messages their selector selects; a message no queue takes is
        # accepted and dropped, as Artemis drops a message routed to no queue.
        if addressing.diverts.active:
            routes = addressing.route(address, ANYCAST if anycast else MULTICAST, payload, direct=direct)
            targets = [q for q, _p in routes]
            if any(p is not payload for _q, p in routes):
                copies = [p for _q, p in routes]
        elif direct is not None:
            targets = [direct] if not addressing.filtered else addressing.admitted([direct], payload)
        elif anycast:
            q = addressing.next_anycast(address, payload)
            targets = [q] if q is not None else []
        else:
            targets = addressing.multicast.get(address) or []
            if addressing.filtered:
                targets = addressing.admitted(targets, payload)
        storage = self.storage
        journal = storage.journal
        if large_size:
            if targets and not (msg.durable and journal is not None and all(info[q.name].durable for q in targets)):
                # Only a journal record keeps a large message file: a copy for a non-durable queue is held
                # in memory, whole (see docs/broker-configuration.md, "Large messages").
                try:
                    payload = storage.large.read_all(payload)
                    msg = QueuedMessage.from_validated(payload, now, validate_message(payload))
                except Exception as exc:
                    self.refuse(bl, d, f"large message cannot be stored: {exc}")
                    return
                large_size = 0
                copies = None
                if addressing.diverts.active:
                    routes = addressing.route(address, ANYCAST if anycast else MULTICAST, payload, direct=direct)
                    targets = [q for q, _p in routes]
                    if any(p is not payload for _q, p in routes):
                        copies = [p for _q, p in routes]
            elif copies is not None and not all(is_reference(p) for p in copies):
                self.refuse(bl, d, "a divert with a transformer cannot copy a large message (it would be "
                                   "held in memory whole)")
                return
        page_all = False
        if self.limits.active:
            largest, what = self.admission.largest_message(bl, large=large_size > 0)
            if max(len(payload), large_size) > largest:
                self.refuse(bl, d, f"message larger than {largest} bytes ({what})")
                return
            verdict = self.limits.verdict(address, targets, max(len(payload), large_size))
            if verdict == REJECT:
                self.refuse(bl, d, f"Address is full: {address}")
                return
            if verdict == DISCARD:
                self.answer(bl, d)
                return
            if verdict == STORE_BLOCKED and not self.limits.blocked:
                log.info("address %s is full (BLOCK policy): producers get no more credit until it drains",
                         address)
            page_all = verdict == PAGED
        durable = msg.durable
        if durable and journal is not None:
            for q in targets:  # a loop, not any(<generator>): this runs once per durable message
                if info[q.name].durable:
                    refusal = storage.durable_refusal()
                    if refusal is not None:
                        storage.messages_refused_disk += 1
                        self.refuse(bl, d, f"durable message refused: {refusal}")
                        return
                    break
        if page_all or (storage.pager is not None and any(storage.must_page(q) for q in targets)):
            refusal = storage.paging_refusal()
            if refusal is not None:
                storage.messages_refused_disk += 1
                self.refuse(bl, d, f"Address is full: {address} and cannot page: {refusal}")
                return
        rid = None
        mirror = self.mirror
        sent_expiry = msg.expires_at  # before any queue's expiry-delay is put on msg
        for i, q in enumerate(targets):
            body = payload if copies is None else copies[i]
            if body is not payload:  # a divert's copy: its header may differ (a transformer)
                m = QueuedMessage.from_bytes(body, now)
                expires = m.expires_at
            else:
                m = msg if i == 0 else QueuedMessage(payload, priority=msg.priority, expires_at=sent_expiry,
                                                     delivery_count=msg.delivery_count, enqueued_at=now)
                expires = sent_expiry
            qi = info[q.name]
            if expires is None and qi.expiry_delay > 0:
                m.expires_at = now + qi.expiry_delay  # Artemis' expiry-delay: only for messages without one
            if (m.durable if body is not payload else durable) and journal is not None and qi.durable:
                try:
                    rid = m.record_id = journal.append_message(q.name, body, delivery_count=m.delivery_count)
                except ValueError as exc:  # beyond the journal's record limits: refuse, keep the link
                    self.refuse(bl, d, str(exc))
                    return
                m.durable = True
            else:
                m.durable = False
            if page_all or storage.must_page(q):
                storage.page(q, m, address if body is payload else qi.address)
            else:
                q.enqueue(m)
                self.dirty.add(q)
            if mirror is not None:
                # its event is journaled after the message: settling after it settles after both
                event_rid = mirror.routed(q, m, qi.address)
                if event_rid is not None:
                    rid = event_rid
        if net_key is not None:
            duplicates.remember(net_key)
        rec = self.recorder
        if rec is not None:
            self._record(rec, "store", payload, address=address, size=len(payload), queues=len(targets))
        if rid is not None and not raw.delivery_settled(d):
            storage.hold(bl, d, rid)  # accepted once on disk (Broker.durable_up_to)
            return
        # Non-durable, or pre-settled by the sender: nothing to wait for. A multicast address without
        # subscribers drops the message and still accepts it, as Artemis does.
        self.answer(bl, d)

    def accept_durable(self, held: list) -> None:
        """Settle ``accepted`` the deliveries whose records are now on disk (``held``: ``[link, delivery,
        link, delivery, ...]``, as :meth:`broker.storage.Storage.take_durable` hands them back)."""
        # Once per durable message: the credit each message earns back is summed per link and given in one
        # pn_link_flow per link and sync (the same credit as one call per message, as give_credit would
        # give it), unless address limits are on, where give_credit decides per message. Runs of one link
        # (the usual case: one producer) are counted without a dict update per message.
        accepted = raw.ACCEPTED
        update, settle = raw.delivery_update, raw.delivery_settle
        per_link: dict = {}
        run, n = None, 0
        pairs = iter(held)
        for bl, d in zip(pairs, pairs):
            if bl.closed:
                continue
            update(d, accepted)
            settle(d)
            if bl is run:
                n += 1
            else:
                if run is not None:
                    per_link[run] = per_link.get(run, 0) + n
                run, n = bl, 1
        if run is not None:
            per_link[run] = per_link.get(run, 0) + n
        limited = self.limits.active
        wake = set()
        for bl, n in per_link.items():
            if bl.pulled:
                pass  # its owner gives its credit (give_credit)
            elif limited:
                for _ in range(n):
                    self.give_credit(bl)
            else:
                raw.link_flow(bl.ptr, n)
            wake.add(bl.engine)
        for engine in wake:
            engine.wake()

    # -- out of queues ----------------------------------------------------------------------------------
    def release_blocked(self) -> None:
        """Credit owed to producers of an address that has room again (BLOCK policy)."""
        if self.limits.blocked:
            for bl, owed in self.limits.unblocked():
                if not bl.closed:
                    raw.link_flow(bl.ptr, owed)
                    self.wake.add(bl.engine)

    def dispatch(self) -> None:
        """Hand out what the dirty queues have for consumers with credit."""
        dirty, self.dirty = self.dirty, set()
        now = self.clock()
        queues = self.addressing.queues
        info = self.addressing.queue_info
        consumers = self.consumers
        wake = self.wake
        send = raw.send_unique_tagged
        rec = self.recorder
        journal = self.storage.journal
        for q in dirty:
            if q.name not in queues:
                continue  # deleted in this batch
            for cid, token, msg in q.next_deliveries(now):
                bl = consumers[cid]
                out = msg.outgoing() if bl.transform is None else bl.transform(msg)
                if bl.streaming is not None or bl.backlog:  # behind a large message being sent on the link
                    if bl.backlog is None:
                        bl.backlog = []
                    bl.backlog.append((q, token, msg, out))
                    continue
                if out[-8:] == LARGE_MAGIC and is_reference(out):
                    self.large.start(bl, q, token, msg, out)
                    continue
                d = send(bl.ptr, bl.seq, out, len(bl.unsettled))
                bl.seq += 1
                # what sent() does, inline: this loop runs per message
                if rec is not None:
                    self._record(rec, "deliver", msg.payload, address=info[q.name].address, link=bl.name)
                if bl.presettled or (bl.demand is not None and bl.demand.async_send
                                     and not read_header(msg.payload).durable):
                    # a network bridge without alwaysSyncSend: a non-persistent message is not confirmed
                    raw.delivery_settle(d)
                    q.settle(token, ACCEPTED)
                    if msg.record_id is not None and journal is not None:
                        journal.append_ack(msg.record_id)
                else:
                    bl.unsettled[d] = token
                wake.add(bl.engine)
            for cid, _n in q.take_drained().items():
                bl = consumers.get(cid)
                if bl is not None and not bl.closed:
                    if bl.streaming is not None or bl.backlog:
                        bl.drain_pending = True  # answered once what the queue handed out is sent
                        continue
                    raw.link_drained(bl.ptr)
                    wake.add(bl.engine)

    def sent(self, bl: BrokerLink, q: Queue, token, msg: QueuedMessage, d) -> None:
        """Delivery ``d`` of ``msg`` (handed out by ``q`` as ``token``) is sent in full on ``bl`` (a large
        message, or one that waited behind it; :meth:`dispatch` does the same inline)."""
        rec = self.recorder
        if rec is not None:
            self._record(rec, "deliver", msg.payload, address=self.addressing.queue_info[q.name].address,
                         link=bl.name)
        if bl.presettled or (bl.demand is not None and bl.demand.async_send
                             and not read_header(msg.payload).durable):
            # a network bridge without alwaysSyncSend: a non-persistent message is not confirmed
            bl.unsettled.pop(d, None)
            raw.delivery_settle(d)
            q.settle(token, ACCEPTED)
            journal = self.storage.journal
            if msg.record_id is not None and journal is not None:
                journal.append_ack(msg.record_id)
        else:
            bl.unsettled[d] = token

    def output_drained(self, engine) -> None:
        """wire: the engine's output fell low again (a large message being sent waits for that)."""
        self.large.output_drained(engine)
        self.wake_engines()

    def wake_engines(self) -> None:
        if self.wake:
            wake, self.wake = self.wake, set()
            for engine in wake:
                engine.wake()

    # -- hooks: flow records and the $management link ----------------------------------------------------
    @staticmethod
    def _message_id(payload: bytes):
        try:
            return codec.properties_fields(payload, 1)[0]
        except Exception:  # a body we cannot walk has no id worth recording
            return None

    def _record(self, rec, event: str, payload: bytes, **fields) -> None:
        mid = self._message_id(payload)
        if mid is None:
            return
        try:
            if rec.wants(mid):
                from wire.flowrecords import message_id_str  # only reached with a recorder configured

                rec.record(event, mid=message_id_str(mid), **fields)
        except Exception:  # recording is best effort: it must never stop a delivery
            log.exception("flow recorder failed on %s", event)

    def _management_request(self, bl: BrokerLink, d, payload: bytes) -> None:
        """Hand a request to the management agent; deliver its reply to the reply's ``to``."""
        try:
            reply = self.management.handle(payload)
        except Exception as exc:  # a bad request or an agent bug: reject this one, keep the broker
            log.exception("management request failed")
            raw.set_rejected(d, "amqp:internal-error", f"management: {exc}"[:200])
            self.answer(bl, d, accepted=False)
            return
        if reply:
            try:
                to = codec.message_to(reply)
            except Exception:
                to = None
            queues = self.addressing.queues
            q = queues.get(to) if to else None
            if q is None and to:
                name = next((n for n, i in self.addressing.queue_info.items() if i.address == to), None)
                q = queues.get(name) if name else None
            if q is None:
                log.warning("management reply to %r dropped: no such queue", to)
            else:
                reply_msg = QueuedMessage.from_bytes(bytes(reply), self.clock())
                reply_msg.durable = False
                q.enqueue(reply_msg)
                self.dirty.add(q)
        self.answer(bl, d)


def _first_bytes(engine, d) -> bytes | None:
    """The first bytes wire holds of delivery ``d`` still arriving (its header, for the durable flag)."""
    return engine.assembler.first_bytes(d)
