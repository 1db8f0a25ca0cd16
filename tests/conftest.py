"""Top-level pytest configuration.

pytest-trio runs in trio mode (see pyproject.toml), so ``async def`` tests
run under Trio automatically; plain ``def`` tests run as usual.  The repo
root is on sys.path (``pythonpath = ["."]``), so tests import project code
as ``wire``/``router``/... and test helpers as ``tests.system.harness``.
"""

from __future__ import annotations

import os

from tools.lazyssl import defer_ssl_domains

# Every proton container a test makes (tests/system/clients.py's clients, BlockingConnection) would build
# two OpenSSL contexts with the system's CA bundle, ~100 ms of CPU, TLS or not: the suite makes thousands.
# They are built when a TLS connection first needs them instead (tools/lazyssl.py).
defer_ssl_domains()

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is in the test extra; tolerate its absence
    settings = None

if settings is not None:
    # A 2-core CI box running system tests alongside makes timing-based
    # deadlines flaky; property tests should fail on wrong answers only.
    settings.register_profile("dev", deadline=None)
    settings.register_profile(
        "ci",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile(
        os.environ.get(
            "HYPOTHESIS_PROFILE",
            "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev",
        )
    )


# -- The Spark tests need Java --------------------------------------------------------------------------------
# pyspark starts a JVM: without Java 17 or later (pyspark 4's minimum) every Spark test would fail with a
# Java gateway error that does not say what is missing. A Spark test is one under tests/spark/, in a
# test_tdflow*.py module (tdflow runs on Spark), or marked ``spark``. Without a usable Java they are
# skipped with the reason -- except under CI (CI=true), where a missing Java is a broken set-up: they fail
# with the same reason, as a missing pyspark does (tests/spark/conftest.py).

import pathlib as _pathlib
import re as _re
import shutil as _shutil
import subprocess as _subprocess

import pytest as _pytest

#: pyspark 4.x runs on Java 17 and 21 (Spark 4.0 documentation, "Downloading": "Spark runs on Java 17/21").
SPARK_MIN_JAVA = 17
_SPARK_DIR = _pathlib.Path(__file__).resolve().parent / "spark"
_java_problem_cache: list = []


def _under_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def java_problem() -> str | None:
    """Why Spark cannot start a JVM here (no java, or one older than SPARK_MIN_JAVA), else None. Java is
    found as pyspark finds it: $JAVA_HOME/bin/java, else java on PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else _shutil.which("java")
    how = f"install Java {SPARK_MIN_JAVA} (apt-get install openjdk-{SPARK_MIN_JAVA}-jre-headless) or set JAVA_HOME"
    if not java or not os.access(java, os.X_OK):
        where = f"JAVA_HOME={home} has no bin/java" if home else "no java on PATH"
        return f"the Spark tests need Java {SPARK_MIN_JAVA} or later: {where}; {how}"
    try:
        out = _subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, _subprocess.TimeoutExpired) as exc:
        return f"the Spark tests need Java {SPARK_MIN_JAVA} or later: {java} -version failed ({exc}); {how}"
    m = _re.search(r'version "(\d+)(?:\.(\d+))?', out.stderr + out.stdout)
    if m is None:
        return f"the Spark tests need Java {SPARK_MIN_JAVA} or later: {java} -version says no version; {how}"
    major = int(m.group(2) or 0) if m.group(1) == "1" else int(m.group(1))   # "1.8.0" is Java 8
    if major < SPARK_MIN_JAVA:
        return f"the Spark tests need Java {SPARK_MIN_JAVA} or later, {java} is Java {major}; {how}"
    return None


def _runs_spark(item) -> bool:
    path = _pathlib.Path(str(item.fspath)).resolve()
    return (_SPARK_DIR in path.parents or path.name.startswith("test_tdflow")
            or item.get_closest_marker("spark") is not None)


def pytest_collection_modifyitems(config, items):
    spark_items = [item for item in items if _runs_spark(item)]
    if not spark_items:
        return   # java is not even looked for
    if not _java_problem_cache:
        _java_problem_cache.append(java_problem())
    problem = _java_problem_cache[0]
    if problem is None:
        return
    for item in spark_items:
        if _under_ci():
            item.add_marker(_pytest.mark.java_missing(problem))
        else:
            item.add_marker(_pytest.mark.skip(reason=problem))


def pytest_runtest_setup(item):
    marker = item.get_closest_marker("java_missing")
    if marker is not None:
        _pytest.fail(f"{marker.args[0]} (CI=true, so this is a failure, not a skip)", pytrace=False)
