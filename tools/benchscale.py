"""``tdbench --scale``: many concurrent connections and links on one tdrouterd.

Issue 17 asks for 10,000 client connections and 100,000 links on one router, with the router's memory per
connection and per link, the attach rate, and the forwarding rate while they are open, and no connection
or link state that costs something per message for every connection or link that exists. One round:

1. a router is started (or ``--router URL --router-pid PID`` is used), and a 1 → 1 at-least-once load is
   forwarded with nothing else open: the baseline rate and router CPU per message;
2. ``connections`` idle client connections are opened (``CONNECT_BATCH`` connects in flight at a time)
   and the time until the router has answered every OPEN gives the connection rate; the router's VmRSS
   growth over them, per connection;
3. ``links_per_connection`` links are attached on each (one session per connection; half receivers, each
   on its own address with ``RECEIVER_CREDIT`` credit, half senders, each to one of those addresses), and
   the time until the router has answered every attach gives the attach rate (also per tenth of the links,
   which shows whether attaching gets slower as links accumulate); the RSS growth per link;
4. the router's CPU while all of that sits idle (heartbeats, timers) over ``IDLE_SECONDS``;
5. the same 1 → 1 load again with everything open: if the router's CPU per message grows with the number
   of connections or links, some per-message work walks them (``--profile FILE`` records the router with
   py-spy during each phase, into ``FILE[.ROUND].PHASE``: load_before, connect, attach, idle, load_during;
   ``--no-heartbeats`` takes the idle connections' heartbeats, a cost per second, out of the comparison);
6. everything is closed.

The idle connections live in this one process, each an :class:`wire.connection.EngineConnection` on
Trio (the lean client of :mod:`tools.benchclient`), not a proton reactor each. The open-files limit is
raised to its hard limit first (``resource.setrlimit``; a router started here inherits it): each
connection is one descriptor in this process and one in the router's.
"""

from __future__ import annotations

import collections
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

import proton
import trio

from tools.benchclient import process_cpu_seconds
from tools.benchprocs import DEFAULT_ROUTER_CONFIG, RouterProcess, parse_router_url, process_memory_kb
from tools.benchrun import ClientConnections, client_settings, run_via_peer
from wire import raw
from wire.connection import ConnectionHandler, EngineConnection

DEFAULT_CONNECTIONS = 2000
DEFAULT_LINKS_PER_CONNECTION = 10
# The forwarding load before and while the connections are open (1 -> 1 at-least-once, 100 B).
LOAD_MESSAGES = 100_000
LOAD_WINDOW = 1000
# Connects in flight at a time: well under the router's listen backlog (net.core.somaxconn, 4096 here).
CONNECT_BATCH = 200
# Credit each idle receiver grants: enough that the router treats its address as having a consumer.
RECEIVER_CREDIT = 10
IDLE_SECONDS = 5.0
# Descriptors this process needs besides one per connection (the load's connections, stdio, the py-spy
# pipe, the router's stderr file...).
SPARE_FDS = 64
# How many lost idle connections have their reason kept.
CLOSE_REASONS_KEPT = 1000
PHASE_SECONDS = 600.0  # the default limit of each phase (--duration-limit)
# py-spy samples per second with --profile (its default, 100, gives too few for a load of a few seconds).
PROFILE_RATE = 500


class ScaleError(Exception):
    """The machine cannot hold the connections asked for (the open-files limit)."""


