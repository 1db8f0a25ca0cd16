"""Mobile address sync (Qpid Dispatch 1.19 mobile_sync/mobile.c): which address keys have destinations on
which router.

:class:`LocalAddresses` — my side. Keys that got (or lost) their first local destination are batched;
on the next tick that has a difference, ``mobile_seq`` goes up by one and one *differential* MAU
(``add``/``del`` with ``hints`` per add) is produced for flooding. A MAR from a router that is behind is
answered with an *absolute* MAU (``exist`` + ``hints``) of the set as of the current ``mobile_seq``.

:class:`RemoteAddresses` — one other router's set as I know it. A differential MAU is applied only if
its ``mobile_seq`` is exactly one more than mine; a gap means one was lost, so the caller sends a MAR
and replaces the whole set when the absolute MAU comes back. Duplicates (``mobile_seq`` not above
mine, as flooding through a cycle delivers) are ignored.

Only keys of the synced classes (``M``, ``C``, ``D``, ``E``, ``F``, ``H``) are carried.
"""

from __future__ import annotations

import logging

from router.mesh import protocol as P
from router.mesh.messages import MobileAddressUpdate

__all__ = ["LocalAddresses", "RemoteAddresses", "Change"]

log = logging.getLogger("router.mesh")

#: (added {key: hint}, removed {key}) produced by applying an update
Change = tuple[dict[str, int], set[str]]


class LocalAddresses:
    """The mobile keys for which this router has a local destination, and their published state."""

    def __init__(self, router_id: str, area: str = P.DEFAULT_AREA):
        self.router_id = router_id
        self.area = area
        self.mobile_seq = 0
        self.current: dict[str, int] = {}      # key -> hint, as the core reports it now
        self.published: dict[str, int] = {}    # key -> hint, as of mobile_seq

    def add(self, key: str, hint: int) -> bool:
        """Note a key that got its first local destination; False if the key class is not synced."""
        if not P.is_synced_key(key):
            log.debug("mesh: address key %r is not synced between routers", key)
            return False
        self.current[key] = int(hint)
        return True

    def remove(self, key: str) -> None:
        self.current.pop(key, None)

    def pending(self) -> bool:
        return self.current.keys() != self.published.keys()

    def flush(self) -> MobileAddressUpdate | None:
        """The differential MAU for everything that changed since the last one (mobile_seq bumped), or
        None when nothing did. A key added and removed between two ticks produces nothing."""
        add = sorted(k for k in self.current if k not in self.published)
        delete = sorted(k for k in self.published if k not in self.current)
        if not add and not delete:
            return None
        self.mobile_seq += 1
        self.published = dict(self.current)
        return MobileAddressUpdate(self.router_id, self.mobile_seq, add=add, delete=delete,
                                   hints=[self.published[k] for k in add], area=self.area)

    def absolute(self) -> MobileAddressUpdate:
        """The absolute MAU (answer to a MAR) for the published set."""
        keys = sorted(self.published)
        return MobileAddressUpdate(self.router_id, self.mobile_seq, exist=keys,
                                   hints=[self.published[k] for k in keys], area=self.area)


class RemoteAddresses:
    """Another router's mobile keys as learned from its MAUs."""

    def __init__(self):
        self.mobile_seq = 0
        self.keys: dict[str, int] = {}

    def reset(self) -> set[str]:
        """Forget everything (the router restarted); returns the keys that were known."""
        old = set(self.keys)
        self.keys.clear()
        self.mobile_seq = 0
        return old

    def apply(self, mau: MobileAddressUpdate) -> tuple[Change | None, bool]:
        """Apply one MAU -> (change or None, whether a MAR is needed to catch up)."""
        if mau.absolute:
            if mau.mobile_seq < self.mobile_seq:
                return None, False                   # stale answer to an older request
            hints = mau.hints or [P.HINT_ANYCAST_BALANCED] * len(mau.exist)
            new = {k: h for k, h in zip(mau.exist, hints) if P.is_synced_key(k)}
            removed = set(self.keys) - set(new)
            added = {k: h for k, h in new.items() if k not in self.keys}
            self.keys = new
            self.mobile_seq = mau.mobile_seq
            return (added, removed), False
        if mau.mobile_seq <= self.mobile_seq:
            return None, False                       # a duplicate (flooded through a cycle)
        if mau.mobile_seq != self.mobile_seq + 1:
            return None, True                        # missed one: recover with MAR -> absolute MAU
        hints = mau.hints or [P.HINT_ANYCAST_BALANCED] * len(mau.add)
        added = {}
        for k, h in zip(mau.add, hints):
            if P.is_synced_key(k) and k not in self.keys:
                self.keys[k] = h
                added[k] = h
        removed = set()
        for k in mau.delete:
            if self.keys.pop(k, None) is not None:
                removed.add(k)
        self.mobile_seq = mau.mobile_seq
        return (added, removed), False

    def behind(self, advertised_seq: int) -> bool:
        """An RA advertised ``advertised_seq``: do I need a MAR?"""
        return advertised_seq > self.mobile_seq
