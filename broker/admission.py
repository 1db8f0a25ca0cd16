"""Admission: whether a message can be taken, decided as early as possible -- while a multi-frame message
is still arriving -- so that one that cannot be stored is refused instead of buffered whole (issue 10: a
300 MB delivery was held whole). A mixin of :class:`broker.server.Broker`.

The largest message a producer's link can ever have stored is the smallest of the journal's record limit
(:data:`broker.journal_io.MAX_RECORD_BYTES`), its address's ``max-size-bytes`` and ``global-max-size``
(:meth:`broker.limits.AddressLimits.largest_message`), and, for a durable message, the disk space left below
``max-disk-usage``. The link advertises it at attach (AMQP 1.0 §2.7.3, max-message-size); a message whose
bytes so far pass it is rejected and its link detached with ``amqp:link:message-size-exceeded`` (§2.8.18),
the one way to stop a sender mid-message. A message refused for the broker's state instead (disk full,
its FAIL address full, it would page and page files cannot be written) is checked every
:data:`PARTIAL_CHECK_BYTES`; its bytes are dropped as they arrive from then on and it is rejected with
``amqp:resource-limit-exceeded`` (§2.8.15) when complete, the link kept.
"""

from __future__ import annotations

import logging

from broker.journal_io import MAX_RECORD_BYTES
from broker.limits import FAIL, RESOURCE_LIMIT_EXCEEDED
from broker.links import BrokerLink, PartialDelivery
from wire import raw
from wire.header import read_header

log = logging.getLogger("broker.server")

# Besides the size bound (one comparison per frame), a message still arriving is checked against the
# state of its address and of the disk every this many bytes.
PARTIAL_CHECK_BYTES = 1024 * 1024
# AMQP 1.0 §2.8.18: the link error for a message larger than the link takes.
MESSAGE_SIZE_EXCEEDED = "amqp:link:message-size-exceeded"


def _durable_header(first_chunk: bytes) -> bool:
    """Whether a message still arriving says durable (its header comes first); False when unreadable."""
    try:
        return read_header(first_chunk).durable
    except Exception:  # a malformed header is rejected when the message is complete
        return False


class Admission:
    """Mixin: size bounds and early refusal of messages (see the module docstring)."""

    def _partial_chunk(self, engine, bl: BrokerLink, d, chunk: bytes) -> None:
        """More bytes of a message still arriving."""
        p = self._partial.get(d)
        if p is None:
            p = self._partial[d] = PartialDelivery(_durable_header(chunk))
        p.size += len(chunk)
        if p.refused is None:  # a refused message's bytes are dropped as they come
            p.chunks.append(chunk)
            if p.size > p.cap or p.size >= p.next_check:
                self._check_partial(engine, bl, d, p)

    def _partial_end(self, bl: BrokerLink, d, last: bytes) -> bytes | None:
        """The last bytes of a multi-frame message: the whole message, or None when it was refused while
        arriving (it is answered here)."""
        p = self._partial.pop(d, None)
        if p is None:
            return last
        if p.refused is not None:
            raw.link_advance(raw.delivery_link(d))
            self._refuse(bl, d, p.refused)
            return None
        p.chunks.append(last)
        return b"".join(p.chunks)

    def largest_message(self, bl: BrokerLink) -> tuple[int, str]:
        """(bytes, why) of the largest message a link can ever have stored: the journal's record limit,
        its address's max-size-bytes and global-max-size (see AddressLimits.largest_message)."""
        largest, why = MAX_RECORD_BYTES, "the journal's record limit"
        if self.limits.active and bl.mode != BrokerLink.MANAGEMENT:
            address, _queues = self._scope(bl)
            bound = self.limits.largest_message(address)
            if 0 <= bound < largest:
                largest, why = bound, f"what address {address} can hold"
        return largest, why

    def _advertise_largest(self, lo, address: str) -> None:
        """A producer's link says how large a message may be (AMQP 1.0 §2.7.3 attach, max-message-size):
        the journal's record limit, or less when the address's limits are lower."""
        largest = MAX_RECORD_BYTES
        if self.limits.active:
            bound = self.limits.largest_message(address)
            if 0 <= bound < largest:
                largest = bound
        lo.max_message_size = largest

    def _check_partial(self, engine, bl: BrokerLink, d, p: PartialDelivery) -> None:
        """A multi-frame message still arriving: refuse it as soon as it cannot be stored, instead of
        buffering it to its end. Sets the size it may grow to before the next check.

        Larger than the link takes (its max-message-size): rejected and the link detached with
        ``amqp:link:message-size-exceeded``, which stops the sender. Refused for the state of the broker
        (disk full, address full under FAIL, cannot page): its bytes are dropped from then on as they
        arrive and it is rejected with ``amqp:resource-limit-exceeded`` when its last frame comes (one
        outcome, as for any message); the link stays for the next message."""
        p.next_check = p.size + PARTIAL_CHECK_BYTES
        why, condition = self._partial_refusal(bl, p)
        if why is None:
            return
        p.chunks.clear()
        if condition == RESOURCE_LIMIT_EXCEEDED:
            p.refused = why
            return
        self._partial.pop(d, None)
        raw.set_rejected(d, condition, why[:200])
        raw.delivery_settle(d)
        self._unbind(bl, failed=False)
        engine.app.links.pop(bl.ptr, None)
        # Detaching is what stops the sender: the rest of the message is not sent, nor held here.
        engine.close_link(bl.ptr, condition, why[:200])
        log.warning("connection %d: link %s: %s: refused while still arriving", engine.id, bl.name, why)

    def _partial_refusal(self, bl: BrokerLink, p: PartialDelivery) -> tuple[str | None, str | None]:
        largest, what = self.largest_message(bl)
        address, queues = self._scope(bl) if bl.mode != BrokerLink.MANAGEMENT else ("", [])
        if p.durable and self.journal is not None and any(self.queue_info[q.name].durable for q in queues):
            refusal = self.durable_refusal()
            if refusal is not None:
                return f"durable message refused: {refusal}", RESOURCE_LIMIT_EXCEEDED
            headroom = self.disk_headroom()
            if 0 <= headroom < largest:
                largest, what = headroom, "the disk space left below max-disk-usage"
        p.cap = largest
        if p.size > largest:
            return f"message larger than {largest} bytes ({what})", MESSAGE_SIZE_EXCEEDED
        limits = self.limits
        if queues and limits.active:
            full = limits.full(address, queues, p.size)
            if full and limits.limit_of(address)[1] == FAIL:
                return f"Address is full: {address}", RESOURCE_LIMIT_EXCEEDED
            paging = full and limits.pages(address) or any(self.must_page(q) for q in queues)
            if paging and (refusal := self.paging_refusal()) is not None:
                return f"Address is full: {address} and cannot page: {refusal}", RESOURCE_LIMIT_EXCEEDED
        return None, None

    def _refuse(self, bl: BrokerLink, d, why: str) -> None:
        """Reject a message the broker cannot take (AMQP 1.0 §2.8.15 resource-limit-exceeded); the link stays."""
        raw.set_rejected(d, RESOURCE_LIMIT_EXCEEDED, why[:200])
        self._answer(bl, d, accepted=False)
