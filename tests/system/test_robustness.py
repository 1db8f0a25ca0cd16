"""Robustness: garbage and truncated input, clients that vanish, shutdown with clients connected.

In every case the router must keep serving everyone else; the router_factory fixture also checks
that it exits 0 on SIGTERM at the end.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from proton import Connection, Transport

from tests.system.clients import Consumer, Producer, RawSocket, Responder, close_all
from tests.system.harness import REPO_ROOT

pytestmark = pytest.mark.system

TIMEOUT = 15
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"


@pytest.fixture(autouse=True)
def _close_clients(router_factory):
    yield
    close_all()


def _open_frame_bytes() -> bytes:
    """A client's AMQP header and OPEN frame, as proton would send them (no SASL)."""
    t = Transport()
    c = Connection()
    t.bind(c)
    c.container = "raw-client"
    c.hostname = "localhost"
    c.open()
    data = bytes(t.peek(t.pending()))
    assert data.startswith(AMQP_HEADER) and len(data) > 20
    return data


def _start_flow(router, address, n=120, interval=0.005):
    """A consumer and a paced producer (n messages over about n * interval seconds)."""
    c = Consumer(router.url, address, credit=50).start()
    p = Producer(router.url, address, count=n, interval=interval).start()
    return p, c


def _finish_flow(p, c, n=120):
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=n)
    assert p.outcomes == {"accepted": n}
    assert c.ids == list(range(n))


def _router_still_answers(router) -> None:
    """A new raw connection still gets the router's AMQP header."""
    with RawSocket(router.url) as s:
        s.send(AMQP_HEADER)
        got = s.recv_exactly(8, timeout=5)
        assert got[:8] == AMQP_HEADER, got


