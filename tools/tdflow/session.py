"""Creating the SparkSession tdflow runs on: local[2] by default, any master URL on request."""

from __future__ import annotations

import os
import sys

DEFAULT_MASTER = "local[2]"
# Spark's default of 200 shuffle partitions is made for clusters; on two local cores it mostly costs task
# overhead (adaptive execution coalesces anyway, this is its starting point).
LOCAL_SHUFFLE_PARTITIONS = 8
# The per-message aggregation holds each message's records together; 1 GiB (the default) is tight at 10M.
DEFAULT_DRIVER_MEMORY = "3g"


def make_session(master: str | None = None, app: str = "tdflow", *, shuffle_partitions: int | None = None,
                 driver_memory: str = DEFAULT_DRIVER_MEMORY, conf: dict | None = None):
    """A SparkSession for tdflow; python workers use this interpreter (PYSPARK_PYTHON).

    ``conf``: Spark properties (``tdflow --conf KEY=VALUE``, as ``spark-submit --conf``), applied last, so
    they override tdflow's own choices (e.g. ``spark.sql.shuffle.partitions`` on a small cluster)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = master or os.environ.get("TDFLOW_MASTER") or DEFAULT_MASTER
    local = master.startswith("local")
    if shuffle_partitions is None:
        shuffle_partitions = LOCAL_SHUFFLE_PARTITIONS if local else 200
    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    if local:
        builder = builder.config("spark.driver.memory", driver_memory)
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
