"""wire.timers: one task serving many connections' deadlines, on Trio's clock (MockClock in these tests)."""

from __future__ import annotations

import math

import pytest
import trio

from wire.timers import (DEADLINE_MARGIN_SECONDS, MIN_DEAD_ITEMS_TO_COMPACT, TIMER_RESOLUTION_SECONDS,
                         DeadlineTimers, current_timers)

LATE = TIMER_RESOLUTION_SECONDS + DEADLINE_MARGIN_SECONDS  # how late after its deadline an entry may fire


class Recorder:
    """Fired times per name, and an event per firing."""

    def __init__(self):
        self.times: dict[str, list[float]] = {}
        self.changed = trio.Event()

    def callback(self, name: str):
        def on_due() -> None:
            self.times.setdefault(name, []).append(trio.current_time())
            self.changed.set()
            self.changed = trio.Event()
        return on_due


async def _timers(nursery) -> DeadlineTimers:
    timers = DeadlineTimers()
    nursery.start_soon(timers.run)
    await trio.sleep(0)
    return timers


async def test_entries_fire_once_at_their_deadlines_in_order(autojump_clock):
    rec = Recorder()
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        for name, delay in (("c", 3.0), ("a", 1.0), ("b", 2.0)):
            timers.schedule(timers.entry(rec.callback(name)), t0 + delay)
        await trio.sleep(10)
        assert list(rec.times) == ["a", "b", "c"]
        for name, delay in (("a", 1.0), ("b", 2.0), ("c", 3.0)):
            [fired] = rec.times[name]  # once: after firing an entry has no deadline
            assert t0 + delay < fired <= t0 + delay + LATE
        assert len(timers) == 0
        nursery.cancel_scope.cancel()


async def test_deadline_moved_later_fires_at_the_later_time_only(autojump_clock):
    rec = Recorder()
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        entry = timers.entry(rec.callback("x"))
        timers.schedule(entry, t0 + 1.0)
        timers.schedule(entry, t0 + 5.0)  # traffic moved the deadline: no heap push, re-queued at 1.0
        await trio.sleep(10)
        [fired] = rec.times["x"]
        assert t0 + 5.0 < fired <= t0 + 5.0 + LATE
        nursery.cancel_scope.cancel()


async def test_deadline_moved_earlier_wakes_the_sleeping_timer(autojump_clock):
    rec = Recorder()
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        entry = timers.entry(rec.callback("x"))
        timers.schedule(entry, t0 + 100.0)
        await trio.sleep(1.0)  # the timer sleeps until t0 + 100
        timers.schedule(entry, t0 + 2.0)
        await trio.sleep(200)
        [fired] = rec.times["x"]  # the item left at 100 is dead: it does not fire again
        assert t0 + 2.0 < fired <= t0 + 2.0 + LATE
        assert len(timers) == 0
        nursery.cancel_scope.cancel()


async def test_cancelled_and_unscheduled_entries_do_not_fire(autojump_clock):
    rec = Recorder()
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        gone = timers.entry(rec.callback("gone"))
        none = timers.entry(rec.callback("none"))
        kept = timers.entry(rec.callback("kept"))
        timers.schedule(gone, t0 + 1.0)
        timers.schedule(none, t0 + 1.0)
        timers.schedule(kept, t0 + 1.0)
        timers.cancel(gone)
        timers.schedule(none, math.inf)  # no deadline any more
        await trio.sleep(5)
        assert list(rec.times) == ["kept"]
        nursery.cancel_scope.cancel()


async def test_deadlines_close_together_fire_in_one_wakeup(autojump_clock):
    rec = Recorder()
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        base = math.floor(t0) + 10.0
        for i in range(1000):  # 1000 deadlines within 1 ms
            timers.schedule(timers.entry(rec.callback(str(i))), base + i * 1e-6)
        await trio.sleep(20)
        assert len(rec.times) == 1000
        assert timers.wakeups <= 2
        nursery.cancel_scope.cancel()


async def test_many_entries_each_fire_at_their_own_time(autojump_clock):
    """Deadlines spread over time fire in order, each within the resolution, re-armed by the callback
    as a heartbeat would be."""
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        late: list[float] = []
        entries = []

        def rearm(k: int):
            def on_due() -> None:
                now = trio.current_time()
                late.append(now - entries[k][1])
                entries[k][1] = now + 1.0 + k * 0.001
                timers.schedule(entries[k][0], entries[k][1])
            return on_due

        for k in range(300):
            entries.append([timers.entry(rearm(k)), t0 + 1.0 + k * 0.001])
            timers.schedule(entries[k][0], entries[k][1])
        await trio.sleep(10.0)
        assert len(late) >= 300 * 7
        assert all(DEADLINE_MARGIN_SECONDS - 1e-9 <= x <= LATE for x in late)
        nursery.cancel_scope.cancel()


async def test_dead_items_are_compacted(autojump_clock):
    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        entries = [timers.entry(lambda: None) for _ in range(10)]
        for round_ in range(MIN_DEAD_ITEMS_TO_COMPACT):  # each moves every deadline earlier: dead items
            for e in entries:
                timers.schedule(e, t0 + 1000.0 - round_ * 0.1)
        assert len(timers) == 10
        timers.schedule(timers.entry(lambda: None), t0 + 0.5)
        await trio.sleep(1.0)  # the wake-up at 0.5 compacts
        assert len(timers._heap) == 10
        nursery.cancel_scope.cancel()


async def test_a_failing_callback_does_not_stop_the_timer(autojump_clock, caplog):
    rec = Recorder()

    def boom() -> None:
        raise RuntimeError("boom")

    async with trio.open_nursery() as nursery:
        timers = await _timers(nursery)
        t0 = trio.current_time()
        timers.schedule(timers.entry(boom), t0 + 1.0)
        timers.schedule(timers.entry(rec.callback("after")), t0 + 1.0)
        timers.schedule(timers.entry(rec.callback("later")), t0 + 3.0)
        await trio.sleep(5)
        assert set(rec.times) == {"after", "later"}
        assert "timer callback failed" in caplog.text
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("deadline_ms", [1, 999, 4005, 8000, 16_001, 123_456_789])
async def test_wakes_after_a_millisecond_deadline_as_proton_reads_it(autojump_clock, deadline_ms):
    """EngineConnection.tick passes int(now * 1000) to proton: at the wake-up that must not read as an
    earlier millisecond than the deadline proton gave (it would find nothing due and spin)."""
    timers = DeadlineTimers()
    wake = timers._wake_time(deadline_ms / 1000.0)
    assert int(wake * 1000) >= deadline_ms
    assert wake - deadline_ms / 1000.0 <= LATE


async def test_current_timers_is_one_per_run_and_serves():
    rec = Recorder()
    timers = current_timers()
    assert current_timers() is timers
    timers.schedule(timers.entry(rec.callback("x")), trio.current_time() + 0.01)
    with trio.fail_after(5):
        await rec.changed.wait()
    assert "x" in rec.times
