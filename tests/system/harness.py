"""Run real ``tdrouterd`` processes for system tests.

A :class:`RouterProcess` writes a qdrouterd.conf-style file into a work
directory, spawns the daemon from the repository root through
:class:`tools.daemons.DaemonProcess` (the helper tdbench and tddemo use too),
and waits for the daemon's start-up lines on stdout::

    tdrouterd: listening on HOST:PORT (listener NAME, role ROLE)
    ...
    tdrouterd: ready (router id ID)

All listeners use 127.0.0.1 with port 0, so the kernel picks free ports and
the real ones are read back from those lines.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap

from tests.paths import REPO as REPO_ROOT
from tools import daemons
from tools.daemons import DaemonError, free_port

__all__ = [
    "REPO_ROOT",
    "RouterError",
    "RouterProcess",
    "daemon_command",
    "free_port",
    "run_daemon_expecting_failure",
    "run_tool",
]


class RouterError(DaemonError):
    """The daemon failed to start, or would not stop."""


def daemon_command(conf_path: os.PathLike | str) -> list[str]:
    """The argv used to start the daemon on *conf_path*."""
    return daemons.daemon_command(daemons.ROUTER, conf_path)


def _indent_block(text: str, prefix: str = "    ") -> str:
    lines = textwrap.dedent(text).strip("\n").splitlines()
    return "".join(f"{prefix}{line.strip()}\n" for line in lines if line.strip())


class RouterProcess(daemons.DaemonProcess):
    """A real tdrouterd subprocess on 127.0.0.1 ephemeral ports (a
    :class:`tools.daemons.DaemonProcess` on a configuration written here)."""

    failure = RouterError

    def __init__(
        self,
        workdir: pathlib.Path,
        sections: str = "",
        *,
        router_id: str = "Router.A",
        listener_extra: str = "",
        router_extra: str = "",
        start_timeout: float = 15.0,
        mode: str = "standalone",
    ) -> None:
        self.workdir = pathlib.Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        super().__init__(daemons.ROUTER, self.workdir / f"{router_id}.conf",
                         stderr_path=self.workdir / f"{router_id}.stderr", start_timeout=start_timeout,
                         cwd=REPO_ROOT, label=router_id)
        self.router_id = router_id
        #: the exit status the router_factory fixture expects at teardown
        self.expected_exit_code: int | None = 0

        conf = (
            "router {\n"
            f"    mode: {mode}\n"
            f"    id: {router_id}\n"
            f"{_indent_block(router_extra)}"
            "}\n"
            "\n"
            "listener {\n"
            "    name: amqp\n"
            "    host: 127.0.0.1\n"
            "    port: 0\n"
            "    role: normal\n"
            "    authenticatePeer: no\n"
            "    saslMechanisms: ANONYMOUS\n"
            f"{_indent_block(listener_extra)}"
            "}\n"
        )
        if sections.strip():
            conf += "\n" + textwrap.dedent(sections).strip("\n") + "\n"
        self.conf_path.write_text(conf)

    # -- lifecycle -----------------------------------------------------

    def start(self) -> "RouterProcess":
        if self.proc is not None:
            raise RouterError(f"{self.router_id} already started")
        super().start()
        return self

    def check_ready(self) -> None:
        if "amqp" not in self.listeners:
            self.abort_start("was ready but never reported listener 'amqp'")

    def describe_failure(self, why: str) -> str:
        # The configuration first: most start failures are a test's config the daemon refused.
        return (f"tdrouterd {self.router_id} {why}\n"
                f"--- config {self.conf_path} ---\n{self.conf_path.read_text()}"
                f"--- stdout ---\n" + "\n".join(self.stdout_lines) + "\n"
                f"--- stderr ---\n{self.stderr_text()}")

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait, and return the exit status (kill and raise on timeout)."""
        if self.proc is None:
            raise RouterError(f"{self.router_id} was never started")
        return super().stop(timeout)

    # -- inspection ----------------------------------------------------

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RouterError(f"{self.router_id} was never started")
        return self.proc.pid

    @property
    def url(self) -> str:
        return self.url_for("amqp")

    def cpu_seconds(self) -> float:
        """User + system CPU time the daemon has used so far (Linux /proc)."""
        stat = pathlib.Path(f"/proc/{self.pid}/stat").read_text()
        # The command name (field 2) may contain spaces; skip past its ")".
        fields = stat[stat.rindex(")") + 2 :].split()
        utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
        return (utime + stime) / os.sysconf("SC_CLK_TCK")

    def __repr__(self) -> str:
        state = "not started" if self.proc is None else f"pid {self.proc.pid}, rc {self.proc.poll()}"
        return f"<RouterProcess {self.router_id} {state} ports={self.ports}>"


def run_daemon_expecting_failure(
    conf_text: str,
    workdir: os.PathLike | str,
    *,
    conf_name: str = "bad.conf",
    timeout: float = 15.0,
) -> tuple[int, str]:
    """Run the daemon on *conf_text* (written to workdir/conf_name) and return
    ``(exit_code, stderr)``.  Raises if it is still running after *timeout*."""
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    conf_path = workdir / conf_name
    conf_path.write_text(textwrap.dedent(conf_text))
    try:
        return daemons.run_expecting_failure(daemons.ROUTER, conf_path, timeout=timeout, cwd=REPO_ROOT)
    except DaemonError as e:
        raise RouterError(str(e)) from None


def run_tool(module: str, *args: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run ``python -m module args...`` (tdstat, tdmanage...) from the repository root and return the
    completed process; with ``check``, fail unless it exited 0."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if check:
        assert proc.returncode == 0, f"{module} {args} failed ({proc.returncode}):\n{proc.stderr}"
    return proc
