"""One local[2] SparkSession for all Spark tests (start-up costs seconds; the tests use small data)."""

from __future__ import annotations

import json
import os

import pytest

try:
    import pyspark  # noqa: F401
except ImportError:
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        raise  # CI installs the test extra: a missing pyspark there is a broken set-up, not a skip
    # Elsewhere (pyspark not installed): leave the Spark tests out rather than break the whole run.
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def spark():
    from tools.tdflow.session import make_session

    # A cheaper JVM for short jobs (the C1 compiler only, a serial GC): about half the CPU of these tests.
    session = make_session("local[2]", "tdflow-tests", shuffle_partitions=4, driver_memory="1g",
                           conf={"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"})
    yield session
    session.stop()


def _write_records(directory, name, records) -> str:
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r) + "\n")
    return path


@pytest.fixture
def write_records():
    """write_records(directory, name, [dict, ...]) writes one .jsonl file and returns its path."""
    return _write_records
