"""``tdbench``: throughput, latency and CPU per message of one router hop, next to the same load direct.

It runs S senders -> router -> R receivers on one address in this one process (the lean raw-engine
client of :mod:`tools.benchclient`), measures after a warm-up (the first 5% of messages), then runs the
same load sender-to-receiver with no router and prints both with their ratio. By default it starts its
own ``tdrouterd`` (one listener on 127.0.0.1, an ephemeral port); ``--router URL`` uses a running one.

Figures: msgs/s received over the measured window; latency (send -> receive, from a timestamp in each
body) p50/p99/max in µs; the router's CPU (utime+stime from /proc/PID/stat) and this process's own CPU
over the same window, per measured message. A run that loses messages or gets any outcome other than
accepted (at-least-once) says so and exits with status 1. Only 127.0.0.1 is ever contacted.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from urllib.parse import urlparse

import click
import trio

from tools.benchclient import MessageTemplate, run_direct, run_via_peer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
LISTENING_RE = re.compile(r"^tdrouterd: listening on (?P<host>.+):(?P<port>\d+) \(listener [^,]*, role (?P<role>[^)]*)\)")
READY_RE = re.compile(r"^tdrouterd: ready \(router id (?P<id>.*)\)")
ROUTER_START_SECONDS = 15.0
WARMUP_FRACTION = 0.05

DEFAULT_ROUTER_CONFIG = """\
router {
    mode: standalone
    id: tdbench.router
}

listener {
    name: bench
    host: 127.0.0.1
    port: 0
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
"""


class BenchError(Exception):
    pass


class RouterProcess:
    """A tdrouterd subprocess for the bench: started from a config, its port read from stdout."""

    def __init__(self, config_text: str | None = None, config_path: str | None = None):
        self.tmp = tempfile.TemporaryDirectory(prefix="tdbench-")
        if config_path is None:
            config_path = os.path.join(self.tmp.name, "router.conf")
            with open(config_path, "w") as f:
                f.write(config_text or DEFAULT_ROUTER_CONFIG)
        self.config_path = config_path
        self.stderr_path = os.path.join(self.tmp.name, "router.stderr")
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.router_id: str | None = None

    def start(self) -> "RouterProcess":
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "router.daemon", "-c", self.config_path],
            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._stderr,
        )
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + ROUTER_START_SECONDS
        buf = b""
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._fail(f"did not report ready within {ROUTER_START_SECONDS:.0f} s")
                if not sel.select(remaining):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    self._fail(f"exited with status {self.proc.wait(timeout=5)} before it was ready")
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    text = line.decode("utf-8", "replace")
                    m = LISTENING_RE.match(text)
                    if m and self.port is None:
                        self.port = int(m["port"])
                    m = READY_RE.match(text)
                    if m:
                        if self.port is None:
                            self._fail("was ready without reporting a listener")
                        self.router_id = m["id"]
                        return self
        finally:
            sel.close()

    def _fail(self, why: str):
        self.stop()
        raise BenchError(f"tdrouterd {why}\n--- stderr ---\n{self.stderr_tail()}")

    def stderr_tail(self, lines: int = 40) -> str:
        try:
            with open(self.stderr_path, "rb") as f:
                text = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            code = self.proc.returncode
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()
        self.tmp.cleanup()
        return code

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None


def parse_router_url(url: str) -> tuple[str, int]:
    """``amqp://127.0.0.1:5672``, ``127.0.0.1:5672`` or ``localhost:5672`` -> (host, port); local only."""
    u = urlparse(url if "://" in url else f"amqp://{url}")
    host = u.hostname or "127.0.0.1"
    if host == "localhost":
        host = "127.0.0.1"
    if host != "127.0.0.1":
        raise click.BadParameter("tdbench only talks to 127.0.0.1", param_hint="--router")
    return host, u.port or 5672


async def _bench(opts: dict, host: str | None, port: int | None, router_pid: int | None) -> dict:
    deadline = trio.current_time() + opts["duration_limit"]
    warmup = int(opts["messages"] * WARMUP_FRACTION)
    common = dict(messages=opts["messages"], size=opts["size"], presettled=opts["presettled"],
                  window=opts["window"], address=opts["address"], warmup=warmup, deadline=deadline)
    out: dict = {}
    if host is not None:
        out["router"] = await run_via_peer(host, port, senders=opts["senders"], receivers=opts["receivers"],
                                           router_pid=router_pid, **common)
    if opts["direct"]:
        out["direct"] = await run_direct(senders=opts["senders"], **common)
    return out


def run_bench(*, senders: int = 1, receivers: int = 1, messages: int = 200000, size: int = 100,
              presettled: bool = False, window: int = 1000, address: str = "bench",
              router_config: str | None = None, router: str | None = None, router_pid: int | None = None,
              direct: bool = True, duration_limit: float = 120.0, no_router: bool = False) -> dict:
    """Run the bench and return the report dict (what ``--json`` prints)."""
    opts = dict(senders=senders, receivers=receivers, messages=messages, size=size, presettled=presettled,
                window=window, address=address, direct=direct, duration_limit=duration_limit)
    MessageTemplate(size)  # validates the size
    proc = None
    host = port = None
    report: dict = {
        "senders": senders, "receivers": receivers, "messages": messages, "size": size,
        "mode": "presettled" if presettled else "at-least-once", "window": window, "address": address,
        "warmup_messages": int(messages * WARMUP_FRACTION),
    }
    try:
        if router:
            host, port = parse_router_url(router)
            report["router_url"] = f"amqp://{host}:{port}"
        elif not no_router:
            proc = RouterProcess(config_path=router_config).start()
            host, port, router_pid = "127.0.0.1", proc.port, proc.pid
            report["router_url"] = f"amqp://{host}:{port}"
        report.update(trio.run(_bench, opts, host, port, router_pid))
    finally:
        if proc is not None:
            code = proc.stop()
            if code not in (0, None):
                report.setdefault("errors", []).append(f"tdrouterd exited with status {code}")
    problems = list(report.get("errors", []))
    for phase in ("router", "direct"):
        r = report.get(phase)
        if r is None:
            continue
        for e in r["errors"]:
            problems.append(f"{phase}: {e}")
        if r["received"] != r["sent"] or r["sent"] != messages:
            problems.append(f"{phase}: sent {r['sent']} of {messages}, received {r['received']}")
        if not presettled:
            if r["non_accepted"]:
                problems.append(f"{phase}: outcomes other than accepted: {r['non_accepted']}")
            if r["accepted"] != messages:
                problems.append(f"{phase}: {r['accepted']} of {messages} accepted")
    if "router" in report and "direct" in report and report["direct"]["msgs_per_s"]:
        report["ratio"] = round(report["router"]["msgs_per_s"] / report["direct"]["msgs_per_s"], 3)
    report["problems"] = problems
    report["ok"] = not problems
    return report


def _fmt(v, width: int, digits: int = 0) -> str:
    if v is None:
        return "-".rjust(width)
    return f"{v:{width}.{digits}f}"


def format_report(rep: dict) -> str:
    s, r = rep["senders"], rep["receivers"]
    lines = [
        f"tdbench: {s} sender{'s' if s != 1 else ''} -> {r} receiver{'s' if r != 1 else ''}, "
        f"{rep['messages']} x {rep['size']} B, {rep['mode']}, window {rep['window']}"
        + (f", router {rep['router_url']}" if rep.get("router_url") else ""),
        f"{'':12}{'msgs/s':>9}{'p50 us':>9}{'p99 us':>9}{'max us':>9}{'router CPU us/msg':>19}{'client CPU us/msg':>19}",
    ]
    for phase, label in (("router", "via router"), ("direct", "direct")):
        x = rep.get(phase)
        if x is None:
            continue
        lines.append(
            f"{label:12}{_fmt(x['msgs_per_s'], 9)}{_fmt(x['p50_us'], 9)}{_fmt(x['p99_us'], 9)}{_fmt(x['max_us'], 9)}"
            f"{_fmt(x['router_cpu_us_per_msg'], 19, 1)}{_fmt(x['client_cpu_us_per_msg'], 19, 1)}"
        )
    busy = []
    for phase, label in (("router", "via router"), ("direct", "direct")):
        x = rep.get(phase)
        if x is not None and x["client_cpu_busy"] is not None:
            router_busy = f"router {x['router_cpu_busy']:.0%}, " if x["router_cpu_busy"] is not None else ""
            busy.append(f"{label}: {router_busy}client {x['client_cpu_busy']:.0%}")
    if busy:
        lines.append("CPU busy (of one core): " + "; ".join(busy))
    if "ratio" in rep:
        lines.append(f"ratio (router/direct): {rep['ratio']:.2f}")
    if rep.get("direct") and s > 1:
        lines.append("(direct: each sender has its own receiving end)")
    for p in rep["problems"]:
        lines.append(f"FAILED: {p}")
    return "\n".join(lines)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--senders", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--receivers", default=1, show_default=True, type=click.IntRange(1, 256))
