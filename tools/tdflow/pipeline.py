"""The tdflow computations as Spark DataFrame operations (no Python UDFs, nothing big on the driver).

``read_events`` reads record files with the explicit schema. ``build_messages`` groups every record by
message-id once (one shuffle) into a per-message row: who sent it and when, the producer's outcome, every
receipt, the path, broker store/deliver times and the per-hop steps, all with Spark's array functions.
Every per-message result is then an aggregation of that table; per-node counts and link throughput come
from the events directly.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from tools.tdflow.schema import FORWARD_EVENTS, OUTCOMES, RETURNED_OUTCOMES, record_schema

NS_PER_MS = 1_000_000.0
PERCENTILES = (0.5, 0.95, 0.99)
# percentile_approx accuracy: relative error about 1/accuracy; 10,000 is Spark's default.
PERCENTILE_ACCURACY = 10_000
# The latency histogram: bins per decade of ms (each about 12% wide) and the lowest bin's lower edge (1 µs).
HISTOGRAM_BINS_PER_DECADE = 20
HISTOGRAM_FLOOR_MS = 0.001
# Link throughput buckets: the smallest "nice" width giving at most this many points per link.
MAX_BUCKETS = 200
NICE_BUCKETS_S = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600, 21600, 86400)


def read_events(spark: SparkSession, paths, *, include_open: bool = False) -> DataFrame:
    """Records from directories, files or any Hadoop URI; complete ``*.jsonl`` files (and ``.part``)."""
    glob = "*.{jsonl,jsonl.part}" if include_open else "*.jsonl"
    df = (spark.read.schema(record_schema())
          .option("mode", "DROPMALFORMED")  # a half-written last line of a .part file is skipped
          .option("pathGlobFilter", glob)
          .option("recursiveFileLookup", "true")
          .json([str(p) for p in paths]))
    return df.where(F.col("ts").isNotNull() & F.col("event").isNotNull() & F.col("node").isNotNull())


def window_events(events: DataFrame, since_ns: int | None, until_ns: int | None) -> DataFrame:
    """Records whose timestamp is inside [since, until)."""
    if since_ns is not None:
        events = events.where(F.col("ts") >= F.lit(since_ns))
    if until_ns is not None:
        events = events.where(F.col("ts") < F.lit(until_ns))
    return events


def _ev(name: str) -> Column:
    return F.col("event") == F.lit(name)


def _step_label(x: Column) -> Column:
    # Client events are labelled without the node (one label per client would be noise).
    return F.when(x["event"].isin("sent", "received"), x["event"]).otherwise(
        F.concat(x["event"], F.lit("@"), x["node"]))


def build_messages(events: DataFrame, multicast_prefixes=(), since_ns=None, until_ns=None) -> DataFrame:
    """One row per message-id with everything the per-message results need.

    A message belongs to the window when it was sent (or first seen) inside it; all of its records are
    used, so a message sent just before ``until`` and received after it is not counted as lost.
    """
    consumer = F.concat_ws("/", "node", "link")
    # Shuffle the raw records by mid first: a map-side partial aggregation of collect_list gains nothing
    # when nearly every key is distinct and costs ~40% of this step (measured on 1M records).
    g = (events.where(F.col("mid").isNotNull())
         .repartition(F.col("mid"))
         .groupBy("mid")
         .agg(F.min(F.when(_ev("sent"), F.col("ts"))).alias("sent_ts"),
              F.count(F.when(_ev("sent"), 1)).alias("n_sent"),
              F.min(F.col("ts")).alias("first_ts"),
              F.max(F.col("ts")).alias("last_ts"),
              F.min(F.when(_ev("sent"), F.struct("ts", "node", "link"))).alias("_p"),
              F.min(F.when(F.col("address").isNotNull() & F.col("event").isin(*FORWARD_EVENTS),
                           F.struct("ts", "address"))).alias("_a"),
              F.max(F.when(_ev("settled"), F.struct("ts", "outcome"))).alias("_ps"),
              F.min(F.when(_ev("settle") & F.col("outcome").isNotNull(),
                           F.struct("ts", "outcome"))).alias("_rs"),
              F.collect_list(F.when(F.col("event").isin(*FORWARD_EVENTS),
                                    F.struct("ts", "event", "node"))).alias("_tl"),
              F.collect_list(F.when(_ev("received"),
                                    F.struct("ts", consumer.alias("consumer"), "outcome"))).alias("_recv")))
    start = F.coalesce("sent_ts", "first_ts")
    if since_ns is not None:
        g = g.where(start >= F.lit(since_ns))
    if until_ns is not None:
        g = g.where(start < F.lit(until_ns))

    tl = F.array_sort("_tl")  # structs sort by their first field, ts
    recv = F.col("_recv")
    consumers = F.array_distinct(F.transform(recv, lambda r: r["consumer"]))
    first_receipts = F.transform(consumers, lambda c: F.struct(
        c.alias("consumer"),
        F.array_min(F.transform(F.filter(recv, lambda r: r["consumer"] == c), lambda r: r["ts"])).alias("ts")))
    n = F.size(tl)
    steps = F.when(n >= 2, F.transform(F.sequence(F.lit(2), n), lambda i: F.struct(
        F.concat(_step_label(F.try_element_at(tl, i - 1)), F.lit(" -> "), _step_label(F.try_element_at(tl, i)))
        .alias("hop"),
        (F.try_element_at(tl, i)["ts"] - F.try_element_at(tl, i - 1)["ts"]).alias("dt")))).otherwise(
        F.array().cast("array<struct<hop:string,dt:bigint>>"))
    stores = F.filter(tl, lambda x: x["event"] == "store")
    store_ts = F.array_min(F.transform(stores, lambda x: x["ts"]))
    path_nodes = F.transform(F.filter(tl, lambda x: x["event"].isin("ingress", "store")), lambda x: x["node"])
    address = F.col("_a.address")
    multicast = F.lit(False)
    for prefix in multicast_prefixes:
        multicast = multicast | (address == prefix) | address.startswith(prefix + ".") | \
            address.startswith(prefix + "/")

    m = g.select(
        "mid",
        address.alias("address"),
        F.col("_p.node").alias("producer"),
        F.col("_p.link").alias("producer_link"),
        "sent_ts", "n_sent", "first_ts", "last_ts",
        F.coalesce(F.col("_ps.outcome"), F.col("_rs.outcome")).alias("outcome"),
        F.size(recv).alias("n_recv"),
        F.size(consumers).alias("n_consumers"),
        first_receipts.alias("receipts"),
        F.transform(recv, lambda r: r["outcome"]).alias("consumer_outcomes"),
        multicast.alias("multicast"),
        F.array_join(path_nodes, " > ").alias("path"),
        F.size(F.filter(tl, lambda x: x["event"] == "ingress")).alias("router_hops"),
        F.try_element_at(F.transform(stores, lambda x: x["node"]), F.lit(1)).alias("broker"),
        store_ts.alias("store_ts"),
        F.array_min(F.transform(F.filter(tl, lambda x: (x["event"] == "deliver") & (x["ts"] >= store_ts)),
                                lambda x: x["ts"])).alias("deliver_ts"),
        steps.alias("steps"),
    )
    return m


def _duplicates(m: DataFrame) -> Column:
    # Extra copies: anycast expects one receipt in total, multicast one per consumer.
    return F.when(m["multicast"], m["n_recv"] - m["n_consumers"]).otherwise(F.greatest(m["n_recv"] - 1, F.lit(0)))


def out_of_order(m: DataFrame) -> DataFrame:
    """Per address: receipts that arrived after a later-sent message from the same producer (per consumer)."""
    r = (m.where(F.col("sent_ts").isNotNull())
         .select("address", "producer", "sent_ts", F.explode("receipts").alias("r"))
         .select("address", "producer", "sent_ts", F.col("r.consumer").alias("consumer"),
                 F.col("r.ts").alias("recv_ts")))
    w = (Window.partitionBy("address", "producer", "consumer").orderBy("recv_ts", "sent_ts")
         .rowsBetween(Window.unboundedPreceding, -1))
    r = r.withColumn("ooo", F.col("sent_ts") < F.max("sent_ts").over(w))
    return r.groupBy("address").agg(F.count(F.when(F.col("ooo"), 1)).alias("out_of_order"))


def delivery_audit(m: DataFrame) -> DataFrame:
    """Per address: sent, received, lost, duplicated, out-of-order and the producer-side outcomes."""
    sent = m["n_sent"] > 0
    none_received = m["n_recv"] == 0
    returned = m["outcome"].isin(*RETURNED_OUTCOMES)
    dup = _duplicates(m)
    aggs = [
        F.count(F.when(sent, 1)).alias("sent"),
        F.sum("n_recv").alias("received"),
        F.count(F.when(m["n_recv"] > 0, 1)).alias("delivered"),
        F.count(F.when(sent & none_received & ~F.coalesce(returned, F.lit(False)), 1)).alias("lost"),
        F.count(F.when(sent & none_received & returned, 1)).alias("returned"),
        F.sum(dup).alias("duplicated"),
        F.count(F.when(dup > 0, 1)).alias("duplicated_messages"),
        F.count(F.when(~sent & (m["n_recv"] > 0), 1)).alias("received_unsent"),
    ]
    aggs += [F.count(F.when(sent & (m["outcome"] == o), 1)).alias(o) for o in OUTCOMES]
    aggs.append(F.count(F.when(sent & m["outcome"].isNull(), 1)).alias("no_outcome"))
    aggs.append(F.sum(F.size(F.filter("consumer_outcomes", lambda o: o == "rejected"))).alias("consumer_rejected"))
    audit = m.where(F.col("address").isNotNull()).groupBy("address").agg(*aggs)
    audit = audit.join(out_of_order(m), "address", "left").fillna(0, ["out_of_order"])
    return audit.select("address", "sent", "received", "delivered", "lost", "returned", "duplicated",
                        "duplicated_messages", "out_of_order", "received_unsent", *OUTCOMES, "no_outcome",
                        "consumer_rejected").orderBy("address")


def outcomes(m: DataFrame) -> DataFrame:
    """Outcome counts per address, as the producer saw them and as consumers gave them."""
    producer = (m.where(F.col("n_sent") > 0)
                .select("address", F.lit("producer").alias("side"),
                        F.coalesce("outcome", F.lit("none")).alias("outcome")))
    consumer = m.select("address", F.lit("consumer").alias("side"),
                        F.explode("consumer_outcomes").alias("outcome")).fillna("none", ["outcome"])
    return (producer.unionByName(consumer).groupBy("address", "side", "outcome").count()
            .orderBy("address", "side", "outcome"))


def _latency_aggs(col: Column) -> list[Column]:
    pct = F.percentile_approx(col, list(PERCENTILES), PERCENTILE_ACCURACY)
    return [F.count(col).alias("count"),
            (pct[0] / NS_PER_MS).alias("p50_ms"), (pct[1] / NS_PER_MS).alias("p95_ms"),
            (pct[2] / NS_PER_MS).alias("p99_ms"), (F.max(col) / NS_PER_MS).alias("max_ms"),
            (F.avg(col) / NS_PER_MS).alias("mean_ms")]


def receipts_with_latency(m: DataFrame) -> DataFrame:
    """One row per first receipt by each consumer, with its end-to-end latency (ns)."""
    return (m.where(F.col("sent_ts").isNotNull())
            .select("address", "path", "router_hops", "sent_ts", F.explode("receipts").alias("r"))
            .select("address", "path", "router_hops", (F.col("r.ts") - F.col("sent_ts")).alias("e2e_ns")))


def latency_by_address(receipts: DataFrame) -> DataFrame:
    return receipts.groupBy("address").agg(*_latency_aggs(F.col("e2e_ns"))).orderBy("address")


def latency_by_path(receipts: DataFrame) -> DataFrame:
    return (receipts.where(F.col("path") != "").groupBy("path", "router_hops")
            .agg(*_latency_aggs(F.col("e2e_ns"))).orderBy(F.desc("count"), "path"))


def latency_histogram(receipts: DataFrame) -> DataFrame:
    """Per address, the end-to-end latencies in log-spaced bins (HISTOGRAM_BINS_PER_DECADE per decade of
    ms, from HISTOGRAM_FLOOR_MS up): the latency distribution the report draws as a CDF. A latency below
    the floor (or negative: the clocks of two machines disagree) counts in the lowest bin."""
    ms = F.greatest(F.col("e2e_ns") / F.lit(NS_PER_MS), F.lit(HISTOGRAM_FLOOR_MS))
    b = F.floor(F.log10(ms) * F.lit(HISTOGRAM_BINS_PER_DECADE)).cast("int")
    h = receipts.groupBy("address", b.alias("bin")).agg(F.count(F.lit(1)).alias("count"))
    return h.select("address", "bin",
                    F.pow(F.lit(10.0), F.col("bin") / F.lit(HISTOGRAM_BINS_PER_DECADE)).alias("lo_ms"),
                    F.pow(F.lit(10.0), (F.col("bin") + 1) / F.lit(HISTOGRAM_BINS_PER_DECADE)).alias("hi_ms"),
                    "count").orderBy("address", "bin")


def path_edges(m: DataFrame) -> DataFrame:
    """Messages per step between two consecutive nodes of the paths (router to router, router to broker
    and back): the edges of the mesh as the messages used it, for the report's picture of the paths."""
    nodes = F.split(F.col("path"), " > ")
    n = F.size(nodes)
    pairs = F.when(n >= 2, F.transform(F.sequence(F.lit(2), n), lambda i: F.struct(
        F.element_at(nodes, i - 1).alias("src"), F.element_at(nodes, i).alias("dst")))).otherwise(
        F.array().cast("array<struct<src:string,dst:string>>"))
    e = m.where(F.col("path") != "").select(F.explode(pairs).alias("e"))
    return (e.groupBy(F.col("e.src").alias("src"), F.col("e.dst").alias("dst")).agg(F.count(F.lit(1)).alias("messages"))
            .orderBy(F.desc("messages"), "src", "dst"))


