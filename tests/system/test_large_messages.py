"""Large messages keep their outcomes (issue 10): proton reactor clients, several sizes, several in flight.

The reported failure: a MessagingHandler producer (at-least-once, at most 10 unsettled, 1 MB bodies) and a
MessagingHandler consumer (prefetch 500, auto-accept) on one tdrouterd; the producer stalled after 10
messages, the consumer having accepted all 10, so an outcome of a multi-frame delivery never reached the
producer. Here every outcome must come back, for multi-frame sizes from a few frames to a few MB, with
producer and consumer on separate connections and on one connection (one session, one reactor).
"""

from __future__ import annotations

import threading
import time

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

pytestmark = pytest.mark.system

WINDOW = 10  # unsettled messages a producer allows, as in the report
TIMEOUT = 60


class WindowedTraffic(MessagingHandler):
    """``count`` messages of ``size`` bytes from a producer with at most WINDOW unsettled to a consumer
    with prefetch 500 (auto-accept), in one reactor; ``shared``: both links on one connection."""

    def __init__(self, url: str, address: str, size: int, count: int, shared: bool):
        super().__init__(prefetch=500, auto_accept=True)
        self.url, self.address, self.count, self.shared = url, address, count, shared
        self.body = b"\xab" * size
        self.sent = self.confirmed = self.received = 0
        self.bad_outcomes = []
        self.done = threading.Event()
        self.container = Container(self)

    def on_start(self, event):
        c1 = event.container.connect(self.url)
        c2 = c1 if self.shared else event.container.connect(self.url)
        event.container.create_receiver(c2, self.address)
        self.sender = event.container.create_sender(c1, self.address)

    def on_sendable(self, event):
        snd = event.sender
        while snd.credit > 0 and self.sent < self.count and self.sent - self.confirmed < WINDOW:
            snd.send(Message(id=self.sent, body=self.body))
            self.sent += 1

    def on_message(self, event):
        if len(event.message.body) == len(self.body):
            self.received += 1

    def on_accepted(self, event):
        self.confirmed += 1
        self._next(event)

    def on_rejected(self, event):
        self.bad_outcomes.append("rejected")
        self._next(event)

    def on_released(self, event):
        self.bad_outcomes.append("released/modified")
        self._next(event)

    def _next(self, event):
        if self.confirmed + len(self.bad_outcomes) >= self.count:
            event.container.stop()
            self.done.set()
        else:
            self.on_sendable(type("E", (), {"sender": self.sender})())

    def run(self, timeout: float) -> None:
        t = threading.Thread(target=self.container.run, daemon=True)
        t.start()
        finished = self.done.wait(timeout)
        if not finished:
            self.container.stop()
        t.join(5)


@pytest.mark.parametrize("shared", [False, True], ids=["two-connections", "one-connection"])
@pytest.mark.parametrize("size", [100_000, 300_000, 1_000_000, 3_000_000])
def test_every_outcome_of_large_messages_reaches_the_producer(router, size, shared):
    count = 30
    t = WindowedTraffic(router.url, f"large-{size}-{shared}", size, count, shared)
    t0 = time.monotonic()
    t.run(TIMEOUT)
    state = (f"sent {t.sent}, confirmed {t.confirmed}, received {t.received}, other outcomes {t.bad_outcomes} "
             f"after {time.monotonic() - t0:.1f} s")
    assert t.bad_outcomes == [], state
    assert t.confirmed == count and t.received == count, state
