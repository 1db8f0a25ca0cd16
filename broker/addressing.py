"""tdbroker's address model: queues, the addresses they are bound to, routing types, subscriptions.

:class:`AddressModel` is the part of :class:`broker.server.Broker` that owns these tables; it knows
nothing of links, the journal or time beyond the clock its queues stamp messages with. Where a
dead-lettered or expired message goes is its ``exits`` (:class:`QueueExits`, :mod:`broker.moves`).
Artemis' model, reduced to what tdbroker implements:

* an **address** has routing types (anycast, multicast or both) and queues bound to it;
* an **anycast** address delivers each message to ONE of its anycast queues, in turn (round robin), and
  a **multicast** address copies each message to every multicast queue bound to it (a queue per
  subscriber). Artemis' address model says so ("When messages are received on such an address, they are
  firstly distributed evenly across all the defined queues", ``docs/user-manual/en/address-model.md``;
  today's ``address-model.adoc``: anycast routes to "a single queue on the address"): its anycast queue
  bindings share the address as routing name and ``BindingsImpl.getNextBinding`` takes the next one in
  turn, skipping a queue whose ``<filter>`` does not select the message and preferring one with a consumer
  (``LocalQueueBinding.isHighAcceptPriority``); when none has a consumer, the next that takes the message.
  :meth:`AddressModel.route` does that. A link that names a queue (its name, or ``address::queue``, the
  FQQN) stores into that queue only. A client link uses multicast when the address only has the multicast routing type or
  when its terminus carries the capability ``topic`` / ``multicast`` (as Artemis' AMQP protocol manager
  reads them); anything else is anycast, and auto-created addresses are anycast unless the client asked
  for multicast (tdbroker's choice: the waypoint use case wants a queue);
* a consumer on a multicast address gets its own **subscription queue**: ``<address>.<random>``, deleted
  when the link goes; or, when its source is durable (terminus-durable not none, or expiry-policy
  never), the durable ``<container-id>.<link-name>`` (Artemis' AMQP subscription naming), kept when the
  link is detached or the connection drops, deleted when the link is closed;
* a **temporary queue** backs each dynamic source (``temp.<random>``), deleted with its link.

Queues created after start (auto-created, by management, durable subscriptions) are written to a small
bindings file beside the journal (``bindings.json``, replaced atomically) so that a restart binds them to
the right address and routing type again; the journal itself knows only queue names. Writing it is the runtime's (:mod:`broker.runtime`): this
module only says what to write (:meth:`AddressModel.take_bindings`).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from typing import Callable, Protocol

from broker.diverts import MAX_DIVERT_DEPTH, Diverts
from broker.limits import SizeMeter
from broker.queue import Queue, QueuedMessage
from broker.selector import Selector, message_lookup, parse as parse_selector

log = logging.getLogger("broker.addressing")

ANYCAST, MULTICAST = "anycast", "multicast"
ROUTING_TYPES = (ANYCAST, MULTICAST)
# Terminus capabilities that ask for multicast (Artemis reads "topic"; "multicast" is its routing-type name).
MULTICAST_CAPABILITIES = frozenset({"topic", "multicast"})
ANYCAST_CAPABILITIES = frozenset({"queue", "anycast"})
TEMP_PREFIX = "temp."
BINDINGS_FILE = "bindings.json"
# Artemis' AMQP durable subscription name is "<container-id>.<link-name>"; a queue name has to stay
# below the journal's record limit, and an endless name is no use in management either.
MAX_QUEUE_NAME = 1024


# A divert's <routing-type> as the routing type its copy is routed with (PASS: the original's).
_DIVERT_ROUTING = {"ANYCAST": ANYCAST, "MULTICAST": MULTICAST, "STRIP": None}


class QueueInfo:
    """What the broker knows about a queue besides its messages: binding, routing type, life cycle."""

    __slots__ = ("name", "address", "routing_type", "durable", "temporary", "expiry_delay", "selector", "admit")

    def __init__(self, name: str, address: str, routing_type: str, durable: bool, temporary: bool,
                 expiry_delay: int, selector: Selector | None = None):
        self.name = name
        self.address = address
        self.routing_type = routing_type
        self.durable = durable            # False: messages stay in memory whatever their header says
        self.temporary = temporary        # dynamic source / non-durable subscription: gone with its link
        self.expiry_delay = expiry_delay  # address-settings expiry-delay (ms; <= 0: none)
        self.selector = selector          # Artemis' queue <filter>: only matching messages enter the queue
        self.admit = None                 # bytes -> bool: another test to enter (AddressModel.set_admit)


class QueueExits(Protocol):
    """Where a message leaving a queue by dead-lettering or expiry goes (:class:`broker.moves.Mover`)."""

    def move(self, msg: QueuedMessage, source: str, address: str | None, *, expired: bool) -> None: ...


class AddressModel:
    """The queue and address tables of a broker (see the module docstring).

    ``queues``: name -> :class:`Queue`; ``queue_info``: name -> :class:`QueueInfo`; ``addresses``: address
    -> its routing types. ``exits`` must be set before a queue can dead-letter or expire a message."""

    def __init__(self, cfg, clock: Callable[[], int], meter: SizeMeter):
        self.cfg = cfg
        self.clock = clock
        self.meter = meter
        self.exits: QueueExits | None = None
        self.queues: dict[str, Queue] = {}
        self.queue_info: dict[str, QueueInfo] = {}
        self.addresses: dict[str, set] = {}           # address -> routing types
        self._listeners: list = []                    # callables(queue name) for queues created later
        self.created: Callable[[str], None] | None = None  # called for every non-temporary queue made
        self.bindings_dirty = False                   # the bindings file is behind the table
        self.filtered: set[str] = set()               # queues with a <filter> (see admitted)
        # Queues that have held a message with an expiry or a redelivery delay: the only ones broker.timers
        # looks at (a queue adds itself, broker.queue.Queue._put; the timers drop it once it has no timed
        # message), so finding the next timer costs the timed queues, not every queue, per batch.
        self.timed: set[Queue] = set()
        # Per address, its anycast and multicast queues in creation order (the routing tables: a message
        # is routed by a dict lookup, not a scan of every queue), and whose turn it is among the anycast.
        self.anycast: dict[str, list[Queue]] = {}
        self.multicast: dict[str, list[Queue]] = {}
        self._turn: dict[str, int] = {}
        self.diverts = Diverts(getattr(cfg, "diverts", None) or [])
        # Queues that are some address-setting's expiry address: messages recovered there never expire.
        self.expiry_targets = {s.expiry_address for s in cfg.address_settings if s.expiry_address}
        for a in cfg.addresses:
            self.addresses[a.name] = set(a.routing_types)
        for q in cfg.queues():
            self.add_queue(q.name, q.address, routing_type=q.routing_type, durable=q.durable, configured=True,
                           selector=parse_selector(q.filter) if q.filter else None)

    def admitted(self, queues: list, payload: bytes) -> list:
        """The queues of ``queues`` a message enters: all of them unless some have a ``<filter>``, whose
        selector must then be TRUE for the message (Artemis' queue filter). The message's properties are
        decoded only when a filtered queue is among them."""
        if not self.filtered or not any(q.name in self.filtered for q in queues):
            return queues
        info = self.queue_info
        lookup = None
        out = []
        for q in queues:
            qi = info[q.name]
            if q.name in self.filtered:
                if qi.admit is not None and not qi.admit(payload):
                    continue
                if qi.selector is not None:
                    if lookup is None:
                        lookup = message_lookup(payload)
                    if not qi.selector.matches(lookup):
                        continue
            out.append(q)
        return out

    def set_admit(self, name: str, admit: Callable[[bytes], bool]) -> None:
        """Give queue ``name`` a test every message must pass to enter it (a network bridge's subscription:
        not back where it came from, within messageTTL), besides any selector."""
        self.queue_info[name].admit = admit
        self.filtered.add(name)

    def subscribe(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(queue name)`` for every non-temporary queue created from now on (broker
        connections attach links for it)."""
        self._listeners.append(listener)

    @property
    def queue_address(self) -> dict[str, str]:
        """``{queue name: address}`` in creation order (broker connections match on it)."""
        return {n: i.address for n, i in self.queue_info.items()}

    def address_of(self, queue: str) -> str:
        return self.queue_info[queue].address

    def queues_of(self, address: str) -> list[Queue]:
        """Every queue bound to ``address``, whatever its routing type."""
        return [self.queues[n] for n, i in self.queue_info.items() if i.address == address]

    # -- creation and removal -------------------------------------------------------------------------
    def _exit(self, msg: QueuedMessage, source: str, address: str | None, expired: bool) -> None:
        self.exits.move(msg, source, address, expired=expired)

    def add_queue(self, name: str, address: str, *, routing_type: str = ANYCAST, durable: bool = True,
                  temporary: bool = False, configured: bool = False, notify: bool = True,
                  selector: Selector | None = None) -> Queue:
        settings = self.cfg.settings_for(address)
        dla, exa = settings.dead_letter_address, settings.expiry_address
        q = Queue(name, max_delivery_attempts=settings.max_delivery_attempts,
                  dead_letter=lambda msg, reason, n=name: self._exit(msg, n, dla, False),
                  expired=lambda msg, n=name: self._exit(msg, n, exa, True),
                  redelivery_delay=max(0, settings.redelivery_delay or 0), clock=self.clock,
                  meter=self.meter, timed=self.timed)
        self.queues[name] = q
        self.queue_info[name] = QueueInfo(name, address, routing_type, durable, temporary,
                                          settings.expiry_delay or -1, selector)
        (self.multicast if routing_type == MULTICAST else self.anycast).setdefault(address, []).append(q)
        if selector is not None:
            self.filtered.add(name)
        self.addresses.setdefault(address, set()).add(routing_type)
        if not configured and not temporary and durable:
            self.bindings_dirty = True
        if not temporary and self.created is not None:
            self.created(name)  # every queue, whatever notify says (a broker mirror, broker.mirror)
        if notify and not temporary:
            for listener in list(self._listeners):
                try:
                    listener(name)
                except Exception:  # a broker connection's bug must not stop queue creation
                    log.exception("queue listener failed for %s", name)
        return q

    def forget_queue(self, name: str) -> tuple[Queue, QueueInfo]:
        """Take a queue out of the tables (its address goes too when nothing else keeps it); the caller
        detaches its links and disposes of its messages."""
        q = self.queues.pop(name)
        self.timed.discard(q)
        info = self.queue_info.pop(name)
        self.filtered.discard(name)
        table = self.multicast if info.routing_type == MULTICAST else self.anycast
        bound = table.get(info.address)
        if bound is not None:
            bound[:] = [b for b in bound if b is not q]
            if not bound:
                del table[info.address]
                self._turn.pop(info.address, None)
        if not any(i.address == info.address for i in self.queue_info.values()) and \
                self.cfg.address(info.address) is None:
            self.addresses.pop(info.address, None)
        elif info.address in self.addresses and not any(
                i.address == info.address and i.routing_type == info.routing_type
                for i in self.queue_info.values()):
            cfg_addr = self.cfg.address(info.address)
            if cfg_addr is None or info.routing_type not in cfg_addr.routing_types:
                self.addresses[info.address].discard(info.routing_type)
        if not info.temporary and info.durable:
            self.bindings_dirty = True
        return q, info

    # -- lookup -----------------------------------------------------------------------------------------
    def routing_type_for(self, address: str, capabilities=()) -> str:
        """The routing type a client link to ``address`` uses (see the module docstring)."""
        caps = {str(c) for c in capabilities}
        types = self.addresses.get(address)
        if caps & MULTICAST_CAPABILITIES and (types is None or MULTICAST in types):
            return MULTICAST
        if caps & ANYCAST_CAPABILITIES:
            return ANYCAST
        if types == {MULTICAST}:
            return MULTICAST
        return ANYCAST

    def multicast_queues(self, address: str) -> list[Queue]:
        """Every multicast queue bound to ``address`` (the copies a message sent there makes)."""
        return list(self.multicast.get(address, ()))

    def anycast_queues(self, address: str) -> list[Queue]:
        """Every anycast queue bound to ``address`` (each message goes to one of them)."""
        return list(self.anycast.get(address, ()))

    # -- routing a message ------------------------------------------------------------------------------
    def next_anycast(self, address: str, payload: bytes) -> Queue | None:
        """The anycast queue of ``address`` whose turn it is for this message (see the module docstring);
        None when the address has none that takes it."""
        bound = self.anycast.get(address)
        if not bound:
            return None
        filtered = self.filtered
        n = len(bound)
        if n == 1:
            q = bound[0]
            return q if q.name not in filtered or self.admitted([q], payload) else None
        start = self._turn.get(address, 0) % n
        fallback = -1
        for k in range(n):
            i = (start + k) % n
            q = bound[i]
            if q.name in filtered and not self.admitted([q], payload):
                continue
            if q.consumer_count > 0:
                self._turn[address] = i + 1
                return q
            if fallback < 0:
                fallback = i
        if fallback < 0:
            return None
        self._turn[address] = fallback + 1
        return bound[fallback]

    def bound_queues(self, address: str, routing_type: str | None, payload: bytes) -> list[Queue]:
        """The queues of ``address`` a message with ``routing_type`` enters: one anycast queue
        (ANYCAST), every multicast queue that takes it (MULTICAST), or both (None: a divert's STRIP)."""
        out = []
        if routing_type != MULTICAST:
            q = self.next_anycast(address, payload)
            if q is not None:
                out.append(q)
        if routing_type != ANYCAST:
            subs = self.multicast.get(address)
            if subs:
                out.extend(self.admitted(subs, payload) if self.filtered else subs)
        return out

    def route(self, address: str, routing_type: str | None, payload: bytes, *, direct: Queue | None = None,
              depth: int = 0, path: tuple = ()) -> list[tuple[Queue, bytes]]:
        """Where a message sent to ``address`` goes, diverts included (:mod:`broker.diverts`): a list of
        ``(queue, payload)``, the payload being a divert's copy for the queues it reached. ``direct``: the
        message names that queue (FQQN or queue name): only the address's exclusive diverts apply to it,
        as in Artemis' ``BindingsImpl.route``."""
        out: list[tuple[Queue, bytes]] = []
        taken = False
        diverts = self.diverts
        if diverts.active:
            chosen, taken = diverts.select(address, payload, exclusive_only=direct is not None)
            for d in chosen:
                rt = _DIVERT_ROUTING.get(d.routing_type, routing_type)
                for forward in d.forwarding_addresses:
                    if forward == address or forward in path or depth >= MAX_DIVERT_DEPTH:
                        log.debug("divert %s: %s not diverted again to %s (loop guard)", d.name, address, forward)
                        continue
                    copy = diverts.copy(d, payload, address, forward)
                    if copy is not None:
                        out.extend(self.route(forward, rt, copy, depth=depth + 1, path=path + (address,)))
        if not taken:
            if direct is not None:
                if direct.name not in self.filtered or self.admitted([direct], payload):
                    out.append((direct, payload))
            else:
                out.extend((q, payload) for q in self.bound_queues(address, routing_type, payload))
        return out

    def lookup_queue(self, address: str) -> Queue | None:
        """The queue a link names: a queue name, ``address::queue`` (FQQN), or an address with anycast
        queues (its first one); else auto-created (anycast) when the settings allow."""
        if "::" in address:
            return self.queues.get(address.split("::", 1)[1])
        q = self.queues.get(address)
        if q is None:
            bound = self.anycast.get(address)
            if bound:
                return bound[0]  # a producer's link routes by address (DeliveryPath.attach); a consumer's takes it
        if q is None and self.cfg.settings_for(address).auto_create_queues and len(address) <= MAX_QUEUE_NAME:
            q = self.add_queue(address, address)
            log.info("auto-created queue %s", address)
        return q

    def subscription_queue(self, address: str, *, durable_name: str | None,
                           selector: Selector | None = None) -> Queue:
        """A consumer's queue on a multicast address: the durable subscription ``durable_name`` (created
        or re-used), or a new temporary one."""
        if durable_name is not None:
            q = self.queues.get(durable_name)
            if q is not None:
                if self.queue_info[durable_name].address != address:
                    raise ValueError(f"subscription {durable_name} is bound to "
                                     f"{self.queue_info[durable_name].address}, not {address}")
                return q
            q = self.add_queue(durable_name, address, routing_type=MULTICAST, notify=False, selector=selector)
            log.info("durable subscription %s on %s created", durable_name, address)
            return q
        name = f"{address}.{uuid.uuid4().hex[:12]}"
        return self.add_queue(name, address, routing_type=MULTICAST, durable=False, temporary=True,
                              selector=selector)

    def temporary_queue(self) -> Queue:
        """A queue for a dynamic source (request/reply); its name is its address."""
        name = f"{TEMP_PREFIX}{uuid.uuid4()}"
        return self.add_queue(name, name, durable=False, temporary=True)

    # -- dead letters and expiry: where a message goes ----------------------------------------------
    def target_queue(self, address: str) -> Queue:
        """The queue of a dead-letter / expiry address, created when missing (whatever auto-create says)."""
        if "::" in address:
            qn = address.split("::", 1)[1]
            return self.queues.get(qn) or self.add_queue(qn, address.split("::", 1)[0])
        q = self.queues.get(address)
        if q is None:
            name = next((n for n, i in self.queue_info.items() if i.address == address), None)
            if name is not None:
                return self.queues[name]
            q = self.add_queue(address, address)
            log.info("created queue %s", address)
        return q

    # -- the bindings file -----------------------------------------------------------------------------------
    def bindings_path(self) -> str | None:
        if not self.cfg.persistence_enabled:
            return None
        return os.path.join(self.cfg.journal_directory, BINDINGS_FILE)

    def load_bindings(self) -> int:
        """Re-create the durable queues created after a previous start (before journal recovery)."""
        path = self.bindings_path()
        if path is None or not os.path.exists(path):
            return 0
        try:
            with open(path, encoding="utf-8") as f:
                entries = json.load(f)
        except (OSError, ValueError) as exc:
            log.error("%s: unreadable (%s); queues created at run time come back bound to their own name",
                      path, exc)
            return 0
        n = 0
        for e in entries if isinstance(entries, list) else []:
            try:
                name, address, rt = str(e["name"]), str(e["address"]), str(e["routingType"])
            except (KeyError, TypeError):
                continue
            if name in self.queues or rt not in ROUTING_TYPES:
                continue
            self.add_queue(name, address, routing_type=rt, notify=False)
            n += 1
        self.bindings_dirty = False
        return n

    def bindings_snapshot(self) -> list[dict]:
        """The queues the bindings file must hold: durable, not configured, not temporary."""
        configured = {q.name for q in self.cfg.queues()}
        return [{"name": i.name, "address": i.address, "routingType": i.routing_type}
                for i in self.queue_info.values()
                if i.durable and not i.temporary and i.name not in configured]

    def take_bindings(self) -> list[dict] | None:
        """The snapshot to write when the table changed since the last call, else None."""
        if not self.bindings_dirty or self.bindings_path() is None:
            return None
        self.bindings_dirty = False
        return self.bindings_snapshot()


def write_bindings(path: str, entries: list[dict]) -> None:
    """BLOCKING (run in a thread): replace the bindings file atomically and durably."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(entries, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
