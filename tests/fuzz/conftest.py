"""The bounded fuzz campaign (issue 10; docs/robustness.md). Every test here carries the ``fuzz`` mark:
``pytest -m fuzz`` runs only the campaign, ``pytest -m "not fuzz"`` everything else."""

from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "fuzz: the bounded fuzz campaign (tests/fuzz, about a minute)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/fuzz/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.fuzz)
