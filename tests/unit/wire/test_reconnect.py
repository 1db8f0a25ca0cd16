"""wire.reconnect: ActiveMQ SimpleDiscoveryAgent's reconnect arithmetic, with plain numbers (no clock)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from wire.reconnect import ReconnectSchedule


def _failing_attempts(s: ReconnectSchedule, n: int, start_ms: float = 0) -> list:
    """Delays answered for ``n`` attempts that each fail at once (never connected)."""
    now = start_ms
    out = []
    for _ in range(n):
        d = s.failed(now)
        out.append(d)
        if d is None:
            break
        now += d
    return out


def test_documented_sequence_with_code_defaults():
    s = ReconnectSchedule()
    assert _failing_attempts(s, 8) == [1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]
    assert s.attempts == 8


def test_connection_lost_soon_after_connecting_is_a_connect_failure():
    s = ReconnectSchedule()
    assert s.failed(0) == 1000
    s.connected(1000)
    assert s.failed(1000 + 4999) == 2000          # within minConnectTime (5000 ms)
    assert s.attempts == 2


def test_connection_that_lasted_resets_count_and_delay():
    s = ReconnectSchedule()
    _failing_attempts(s, 4)                      # 1, 2, 4, 8 s
    s.connected(100_000)
    assert s.failed(100_000 + 5000) == 1000      # lasted minConnectTime: next delay is the initial one
    assert s.attempts == 0
    # as in SimpleDiscoveryAgent the delay was reset to initial (not to "unset"): a connect failure
    # right after that is multiplied from it
    assert s.failed(106_000) == 2000
    assert s.attempts == 1


def test_reset_starts_from_scratch():
    s = ReconnectSchedule()
    _failing_attempts(s, 3)
    s.reset()
    assert s.attempts == 0
    assert s.failed(0) == 1000


def test_linear_when_not_exponential():
    s = ReconnectSchedule(initial_ms=250, exponential=False)
    assert _failing_attempts(s, 4) == [250, 250, 250, 250]


def test_custom_multiplier_and_cap():
    s = ReconnectSchedule(initial_ms=100, max_ms=1000, multiplier=3.0)
    assert _failing_attempts(s, 5) == [100, 300, 900, 1000, 1000]
    s = ReconnectSchedule(initial_ms=10, max_ms=100, multiplier=1.5)
    assert _failing_attempts(s, 4) == [10, 15, 22, 34]     # rounded, not truncated cumulatively (33.75)


def test_max_attempts_counts_every_failed_attempt_then_gives_up():
    s = ReconnectSchedule(max_attempts=3)
    assert _failing_attempts(s, 10) == [1000, 2000, None]
    assert s.given_up and s.failed(999_999) is None
    s.reset()
    assert not s.given_up and s.failed(0) == 1000


def test_a_connection_that_lasted_does_not_use_up_attempts():
    s = ReconnectSchedule(max_attempts=2)
    assert s.failed(0) == 1000
    s.connected(1000)
    assert s.failed(10_000) == 1000              # lasted: count back to 0
    assert s.failed(11_000) == 2000              # then the 2nd connect failure in a row gives up
    assert s.failed(13_000) is None


def test_zero_min_connect_time_every_loss_after_connecting_resets():
    s = ReconnectSchedule(min_connect_time_ms=0)
    s.connected(0)
    assert s.failed(0) == 1000 and s.attempts == 0


def test_from_settings():
    settings = SimpleNamespace(initial_reconnect_delay_ms=10, max_reconnect_delay_ms=40, use_exponential_backoff=True,
                               backoff_multiplier=2, max_reconnect_attempts=0, min_connect_time_ms=500)
    s = ReconnectSchedule.from_settings(settings)
    assert _failing_attempts(s, 4) == [10, 20, 40, 40]
    assert s.min_connect_time_ms == 500


@pytest.mark.parametrize("kw", [{"initial_ms": -1}, {"max_ms": -1}, {"multiplier": 0}, {"max_attempts": -1},
                                {"min_connect_time_ms": -5}])
def test_bad_settings_refused(kw):
    with pytest.raises(ValueError):
        ReconnectSchedule(**kw)
