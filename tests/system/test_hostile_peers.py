"""One bad peer never takes a daemon down (issue 10), against real tdrouterd and tdbroker processes.

Each test sends what an attacker would (an OPEN whose container-id is not UTF-8, an ATTACH whose address
is not, a container-id that tries to forge log lines, sockets that never finish the handshake, more
sockets than the daemon has descriptors) and checks that the offender alone is turned away while a
well-behaved client keeps working, and that the daemon exits 0 at the end (the fixtures check that).
"""

from __future__ import annotations

import os
import re
import resource
import socket
import time

import proton
import pytest

from tests.system.brokerharness import BrokerProcess
from tests.system.clients import Consumer, Producer, RawSocket, close_all

pytestmark = pytest.mark.system

TIMEOUT = 15
MARKER = "MARKERMARKER"  # replaced by bytes that are not UTF-8, same length, so the frame stays valid


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    close_all()


def client_stream(container: str = "raw-client", target: str | None = None) -> bytes:
    """A client's opening bytes (no SASL): header, OPEN and optionally BEGIN + ATTACH to ``target``."""
    t = proton.Transport()
    c = proton.Connection()
    t.bind(c)
    c.container = container
    c.hostname = "localhost"
    c.open()
    if target is not None:
        s = c.session()
        s.open()
        snd = s.sender("hostile")
        snd.target.address = target
        snd.open()
    return bytes(t.peek(t.pending()))


def with_invalid_utf8(data: bytes) -> bytes:
    assert data.count(MARKER.encode()) == 1
    return data.replace(MARKER.encode(), b"\xff\xfe" + b"x" * (len(MARKER) - 2))


def flow_works(url: str, address: str, n: int = 20, consumer: Consumer | None = None) -> None:
    """n messages reach a consumer (a new one, or ``consumer`` already attached before the attack)."""
    c = consumer or Consumer(url, address, credit=n).start()
    p = Producer(url, address, count=n).start()
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=n)
    assert p.outcomes == {"accepted": n}
    assert c.ids == list(range(n))


def send_and_read_answer(url: str, data: bytes) -> tuple[str, bytes]:
    with RawSocket(url) as raw:
        raw.send(data)
        how = raw.read_until_closed(TIMEOUT)
        return how, raw.received


def wait_for(predicate, timeout: float = TIMEOUT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


# -- tdrouterd ---------------------------------------------------------------------------------------

def test_router_invalid_utf8_container_id_closes_that_connection_only(router):
    bystander = Consumer(router.url, "steady", credit=100).start()
    how, answer = send_and_read_answer(router.url, with_invalid_utf8(client_stream(container=MARKER)))
    assert how == "eof", how
    assert b"amqp:decode-error" in answer
    assert router.is_running
    flow_works(router.url, "steady", consumer=bystander)
    err = router.stderr_text()
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "closed with amqp:decode-error" in line]
    assert len(lines) == 1 and "127.0.0.1:" in lines[0], err


def test_router_invalid_utf8_attach_address_is_refused_with_decode_error(router):
    how, answer = send_and_read_answer(router.url, with_invalid_utf8(client_stream(target=MARKER)))
    assert how == "eof", how
    assert b"amqp:decode-error" in answer
    assert router.is_running
    flow_works(router.url, "after-attach")


def test_router_container_id_cannot_forge_log_lines(router):
    forged = "evil\n2026-11-24 00:00:00,000 CRITICAL router.core: FORGED"
    how, answer = send_and_read_answer(router.url, client_stream(container=forged) + b"\x00" * 8)
    flow_works(router.url, "after-forgery")
    err = router.stderr_text()
    assert "FORGED" in err  # the container-id was logged...
    assert not [line for line in err.splitlines() if line.startswith("2026-11-24 00:00:00,000 CRITICAL")], err


