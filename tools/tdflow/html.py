"""The self-contained ``report.html``: tables of the small results and PNG plots embedded as data URIs.

The plots (docs/flowreport.md):

* **latency distribution**: the end-to-end latency CDF of each address on a log axis, from the latency
  histogram (a bar chart of percentiles on a log axis started at the smallest bar, so a waypoint address
  at ~1 s made a 1 ms p50 look like nothing);
* **paths**: the mesh as the messages used it, a graph of routers and brokers whose arrows carry the number
  of messages that took that step, and the share of each whole path;
* **throughput**: the busiest links over time in seconds from the first record, as messages so far (a burst
  of a few ms stays visible) and as a rate with the empty buckets drawn as zero.

The tables fit the page: the audit and the node counts are split in two, column names wrap, and a
wide table scrolls inside its own box instead of widening the page.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import math

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

HTML_ROWS = 25  # rows per table in the page; the Parquet tables hold them all
PLOT_PATHS = 10
# Addresses drawn in the latency distribution (the busiest); more lines would be unreadable.
PLOT_ADDRESSES = 10
# Nodes drawn in the path graph (those on the busiest steps); a bigger mesh is in the path_edges table.
GRAPH_NODES = 24
PLOT_WIDTH_IN = 9.0
# How far the path graph's arrows bend (matplotlib's arc3 rad): the two directions of a pair stay apart.
ARC_RAD = 0.18
AUDIT_DELIVERY_COLUMNS = ("address", "sent", "received", "delivered", "lost", "returned", "duplicated",
                          "duplicated_messages", "out_of_order", "received_unsent")
NODE_COLUMNS = ("node", "role", "ingress", "egress", "inter_router_egress", "transit", "stored", "delivered",
                "settled")
NODE_CLIENT_COLUMNS = ("node", "role", "client_sent", "client_received", "client_settled", "ingress_bytes",
                       "records")
AUDIT_OUTCOME_COLUMNS = ("address", "accepted", "rejected", "released", "modified", "no_outcome",
                         "consumer_rejected")


def _png(fig, alt: str) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    uri = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<figure><img class=plot alt="{html.escape(alt)}" src="{uri}"></figure>'


# -- latency distribution --------------------------------------------------------------------------------


def latency_cdfs(hist: list[dict]) -> dict[str, tuple[list[float], list[float]]]:
    """address -> (upper bin edges in ms, cumulative fraction of receipts at or below each), in bin order."""
    per: dict[str, list[dict]] = {}
    for r in hist:
        per.setdefault(r["address"], []).append(r)
    cdfs = {}
    for address, rows in per.items():
        rows.sort(key=lambda r: r["bin"])
        total = sum(r["count"] for r in rows)
        if not total:
            continue
        xs, ys, acc = [rows[0]["lo_ms"]], [0.0], 0
        for r in rows:
            acc += r["count"]
            xs.append(r["hi_ms"])
            ys.append(acc / total)
        cdfs[address] = (xs, ys)
    return cdfs


def plot_latency(hist: list[dict], by_address: list[dict]) -> str:
    if not hist:
        return ""
    cdfs = latency_cdfs(hist)
    stats = {r["address"]: r for r in by_address}
    busiest = sorted(cdfs, key=lambda a: -(stats.get(a, {}).get("count") or 0))[:PLOT_ADDRESSES]
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, 4.2))
    for address in sorted(busiest):
        xs, ys = cdfs[address]
        s = stats.get(address, {})
        label = address
        if s:
            label += f"  (p50 {_ms(s['p50_ms'])}, p99 {_ms(s['p99_ms'])}, {s['count']:,} receipts)"
        ax.step(xs, ys, where="post", label=label)
    ax.set_xscale("log")
    # Whole decades around the data (a decade below it at least), labelled in plain ms: a 1 ms and a 1 s
    # address read as what they are, and a single address's step does not sit on the axis.
    lo = min(cdfs[a][0][0] for a in busiest)
    hi = max(cdfs[a][0][-1] for a in busiest)
    first, last = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi))
    ax.set_xlim(10 ** first, 10 ** max(last, first + 2))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,g}"))
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("end-to-end latency (ms, log scale)")
    ax.set_ylabel("fraction of receipts at or below")
    ax.set_title("Latency distribution per address (CDF)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    return _png(fig, "latency distribution")


def _ms(value) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f} ms" if value >= 100 else f"{value:.3g} ms"


# -- paths --------------------------------------------------------------------------------------------------


def graph_layout(nodes: list[str]) -> dict[str, tuple[float, float]]:
    """Nodes on a circle, in the given order (:func:`graph_nodes`: neighbours next to each other)."""
    n = len(nodes)
    if n == 1:
        return {nodes[0]: (0.0, 0.0)}
    return {node: (math.cos(math.pi / 2 - 2 * math.pi * i / n), math.sin(math.pi / 2 - 2 * math.pi * i / n))
            for i, node in enumerate(nodes)}


def graph_nodes(edges: list[dict], brokers: frozenset | set = frozenset()) -> list[str]:
    """The nodes of the busiest edges (at most GRAPH_NODES), in a depth-first walk of the mesh from an end
    (a node with the fewest neighbours, a router rather than a broker: brokers hang off routers), busiest
    step first: on the circle a line of routers stays a line and neighbours sit side by side, so few arrows
    cross."""
    chosen: list[str] = []
    for e in sorted(edges, key=lambda e: (-e["messages"], e["src"], e["dst"])):
        for node in (e["src"], e["dst"]):
            if node not in chosen and len(chosen) < GRAPH_NODES:
                chosen.append(node)
    weight: dict[str, dict[str, int]] = {n: {} for n in chosen}
    for e in edges:
        a, b = e["src"], e["dst"]
        if a in weight and b in weight and a != b:
            weight[a][b] = weight[a].get(b, 0) + e["messages"]
            weight[b][a] = weight[b].get(a, 0) + e["messages"]
    order: list[str] = []
    for start in sorted(chosen, key=lambda n: (len(weight[n]), n in brokers, n)):
        stack = [start]
        while stack:
            node = stack.pop()
            if node in order:
                continue
            order.append(node)
            # pushed lightest first, so the busiest neighbour is visited next
            stack.extend(sorted((n for n in weight[node] if n not in order), key=lambda n: (weight[node][n], n)))
    return order


def plot_path_graph(edges: list[dict], entries: list[dict], brokers: set) -> str:
    if not edges:
        return ""
    nodes = graph_nodes(edges, brokers)
    pos = graph_layout(nodes)
    entered = {r["node"]: r["messages"] for r in entries}
    shown = [e for e in edges if e["src"] in pos and e["dst"] in pos and e["src"] != e["dst"]]
    top = max(e["messages"] for e in shown) if shown else 1
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, 6.0))
    for e in shown:
        (x1, y1), (x2, y2) = pos[e["src"]], pos[e["dst"]]
        width = 0.8 + 4.0 * math.log1p(e["messages"]) / math.log1p(top)
        # Curved, so the two directions between a pair are two arrows, each labelled on its own side.
        ax.add_patch(FancyArrowPatch((x1, y1), (x2, y2), connectionstyle=f"arc3,rad={ARC_RAD}", arrowstyle="-|>",
                                     mutation_scale=14, lw=width, color="#4a78b5", alpha=0.75,
                                     shrinkA=26, shrinkB=26))
        mx, my = (x1 + x2) / 2, (y1 + y2) / 2
        dx, dy = x2 - x1, y2 - y1
        ox, oy = dy * ARC_RAD / 2, -dx * ARC_RAD / 2  # the middle of the arc (a quadratic Bézier curve)
        ax.text(mx + ox, my + oy, f"{e['messages']:,}", fontsize=8, ha="center", va="center",
                bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.9))
    for node, (x, y) in pos.items():
        broker = node in brokers
        label = node + (f"\n{entered[node]:,} entered" if node in entered else "")
        ax.text(x, y, label, ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.4", fc="#fde8c8" if broker else "#dfeaf7",
                          ec="#b07a2a" if broker else "#2d5a8c"))
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.25, 1.25)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("Paths: messages per step between routers (blue) and brokers (orange)")
    return _png(fig, "path graph")


def plot_paths(rows: list[dict]) -> str:
    if not rows:
        return ""
    top = rows[:PLOT_PATHS]
    fig, ax = plt.subplots(figsize=(PLOT_WIDTH_IN, 0.4 * len(top) + 1.2))
    ax.barh(range(len(top)), [r["share"] * 100 for r in top])
    ax.set_yticks(range(len(top)), [r["path"] for r in top], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of messages (%)")
    ax.set_title("Path share")
    return _png(fig, "path share")


# -- throughput ---------------------------------------------------------------------------------------------


def throughput_series(rows: list[dict], first_ns: int, bucket_s: float) -> dict[str, tuple[list, list, list]]:
    """label -> (bucket start in s from ``first_ns``, msg/s with empty buckets as 0, messages so far)."""
    grouped: dict[tuple, dict[int, int]] = {}
    for r in rows:
        t_ns = int(r["time_us"]) * 1000
        key = (r["node"], r["link"], r["direction"])
        b = int(round((t_ns - first_ns) / (bucket_s * 1e9)))
        grouped.setdefault(key, {})[b] = grouped.get(key, {}).get(b, 0) + int(r["messages"])
    series = {}
    for (node, link, direction), buckets in sorted(grouped.items()):
        lo, hi = min(buckets), max(buckets)
        xs, rate, total, acc = [], [], [], 0
        for b in range(min(lo, 0), hi + 2):  # a zero bucket after the last one closes the step
            n = buckets.get(b, 0)
            acc += n
            xs.append(b * bucket_s)
            rate.append(n / bucket_s)
            total.append(acc)
        series[f"{node} link {link} {direction}"] = (xs, rate, total)
    return series


def plot_throughput(rows: list[dict], span: dict) -> str:
    if not rows:
        return ""
    series = throughput_series(rows, span["first_ns"], span["bucket_s"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(PLOT_WIDTH_IN, 6.0), sharex=True)
    for label, (xs, rate, total) in series.items():
        top.step(xs, total, where="post", label=label)
        bottom.step(xs, rate, where="post")
    top.set_ylabel("messages so far")
    top.set_title(f"The busiest links ({span['bucket_s']:g} s buckets)")
    bottom.set_ylabel("messages/s")
    bottom.set_xlabel("seconds since the first record")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    fig.legend(*top.get_legend_handles_labels(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.02),
               ncol=2, frameon=False)
    return _png(fig, "throughput")


# -- tables -------------------------------------------------------------------------------------------------


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime.datetime):
        return value.strftime("%H:%M:%S.%f")[:-3]
    return html.escape("" if value is None else str(value))


def _table(title: str, rows: list[dict], note: str = "", columns=None, table_id: str = "") -> str:
    parts = [f"<h2>{html.escape(title)}</h2>"]
    if note:
        parts.append(f"<p class=note>{html.escape(note)}</p>")
    if not rows:
        parts.append("<p><i>none</i></p>")
        return "\n".join(parts)
    cols = [c for c in (columns or rows[0]) if c in rows[0]]
    ident = f" id={table_id}" if table_id else ""
    # Column names wrap at their underscores (shown as spaces); a table still too wide scrolls in its box.
    parts.append(f"<div class=scroll><table{ident}><tr>"
                 + "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in cols) + "</tr>")
    for r in rows[:HTML_ROWS]:
        parts.append("<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in cols) + "</tr>")
    parts.append("</table></div>")
    if len(rows) > HTML_ROWS:
        parts.append(f"<p class=note>{len(rows) - HTML_ROWS} more rows in the Parquet table.</p>")
    return "\n".join(parts)


STYLE = """body{font-family:sans-serif;margin:2em auto;padding:0 1em;max-width:70em;color:#222}
table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}
th{background:#f0f0f0;font-weight:600;max-width:7em;white-space:normal;vertical-align:bottom}
td:first-child,th:first-child{text-align:left;max-width:none}.scroll{overflow-x:auto;max-width:100%}
.note{color:#666;font-size:13px}figure{margin:1em 0}img.plot{max-width:100%;height:auto}
pre{white-space:pre-wrap}"""


def render(small: dict, summary: str) -> str:
    """The whole page as one string (no external resources)."""
    span = small["span"]
    brokers = {r["node"] for r in small.get("node_counts", []) if r.get("role") == "broker"}
    body = [
        "<h1>tdflow report</h1>",
        f"<pre>{html.escape(summary)}</pre>",
        _table("Delivery audit per address", small["audit"],
               "lost: sent, never received and not returned (released/modified/rejected) to the producer; "
               "duplicated: extra receipts (anycast: beyond one in total; multicast: beyond one per consumer).",
               AUDIT_DELIVERY_COLUMNS, "audit"),
        _table("Outcomes per address", small["audit"],
               "accepted ... no outcome: what the producer saw for its messages; consumer rejected: what "
               "consumers rejected (a broker accepted those when it stored them).",
               AUDIT_OUTCOME_COLUMNS, "audit-outcomes"),
        _table("Outcomes", small["outcomes"], "producer: the outcome the producer saw; consumer: the one it gave."),
        plot_latency(small.get("latency_histogram", []), small["latency_by_address"]),
        _table("End-to-end latency per address", small["latency_by_address"]),
        _table("End-to-end latency per path", small["latency_by_path"]),
        _table("Broker residence (stored to delivered)", small["broker_residence"]),
        _table("Per-hop time", small["hop_latency"], "between consecutive records of a message"),
        plot_path_graph(small.get("path_edges", []), small.get("entries", []), brokers),
        plot_paths(small["paths"]),
        _table("Paths", small["paths"]),
        _table("Hop counts (routers crossed)", small["hop_counts"]),
        _table("Per node counts", small["node_counts"],
               "transit: inter-router egress of a message that arrived from another router", NODE_COLUMNS),
        _table("Per node: clients and volume", small["node_counts"],
               "client sent/received/settled: the clients' own records; records: all records of the node",
               NODE_CLIENT_COLUMNS),
        plot_throughput(small["link_throughput_top"], span),
        f"<p class=note>Link throughput in {span['bucket_s']} s buckets: Parquet table link_throughput.</p>",
    ]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>tdflow report</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + "</body></html>")
