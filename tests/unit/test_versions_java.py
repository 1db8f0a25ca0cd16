"""The Spark tests' Java rule (tests/conftest.py, issue 18): without Java 17 or later they are skipped with
the reason locally and fail with it under CI=true; the Java version is read as pyspark finds Java."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.paths import REPO

def _fake_java(directory, version_line: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    java = directory / "java"
    java.write_text(f"#!/bin/sh\necho '{version_line}' >&2\n")
    java.chmod(0o755)
    return str(directory)


def _run_spark_tests(path_dirs: str, ci: bool) -> subprocess.CompletedProcess:
    pytest.importorskip("pyspark", reason="the Spark tests are collected only with pyspark (test extra)")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "CI", "PYTEST_ADDOPTS")}
    env.update(PATH=path_dirs, PYTHONPATH=str(REPO))
    if ci:
        env["CI"] = "true"
    # one Spark test file is enough: the rule is per item; -p no:cacheprovider leaves no state behind
    return subprocess.run([sys.executable, "-m", "pytest", "tests/spark/test_tdflow_audit.py", "-q", "-rsf",
                           "-p", "no:cacheprovider", "-p", "no:randomly"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("java,problem", [
    (None, "no java on PATH"), ('java version "1.8.0_392"', "is Java 8"),
    ('openjdk version "11.0.21" 2023-10-17', "is Java 11"), ('openjdk version "17.0.15" 2025-04-15', None),
    ('openjdk version "21" 2023-09-19', None)])
def test_java_version_as_pyspark_finds_it(tmp_path, monkeypatch, java, problem):
    from tests.conftest import java_problem

    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", _fake_java(tmp_path / "bin", java) if java else str(tmp_path / "empty"))
    found = java_problem()
    assert found is None if problem is None else problem in found and "need Java 17 or later" in found


def test_java_home_wins_over_path(tmp_path, monkeypatch):
    from tests.conftest import java_problem

    monkeypatch.setenv("PATH", _fake_java(tmp_path / "bin", 'openjdk version "17.0.1"'))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert "JAVA_HOME=" in java_problem() and "has no bin/java" in java_problem()


def test_without_java_the_spark_tests_skip_locally_with_the_reason(tmp_path):
    proc = _run_spark_tests(str(tmp_path / "empty"), ci=False)
    out = proc.stdout
    assert proc.returncode == 0 and " skipped" in out and " passed" not in out and " failed" not in out, out
    assert "the Spark tests need Java 17 or later: no java on PATH" in out, out


def test_without_java_the_spark_tests_fail_under_ci(tmp_path):
    proc = _run_spark_tests(str(tmp_path / "empty"), ci=True)
    out = proc.stdout
    # failed in set-up, so pytest counts them as errors: the run fails either way
    assert proc.returncode == 1 and " errors" in out and " skipped" not in out and " passed" not in out, out
    assert "no java on PATH" in out and "(CI=true, so this is a failure, not a skip)" in out, out
