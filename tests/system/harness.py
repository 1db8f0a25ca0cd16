"""Run real ``tdrouterd`` processes for system tests.

A :class:`RouterProcess` writes a qdrouterd.conf-style file into a work
directory, spawns ``python -m router.daemon -c FILE`` from the repository
root, and waits for the daemon's start-up lines on stdout::

    tdrouterd: listening on HOST:PORT (listener NAME, role ROLE)
    ...
    tdrouterd: ready (router id ID)

All listeners use 127.0.0.1 with port 0, so the kernel picks free ports and
the real ones are read back from those lines.
"""

from __future__ import annotations

import os
import pathlib
import queue
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

LISTENING_RE = re.compile(
    r"^tdrouterd: listening on (?P<host>.+):(?P<port>\d+) "
    r"\(listener (?P<name>[^,]*), role (?P<role>[^)]*)\)\s*$"
)
READY_RE = re.compile(r"^tdrouterd: ready \(router id (?P<id>.*)\)\s*$")

__all__ = [
    "REPO_ROOT",
    "RouterError",
    "RouterProcess",
    "daemon_command",
    "free_port",
    "run_daemon_expecting_failure",
]


class RouterError(RuntimeError):
    """The daemon failed to start, or would not stop."""


def daemon_command(conf_path: os.PathLike | str) -> list[str]:
    """The argv used to start the daemon on *conf_path*."""
    return [sys.executable, "-m", "router.daemon", "-c", str(conf_path)]


def _daemon_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    # cwd is the repo root, so `-m router.daemon` finds the tree even without
    # an editable install; keep any PYTHONPATH the caller had as well.
    parts = [str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


def _indent_block(text: str, prefix: str = "    ") -> str:
    lines = textwrap.dedent(text).strip("\n").splitlines()
    return "".join(f"{prefix}{line.strip()}\n" for line in lines if line.strip())


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RouterProcess:
    """A real tdrouterd subprocess on 127.0.0.1 ephemeral ports."""

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
        self.router_id = router_id
        self.start_timeout = start_timeout
        self.conf_path = self.workdir / f"{router_id}.conf"
        self.stderr_path = self.workdir / f"{router_id}.stderr"
        #: listener name -> port, filled in by start()
        self.ports: dict[str, int] = {}
        #: listener name -> (host, port, role)
        self.listeners: dict[str, tuple[str, int, str]] = {}
        #: every stdout line the daemon printed so far
        self.stdout_lines: list[str] = []
        #: the exit status the router_factory fixture expects at teardown
        self.expected_exit_code: int | None = 0
        self.killed = False
        #: start() failed (and already raised with the daemon's stderr)
        self.start_failed = False
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._stderr_file = None

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
        self._stderr_file = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(
            daemon_command(self.conf_path),
            cwd=REPO_ROOT,
            env=_daemon_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr_file,
        )
        self._reader = threading.Thread(
            target=self._read_stdout, name=f"{self.router_id}-stdout", daemon=True
        )
        self._reader.start()
        self._wait_ready()
        return self

    def _read_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            self.stdout_lines.append(line)
            self._lines.put(line)
        self._lines.put(None)  # EOF

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._abort_start(f"did not print its ready line within {self.start_timeout}s")
            try:
                line = self._lines.get(timeout=min(remaining, 0.2))
            except queue.Empty:
                continue
            if line is None:
                try:
                    code = self.proc.wait(timeout=5) if self.proc else None
                except subprocess.TimeoutExpired:
                    self._abort_start("closed its stdout before it was ready")
                self._abort_start(f"exited with status {code} before it was ready")
            m = LISTENING_RE.match(line)
            if m:
                port = int(m["port"])
                self.ports[m["name"]] = port
                self.listeners[m["name"]] = (m["host"], port, m["role"])
                continue
            if READY_RE.match(line):
                if "amqp" not in self.ports:
                    self._abort_start("was ready but never reported listener 'amqp'")
                return

    def _abort_start(self, why: str) -> None:
        self.start_failed = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_files()
        raise RouterError(
            f"tdrouterd {self.router_id} {why}\n"
            f"--- config {self.conf_path} ---\n{self.conf_path.read_text()}"
            f"--- stdout ---\n" + "\n".join(self.stdout_lines) + "\n"
            f"--- stderr ---\n{self.stderr_text()}"
        )

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, wait, and return the exit status (kill and raise on timeout)."""
        if self.proc is None:
            raise RouterError(f"{self.router_id} was never started")
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._close_files()
                raise RouterError(
                    f"tdrouterd {self.router_id} ignored SIGTERM for {timeout}s and was killed\n"
                    f"--- stderr ---\n{self.stderr_text()}"
                ) from None
        self._close_files()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (e.g. to simulate a crash); the fixture then skips its exit check."""
        if self.proc is None:
            return
        self.killed = True
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._close_files()

    def _close_files(self) -> None:
        if self._reader is not None:
            self._reader.join(timeout=5)
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None

    def __enter__(self) -> "RouterProcess":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()

    # -- inspection ----------------------------------------------------

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise RouterError(f"{self.router_id} was never started")
        return self.proc.pid

    @property
    def url(self) -> str:
        return self.url_for("amqp")

    def url_for(self, listener: str) -> str:
        return f"amqp://127.0.0.1:{self.ports[listener]}"

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

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
        proc = subprocess.run(
            daemon_command(conf_path),
            cwd=REPO_ROOT,
            env=_daemon_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        err = (e.stderr or b"").decode("utf-8", "replace")
        raise RouterError(
            f"tdrouterd did not exit within {timeout}s on a config expected to fail\n"
            f"--- stderr ---\n{err}"
        ) from None
    return proc.returncode, proc.stderr.decode("utf-8", "replace")
