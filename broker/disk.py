"""Artemis' ``max-disk-usage``: refuse new durable messages before the disk is actually full, sans-IO.

Artemis reads the usage of its stores' file systems every ``disk-scan-period`` ms and, above
``max-disk-usage`` percent, stops taking messages (configuration-index; "Paging", section "Max Disk Usage").
tdbroker does the same for the file systems of its journal and its paging directory: usage is
``1 - available / total`` (available to an unprivileged writer, as Artemis' usable space). While any of them
is over the limit, new durable sends (which need the journal) and messages that would page (which need page
files) are rejected with ``amqp:resource-limit-exceeded``; below it again they are accepted. Non-durable
messages that stay in memory, consumers and acknowledgements are not affected.

:class:`DiskMonitor` only does arithmetic on what ``usage(path)`` reports (``(total, available)`` bytes),
so tests inject the reading; :func:`filesystem_usage` is the real one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

NO_CHECK = -1  # max-disk-usage -1: Artemis' way to turn the check off


def filesystem_usage(path: str) -> tuple[int, int]:
    """``(total bytes, bytes available to an unprivileged writer)`` of the file system holding ``path`` (or,
    while it does not exist yet, its nearest existing parent)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


class DiskMonitor:
    """Whether the broker's file systems are over ``max-disk-usage`` (a percentage; -1 = no check) or
    under ``min-disk-free`` (bytes that must stay available; -1 = no check). Both apply when both are
    set: the stricter one decides (Artemis' ``min-disk-free`` is the absolute form of the same limit)."""

    def __init__(self, paths: Iterable[str], max_usage_percent: int, *, min_free: int = NO_CHECK,
                 usage: Callable[[str], tuple[int, int]] = filesystem_usage):
        self.paths = list(dict.fromkeys(paths))
        self.max_usage = max_usage_percent
        self.min_free = min_free
        self.usage = usage
        self.over = False
        self.percent = 0.0          # the highest usage found at the last check
        self.headroom = -1          # bytes that can still be written before the limit (-1: no limit known)
        self.short_of_free = False  # under min-disk-free at the last check
        self.failed: str | None = None  # the last reading error (the state is kept meanwhile)

    @property
    def enabled(self) -> bool:
        return self.max_usage != NO_CHECK or self.min_free != NO_CHECK

    def check(self) -> bool:
        """Read every file system's usage; True when :attr:`over` changed."""
        if not self.enabled:
            return False
        worst, headroom, short = 0.0, None, False
        try:
            for path in self.paths:
                total, available = self.usage(path)
                if total <= 0:
                    continue
                worst = max(worst, 100.0 * (1.0 - available / total))
                rooms = []
                if self.max_usage != NO_CHECK:
                    rooms.append(available - total * (100 - self.max_usage) // 100)
                if self.min_free != NO_CHECK:
                    rooms.append(available - self.min_free)
                    short = short or available < self.min_free
                room = min(rooms)
                headroom = room if headroom is None else min(headroom, room)
        except OSError as exc:  # a directory that vanished, a stale mount: keep the last state
            self.failed = str(exc)
            return False
        self.failed = None
        self.percent = worst
        self.headroom = max(0, headroom) if headroom is not None else -1
        self.short_of_free = short
        over = (self.max_usage != NO_CHECK and worst > self.max_usage) or short
        changed = over != self.over
        self.over = over
        return changed

    def describe(self) -> str:
        if self.short_of_free:
            return f"free disk space is under min-disk-free ({self.min_free} bytes)"
        return f"disk usage {self.percent:.0f}% is over max-disk-usage {self.max_usage}%"
