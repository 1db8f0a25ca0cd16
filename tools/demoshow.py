"""What ``tddemo`` shows besides its narration (tools/demo.py owns the command line and the clients).

* :class:`Workspace`: where a demo's daemons keep their configurations, journals and logs. By default a
  temporary directory, removed at the end, and every configuration is printed as it ran (between
  ``--- router.conf ---`` lines) so a user can copy it; with ``--keep DIR`` the directory is DIR and is
  kept, and the demo names the files instead of printing them (``tdrouterd -c DIR/router.conf`` runs the
  same router again, the broker's journal with whatever the demo left in it included).
* :class:`BrokerView` and :class:`RouterView`: what the daemons did, read from their management (the
  ``queue`` entity of ``tdstat --broker``, the ``router.address`` entity of ``tdstat -a``), not guessed:
  whether the broker has every outcome (:meth:`BrokerView.wait_settled`: the demo stops the broker only
  then, so its flow records hold a ``settle`` for every message), where rejected messages went (the
  dead-letter queue), and the waypoint's two phases (``M0queue``, ``M1queue``).
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Callable

from tools.mgmtclient import ManagementClient

ARTEMIS_QUEUE = "org.apache.activemq.artemis.queue"
ROUTER_ADDRESS = "org.apache.qpid.dispatch.router.address"
#: The dead-letter address (and its anycast queue) the demo broker moves rejected messages to, as Artemis'
#: ``<dead-letter-address>`` address setting does (Artemis documentation, "Undelivered Messages").
DEAD_LETTER_QUEUE = "DLQ"
#: How long the broker may take to hear the last outcomes after the consumer closed: the router forwards
#: them at once, so this is only reached on a badly loaded machine.
SETTLE_TIMEOUT_SECONDS = 15.0
#: How often a wait looks at the broker's counters again.
POLL_SECONDS = 0.1
#: The programs that run each configuration, for the "run it yourself" hint.
_RUNS = {"router.daemon": "tdrouterd", "broker.daemon": "tdbroker"}

Say = Callable[[str, str], None]


class Workspace:
    """A demo's working directory (see the module docstring); use as a context manager giving the path."""

    def __init__(self, keep: str | None, say: Say, echo: Callable[[str], None] = print):
        self.keep = keep
        self.say = say
        self.echo = echo
        self._tmp: tempfile.TemporaryDirectory | None = None
        self.path: str | None = None

    @staticmethod
    def check_keep(keep: str | None) -> str | None:
        """The reason ``--keep DIR`` cannot be used, or None: a broker journal left in DIR by an earlier
        run would be recovered and upset the demo's counts, so DIR must be new or empty."""
        if keep is None or not os.path.exists(keep):
            return None
        if not os.path.isdir(keep):
            return f"--keep {keep}: exists and is not a directory"
        if os.listdir(keep):
            return f"--keep {keep}: the directory is not empty (an earlier run's journal would be recovered); " \
                   "name a new or empty directory"
        return None

    def __enter__(self) -> str:
        if self.keep is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="tddemo-")
            self.path = self._tmp.name
        else:
            os.makedirs(self.keep, exist_ok=True)
            self.path = os.path.abspath(self.keep)
        return self.path

    def __exit__(self, *exc) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
        elif self.path is not None:
            self.say("kept", f"configurations, journals, logs and stderr in {self.path}")

    def show_config(self, module: str, conf_path: str, port: int | None) -> None:
        """Called when a daemon is ready: print its configuration, or name the kept file."""
        program = _RUNS.get(module, module)
        name = os.path.basename(conf_path)
        if self.keep is not None:
            self.say(program, f"runs {conf_path} (again: {program} -c {conf_path})")
            return
        with open(conf_path, encoding="utf-8") as fh:
            text = fh.read().rstrip("\n")
        note = f"{program} -c {name}; port 0 lets the kernel choose, it chose {port}" if port else \
            f"{program} -c {name}"
        self.echo(f"--- {name} ({note}) ---\n{text}\n--- end of {name} ---")

    def daemon_factory(self, daemon_class):
        """``daemon_class`` (tools.demo.Daemon) with :meth:`show_config` as its start hook."""
        def make(module: str, conf_name: str, conf_text: str, workdir: str):
            return daemon_class(module, conf_name, conf_text, workdir, on_ready=self.show_config)
        return make


class _View:
    def __init__(self, port: int):
        self.client = ManagementClient(f"127.0.0.1:{port}")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()


class BrokerView(_View):
    """A tdbroker's queues through its management (the ``queue`` entity)."""

    def queues(self) -> dict[str, dict]:
        rows = self.client.query(ARTEMIS_QUEUE, ["name", "messageCount", "deliveredCount", "acknowledgedCount",
                                                 "deadLetteredCount"])
        return {r["name"]: r for r in rows}

    def wait_settled(self, queue: str, count: int, timeout: float = SETTLE_TIMEOUT_SECONDS) -> dict:
        """Wait until ``queue`` is empty and ``count`` of its messages left it with an outcome (acknowledged
        or dead-lettered): the broker has heard every consumer outcome, and recorded it. Returns the row;
        raises TimeoutError (with the row) if that does not happen within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            row = self.queues().get(queue, {})
            done = int(row.get("acknowledgedCount") or 0) + int(row.get("deadLetteredCount") or 0)
            if int(row.get("messageCount") or 0) == 0 and done >= count:
                return row
            if time.monotonic() >= deadline:
                raise TimeoutError(f"after {timeout:g} s the broker's queue {queue!r} had {row}")
            time.sleep(POLL_SECONDS)


class RouterView(_View):
    """A tdrouterd's address table through its management (the ``router.address`` entity)."""

    def addresses(self) -> dict[str, dict]:
        rows = self.client.query(ROUTER_ADDRESS, ["name", "key", "deliveriesIngress", "deliveriesEgress"])
        return {r.get("key") or r.get("name"): r for r in rows}
