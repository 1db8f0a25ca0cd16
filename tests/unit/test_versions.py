"""What a new user meets first on the command line (issue 18): ``tdrouterd --version`` and ``tdbroker
--version`` print the installed release and exit 0 without reading a configuration; ``tdstat ... | head``
ends quietly (exit 141, as for a tool SIGPIPE stops) instead of printing a BrokenPipeError."""

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


# -- tdstat into a pipe nobody reads ---------------------------------------------------------------------------

def _tdstat_into_a_closed_pipe(*args: str) -> subprocess.CompletedProcess:
    """tdstat with its standard output a pipe whose read end is already closed: every write fails with
    EPIPE, as in ``tdstat ... | head`` once head has gone (deterministic, unlike a real head)."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "tools.tdstat", *args], cwd=REPO, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        os.close(write_end)


@pytest.mark.system
def test_tdstat_into_a_closed_pipe_exits_quietly(tmp_path):
    from tests.system.brokerharness import BrokerProcess
    from tests.system.harness import RouterProcess

    router = RouterProcess(tmp_path / "router").start()
    xml = tmp_path / "broker.xml"
    xml.write_text('<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">\n'
                   f"<journal-directory>{tmp_path / 'journal'}</journal-directory>\n"
                   "<security-enabled>false</security-enabled>\n"
                   '<acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>\n'
                   "</core></configuration>\n")
    broker = BrokerProcess(xml, tmp_path).start()
    try:
        for args in (["-g"], ["-a", "--json"], ["-b", f"127.0.0.1:{broker.ports['amqp']}", "--broker"]):
            if "-b" not in args:
                args = ["-b", f"127.0.0.1:{router.ports['amqp']}", *args]
            proc = _tdstat_into_a_closed_pipe(*args)
            assert (proc.returncode, proc.stderr) == (141, ""), (args, proc.stderr)
    finally:
        assert router.stop() == 0
        assert broker.stop() == 0
