"""conf/systemd/ (issue 18): each unit starts an installed console script on /etc/trio-dispatch, does not
retry the daemon's "configuration refused" exit status, and passes `systemd-analyze verify` where systemd
is installed."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
import tomllib

import pytest

from broker import daemon as broker_daemon
from router import daemon as router_daemon
from tests.paths import REPO

UNITS = {"tdrouterd.service": router_daemon, "tdbroker.service": broker_daemon}


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str
    parser.read(REPO / "conf" / "systemd" / name)
    return parser


@pytest.mark.parametrize("name", sorted(UNITS))
def test_unit_runs_the_console_script_and_does_not_retry_a_refused_configuration(name):
    unit = _unit(name)
    program = name.removesuffix(".service")
    with open(REPO / "pyproject.toml", "rb") as f:
        assert program in tomllib.load(f)["project"]["scripts"]
    exec_start = unit["Service"]["ExecStart"].split()
    assert exec_start[0] == f"/usr/local/bin/{program}" and exec_start[1] == "-c"
    assert exec_start[2].startswith("/etc/trio-dispatch/")
    assert unit["Service"]["RestartPreventExitStatus"] == str(UNITS[name].EXIT_CONFIG_REFUSED)
    assert unit["Service"]["Restart"] == "on-failure"


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_units_verify(tmp_path):
    """ExecStart= must exist for verify: point it at this interpreter's scripts (or the module)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in UNITS:
        program = name.removesuffix(".service")
        script = bindir / program
        script.write_text(f"#!{sys.executable}\n")
        script.chmod(0o755)
        text = (REPO / "conf" / "systemd" / name).read_text().replace("/usr/local/bin/", f"{bindir}/")
        (tmp_path / name).write_text(text)
    proc = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / n) for n in sorted(UNITS))],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
