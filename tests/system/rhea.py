"""Drive the rhea (JavaScript) AMQP clients in tests/clients/rhea from tests.

``make test`` installs them with ``npm ci``.  When ``node`` is not installed
the calling test is skipped -- except under CI (``CI=true``), where a missing
node or a missing ``node_modules`` fails the test instead.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import subprocess
import threading
import time

import pytest

from tests.system.harness import REPO_ROOT

RHEA_DIR = REPO_ROOT / "tests" / "clients" / "rhea"
SEND_JS = RHEA_DIR / "send.js"
RECV_JS = RHEA_DIR / "recv.js"

__all__ = [
    "RHEA_DIR",
    "RheaError",
    "RheaProc",
    "RheaResult",
    "in_ci",
    "require_rhea",
    "rhea_recv_start",
    "rhea_send",
]


class RheaError(RuntimeError):
    """A rhea client misbehaved (no JSON result, did not exit, ...)."""


class RheaResult(dict):
    """The client's JSON result; also carries ``exit_code`` and ``stderr``."""

    exit_code: int
    stderr: str


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require_rhea() -> str:
    """Return the path of ``node``, or skip/fail the current test."""
    node = shutil.which("node")
    if node is None:
        reason = "node is not installed: the rhea interop tests need node and npm"
        if in_ci():
            pytest.fail(f"{reason} (CI=true, so this is a failure, not a skip)", pytrace=False)
        pytest.skip(reason)
    if not (RHEA_DIR / "node_modules" / "rhea").is_dir():
        pytest.fail(
            f"rhea is not installed in {RHEA_DIR}/node_modules: run `make test` "
            f"(or `npm ci` in {RHEA_DIR})",
            pytrace=False,
        )
    return node


def _parse_json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def rhea_send(
    url: str,
    address: str,
    count: int,
    *,
    size: int | None = None,
    presettled: bool = False,
    anonymous: bool = False,
    timeout: float = 20,
) -> RheaResult:
    """Run send.js to completion and return its JSON result.

    Keys: sent, accepted, rejected, released, modified, errors.  The result
    also has ``.exit_code`` (0 = everything sent and settled) and ``.stderr``.
    """
    node = require_rhea()
    argv = [node, str(SEND_JS), "--url", url, "--address", address,
            "--count", str(count), "--timeout", str(timeout)]
    if size is not None:
        argv += ["--size", str(size)]
    if presettled:
        argv.append("--presettled")
    if anonymous:
        argv.append("--anonymous")
    try:
        proc = subprocess.run(argv, cwd=RHEA_DIR, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout + 15)
    except subprocess.TimeoutExpired as e:
        raise RheaError(f"send.js did not exit within {timeout + 15}s\n"
                        f"stdout: {e.stdout!r}\nstderr: {e.stderr!r}") from None
    results = [r for r in _parse_json_lines(proc.stdout) if "sent" in r]
    if not results:
        raise RheaError(f"send.js printed no result (exit {proc.returncode})\n"
                        f"stdout: {proc.stdout}\nstderr: {proc.stderr}")
    result = RheaResult(results[-1])
    result.exit_code = proc.returncode
    result.stderr = proc.stderr
    return result


class RheaProc:
    """A running recv.js (see :func:`rhea_recv_start`)."""

    def __init__(self, argv: list[str], timeout: float) -> None:
        self.argv = argv
        self.timeout = timeout
        self.proc = subprocess.Popen(argv, cwd=RHEA_DIR, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self._stdout_lines: queue.Queue[str | None] = queue.Queue()
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        self._attached = threading.Event()
        self._result: RheaResult | None = None
        self._threads = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for t in self._threads:
            t.start()
        _running.add(self)

    def _pump_stdout(self) -> None:
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self._stdout.append(line)
            self._stdout_lines.put(line)
        self._stdout_lines.put(None)

    def _pump_stderr(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)
            if line.startswith("recv.js: attached"):
                self._attached.set()
        self._attached.set()  # EOF: wake any waiter, which then sees the exit

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def _describe(self) -> str:
        return (f"recv.js (exit {self.proc.poll()})\nstdout: " + "\n".join(self._stdout)
                + f"\nstderr: {self.stderr}")

    def wait_attached(self, timeout: float = 10.0) -> None:
        """Block until the receiving link is attached (the router answered)."""
        if not self._attached.wait(timeout):
            raise RheaError(f"receiver not attached within {timeout}s: {self._describe()}")
        if not any(l.startswith("recv.js: attached") for l in self._stderr):
            self.proc.wait(timeout=5)
            raise RheaError(f"recv.js exited before its receiver was attached: {self._describe()}")

    def dynamic_address(self, timeout: float = 10.0) -> str:
        """The address the router assigned to the dynamic source (--dynamic only)."""
        deadline = time.monotonic() + timeout
        for line in list(self._stdout):
            for obj in _parse_json_lines(line):
                if "dynamic_address" in obj:
                    return obj["dynamic_address"]
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise RheaError(f"no dynamic_address line within {timeout}s: {self._describe()}")
            try:
                line = self._stdout_lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RheaError(f"recv.js exited without a dynamic address: {self._describe()}")
            for obj in _parse_json_lines(line):
                if "dynamic_address" in obj:
                    return obj["dynamic_address"]

    def result(self, timeout: float | None = None) -> RheaResult:
        """Wait for recv.js to exit and return its JSON result.

        Keys: received, ids, bodies_ok; plus ``.exit_code`` and ``.stderr``.
        """
        if self._result is not None:
            return self._result
        if timeout is None:
            timeout = self.timeout + 15
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RheaError(f"recv.js did not exit within {timeout}s: {self._describe()}") from None
        for t in self._threads:
            t.join(timeout=5)
        _running.discard(self)
        results = [r for r in _parse_json_lines("\n".join(self._stdout)) if "received" in r]
        if not results:
            raise RheaError(f"recv.js printed no result: {self._describe()}")
        self._result = RheaResult(results[-1])
        self._result.exit_code = self.proc.returncode
        self._result.stderr = self.stderr
        return self._result

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        _running.discard(self)

    def __enter__(self) -> "RheaProc":
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


# recv.js processes not yet reaped; the system conftest kills leftovers.
_running: set[RheaProc] = set()


def kill_leftovers() -> None:
    for p in list(_running):
        p.kill()


def rhea_recv_start(
    url: str,
    address: str | None,
    count: int,
    *,
    timeout: float = 20,
    dynamic: bool = False,
    credit: int | None = None,
    wait_attached: bool = True,
) -> RheaProc:
    """Start recv.js in the background and return its handle.

    By default this returns only once the receiving link is attached, so a
    sender started afterwards finds the consumer in place.  ``address`` is
    ignored with ``dynamic=True`` (pass None).
    """
    node = require_rhea()
    argv = [node, str(RECV_JS), "--url", url, "--count", str(count), "--timeout", str(timeout)]
    if address is not None and not dynamic:
        argv += ["--address", address]
    if dynamic:
        argv.append("--dynamic")
    if credit is not None:
        argv += ["--credit", str(credit)]
    rp = RheaProc(argv, timeout)
    if wait_attached:
        try:
            rp.wait_attached(timeout=min(timeout, 15))
        except BaseException:
            rp.kill()
            raise
    return rp
