"""The fuzz campaign's bounded run: every target of tools/fuzz for a few seconds each, under two minutes in all.

Each target runs in its own worker process (``python -m tools.fuzz.worker``) with atheris (libFuzzer,
coverage-guided over wire/, router/ and broker/) from its seeds, with a fixed libFuzzer seed. A target
passes when the worker ends normally, ran a reasonable number of inputs, and met no violation of its
properties (see tools/fuzz/targets_amqp.py, targets_misc.py and targets_security.py). The long run is
the same thing for longer: ``python -m tools.fuzz --target all --seconds 600`` (docs/robustness.md).

atheris is in the ``test`` extra. Under CI (``CI=true``) a missing atheris fails these tests instead of
skipping them; elsewhere the plain random mutator runs the same targets (not coverage-guided) and says so.
"""

from __future__ import annotations

import os
import pathlib
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

from tools.fuzz import TARGETS
from tools.fuzz.__main__ import atheris_available, run_target

#: Seconds of fuzzing per target: with the workers' start-up (1-3 s each) thirteen targets take about 85 s
#: one by one, about 45 s two at a time.
SECONDS_PER_TARGET = 4
#: A worker that ran fewer inputs than this did not really fuzz (the slowest, broker-properties, does
#: ~160/s alone: every password in clear costs two PBKDF2 derivations).
MIN_EXECUTIONS = 200
#: A worker that has not finished by then is stuck (its own per-input timeout is 30 s).
WORKER_TIMEOUT_SECONDS = 90
#: Workers run this many at a time: each is one single-threaded process, and the suite runs on two
#: cores, so the campaign takes half the wall time it would one by one (the threads only wait on them).
PARALLEL_WORKERS = max(1, min(2, os.cpu_count() or 1))


def _engine() -> str:
    if atheris_available():
        return "atheris"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail("atheris is not installed: it is in the test extra (pip install -e '.[test]'), and CI "
                    "must run the coverage-guided campaign, not skip it")
    warnings.warn("atheris is not installed: the fuzz campaign runs with the random mutator (no coverage "
                  "guidance); pip install -e '.[test]' to get it")
    return "random"


def _findings(result: dict) -> str:
    parts = []
    for path in result["crash_files"]:
        txt = pathlib.Path(path).with_suffix(".txt")
        parts.append(txt.read_text()[:3000] if txt.exists() else f"{path} (libFuzzer: crash, timeout or oom)")
    return "\n\n".join(parts)


def _fuzz(target: str, engine: str, base: pathlib.Path, *, seconds: int = 0, runs: int = 0, seed: int = 1) -> dict:
    return run_target(target, engine=engine, corpus=str(base / target / "corpus"),
                      crashes=str(base / target / "crashes"), seconds=seconds, runs=runs, seed=seed,
                      timeout=WORKER_TIMEOUT_SECONDS)


def _campaign_for(target: str, engine: str, base: pathlib.Path) -> dict:
    """SECONDS_PER_TARGET of fuzzing; where a busy machine got fewer than MIN_EXECUTIONS inputs through in
    that time (and nothing was found), the rest by count, from the corpus the first round built. The floor
    is about work done, so it is met by doing the work, not by a machine being fast enough."""
    first = _fuzz(target, engine, base, seconds=SECONDS_PER_TARGET, seed=1)
    if (first["executions"] >= MIN_EXECUTIONS or first["violations"] or first["crash_files"]
            or first["status"] != 0):
        return first
    more = _fuzz(target, engine, base, runs=MIN_EXECUTIONS - first["executions"], seed=2)
    more["executions"] += first["executions"]
    more["wall_seconds"] = round(first["wall_seconds"] + more["wall_seconds"], 1)
    more["rounds"] = 2
    return more


@pytest.fixture(scope="module")
def campaign(request, tmp_path_factory):
    """Start every selected target's worker, PARALLEL_WORKERS at a time; target -> future of its result."""
    engine = _engine()
    selected = [item.callspec.params["target"] for item in request.session.items
                if getattr(item, "originalname", None) == "test_fuzz_target_meets_no_violation"]
    base = tmp_path_factory.mktemp("fuzz")
    with ThreadPoolExecutor(PARALLEL_WORKERS) as pool:
        yield {target: pool.submit(_campaign_for, target, engine, base) for target in selected}


@pytest.mark.parametrize("target", list(TARGETS))
def test_fuzz_target_meets_no_violation(target, campaign):
    result = campaign[target].result()
    log_tail = pathlib.Path(result["log"]).read_text(errors="replace")[-3000:]
    assert not result["violations"] and not result["crash_files"], \
        f"{target}: {result['violations']}\n\n{_findings(result)}"
    assert result["status"] == 0, f"{target}: worker exited {result['status']}\n{log_tail}"
    assert result["executions"] >= MIN_EXECUTIONS, f"{target}: only {result['executions']} executions\n{log_tail}"
    print(f"{target}: {result['executions']} executions in {result['wall_seconds']} s ({result.get('engine')})")
