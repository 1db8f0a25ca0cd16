"""The replica side of a broker mirror (Artemis' ``AMQPMirrorControllerTarget.java``): a source broker
attaches a link with the ``amq.mirror`` capability; this broker answers with it and applies each event the
link brings (broker/mirrorcodec.py; docs/mirror-protocol.md). Artemis carries the capability in the attach's
desired/offered capabilities; the proton API tdbroker uses has no link-level capabilities, so the source puts
it in its target terminus's capabilities and the replica's answering target carries it back.

**Who may mirror here.** The link's properties name the source broker (``x-opt-amq-bkr-id``). A link from
this broker itself is refused (``amqp:not-allowed``: a mirror to itself), and so is a second source while
another one is registered (``amqp:precondition-failed``). The first source's id is kept beside the journal
(``mirror-source-id``); deleting that file lets another broker become the source (the way back after a
disaster, docs/mirror.md).

**Idempotence.** Events are applied in order; each is settled only when what it changed is on disk (in
order: a later event waits for an earlier one's record), so after a reconnect or a crash the source resends
only events whose effect may be missing, and applying one twice changes nothing: a message event whose
identity is already held is skipped, an acknowledgement of a message that is gone is skipped, a queue that
exists is not created again. A message event that comes back to the broker it started from (a dual mirror)
is skipped too.

**What a mirrored message looks like here.** It is stored as it came, delivery annotations included (they
carry its identity, which is how a restarted replica finds its messages again): a consumer of the replica
after a failover sees them; AMQP clients ignore delivery annotations they do not know.

An acknowledgement cannot remove a message a consumer of the replica holds unsettled at that moment (Artemis
has the same caveat: do not consume on both sides); it is counted in ``acksUnmatched``.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import proton

from broker.addressing import ANYCAST, MULTICAST
from broker.mirrorcodec import (BROKER_ID, DST, EV_ADD_ADDRESS, EV_CREATE_QUEUE, EV_DELETE_ADDRESS,
                                EV_DELETE_QUEUE, EV_ORIGIN, EV_POST_ACK, MR_ID, TRG_Q,
                                read_event)
from broker.queue import QueuedMessage
from wire import raw
from wire.amqptypes import CodecError

if TYPE_CHECKING:
    from broker.mirror import MirrorPart

log = logging.getLogger("broker.mirror")

SOURCE_ID_FILE = "mirror-source-id"
MIRROR_LINK = "mirror"  # BrokerLink.mode of a mirror link


class _Stats:
    __slots__ = ("source_id", "source_name", "address", "links", "messages", "acks", "queue_events",
                 "duplicates", "unmatched", "loops", "last_event")

    def __init__(self, source_id: str):
        self.source_id = source_id
        self.source_name = ""
        self.address = ""
        self.links: list = []
        self.messages = self.acks = self.queue_events = self.duplicates = self.unmatched = self.loops = 0
        self.last_event = 0


class _MirrorInbound:
    """Wire's owner of a mirror link at the replica: each complete event is applied; the other events
    (partial frames, flow) go to the broker's data path."""

    def __init__(self, target: MirrorTarget, source_id: str, delivery):
        self.target = target
        self.source_id = source_id
        self.delivery = delivery

    def on_message(self, engine, bl, d, payload):
        if payload is None:
            self.delivery.on_message(engine, bl, d, payload)
            return
        self.target.apply(bl, d, payload, self.source_id)

    def __getattr__(self, name):  # on_partial, on_delivery_update, on_link_flow, on_oversized
        return getattr(self.delivery, name)


