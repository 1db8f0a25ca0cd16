"""``tdflow``: flow-record reports and audits on Spark, and a synthetic record generator.

    tdflow report RECORDS... --out DIR [--master URL] [--conf KEY=VALUE] [--since T] [--until T]
    tdflow audit RECORDS... [--tolerance RATE] [--master URL] [--conf KEY=VALUE]
    tdflow generate --out DIR --records N [--loss-rate R] [--dup-rate R] [--seed S]

RECORDS are directories (searched recursively for ``*.jsonl``), files, or any URI Spark reads.
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time

import click

# Exit statuses: 0 fine, 1 the audit found faults beyond the tolerance, 2 bad usage, no records, or the
# flow extra not installed.
EXIT_FAULTS = 1
EXIT_USAGE = 2

#: The top-level modules of pyproject.toml's ``flow`` extra (py4j comes with pyspark): what tdflow imports
#: only when a command runs, so that a missing one is said in words rather than as ModuleNotFoundError.
FLOW_EXTRA_MODULES = ("pyspark", "py4j", "numpy", "pyarrow", "matplotlib")
INSTALL_FLOW_EXTRA = ("pip install 'trio-dispatch[flow]' (in a checkout: .venv/bin/pip install -e '.[flow]'; "
                      "make test installs it too); Spark also needs Java 17")


class _FlowCommands(click.Group):
    """tdflow's commands: a missing module of the flow extra ends the command with how to install it."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:
            package = (exc.name or "").split(".")[0]
            if package not in FLOW_EXTRA_MODULES:
                raise
            click.echo(f"tdflow: {package} is not installed: tdflow needs the flow extra: {INSTALL_FLOW_EXTRA}",
                       err=True)
            sys.exit(EXIT_USAGE)


def parse_time(value: str | None) -> int | None:
    """ns since the epoch from an integer (ns, or s when small), a float (s) or an ISO 8601 time (UTC)."""
    if value is None:
        return None
    text = value.strip()
    try:
        number = float(text)
    except ValueError:
        pass
    else:
        # Below 1e12 it cannot be ns (that would be 1970); treat it as seconds.
        return int(number * 1e9) if abs(number) < 1e12 else int(number)
    try:
        dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number nor an ISO 8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=datetime.timezone.utc)
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def _check_paths(paths) -> list[str]:
    for p in paths:
        if "://" not in p and not os.path.exists(p):
            raise click.UsageError(f"no such file or directory: {p}")
    return list(paths)


def _options(paths, since, until, multicast, include_open, bucket=None):
    from tools.tdflow.report import Options

    opts = Options(paths=_check_paths(paths), since_ns=parse_time(since), until_ns=parse_time(until),
                   multicast_prefixes=tuple(multicast), include_open=include_open, bucket_s=bucket)
    if opts.since_ns is not None and opts.until_ns is not None and opts.since_ns >= opts.until_ns:
        raise click.BadParameter("--since must be before --until")
    return opts


_common = [
    click.argument("records", nargs=-1, required=True),
    click.option("--master", default=None, help="Spark master URL (default local[2], or $TDFLOW_MASTER): "
                                                "spark://HOST:7077 runs on a standalone cluster."),
    click.option("--conf", "spark_conf", multiple=True, metavar="KEY=VALUE", callback=lambda _c, _p, v: _conf(v),
                 help="A Spark property, as spark-submit --conf (repeatable), e.g. "
                      "spark.sql.shuffle.partitions=8 or spark.executor.memory=4g."),
    click.option("--since", default=None, help="Only messages sent at/after this time (ns, s or ISO 8601)."),
    click.option("--until", default=None, help="Only messages sent before this time."),
    click.option("--multicast", multiple=True, default=("multicast",), show_default=True,
                 help="Address prefix with multicast distribution (repeatable)."),
    click.option("--include-open", is_flag=True, help="Also read complete lines of .jsonl.part files."),
]


def _conf(values) -> dict:
    """``KEY=VALUE`` strings as a dict; a value without ``=`` or a key outside Spark's ``spark.`` namespace is
    a usage error (a typo would otherwise be ignored by Spark)."""
    conf = {}
    for item in values:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.startswith("spark."):
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE with a spark.* key", param_hint="--conf")
        conf[key] = value.strip()
    return conf


def _spark_errors(f):
    """A Spark analysis error (a path it cannot read, ...) ends with its message and status 2, not a trace."""
    import functools

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        from pyspark.errors import AnalysisException

        try:
            return f(*args, **kwargs)
        except AnalysisException as exc:
            click.echo(f"tdflow: {str(exc).splitlines()[0]}", err=True)
            sys.exit(EXIT_USAGE)
    return wrapper


