"""broker/acceptors.py: an acceptor that starts stopped (autoStart=false), starts and stops while the broker
runs, closes its connections on stop and reports a failed start. Real loopback sockets, a real Broker
serving, and a wire EngineConnection as the AMQP client."""

from __future__ import annotations

import socket

import pytest
import trio

from broker.acceptors import STOPPED_CONDITION, AcceptorControl, listening
from broker.configmodel import Acceptor
from tests.system.harness import free_port
from tests.unit.broker.fixtures import make_broker
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from wire.driver import run_connection

HOST = "127.0.0.1"
#: Seconds a condition may take on a busy machine.
WAIT = 10


async def until(predicate, what: str) -> None:
    with trio.fail_after(WAIT):
        while not predicate():
            await trio.sleep(0.01)


def control(broker, port: int, *, auto_start: bool, changes: list | None = None, **kw) -> AcceptorControl:
    acc = Acceptor("clients", HOST, port, ("AMQP",), {}, 7, auto_start=auto_start, **kw)
    settings = broker.connection_settings(name=acc.name)

    def changed() -> None:
        if changes is not None:
            changes.append(listening([ctl]))
    ctl = AcceptorControl(acc, lambda remote: broker.new_engine(settings, server=True, remote_host=remote),
                          on_change=changed)
    return ctl


class Client:
    """An AMQP client connection over a real socket, driven in the test's nursery."""

    def __init__(self) -> None:
        self.engine = EngineConnection(ConnectionHandler(), ConnectionSettings(), server=False)
        self.done = trio.Event()

    async def connect(self, nursery, port: int) -> "Client":
        stream = await trio.open_tcp_stream(HOST, port)

        async def drive():
            try:
                await run_connection(stream, self.engine)
            finally:
                self.done.set()
        nursery.start_soon(drive)
        await until(lambda: self.engine.opened_at_remote, "the broker's open")
        return self

    @property
    def closed_with(self) -> str | None:
        """The condition of the broker's close frame, None before it (or when it carried none)."""
        condition = self.engine.connection.remote_condition
        return condition.name if condition is not None else None


def refused(port: int) -> bool:
    """True when nothing listens on HOST:port."""
    with socket.socket() as s:
        return s.connect_ex((HOST, port)) != 0


async def test_auto_start_false_listens_only_between_start_and_stop(tmp_path, nursery):
    broker = make_broker(tmp_path)
    port = free_port()
    changes: list = []
    ctl = control(broker, port, auto_start=False, changes=changes)
    await nursery.start(ctl.run)
    assert not ctl.started and ctl.bound == [] and refused(port)
    assert ctl.describe() == {"name": "clients", "host": HOST, "port": port, "started": False, "autoStart": False,
                              "tls": False, "connections": 0, "bound": [], "lastError": None}

    assert ctl.start() is True
    assert ctl.started and ctl.bound == [(HOST, port)] and changes == [[(HOST, port, False)]]
    client = await Client().connect(nursery, port)
    assert ctl.describe()["connections"] == 1
    assert ctl.start() is True and len(changes) == 1   # starting a started acceptor changes nothing

    ctl.stop()
    assert not ctl.started and ctl.bound == [] and changes[-1] == [] and refused(port)
    with trio.fail_after(WAIT):
        await client.done.wait()
    assert client.closed_with == STOPPED_CONDITION
    await until(lambda: ctl.connections == 0, "the stopped acceptor's connection to be gone")

    assert ctl.start() is True   # and again, on the same port
    await Client().connect(nursery, port)
    assert ctl.describe()["started"] and ctl.connections == 1


async def test_stop_leaves_other_acceptors_connections_alone(tmp_path, nursery):
    broker = make_broker(tmp_path)
    one, two = control(broker, 0, auto_start=True), control(broker, 0, auto_start=True)
    two.name = "other"
    await nursery.start(one.run)
    await nursery.start(two.run)
    a = await Client().connect(nursery, one.bound[0][1])
    b = await Client().connect(nursery, two.bound[0][1])
    one.stop()
    with trio.fail_after(WAIT):
        await a.done.wait()
    await trio.sleep(0.05)
    assert not b.done.is_set() and not b.engine.remote_closed and two.connections == 1


async def test_auto_started_acceptor_whose_port_is_taken_fails_before_started(tmp_path, nursery):
    broker = make_broker(tmp_path)
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        ctl = control(broker, taken.getsockname()[1], auto_start=True)
        with pytest.raises(OSError):
            await nursery.start(ctl.run)
    assert not ctl.started


async def test_a_later_start_that_cannot_bind_is_reported_not_raised(tmp_path, nursery):
    broker = make_broker(tmp_path)
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = taken.getsockname()[1]
        ctl = control(broker, port, auto_start=False)
        await nursery.start(ctl.run)
        assert ctl.start() is False
        state = ctl.describe()
        assert not state["started"] and state["bound"] == []
        assert f"cannot listen on {HOST}:{port}" in state["lastError"]
    assert ctl.start() is True and ctl.describe()["lastError"] is None   # the port is free now


async def test_stop_before_the_task_served_closes_the_listening_socket(tmp_path):
    """start() then stop() before run() began: nothing keeps listening."""
    broker = make_broker(tmp_path)
    port = free_port()
    ctl = control(broker, port, auto_start=False)
    assert ctl.start() is True and not refused(port)
    ctl.stop()
    assert refused(port)


async def test_connection_limit_still_applies(tmp_path, nursery):
    broker = make_broker(tmp_path)
    ctl = control(broker, 0, auto_start=True, connections_allowed=1)
    await nursery.start(ctl.run)
    port = ctl.bound[0][1]
    await Client().connect(nursery, port)
    second = Client()
    await second.connect(nursery, port)
    with trio.fail_after(WAIT):
        await second.done.wait()
    assert second.closed_with == "amqp:resource-limit-exceeded"


# -- the autoStart URI parameter (broker/config.py) ----------------------------------------------------------

ACCEPTORS_XML = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
<acceptors>
<acceptor name="a">tcp://127.0.0.1:5672</acceptor>
<acceptor name="b">{uri}</acceptor>
</acceptors>
</core></configuration>
"""


def acceptors(uri: str):
    from broker.config import parse_broker_config

    return parse_broker_config(ACCEPTORS_XML.format(uri=uri), "b.xml").acceptors


@pytest.mark.parametrize("uri, auto_start", [
    ("tcp://127.0.0.1:5673?protocols=AMQP;autoStart=false", False),
    ("tcp://127.0.0.1:5673?autoStart=false&amp;protocols=AMQP", False),
    ("tcp://127.0.0.1:5673?autoStart=true", True),
    ("tcp://127.0.0.1:5673?protocols=AMQP", True),
])
def test_auto_start_is_read_from_the_uri(uri, auto_start):
    default, acc = acceptors(uri)
    assert default.auto_start is True and acc.auto_start is auto_start
    assert "autoStart" not in acc.params   # acted on, so not among the parameters that have no effect


def test_a_bad_auto_start_is_refused_at_its_line():
    from broker.config import BrokerConfigError

    with pytest.raises(BrokerConfigError) as info:
        acceptors("tcp://127.0.0.1:5673?autoStart=later")
    assert (info.value.path, info.value.line) == ("b.xml", 4)
    assert "autoStart" in info.value.message and "true or false" in info.value.message