def test_router_handshake_timeout_drops_silent_and_slow_sockets(router_factory):
    router = router_factory(listener_extra="initialHandshakeTimeoutSeconds: 2")
    silent = [RawSocket(router.url) for _ in range(20)]
    slow = RawSocket(router.url)
    t0 = time.monotonic()
    bystander = Consumer(router.url, "hs", credit=50).start()
    try:
        header = b"AMQP\x00\x01\x00\x00"
        for b in header[:5]:  # a slowloris: a byte at a time, never a whole OPEN
            slow.send(bytes([b]))
            time.sleep(0.3)
        for s in (*silent, slow):
            assert s.read_until_closed(TIMEOUT) in ("eof", "reset")
        elapsed = time.monotonic() - t0
        assert 1.5 <= elapsed < TIMEOUT
        time.sleep(2.5)  # a client that finished its handshake is not subject to the timeout
        flow_works(router.url, "hs", consumer=bystander)
    finally:
        for s in (*silent, slow):
            s.close()


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_router_out_of_descriptors_backs_off_and_recovers(router):
    c = Consumer(router.url, "fds", credit=50).start()
    assert c.attached.wait(TIMEOUT)
    soft, hard = resource.prlimit(router.pid, resource.RLIMIT_NOFILE)
    limit = _open_fds(router.pid) + 4
    resource.prlimit(router.pid, resource.RLIMIT_NOFILE, (limit, hard))
    flood = []
    try:
        for _ in range(40):  # the kernel completes these from the backlog; accept() then hits EMFILE
            s = socket.create_connection(("127.0.0.1", router.ports["amqp"]), timeout=5)
            flood.append(s)
        time.sleep(3.0)
        err = router.stderr_text()
        # One rate-limited line, not one (with a traceback) per failed accept.
        assert len(re.findall(r"Too many open files|EMFILE", err)) <= 2, err[-3000:]
        assert router.is_running
    finally:
        for s in flood:
            s.close()
    resource.prlimit(router.pid, resource.RLIMIT_NOFILE, (soft, hard))
    # Descriptors are free again: a new client gets in promptly and traffic flows.
    p = Producer(router.url, "fds", count=20).start()
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=20)
    assert p.outcomes == {"accepted": 20}


# -- tdbroker ----------------------------------------------------------------------------------------

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>hostile-target</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="work"><anycast><queue name="work"/></anycast></address>
  </addresses>
</core>
</configuration>
"""


@pytest.fixture
def broker(tmp_path):
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "journal"))
    b = BrokerProcess(conf, tmp_path).start()
    yield b
    assert b.stop() == 0, b.stderr_text()


def test_broker_invalid_utf8_container_id_closes_that_connection_only(broker):
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    how, answer = send_and_read_answer(url, with_invalid_utf8(client_stream(container=MARKER)))
    assert how == "eof", how
    assert b"amqp:decode-error" in answer
    assert broker.proc.poll() is None
    flow_works(url, "work")
    assert "Traceback" not in broker.stderr_text()


def test_router_policy_max_connections_refuses_the_one_over(router_factory):
    router = router_factory("policy {\n    maxConnections: 3\n}")
    held = [Consumer(router.url, f"held-{i}", credit=10).start() for i in range(3)]
    for c in held:
        assert c.attached.wait(TIMEOUT)
    how, answer = send_and_read_answer(router.url, client_stream())
    assert how == "eof", how
    assert b"amqp:resource-limit-exceeded" in answer
    assert "refused" in router.stderr_text()
    held[0].close()
    # A place is free again: a new client gets in and traffic flows to a held consumer.
    p = Producer(router.url, "held-1", count=10).start()
    p.wait(TIMEOUT)
    held[1].wait(TIMEOUT, count=10)
    assert p.outcomes == {"accepted": 10}


@pytest.fixture
def broker_with(tmp_path):
    """``start(params)``: a tdbroker whose acceptor URI carries ``params`` (e.g. connectionsAllowed=2)."""
    started = []

    def start(params: str) -> BrokerProcess:
        conf = tmp_path / "broker.xml"
        text = BROKER_XML.format(journal=tmp_path / "journal").replace(
            "?protocols=AMQP", f"?protocols=AMQP;{params}")
        conf.write_text(text)
        b = BrokerProcess(conf, tmp_path).start()
        started.append(b)
        return b

    yield start
    for b in started:
        assert b.stop() == 0, b.stderr_text()


def test_broker_connections_allowed_refuses_the_one_over(broker_with):
    broker = broker_with("connectionsAllowed=2")
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    held = [Consumer(url, "work", credit=10).start() for _ in range(2)]
    for c in held:
        assert c.attached.wait(TIMEOUT)
    how, answer = send_and_read_answer(url, client_stream())
    assert how == "eof", how
    assert b"amqp:resource-limit-exceeded" in answer
    held[0].close()
    p = Producer(url, "work", count=10).start()
    p.wait(TIMEOUT)
    held[1].wait(TIMEOUT, count=10)
    assert p.outcomes == {"accepted": 10}


def test_broker_handshake_timeout_drops_silent_sockets(broker_with):
    broker = broker_with("handshake-timeout=1")
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    silent = [RawSocket(url) for _ in range(10)]
    t0 = time.monotonic()
    try:
        for s in silent:
            assert s.read_until_closed(TIMEOUT) in ("eof", "reset")
        assert time.monotonic() - t0 < TIMEOUT
        flow_works(url, "work")
    finally:
        for s in silent:
            s.close()
