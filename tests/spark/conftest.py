"""One local[2] SparkSession for all Spark tests (start-up costs seconds; the tests use small data)."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("pyspark", reason="the Spark tests need pyspark (test extra)")


@pytest.fixture(scope="session")
def spark():
    from tools.tdflow.session import make_session

    session = make_session("local[2]", "tdflow-tests", shuffle_partitions=4, driver_memory="1g")
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
