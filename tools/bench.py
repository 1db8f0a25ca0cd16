"""``tdbench``: throughput, latency and CPU per message of one router hop, next to the same load direct.

``tdbench --brokered`` measures the store-and-forward path instead: producer -> router -> tdbroker ->
router -> consumer (a waypoint address served by a tdbroker attached as a ``<peer>``), durable and
non-durable, with producer and consumer running at the same time; ``--rabbitmq start`` (a private node,
see ``tools/rabbitmq.py``) or ``--rabbitmq URL`` drives RabbitMQ's AMQP 1.0 queue with the same
client and load in the same run. Durable runs compare like with like: both brokers accept a durable
message only after it is fsynced (tdbroker's journal with journal-sync-non-transactional true, RabbitMQ's
confirms for persistent messages on a durable queue).

``tdbench --large`` (:mod:`tools.benchlarge`) measures large messages (5 kB-1 MB with a window of 100, one
200 MB message through one router and a line of three) with the routers' RSS; ``tdbench --scale``
(:mod:`tools.benchscale`) many idle connections and links on one router.

By default it runs S senders -> router -> R receivers on one address in this one process (the lean raw-engine
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
import shutil
import signal
import sys
import tempfile

import click
import trio

from tools.benchclient import MessageTemplate, process_cpu_seconds
from tools.benchrun import STALL_SECONDS, run_direct, run_via_peer
from tools.security import Security, SecurityOptionError, click_security_options
from tools.benchprocs import (  # noqa: F401 - re-exported: tests and scripts import them from here
    BROKER_XML, DEFAULT_ROUTER_CONFIG, MAX_HOPS, REPO_ROOT, BenchError, BrokerProcess, RouterProcess,
    parse_router_url, start_line,
)

WARMUP_FRACTION = 0.05

BROKERED_MESSAGES = 30000
# The waypoint address of the brokered run, and the queue RabbitMQ declares (durable) for its run.
BROKERED_ADDRESS = "queue"
RABBIT_QUEUE = "/queue/tdbench-{kind}"   # RabbitMQ 3.10 AMQP 1.0: declares a durable queue on attach
RABBIT_ADDRESS = "rq.{kind}"              # the router's waypoint address auto-linked to that queue

# The router in front of RabbitMQ: the same waypoint flow, the broker side attached by the router's
# auto-links (RabbitMQ has no Artemis-style <peer> connection).
RABBIT_ROUTER_SECTION = """
address {{
    prefix: rq
    waypoint: yes
}}
connector {{
    name: rabbitmq
    host: {host}
    port: {port}
    role: route-container
    retryDelaySeconds: 0.2
    linkCapacity: {capacity}
}}
"""
RABBIT_AUTOLINK = """
autoLink {{
    address: {address}
    direction: {direction}
    connection: rabbitmq
    externalAddress: {queue}
}}
"""

# Brokered runs: the routers' linkCapacity (credit per link; Dispatch's default 250), the same for the
# tdbroker and the RabbitMQ router. At 250 the router hands the broker's phase-1 sender credit back 25
# at a time and that round trip, not any process's CPU, set the pace; 1000 is Artemis' default window.
BROKERED_LINK_CAPACITY = 1000

WAYPOINT_SECTION = """
address {
    prefix: queue
    waypoint: yes
}
"""

async def _bench(opts: dict, host: str | None, port: int | None, router_pid: int | None) -> dict:
    deadline = trio.current_time() + opts["duration_limit"]
    warmup = int(opts["messages"] * WARMUP_FRACTION)
    common = dict(messages=opts["messages"], size=opts["size"], presettled=opts["presettled"],
                  window=opts["window"], address=opts["address"], warmup=warmup, deadline=deadline)
    out: dict = {}
    if host is not None:
        out["router"] = await run_via_peer(host, port, senders=opts["senders"], receivers=opts["receivers"],
                                           router_pid=router_pid, rx_host=opts.get("rx_host"),
                                           rx_port=opts.get("rx_port"), records=opts.get("records"),
                                           security=opts.get("security"), stall_seconds=opts["stall_seconds"],
                                           **common)
    if opts["direct"]:
        out["direct"] = await run_direct(senders=opts["senders"], **common)
    return out


def run_bench(*, senders: int = 1, receivers: int = 1, messages: int = 200000, size: int = 100,
              presettled: bool = False, window: int = 1000, address: str = "bench",
              router_config: str | None = None, router: str | None = None, router_pid: int | None = None,
              direct: bool = True, duration_limit: float = 120.0, no_router: bool = False,
              hops: int = 0, records: str | None = None, security=None,
              stall_seconds: float = STALL_SECONDS) -> dict:
    """Run the bench and return the report dict (what ``--json`` prints). ``security``: a
    :class:`tools.security.Security` for the connections to the router (TLS, SASL login)."""
    opts = dict(senders=senders, receivers=receivers, messages=messages, size=size, presettled=presettled,
                window=window, address=address, direct=direct, duration_limit=duration_limit, records=records,
                security=security, stall_seconds=stall_seconds)
    MessageTemplate(size)  # validates the size
    proc = None
    mesh: list = []
    host = port = None
    report: dict = {
        "senders": senders, "receivers": receivers, "messages": messages, "size": size,
        "mode": "presettled" if presettled else "at-least-once", "window": window, "address": address,
        "warmup_messages": int(messages * WARMUP_FRACTION),
        "tls": bool(security and security.tls), "sasl_username": security.username if security else None,
    }
    try:
        if hops:
            mesh = start_line(hops)
            host, port = "127.0.0.1", mesh[0].port
            opts["rx_host"], opts["rx_port"] = "127.0.0.1", mesh[-1].port
            router_pid = [r.pid for r in mesh]
            report["hops"] = hops
            report["router_url"] = f"amqp://{host}:{port} -> {hops} inter-router hop(s) -> amqp://{host}:{mesh[-1].port}"
        elif router:
            host, port = parse_router_url(router)
            report["router_url"] = f"{'amqps' if report['tls'] else 'amqp'}://{host}:{port}"
        elif not no_router:
            proc = RouterProcess(config_path=router_config).start()
            host, port, router_pid = "127.0.0.1", proc.port, proc.pid
            report["router_url"] = f"{'amqps' if report['tls'] else 'amqp'}://{host}:{port}"
        report.update(trio.run(_bench, opts, host, port, router_pid))
    finally:
        for p in ([proc] if proc is not None else []) + mesh:
            code = p.stop()
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


async def _brokered_loads(targets: list, opts: dict) -> dict:
    """Run each ``(label, host, port, target, source, durable, pids)`` load in turn."""
    out = {}
    for label, host, port, target, source, durable, pids in targets:
        cpu0 = {name: process_cpu_seconds(pid) for name, pid in pids.items()}
        deadline = trio.current_time() + opts["duration_limit"]
        r = await run_via_peer(host, port, senders=opts["senders"], receivers=opts["receivers"],
                               messages=opts["messages"], size=opts["size"], presettled=False,
                               window=opts["window"], address=target, source_address=source,
                               warmup=int(opts["messages"] * WARMUP_FRACTION), deadline=deadline,
                               router_pid=pids.get("router"), durable=durable)
        # Whole-run CPU of the broker (warm-up included) per message: coarse, but the same for each load.
        for name, pid in pids.items():
            c1 = process_cpu_seconds(pid)
            if name != "router" and cpu0[name] is not None and c1 is not None:
                r[f"{name}_cpu_us_per_msg"] = round((c1 - cpu0[name]) * 1e6 / max(1, opts["messages"]), 1)
        out[label] = r
    return out


def brokered_router_config() -> str:
    """The bench router's configuration with the brokered runs' linkCapacity on its listener."""
    return DEFAULT_ROUTER_CONFIG.replace("    saslMechanisms: ANONYMOUS\n",
                                         f"    saslMechanisms: ANONYMOUS\n    linkCapacity: {BROKERED_LINK_CAPACITY}\n")


def run_brokered(*, messages: int = BROKERED_MESSAGES, size: int = 100, window: int = 1000, senders: int = 1,
                 receivers: int = 1, rabbitmq: str | None = None, durable_only: bool = False,
                 direct: bool = True, duration_limit: float = 300.0) -> dict:
    """producer -> router -> tdbroker -> router -> consumer, durable and non-durable; with ``rabbitmq``
    ("start" or a URL) the same loads through a router auto-linked to RabbitMQ's AMQP 1.0 queue. With
    ``direct`` also each broker with the clients connected to it directly (no router). Returns the
    report dict."""
    opts = dict(messages=messages, size=size, window=window, senders=senders, receivers=receivers,
                duration_limit=duration_limit)
    kinds = [("durable", True)] if durable_only else [("durable", True), ("non-durable", False)]
    report: dict = {"kind": "brokered", "messages": messages, "size": size, "window": window,
                    "senders": senders, "receivers": receivers, "loads": {}}
    router = broker = node = rrouter = None
    try:
        router = RouterProcess(brokered_router_config() + WAYPOINT_SECTION).start()
        broker = BrokerProcess(router.port).start()
        pids = {"router": router.pid, "broker": broker.pid}
        targets = [(f"tdbroker {k}", "127.0.0.1", router.port, BROKERED_ADDRESS, None, d, pids) for k, d in kinds]
        if direct:
            targets += [(f"tdbroker {k} direct", "127.0.0.1", broker.port, f"direct.{k}", None, d,
                         {"broker": broker.pid}) for k, d in kinds]
        if rabbitmq:
            if rabbitmq == "start":
                from tools.rabbitmq import RabbitNode, missing_reason

                why = missing_reason()
                if why:
                    raise BenchError(f"--rabbitmq start: {why} (run .ci/install-rabbitmq)")
                node = RabbitNode(tempfile.mkdtemp(prefix="tdbench-rabbitmq-")).start()
                rhost, rport = "127.0.0.1", node.port
            else:
                rhost, rport = parse_router_url(rabbitmq)
            report["rabbitmq_url"] = f"amqp://{rhost}:{rport}"
            conf = brokered_router_config() + RABBIT_ROUTER_SECTION.format(host=rhost, port=rport,
                                                                           capacity=BROKERED_LINK_CAPACITY)
            for k, _d in kinds:
                for direction in ("in", "out"):
                    conf += RABBIT_AUTOLINK.format(address=RABBIT_ADDRESS.format(kind=k), direction=direction,
                                                   queue=RABBIT_QUEUE.format(kind=k))
            rrouter = RouterProcess(conf).start()
            for k, d in kinds:
                targets.append((f"rabbitmq {k}", "127.0.0.1", rrouter.port, RABBIT_ADDRESS.format(kind=k), None, d,
                                {"router": rrouter.pid}))
            if direct:
                for k, d in kinds:
                    q = RABBIT_QUEUE.format(kind=k) + "-direct"
                    targets.append((f"rabbitmq {k} direct", rhost, rport, q, q, d, {}))
        report["loads"] = trio.run(_brokered_loads, targets, opts)
    finally:
        for p in (broker, router, rrouter):
            if p is not None:
                p.stop()
        if node is not None:
            node.stop()
            shutil.rmtree(node.dir, ignore_errors=True)
    problems = []
    for label, r in report["loads"].items():
        problems += [f"{label}: {e}" for e in r["errors"]]
        if r["received"] != messages or r["accepted"] != messages:
            problems.append(f"{label}: sent {r['sent']}, received {r['received']}, accepted {r['accepted']} "
                            f"of {messages}")
    loads = report["loads"]
    for suffix in ("", " direct"):
        td, rq = loads.get(f"tdbroker durable{suffix}"), loads.get(f"rabbitmq durable{suffix}")
        if td and rq and rq["msgs_per_s"]:
            report[f"durable_ratio{suffix.replace(' ', '_')}"] = round(td["msgs_per_s"] / rq["msgs_per_s"], 2)
    report["problems"] = problems
    report["ok"] = not problems
    return report


def format_brokered(rep: dict) -> str:
    lines = [f"tdbench --brokered: {rep['senders']} -> {rep['receivers']}, {rep['messages']} x {rep['size']} B, "
             f"at-least-once, window {rep['window']}; producer and consumer run together",
             f"{'':24}{'msgs/s':>9}{'p50 us':>10}{'p99 us':>10}{'router us/msg':>15}{'broker us/msg':>15}"]
    for label, x in rep["loads"].items():
        lines.append(f"{label:24}{_fmt(x['msgs_per_s'], 9)}{_fmt(x['p50_us'], 10)}{_fmt(x['p99_us'], 10)}"
                     f"{_fmt(x['router_cpu_us_per_msg'], 15, 1)}{_fmt(x.get('broker_cpu_us_per_msg'), 15, 1)}")
    if "durable_ratio" in rep:
        lines.append(f"durable ratio tdbroker / rabbitmq, both via a router: {rep['durable_ratio']:.2f}")
    if "durable_ratio_direct" in rep:
        lines.append(f"durable ratio tdbroker / rabbitmq, clients on the broker: {rep['durable_ratio_direct']:.2f}")
    for p in rep["problems"]:
        lines.append(f"FAILED: {p}")
    return "\n".join(lines)


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
    x = rep.get("router")
    if x is not None and x.get("router_rss_mb"):
        lines.append("router RSS (MiB): " + "; ".join(
            f"{m['start']:.0f} at the start, peak {m['peak']:.0f} (+{m['growth']:.0f}), VmHWM {_fmt(m['hwm'], 0)}"
            for m in x["router_rss_mb"]))
    if x is not None and x.get("aborted"):
        lines.append(f"aborted deliveries: {x['aborted']}")
    if "ratio" in rep:
        lines.append(f"ratio (router/direct): {rep['ratio']:.2f}")
    if rep.get("direct") and s > 1:
        lines.append("(direct: each sender has its own receiving end)")
    for p in rep["problems"]:
        lines.append(f"FAILED: {p}")
    return "\n".join(lines)


def _stop_on_sigterm(signum, _frame) -> None:
    """SIGTERM ends tdbench the way Ctrl-C does: by an exception, so that every ``finally`` that stops a
    daemon it started runs (the default action would kill tdbench alone and leave its routers and brokers
    running)."""
    raise SystemExit(128 + signum)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click_security_options
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
@click.option("--router", "router_url", help="Use a running router at this URL (127.0.0.1 only; amqps:// for TLS).")
@click.option("--router-pid", type=int, help="The running router's pid, to report its CPU (with --router).")
@click.option("--direct/--no-direct", default=True, show_default=True,
              help="Also run the same load sender-to-receiver without a router.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of the table.")
@click.option("--duration-limit", default=120.0, show_default=True, type=click.FloatRange(1),
              help="Stop the whole run after this many seconds (each load, with --brokered; each phase, with --scale).")
@click.option("--brokered", is_flag=True,
              help=f"producer -> router -> tdbroker -> router -> consumer, durable and not "
                   f"(default {BROKERED_MESSAGES} messages).")
@click.option("--rabbitmq", metavar="start|URL",
              help="With --brokered: the same loads against RabbitMQ's AMQP 1.0 queue ('start': a private node).")
@click.option("--durable-only", is_flag=True, help="With --brokered: only the durable loads.")
@click.option("--records", type=click.Path(file_okay=False),
              help="Write client flow records (sent/received/settled, one message-id each) into this directory "
                   "for tdflow; slower, so not a throughput figure.")
@click.option("--network", is_flag=True,
              help="Across one network bridge: senders on tdbroker A, receivers on tdbroker B (A's "
                   "networkConnector forwards), durable and not, beside the same loads on one broker.")
@click.option("--mirror", is_flag=True,
              help="Mirror overhead: durable loads on a tdbroker with a <mirror> to a replica tdbroker, "
                   "interleaved with the same loads on one without (default 30000 messages, 3 rounds).")
@click.option("--hops", default=0, show_default=True, type=click.IntRange(0, MAX_HOPS),
              help="Through a line of HOPS+1 interior routers (senders on the first, receivers on the "
                   "last); router CPU is the sum over all of them.")
@click.option("--large", is_flag=True,
              help="Large messages: 5 kB-1 MB with a window of 100, and one 200 MB message through one router "
                   "and a line of three; router CPU per message and RSS (a router started per row).")
@click.option("--huge-size", default=200_000_000, show_default=True, type=click.IntRange(1),
              help="With --large: the size in bytes of the one huge message (e.g. 1000000000 for 1 GB).")
@click.option("--store", is_flag=True,
              help="With --large: instead of routers, one huge durable message stored in a tdbroker, the broker "
                   "restarted, the message delivered; seconds and broker RSS for each half.")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1),
              help="With --large or --scale: run each row this many times, interleaved.")
@click.option("--scale", is_flag=True,
              help="Many idle connections and links on one router: RSS per connection and per link, attach "
                   "rate, and a 1 -> 1 load before and while they are open (with --router/--router-pid or a "
                   "router started per round).")
@click.option("--connections", default=2000, show_default=True, type=click.IntRange(1),
              help="With --scale: idle client connections.")
@click.option("--links-per-connection", default=10, show_default=True, type=click.IntRange(0),
              help="With --scale: links on each idle connection (half receivers, half senders).")
@click.option("--heartbeats/--no-heartbeats", default=True, show_default=True,
              help="With --scale: the idle connections keep Dispatch's 16 s idle time-out (heartbeats both ways); "
                   "--no-heartbeats sets none on either side, to tell per-second from per-message costs.")
@click.option("--profile", type=click.Path(dir_okay=False),
              help="With --scale: record the router with py-spy (raw format) during each phase, into "
                   "FILE[.ROUND].PHASE.")
def main(senders, receivers, messages, size, presettled, window, address, router_config, router_url, router_pid,
         direct, as_json, duration_limit, brokered, rabbitmq, durable_only, records, network, mirror, hops,
         large, huge_size, store, rounds, scale, connections, links_per_connection, heartbeats, profile, security_opts) -> None:
    """tdbench: measure one router hop (throughput, latency, CPU per message) against a direct run.

    TLS (an amqps:// --router or any --ssl-* option) and SASL (--sasl-*) apply to the connections to the
    router given by --router or started with --router-config (whose first listener must then match)."""
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        security = Security.from_options(security_opts, url=router_url or "")
        security.settings_kwargs()  # refuses mechanisms our client cannot do, before anything starts
    except SecurityOptionError as exc:
        raise click.UsageError(str(exc)) from None
    secured = security.tls or security.username
    if secured and not (router_url or router_config):
        raise click.UsageError("TLS/SASL options need --router or --router-config (a listener that serves them)")
    if secured and (brokered or hops):
        raise click.UsageError("TLS/SASL options are not for --brokered or --hops runs (they start their own "
                               "plaintext daemons)")
    if router_config and router_url:
        raise click.UsageError("give --router-config or --router, not both")
    if rabbitmq and not brokered:
        raise click.UsageError("--rabbitmq goes with --brokered")
    if hops and (router_config or router_url or brokered):
        raise click.UsageError("--hops starts its own routers: not with --router, --router-config or --brokered")
    if scale:
        if secured or brokered or network or mirror or hops or router_config or large:
            raise click.UsageError("--scale: not with other run kinds, --router-config or TLS/SASL")
        if router_url and not router_pid:
            raise click.UsageError("--scale with --router needs --router-pid (its memory is the measurement)")
        from tools.benchscale import LOAD_MESSAGES, ScaleError, format_scale, run_scale

        n = messages if click.get_current_context().get_parameter_source("messages").name != "DEFAULT" \
            else LOAD_MESSAGES
        try:
            rep = run_scale(connections=connections, links_per_connection=links_per_connection, rounds=rounds,
                            messages=n, router=router_url, router_pid=router_pid, profile=profile,
                            phase_seconds=duration_limit, heartbeats=heartbeats)
        except (BenchError, ScaleError) as exc:
            click.echo(f"tdbench: {exc}", err=True)
            sys.exit(2)
        click.echo(json.dumps(rep) if as_json else format_scale(rep))
        sys.exit(0 if rep["ok"] else 1)
    if large:
        if secured or brokered or network or mirror or hops or router_config or router_url:
            raise click.UsageError("--large starts its own routers: not with other run kinds or TLS/SASL")
        from tools.benchlarge import format_broker_large, format_large, run_broker_large, run_large

        if store:
            rep = run_broker_large(huge_size)
            click.echo(json.dumps(rep) if as_json else format_broker_large(rep))
            sys.exit(0 if rep["ok"] else 1)
        try:
            rep = run_large(rounds=rounds, huge=huge_size)
        except BenchError as exc:
            click.echo(f"tdbench: {exc}", err=True)
            sys.exit(2)
        click.echo(json.dumps(rep) if as_json else format_large(rep))
        sys.exit(0 if rep["ok"] else 1)
    if network:
        if secured or brokered or hops or router_config or router_url or mirror:
            raise click.UsageError("--network starts its own two brokers: not with other run kinds or TLS/SASL")
        from tools.benchnet import NETWORK_MESSAGES, format_network, run_network

        n = messages if click.get_current_context().get_parameter_source("messages").name != "DEFAULT" \
            else NETWORK_MESSAGES
        try:
            rep = run_network(messages=n, size=size, window=window, senders=senders, receivers=receivers,
                              duration_limit=duration_limit)
        except BenchError as exc:
            click.echo(f"tdbench: {exc}", err=True)
            sys.exit(2)
        click.echo(json.dumps(rep) if as_json else format_network(rep))
        sys.exit(0 if rep["ok"] else 1)
    if mirror:
        if secured or brokered or network or hops or router_config or router_url:
            raise click.UsageError("--mirror starts its own three brokers: not with other run kinds or TLS/SASL")
        from tools.benchmirror import MIRROR_MESSAGES, format_mirror, run_mirror

        n = messages if click.get_current_context().get_parameter_source("messages").name != "DEFAULT" \
            else MIRROR_MESSAGES
        try:
            rep = run_mirror(messages=n, size=size, window=window, duration_limit=duration_limit)
        except BenchError as exc:
            click.echo(f"tdbench: {exc}", err=True)
            sys.exit(2)
        click.echo(json.dumps(rep) if as_json else format_mirror(rep))
        sys.exit(0 if rep["ok"] else 1)
    if brokered:
        n = messages if click.get_current_context().get_parameter_source("messages").name != "DEFAULT" \
            else BROKERED_MESSAGES
        try:
            rep = run_brokered(messages=n, size=size, window=window, senders=senders, receivers=receivers,
                               rabbitmq=rabbitmq, durable_only=durable_only, direct=direct,
                               duration_limit=duration_limit)
        except BenchError as exc:
            click.echo(f"tdbench: {exc}", err=True)
            sys.exit(2)
        click.echo(json.dumps(rep) if as_json else format_brokered(rep))
        sys.exit(0 if rep["ok"] else 1)
    try:
        rep = run_bench(senders=senders, receivers=receivers, messages=messages, size=size, presettled=presettled,
                        window=window, address=address, router_config=router_config, router=router_url,
                        router_pid=router_pid, direct=direct, duration_limit=duration_limit, hops=hops,
                        records=records, security=security if secured else None)
    except BenchError as exc:
        click.echo(f"tdbench: {exc}", err=True)
        sys.exit(2)
    click.echo(json.dumps(rep) if as_json else format_report(rep))
    sys.exit(0 if rep["ok"] else 1)


if __name__ == "__main__":
    main()
