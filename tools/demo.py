"""``tddemo``: narrated demonstrations of how the mesh behaves, run against real daemons.

``tddemo brokerless``: a router with no broker. A producer attaches first and is blocked: the router gives
it no credit while no consumer exists anywhere. A consumer attaches; the producer gets credit at once and
every message flows, each settled end to end (the producer learns ``accepted`` only when the consumer
accepted it).

The clients use proton's reactor API (one Container, timers for the narration): a demo is about
behaviour, not speed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time

import click
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

# How long the producer is left without a consumer, so the blocked state is visible.
BLOCKED_SECONDS = 2.0
READY_TIMEOUT_SECONDS = 15.0
ROUTER_CONF = """\
router {
    mode: standalone
    id: Demo.Router
}
listener {
    host: 127.0.0.1
    port: 0
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
log {
    module: DEFAULT
    enable: warning+
}
"""


def say(who: str, text: str) -> None:
    click.echo(f"{time.strftime('%H:%M:%S')}  {who:<9} {text}")


class RouterDaemon:
    """A tdrouterd subprocess on an ephemeral port, stopped with SIGTERM."""

    def __init__(self, conf_text: str):
        self._dir = tempfile.TemporaryDirectory(prefix="tddemo-")
        self.conf = os.path.join(self._dir.name, "router.conf")
        with open(self.conf, "w") as f:
            f.write(conf_text)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def __enter__(self) -> "RouterDaemon":
        self.proc = subprocess.Popen([sys.executable, "-m", "router.daemon", "-c", self.conf],
                                     stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        for line in self.proc.stdout:
            m = re.match(r"tdrouterd: listening on [^ ]+:(\d+) ", line)
            if m:
                self.port = int(m.group(1))
            if line.startswith("tdrouterd: ready") or time.monotonic() > deadline:
                break
        if not self.port:
            raise click.ClickException("tdrouterd did not start")
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        self._dir.cleanup()


class Brokerless(MessagingHandler):
    """Producer first, blocked without credit; the consumer arrives later; everything flows."""

    def __init__(self, url: str, address: str, count: int):
        super().__init__()
        self.url, self.address, self.count = url, address, count
        self.sent = self.accepted = self.received = 0
        self.conn = self.sender = None
        self.blocked_reported = False

    def on_start(self, event):
        self.conn = event.container.connect(self.url)
        self.sender = event.container.create_sender(self.conn, self.address)
        say("producer", f"attached to '{self.address}' and wants to send {self.count} messages")
        event.container.schedule(BLOCKED_SECONDS, self)

    def on_timer_task(self, event):
        say("producer", f"after {BLOCKED_SECONDS:.0f} s: credit {self.sender.credit}, sent {self.sent} "
                        "- blocked, no consumer exists")
        self.blocked_reported = True
        say("consumer", f"attaching to '{self.address}'")
        event.container.create_receiver(self.conn, self.address)

    def on_sendable(self, event):
        if event.link.name != self.sender.name or not self.blocked_reported:
            return
        if self.sent == 0:
            say("producer", f"got credit {self.sender.credit}: a destination exists now")
        while self.sender.credit and self.sent < self.count:
            self.sender.send(Message(body=f"message {self.sent}"))
            self.sent += 1

    def on_message(self, event):
        self.received += 1
        say("consumer", f"received '{event.message.body}'")

    def on_accepted(self, event):
        self.accepted += 1
        if self.accepted == self.count:
            say("producer", f"all {self.count} messages accepted by the consumer (settled end to end)")
            self.conn.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """tddemo: narrated demonstrations against real tdrouterd processes."""


@main.command()
@click.option("--count", default=5, show_default=True, help="Messages to send.")
@click.option("--address", default="demo/brokerless", show_default=True)
def brokerless(count: int, address: str) -> None:
    """No broker: the producer is blocked until a consumer exists, then messages flow."""
    with RouterDaemon(ROUTER_CONF) as router:
        say("router", f"tdrouterd started on 127.0.0.1:{router.port} (no broker)")
        demo = Brokerless(f"amqp://127.0.0.1:{router.port}", address, count)
        Container(demo).run()
    if demo.received != count or demo.accepted != count:
        raise click.ClickException(f"expected {count} received and accepted, got "
                                   f"{demo.received} / {demo.accepted}")
    say("done", "brokerless: no credit without a consumer; credit and flow as soon as one exists")


if __name__ == "__main__":
    main()
