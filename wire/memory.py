"""Giving freed memory back to the operating system after a burst.

When a burst of messages is over, the daemon frees every buffer it held (no reference cycles keep them:
the tests check), but glibc's allocator keeps freed heap pages for reuse: only the top of the heap is
returned by itself (``M_TRIM_THRESHOLD``), and thousands of message buffers freed in the middle of the
heap stay resident. Measured on tdrouterd after a 150 MB burst: RSS stayed at 167 MB with every buffer
freed; ``malloc_trim(0)`` brought it back to 34 MB.

:class:`HeapTrimmer` calls ``malloc_trim(0)`` (glibc; nothing elsewhere) from a daemon's periodic tick
when the process is resident well beyond what it accounts as in use, at most once per
``TRIM_MIN_INTERVAL_SECONDS``: trimming walks the allocator's free lists, so it is never done per
message. Resident size comes from ``/proc/self/statm`` (one small read per tick).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("wire.memory")

# Trim when the process is resident this much beyond its baseline plus what it accounts as in use
# (a few socket buffers' worth: below that the allocator's reuse is the cheaper choice).
TRIM_MIN_EXCESS_BYTES = 16 * 1024 * 1024
# At most one trim this often (seconds): on a large heap a trim takes milliseconds. When a trim gives
# back little (the excess is memory still in use that the daemon does not account, such as a live
# connection's pooled delivery buffers), the interval doubles up to the maximum, and returns to the
# minimum after a trim that gave back memory.
TRIM_MIN_INTERVAL_SECONDS = 5.0
TRIM_MAX_INTERVAL_SECONDS = 80.0


def _load_malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to call
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_bytes() -> int | None:
    """This process's resident set size, or None where /proc is not available."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


class HeapTrimmer:
    """Decides when to hand freed heap pages back to the OS.

    ``tick(now, in_use)`` gets the bytes the daemon accounts as in use (buffered messages, unsettled
    deliveries). The baseline is the least that stayed resident beyond that (the interpreter, the code,
    the tables); when resident memory exceeds baseline + in use by ``min_excess``, the heap is trimmed.
    """

    def __init__(self, *, min_excess: int = TRIM_MIN_EXCESS_BYTES,
                 min_interval: float = TRIM_MIN_INTERVAL_SECONDS, trim=None, resident=resident_bytes):
        self.min_excess = min_excess
        self.min_interval = min_interval
        self._trim = trim if trim is not None else _load_malloc_trim()
        self._resident = resident
        self.baseline: int | None = None
        self.last_trim = float("-inf")
        self.interval = min_interval
        self.trims = 0

    def expect_release(self) -> None:
        """Something that may have held much memory was just freed (a connection with its engine's
        pooled buffers): look again at the next tick after the minimum interval, whatever the backoff."""
        self.interval = self.min_interval

    def tick(self, now: float, in_use: int) -> bool:
        """True when it trimmed."""
        if self._trim is None or now - self.last_trim < self.interval:
            return False
        rss = self._resident()
        if rss is None:
            return False
        if self.baseline is None:
            self.baseline = max(0, rss - in_use)
            return False
        if rss - in_use - self.baseline < self.min_excess:
            return False
        self._trim(0)
        self.trims += 1
        self.last_trim = now
        after = self._resident()
        if after is None or rss - after < self.min_excess // 2:
            self.interval = min(self.interval * 2, TRIM_MAX_INTERVAL_SECONDS)
        else:
            self.interval = self.min_interval
            self.baseline = min(self.baseline, max(0, after - in_use))
        log.debug("heap trimmed: resident %d -> %s bytes (%d in use)", rss, after, in_use)
        return True


# -- the cyclic garbage collector --------------------------------------------------------------------------
# CPython runs a collection of the youngest generation every 700 allocations of container objects, and a
# full collection -- walking every object, every connection and link record included -- after ten
# collections of the middle one. A daemon allocates a few records per message and many per attach, and
# frees them by reference counting (no cycles on the message path: the tests check), so most of that
# collecting finds nothing; at 2,000 connections and 20,000 links a profile put a third of the router's
# attach time in gc_collect_main. Measured with `tdbench --scale --connections 2000 --links-per-connection
# 10 --no-heartbeats`, two interleaved rounds each: router CPU per attach 60-62 us -> 42-44 us, per
# connection 500-555 us -> 445-475 us, per message unchanged.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_gc() -> None:
    """Collect less often (see :data:`GC_THRESHOLDS`); a daemon calls this once at start-up."""
    import gc

    gc.set_threshold(*GC_THRESHOLDS)
