"""Broker mirror (Artemis ``<amqp-connection><mirror/>``): a source broker captures what happens to its
queues and sends it to a replica tdbroker, so that a second site holds the same messages.

Artemis' AMQP broker connections documentation ("Mirror") and ``AMQPMirrorControllerSource.java`` /
``AMQPMirrorControllerTarget.java`` define the behaviour followed here; docs/mirror.md is the user's guide
and docs/mirror-protocol.md the wire protocol.

**Source.** Each ``<mirror>`` has a local store-and-forward queue, ``$ACTIVEMQ_ARTEMIS_MIRROR_<connection>``,
durable when ``durable`` is true and the broker persists (events then survive a restart of the source).
Events go into it as they happen -- whether the connection is up, down or stopped -- and the broker
connection's mirror link sends them from it like any queue's messages, so credit, settlement and
redelivery after a reconnect are the queue's. Events (:mod:`broker.mirrorcodec`):

* a message routed to a queue: the message itself, one event per queue copy, with its identity (the
  origin broker and an id) in delivery annotations;
* its acknowledgement (``postAck``; also expiry, dead-lettering and purge, with the reason);
* a queue created or deleted (``createQueue``/``deleteQueue``), an address appearing with its first queue
  or going with its last (``addAddress``/``deleteAddress``).

Only what happens after start-up is captured: messages already stored are not sent (no backfill).
Temporary queues, the store-and-forward queues and addresses the ``address-filter`` leaves out are never
mirrored. An event that came from the broker at the other end of a mirror (dual mirror, or a chain) is not
sent back there (the remote broker id is learned on connecting and kept beside the journal).

**Replica.** :class:`broker.mirrortarget.MirrorTarget` applies the events (see there).

A message's identity: ``(origin, id)``; ``origin`` is "" for a message first stored here, else the broker
id of the broker it came from; ``id`` is ``r<journal record>`` for a durable copy (stable across
restarts) or ``v<boot>.<n>``. Each broker that mirrors keeps an index from identity to the queued
message, so that an acknowledgement coming back (dual mirror) finds it.
"""

from __future__ import annotations

import collections
import logging
import os
import uuid
from typing import TYPE_CHECKING

import proton

from broker.addressing import ANYCAST
from broker.journal_io import MAX_RECORD_BYTES
from broker.largemessage import MAGIC as LARGE_MAGIC
from broker.mirrorcodec import (ACK_REASONS, BROKER_ID, MIRROR_CAPABILITY, EV_ADD_ADDRESS, EV_CREATE_QUEUE, EV_DELETE_ADDRESS, EV_DELETE_QUEUE,
                                EV_POST_ACK, control_event, event_origin, identity_of, message_event)
from broker.mirrortarget import MirrorTarget
from broker.queue import QueuedMessage
from wire import raw
from wire.terminus import capabilities

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger("broker.mirror")

SNF_PREFIX = "$ACTIVEMQ_ARTEMIS_MIRROR_"
#: Addresses never mirrored: management requests and replies are about the broker they reach.
NEVER_MIRRORED = ("$management", "activemq.management", "$td.")
#: Beside the journal: the broker id at the other end of each mirror (``mirror-<name>.remote-id``).
REMOTE_ID_SUFFIX = ".remote-id"
# A large message is mirrored whole, inside one event journaled in the mirror's store-and-forward queue: one
# larger than a journal record (less room for the event's own fields) is not mirrored, with an error logged.
MAX_MIRRORED_LARGE = MAX_RECORD_BYTES - 64 * 1024


