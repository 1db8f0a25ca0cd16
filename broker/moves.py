"""Dead letters and expiry: where a message goes when it leaves its queue that way (Artemis'
``dead-letter-address`` and ``expiry-address``).

A message rejected by a consumer, or whose delivery-count reaches the address-settings
``max-delivery-attempts``, moves to the queue of the ``dead-letter-address``; one whose ttl /
absolute-expiry-time passes moves to the ``expiry-address`` (its expiry cleared there). The target queue is
created if it does not exist. A durable message's move is journaled as a new message record on the target
queue plus the acknowledgement of the old record. With no such address configured (or when it names the
queue the message is leaving) the message is dropped and only counted.

:class:`Mover` is the :class:`broker.addressing.QueueExits` of a broker's queues.
"""

from __future__ import annotations

import logging
from typing import Callable

import proton

from broker.addressing import AddressModel
from broker.largemessage import split_reference, stored_size
from broker.limits import AddressLimits
from broker.queue import Queue, QueuedMessage
from broker.storage import Storage

log = logging.getLogger("broker.moves")

# Annotations Artemis puts on a message it moves to a dead-letter or expiry address.
ORIG_ADDRESS = proton.symbol("x-opt-ORIG-ADDRESS")
ORIG_QUEUE = proton.symbol("x-opt-ORIG-QUEUE")
ORIG_MESSAGE_ID = proton.symbol("x-opt-ORIG-MESSAGE-ID")
ACTUAL_EXPIRY = proton.symbol("x-opt-ACTUAL-EXPIRY")


class Mover:
    """Moves dead-lettered and expired messages on (see the module docstring) and counts them.
    ``queue_changed(q)`` is told when a target queue got a message to hand out."""

    def __init__(self, addressing: AddressModel, storage: Storage, limits: AddressLimits,
                 clock: Callable[[], int], queue_changed: Callable[[Queue], None]):
        self.addressing = addressing
        self.storage = storage
        self.limits = limits
        self.clock = clock
        self.queue_changed = queue_changed
        self.dead_lettered = 0  # moved to a dead-letter address
        self.moved_expired = 0  # moved to an expiry address
        self.dropped = 0        # dead-lettered or expired with nowhere to go
        self.mirror = None      # broker.mirror.MirrorPart while a <mirror> captures events

    def move(self, msg: QueuedMessage, source: str, address: str | None, *, expired: bool) -> None:
        """A message left queue ``source`` dead-lettered or expired: move it to ``address``'s queue, or
        drop it when there is none (or it is the queue it left). The queue has already forgotten it.
        The old record is acknowledged and ``msg.record_id`` cleared, so that nobody journals an update
        for a message that has gone."""
        storage = self.storage
        journal = storage.journal
        info = self.addressing.queue_info
        target = self.addressing.target_queue(address) if address else None
        if target is not None and self.addressing.filtered and not self.addressing.admitted([target], msg.payload):
            target = None  # its <filter> does not select the message: nowhere to go
        if target is None or target.name == source:
            self.dropped += 1
            if msg.record_id is not None and journal is not None:
                journal.append_ack(msg.record_id)
                msg.record_id = None
            return
        payload = annotate_moved(msg.payload, address=info[source].address if source in info else source,
                                 queue=source, expired_at=self.clock() if expired else None)
        moved = QueuedMessage(payload, priority=msg.priority, expires_at=None,
                              delivery_count=msg.delivery_count, durable=msg.durable, enqueued_at=self.clock())
        if msg.record_id is not None and journal is not None:
            if info[target.name].durable:
                moved.record_id = journal.append_message(target.name, payload,
                                                         delivery_count=msg.delivery_count)
            journal.append_ack(msg.record_id)
            msg.record_id = None
        target_address = info[target.name].address
        if storage.must_page(target) or (storage.pager is not None and self.limits.pages(target_address) and
                                         self.limits.full(target_address, [target], stored_size(payload)) and
                                         storage.paging_refusal() is None):
            storage.page(target, moved, target_address)  # behind what the target already paged (FIFO)
        else:
            target.enqueue(moved)
            self.queue_changed(target)
        if self.mirror is not None:
            self.mirror.routed(target, moved, target_address)
        if expired:
            self.moved_expired += 1
        else:
            self.dead_lettered += 1
        log.debug("%s message moved from %s to %s", "expired" if expired else "dead-lettered", source,
                  target.name)


def annotate_moved(payload: bytes, *, address: str, queue: str, expired_at: int | None) -> bytes:
    """The message as it goes to a dead-letter / expiry address: Artemis' ORIG annotations added (and,
    when it expired, its ttl and absolute-expiry-time removed, with ACTUAL-EXPIRY recording when).

    A cold path (dead letters are rare), so the message is decoded and encoded with proton; one that
    proton cannot decode moves unchanged. Of a large message reference (broker.largemessage) only the head
    is decoded and encoded: the footer naming its file follows it again."""
    payload, footer = split_reference(payload)  # a large message: its head, then its reference again
    try:
        m = proton.Message()
        m.decode(payload)
        ann = dict(m.annotations or {})
        ann[ORIG_ADDRESS] = address
        ann[ORIG_QUEUE] = queue
        if m.id is not None:
            ann[ORIG_MESSAGE_ID] = m.id
        if expired_at is not None:
            ann[ACTUAL_EXPIRY] = proton.timestamp(expired_at)
            m.ttl = 0
            m.expiry_time = 0
        m.annotations = ann
        return bytes(m.encode()) + footer
    except Exception:  # not decodable by proton: move it as it is
        log.debug("dead-letter / expiry annotations skipped for an undecodable message")
        return payload + footer

