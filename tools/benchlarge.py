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


# -- the broker: one huge durable message stored, the broker restarted, the message delivered -------------

BROKER_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>benchlarge</name>
  <persistence-enabled>true</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP;amqpMinLargeMessageSize={min_large}</acceptor></acceptors>
  <addresses><address name="big"><anycast><queue name="big"/></anycast></address></addresses>
</core></configuration>
"""
# How often the broker's RSS is sampled while it stores or delivers (VmHWM at the end catches the peak
# between samples too).
BROKER_SAMPLE_SECONDS = 0.05
BROKER_TIMEOUT = 600.0


class _Sampler:
    """Samples a process's RSS in a thread (the proton client blocks the main one)."""

    def __init__(self, pid: int) -> None:
        import threading

        from tools.benchprocs import RssSampler

        self.rss = RssSampler(pid)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(BROKER_SAMPLE_SECONDS):
            self.rss.sample()

    def stop(self) -> dict:
        self.done.set()
        self.thread.join()
        [m] = self.rss.result()["router_rss_mb"]
        return {"rss_start_mb": m["start"], "rss_peak_mb": m["peak"], "rss_growth_mb": m["growth"],
                "hwm_mb": m["hwm"]}


def run_broker_large(size: int = HUGE_SIZE, *, restart: bool = True, min_large: int = 102400) -> dict:
    """One ``size``-byte durable message sent straight to a tdbroker (stored as a large message: a file of
    its own), the broker restarted (``restart``), the message received and accepted: seconds and the
    broker's RSS for each half. The client is proton's blocking API (the client's memory is not measured).
    ``min_large``: the acceptor's amqpMinLargeMessageSize (-1: the message is held in memory and journaled
    whole, as before large messages, for comparison)."""
    import hashlib
    import pathlib
    import tempfile
    import time

    from proton import Message
    from proton.utils import BlockingConnection

    from tools.daemons import BROKER, DaemonProcess

    block = hashlib.sha256(b"benchlarge").digest() * 2048
    body = (block * (size // len(block) + 1))[:size]
    digest = hashlib.sha256(body).hexdigest()
    report: dict = {"kind": "broker-large", "size": size, "restart": restart, "min_large": min_large}
    with tempfile.TemporaryDirectory(prefix="benchlarge-") as tmp:
        conf = pathlib.Path(tmp) / "broker.xml"
        conf.write_text(BROKER_XML.format(journal=pathlib.Path(tmp) / "journal", min_large=min_large))
        broker = DaemonProcess(BROKER, conf, stderr_path=pathlib.Path(tmp) / "broker.stderr", stderr_append=True)
        broker.start()
        try:
            url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
            sampler = _Sampler(broker.proc.pid)
            t0 = time.monotonic()
            conn = BlockingConnection(url, timeout=BROKER_TIMEOUT)
            try:
                conn.create_sender("big").send(Message(body=body, durable=True))  # returns once accepted
            finally:
                conn.close()
            report["store_seconds"] = round(time.monotonic() - t0, 2)
            report["store"] = sampler.stop()
            del body
            files = list((pathlib.Path(tmp) / "large-messages").glob("*.msg"))
            report["large_message_files"] = len(files)
            journal_bytes = sum(p.stat().st_size for p in (pathlib.Path(tmp) / "journal").glob("*.tdj"))
            report["journal_bytes"] = journal_bytes
            if restart:
                broker.stop()
                broker.start()
                url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
            sampler = _Sampler(broker.proc.pid)
            t0 = time.monotonic()
            conn = BlockingConnection(url, timeout=BROKER_TIMEOUT)
            try:
                rcv = conn.create_receiver("big", credit=1)
                msg = rcv.receive(timeout=BROKER_TIMEOUT)
                rcv.accept()
                got = hashlib.sha256(msg.body).hexdigest() if isinstance(msg.body, (bytes, memoryview)) else None
                del msg
            finally:
                conn.close()
            report["deliver_seconds"] = round(time.monotonic() - t0, 2)
            report["deliver"] = sampler.stop()
            report["intact"] = got == digest
            deadline = time.monotonic() + 30
            while list((pathlib.Path(tmp) / "large-messages").glob("*.msg")) and time.monotonic() < deadline:
                time.sleep(0.05)
            report["file_removed"] = not list((pathlib.Path(tmp) / "large-messages").glob("*.msg"))
        finally:
            code = broker.stop()
        report["exit_status"] = code
    report["ok"] = bool(report.get("intact") and report.get("file_removed") and code in (0, None))
    report["ok"] = report["ok"] and (min_large < 0 or report.get("large_message_files") == 1)
    return report


def format_broker_large(rep: dict) -> str:
    s, d = rep["store"], rep["deliver"]
    kind = "a large message" if rep["min_large"] >= 0 else "amqpMinLargeMessageSize=-1: held whole"
    return (f"tdbroker, one {_size_label(rep['size'])} durable message ({kind}), sent straight to the "
            f"broker{', broker restarted,' if rep['restart'] else ''} then received:\n"
            f"  store:   {rep['store_seconds']} s, broker RSS {s['rss_start_mb']} -> peak {s['rss_peak_mb']} MiB "
            f"(growth {s['rss_growth_mb']} MiB, VmHWM {s['hwm_mb']} MiB); journal {rep['journal_bytes']} bytes, "
            f"{rep['large_message_files']} large message file\n"
            f"  deliver: {rep['deliver_seconds']} s, broker RSS {d['rss_start_mb']} -> peak {d['rss_peak_mb']} MiB "
            f"(growth {d['rss_growth_mb']} MiB, VmHWM {d['hwm_mb']} MiB); intact: {rep['intact']}, "
            f"file removed: {rep['file_removed']}")


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.benchlarge --broker [--size BYTES] [--no-restart] [--json]``: the broker row
    (``tdbench --large`` runs the router rows)."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m tools.benchlarge", description=main.__doc__)
    ap.add_argument("--broker", action="store_true", required=True,
                    help="one huge durable message through a tdbroker (stored as a large message)")
    ap.add_argument("--size", type=int, default=HUGE_SIZE, help="message size in bytes")
    ap.add_argument("--no-restart", action="store_true", help="deliver without restarting the broker first")
    ap.add_argument("--min-large-message-size", type=int, default=102400,
                    help="the acceptor's amqpMinLargeMessageSize (-1: no large messages, for comparison)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rep = run_broker_large(args.size, restart=not args.no_restart, min_large=args.min_large_message_size)
    print(json.dumps(rep) if args.json else format_broker_large(rep))
    return 0 if rep["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
