"""Waiting on a condition in system tests: poll, never sleep a fixed time (the suite runs on busy machines)."""

from __future__ import annotations

import time

#: How long a condition may take by default: generous, because it is only reached when something is wrong.
TIMEOUT = 20.0
#: Between polls: short enough not to slow a test, long enough not to busy a core.
POLL_SECONDS = 0.05


def wait_for(predicate, what: str, timeout: float = TIMEOUT):
    """Poll ``predicate`` until it returns a true value, and return that value; AssertionError naming
    ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)