@click.option("--messages", default=200000, show_default=True, type=click.IntRange(1))
@click.option("--size", default=100, show_default=True, type=click.IntRange(8), help="Body size in bytes.")
@click.option("--presettled/--at-least-once", default=False, show_default=True)
@click.option("--window", default=1000, show_default=True, type=click.IntRange(1),
              help="Most unsettled deliveries per sender (at-least-once).")
@click.option("--address", default="bench", show_default=True)
@click.option("--router-config", type=click.Path(exists=True, dir_okay=False),
              help="Start tdrouterd with this configuration instead of a default one.")
@click.option("--router", "router_url", help="Use a running router at this URL (127.0.0.1 only).")
@click.option("--router-pid", type=int, help="The running router's pid, to report its CPU (with --router).")
@click.option("--direct/--no-direct", default=True, show_default=True,
              help="Also run the same load sender-to-receiver without a router.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--duration-limit", default=120.0, show_default=True, type=click.FloatRange(1),
              help="Stop the whole run after this many seconds.")
def main(senders, receivers, messages, size, presettled, window, address, router_config, router_url, router_pid,
         direct, as_json, duration_limit) -> None:
    """tdbench: measure one router hop (throughput, latency, CPU per message) against a direct run."""
    if router_config and router_url:
        raise click.UsageError("give --router-config or --router, not both")
    try:
        rep = run_bench(senders=senders, receivers=receivers, messages=messages, size=size, presettled=presettled,
                        window=window, address=address, router_config=router_config, router=router_url,
                        router_pid=router_pid, direct=direct, duration_limit=duration_limit)
    except BenchError as exc:
        click.echo(f"tdbench: {exc}", err=True)
        sys.exit(2)
    click.echo(json.dumps(rep) if as_json else format_report(rep))
    sys.exit(0 if rep["ok"] else 1)


if __name__ == "__main__":
    main()
