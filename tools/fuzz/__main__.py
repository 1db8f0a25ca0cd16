"""The fuzz campaign runner: ``python -m tools.fuzz --target all --seconds 600`` (see the package docstring).

Runs each target in its own worker process (one after the other, or ``--jobs N`` at a time), then prints
one line per target (executions, rate, distinct violations) and the saved inputs. Exit status: 0 when no
target found anything, 1 when some did, 2 on a usage error.

``--replay FILE...`` runs saved inputs through ``--target`` in this process and prints what each does;
``--minimize FILE`` shrinks one input while it still fails with the same signature (written next to it
as ``FILE.min``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from tools.fuzz import TARGETS, load_target
from tools.fuzz.harness import KNOWN

# Under build/, which git ignores: a long run's corpus is large and belongs to the machine that grew it.
DEFAULT_CORPUS = "build/fuzz/corpus"
DEFAULT_CRASHES = "build/fuzz/crashes"


def atheris_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def worker_command(target: str, *, engine: str, corpus: str, crashes: str, seconds: int = 0, runs: int = 0,
                   seed: int = 1) -> list[str]:
    return [sys.executable, "-m", "tools.fuzz.worker", "--target", target, "--engine", engine,
            "--corpus", corpus, "--crashes", crashes, "--seconds", str(seconds), "--runs", str(runs),
            "--seed", str(seed)]


def run_target(target: str, *, engine: str, corpus: str, crashes: str, seconds: int = 0, runs: int = 0,
               seed: int = 1, log_dir: str | None = None, timeout: float | None = None) -> dict:
    """Run one target in a worker process; returns its summary (executions, violations, exit status)."""
    os.makedirs(crashes, exist_ok=True)
    cmd = worker_command(target, engine=engine, corpus=os.path.join(corpus, target), crashes=crashes,
                         seconds=seconds, runs=runs, seed=seed)
    log_path = os.path.join(log_dir or crashes, f"{target}.log")
    started = time.monotonic()
    with open(log_path, "wb") as log:
        # stdin is /dev/null: a mutated file path (sasl-files' sasldb_path) may name /dev/stdin.
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=timeout,
                              cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    summary = read_summary(crashes, target)
    summary.update(target=target, status=proc.returncode, wall_seconds=round(time.monotonic() - started, 1),
                   log=log_path, crash_files=saved_inputs(crashes, target))
    executions = libfuzzer_runs(log_path)
    if executions is not None:
        summary["executions"] = executions
    return summary


def read_summary(crashes: str, target: str) -> dict:
    try:
        with open(os.path.join(crashes, f"{target}.summary.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"executions": 0, "violations": {}}


def libfuzzer_runs(log_path: str) -> int | None:
    """Executions libFuzzer reports at the end of its log (``Done N runs in S second(s)``)."""
    try:
        with open(log_path, "rb") as f:
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    for line in reversed(text.splitlines()):
        if line.startswith("Done ") and " runs in " in line:
            return int(line.split()[1])
        if line.startswith("stat::number_of_executed_units:"):
            return int(line.split(":")[-1])
    return None


def saved_inputs(crashes: str, target: str) -> list[str]:
    """Inputs saved for ``target``: one per distinct violation, plus libFuzzer's own (crash, timeout, oom)."""
    try:
        names = os.listdir(crashes)
    except OSError:
        return []
    own = [n for n in names if n.startswith(target + "-") and n.endswith(".bin")]
    libfuzzer = [n for n in names if n.startswith(target + "-libfuzzer-")]
    return sorted(os.path.join(crashes, n) for n in own + libfuzzer)


def replay(target_name: str, files: list[str]) -> int:
    from tools.fuzz.worker import Recorder

    target = load_target(target_name)
    target.setup()
    failed = 0
    for path in files:
        with open(path, "rb") as f:
            data = f.read()
        v = Recorder(target, None).run(data)
        if v is None:
            print(f"{path}: ok")
        else:
            failed += 1
            print(f"{path}: {v.signature}\n{v.detail}")
    return 1 if failed else 0


def minimize(target_name: str, path: str) -> int:
    """Greedy delta minimisation: drop chunks (halving their size) while the same signature persists."""
    from tools.fuzz.worker import Recorder

    target = load_target(target_name)
    target.setup()
    with open(path, "rb") as f:
        data = f.read()
    first = Recorder(target, None).run(data)
    if first is None:
        print(f"{path}: does not fail")
        return 1
    sig = first.signature
    chunk = max(1, len(data) // 2)
    while chunk >= 1:
        i = 0
        while i < len(data):
            candidate = data[:i] + data[i + chunk:]
            v = Recorder(target, None).run(candidate) if candidate else None
            if v is not None and v.signature == sig:
                data = candidate
            else:
                i += chunk
        chunk //= 2
    with open(path + ".min", "wb") as f:
        f.write(data)
    print(f"{path}.min: {len(data)} bytes, still {sig}\n{data!r}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="all", help="a target name or 'all' (see --list)")
    p.add_argument("--list", action="store_true", help="list the targets and exit")
    p.add_argument("--seconds", type=int, default=600, help="time budget per target (default 600)")
    p.add_argument("--runs", type=int, default=0, help="execution budget per target (default: none)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto",
                   help="atheris (coverage-guided) when installed, else random")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help="corpus root; one directory per target")
    p.add_argument("--crashes", default=DEFAULT_CRASHES, help="where violating inputs and logs go")
    p.add_argument("--jobs", type=int, default=1, help="targets run at once (default 1)")
    p.add_argument("--replay", nargs="+", metavar="FILE", help="run saved inputs through --target")
    p.add_argument("--minimize", metavar="FILE", help="shrink one saved input for --target")
    args = p.parse_args(argv)
    if args.list:
        for name in TARGETS:
            print(f"{name:16} {load_target(name).description}")
        return 0
    if args.replay or args.minimize:
        if args.target not in TARGETS:
            p.error("--replay and --minimize need one --target")
        return replay(args.target, args.replay) if args.replay else minimize(args.target, args.minimize)
    names = list(TARGETS) if args.target == "all" else args.target.split(",")
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        p.error(f"unknown target(s) {', '.join(unknown)}; see --list")
    engine = args.engine
    if engine == "auto":
        engine = "atheris" if atheris_available() else "random"
    print(f"fuzz campaign: {len(names)} target(s), engine {engine}, {args.seconds or '-'} s"
          f"{f' / {args.runs} runs' if args.runs else ''} each; corpus {args.corpus}, crashes {args.crashes}",
          flush=True)
    results = []
    # Each target is a worker process; the threads only wait for them (--jobs of them at once).
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_target, n, engine=engine, corpus=args.corpus, crashes=args.crashes,
                               seconds=args.seconds, runs=args.runs, seed=args.seed) for n in names]
        for fut in futures:
            r = fut.result()
            results.append(r)
            rate = r["executions"] / r["wall_seconds"] if r["wall_seconds"] else 0
            found = r.get("violations") or {}
            print(f"{r['target']:16} {r['executions']:>9} executions {rate:>7.0f}/s  "
                  f"{len(found)} distinct violation(s)  exit {r['status']}", flush=True)
            for sig, count in found.items():
                print(f"    {count:>6} x {sig}")
            for sig, count in (r.get("known") or {}).items():
                print(f"    {count:>6} x known: {sig} (pinned by {KNOWN[sig]})")
            for path in r["crash_files"]:
                print(f"    saved: {path}")
    return 1 if any(r.get("violations") or r["crash_files"] or r["status"] not in (0,) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