def raise_fd_limit(needed: int) -> int:
    """Raise this process's soft open-files limit to the hard limit when ``needed`` is above the soft one.
    Returns the soft limit in force; raises ScaleError when even the hard limit is too low."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if needed <= soft:
        return soft
    if hard != resource.RLIM_INFINITY and needed > hard:
        raise ScaleError(f"{needed} open files needed, the hard limit (ulimit -Hn) is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


class IdleHandler(ConnectionHandler):
    """The idle connections' events: counts OPENs and attaches answered, and anything that goes wrong."""

    def __init__(self):
        self.opened = 0
        self.links_opened = 0
        self.link_marks: list[float] = []  # perf_counter at each tenth of the links answered
        self.links_total = 0
        self.errors: list[str] = []
        self.closed = 0
        self.close_reasons: dict = {}  # reason -> count, over the first CLOSE_REASONS_KEPT closes
        self.deliveries = 0

    def on_connection_open(self, conn: EngineConnection) -> None:
        self.opened += 1

    def on_link_opened(self, conn: EngineConnection, link) -> None:
        self.links_opened += 1
        step = max(1, self.links_total // 10)
        if self.links_opened % step == 0 or self.links_opened == self.links_total:
            self.link_marks.append(time.perf_counter())

    def on_link_open(self, conn: EngineConnection, link) -> None:
        conn.refuse_link(link, "amqp:not-allowed", "tdbench --scale does not accept attaches")

    def on_link_close(self, conn: EngineConnection, link, closed: bool) -> None:
        if len(self.errors) < 10:
            cond = raw.link_object(link).remote_condition
            self.errors.append(f"link {raw.link_object(link).name} closed by the router"
                               + (f": {cond.name} {cond.description or ''}" if cond is not None else ""))

    def on_delivery(self, conn: EngineConnection, d) -> None:
        self.deliveries += 1  # nobody sends to the idle addresses: this would be a routing mistake

    def on_connection_close(self, conn: EngineConnection) -> None:
        self.closed += 1
        # Why (the first few): the router's close condition, or the transport's error (an idle time-out).
        if len(self.close_reasons) < CLOSE_REASONS_KEPT:
            name, description = raw.connection_remote_condition(raw.pointer(conn.connection))
            why = f"{name}: {description}" if name else (conn.error or "socket closed")
            self.close_reasons[why] = self.close_reasons.get(why, 0) + 1


def attach_idle_links(engine: EngineConnection, index: int, count: int) -> None:
    """``count`` links on one new session: receivers on addresses of their own and senders to them."""
    ssn = engine.connection.session()
    ssn.open()
    for j in range(count):
        address = f"scale.{index}.{j // 2}"
        if j % 2 == 0:
            link = ssn.receiver(f"scale-rx-{index}-{j}")
            link.source.address = address
            link.target.address = link.name
            link.open()
            link.flow(RECEIVER_CREDIT)
        else:
            link = ssn.sender(f"scale-tx-{index}-{j}")
            link.target.address = address
            link.source.address = link.name
            link.snd_settle_mode = proton.Link.SND_UNSETTLED
            link.open()
    engine.wake()


def _rss_mb(pid) -> float | None:
    m = process_memory_kb(pid)
    return None if m is None else round(m[0] / 1024, 1)


async def _wait_for(predicate, deadline: float) -> bool:
    """Wait until ``predicate()`` holds (True) or the deadline passes (False)."""
    while not predicate():
        if trio.current_time() >= deadline:
            return False
        await trio.sleep(0.02)
    return True


async def _load(host: str, port: int, pid: int, messages: int, phase_seconds: float) -> dict:
    r = await run_via_peer(host, port, senders=1, receivers=1, messages=messages, size=100, presettled=False,
                           window=LOAD_WINDOW, address="scale.load", warmup=messages // 20,
                           deadline=trio.current_time() + phase_seconds, router_pid=pid)
    return {k: r[k] for k in ("received", "msgs_per_s", "router_cpu_us_per_msg", "router_cpu_busy",
                              "client_cpu_busy", "p50_us", "errors")}


class _Phase:
    """Wall time, router CPU and this process's CPU over one phase, with py-spy recording the router
    into ``PROFILE.<phase>`` when asked."""

    def __init__(self, name: str, pid: int, profile: str | None):
        self.name, self.pid = name, pid
        self.spy = _start_profile(pid, f"{profile}.{name}") if profile else None

    def __enter__(self):
        self.t0, self.c0, self.own0 = time.perf_counter(), process_cpu_seconds(self.pid), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self.t0
        self.router_cpu = process_cpu_seconds(self.pid) - self.c0
        self.client_cpu = time.process_time() - self.own0
        if self.spy is not None:
            _stop_profile(self.spy)

    def figures(self, count: int, unit: str) -> dict:
        return {f"{self.name}_seconds": round(self.seconds, 2),
                f"{unit}_per_s": round(count / self.seconds, 1) if count and self.seconds > 0 else None,
                f"router_cpu_us_per_{unit}": round(self.router_cpu * 1e6 / count, 1) if count else None,
                f"{self.name}_router_busy": round(self.router_cpu / self.seconds, 2) if self.seconds > 0 else None,
                f"{self.name}_client_busy": round(self.client_cpu / self.seconds, 2) if self.seconds > 0 else None}


def no_heartbeat_router_config() -> str:
    """The bench router with no idle time-out on its listener: neither side asks for heartbeats."""
    return DEFAULT_ROUTER_CONFIG.replace("    saslMechanisms: ANONYMOUS\n",
                                         "    saslMechanisms: ANONYMOUS\n    idleTimeoutSeconds: 0\n")


async def _round(host: str, port: int, pid: int, connections: int, links: int, messages: int,
                 profile: str | None, phase_seconds: float, heartbeats: bool = True) -> dict:
    out: dict = {"connections": connections, "links": connections * links, "errors": []}
    with _Phase("load_before", pid, profile):
        out["load_before"] = await _load(host, port, pid, messages, phase_seconds)
    handler = IdleHandler()
    total = handler.links_total = connections * links
    conns = ClientConnections()
    async with trio.open_nursery() as nursery:
        engines: list[EngineConnection] = []

        async def connect(i: int) -> None:
            settings = client_settings(f"tdbench-scale-{os.getpid()}-{i}")
            if not heartbeats:
                settings.idle_timeout_seconds = 0
            engine = EngineConnection(handler, settings, server=False, remote_host=f"{host}:{port}")
            stream = await trio.open_tcp_stream(host, port)
            engines.append(engine)
            conns.adopt(stream, engine, nursery)

        rss0 = _rss_mb(pid)
        with _Phase("connect", pid, profile) as phase:
            for first in range(0, connections, CONNECT_BATCH):
                async with trio.open_nursery() as batch:
                    for i in range(first, min(connections, first + CONNECT_BATCH)):
                        batch.start_soon(connect, i)
            opened = await _wait_for(lambda: handler.opened + handler.closed >= connections,
                                     trio.current_time() + phase_seconds)
        out.update(phase.figures(connections, "connection"))
        out["connections_opened"] = handler.opened
        if not opened:
            out["errors"].append(f"only {handler.opened} of {connections} connections opened in {phase_seconds:.0f} s")
        await trio.sleep(0.5)  # let the router finish what follows an OPEN before its memory is read
        rss1 = _rss_mb(pid)
        out["rss_start_mb"], out["rss_connections_mb"] = rss0, rss1
        out["rss_per_connection_kb"] = round((rss1 - rss0) * 1024 / connections, 1)

        attached = False
        if opened:
            with _Phase("attach", pid, profile) as phase:
                for i, engine in enumerate(engines):
                    attach_idle_links(engine, i, links)
                    if i % 100 == 99:
                        await trio.lowlevel.checkpoint()  # let the drivers write while we attach
                attached = await _wait_for(lambda: handler.links_opened + len(handler.errors) >= total,
                                           trio.current_time() + phase_seconds)
            out.update(phase.figures(handler.links_opened, "link"))
            out["links_attached"] = handler.links_opened
            # Links per second over each tenth of the attaches, first to last.
            marks = [phase.t0] + handler.link_marks
            step = max(1, total // 10)
            out["links_per_s_by_tenth"] = [round(step / (b - a)) if b > a else None
                                           for a, b in zip(marks, marks[1:])]
            if not attached:
                out["errors"].append(f"only {handler.links_opened} of {total} links attached in "
                                     f"{phase_seconds:.0f} s")
            await trio.sleep(0.5)
            rss2 = _rss_mb(pid)
            out["rss_links_mb"] = rss2
            out["rss_per_link_kb"] = round((rss2 - rss1) * 1024 / handler.links_opened, 2) \
                if handler.links_opened else None

        if attached:
            with _Phase("idle", pid, profile) as phase:
                await trio.sleep(IDLE_SECONDS)
            out["idle_router_cpu_percent"] = round(phase.router_cpu * 100 / phase.seconds, 1)
            out["idle_client_cpu_percent"] = round(phase.client_cpu * 100 / phase.seconds, 1)
            with _Phase("load_during", pid, profile):
                out["load_during"] = await _load(host, port, pid, messages, phase_seconds)
            out["rss_after_load_mb"] = _rss_mb(pid)
        out["errors"] += handler.errors
        out["connections_lost"] = handler.closed
        out["close_reasons"] = dict(handler.close_reasons)  # before our own closes below add theirs
        out["unexpected_deliveries"] = handler.deliveries
        await conns.finish(nursery)
    return out


def _start_profile(pid: int, path: str) -> subprocess.Popen:
    # py-spy is installed in the project's venv beside the interpreter (pyproject.toml's dev extras).
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if not os.path.exists(spy):
        spy = shutil.which("py-spy") or "py-spy"
    return subprocess.Popen([spy, "record", "-p", str(pid), "-f", "raw", "-o", path, "--rate", str(PROFILE_RATE),
                             "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop_profile(spy: subprocess.Popen) -> None:
    spy.send_signal(2)  # SIGINT: py-spy writes what it recorded and exits
    try:
        spy.wait(30)
    except subprocess.TimeoutExpired:
        spy.kill()
        spy.wait()


def profile_top(path: str, count: int = 10) -> dict:
    """The entries of one ``--profile`` file (py-spy's raw format: one ``frame;frame;... samples`` line per
    stack) that hold the most samples: ``self`` (the innermost frame, where the time went) and
    ``inclusive`` (any frame of the stack, the interpreter's and the daemon's start-up frames left out),
    each a list of (percent of the samples, "function (file)"), and the number of ``samples``."""
    selfc: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    total = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not stack:
                continue
            samples = int(n)
            total += samples
            frames = [_frame_name(fr) for fr in stack.split(";")]
            selfc[frames[-1]] += samples
            for fr in set(frames):
                if not fr.startswith(_PROFILE_FRAMES_LEFT_OUT):
                    inclusive[fr] += samples

    def top(counter) -> list:
        return [(round(100 * c / total, 1), fr) for fr, c in counter.most_common(count)] if total else []

    return {"samples": total, "self": top(selfc), "inclusive": top(inclusive)}


# Frames every sample has (the interpreter's start, click, the daemon's main and Trio's run loop).
_PROFILE_FRAMES_LEFT_OUT = ("_run_module_as_main ", "_run_code ", "<module> ", "Command.", "Context.invoke ",
                            "main ", "run (trio", "unrolled_run ")


def _frame_name(frame: str) -> str:
    """py-spy's "function (file:line)" without the line, so that one function's lines count together."""
    head, sep, tail = frame.rpartition(":")
    return f"{head})" if sep and tail.endswith(")") and tail[:-1].isdigit() else frame


def format_profile_top(path: str, count: int = 10) -> str:
    top = profile_top(path, count)
    lines = [f"{path}: {top['samples']} samples"]
    for kind in ("self", "inclusive"):
        lines.append(f"  {kind}:")
        lines += [f"    {pct:5.1f}%  {frame}" for pct, frame in top[kind]]
    return "\n".join(lines)


def run_scale(*, connections: int = DEFAULT_CONNECTIONS, links_per_connection: int = DEFAULT_LINKS_PER_CONNECTION,
              rounds: int = 1, messages: int = LOAD_MESSAGES, router: str | None = None,
              router_pid: int | None = None, profile: str | None = None,
              phase_seconds: float = PHASE_SECONDS, heartbeats: bool = True) -> dict:
    """Run ``rounds`` rounds (each with a router of its own unless ``router`` is given); the report dict.
    ``heartbeats=False``: no idle time-out on either side of the idle connections (the router started here
    gets ``idleTimeoutSeconds: 0``), which takes the per-second cost of their heartbeats out of the figures."""
    limit = raise_fd_limit(connections + SPARE_FDS)
    report: dict = {"kind": "scale", "connections": connections, "links_per_connection": links_per_connection,
                    "heartbeats": heartbeats,
                    "open_files_limit": limit, "rounds": []}
    for n in range(rounds):
        proc = None
        try:
            if router:
                host, port = parse_router_url(router)
                pid = router_pid
            else:
                proc = RouterProcess(None if heartbeats else no_heartbeat_router_config()).start()
                host, port, pid = "127.0.0.1", proc.port, proc.pid
            path = f"{profile}.{n}" if profile and rounds > 1 else profile  # PATH[.round].phase
            report["rounds"].append(trio.run(_round, host, port, pid, connections, links_per_connection,
                                             messages, path, phase_seconds, heartbeats))
        finally:
            if proc is not None:
                proc.stop()
    problems = []
    for r in report["rounds"]:
        problems += r["errors"]
        for phase in ("load_before", "load_during"):
            if phase in r:
                problems += [f"{phase}: {e}" for e in r[phase]["errors"]]
        if r["connections_lost"]:
            problems.append(f"{r['connections_lost']} idle connections were lost: {r['close_reasons']}")
        if r["unexpected_deliveries"]:
            problems.append(f"{r['unexpected_deliveries']} deliveries reached idle links")
    report["problems"] = problems
    report["ok"] = not problems
    return report


def _mr(values, digits: int = 1) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    fmt = f"{{:.{digits}f}}"
    med = fmt.format(statistics.median(vals))
    return med if len(vals) == 1 else f"{med} ({fmt.format(min(vals))}–{fmt.format(max(vals))})"


def format_scale(rep: dict) -> str:
    rs = rep["rounds"]

    def col(key: str, digits: int = 1) -> str:
        return _mr([r.get(key) for r in rs], digits)

    def load(phase: str, key: str, digits: int) -> str:
        return _mr([r[phase][key] if phase in r else None for r in rs], digits)

    lines = [f"tdbench --scale: {rep['connections']} connections x {rep['links_per_connection']} links "
             f"({rep['connections'] * rep['links_per_connection']} links"
             f"{'' if rep.get('heartbeats', True) else ', no heartbeats'}), {len(rs)} round(s); median (range)",
             f"connections/s {col('connection_per_s', 0)}; "
             f"router CPU per connection {col('router_cpu_us_per_connection', 0)} "
             f"us (router busy {col('connect_router_busy', 2)}, client busy {col('connect_client_busy', 2)})",
             f"router RSS per connection {col('rss_per_connection_kb')} KiB",
             f"links attached/s {col('link_per_s', 0)}; router CPU per attach {col('router_cpu_us_per_link', 0)} us "
             f"(router busy {col('attach_router_busy', 2)}, client busy {col('attach_client_busy', 2)})",
             f"router RSS per link {col('rss_per_link_kb', 2)} KiB",
             f"router RSS MiB: start {col('rss_start_mb')}, with connections {col('rss_connections_mb')}, "
             f"with links {col('rss_links_mb')}",
             f"router CPU idle, all open: {col('idle_router_cpu_percent')} % of a core "
             f"(this client {col('idle_client_cpu_percent')} %)",
             f"1 -> 1 load          {'msgs/s':>22} {'router CPU us/msg':>22}"]
    for phase, label in (("load_before", "nothing else open"), ("load_during", "all open")):
        lines.append(f"  {label:18} {load(phase, 'msgs_per_s', 0):>22} {load(phase, 'router_cpu_us_per_msg', 2):>22}")
    for r in rs:
        if r.get("links_per_s_by_tenth"):
            lines.append(f"attach rate by tenth (links/s): {r['links_per_s_by_tenth']}")
    for p in rep["problems"]:
        lines.append(f"FAILED: {p}")
    return "\n".join(lines)


if __name__ == "__main__":
    # python -m tools.benchscale FILE...: the top entries of --profile files (the README's "py-spy top").
    for arg in sys.argv[1:]:
        print(format_profile_top(arg))
