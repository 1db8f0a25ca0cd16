"""``tdflow report`` and ``tdflow audit``: run the pipeline, write Parquet tables, HTML and a summary.

The per-message table is computed once and cached (memory, spilling to disk); every result is an
aggregation of it or of the events. Only aggregated results come back to the driver, for the HTML page,
the plots and the summary (link throughput only for the busiest links).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tools.tdflow import pipeline

# Links drawn in the throughput plot: the busiest ones.
PLOT_LINKS = 8


@dataclasses.dataclass
class Options:
    """What a report or an audit reads and how."""

    paths: list
    since_ns: int | None = None
    until_ns: int | None = None
    multicast_prefixes: tuple = ("multicast",)
    include_open: bool = False
    bucket_s: float | None = None


class NoRecords(Exception):
    """Nothing to analyse in the given paths and window."""


def _events(spark: SparkSession, opts: Options) -> DataFrame:
    return pipeline.read_events(spark, opts.paths, include_open=opts.include_open)


def _messages(events: DataFrame, opts: Options) -> DataFrame:
    return pipeline.build_messages(events, opts.multicast_prefixes, opts.since_ns, opts.until_ns)


def _rows(df: DataFrame, limit: int | None = None) -> list[dict]:
    if limit is not None:
        df = df.limit(limit)
    return [r.asDict(recursive=True) for r in df.collect()]


def audit(spark: SparkSession, opts: Options) -> list[dict]:
    """The delivery audit per address (small: one row per address)."""
    events = _events(spark, opts)
    return _rows(pipeline.delivery_audit(_messages(events, opts)))


def audit_failures(rows: list[dict], tolerance: float) -> list[str]:
    """Addresses whose losses or duplicates exceed ``tolerance`` (a fraction of the messages sent)."""
    return [r["address"] for r in rows
            if r["lost"] > tolerance * r["sent"] or r["duplicated"] > tolerance * r["sent"]]


def totals(rows: list[dict]) -> dict:
    keys = [k for k in (rows[0] if rows else {}) if k != "address"]
    return {k: sum(int(r[k] or 0) for r in rows) for k in keys}


def run_report(spark: SparkSession, opts: Options, out: str) -> dict:
    """Write every result table under ``out`` (Parquet), ``report.html``; return the small results."""
    # Two scans of the records: one grouped by message-id (cached: most results aggregate it), one grouped
    # by node, link, event and time bucket (cached, small: the per-node and per-link results).
    t_start = time.monotonic()
    messages = _messages(_events(spark, opts), opts).persist(StorageLevel.MEMORY_AND_DISK)
    le = None
    try:
        span = messages.agg(F.min("first_ts").alias("lo"), F.max("last_ts").alias("hi"),
                            F.count(F.lit(1)).alias("n")).collect()[0]
        if os.environ.get("TDFLOW_DEBUG"):
            print(f"tdflow: records grouped by message-id {time.monotonic() - t_start:.1f} s", file=sys.stderr)
        if not span["n"]:
            raise NoRecords("no flow records with a message-id in the given paths and time window")
        bucket_s = opts.bucket_s or pipeline.choose_bucket_s(span["hi"] - span["lo"])
        events = pipeline.window_events(_events(spark, opts), opts.since_ns, opts.until_ns)
        le = pipeline.link_events(events, bucket_s).persist(StorageLevel.MEMORY_AND_DISK)
        receipts = pipeline.receipts_with_latency(messages)
        tables = {
            "audit": pipeline.delivery_audit(messages),
            "outcomes": pipeline.outcomes(messages),
            "latency_by_address": pipeline.latency_by_address(receipts),
            "latency_by_path": pipeline.latency_by_path(receipts),
            "latency_histogram": pipeline.latency_histogram(receipts),
            "broker_residence": pipeline.broker_residence(messages),
            "hop_latency": pipeline.hop_latency(messages),
            "paths": pipeline.paths(messages),
            "path_edges": pipeline.path_edges(messages),
            "entries": pipeline.entries(messages),
            "hop_counts": pipeline.hop_counts(messages),
            "node_counts": pipeline.node_counts(le),
            "link_throughput": pipeline.link_throughput(le, bucket_s),
        }
        small = {}
        for name, df in tables.items():
            target = _join(out, name)
            t0 = time.monotonic()
            df.write.mode("overwrite").parquet(target)
            if os.environ.get("TDFLOW_DEBUG"):
                print(f"tdflow: {name} {time.monotonic() - t0:.1f} s", file=sys.stderr)
            if name != "link_throughput":
                # Read back the written (aggregated, small) table rather than recomputing it.
                small[name] = _rows(spark.read.parquet(target).orderBy(*_order(name)), _ROW_LIMITS.get(name, 500))
        lt = spark.read.parquet(_join(out, "link_throughput"))
        busiest = (lt.groupBy("node", "conn", "link", "direction").agg(F.sum("messages").alias("total"))
                   .orderBy(F.desc("total")).limit(PLOT_LINKS))
        # time_us: the bucket's start as µs since the epoch (a collected timestamp would be in the driver's
        # local time zone).
        small["link_throughput_top"] = _rows(lt.join(busiest, ["node", "conn", "link", "direction"])
                                             .withColumn("time_us", F.unix_micros("time"))
                                             .orderBy("node", "link", "direction", "time"))
    finally:
        messages.unpersist()
        if le is not None:
            le.unpersist()
    records = sum(r["records"] for r in small["node_counts"])
    small["span"] = {"first_ns": span["lo"], "last_ns": span["hi"], "records": records, "bucket_s": bucket_s}
    return small


# Rows of each table the driver reads back for the page (None: all; the audit has one row per address). The
# histogram has up to ~200 bins per address, the edges one row per pair of adjacent nodes.
_ROW_LIMITS = {"audit": None, "outcomes": None, "hop_counts": None, "latency_histogram": 20_000,
               "path_edges": 2_000}


def _join(out: str, name: str) -> str:
    return f"{out.rstrip('/')}/{name}" if "://" in out else os.path.join(out, name)


def _order(name: str) -> list:
    return {
        "audit": ["address"], "outcomes": ["address", "side", "outcome"], "latency_by_address": ["address"],
        "latency_by_path": [F.desc("count"), "path"], "broker_residence": ["address", "broker"],
        "latency_histogram": ["address", "bin"], "path_edges": [F.desc("messages"), "src", "dst"],
        "entries": [F.desc("messages"), "node"],
        "hop_latency": [F.desc("count"), "hop"], "paths": [F.desc("count"), "path"],
        "hop_counts": ["router_hops"], "node_counts": ["role", "node"],
    }[name]


def summary_text(small: dict, out: str) -> str:
    """The short text summary printed on stdout."""
    t = totals(small["audit"])
    span = small["span"]
    lines = [f"tdflow: {span['records']:,} records, {t.get('sent', 0):,} messages sent over "
             f"{(span['last_ns'] - span['first_ns']) / 1e9:.1f} s",
             f"  received {t.get('received', 0):,}  lost {t.get('lost', 0):,}  duplicated "
             f"{t.get('duplicated', 0):,}  out-of-order {t.get('out_of_order', 0):,}  returned "
             f"{t.get('returned', 0):,}",
             "  outcomes: " + "  ".join(f"{o} {t.get(o, 0):,}" for o in
                                         ("accepted", "rejected", "released", "modified", "no_outcome"))]
    for row in small["latency_by_address"][:10]:
        lines.append(f"  {row['address']}: end-to-end p50 {row['p50_ms']:.3f} ms  p99 {row['p99_ms']:.3f} ms  "
                     f"max {row['max_ms']:.3f} ms  ({row['count']:,} receipts)")
    if small["paths"]:
        top = small["paths"][0]
        lines.append(f"  paths: {len(small['paths'])} distinct; most frequent {top['path']} "
                     f"({top['share'] * 100:.1f}%)")
    lines.append(f"  report: {out}/report.html")
    return "\n".join(lines)
