"""tdflow without the flow extra (issue 18): each command says which module is missing and how to install
the extra, exit status 2, instead of ``ModuleNotFoundError: numpy``. The extra's modules are made
unimportable in the child process (``sys.modules[name] = None``), as if never installed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.paths import REPO

RUN_WITHOUT = """
import sys
for name in {missing!r}:
    sys.modules[name] = None     # 'import name' now raises ModuleNotFoundError(name=name)
from tools.tdflow.cli import main
sys.argv = ["tdflow", *{args!r}]
main()
"""


def _tdflow_without(missing, *args, tmp_path):
    code = RUN_WITHOUT.format(missing=tuple(missing), args=list(args))
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("missing,args", [
    (("numpy",), ("generate", "--out", "recs", "--records", "10")),
    (("pyspark", "py4j"), ("audit", ".")),
    (("pyspark", "py4j"), ("report", ".", "--out", "out")),
])
def test_a_command_without_the_flow_extra_says_how_to_install_it(tmp_path, missing, args):
    proc = _tdflow_without(missing, *args, tmp_path=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith(f"tdflow: {missing[0]} is not installed: tdflow needs the flow extra: "
                                  "pip install 'trio-dispatch[flow]'"), proc.stderr


def test_help_needs_no_extra(tmp_path):
    proc = _tdflow_without(("pyspark", "py4j", "numpy", "pyarrow", "matplotlib"), "--help", tmp_path=tmp_path)
    assert proc.returncode == 0 and "generate" in proc.stdout, proc.stderr
