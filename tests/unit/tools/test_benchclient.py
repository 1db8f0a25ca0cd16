"""tdbench's load client receiving deliveries that arrive in several transfer frames (in memory, no sockets).

The bench client's engine advertises a small max-frame-size to an object-API peer that plays the router,
and the peer's bytes are fed to it a slice at a time, so a message's frames reach the client in several
batches, as they do from a router that forwards the start of a message before its end (Qpid Dispatch).
"""

from __future__ import annotations

import time

import pytest

from tests.unit.enginepair import ACCEPTED, EngineSide, Peer, Pipe, pump
from tools.benchclient import KEEP_PREFIX, BenchHandler, LoadRun, MessageTemplate, Receiver
from tools.benchrun import attach_receiver
from wire import raw
from wire.connection import ConnectionSettings, EngineConnection

SMALL_FRAME = 512
SLICE = 700  # bytes fed to the client per engine call: one frame and a bit, so every message is split


class Client:
    """A bench receiver (BenchHandler on an EngineConnection) attached to a server Peer."""

    def __init__(self, *, size: int, total: int = 1, presettled: bool = False, credit: int = 10):
        self.run = LoadRun(total, 0, size, presettled)
        self.handler = BenchHandler(self.run)
        self.engine = EngineConnection(self.handler, ConnectionSettings(container_id="bench-rx",
                                                                        offered_capabilities=(),
                                                                        max_frame_size=SMALL_FRAME),
                                       server=False)
        self.peer = Peer(server=True)
        self.pipe = Pipe(self.engine, self.peer)
        rcv = attach_receiver(self.engine, "rx", "bench", presettled, credit)
        self.receiver = Receiver(raw.pointer(rcv), rcv, batch=1)
        self.handler.rx[raw.pointer(rcv)] = self.receiver
        pump(self.pipe)
        self.sender = self.peer.links["rx"]
        self.template = MessageTemplate(size)
        self.side = EngineSide(self.engine)

    def trickle(self) -> int:
        """Move bytes both ways until nothing moves, the peer's to the client SLICE bytes at a time (the
        client's flow frames go back whole); returns the slices fed to the client."""
        fed = 0
        while True:
            out = self.peer.take_output()
            for i in range(0, len(out), SLICE):
                self.side.feed(out[i:i + SLICE])
                fed += 1
                assert self.receiver.part is None or len(self.receiver.part) <= KEEP_PREFIX
            back = self.side.take_output()
            if back:
                self.peer.feed(back)
            if not out and not back:
                return fed


@pytest.mark.parametrize("size", [10_000, 300_000])
@pytest.mark.parametrize("presettled", [False, True], ids=["at-least-once", "presettled"])
def test_a_message_in_several_frames_is_counted_once_when_complete(size, presettled):
    c = Client(size=size, total=2, presettled=presettled)
    sent_at = time.perf_counter_ns()
    deliveries = [c.peer.send(c.sender, c.template.encode(sent_at), settled=presettled) for _ in range(2)]
    assert c.trickle() > 2 * size // SLICE - 2  # really split into many batches
    pump(c.pipe)
    run = c.run
    assert run.errors == [] and not c.engine.failed
    assert run.received == 2 and run.aborted == 0
    assert c.receiver.part is None  # nothing half-read left behind
    assert run.rx_bytes == 2 * c.template.encoded_size
    assert len(run.latencies) == 2 - run.warmup and all(0 <= lat < 60e9 for lat in run.latencies)
    if not presettled:
        assert [d.remote_state for d in deliveries] == [ACCEPTED, ACCEPTED]
        assert all(d.settled for d in deliveries)


def test_an_aborted_delivery_is_settled_not_counted_and_the_next_one_arrives():
    c = Client(size=10_000, total=1)
    whole = c.template.encode(time.perf_counter_ns())
    d = c.sender.delivery(b"aborted")
    c.sender.send(whole[:3000])
    c.trickle()
    assert c.run.received == 0 and c.receiver.part is not None
    d.abort()
    c.trickle()
    pump(c.pipe)
    assert c.run.aborted == 1 and c.run.received == 0 and c.receiver.part is None
    ok = c.peer.send(c.sender, whole)
    c.trickle()
    pump(c.pipe)
    assert c.run.errors == [] and not c.engine.failed
    assert c.run.received == 1 and ok.remote_state == ACCEPTED
