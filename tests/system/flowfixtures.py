"""Shared set-up of the flow-record system tests (test_tdflow_e2e.py, test_flow_report_browser.py).

Both need the same thing: demos that write flow records, and what ``tdflow`` (a real Spark job, run as the
user runs it, ``python -m tools.tdflow.cli``) says about them. ``flow_run`` makes that once per test session
-- even across pytest-xdist workers (``make test`` runs files on two workers, ``--dist loadfile``): the
first worker to need it makes it under a file lock in the session's shared temporary directory, the other
reads the result (pytest-xdist documentation, "Making session-scoped fixtures execute only once"). Should
both files start at once on the two workers, the second waits for the first: the fixture's three Spark jobs
keep both cores busy meanwhile. Measured (one process): the two files took 89 s of CPU before, 44 s now.

``SPARK_TEST_CONF``: Spark settings that make these small jobs cheap without changing a result (the tests'
inputs are a few thousand records; the report's tables were compared row for row with and without them).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.system.harness import REPO_ROOT

#: JVM options for the tests' short Spark runs: the C1 compiler only (C2 compiles hot code for long jobs; on
#: a 20-second job it is mostly spent compiling, about half of the CPU time) and the serial collector (one
#: GC thread instead of one per core). Measured on `tdflow report` over the browser test's records: 41 s of
#: CPU without them, 21 s with them (and one shuffle partition), wall 23 s -> 17 s on an idle machine.
TEST_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: ``tdflow --conf`` arguments for the tests' Spark runs. One shuffle partition: the inputs are tiny, so
#: every further partition is only task overhead (tdflow's local default is 8, made for millions of records).
SPARK_TEST_CONF = ("--conf", f"spark.driver.extraJavaOptions={TEST_JAVA_OPTIONS}",
                   "--conf", f"spark.executor.extraJavaOptions={TEST_JAVA_OPTIONS}",
                   "--conf", "spark.sql.shuffle.partitions=1")

#: The brokered demo both tests read: its consumer rejects every REJECT_EVERY-th message.
BROKERED_COUNT = 60
BROKERED_REJECT_EVERY = 6
#: The brokerless demo the audit reads alongside: settlement is end to end, so its producer sees rejections.
BROKERLESS_COUNT = 9
BROKERLESS_REJECT_EVERY = 3
#: A subprocess (demo or Spark job) that takes longer than this has hung.
RUN_TIMEOUT_SECONDS = 300


def tool_env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYSPARK_PYTHON=sys.executable)


def start_tool(*args) -> subprocess.Popen:
    """``python -m ARGS`` started in the background (``flow_run`` runs its demos side by side, then its Spark
    jobs: each spends part of its time waiting, on daemons or on its JVM)."""
    return subprocess.Popen([sys.executable, "-m", *args], cwd=REPO_ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=tool_env())


def finish(proc: subprocess.Popen, timeout: float = RUN_TIMEOUT_SECONDS) -> dict:
    """Wait for ``proc``: its exit status and output, as JSON-able data."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        stderr += f"\n(killed after {timeout:g} s)"
    return {"returncode": proc.returncode, "stdout": stdout, "stderr": stderr}


def audit_args(*dirs) -> tuple:
    return ("tools.tdflow.cli", "audit", *map(str, dirs), "--json", *SPARK_TEST_CONF)


def audit_rows(stdout: str) -> dict:
    """``tdflow audit --json``'s rows by address (the JSON follows any other output)."""
    start = stdout.find("[")
    rows = json.loads(stdout[start: stdout.rindex("]") + 1]) if start >= 0 else []
    return {r["address"]: r for r in rows}


def _make_flow_run(base: pathlib.Path) -> dict:
    brokered, brokerless, mesh, out = base / "brokered", base / "brokerless", base / "mesh", base / "report"
    # The demos (ephemeral ports) and the generator run side by side: they mostly wait on their daemons.
    makers = {"brokered": start_tool("tools.demo", "brokered", "--count", str(BROKERED_COUNT), "--records",
                                     str(brokered), "--reject-every", str(BROKERED_REJECT_EVERY)),
              "brokerless": start_tool("tools.demo", "brokerless", "--count", str(BROKERLESS_COUNT), "--records",
                                       str(brokerless), "--reject-every", str(BROKERLESS_REJECT_EVERY)),
              "generate": start_tool("tools.tdflow.cli", "generate", "--out", str(mesh), "--records", "4000",
                                     "--seed", "3")}
    demos = {name: finish(proc) for name, proc in makers.items()}
    for name, done in demos.items():
        assert done["returncode"] == 0, f"{name}:\n{done['stdout']}{done['stderr']}"
    # The audit tdflow_e2e checks a failing run of: the brokered records less one consumer receipt (a copy,
    # so the report and the browser test's path count read the demo's records as written).
    faulty = base / "brokered-less-one-receipt"
    shutil.copytree(brokered, faulty)
    consumer_file = next(faulty / n for n in os.listdir(faulty) if n.startswith("demo.consumer"))
    lines = consumer_file.read_text().splitlines(keepends=True)
    consumer_file.write_text("".join(lines[:10] + lines[11:]))
    jobs = {"report": start_tool("tools.tdflow.cli", "report", str(brokered), str(mesh), "--out", str(out),
                                 *SPARK_TEST_CONF),
            "audit": start_tool(*audit_args(brokered, brokerless)),
            "audit_faulty": start_tool(*audit_args(faulty))}
    runs = {name: finish(proc) for name, proc in jobs.items()}
    return {"demos": demos, "runs": runs, "brokered": str(brokered), "brokerless": str(brokerless),
            "mesh": str(mesh), "out": str(out), "names": os.listdir(brokered) + os.listdir(brokerless)}


@contextlib.contextmanager
def _locked(path: pathlib.Path):
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def flow_run(tmp_path_factory) -> dict:
    """The demos' records (brokered: BROKERED_COUNT messages; brokerless: BROKERLESS_COUNT), a generated
    four-router mesh (4000 records, seed 3), and the outcome of three ``tdflow`` runs over them: ``report``
    (brokered + mesh, into ``out``), ``audit`` (brokered + brokerless) and ``audit_faulty`` (the brokered
    records less one consumer receipt). Each run's exit status and output are for the tests to judge; a
    failed demo or generator fails the fixture (the test has nothing to look at)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the run's xdist workers
    base, result, failed = root / "flowrun", root / "flowrun.json", root / "flowrun.failed"
    with _locked(root / "flowrun.lock"):
        if result.exists():
            return json.loads(result.read_text())
        if failed.exists():
            pytest.fail(f"the shared flow run failed in another worker:\n{failed.read_text()}")
        shutil.rmtree(base, ignore_errors=True)
        base.mkdir()
        try:
            made = _make_flow_run(base)
        except BaseException as exc:
            failed.write_text(f"{type(exc).__name__}: {exc}")
            raise
        result.write_text(json.dumps(made))
        return made
