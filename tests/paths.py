"""Paths of the repository the tests read (configuration examples, docs, product sources).

Test files sit at different depths under tests/, so a ``Path(__file__).parents[N]`` lookup breaks whenever a
file moves; they import ``REPO`` from here instead.
"""

from __future__ import annotations

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]
"""The repository root (the directory holding router/, broker/, wire/, tools/, tests/)."""