class MirrorTarget:
    """This broker as a replica: who mirrors here and what their events did (see the module docstring)."""

    def __init__(self, part: MirrorPart):
        self.part = part
        self.broker = part.broker
        self.source_id: str | None = self._load()
        self.stats: dict[str, _Stats] = {}

    # -- the source id file ----------------------------------------------------------------------------------
    def _path(self) -> str | None:
        cfg = self.broker.cfg
        if not cfg.persistence_enabled or not cfg.journal_directory:
            return None
        return os.path.join(cfg.journal_directory, SOURCE_ID_FILE)

    def _load(self) -> str | None:
        path = self._path()
        if path is None:
            return None
        try:
            with open(path, encoding="utf-8") as f:
                return f.read().strip() or None
        except OSError:
            return None

    def _register(self, source_id: str) -> None:
        self.source_id = source_id
        path = self._path()
        if path is None:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                f.write(source_id + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("mirror: cannot keep the source's id in %s: %s", path, exc)

    # -- the link --------------------------------------------------------------------------------------------
    def attach(self, engine, link) -> None:
        """A link whose attach desires ``amq.mirror``: accept it as a mirror from its source broker, or
        refuse it (see the module docstring)."""
        lo = raw.link_object(link)
        if lo.is_sender:
            engine.refuse_link(link, "amqp:not-allowed", "a mirror link sends events to the replica")
            return
        props = lo.remote_properties or {}
        source = next((str(v) for k, v in props.items() if str(k) == BROKER_ID), "")
        own = self.part.broker_id
        if not source:
            engine.refuse_link(link, "amqp:precondition-failed",
                               f"a mirror link must name its broker in the link property {BROKER_ID}")
            return
        if source == own:
            engine.refuse_link(link, "amqp:not-allowed", f"broker {own} refuses to mirror to itself")
            return
        if self.source_id is not None and self.source_id != source:
            engine.refuse_link(link, "amqp:precondition-failed",
                               f"this broker is already the mirror replica of broker {self.source_id}; it "
                               f"refuses a second mirror source ({source}); remove {SOURCE_ID_FILE} from its "
                               "journal directory to change sources")
            log.warning("mirror: refused a second mirror source %s (the source is %s)", source, self.source_id)
            return
        if self.source_id is None:
            self._register(source)
            self.part.watch_all()
            log.info("mirror: this broker is now the replica of broker %s", source)
        lo.properties = {proton.symbol(BROKER_ID): own}
        engine.open_link_like_remote(link)  # its target, amq.mirror capability included, is the answer
        broker = self.broker
        bl = broker.delivery.receiving(engine, link, lo.name, MIRROR_LINK, None)
        bl.owner = _MirrorInbound(self, source, broker.delivery)
        st = self.stats.get(source) or self.stats.setdefault(source, _Stats(source))
        st.address = lo.remote_target.address or ""
        st.source_name = str(broker.network.remote_properties(engine).get("td.broker-name") or "")
        st.links = [x for x in st.links if _live(x)] + [bl]
        log.info("mirror: link %s from broker %s attached", lo.name, st.source_name or source)

    # -- applying events -------------------------------------------------------------------------------------
    def apply(self, bl, d, payload: bytes, source: str) -> None:
        st = self.stats.get(source) or self.stats.setdefault(source, _Stats(source))
        st.last_event = self.broker.clock()
        try:
            kind, ann = read_event(payload)
        except CodecError as exc:
            log.warning("mirror: an event from %s cannot be read (%s); rejected", source, exc)
            raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
            self._answer(bl, d)
            return
        part = self.part
        own = part.broker_id
        rid = None
        try:
            if kind is None:
                origin = str(ann.get(BROKER_ID) or source)
                part.applying_origin = origin
                rid = self._message(payload, ann, origin, st)
            else:
                origin = str(ann.get(EV_ORIGIN) or (ann.get(BROKER_ID) if kind != EV_POST_ACK else "") or source)
                if origin == own:
                    st.loops += 1  # our own event come back round a dual mirror
                else:
                    part.applying_origin = origin
                    rid = self._control(kind, ann, source, st)
        except (CodecError, ValueError, KeyError, TypeError) as exc:
            log.warning("mirror: an event from %s could not be applied (%s); rejected", source, exc)
            raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
            self._answer(bl, d)
            return
        finally:
            part.applying_origin = ""
        self._settle(bl, d, rid)

    def _message(self, payload: bytes, da: dict, origin: str, st: _Stats) -> int | None:
        part = self.part
        if origin == part.broker_id:
            st.loops += 1
            return None
        key = (origin, str(da[MR_ID]))
        if key in part.index:
            st.duplicates += 1
            return None
        broker = self.broker
        addressing, storage = broker.addressing, broker.storage
        journal = storage.journal
        queues = da.get(TRG_Q) or []
        if isinstance(queues, str):
            queues = [queues]
        address = da.get(DST)
        now = broker.clock()
        last = None
        for qname in queues:
            qname = str(qname)
            q = addressing.queues.get(qname)
            if q is None:
                where = str(address or qname)
                q = addressing.add_queue(qname, where, routing_type=addressing.routing_type_for(where))
            info = addressing.queue_info[qname]
            msg = QueuedMessage.from_bytes(payload, now)
            if msg.durable and journal is not None and info.durable:
                last = msg.record_id = journal.append_message(qname, payload, delivery_count=msg.delivery_count)
            else:
                msg.durable = False
            msg.mirror = key
            if storage.must_page(q):
                storage.page(q, msg, info.address)
            else:
                q.enqueue(msg)
                broker.delivery.dirty.add(q)
            part.index[key] = (qname, msg)
            if part.sources:
                onward = part.routed(q, msg, info.address)  # a chain: the next replica gets it too
                if onward is not None:
                    last = onward
        st.messages += 1
        return last

    def _control(self, kind: str, ann: dict, source: str, st: _Stats) -> int | None:
        part, broker = self.part, self.broker
        addressing = broker.addressing
        body = ann.get("body")
        journal = broker.storage.journal
        before = journal.next_record_id() if journal is not None else 0
        if kind == EV_POST_ACK:
            origin = str(ann.get(BROKER_ID) or source)
            key = ("" if origin == part.broker_id else origin, str(body))
            entry = part.index.get(key)
            q = addressing.queues.get(entry[0]) if entry is not None else None
            if q is not None and q.take_ready(entry[1]):
                msg = entry[1]
                part.removed(entry[0], msg, "normal")   # the index forgets it; onward mirrors hear of it
                broker.storage.acknowledge([msg])
                st.acks += 1
            else:
                st.unmatched += 1   # gone already (a resend), or held by a consumer here
        elif kind == EV_CREATE_QUEUE:
            spec = body if isinstance(body, dict) else {}
            name = str(spec.get("name") or ann.get("x-opt-amq-mr-qu") or "")
            if name and name not in addressing.queues:
                address = str(spec.get("address") or name)
                routing = MULTICAST if str(spec.get("routingType", "")).lower() == MULTICAST else ANYCAST
                addressing.add_queue(name, address, routing_type=routing, durable=bool(spec.get("durable", True)))
            st.queue_events += 1
        elif kind == EV_DELETE_QUEUE:
            name = str(body)
            if name in addressing.queues and name not in part.snf_names:
                broker.remove_queue(name, f"deleted by its mirror source {st.source_name or source}")
                broker.on_batch_end()
            st.queue_events += 1
        elif kind == EV_ADD_ADDRESS:
            spec = body if isinstance(body, dict) else {}
            address = str(spec.get("address") or "")
            if address:
                kinds = {str(t).lower() for t in spec.get("routingTypes") or []} & {ANYCAST, MULTICAST}
                addressing.addresses.setdefault(address, set()).update(kinds)
            st.queue_events += 1
        elif kind == EV_DELETE_ADDRESS:
            spec = body if isinstance(body, dict) else {}
            address = str(spec.get("address") or "")
            if address and not addressing.queues_of(address) and addressing.cfg.address(address) is None:
                addressing.addresses.pop(address, None)
            st.queue_events += 1
        if journal is not None and journal.next_record_id() > before:
            return journal.next_record_id() - 1
        return None

    # -- settlement ------------------------------------------------------------------------------------------
    def _settle(self, bl, d, rid: int | None) -> None:
        """Accepted once what the event changed is on disk, in order with the events before it."""
        storage = self.broker.storage
        journal = storage.journal
        if rid is None and journal is not None and (journal.pending or storage.holding):
            rid = journal.next_record_id() - 1
        if rid is not None:
            storage.hold(bl, d, rid)
            return
        raw.delivery_update(d, raw.ACCEPTED)
        self._answer(bl, d)

    def _answer(self, bl, d) -> None:
        raw.delivery_settle(d)
        raw.link_flow(bl.ptr, 1)
        bl.engine.wake()

    # -- management ------------------------------------------------------------------------------------------
    def mgmt_rows(self) -> list[dict]:
        now = self.broker.clock()
        rows = []
        for st in self.stats.values():
            rows.append({"sourceId": st.source_id, "sourceName": st.source_name, "address": st.address,
                         "connected": any(_live(bl) for bl in st.links), "messagesApplied": st.messages,
                         "acksApplied": st.acks, "queueEventsApplied": st.queue_events,
                         "duplicatesSkipped": st.duplicates, "acksUnmatched": st.unmatched,
                         "loopsSkipped": st.loops,
                         "lastEventAgeMs": max(0, now - st.last_event) if st.last_event else 0})
        if self.source_id is not None and self.source_id not in self.stats:
            rows.append({"sourceId": self.source_id, "sourceName": "", "address": "", "connected": False,
                         "messagesApplied": 0, "acksApplied": 0, "queueEventsApplied": 0, "duplicatesSkipped": 0,
                         "acksUnmatched": 0, "loopsSkipped": 0, "lastEventAgeMs": 0})
        return rows


def _live(bl) -> bool:
    app = bl.engine.app
    return app is not None and not bl.closed and app.links.get(bl.ptr) is bl
