"""One fuzz target in one process: ``python -m tools.fuzz.worker --target NAME [options]``.

Started by the campaign runner (:mod:`tools.fuzz.__main__`) and by the test suite; usable on its own.
With atheris the code under test is imported inside ``atheris.instrument_imports`` (so libFuzzer sees
its branch coverage) and libFuzzer drives the run: corpus directory, ``-max_total_time``, ``-runs``,
``-seed``, a dictionary of protocol tokens. With ``--engine random`` a plain mutator replays the seeds
and random mutations of them.

Every distinct violation (see :class:`tools.fuzz.harness.Violation`) is written once to the crash
directory as ``<target>-<hash>.bin`` and ``.txt``, and the run carries on, so one run reports every
distinct failure it meets rather than only the first. The last line printed is a JSON summary
(``{"target", "engine", "executions", "seconds", "violations": {signature: count}}``) written to
``<crashes>/<target>.summary.json`` (at start, at each new violation and every 500 inputs: libFuzzer ends
the process without running Python's exit handlers, so the runner takes the final execution count from
libFuzzer's own last line); the random engine also prints it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time

from tools.fuzz import TARGETS, load_target
from tools.fuzz.dictionary import tokens_for
from tools.fuzz.harness import KNOWN, Violation

#: libFuzzer's per-input time limit (seconds): an input that takes longer is a hang, saved as such.
INPUT_TIMEOUT_SECONDS = 30
#: libFuzzer's memory limit for one target process.
RSS_LIMIT_MB = 3072


class Recorder:
    """Runs inputs through a target and keeps one input per distinct violation."""

    def __init__(self, target, crash_dir: str | None, engine: str = "", stop_on_violation: bool = False):
        self.target = target
        self.engine = engine
        self.crash_dir = crash_dir
        self.stop = stop_on_violation
        self.executions = 0
        self.violations: dict[str, int] = {}
        self.known: dict[str, int] = {}  # violations in harness.KNOWN: counted, not reported again
        self.started = time.monotonic()

    def run(self, data: bytes) -> Violation | None:
        self.executions += 1
        try:
            self.target.execute(data)
            return None
        except Violation as v:
            violation = v
        except RecursionError as exc:
            violation = Violation.from_exception(exc)
        except Exception as exc:  # noqa: BLE001 - every escaping exception is a finding
            violation = Violation.from_exception(exc)
        self._record(violation, data)
        if self.stop and violation.signature not in KNOWN:
            self.write_summary()
            raise SystemExit(f"{self.target.name}: {violation.signature}")
        return violation

    def _record(self, v: Violation, data: bytes) -> None:
        if v.signature in KNOWN:
            self.known[v.signature] = self.known.get(v.signature, 0) + 1
            return
        first = v.signature not in self.violations
        self.violations[v.signature] = self.violations.get(v.signature, 0) + 1
        if not first:
            return
        print(f"[{self.target.name}] NEW VIOLATION: {v.signature}", file=sys.stderr, flush=True)
        if self.crash_dir:
            stem = os.path.join(self.crash_dir, f"{self.target.name}-{signature_hash(v.signature)}")
            with open(stem + ".bin", "wb") as f:
                f.write(data)
            with open(stem + ".txt", "w", encoding="utf-8") as f:
                f.write(f"target: {self.target.name}\nsignature: {v.signature}\n\n{v.detail}\n")
        self.write_summary()

    def summary(self) -> dict:
        return {"target": self.target.name, "engine": self.engine, "executions": self.executions,
                "seconds": round(time.monotonic() - self.started, 1), "violations": dict(self.violations),
                "known": dict(self.known)}

    def write_summary(self) -> None:
        if self.crash_dir:
            with open(os.path.join(self.crash_dir, f"{self.target.name}.summary.json"), "w") as f:
                json.dump(self.summary(), f)


def signature_hash(signature: str) -> str:
    return hashlib.sha1(signature.encode()).hexdigest()[:12]


def _write_seeds(target, corpus: str) -> None:
    os.makedirs(corpus, exist_ok=True)
    for i, seed in enumerate(target.seeds()):
        with open(os.path.join(corpus, f"seed-{i:03d}"), "wb") as f:
            f.write(seed[:target.max_len])


def _write_dictionary(name: str, path: str) -> str | None:
    tokens = tokens_for(name)
    if not tokens:
        return None
    with open(path, "w", encoding="ascii") as f:
        for i, tok in enumerate(tokens):
            escaped = "".join(chr(b) if 0x20 <= b < 0x7F and b not in (0x22, 0x5C) else f"\\x{b:02x}" for b in tok)
            f.write(f'kw{i}="{escaped}"\n')
    return path


def run_atheris(args, target, recorder: Recorder) -> None:
    import atheris

    _write_seeds(target, args.corpus)
    libfuzzer = [sys.argv[0], f"-seed={args.seed}", f"-max_len={target.max_len}",
                 f"-timeout={INPUT_TIMEOUT_SECONDS}", f"-rss_limit_mb={RSS_LIMIT_MB}", "-print_final_stats=1",
                 f"-artifact_prefix={os.path.join(args.crashes, target.name)}-libfuzzer-"]
    if args.seconds:
        libfuzzer.append(f"-max_total_time={args.seconds}")
    if args.runs:
        libfuzzer.append(f"-runs={args.runs}")
    dictionary = _write_dictionary(target.name, os.path.join(args.crashes, f"{target.name}.dict"))
    if dictionary:
        libfuzzer.append(f"-dict={dictionary}")
    libfuzzer.append(args.corpus)

    def one(data: bytes) -> None:
        recorder.run(data)
        if recorder.executions % 500 == 0:
            recorder.write_summary()

    atheris.Setup(libfuzzer, one)
    atheris.Fuzz()  # libFuzzer exits the process when the budget is spent


def run_random(args, target, recorder: Recorder) -> None:
    """Replay the corpus, then mutate it at random until the budget is spent (no coverage guidance)."""
    from tools.fuzz.mutate import Mutator

    _write_seeds(target, args.corpus)
    corpus = []
    for fn in sorted(os.listdir(args.corpus)):
        with open(os.path.join(args.corpus, fn), "rb") as f:
            corpus.append(f.read())
    mutator = Mutator(random.Random(args.seed), corpus, tokens_for(target.name), target.max_len)
    deadline = time.monotonic() + args.seconds if args.seconds else None
    for data in corpus:
        recorder.run(data)
    while (not args.runs or recorder.executions < args.runs) and (deadline is None or time.monotonic() < deadline):
        recorder.run(mutator.mutate())
        if not args.runs and deadline is None:
            break


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="python -m tools.fuzz.worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, choices=sorted(TARGETS))
    p.add_argument("--engine", choices=("atheris", "random"), default="atheris")
    p.add_argument("--corpus", required=True, help="corpus directory (seeds are written into it)")
    p.add_argument("--crashes", required=True, help="where violating inputs are saved")
    p.add_argument("--seconds", type=int, default=0, help="time budget (0: none)")
    p.add_argument("--runs", type=int, default=0, help="execution budget (0: none)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--stop-on-violation", action="store_true")
    args = p.parse_args(argv)
    os.makedirs(args.crashes, exist_ok=True)
    if args.engine == "atheris":
        import atheris

        # Only the modules a target exercises are instrumented: instrumenting costs seconds at start-up,
        # and coverage of unrelated code would only dilute what guides the fuzzer.
        target = load_target(args.target)
        with atheris.instrument_imports(include=list(target.instrument)):
            target.setup()  # imports the code under test, inside the instrumentation
    else:
        target = load_target(args.target)
        target.setup()
    recorder = Recorder(target, args.crashes, args.engine, args.stop_on_violation)
    recorder.write_summary()
    if args.engine == "atheris":
        run_atheris(args, target, recorder)  # does not return: libFuzzer ends the process
    else:
        run_random(args, target, recorder)
        recorder.write_summary()
        print(json.dumps(recorder.summary()), flush=True)


if __name__ == "__main__":
    main()
