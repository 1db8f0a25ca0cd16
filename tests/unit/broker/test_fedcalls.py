"""broker/fedcalls.py and the engine's keepalive: a federation stream's call-timeout, check-period and
ha learning, sans-IO (engines in memory) and on trio's MockClock."""

from __future__ import annotations

import proton
import pytest
import trio
import trio.testing

from broker.fedcalls import CALL_TIMEOUT_CONDITION, CallWatch, StreamChecks, learned_targets, pending_calls
from broker.fedconfig import Stream
from broker.netconfig import NetworkTarget
from tests.unit.enginepair import Peer, Pipe, engine_client, pump
from wire.connection import EMPTY_FRAME, ConnectionHandler


def stream(**kw) -> Stream:
    return Stream(kind="upstream", name="up", user=None, password=None, **kw)


def opened_pair(*, answer: bool = True):
    """An engine client and a server Peer; the server answers the OPEN when ``answer``."""
    engine = engine_client(ConnectionHandler())
    server = Peer(server=True, sasl=False)
    pipe = Pipe(engine, server)
    if answer:
        pump(pipe)
    else:
        engine.take_output()  # the OPEN goes nowhere
    return engine, server, pipe


# -- the empty frame ----------------------------------------------------------------------------------------

def test_a_heartbeat_is_an_empty_frame_the_peer_accepts():
    engine, server, pipe = opened_pair()
    assert engine.opened_at_remote
    engine.send_heartbeat()
    assert engine.take_output() == EMPTY_FRAME
    assert engine.take_output() == b""           # once
    server.feed(EMPTY_FRAME)
    server.process()
    assert server.connection.state & proton.Endpoint.REMOTE_ACTIVE
    assert not server.transport.condition


def test_no_heartbeat_before_the_open_exchange_nor_when_other_output_goes_first():
    engine = engine_client(ConnectionHandler())
    engine.send_heartbeat()
    first = engine.take_output()
    assert first and first != EMPTY_FRAME        # the protocol header and OPEN, not an empty frame
    assert engine.take_output() == b""           # and the heartbeat was dropped: the OPEN showed us alive
    engine2, server, pipe = opened_pair()
    engine2.connection.session().open()
    engine2.process()
    engine2.send_heartbeat()
    out = engine2.take_output()
    assert out and out != EMPTY_FRAME            # the BEGIN went, which is enough
    assert engine2.take_output() == b""


# -- calls --------------------------------------------------------------------------------------------------

def test_call_watch_reports_the_oldest_unanswered_call_and_forgets_answered_ones():
    w = CallWatch()
    assert w.observe(0, []) is None
    assert w.observe(100, ["open"]) == ("open", 0)
    assert w.observe(400, ["open", "attach x"]) == ("open", 300)
    assert w.observe(500, ["attach x"]) == ("attach x", 100)
    assert w.observe(600, []) is None
    assert w.observe(700, ["attach x"]) == ("attach x", 0)   # a new call starts from now


def test_pending_calls_are_the_open_then_each_unanswered_attach():
    engine, server, pipe = opened_pair(answer=False)
    assert pending_calls(engine) == ["open"]
    engine2, server2, pipe2 = opened_pair()
    assert pending_calls(engine2) == []
    ssn = engine2.connection.session()
    ssn.open()
    rx = ssn.receiver("fed-link")
    rx.source.address = "news"
    rx.open()
    engine2.process()
    assert pending_calls(engine2) == ["attach of link fed-link"]
    pump(pipe2)                                   # the server Peer answers every attach
    assert pending_calls(engine2) == []


# -- the supervisor on MockClock ----------------------------------------------------------------------------

class FakeCtl:
    def __init__(self, engine):
        self.dialled = engine
        self.errors: list[str] = []

    def note_error(self, text: str) -> None:
        self.errors.append(text)


async def test_check_period_sends_a_heartbeat_each_period(autojump_clock):
    engine, server, pipe = opened_pair()
    sent = []
    engine.send_heartbeat = lambda: sent.append(trio.current_time())
    checks = StreamChecks("f/up", stream(check_period_ms=200, call_timeout_ms=-1))
    ctl = FakeCtl(engine)
    with trio.move_on_after(1.05):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(checks.run, ctl, nursery.cancel_scope)
    assert len(sent) == 5 and checks.timeouts == 0
    assert [round(b - a, 3) for a, b in zip(sent, sent[1:])] == [0.2] * 4


async def test_an_unanswered_open_times_out_after_call_timeout(autojump_clock):
    engine, server, pipe = opened_pair(answer=False)
    checks = StreamChecks("f/up", stream(check_period_ms=30000, call_timeout_ms=400))
    ctl = FakeCtl(engine)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(checks.run, ctl, nursery.cancel_scope)
    waited = trio.current_time() - start
    assert checks.timeouts == 1 and 0.4 <= waited <= 0.6 + 1.0, waited
    assert "call-timeout: open unanswered" in ctl.errors[0]
    assert engine.closing
    assert engine.connection.condition.name == CALL_TIMEOUT_CONDITION


async def test_a_custom_call_counts_and_the_limit_can_change(autojump_clock):
    engine, server, pipe = opened_pair()
    outstanding = ["the downstream's command"]
    limit = [-1]
    checks = StreamChecks("f/down", stream(call_timeout_ms=100), calls=lambda: outstanding,
                          limit_ms=lambda: limit[0])
    ctl = FakeCtl(engine)
    with trio.move_on_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(checks.run, ctl, nursery.cancel_scope)
    assert checks.timeouts == 0                   # -1: no limit (call-failover-timeout's default)
    limit[0] = 300
    async with trio.open_nursery() as nursery:
        nursery.start_soon(checks.run, ctl, nursery.cancel_scope)
    assert checks.timeouts == 1 and "the downstream's command" in ctl.errors[0]


@pytest.fixture
def autojump_clock():
    return trio.testing.MockClock(autojump_threshold=0)


# -- ha -----------------------------------------------------------------------------------------------------

def entry(host, port, scheme="amqp"):
    return {proton.symbol("hostname"): host, proton.symbol("network-host"): host, proton.symbol("port"): port,
            proton.symbol("scheme"): scheme}


def test_learned_targets_leave_out_ourselves_the_current_broker_and_tls_without_tls():
    current = NetworkTarget("tcp", "127.0.0.1", 5001, None)
    props = {"failover-server-list": [entry("127.0.0.1", 5001), entry("127.0.0.1", 5002),
                                      entry("127.0.0.1", 5003), entry("127.0.0.1", 5004, "amqps"), "junk",
                                      {proton.symbol("port"): "x"}]}
    got = learned_targets(props, current, ["amqp://127.0.0.1:5003"])
    assert [(t.host, t.port, t.tls) for t in got] == [("127.0.0.1", 5002, None)]
    tls = object()
    got = learned_targets(props, NetworkTarget("tcp", "127.0.0.1", 5001, tls), [])
    assert [(t.port, t.tls) for t in got] == [(5002, None), (5003, None), (5004, tls)]
    assert learned_targets({}, current, []) == []
