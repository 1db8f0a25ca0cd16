"""wire/memory.tune_gc: the daemons collect cyclic garbage less often (see GC_THRESHOLDS' measurement)."""

from __future__ import annotations

import gc

from wire.memory import GC_THRESHOLDS, tune_gc


def test_tune_gc_sets_the_thresholds():
    before = gc.get_threshold()
    try:
        tune_gc()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert GC_THRESHOLDS[0] > before[0] and GC_THRESHOLDS[2] > before[2]
    finally:
        gc.set_threshold(*before)


def test_both_daemons_call_it_before_they_run():
    from tests.paths import REPO

    for daemon in ("router/daemon.py", "broker/daemon.py"):
        text = (REPO / daemon).read_text()
        assert text.index("tune_gc()") < text.index("trio.run("), daemon