GARBAGE = {
    "http": b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    "random": random.Random(1234).randbytes(4096),
    "tls-hello": bytes.fromhex("160301020001") + b"\x00" * 200,
    "amqp-1.1": b"AMQP\x00\x01\x01\x00",
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_garbage_is_refused_while_others_flow(router, kind):
    p, c = _start_flow(router, f"rb.garbage.{kind}")
    p.wait_sent(40, TIMEOUT)  # traffic before...
    with RawSocket(router.url) as s:
        s.send(GARBAGE[kind])
        how = s.read_until_closed(timeout=5)
        # ... during (the flow is paced, so it is still going) ...
        assert p.sent < 120, "the flow ended before the garbage was handled: slow it down"
    assert how in ("eof", "reset"), f"the router left a garbage connection open ({how})"
    # Whatever the router answered is a protocol header of its own, nothing else.
    assert s.received == b"" or s.received.startswith(b"AMQP"), s.received[:64]
    _finish_flow(p, c)  # ... and after.
    _router_still_answers(router)


@pytest.mark.parametrize("cut", ["half-open", "header-only", "huge-frame-size"])
def test_truncated_frame_then_close(router, cut):
    p, c = _start_flow(router, f"rb.trunc.{cut}")
    p.wait_sent(40, TIMEOUT)
    data = _open_frame_bytes()
    with RawSocket(router.url) as s:
        if cut == "half-open":
            frame = data[8:]
            s.send(AMQP_HEADER + frame[: len(frame) // 2])
        elif cut == "header-only":
            s.send(AMQP_HEADER[:5])
        else:
            # A frame header announcing ~4 GiB, then nothing: must not be buffered or allocated.
            s.send(AMQP_HEADER + b"\xff\xff\xff\xf0\x02\x00\x00\x00" + b"\x00" * 64)
        if cut == "huge-frame-size":
            # Above the negotiated max-frame-size: the router closes on its own.
            assert s.read_until_closed(timeout=5) in ("eof", "reset")
        elif cut == "half-open":
            # The router answers our header and then waits for the rest of the frame.
            assert s.recv_exactly(8, timeout=5)[:8] == AMQP_HEADER, s.received
    # We hung up mid-frame: the router carries on.
    _finish_flow(p, c)
    _router_still_answers(router)
    c2 = Consumer(router.url, "rb.after", credit=10).start()
    p2 = Producer(router.url, "rb.after", count=10).start()
    p2.wait(TIMEOUT)
    assert p2.outcomes == {"accepted": 10}
    assert c2.ids == list(range(10))


def test_eof_mid_frame_closes_connection(router):
    """The peer sends the AMQP header, part of an OPEN frame, then its FIN: the router must close
    its side promptly (Dispatch closes a connection whose socket reached EOF)."""
    data = _open_frame_bytes()
    with RawSocket(router.url) as s:
        s.send(AMQP_HEADER)
        assert s.recv_exactly(8, timeout=5)[:8] == AMQP_HEADER
        s.send(data[8:8 + 15])  # the frame header and half the OPEN performative
        time.sleep(0.1)
        s.sock.shutdown(socket.SHUT_WR)
        how = s.read_until_closed(timeout=3)
    assert how in ("eof", "reset"), (
        f"router kept the connection open for 3 s after our EOF mid-frame; it sent {s.received!r}")


def test_many_aborted_connections(router):
    """Connections reset in every state (just connected, mid header, after open) leak nothing fatal."""
    p, c = _start_flow(router, "rb.abort", n=100, interval=0.005)
    data = _open_frame_bytes()
    for k in range(30):
        s = RawSocket(router.url)
        s.send([b"", AMQP_HEADER[:3], AMQP_HEADER, data, data[: 8 + k]][k % 5])
        s.abort()  # RST
    _finish_flow(p, c, n=100)
    _router_still_answers(router)


def _start_hold_consumer(url: str, address: str, credit: int, accept: int) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.system.clients", "hold-consumer", url, address,
         "--credit", str(credit), "--accept", str(accept)],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return proc


def _read_lines(proc: subprocess.Popen, want: int, timeout: float) -> list[str]:
    """Read stdout lines until ``want`` 'received' lines (in a thread, so it can time out)."""
    lines: list[str] = []
    done = threading.Event()

    def pump():
        for line in proc.stdout:
            lines.append(line.strip())
            if sum(l.startswith("received") for l in lines) >= want:
                break
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    if not done.wait(timeout):
        proc.kill()
        raise AssertionError(f"hold-consumer gave {lines} within {timeout}s; stderr: {proc.stderr.read()}")
    return lines


def test_consumer_vanishes_with_unsettled_deliveries(router):
    n, credit, accept = 20, 7, 3
    proc = _start_hold_consumer(router.url, "rb.vanish", credit, accept)
    try:
        _read_lines(proc, 0, TIMEOUT)  # "attached"
        p = Producer(router.url, "rb.vanish", count=n).start()
        lines = _read_lines(proc, credit, TIMEOUT)
        assert [l for l in lines if l.startswith("received")] == [f"received {i}" for i in range(credit)]
        p.wait_settled(accept, TIMEOUT)
        assert p.outcomes == {"accepted": accept}
    finally:
        proc.send_signal(signal.SIGKILL)  # the socket goes with the process, no close frame
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    p.wait_settled(n, TIMEOUT)
    assert p.outcomes == {"accepted": accept, "modified": credit - accept, "released": n - credit}
    again = p.ids_with("released", "modified")
    assert again == list(range(accept, n))
    c2 = Consumer(router.url, "rb.vanish", credit=50).start()
    p.send(again)
    p.wait_settled(n + len(again), TIMEOUT)
    c2.wait(TIMEOUT, count=len(again))
    assert sorted(c2.ids) == again
    for i in range(n):
        assert p.outcome_of[i].count("accepted") == 1, (i, p.outcome_of[i])


def test_producer_leaves_before_consumer_settles(router):
    """Outcomes for a producer that is gone are dropped quietly; the router carries on."""
    c = Consumer(router.url, "rb.orphan", credit=20, outcome="hold").start()
    p = Producer(router.url, "rb.orphan", count=10).start()
    c.wait(TIMEOUT, count=10)
    p.close()
    c.settle_held("accept")
    time.sleep(0.3)
    assert not c.remote_closed.is_set() and not c.transport_errors
    # Same consumer, new producer: still works.
    c.wait_for(lambda: c.settled_by_us["accept"] == 10, TIMEOUT, "held deliveries settled")
    c.set_outcome("accept")
    p2 = Producer(router.url, "rb.orphan", count=5).start()
    p2.wait(TIMEOUT)
    assert p2.outcomes == {"accepted": 5}
    c.wait(TIMEOUT, count=15)
    assert c.ids == list(range(10)) + list(range(5))


def test_sigterm_closes_client_connections_cleanly(router):
    c = Consumer(router.url, "rb.term", credit=10, outcome="hold").start()
    p = Producer(router.url, "rb.term", count=3).start()
    svc = Responder(router.url, "rb.svc").start()
    c.wait(TIMEOUT, count=3)  # three unsettled deliveries in flight at shutdown
    idle = Producer(router.url, "rb.idle").start(wait=False)
    idle.wait_for(lambda: idle.attached.is_set(), TIMEOUT, "idle sender attached")
    code = router.stop(timeout=10)
    assert code == 0, router.stderr_text()[-3000:]
    for client in (c, p, svc, idle):
        client.wait_for(lambda: client.transport_closed.is_set(), 5, "the connection to end")
        # A close frame, not a dropped socket.
        assert client.remote_closed.is_set(), client.describe()
        assert client.transport_errors == [], client.describe()
