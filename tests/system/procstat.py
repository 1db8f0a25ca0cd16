"""A process's memory as the kernel reports it (/proc/PID/status), for tests that bound a daemon's memory."""

from __future__ import annotations

__all__ = ["memory_mib", "rss_kib", "rss_mib"]


def _status_kib(pid: int, fields: tuple[str, ...]) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in fields:
                out[key] = int(value.split()[0])
    missing = set(fields) - set(out)
    if missing:
        raise AssertionError(f"no {', '.join(sorted(missing))} for pid {pid}")
    return out


def rss_kib(pid: int) -> int:
    """Resident set size (KiB)."""
    return _status_kib(pid, ("VmRSS",))["VmRSS"]


def rss_mib(pid: int) -> float:
    """Resident set size (MiB, with its fraction)."""
    return rss_kib(pid) / 1024


def memory_mib(pid: int, fields: tuple[str, ...] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """The named fields (resident size, its high-water mark...) in whole MiB."""
    return {k: v // 1024 for k, v in _status_kib(pid, fields).items()}
