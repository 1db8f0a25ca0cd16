"""Top-level pytest configuration.

pytest-trio runs in trio mode (see pyproject.toml), so ``async def`` tests
run under Trio automatically; plain ``def`` tests run as usual.  The repo
root is on sys.path (``pythonpath = ["."]``), so tests import project code
as ``wire``/``router``/... and test helpers as ``tests.system.harness``.
"""

from __future__ import annotations

import os

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # hypothesis is in the test extra; tolerate its absence
    settings = None

if settings is not None:
    # A 2-core CI box running system tests alongside makes timing-based
    # deadlines flaky; property tests should fail on wrong answers only.
    settings.register_profile("dev", deadline=None)
    settings.register_profile(
        "ci",
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile(
        os.environ.get(
            "HYPOTHESIS_PROFILE",
            "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev",
        )
    )
