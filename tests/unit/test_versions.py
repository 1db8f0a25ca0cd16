"""``tdrouterd --version`` and ``tdbroker --version`` print the installed release (issue 18) and exit 0,
without reading a configuration."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from tests.paths import REPO


def _release() -> str:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


@pytest.mark.parametrize("prog,module", [("tdrouterd", "router.daemon"), ("tdbroker", "broker.daemon")])
def test_version(tmp_path, prog, module):
    proc = subprocess.run([sys.executable, "-m", module, "--version"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"{prog} {_release()}\n", "")
