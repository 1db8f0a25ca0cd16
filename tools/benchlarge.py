"""``tdbench --large``: large messages through tdrouterd — CPU per message and the routers' memory.

The rows of issue 17's table that are not small messages: 5 kB–1 MB messages with a window of 100
unsettled per sender through one router, then single huge messages (200 MB by default) through one
router and through a line of three. Each row runs against a router started for it (so its RSS growth
is that row's alone), 1 → 1 at-least-once, with the lean client of :mod:`tools.benchclient` (which reads a
message arriving in parts as it comes and keeps only its first 64 KiB, so the client's memory does not
grow with the message). Rows are interleaved round by round (``rounds``), so a busy spell on this shared
machine spreads over all rows; the table gives the median and the range of each figure.

Figures per row: router CPU per message (utime+stime from /proc/PID/stat over the measured window,
summed over the routers of a line), messages per second, and each router's RSS (VmRSS at the start, the
highest VmRSS sampled every 50 ms, VmHWM at the end; see :class:`tools.benchprocs.RssSampler`). A huge
message row says whether the message was delivered, and with which outcome if not.
"""

from __future__ import annotations

import statistics

from tools.bench import run_bench
from tools.benchrun import STALL_SECONDS

# Sizes (bytes) of the windowed rows and the window: what issue 17's "5-100 kB" and "1 MB messages,
# window 100" rows measure.
LARGE_SIZES = (5_000, 10_000, 20_000, 50_000, 100_000, 1_000_000)
LARGE_WINDOW = 100
# Each windowed row moves about this many bytes (within the message-count bounds below): long enough to
# measure, a few seconds per row.
ROW_BYTES = 400_000_000
MIN_MESSAGES, MAX_MESSAGES = 400, 20_000
HUGE_SIZE = 200_000_000
# A line of three routers is two inter-router hops.
LINE_HOPS = 2
ROW_SECONDS = 300.0
# A huge message may show no progress at the client for a long time while routers hold it (the whole
# message is read before it is forwarded, today): the watchdog waits this long before calling it stuck.
HUGE_STALL_SECONDS = 90.0


def messages_for(size: int) -> int:
    return max(MIN_MESSAGES, min(MAX_MESSAGES, ROW_BYTES // size))


def plan(sizes=LARGE_SIZES, huge: int = HUGE_SIZE) -> list[dict]:
    """The rows: keyword arguments for :func:`tools.bench.run_bench` with a label."""
    rows = [dict(label=f"{_size_label(s)}, window {LARGE_WINDOW}", size=s, messages=messages_for(s),
                 window=LARGE_WINDOW, hops=0) for s in sizes]
    if huge:
        rows.append(dict(label=f"one {_size_label(huge)} message, one router", size=huge, messages=1, window=1,
                         hops=0))
        rows.append(dict(label=f"one {_size_label(huge)} message, 3-router line", size=huge, messages=1,
                         window=1, hops=LINE_HOPS))
    return rows


def _size_label(size: int) -> str:
    for unit, n in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= n and size % (n // 10) == 0:
            return f"{size / n:g} {unit}"
    return f"{size} B"


def run_large(*, rounds: int = 3, sizes=LARGE_SIZES, huge: int = HUGE_SIZE,
              duration_limit: float = ROW_SECONDS) -> dict:
    """Run every row ``rounds`` times, interleaved; returns the report (what ``--json`` prints)."""
    rows = plan(sizes, huge)
    results: dict = {r["label"]: [] for r in rows}
    for _ in range(rounds):
        for row in rows:
            rep = run_bench(senders=1, receivers=1, messages=row["messages"], size=row["size"],
                            window=row["window"], hops=row["hops"], direct=False, duration_limit=duration_limit,
                            stall_seconds=HUGE_STALL_SECONDS if row["messages"] == 1 else STALL_SECONDS)
            results[row["label"]].append(_summary(rep))
    return {"kind": "large", "rounds": rounds,
            "rows": [dict(label=r["label"], size=r["size"], messages=r["messages"], window=r["window"],
                          routers=r["hops"] + 1, runs=results[r["label"]]) for r in rows],
            # A huge message that is not delivered is a finding, not a failure of the bench.
            "ok": all(run["delivered"] or run["messages"] == 1 for r in rows for run in results[r["label"]])}


def _summary(rep: dict) -> dict:
    x = rep.get("router") or {}
    rss = x.get("router_rss_mb") or []
    return {
        "messages": rep["messages"],
        "delivered": rep["ok"],
        "received": x.get("received"),
        "outcomes": x.get("non_accepted"),
        "aborted": x.get("aborted"),
        "seconds": x.get("measured_seconds"),
        "msgs_per_s": x.get("msgs_per_s"),
        "router_cpu_us_per_msg": x.get("router_cpu_us_per_msg"),
        "router_busy": x.get("router_cpu_busy"),
        "rss_growth_mb": [m["growth"] for m in rss],
        "rss_peak_mb": [m["peak"] for m in rss],
        "hwm_mb": [m["hwm"] for m in rss],
        "problems": rep["problems"],
    }


def _median_range(values, scale: float = 1.0, digits: int = 0) -> str:
    vals = [v * scale for v in values if v is not None]
    if not vals:
        return "-"
    fmt = f"{{:.{digits}f}}"
    med = fmt.format(statistics.median(vals))
    return med if len(vals) == 1 else f"{med} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def format_large(rep: dict) -> str:
    lines = [f"tdbench --large: 1 -> 1 at-least-once, a router started per row, {rep['rounds']} round(s) "
             f"interleaved; median (range)",
             f"{'row':38} {'router CPU per msg':>26} {'msgs/s (s for one)':>22} "
             f"{'RSS growth MiB (max router)':>28}  delivered"]
    for row in rep["rows"]:
        runs = row["runs"]
        cpu = [r["router_cpu_us_per_msg"] for r in runs]
        big = row["size"] >= 1_000_000
        cpu_s = _median_range(cpu, 1e-3, 2) + " ms" if big else _median_range(cpu, 1, 0) + " µs"
        growth = [max(r["rss_growth_mb"]) if r["rss_growth_mb"] else None for r in runs]
        delivered = sum(1 for r in runs if r["delivered"])
        note = f"{delivered}/{len(runs)}"
        failed = [r for r in runs if not r["delivered"]]
        if failed:
            outs = {k for r in failed for k in (r["outcomes"] or {})}
            if any(r["aborted"] for r in failed):
                outs.add("aborted")
            note += f" (not delivered: {', '.join(sorted(outs)) or 'stalled'})"
        if row.get("messages", 0) == 1:
            rate = _median_range([r["seconds"] if r["delivered"] else None for r in runs], 1, 1) + " s"
        else:
            rate = _median_range([r["msgs_per_s"] for r in runs], 1, 0)
        lines.append(f"{row['label']:38} {cpu_s:>26} {rate:>22} "
                     f"{_median_range(growth):>28}  {note}")
    return "\n".join(lines)
