"""Start ``tdrouterd`` and ``tdbroker`` as subprocesses and read their start-up lines: the one helper behind
``tdbench``, ``tddemo`` and the system tests' harness.

The start-up contract (router/daemon.py, broker/daemon.py) is a few stdout lines::

    tdrouterd: listening on HOST:PORT (listener NAME, role ROLE)    one per bound listener
    tdrouterd: ready (router id ID)
    tdbroker: listening on HOST:PORT (acceptor NAME)                one per bound acceptor
    tdbroker: ready

A bad configuration makes the daemon exit with status 2 and ``FILE:LINE: message`` on stderr before any
ready line. Configurations name port 0, so the kernel picks free ports and :class:`DaemonProcess` reads the
real ones back from the listening lines.

The daemon runs as ``python -m router.daemon`` (or ``broker.daemon``) with this interpreter and the
directory that holds these packages on ``PYTHONPATH``: the repository in a checkout, ``site-packages`` in an
installed package; either way the daemon is the same code as the tool that starts it. A thread drains the
daemon's stdout for as long as it runs (a management-added listener prints another line later), so the
daemon never blocks on a full pipe; nothing calls back from that thread.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import queue
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time

__all__ = [
    "BROKER",
    "DEFAULT_START_TIMEOUT",
    "PACKAGE_ROOT",
    "ROUTER",
    "DaemonError",
    "DaemonProcess",
    "Listener",
    "Program",
    "Ready",
    "daemon_command",
    "daemon_env",
    "free_port",
    "parse_startup_line",
    "run_expecting_failure",
]

#: The directory holding the router/, broker/, wire/ and tools/ packages (a checkout or site-packages).
PACKAGE_ROOT = pathlib.Path(__file__).resolve().parents[1]

#: A cold start (importing proton and trio, binding listeners) takes about a second; a loaded CI machine
#: running other daemons can take several times that.
DEFAULT_START_TIMEOUT = 15.0
#: SIGTERM closes every connection with a close frame (and the broker syncs its journal) before exit.
DEFAULT_STOP_TIMEOUT = 10.0
#: How often a wait for the ready line looks at the clock (and whether the daemon has exited).
_POLL_SECONDS = 0.2


@dataclasses.dataclass(frozen=True)
class Program:
    """One of the two daemons: the name it prints its start-up lines under and its module."""

    name: str
    module: str


ROUTER = Program("tdrouterd", "router.daemon")
BROKER = Program("tdbroker", "broker.daemon")
_PROGRAMS = {p.name: p for p in (ROUTER, BROKER)}


@dataclasses.dataclass(frozen=True)
class Listener:
    """A bound listener (router) or acceptor (broker), from its ``listening on`` line."""

    program: str
    name: str
    host: str
    port: int
    role: str | None  # the router listener's role; None for a broker acceptor


@dataclasses.dataclass(frozen=True)
class Ready:
    """The ``ready`` line: the daemon has bound every listener and serves."""

    program: str
    router_id: str | None  # tdrouterd reports its router id; tdbroker nothing


_ROUTER_LISTENING_RE = re.compile(
    r"^tdrouterd: listening on (?P<host>.+):(?P<port>\d+) \(listener (?P<name>[^,]*), role (?P<role>[^)]*)\)\s*$")
_ROUTER_READY_RE = re.compile(r"^tdrouterd: ready \(router id (?P<id>.*)\)\s*$")
_BROKER_LISTENING_RE = re.compile(r"^tdbroker: listening on (?P<host>.+):(?P<port>\d+) \(acceptor (?P<name>.*)\)\s*$")
_BROKER_READY_RE = re.compile(r"^tdbroker: ready\s*$")


def parse_startup_line(line: str) -> Listener | Ready | None:
    """A start-up line of either daemon as a :class:`Listener` or :class:`Ready`; None for any other line."""
    m = _ROUTER_LISTENING_RE.match(line)
    if m:
        return Listener(ROUTER.name, m["name"], m["host"], int(m["port"]), m["role"])
    m = _ROUTER_READY_RE.match(line)
    if m:
        return Ready(ROUTER.name, m["id"])
    m = _BROKER_LISTENING_RE.match(line)
    if m:
        return Listener(BROKER.name, m["name"], m["host"], int(m["port"]), None)
    if _BROKER_READY_RE.match(line):
        return Ready(BROKER.name, None)
    return None


def daemon_command(program: Program | str, conf_path: os.PathLike | str) -> list[str]:
    """The argv that starts ``program`` (ROUTER, BROKER or their names) on ``conf_path``."""
    program = _PROGRAMS[program] if isinstance(program, str) else program
    return [sys.executable, "-m", program.module, "-c", str(conf_path)]


def daemon_env() -> dict[str, str]:
    """This process's environment with unbuffered output and PACKAGE_ROOT first on PYTHONPATH (so that
    ``-m router.daemon`` runs the same tree as this module, whatever the working directory; any
    PYTHONPATH the caller had is kept after it)."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    parts = [str(PACKAGE_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