def address_filter(text: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Artemis' ``address-filter``: a comma-separated list of address prefixes to mirror, ``!prefix`` to
    leave out; an exclude wins, no include means every address. Returns (includes, excludes); raises
    ValueError for an empty item."""
    if text is None:
        return (), ()
    includes, excludes = [], []
    for item in text.split(","):
        item = item.strip()
        if not item or item == "!":
            raise ValueError(f"address-filter {text!r} has an empty item")
        (excludes if item.startswith("!") else includes).append(item.lstrip("!"))
    return tuple(includes), tuple(excludes)


def filter_allows(flt: tuple, address: str) -> bool:
    includes, excludes = flt
    if not includes and not excludes:
        return True
    if any(address.startswith(p) for p in excludes):
        return False
    return not includes or any(address.startswith(p) for p in includes)


class MirrorSource:
    """One ``<mirror>``: its store-and-forward queue, settings and counters."""

    def __init__(self, part: MirrorPart, conn, attrs: dict):
        self.part = part
        self.conn = conn
        self.name = conn.name
        # Artemis: with source-mirror-address the events wait in a durable anycast queue of that name, which
        # is also the address the link targets. Without it Artemis uses a temporary queue; tdbroker uses
        # $ACTIVEMQ_ARTEMIS_MIRROR_<name>, durable as ``durable`` says (default true), so that a source
        # restart loses no captured event by default (docs/mirror.md).
        self.snf = attrs.get("source-mirror-address") or SNF_PREFIX + conn.name
        self.target_address = self.snf
        broker = part.broker
        self.durable = bool(attrs.get("durable", True)) and broker.cfg.persistence_enabled
        self.acks = bool(attrs.get("message-acknowledgements", True))
        self.queue_creation = bool(attrs.get("queue-creation", True))
        self.queue_removal = bool(attrs.get("queue-removal", True))
        self.filter = address_filter(attrs.get("address-filter"))
        self.everything = self.filter == ((), ())
        self.remote_id = part.load_remote_id(self.name)
        # Events whose journal record is not on disk yet, in capture order ((record id or None, event)): the
        # link may not hand one to the replica before the source could lose it in a crash (the replica would
        # hold what the source lost, and a restarted source reuses the lost record ids).
        self.waiting: collections.deque = collections.deque()
        self.message_events = self.ack_events = self.queue_events = 0
        self.sent = 0
        self.last_error = ""

    def wants(self, address: str, event_origin: str) -> bool:
        """An event about ``address`` that originated at ``event_origin`` ("" here) goes to this mirror."""
        if event_origin and event_origin == self.remote_id:
            return False  # never back to the broker it came from
        if address.startswith(NEVER_MIRRORED):
            return False
        return self.everything or filter_allows(self.filter, address)

    def queue(self):
        return self.part.broker.addressing.queues.get(self.snf)


class MirrorPart:
    """The broker's mirrors: capture (one :class:`MirrorSource` per ``<mirror>``) and the replica side
    (:class:`broker.mirrortarget.MirrorTarget`). See the module docstring."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.broker_id = broker.network.broker_id
        self.sources: dict[str, MirrorSource] = {}
        self.snf_names: set[str] = set()
        self._boot = uuid.uuid4().hex[:8]
        self._volatile = 0
        self.index: dict[tuple, tuple] = {}   # (origin, id) -> (queue name, QueuedMessage)
        self.applying_origin = ""             # the broker whose event is being applied now ("" otherwise)
        self.capturing = False                # from the end of the journal's recovery (no events for start-up)
        for conn in broker.cfg.broker_connections:
            for el in conn.elements:
                if el.kind == "mirror":
                    src = MirrorSource(self, conn, el.attrs)
                    self.sources[conn.name] = src
                    self.snf_names.add(src.snf)
        self.target = MirrorTarget(self)
        addressing = broker.addressing
        for src in self.sources.values():
            if src.snf not in addressing.queues:
                addressing.add_queue(src.snf, src.snf, routing_type=ANYCAST, durable=src.durable,
                                     configured=True, notify=False)
        if self.active:
            self.watch_all()
        broker.delivery.mirror = self if self.sources else None

    @property
    def active(self) -> bool:
        """Something captures events: a mirror source, or this broker is a replica (its index matters)."""
        return bool(self.sources) or self.target.source_id is not None

    # -- identity ------------------------------------------------------------------------------------------
    def identity(self, msg: QueuedMessage) -> tuple | None:
        """``(origin, id)`` of a queued message: set when it was routed or applied here; for one recovered
        from the journal, read from its delivery annotations (a mirrored copy) or made from its record."""
        ident = msg.mirror
        if ident is None:
            # a copy a mirror stored here carries its identity; only a replica has such copies (a client's
            # own delivery annotations on a message first stored here must not pass for one)
            source = self.target.source_id
            ident = identity_of(msg.payload, source, self.broker_id) if source is not None else None
            if ident is None and msg.record_id is not None:
                ident = ("", f"r{msg.record_id}")
            msg.mirror = ident
        return ident

    def _new_identity(self, msg: QueuedMessage) -> tuple:
        if msg.record_id is not None:
            ident = ("", f"r{msg.record_id}")
        else:
            self._volatile += 1
            ident = ("", f"v{self._boot}.{self._volatile}")
        msg.mirror = ident
        return ident

    # -- capture -------------------------------------------------------------------------------------------
    def watch_all(self) -> None:
        """Hear of every queue made and every message that leaves one (a broker with no mirror, source or
        replica, pays nothing per message)."""
        addressing = self.broker.addressing
        if addressing.created is not None:
            return
        addressing.created = self.queue_created
        for name, q in addressing.queues.items():
            self._watch(name, q)

    def _watch(self, name: str, q) -> None:
        info = self.broker.addressing.queue_info.get(name)
        if info is None or info.temporary or name in self.snf_names:
            return
        q.removed = lambda msg, reason, n=name: self.removed(n, msg, reason)

    def routed(self, q, msg: QueuedMessage, address: str) -> int | None:
        """A message copy went into queue ``q`` (of ``address``): a message event for every mirror that
        wants it. Returns the journal record of the last event written (the producer's settlement waits for
        it), or None."""
        name = q.name
        if name in self.snf_names:
            return None
        info = self.broker.addressing.queue_info.get(name)
        if info is None or info.temporary:
            return None
        ident = msg.mirror or self._new_identity(msg)
        self.index[ident] = (name, msg)
        last = None
        body = msg.payload
        for src in self.sources.values():
            if not src.wants(address, ident[0]):
                continue
            if body[-8:] == LARGE_MAGIC:
                # a large message goes to the mirror whole: events are not streamed (docs/broker-configuration.md,
                # "Large messages")
                body = self.broker.storage.whole_message(body)
                if body is None or len(body) > MAX_MIRRORED_LARGE:
                    log.error("mirror: large message %s on %s not mirrored (%s)", ident[1], name,
                              "its file cannot be read" if body is None else
                              f"larger than the {MAX_MIRRORED_LARGE}-byte journal record an event can be")
                    return last
            payload = message_event(body, ident[1], name, address, ident[0])
            rid = self._enqueue(src, payload, durable=msg.durable)
            src.message_events += 1
            if rid is not None:
                last = rid
        return last

    def removed(self, qname: str, msg: QueuedMessage, reason: str) -> None:
        """A message left queue ``qname`` (acknowledged, expired, dead-lettered, purged)."""
        ident = self.identity(msg)
        if ident is None:
            return
        self.index.pop(ident, None)
        info = self.broker.addressing.queue_info.get(qname)
        if info is None or not self.capturing:
            return
        origin = self.applying_origin
        for src in self.sources.values():
            if not src.acks or not src.wants(info.address, origin):
                continue
            event = control_event(EV_POST_ACK, ident[1], address=info.address, queue=qname,
                                  message_origin=ident[0], event_origin=origin, reason=ACK_REASONS.get(reason))
            self._enqueue(src, event, durable=True)
            src.ack_events += 1

    def queue_created(self, name: str) -> None:
        """A queue was created (addressing's listener): createQueue (and addAddress for a new address)."""
        addressing = self.broker.addressing
        q = addressing.queues.get(name)
        info = addressing.queue_info.get(name)
        if q is None or info is None or info.temporary or name in self.snf_names:
            return
        self._watch(name, q)
        if not self.capturing:
            return  # queues of the configuration, the bindings file or the journal: there before us
        first = sum(1 for i in addressing.queue_info.values() if i.address == info.address) == 1
        origin = self.applying_origin
        for src in self.sources.values():
            if not src.queue_creation or not src.wants(info.address, origin):
                continue
            common = {"address": info.address, "queue": name, "event_origin": origin}
            if first:
                self._enqueue(src, control_event(EV_ADD_ADDRESS, {"address": info.address,
                                                                   "routingTypes": [info.routing_type]},
                                                 **common), durable=True)
            self._enqueue(src, control_event(EV_CREATE_QUEUE, {
                "name": name, "address": info.address, "routingType": info.routing_type,
                "durable": bool(info.durable)}, **common), durable=True)
            src.queue_events += 1 + first

    def queue_removed(self, name: str, info) -> None:
        """A queue was deleted (Broker.remove_queue): deleteQueue (and deleteAddress with its last queue)."""
        for ident in [k for k, (qname, _m) in self.index.items() if qname == name]:
            del self.index[ident]
        if info.temporary or name in self.snf_names:
            return
        addressing = self.broker.addressing
        last = not any(i.address == info.address for i in addressing.queue_info.values())
        origin = self.applying_origin
        for src in self.sources.values():
            if not src.queue_removal or not src.wants(info.address, origin):
                continue
            common = {"address": info.address, "queue": name, "event_origin": origin}
            self._enqueue(src, control_event(EV_DELETE_QUEUE, name, **common), durable=True)
            if last and addressing.cfg.address(info.address) is None:
                self._enqueue(src, control_event(EV_DELETE_ADDRESS, {"address": info.address}, **common),
                              durable=True)
            src.queue_events += 1

    def _enqueue(self, src: MirrorSource, payload: bytes, *, durable: bool) -> int | None:
        broker = self.broker
        q = src.queue()
        if q is None:  # deleted by hand: made again, events must have somewhere to wait
            q = broker.addressing.add_queue(src.snf, src.snf, routing_type=ANYCAST, durable=src.durable,
                                            configured=True, notify=False)
        ev = QueuedMessage(payload, enqueued_at=broker.clock())
        rid = None
        journal = broker.storage.journal
        if durable and src.durable and journal is not None:
            rid = ev.record_id = journal.append_message(src.snf, payload)
            ev.durable = True
        if rid is not None or src.waiting:
            src.waiting.append((rid, ev))   # deliverable once on disk (durable_up_to), in order
        else:
            self._deliverable(src, q, ev)
        return rid

    def _deliverable(self, src: MirrorSource, q, ev: QueuedMessage) -> None:
        storage = self.broker.storage
        if storage.must_page(q):   # the store-and-forward queue's address pages like any (a long outage)
            storage.page(q, ev, src.snf)
        else:
            q.enqueue(ev)
            self.broker.delivery.dirty.add(q)

    def durable_up_to(self, record_id: int) -> None:
        """The journal has every record up to ``record_id`` on disk: the events waiting for it may go."""
        for src in self.sources.values():
            waiting = src.waiting
            if not waiting:
                continue
            q = src.queue()
            while waiting and (waiting[0][0] is None or waiting[0][0] <= record_id):
                _rid, ev = waiting.popleft()
                if q is not None:
                    self._deliverable(src, q, ev)

    # -- the source's link ---------------------------------------------------------------------------------
    def link_opened(self, name: str, remote_id: str | None) -> None:
        """The replica answered our mirror link's attach: remember its broker id (loop avoidance), and
        drop the events waiting that came from it."""
        src = self.sources.get(name)
        if src is None or not remote_id:
            return
        src.last_error = ""
        if remote_id != src.remote_id:
            src.remote_id = remote_id
            self._save_remote_id(name, remote_id)
        q = src.queue()
        if q is None:
            return
        gone = [m for m in q.ready() if event_origin(m.payload) == remote_id]
        for m in gone:
            q.take_ready(m)
        keep = [(rid, m) for rid, m in src.waiting if event_origin(m.payload) != remote_id]
        if len(keep) != len(src.waiting):
            gone += [m for _rid, m in src.waiting if event_origin(m.payload) == remote_id]
            src.waiting = collections.deque(keep)
        if gone:
            self.broker.storage.acknowledge(gone)
            log.info("mirror %s: %d events that came from %s are not sent back", name, len(gone), remote_id)

    def _by_snf(self, snf: str) -> MirrorSource | None:
        return next((s for s in self.sources.values() if s.snf == snf), None)

    def source_link_opened(self, bl) -> None:
        """The replica answered our mirror link (Broker.on_link_opened): it must carry amq.mirror back."""
        src = self._by_snf(bl.queue.name)
        if src is None:
            return
        lo = raw.link_object(bl.ptr)
        target = lo.remote_target
        if target is None or target.address is None:
            return  # a refusal: its detach follows with the reason (source_link_refused)
        if MIRROR_CAPABILITY not in capabilities(target.capabilities):
            why = f"the remote broker does not offer {MIRROR_CAPABILITY}: not a mirror replica"
            src.last_error = f"amqp:precondition-failed: {why}"
            log.warning("mirror %s: %s", src.name, why)
            self.broker.detach_local(bl, "amqp:precondition-failed", why)
            return
        props = lo.remote_properties or {}
        remote_id = next((str(v) for k, v in props.items() if str(k) == BROKER_ID), "")
        self.link_opened(src.name, remote_id)
        log.info("mirror %s: replica %s answered", src.name, remote_id or "(no id)")

    def source_link_refused(self, snf: str, condition: str, description: str) -> None:
        src = self._by_snf(snf)
        if src is not None:
            self.link_refused(src.name, condition, description)

    def attach_link(self, control, engine, session) -> None:
        """Our broker connection ``control`` is up: the mirror link from its store-and-forward queue."""
        src = self.sources.get(control.conn.name)
        if src is None:
            return
        q = src.queue()
        if q is None:
            return
        tx = session.sender(f"{src.name}.mirror")
        tx.source.address = src.snf
        tx.target.address = src.target_address
        caps = tx.target.capabilities
        caps.put_array(False, proton.Data.SYMBOL)
        caps.enter()
        caps.put_symbol(MIRROR_CAPABILITY)
        caps.exit()
        tx.properties = {proton.symbol(BROKER_ID): self.broker_id}
        tx.open()
        self.broker.attach_local(engine, raw.pointer(tx), q, incoming=False, name=tx.name)

    def link_refused(self, name: str, condition: str, description: str) -> None:
        src = self.sources.get(name)
        if src is not None:
            src.last_error = f"{condition}: {description}"
            log.warning("mirror %s: the replica refused the mirror link: %s %s", name, condition, description)

    def event_sent(self, name: str) -> None:
        src = self.sources.get(name)
        if src is not None:
            src.sent += 1

    # -- the remote id file --------------------------------------------------------------------------------
    def _id_path(self, name: str) -> str | None:
        cfg = self.broker.cfg
        if not cfg.persistence_enabled or not cfg.journal_directory:
            return None
        return os.path.join(cfg.journal_directory, f"mirror-{name}{REMOTE_ID_SUFFIX}")

    def load_remote_id(self, name: str) -> str | None:
        path = self._id_path(name)
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except (OSError, TypeError):
            return None

    def _save_remote_id(self, name: str, remote_id: str) -> None:
        path = self._id_path(name)
        if path is None:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write(remote_id + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("mirror %s: cannot keep the replica's id in %s: %s", name, path, exc)

    # -- recovery and management ---------------------------------------------------------------------------
    def recovered(self) -> None:
        """After the journal's recovery: the index of the messages held (an acknowledgement coming back
        from a replica, or from this replica's source, finds them); events are captured from now on."""
        self.capturing = bool(self.sources)
        if not self.active:
            return
        for name, q in self.broker.addressing.queues.items():
            if name in self.snf_names:
                continue
            for msg in q.ready():
                ident = self.identity(msg)
                if ident is not None:
                    self.index[ident] = (name, msg)

    def mgmt_sources(self) -> list[dict]:
        broker = self.broker
        now = broker.clock()
        rows = []
        for src in self.sources.values():
            ctl = self.broker.bridges.get(src.name)
            q = src.queue()
            ready = q.ready() if q is not None else []
            oldest = min((m.enqueued_at for m in ready), default=None)
            rows.append({
                "name": src.name, "remote": src.conn.uri, "state": ctl.status if ctl is not None else "stopped",
                "snfQueue": src.snf, "target": src.target_address, "durable": src.durable,
                "queuedEvents": (q.message_count if q is not None else 0) + broker.storage.paged_stats(src.snf)[0]
                + len(src.waiting),
                "oldestEventAgeMs": max(0, now - oldest) if oldest else 0,
                "eventsSent": src.sent + (q.messages_acknowledged if q is not None else 0), "messageEvents": src.message_events, "ackEvents": src.ack_events,
                "queueEvents": src.queue_events, "remoteBrokerId": src.remote_id or "", "lastError": src.last_error})
        return rows

    def mgmt_targets(self) -> list[dict]:
        return self.target.mgmt_rows()


__all__ = ["MirrorPart", "MirrorSource", "SNF_PREFIX", "address_filter", "filter_allows"]