def common(f):
    for deco in reversed(_common):
        f = deco(f)
    return f


@click.group(cls=_FlowCommands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """tdflow: where did every message go, how long did it take, was anything lost or duplicated."""


@main.command()
@common
@click.option("--out", required=True, help="Output directory (Parquet tables, report.html).")
@click.option("--bucket", type=float, default=None, help="Link throughput bucket in seconds (default: auto).")
@_spark_errors
def report(records, master, spark_conf, since, until, multicast, include_open, out, bucket):
    """Delivery audit, latency, paths and throughput: Parquet tables, report.html and a summary."""
    opts = _options(records, since, until, multicast, include_open, bucket)
    from tools.tdflow import html
    from tools.tdflow.report import NoRecords, run_report, summary_text
    from tools.tdflow.session import make_session

    started = time.monotonic()
    spark = make_session(master, conf=spark_conf)
    if os.environ.get("TDFLOW_DEBUG"):
        click.echo(f"tdflow: session {time.monotonic() - started:.1f} s", err=True)
    try:
        small = run_report(spark, opts, out)
    except NoRecords as exc:
        click.echo(f"tdflow: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    finally:
        spark.stop()
    text = summary_text(small, out)
    if "://" not in out:
        with open(os.path.join(out, "report.html"), "w", encoding="utf-8") as fh:
            fh.write(html.render(small, text))
    click.echo(text)
    click.echo(f"  ({time.monotonic() - started:.1f} s)")


@main.command()
@common
@click.option("--tolerance", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Allowed fraction of sent messages lost, and separately duplicated, per address.")
@click.option("--json", "as_json", is_flag=True, help="Print the audit rows as JSON.")
@_spark_errors
def audit(records, master, spark_conf, since, until, multicast, include_open, tolerance, as_json):
    """Exit 1 when any address lost or duplicated more than the tolerance (a CI gate)."""
    opts = _options(records, since, until, multicast, include_open)
    from tools.tdflow.report import audit as run_audit, audit_failures
    from tools.tdflow.session import make_session

    spark = make_session(master, conf=spark_conf)
    try:
        rows = run_audit(spark, opts)
    finally:
        spark.stop()
    if not rows:
        click.echo("tdflow audit: no messages in the given records", err=True)
        sys.exit(EXIT_USAGE)
    failed = audit_failures(rows, tolerance)
    if as_json:
        click.echo(json.dumps(rows, indent=1))
    else:
        cols = ("sent", "received", "lost", "duplicated", "returned", "out_of_order", "accepted", "rejected",
                "released", "modified", "no_outcome")
        click.echo(f"{'address':<24}" + "".join(f"{c:>13}" for c in cols))
        for r in rows:
            click.echo(f"{str(r['address']):<24}" + "".join(f"{r[c]:>13,}" for c in cols))
    if failed:
        click.echo(f"tdflow audit: FAILED: loss or duplication beyond tolerance {tolerance} on "
                   + ", ".join(failed), err=True)
        sys.exit(EXIT_FAULTS)
    click.echo(f"tdflow audit: passed ({len(rows)} addresses, tolerance {tolerance})")


@main.command()
@click.option("--out", required=True, help="Directory for the record files.")
@click.option("--records", "n_records", type=click.IntRange(1), required=True, help="About this many records.")
@click.option("--loss-rate", type=click.FloatRange(0, 0.2), default=0.001, show_default=True)
@click.option("--dup-rate", type=click.FloatRange(0, 0.2), default=0.001, show_default=True)
@click.option("--release-rate", type=click.FloatRange(0, 0.2), default=0.002, show_default=True)
@click.option("--reject-rate", type=click.FloatRange(0, 0.2), default=0.002, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--truth", default=None, help="Ground-truth JSON path (default: OUT/../<name>.truth.json).")
def generate(out, n_records, loss_rate, dup_rate, release_rate, reject_rate, seed, truth):
    """Synthetic records (4-router mesh, broker, multicast) with faults injected at known rates."""
    from tools.tdflow.generate import generate as gen, write_truth

    started = time.monotonic()
    result = gen(out, n_records, loss_rate=loss_rate, dup_rate=dup_rate, release_rate=release_rate,
                 reject_rate=reject_rate, seed=seed)
    truth = truth or os.path.join(os.path.dirname(os.path.abspath(out)),
                                  os.path.basename(os.path.abspath(out)) + ".truth.json")
    write_truth(truth, result)
    click.echo(f"tdflow generate: {result['records']:,} records, {result['messages']:,} messages, "
               f"{result['lost']} lost, {result['duplicated']} duplicated, in {out} "
               f"({time.monotonic() - started:.1f} s); ground truth {truth}")


if __name__ == "__main__":
    main()
