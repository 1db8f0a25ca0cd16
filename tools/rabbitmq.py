"""A private RabbitMQ node for ``tdbench --brokered --rabbitmq start`` and the system tests: Debian's
``rabbitmq-server`` (3.10) with the ``rabbitmq_amqp1_0`` plugin, on 127.0.0.1 with free ports, its own
configuration file, enabled-plugins file, data (mnesia) directory, log directory, Erlang cookie (``HOME``),
node name and epmd port, so it never touches a system-wide RabbitMQ.

``RabbitNode(workdir).start()`` waits until the AMQP port answers; ``stop()`` ends the node and its
private epmd. :func:`missing_reason` says why no node can be started here (None when one can);
:func:`require_rabbitmq` turns that into a pytest skip with the reason, except under CI (``CI=true``),
where a missing server is a failure: CI installs it with ``.ci/install-rabbitmq``.

AMQP 1.0 addressing in this RabbitMQ version: a plain address such as ``test.orders`` names a queue
(declared on attach) for both senders and receivers, which is all the route-container tests need.
Anonymous (SASL ANONYMOUS) clients log in as ``guest`` (``amqp1_0.default_user``), which the router's
connector needs; ``guest``/``guest`` also works with PLAIN.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

from tools.daemons import free_port

# Debian puts the real start script here; /usr/sbin/rabbitmq-server is a wrapper that switches to the
# rabbitmq user and the system-wide directories, which a private node must not use.
SERVER_SCRIPTS = ("/usr/lib/rabbitmq/bin/rabbitmq-server",)
PLUGIN_GLOB = "/usr/lib/rabbitmq/lib/rabbitmq_server-*/plugins/rabbitmq_amqp1_0-*"
# A cold node takes about 6 s on the reference VM; under CI load give it much more.
START_TIMEOUT = 90.0
STOP_TIMEOUT = 30.0
INSTALL_HINT = "run .ci/install-rabbitmq (apt-get -y install rabbitmq-server) to enable these tests"

CONFIG = """\
listeners.tcp.default = 127.0.0.1:{port}
loopback_users = none
amqp1_0.default_user = guest
log.console = true
log.console.level = warning
log.file = false
"""


def server_script() -> str | None:
    for path in SERVER_SCRIPTS:
        if os.access(path, os.X_OK):
            return path
    return None


def missing_reason() -> str | None:
    """Why a RabbitMQ node cannot be started here, or None."""
    if server_script() is None:
        return "rabbitmq-server is not installed"
    if not list(pathlib.Path("/").glob(PLUGIN_GLOB.lstrip("/"))):
        return "rabbitmq-server has no rabbitmq_amqp1_0 plugin"
    return None


def require_rabbitmq() -> None:
    """Skip (fail under CI=true) when RabbitMQ is not available. For tests only: pytest is imported here,
    not at the top, because tdbench uses this module where pytest is not installed."""
    import pytest

    why = missing_reason()
    if why is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: {INSTALL_HINT})", pytrace=False)
    pytest.skip(f"{why}; {INSTALL_HINT}")


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class RabbitNode:
    """One private RabbitMQ node (see the module docstring)."""

    def __init__(self, workdir: os.PathLike | str, *, name: str | None = None):
        self.dir = pathlib.Path(workdir)
        self.port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.name = name or f"tdtest{os.getpid()}x{self.port}@localhost"
        self.proc: subprocess.Popen | None = None
        self.log_path = self.dir / "rabbitmq.out"

    @property
    def url(self) -> str:
        return f"amqp://127.0.0.1:{self.port}"

    def env(self) -> dict:
        d = self.dir
        env = dict(os.environ)
        env.update({
            "HOME": str(d),  # the Erlang cookie lives here
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PLUGINS_EXPAND_DIR": str(d / "plugins-expand"),
            "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
        })
        return env

    def start(self) -> "RabbitNode":
        script = server_script()
        if script is None:
            raise RuntimeError(missing_reason())
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "rabbitmq.conf").write_text(CONFIG.format(port=self.port))
        (self.dir / "enabled_plugins").write_text("[rabbitmq_amqp1_0].\n")
        self._out = open(self.log_path, "ab")
        # Own session: stop() signals the whole process group (the script, erl, beam and helpers).
        self.proc = subprocess.Popen([script], env=self.env(), cwd=self.dir, stdout=self._out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}:\n{self.output()}")
            if _port_open(self.port) and b"completed with" in self.log_path.read_bytes():
                return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"rabbitmq-server not ready after {START_TIMEOUT}s:\n{self.output()}")

    def output(self, tail: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-tail:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.proc is not None:
            self._stop_epmd()
            self._out.close()
            self.proc = None

    def _stop_epmd(self) -> None:
        """epmd daemonizes out of the node's process group: ask our private one to exit."""
        epmd = shutil.which("epmd") or next(iter(sorted(pathlib.Path("/usr/lib/erlang").glob("erts-*/bin/epmd"))), None)
        if epmd is None:
            return
        try:
            subprocess.run([str(epmd), "-kill"], env=self.env(), timeout=10, capture_output=True)
        except (OSError, subprocess.TimeoutExpired):
            pass

    def __enter__(self) -> "RabbitNode":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