def entries(m: DataFrame) -> DataFrame:
    """Messages per node where they entered the mesh (the first node of the path)."""
    first = F.element_at(F.split(F.col("path"), " > "), 1)
    return (m.where(F.col("path") != "").groupBy(first.alias("node")).agg(F.count(F.lit(1)).alias("messages"))
            .orderBy(F.desc("messages"), "node"))


def broker_residence(m: DataFrame) -> DataFrame:
    """Waypoint messages: time from the broker's store to its first delivery, per address and broker."""
    res = m.where(F.col("store_ts").isNotNull() & F.col("deliver_ts").isNotNull()) \
        .select("address", "broker", (F.col("deliver_ts") - F.col("store_ts")).alias("res_ns"))
    return res.groupBy("address", "broker").agg(*_latency_aggs(F.col("res_ns"))).orderBy("address", "broker")


def hop_latency(m: DataFrame) -> DataFrame:
    """Time between consecutive records of a message (client to router, inside a router, router to router,
    broker residence ...), where both ends recorded."""
    steps = m.select(F.explode("steps").alias("s")).select(F.col("s.hop").alias("hop"), F.col("s.dt").alias("dt"))
    return steps.groupBy("hop").agg(*_latency_aggs(F.col("dt"))).orderBy(F.desc("count"), "hop")


