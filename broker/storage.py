"""Where a broker's messages live besides its queues' memory: the journal (recovery, durable settlement),
page files (:mod:`broker.paging`) and the disk limits (:mod:`broker.disk`). :class:`Storage` is a part
of :class:`broker.server.Broker`, which calls it from the data path; it calls back through
:class:`StorageHost`. The I/O itself runs in the Trio tasks of :class:`broker.journal_io.GroupCommitter`
and :class:`broker.paging.Pager` (started by :mod:`broker.runtime`); this module does none.

**Durable settlement.** A durable message's delivery waits here (:meth:`Storage.hold`) until the group
committer reports its record on disk; :meth:`Storage.take_durable` hands back those that are.

**Recovery.** The journal is indexed without its payloads (:meth:`broker.journal.Journal.recover_index`);
a queue whose address pages gets, in journal order, what fits within the limits in memory and the rest
as page references (bodies left in the journal), exactly as if the messages had just arrived.

**Disk full.** Two things make the broker refuse durable messages with ``amqp:resource-limit-exceeded``:
``max-disk-usage`` (the journal's or paging directory's file system over the percentage, read every
``disk-scan-period`` ms) and a journal write that actually failed for lack of space (ENOSPC, EDQUOT). One
log line marks each change, none per message. What is stored stays consumable. The write that failed is
undone and its records -- durable messages whose producers have not been told ``accepted`` yet,
acknowledgements, delivery counts -- stay pending in memory (bounded: no new durable message is taken
meanwhile) and are written by the committer's retry once space returns; the producers are answered then.
Messages that would page are refused the same way while page files cannot be written.
"""

from __future__ import annotations

import logging
from bisect import bisect_right
from typing import Callable, Protocol

from broker.addressing import AddressModel
from broker.disk import DiskMonitor, filesystem_usage
from broker.journal import Journal
from broker.journal_io import GroupCommitter
from broker.largemessage import LargeMessageStore, is_reference, stored_size
from broker.limits import AddressLimits
from broker.paging import FROM_HEADER, KIND_BODY, KIND_JOURNAL, NO_EXPIRY, PagedMessage, Pager
from broker.queue import Queue, QueuedMessage

log = logging.getLogger("broker.storage")

# Messages read into memory per journal read at recovery (one file descriptor per segment per group).
RECOVERY_READ_GROUP = 1024


class StorageHost(Protocol):
    """What storage tells the broker core."""

    def queue_changed(self, q: Queue) -> None:
        """``q`` got messages back from its page files: hand them out."""

    def on_batch_end(self) -> None:
        """Paged messages can be read back (or page files can be written again): look again."""

    def durable_up_to(self, record_id: int) -> None:
        """The journal has every record up to ``record_id`` on disk (the group committer's report)."""


