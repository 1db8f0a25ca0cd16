"""Address memory limits: Artemis' ``max-size-bytes`` + ``address-full-policy`` (address-settings) and
``global-max-size`` (core), sans-IO.

What counts is the encoded size of the messages the queues hold (ready or being delivered), kept by each
:class:`broker.queue.Queue` (``size_bytes``) and, summed over every queue, by one :class:`SizeMeter`.
An address's size is the sum over the queues a message is routed to; a multicast message therefore
counts once per subscription queue (Artemis counts the shared message once: our figure is the upper
bound, so a limit is never exceeded by the difference).

A message that would take its address over ``max-size-bytes``, or the broker over ``global-max-size``,
meets its address's full policy (Artemis docs, "Paging" and "Address Settings"):

* ``FAIL`` — rejected with ``amqp:resource-limit-exceeded``; the link stays.
* ``DROP`` — accepted and dropped; counted in :attr:`AddressLimits.dropped` (management shows it).
* ``BLOCK`` — stored, but the producer's credit is not given back while the address is full; it is
  returned once consumers have taken the address below its limit. A producer holding credit can still
  send what that credit allows (at most the link's credit window): the overshoot is bounded by it.
* ``PAGE`` — the message is written to disk (:mod:`broker.paging`) instead of held in memory, and so is
  every later message of that queue until its page files are read back, in order, as consumers take the
  address below its limits again.

Which queues a message for an address reaches and their sizes are the broker's; this module only compares
numbers, so it is tested without a broker.
"""

from __future__ import annotations

from broker.configmodel import AddressSettings, BrokerConfig

FAIL, BLOCK, DROP, PAGE = "FAIL", "BLOCK", "DROP", "PAGE"
# What store() is told to do with one message.
STORE, STORE_BLOCKED, REJECT, DISCARD, PAGED = "store", "store-blocked", "reject", "discard", "page"

# The condition Artemis' AMQP protocol manager sends for a full address.
RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"


class SizeMeter:
    """The total encoded size of every message every queue of a broker holds (updated by the queues)."""

    __slots__ = ("total",)

    def __init__(self) -> None:
        self.total = 0


class AddressLimits:
    """The limits of one broker; :meth:`verdict` is asked once per message stored, only when
    :attr:`active` (some limit is configured), so a broker without limits pays nothing."""

    def __init__(self, cfg: BrokerConfig, meter: SizeMeter):
        self.cfg = cfg
        self.meter = meter
        self.global_max = cfg.global_max_size if cfg.global_max_size is not None else -1
        self.active = self.global_max >= 0 or any(
            s.max_size_bytes is not None and s.max_size_bytes >= 0 for s in cfg.address_settings)
        self._per_address: dict[str, tuple[int, str]] = {}
        self.dropped: dict[str, int] = {}       # address -> messages dropped by the DROP policy
        self.rejected: dict[str, int] = {}      # address -> messages rejected by the FAIL policy
        self.paged: dict[str, int] = {}         # address -> messages written to page files (PAGE policy)
        self.blocked: dict = {}                 # incoming link -> (address, queues, credit owed)

    @property
    def may_page(self) -> bool:
        """True when some address can page (a PAGE policy with a limit: its own or the global one), so the
        broker needs its paging directory."""
        cfg = self.cfg
        for s in cfg.address_settings:
            merged = cfg.settings_for(s.match)
            if (merged.address_full_policy or PAGE) == PAGE and \
                    ((merged.max_size_bytes is not None and merged.max_size_bytes >= 0) or self.global_max >= 0):
                return True
        return self.global_max >= 0 and (cfg.settings_for("#").address_full_policy or PAGE) == PAGE

    def limit_of(self, address: str) -> tuple[int, str]:
        """(max-size-bytes, policy) for ``address``; -1 = no address limit."""
        got = self._per_address.get(address)
        if got is None:
            s: AddressSettings = self.cfg.settings_for(address)
            got = (s.max_size_bytes if s.max_size_bytes is not None else -1, s.address_full_policy or PAGE)
            self._per_address[address] = got
        return got

    def full(self, address: str, queues, extra: int = 0) -> bool:
        """True when storing ``extra`` more bytes in each of ``queues`` would pass a limit."""
        if self.global_max >= 0 and self.meter.total + extra * len(queues) > self.global_max:
            return True
        max_bytes, _policy = self.limit_of(address)
        return max_bytes >= 0 and sum(q.size_bytes for q in queues) + extra * len(queues) > max_bytes

    def fits(self, address: str, queues, size: int) -> bool:
        """True when ``size`` more bytes in ONE of ``queues`` (all of the address's queues) stay within the
        limits (depaging: a message goes back to its own queue)."""
        if self.global_max >= 0 and self.meter.total + size > self.global_max:
            return False
        max_bytes, _policy = self.limit_of(address)
        return max_bytes < 0 or sum(q.size_bytes for q in queues) + size <= max_bytes

    def verdict(self, address: str, queues, size: int) -> str:
        """What to do with a message of ``size`` bytes for ``address`` routed to ``queues``."""
        if not queues or not self.full(address, queues, size):
            return STORE
        policy = self.limit_of(address)[1]
        if policy == FAIL:
            self.rejected[address] = self.rejected.get(address, 0) + 1
            return REJECT
        if policy == DROP:
            self.dropped[address] = self.dropped.get(address, 0) + 1
            return DISCARD
        if policy == PAGE:
            return PAGED
        return STORE_BLOCKED

    def counted_page(self, address: str) -> None:
        self.paged[address] = self.paged.get(address, 0) + 1

    def pages(self, address: str) -> bool:
        """True when ``address``'s policy is PAGE and it has a limit (its own or the global one)."""
        max_bytes, policy = self.limit_of(address)
        return policy == PAGE and (max_bytes >= 0 or self.global_max >= 0)

    def largest_message(self, address: str) -> int:
        """The largest message ``address`` could ever hold within its limits (-1: no limit): a bigger one
        is refused while it still arrives instead of being buffered whole. A message above the address's
        own max-size-bytes never fits, whatever the policy, paging included -- it would have to be held
        in memory whole to be delivered."""
        max_bytes, _policy = self.limit_of(address)
        bounds = [b for b in (max_bytes, self.global_max) if b >= 0]
        return min(bounds) if bounds else -1

    def owe(self, link, address: str, queues) -> None:
        """``link`` gets one credit back once ``address`` is below its limits again."""
        _addr, _queues, owed = self.blocked.get(link, (address, queues, 0))
        self.blocked[link] = (address, queues, owed + 1)

    def unblocked(self) -> list:
        """[(link, credit owed)] for blocked links whose address has room again (they are forgotten)."""
        out = []
        for link, (address, queues, owed) in list(self.blocked.items()):
            if not self.full(address, queues):
                del self.blocked[link]
                out.append((link, owed))
        return out

    def forget(self, link) -> None:
        self.blocked.pop(link, None)

    def blocking(self, address: str, queues) -> bool:
        """True when a producer to ``address`` must not get credit back now (BLOCK policy, full)."""
        return self.limit_of(address)[1] == BLOCK and self.full(address, queues)