def paths(m: DataFrame) -> DataFrame:
    """Frequency and share of each path (routers and brokers in the order the message met them)."""
    p = m.where(F.col("path") != "").groupBy("path", "router_hops").count()
    total = F.sum("count").over(Window.partitionBy())
    return p.withColumn("share", F.col("count") / total).orderBy(F.desc("count"), "path")


def hop_counts(m: DataFrame) -> DataFrame:
    """How many messages crossed 1, 2, 3 ... routers."""
    h = m.where(F.col("router_hops") > 0).groupBy("router_hops").count()
    return h.withColumn("share", F.col("count") / F.sum("count").over(Window.partitionBy())).orderBy("router_hops")


def link_events(events: DataFrame, bucket_s: float) -> DataFrame:
    """Records counted per node, link, event, time bucket and trace length (0, 1, 2 = two or more): one
    scan of the events that both :func:`node_counts` and :func:`link_throughput` aggregate further."""
    bucket_ns = int(bucket_s * 1e9)
    return (events.groupBy("node", "conn", "link", "event",
                           F.floor(F.col("ts") / F.lit(bucket_ns)).cast("long").alias("bucket"),
                           F.least(F.coalesce(F.size("trace"), F.lit(0)), F.lit(2)).alias("trace_len"))
            .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes")))


def node_counts(le: DataFrame) -> DataFrame:
    """Per node: ingress, egress, transit (inter-router egress of a message that came from another router,
    i.e. a trace of two or more routers), stores, deliveries, settlements, client sends and receipts."""
    def c(cond, name):
        return F.sum(F.when(cond, F.col("n")).otherwise(0)).alias(name)

    df = le.groupBy("node").agg(
        c(_ev("ingress"), "ingress"), c(_ev("egress"), "egress"),
        c(_ev("egress") & (F.col("trace_len") >= 1), "inter_router_egress"),
        c(_ev("egress") & (F.col("trace_len") >= 2), "transit"),
        c(_ev("store"), "stored"), c(_ev("deliver"), "delivered"), c(_ev("settle"), "settled"),
        c(_ev("sent"), "client_sent"), c(_ev("received"), "client_received"),
        c(_ev("settled"), "client_settled"),
        F.sum(F.when(_ev("ingress"), F.col("bytes"))).alias("ingress_bytes"),
        F.sum("n").alias("records"))
    role = (F.when((F.col("stored") + F.col("delivered")) > 0, "broker")
            .when((F.col("ingress") + F.col("egress")) > 0, "router").otherwise("client"))
    return df.select("node", role.alias("role"), *[x for x in df.columns if x != "node"]).orderBy("role", "node")


def choose_bucket_s(span_ns: int) -> float:
    """The smallest nice bucket width giving at most MAX_BUCKETS buckets over the span."""
    for width in NICE_BUCKETS_S:
        if span_ns / (width * 1e9) <= MAX_BUCKETS:
            return width
    return NICE_BUCKETS_S[-1]


def link_throughput(le: DataFrame, bucket_s: float) -> DataFrame:
    """Messages and bytes per link per time bucket (in: ingress/store/received, out: egress/deliver/sent)."""
    bucket_ns = int(bucket_s * 1e9)
    direction = F.when(F.col("event").isin("ingress", "store", "received"), "in").otherwise("out")
    t = (le.where(F.col("event").isin(*FORWARD_EVENTS))
         .groupBy("node", "conn", "link", direction.alias("direction"), "bucket")
         .agg(F.sum("n").alias("messages"), F.sum("bytes").alias("bytes")))
    return t.select("node", "conn", "link", "direction",
                    F.timestamp_micros(F.col("bucket") * F.lit(bucket_ns // 1000)).alias("time"),
                    "messages", "bytes", (F.col("messages") / F.lit(float(bucket_s))).alias("msg_per_s"))
