"""Admission: whether a message can be taken, decided as early as possible -- while a multi-frame message
is still arriving -- so that one that cannot be stored is refused instead of buffered whole (issue 10: a
300 MB delivery was held whole). A part of :class:`broker.server.Broker`, asked by
:class:`broker.delivery.DeliveryPath` as the bytes of a message arrive (wire's
:meth:`wire.assembly.LinkOwner.on_partial`).

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
from typing import Callable

from broker.addressing import AddressModel
from broker.journal_io import MAX_RECORD_BYTES
from broker.limits import FAIL, RESOURCE_LIMIT_EXCEEDED, AddressLimits
from broker.links import Arriving, BrokerLink
from broker.storage import Storage
from wire.assembly import MESSAGE_SIZE_EXCEEDED
from wire.header import read_header

log = logging.getLogger("broker.server")

# A large message (a file of its own) is bounded by the disk space left, not by the journal's record limit;
# this only keeps sizes in the range every counter and the reference's u64 fields handle.
LARGE_MESSAGE_LIMIT = 1 << 62
# Besides the size bound (one comparison per frame), a message still arriving is checked against the
# state of its address and of the disk every this many bytes.
PARTIAL_CHECK_BYTES = 1024 * 1024

__all__ = ["Admission", "PARTIAL_CHECK_BYTES", "MESSAGE_SIZE_EXCEEDED", "RESOURCE_LIMIT_EXCEEDED"]


def _durable_header(first_chunk: bytes | None) -> bool:
    """Whether a message still arriving says durable (its header comes first); False when unreadable."""
    if not first_chunk:
        return False
    try:
        return read_header(first_chunk).durable
    except Exception:  # a malformed header is rejected when the message is complete
        return False


class Admission:
    """Size bounds and early refusal of messages (see the module docstring)."""

    def __init__(self, addressing: AddressModel, storage: Storage, limits: AddressLimits):
        self.addressing = addressing
        self.storage = storage
        self.limits = limits
        # bl -> whether a durable message on it becomes a large message once past the threshold (the
        # delivery path says: broker.largestream); then the journal's record limit does not bound it
        self.may_stream: Callable[[BrokerLink], bool] = lambda bl: False

    def scope(self, bl: BrokerLink) -> tuple[str, list]:
        """(address, queues) a receiving link stores into."""
        if bl.mode == BrokerLink.FANOUT:
            return bl.address, self.addressing.multicast_queues(bl.address)
        info = self.addressing.queue_info.get(bl.queue.name) if bl.queue is not None else None
        return (info.address, [bl.queue]) if info is not None else ("", [])

    def largest_message(self, bl: BrokerLink, *, large: bool = False) -> tuple[int, str]:
        """(bytes, why) of the largest message a link can ever have stored: the journal's record limit (not
        for a ``large`` message, which has a file of its own: broker.largemessage), its address's
        max-size-bytes and global-max-size (see AddressLimits.largest_message)."""
        largest, why = (LARGE_MESSAGE_LIMIT, "the largest large message") if large else \
            (MAX_RECORD_BYTES, "the journal's record limit")
        if self.limits.active and bl.mode != BrokerLink.MANAGEMENT:
            address, _queues = self.scope(bl)
            bound = self.limits.largest_message(address)
            if 0 <= bound < largest:
                largest, why = bound, f"what address {address} can hold"
        return largest, why

    def advertise(self, lo, address: str, *, large: bool = False) -> None:
        """A producer's link says how large a message may be (AMQP 1.0 §2.7.3 attach, max-message-size):
        the journal's record limit, or less when the address's limits are lower. With ``large`` (the
        connection stores durable messages past a threshold in files of their own, broker.largemessage) the
        record limit bounds only non-durable messages, so it is not advertised: the address's limits are, or
        nothing (0) without them."""
        largest = LARGE_MESSAGE_LIMIT if large else MAX_RECORD_BYTES
        if self.limits.active:
            bound = self.limits.largest_message(address)
            if 0 <= bound < largest:
                largest = bound
        lo.max_message_size = 0 if largest == LARGE_MESSAGE_LIMIT else largest

    # -- a message still arriving --------------------------------------------------------------------
    def arriving(self, bl: BrokerLink, d, held: int, first_chunk) -> tuple[str | None, str | None]:
        """``held`` bytes of delivery ``d`` have arrived on ``bl``: ``(condition, why)`` when it must be
        refused now, else ``(None, None)``. ``first_chunk()`` gives its first bytes (read once, for the
        header's durable flag).

        ``amqp:link:message-size-exceeded``: larger than the link takes; the caller rejects it and
        detaches the link, which stops the sender. ``amqp:resource-limit-exceeded``: refused for the
        state of the broker (disk full, address full under FAIL, cannot page); its bytes are dropped as
        they arrive and it is rejected when its last frame comes (one outcome, as for any message), the
        link kept (the reason is kept in ``bl.arriving.refused``)."""
        a = bl.arriving
        if a is None or a.delivery != d or held <= a.held:  # a new delivery (see broker.links.Arriving)
            a = bl.arriving = Arriving(d, _durable_header(first_chunk()))
        a.held = held
        if held > a.cap or held >= a.next_check:
            condition, why = self.check_arriving(bl, a, held)
            if condition == RESOURCE_LIMIT_EXCEEDED:
                a.refused = why
            return condition, why
        return None, None

    def check_arriving(self, bl: BrokerLink, a: Arriving, held: int, *,
                       large: bool = False) -> tuple[str | None, str | None]:
        """The check itself (every :data:`PARTIAL_CHECK_BYTES`, and whenever the message passes the size
        it may grow to); sets that size and the next check. ``large``: the message streams into a file of
        its own (broker.largestream), so the journal's record limit does not bound it."""
        a.next_check = held + PARTIAL_CHECK_BYTES
        if not large and a.durable and self.may_stream(bl):
            # It becomes a large message if it reaches the threshold (wire's STREAM, broker.largestream): the
            # journal's record limit does not bound it (the address' limits and the disk space do).
            large = True
        largest, what = self.largest_message(bl, large=large)
        address, queues = self.scope(bl) if bl.mode != BrokerLink.MANAGEMENT else ("", [])
        storage = self.storage
        if a.durable and storage.journal is not None and \
                any(self.addressing.queue_info[q.name].durable for q in queues):
            refusal = storage.durable_refusal()
            if refusal is not None:
                return RESOURCE_LIMIT_EXCEEDED, f"durable message refused: {refusal}"
            headroom = storage.disk_headroom()
            if 0 <= headroom < largest:
                largest, what = headroom, "the disk space left below max-disk-usage"
        a.cap = largest
        if held > largest:
            return MESSAGE_SIZE_EXCEEDED, f"message larger than {largest} bytes ({what})"
        limits = self.limits
        if queues and limits.active:
            full = limits.full(address, queues, held)
            if full and limits.limit_of(address)[1] == FAIL:
                return RESOURCE_LIMIT_EXCEEDED, f"Address is full: {address}"
            paging = full and limits.pages(address) or any(storage.must_page(q) for q in queues)
            if paging and (refusal := storage.paging_refusal()) is not None:
                return RESOURCE_LIMIT_EXCEEDED, f"Address is full: {address} and cannot page: {refusal}"
        return None, None