class Storage:
    """The journal, the pager and the disk state of a broker (see the module docstring)."""

    def __init__(self, cfg, addressing: AddressModel, limits: AddressLimits, clock: Callable[[], int],
                 host: StorageHost, *, disk_usage=None, journal_write=None) -> None:
        self.cfg = cfg
        self.addressing = addressing
        self.limits = limits
        self.clock = clock
        self.host = host
        self._journal_write = journal_write
        self.journal: Journal | None = None
        self.committer: GroupCommitter | None = None
        self.pager: Pager | None = None
        self.large: LargeMessageStore | None = None  # large message files (persistence enabled)
        paths = [cfg.journal_directory] if cfg.persistence_enabled else []
        if limits.may_page:
            paths.append(cfg.paging_path)
        self.disk = DiskMonitor(paths, cfg.max_disk_usage, min_free=cfg.min_disk_free,
                                usage=disk_usage or filesystem_usage)
        self.messages_refused_disk = 0  # durable (or paging) messages rejected while the disk was full
        # Deliveries waiting for their record to be on disk: link, delivery, link, delivery, ... and, at the
        # same index halved, their record ids (ascending). Flat lists rather than a tuple per delivery: they
        # grow and shrink once per durable message, and a sync hands back a slice of them at once.
        self._held: list = []
        self._held_ids: list[int] = []

    # -- start and stop -----------------------------------------------------------------------------------
    def open(self) -> int:
        """Open the pager (when some address may page) and the journal, and re-enqueue (or page) what the
        journal holds, in order. Returns how many messages were recovered."""
        cfg = self.cfg
        if self.limits.may_page:
            self.pager = Pager(cfg.paging_path, on_ready=self._paged_ready, on_space=self._pager_space)
            self.pager.open()
        if self.disk.paths:
            self.disk.check()
            if self.disk.over:
                log.error("%s: durable messages are refused until it drops", self.disk.describe())
        if not cfg.persistence_enabled:
            return 0
        options = {"write": self._journal_write} if self._journal_write is not None else {}
        self.journal = Journal(cfg.journal_directory, fsync=cfg.journal_sync_non_transactional, **options)
        if self.pager is not None:
            self.pager.journal = self.journal
        index = self.journal.recover_index()
        self.large = LargeMessageStore(cfg.large_messages_path, fsync=cfg.journal_sync_non_transactional)
        missing = self.large.open(self.journal.large_refs)
        if missing:  # acknowledged just before their file went, or the file was removed by hand
            for rid in missing:
                self.journal.append_ack(rid)
            index = [r for r in index if r.record_id not in missing]
        self.journal.large = self.large
        self.addressing.load_bindings()
        paged = self._recover(index)
        self.committer = GroupCommitter(self.journal, on_space=self._journal_space,
                                        on_durable=self.host.durable_up_to)
        log.info("journal %s: recovered %d messages%s", cfg.journal_directory, len(index),
                 f" ({paged} of them left on disk: their addresses page)" if paged else "")
        return len(index)

    def _recover(self, index) -> int:
        """Enqueue what fits, page the rest (sizes decide, so the decision needs no payload); returns how
        many were paged."""
        now = self.clock()
        address_bytes: dict[str, int] = {}
        total = self.addressing.meter.total
        limits = self.limits
        queues, info = self.addressing.queues, self.addressing.queue_info
        keep, paged = [], 0
        large_refs = self.journal.large_refs
        for r in index:
            q = queues.get(r.queue) or self.addressing.add_queue(r.queue, r.queue, notify=False)
            address = info[q.name].address
            # a large message counts its whole size, as it did when it arrived (Queue.size_bytes)
            size = r.payload_size if r.record_id not in large_refs else \
                self.large.file_size(large_refs[r.record_id], r.payload_size)
            page = self.pager is not None and (self.pager.paging(q.name) or (limits.pages(address) and (
                (0 <= limits.global_max < total + size) or
                (0 <= limits.limit_of(address)[0] < address_bytes.get(address, 0) + size))))
            if page:
                self.pager.page(q.name, PagedMessage(KIND_JOURNAL, r.record_id, now, FROM_HEADER,
                                                     r.delivery_count, size),
                                page_size=self._page_size(address))
                paged += 1
                continue
            address_bytes[address] = address_bytes.get(address, 0) + size
            total += size
            keep.append((q, r))
        for i in range(0, len(keep), RECOVERY_READ_GROUP):
            group = keep[i:i + RECOVERY_READ_GROUP]
            payloads = self.journal.read_payloads([r.record_id for _q, r in group])
            for q, r in group:
                msg = QueuedMessage.from_bytes(payloads[r.record_id], now, record_id=r.record_id)
                msg.delivery_count = r.delivery_count
                msg.durable = True
                if r.queue in self.addressing.expiry_targets:
                    msg.expires_at = None
                q.enqueue(msg)
        if paged:
            self.pager.flush_all()
        return paged

    def close(self) -> None:
        if self.large is not None:
            self.large.close()
        if self.journal is not None:
            self.journal.close()
        if self.pager is not None:
            self.pager.close()

    # -- durable settlement ---------------------------------------------------------------------------
    def hold(self, link, d, record_id: int) -> None:
        """Keep delivery ``d`` of ``link`` unanswered until record ``record_id`` is on disk (record ids
        come in ascending order)."""
        held = self._held
        held.append(link)
        held.append(d)
        self._held_ids.append(record_id)

    @property
    def holding(self) -> int:
        """Deliveries waiting for their record to be on disk."""
        return len(self._held_ids)

    def take_durable(self, record_id: int) -> list:
        """The deliveries held for records up to ``record_id`` (now on disk), in order, as one flat list
        ``[link, delivery, link, delivery, ...]``."""
        ids = self._held_ids
        if not ids or ids[0] > record_id:
            return []
        if ids[-1] <= record_id:  # all of them (nothing arrived while the sync ran)
            out = self._held
            self._held, self._held_ids = [], []
            return out
        k = bisect_right(ids, record_id)
        out = self._held[:2 * k]
        del self._held[:2 * k]
        del ids[:k]
        return out

    def kick(self) -> None:
        """Ask the group committer to sync what is pending (after a batch of events)."""
        if self.committer is not None and self.journal.pending:
            self.committer.kick()

    # -- disk limits ----------------------------------------------------------------------------------
    def durable_refusal(self) -> str | None:
        """Why a new durable message cannot be taken now, or None."""
        if self.committer is not None and self.committer.out_of_space:
            return "the journal's disk is full"
        if self.disk.over:
            return self.disk.describe()
        return None

    def paging_refusal(self) -> str | None:
        """Why a message cannot be paged now, or None."""
        if self.pager is not None and self.pager.out_of_space:
            return "page files cannot be written (disk full)"
        if self.disk.over:
            return self.disk.describe()
        return None

    def disk_headroom(self) -> int:
        """Bytes that can still be written before max-disk-usage (-1: unknown or no limit)."""
        return self.disk.headroom if self.disk.enabled else -1

    @property
    def disk_scan_seconds(self) -> float | None:
        """How often the runtime reads the disk usage (Artemis' disk-scan-period); None: never."""
        if not self.disk.enabled or not self.disk.paths:
            return None
        return self.cfg.disk_scan_period_ms / 1000.0

    def check_disk(self) -> bool:
        """One reading of the disk usage; logs (once) and acts when the state changed."""
        if not self.disk.check():
            return False
        if self.disk.over:
            log.error("%s: durable messages (and messages that would page) are refused until it drops",
                      self.disk.describe())
        else:
            log.warning("disk usage %.0f%% is within max-disk-usage / min-disk-free again: durable messages "
                        "are accepted", self.disk.percent)
            if self.committer is not None:
                self.committer.retry_now()
        return True

    def _journal_space(self, ok: bool) -> None:
        committer = self.committer
        if not ok:
            exc = committer.out_of_space_error
            log.error("journal %s: write failed, out of space (%s): new durable messages are refused, "
                      "%d records kept in memory and retried every %gs", self.cfg.journal_directory,
                      exc.strerror if exc is not None else "?", len(self._held_ids),
                      committer.retry_seconds)
        else:
            log.warning("journal %s: space is available again: pending records written, durable messages "
                        "accepted", self.cfg.journal_directory)

    def _pager_space(self, ok: bool) -> None:
        if ok:
            self.host.on_batch_end()

    # -- paging ---------------------------------------------------------------------------------------
    def _page_size(self, address: str) -> int:
        return self.cfg.settings_for(address).page_size_bytes

    def must_page(self, q: Queue) -> bool:
        """True while ``q`` has paged messages: a new message joins them (FIFO)."""
        return self.pager is not None and self.pager.paging(q.name)

    def page(self, q: Queue, msg: QueuedMessage, address: str) -> None:
        """Write ``msg`` (not enqueued) to ``q``'s page files instead of memory."""
        entry = PagedMessage(KIND_BODY if msg.record_id is None else KIND_JOURNAL, msg.record_id or 0,
                             msg.enqueued_at, NO_EXPIRY if msg.expires_at is None else msg.expires_at,
                             msg.delivery_count, stored_size(msg.payload), msg.payload)
        self.pager.page(q.name, entry, page_size=self._page_size(address))
        self.limits.counted_page(address)

    def _paged_ready(self, queue: str) -> None:
        self.host.on_batch_end()

    def depage(self) -> None:
        """Move paged messages back into their queues, in order, while their addresses have room (a queue
        holding nothing in memory always takes one: no queue waits forever behind another's backlog).
        When the next one is still on disk, ask the pager to read it."""
        pager = self.pager
        limits = self.limits
        addressing = self.addressing
        peers_of: dict[str, list] = {}  # address -> its queues, found once per pass
        for name in pager.paging_queues():
            q = addressing.queues.get(name)
            if q is None:
                continue
            address = addressing.queue_info[name].address
            while pager.paging(name):
                entry = pager.peek(name)
                if q.size_bytes > 0:
                    peers = peers_of.get(address)
                    if peers is None:
                        peers = peers_of[address] = addressing.queues_of(address)
                    # The next message's size when it is in memory, else the typical paged size.
                    size = entry.size if entry is not None else pager.typical_size(name)
                    if not limits.fits(address, peers, size):
                        break
                if entry is None:
                    pager.want(name)
                    break
                pager.pop(name)
                msg = self._paged_message(name, entry)
                if msg is not None:
                    q.enqueue(msg)
                    self.host.queue_changed(q)

    def _paged_message(self, queue: str, entry: PagedMessage) -> QueuedMessage | None:
        payload = entry.payload
        journal = self.journal
        if payload is None and entry.kind == KIND_JOURNAL and journal is not None:
            # A reference whose body is not in memory (recovered, and page files could not be written):
            # read it here. Rare; a record already gone (acknowledged) yields nothing.
            payload = journal.read_payloads([entry.record_id]).get(entry.record_id)
        if payload is None:
            return None
        try:
            msg = QueuedMessage.from_bytes(payload, entry.enqueued_at,
                                           record_id=entry.record_id if entry.kind == KIND_JOURNAL else None)
        except Exception as exc:  # validated on arrival: only a damaged disk gets here
            log.error("queue %s: a paged message cannot be read back (%s); dropped", queue, exc)
            if entry.kind == KIND_JOURNAL and journal is not None:
                journal.append_ack(entry.record_id)
            return None
        msg.durable = entry.kind == KIND_JOURNAL
        msg.delivery_count = entry.delivery_count
        if entry.expires_at == NO_EXPIRY or (entry.expires_at == FROM_HEADER and queue in self.addressing.expiry_targets):
            msg.expires_at = None
        elif entry.expires_at != FROM_HEADER:
            msg.expires_at = entry.expires_at
        return msg

    def whole_message(self, payload: bytes) -> bytes | None:
        """BLOCKING: ``payload`` itself, or for a large message reference the whole message read from its
        file (the parts that cannot stream it: browsers, mirrors); None, with an error logged, when the file
        cannot be read."""
        if self.large is None or not is_reference(payload):
            return payload
        try:
            return self.large.read_all(payload)
        except OSError as exc:
            log.error("large message cannot be read: %s", exc)
            return None

    def paged_stats(self, queue: str) -> tuple[int, int, int]:
        """(messages, bytes, page files) paged for ``queue``."""
        return self.pager.stats(queue) if self.pager is not None else (0, 0, 0)

    def acknowledge(self, messages) -> None:
        """Journal the removal of the durable ones among ``messages`` (dropped, purged, deleted)."""
        journal = self.journal
        if journal is None:
            return
        for msg in messages:
            if msg.record_id is not None:
                journal.append_ack(msg.record_id)
                msg.record_id = None

    def forget_paged(self, queue: str, keep=()) -> int:
        """Drop ``queue``'s paged messages (it is being deleted or purged), acknowledging the durable ones
        (every live journal record of the queue except those in ``keep``, the ones still in memory);
        returns how many were paged."""
        if self.pager is None:
            return 0
        n = self.pager.drop(queue)
        if n and self.journal is not None:
            keep = set(keep)
            for rid in self.journal.live_ids(queue):
                if rid not in keep:
                    self.journal.append_ack(rid)
        return n
