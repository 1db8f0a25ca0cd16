"""The self-contained ``report.html``: tables of the small results and PNG plots embedded as data URIs."""

from __future__ import annotations

import base64
import datetime
import html
import io

import matplotlib

matplotlib.use("Agg")  # no display; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402

HTML_ROWS = 25  # rows per table in the page; the Parquet tables hold them all
PLOT_PATHS = 10


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def plot_throughput(rows: list[dict]) -> str | None:
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.8))
    series: dict = {}
    for r in rows:
        series.setdefault((r["node"], r["link"], r["direction"]), []).append((r["time"], r["msg_per_s"]))
    for (node, link, direction), pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{node} link {link} {direction}")
    ax.set_ylabel("messages/s")
    ax.set_title("Throughput of the busiest links")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.autofmt_xdate()
    return _png(fig)


def plot_latency(rows: list[dict]) -> str | None:
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(9, 3.8))
    names = [r["address"] for r in rows]
    width = 0.27
    for i, key in enumerate(("p50_ms", "p95_ms", "p99_ms")):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], [max(r[key] or 0, 1e-6) for r in rows],
               width, label=key.split("_")[0])
    ax.set_xticks(range(len(rows)), names, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("end-to-end latency (ms)")
    ax.set_title("Latency percentiles per address")
    ax.legend(fontsize=8)
    return _png(fig)


def plot_paths(rows: list[dict]) -> str | None:
    if not rows:
        return None
    top = rows[:PLOT_PATHS]
    fig, ax = plt.subplots(figsize=(9, 0.4 * len(top) + 1.2))
    ax.barh(range(len(top)), [r["share"] * 100 for r in top])
    ax.set_yticks(range(len(top)), [r["path"] for r in top], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("share of messages (%)")
    ax.set_title("Path share")
    return _png(fig)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, datetime.datetime):
        return value.strftime("%H:%M:%S.%f")[:-3]
    return html.escape("" if value is None else str(value))


def _table(title: str, rows: list[dict], note: str = "") -> str:
    parts = [f"<h2>{html.escape(title)}</h2>"]
    if note:
        parts.append(f"<p class=note>{html.escape(note)}</p>")
    if not rows:
        parts.append("<p><i>none</i></p>")
        return "\n".join(parts)
    cols = list(rows[0])
    parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>")
    for r in rows[:HTML_ROWS]:
        parts.append("<tr>" + "".join(f"<td>{_cell(r[c])}</td>" for c in cols) + "</tr>")
    parts.append("</table>")
    if len(rows) > HTML_ROWS:
        parts.append(f"<p class=note>{len(rows) - HTML_ROWS} more rows in the Parquet table.</p>")
    return "\n".join(parts)


def _img(title: str, uri: str | None) -> str:
    return f'<figure><img alt="{html.escape(title)}" src="{uri}"></figure>' if uri else ""


STYLE = """body{font-family:sans-serif;margin:2em;color:#222}table{border-collapse:collapse;font-size:13px}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}th{background:#f0f0f0}
td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:13px}img{max-width:100%}"""


def render(small: dict, summary: str) -> str:
    """The whole page as one string (no external resources)."""
    span = small["span"]
    body = [
        "<h1>tdflow report</h1>",
        f"<pre>{html.escape(summary)}</pre>",
        _table("Delivery audit per address", small["audit"],
               "lost: sent, never received and not returned (released/modified/rejected) to the producer; "
               "duplicated: extra receipts (anycast: beyond one in total; multicast: beyond one per consumer)."),
        _table("Outcomes", small["outcomes"], "producer: the outcome the producer saw; consumer: the one it gave."),
        _img("latency", plot_latency(small["latency_by_address"])),
        _table("End-to-end latency per address", small["latency_by_address"]),
        _table("End-to-end latency per path", small["latency_by_path"]),
        _table("Broker residence (stored to delivered)", small["broker_residence"]),
        _table("Per-hop time", small["hop_latency"], "between consecutive records of a message"),
        _img("paths", plot_paths(small["paths"])),
        _table("Paths", small["paths"]),
        _table("Hop counts (routers crossed)", small["hop_counts"]),
        _table("Per node counts", small["node_counts"],
               "transit: inter-router egress of a message that arrived from another router"),
        _img("throughput", plot_throughput(small["link_throughput_top"])),
        f"<p class=note>Link throughput in {span['bucket_s']} s buckets: Parquet table link_throughput.</p>",
    ]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>tdflow report</title>"
            f"<style>{STYLE}</style></head><body>" + "\n".join(body) + "</body></html>")
