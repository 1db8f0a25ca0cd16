"""tdbench end to end: a real tdrouterd subprocess, the lean client, and the direct (no router) run.

Small loads (2,000 messages) so the whole module takes a few seconds; the figures are only checked for
sanity (everything arrived and was accepted, a positive rate, p50 <= p99), not for speed.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tools.bench import REPO_ROOT, parse_router_url, run_bench
from tools.benchclient import MessageTemplate, process_cpu_seconds
from tools.benchrun import split

N = 2000


def _check_phase(r: dict, *, presettled: bool, router: bool) -> None:
    assert r["errors"] == []
    assert r["complete"]
    assert r["sent"] == N
    assert r["received"] == N
    assert r["lost"] == 0
    assert r["measured_messages"] == N - int(N * 0.05)
    assert r["msgs_per_s"] > 0
    assert 0 < r["p50_us"] <= r["p99_us"] <= r["max_us"]
    assert r["client_cpu_us_per_msg"] is not None and r["client_cpu_us_per_msg"] >= 0
    assert r["client_cpu_busy"] is not None and r["client_cpu_busy"] >= 0
    if presettled:
        assert r["accepted"] == 0
    else:
        assert r["accepted"] == N
        assert r["non_accepted"] == {}
    if router:
        assert r["router_cpu_us_per_msg"] is not None and r["router_cpu_us_per_msg"] >= 0
        assert r["router_cpu_busy"] is not None
    else:
        assert r["router_cpu_us_per_msg"] is None and r["router_cpu_busy"] is None


@pytest.mark.system
@pytest.mark.parametrize("presettled", [False, True], ids=["at-least-once", "presettled"])
def test_bench_via_router_and_direct(presettled):
    rep = run_bench(messages=N, presettled=presettled, duration_limit=60)
    assert rep["ok"], rep["problems"]
    assert rep["mode"] == ("presettled" if presettled else "at-least-once")
    _check_phase(rep["router"], presettled=presettled, router=True)
    _check_phase(rep["direct"], presettled=presettled, router=False)
    assert rep["ratio"] > 0


@pytest.mark.system
def test_bench_several_senders_and_receivers():
    rep = run_bench(messages=N, senders=2, receivers=3, window=50, duration_limit=60)
    assert rep["ok"], rep["problems"]
    _check_phase(rep["router"], presettled=False, router=True)
    _check_phase(rep["direct"], presettled=False, router=False)


@pytest.mark.system
def test_cli_json_and_exit_status():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--messages", str(N), "--size", "300", "--no-direct", "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["ok"] and "direct" not in rep and rep["size"] == 300
    _check_phase(rep["router"], presettled=False, router=True)


@pytest.mark.system
def test_a_run_that_cannot_deliver_fails(tmp_path):
    """The bench's address is unavailable: the receiver's attach is refused, the run says so, exit 1."""
    conf = tmp_path / "router.conf"
    conf.write_text(
        "router {\n    mode: standalone\n    id: Bench.Fail\n}\n"
        "listener {\n    host: 127.0.0.1\n    port: 0\n    authenticatePeer: no\n}\n"
        "address {\n    prefix: bench\n    distribution: unavailable\n}\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--messages", "200", "--no-direct", "--router-config", str(conf),
         "--duration-limit", "20"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAILED" in proc.stdout
    assert "amqp:not-found" in proc.stdout


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if ppid == pid:
            found.append((int(entry), cmd))
    return found


@pytest.mark.system
def test_sigterm_stops_the_daemons_tdbench_started():
    """``kill`` of a running tdbench (SIGTERM) must not leave its broker and routers behind."""
    proc = subprocess.Popen([sys.executable, "-m", "tools.bench", "--brokered", "--messages", "10000000",
                             "--duration-limit", "60"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        daemons: list[int] = []
        while len(daemons) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            daemons = [pid for pid, cmd in _children(proc.pid) if ".daemon" in cmd]
        assert len(daemons) >= 2, "tdbench did not start its router and broker"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in daemons):
        time.sleep(0.1)
    left = [pid for pid in daemons if os.path.exists(f"/proc/{pid}")]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"daemons {left} outlived tdbench: {proc.stdout.read().decode()[-2000:]}"


@pytest.mark.system
def test_brokered_cli_runs_durable_and_non_durable_through_a_real_broker():
    proc = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--brokered", "--messages", "1000", "--json", "--duration-limit", "60"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["ok"] and set(rep["loads"]) == {"tdbroker durable", "tdbroker non-durable",
                                                "tdbroker durable direct", "tdbroker non-durable direct"}
    for r in rep["loads"].values():
        assert r["received"] == r["accepted"] == 1000 and r["msgs_per_s"] > 0
        assert r["broker_cpu_us_per_msg"] is not None and r["broker_cpu_us_per_msg"] > 0


def test_durable_template_has_a_durable_header():
    from wire.header import read_header

    assert read_header(MessageTemplate(50, durable=True).encode(1)).durable is True
    assert read_header(MessageTemplate(50).encode(1)).durable is False


def test_rabbitmq_needs_brokered():
    proc = subprocess.run([sys.executable, "-m", "tools.bench", "--rabbitmq", "start"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--brokered" in proc.stderr


# -- pure helpers (no processes) ---------------------------------------------------------------------


def test_template_carries_the_timestamp_at_a_fixed_offset():
    t = MessageTemplate(100)
    msg = t.encode(123456789)
    assert len(msg) == t.encoded_size
    assert t.timestamp(msg) == 123456789
    with pytest.raises(ValueError):
        MessageTemplate(4)


def test_split_and_urls():
    assert split(10, 3) == [4, 3, 3]
    assert sum(split(200000, 7)) == 200000
    assert parse_router_url("amqp://127.0.0.1:5673") == ("127.0.0.1", 5673)
    assert parse_router_url("localhost") == ("127.0.0.1", 5672)
    with pytest.raises(Exception):
        parse_router_url("amqp://example.com:5672")
    assert process_cpu_seconds(os.getpid()) > 0


def test_records_give_every_message_an_id_and_a_sent_received_settled_line(tmp_path):
    rep = run_bench(messages=N, senders=2, receivers=1, duration_limit=60, direct=False, records=str(tmp_path))
    assert rep["ok"], rep["problems"]
    rows = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.read_text().splitlines()]
    by_event: dict = {}
    for r in rows:
        by_event.setdefault(r["event"], []).append(r)
    sent = {r["mid"] for r in by_event["sent"]}
    assert len(sent) == N == len(by_event["sent"])
    assert {r["mid"] for r in by_event["received"]} == sent
    assert {r["mid"] for r in by_event["settled"]} == sent
    assert all(r["outcome"] == "accepted" for r in by_event["settled"])


def test_hops_bench_runs_through_a_line_of_routers():
    rep = run_bench(messages=N, hops=2, duration_limit=60, direct=False)
    assert rep["ok"], rep["problems"]
    assert rep["hops"] == 2 and rep["router"]["received"] == N


def test_tools_import_nothing_from_tests():
    """The package ships tools/ without tests/ (pyproject.toml excludes it): an import of ``tests.*`` in
    tools/ works in a checkout and fails once installed, as ``tdbench --brokered --rabbitmq start`` did
    while the RabbitMQ node helper lived in tests/system/."""
    offenders = []
    for path in sorted((REPO_ROOT / "tools").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            offenders += [f"{path.relative_to(REPO_ROOT)}:{node.lineno}: {name}" for name in names
                          if name == "tests" or name.startswith("tests.")]
    assert offenders == []