#: Where :func:`free_port` looks: from here up to the start of the kernel's ephemeral range (the well-known
#: and registered service ports below stay out of it).
FREE_PORT_FLOOR = 10000
#: How many ports free_port remembers having handed out, so that a test naming several gets distinct ones.
FREE_PORTS_REMEMBERED = 4096
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
_handed_out: dict[int, None] = {}   # insertion-ordered: the oldest is forgotten first
_port_picker = random.Random()


def _ephemeral_low() -> int | None:
    try:
        with open(_EPHEMERAL_RANGE) as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a configuration that must name one).

    It is taken below the kernel's ephemeral range (Linux ``ip_local_port_range``): a port the kernel picked
    for ``bind(("127.0.0.1", 0))`` comes from the range every outgoing connection takes its source port
    from, so between this call and the daemon's bind another process's connection could take it ("Address
    already in use"; seen under load). Ports handed out lately are not handed out again. Where the range
    starts too low to leave room, the kernel picks, as before."""
    low = _ephemeral_low()
    if low is not None and low - FREE_PORT_FLOOR > 2 * FREE_PORTS_REMEMBERED:
        for _ in range(1000):
            port = _port_picker.randrange(FREE_PORT_FLOOR, low)
            if port in _handed_out:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out[port] = None
            if len(_handed_out) > FREE_PORTS_REMEMBERED:
                del _handed_out[next(iter(_handed_out))]
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DaemonError(RuntimeError):
    """A daemon did not start (the message carries its output), or would not stop."""


class DaemonProcess:
    """A tdrouterd or tdbroker subprocess on one configuration file.

    :meth:`start` spawns it and returns once its ready line came, with :attr:`listeners` (name ->
    :class:`Listener`, in the order printed) and :attr:`ports` (name -> port) filled in; a daemon that
    exits, or prints no ready line within ``start_timeout`` seconds, is killed and :attr:`failure` is
    raised with its stdout and the tail of its stderr. stderr goes to ``stderr_path`` (appended to with
    ``stderr_append``, so that a restarted daemon keeps its earlier log). :meth:`stop` sends SIGTERM and
    returns the exit status.
    """

    #: The exception :meth:`start` and :meth:`stop` raise (a tool may use its own).
    failure: type[Exception] = DaemonError

    def __init__(self, program: Program | str, conf_path: os.PathLike | str, *,
                 stderr_path: os.PathLike | str | None = None, stderr_append: bool = False,
                 start_timeout: float = DEFAULT_START_TIMEOUT, cwd: os.PathLike | str | None = None,
                 label: str | None = None) -> None:
        self.program = _PROGRAMS[program] if isinstance(program, str) else program
        self.conf_path = pathlib.Path(conf_path)
        self.stderr_path = (pathlib.Path(stderr_path) if stderr_path is not None
                            else self.conf_path.with_name(self.conf_path.stem + ".stderr"))
        self.stderr_append = stderr_append
        self.start_timeout = start_timeout
        self.cwd = cwd
        #: how failures name this daemon (e.g. the router id)
        self.label = label or self.program.name
        self.proc: subprocess.Popen[bytes] | None = None
        #: listener (acceptor) name -> Listener, as the daemon printed them
        self.listeners: dict[str, Listener] = {}
        #: the router id from tdrouterd's ready line (None before it, and for tdbroker)
        self.reported_id: str | None = None
        #: every stdout line the daemon printed so far
        self.stdout_lines: list[str] = []
        #: start() failed (and already raised with the daemon's output)
        self.start_failed = False
        #: kill() ended it on purpose
        self.killed = False
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        self._stderr_file = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> "DaemonProcess":
        """Spawn the daemon and wait for its ready line (see the class docstring)."""
        if self.proc is not None and self.proc.poll() is None:
            raise self.failure(f"{self.program.name} {self.label} is already running")
        self.listeners = {}
        self.reported_id = None
        self.stdout_lines = []
        self.start_failed = self.killed = False
        self._lines = queue.Queue()
        self._stderr_file = open(self.stderr_path, "ab" if self.stderr_append else "wb")
        self.proc = subprocess.Popen(daemon_command(self.program, self.conf_path), cwd=self.cwd,
                                     env=daemon_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self._stderr_file)
        self._reader = threading.Thread(target=self._read_stdout, args=(self.proc, self._lines),
                                        name=f"{self.label}-stdout", daemon=True)
        self._reader.start()
        self._wait_ready()
        return self

    def _read_stdout(self, proc: subprocess.Popen, lines: queue.Queue) -> None:
        for raw_line in proc.stdout:
            line = raw_line.decode("utf-8", "replace").rstrip("\r\n")
            self.stdout_lines.append(line)
            lines.put(line)
        lines.put(None)  # EOF

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._abort_start(f"did not print its ready line within {self.start_timeout:g} s")
            try:
                line = self._lines.get(timeout=min(remaining, _POLL_SECONDS))
            except queue.Empty:
                continue
            if line is None:
                try:
                    code = self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self._abort_start("closed its stdout before it was ready")
                self._abort_start(f"exited with status {code} before it was ready")
            event = parse_startup_line(line)
            if isinstance(event, Listener) and event.program == self.program.name:
                self.listeners[event.name] = event
            elif isinstance(event, Ready) and event.program == self.program.name:
                self.reported_id = event.router_id
                self.check_ready()
                return

    def check_ready(self) -> None:
        """Called on the ready line: a subclass refuses a daemon that lacks what it needs (by calling
        :meth:`abort_start`). By default a daemon must have reported at least one listener."""
        if not self.listeners:
            self.abort_start("was ready without reporting a listener")

    def abort_start(self, why: str) -> None:
        """Kill the daemon being started and raise :attr:`failure` with ``why`` and its output."""
        self._abort_start(why)

    def _abort_start(self, why: str) -> None:
        self.start_failed = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_files()
        raise self.failure(self.describe_failure(why))

    def describe_failure(self, why: str) -> str:
        """The text of a start failure: what went wrong, then the daemon's stdout and stderr."""
        return (f"{self.program.name} {self.label} {why}\n"
                f"--- stdout ---\n" + "\n".join(self.stdout_lines) + "\n"
                f"--- stderr ({self.stderr_path}) ---\n{self.stderr_tail()}")

    def stop(self, timeout: float = DEFAULT_STOP_TIMEOUT) -> int | None:
        """SIGTERM, wait, and return the exit status (None if it was never started). A daemon still
        running after ``timeout`` seconds is killed and :attr:`failure` is raised."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._close_files()
                raise self.failure(f"{self.program.name} {self.label} ignored SIGTERM for {timeout:g} s and "
                                   f"was killed\n--- stderr ---\n{self.stderr_tail()}") from None
        self._close_files()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL (a crash on purpose) and wait for it."""
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
        if self.proc is not None and self.proc.stdout is not None and not self._reader_alive():
            self.proc.stdout.close()
        if self._stderr_file is not None:
            self._stderr_file.close()
            self._stderr_file = None

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def __enter__(self) -> "DaemonProcess":
        return self if self.proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        if self.is_running():
            self.stop()

    # -- inspection --------------------------------------------------------------------------------

    @property
    def ports(self) -> dict[str, int]:
        """Listener (acceptor) name -> port."""
        return {name: lst.port for name, lst in self.listeners.items()}

    @property
    def port(self) -> int | None:
        """The port of the first listener the daemon reported."""
        return next(iter(self.listeners.values())).port if self.listeners else None

    def url_for(self, listener: str) -> str:
        return f"amqp://127.0.0.1:{self.listeners[listener].port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

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

    def stderr_tail(self, lines: int = 40) -> str:
        return "\n".join(self.stderr_text().splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "not started" if self.proc is None else f"pid {self.proc.pid}, rc {self.proc.poll()}"
        return f"<{type(self).__name__} {self.label} {state} ports={self.ports}>"


def run_expecting_failure(program: Program | str, conf_path: os.PathLike | str, *,
                          timeout: float = DEFAULT_START_TIMEOUT, cwd: os.PathLike | str | None = None
                          ) -> tuple[int, str]:
    """Run the daemon on a configuration expected to be refused; ``(exit status, stderr)``. Raises
    DaemonError if it is still running after ``timeout`` seconds."""
    program = _PROGRAMS[program] if isinstance(program, str) else program
    try:
        proc = subprocess.run(daemon_command(program, conf_path), cwd=cwd, env=daemon_env(),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = (e.stderr or b"").decode("utf-8", "replace")
        raise DaemonError(f"{program.name} did not exit within {timeout:g} s on a config expected to fail\n"
                          f"--- stderr ---\n{err}") from None
    return proc.returncode, proc.stderr.decode("utf-8", "replace")
