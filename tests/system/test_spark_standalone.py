"""``tdflow report --master spark://...`` on a real Spark standalone cluster: a master and a worker started
from the pyspark installation (its ``bin/spark-class``, as ``sbin/start-master.sh`` does in a Spark
distribution), the way a user who outgrows one machine runs the report (docs/flowreport.md).

The report runs on the worker's executor (its work directory holds the application), and what it finds
agrees with the generator's ground truth. It is a Spark test (``pytest.mark.spark``): without Java 17 it
skips locally, with that reason, and fails under CI (CI=true) (tests/conftest.py); without pyspark, likewise
(the rule of tests/spark/conftest.py).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.system.flowfixtures import SPARK_TEST_CONF, TEST_JAVA_OPTIONS
from tests.system.harness import REPO_ROOT

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

try:
    import pyarrow.parquet as pq
    import pyspark
except ImportError:
    if IN_CI:
        raise  # CI installs the test extra: a missing pyspark there is a broken set-up, not a skip
    pytest.skip("tdflow needs pyspark and pyarrow (the test extra)", allow_module_level=True)


pytestmark = [pytest.mark.system, pytest.mark.spark, pytest.mark.timeout(300)]

SPARK_HOME = pathlib.Path(pyspark.__file__).resolve().parent
#: A JVM starting on a loaded two-core machine takes seconds; a master or worker that is not up by then
#: has failed (its log says why).
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 20.0
_MASTER_URL_RE = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = "Successfully registered with master"


class SparkDaemon:
    """One Spark standalone daemon (``org.apache.spark.deploy.master.Master`` or ``...worker.Worker``) run in
    the foreground by ``spark-class`` (which execs the JVM, so the process is the JVM), log to a file."""

    def __init__(self, name: str, cls: str, args: list[str], workdir: pathlib.Path):
        self.name = name
        self.log = workdir / f"{name}.log"
        env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1",
                   SPARK_LOG_DIR=str(workdir), SPARK_CONF_DIR=str(workdir / "conf"),
                   # The master's REST submission server takes the fixed port 6066; nothing here uses it.
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                   # The daemons' JVMs: C1 only and one GC thread (flowfixtures.py says why).
                   SPARK_DAEMON_JAVA_OPTS=TEST_JAVA_OPTIONS)
        (workdir / "conf").mkdir(exist_ok=True)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), cls, *args], cwd=workdir,
                                         env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def wait_for(self, pattern: re.Pattern | str) -> re.Match | str:
        """The first match of ``pattern`` in the log, once it is there (the daemon exiting first fails)."""
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while True:
            text = self.log.read_text(errors="replace")
            found = pattern.search(text) if isinstance(pattern, re.Pattern) else (pattern if pattern in text else None)
            if found:
                return found
            if self.proc.poll() is not None:
                pytest.fail(f"spark {self.name} exited with {self.proc.returncode}:\n{text[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"spark {self.name} not ready after {START_TIMEOUT_SECONDS:g} s:\n{text[-3000:]}")
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A master and one worker (2 cores, 1 GiB) on 127.0.0.1, every port chosen by the kernel."""
    base = tmp_path_factory.mktemp("spark")
    master = SparkDaemon("master", "org.apache.spark.deploy.master.Master",
                         ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"], base)
    worker = None
    try:
        url = master.wait_for(_MASTER_URL_RE).group(1)
        worker = SparkDaemon("worker", "org.apache.spark.deploy.worker.Worker",
                             [url, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0", "--cores", "2",
                              "--memory", "1g", "--work-dir", str(base / "work")], base)
        worker.wait_for(_REGISTERED)
        yield {"url": url, "work": base / "work", "base": base}
    finally:
        if worker is not None:
            worker.stop()
        master.stop()


def test_tdflow_report_runs_on_a_standalone_master_and_worker(standalone, tmp_path):
    records, out = tmp_path / "records", tmp_path / "report"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    gen = subprocess.run([sys.executable, "-m", "tools.tdflow.cli", "generate", "--out", str(records),
                          "--records", "600", "--loss-rate", "0.02", "--dup-rate", "0.02", "--seed", "5"],
                         cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, env=env)
    assert gen.returncode == 0, gen.stderr
    truth = json.loads((tmp_path / "records.truth.json").read_text())
    started = time.monotonic()
    # SPARK_TEST_CONF: the driver's and the executor's JVMs compile with C1 only, one shuffle partition for
    # 600 records (tdflow's cluster default is Spark's 200; flowfixtures.py); with the daemons' JVMs likewise
    # the test took 35 s and 35 s of CPU instead of 74 s and 77 s (load average 6 on two cores).
    # spark.locality.wait=0: with one worker there is no better place for a task to wait for (Spark waits up
    # to 3 s per locality level by default); the report took 120 s without it, 90 s with it (one run each,
    # load average 8-10 on two cores).
    report = subprocess.run([sys.executable, "-m", "tools.tdflow.cli", "report", str(records), "--out", str(out),
                             "--master", standalone["url"], *SPARK_TEST_CONF,
                             "--conf", "spark.executor.memory=512m", "--conf", "spark.locality.wait=0"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=240, env=env)
    took = time.monotonic() - started
    assert report.returncode == 0, report.stdout + report.stderr
    assert f"lost {truth['lost']}" in report.stdout and f"duplicated {truth['duplicated']}" in report.stdout
    # The work ran on the worker: its executor's directory for the application is there.
    apps = list(standalone["work"].glob("app-*"))
    assert apps and any(apps[0].glob("*/stderr")), list(standalone["work"].iterdir())
    audit = {r["address"]: r for r in pq.read_table(out / "audit").to_pylist()}
    for address, expected in truth["addresses"].items():
        assert (audit[address]["lost"], audit[address]["duplicated"]) == (expected["lost"],
                                                                           expected["duplicated"]), address
    assert (out / "report.html").is_file()
    print(f"tdflow report on spark standalone: {took:.1f} s")
