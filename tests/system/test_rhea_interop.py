"""Interop with rhea (JavaScript) clients through a real tdrouterd, mixed with proton clients."""

from __future__ import annotations

import re
import threading
import time

import pytest

from tests.system.clients import Consumer, Producer, close_all
from tests.system.rhea import rhea_recv_start, rhea_send

pytestmark = [pytest.mark.system, pytest.mark.rhea]

TIMEOUT = 15

TEMP_ADDRESS_RE = re.compile(r"^amqp:/_topo/0/Router\.A/temp\.\S+$")


def _clean_send(result, n):
    return result == {"sent": n, "accepted": n, "rejected": 0, "released": 0, "modified": 0,
                      "errors": []} and result.exit_code == 0


@pytest.fixture(autouse=True)
def _close_clients(router_factory):
    yield
    close_all()


def test_rhea_send_proton_receive(router):
    n = 50
    c = Consumer(router.url, "ri.r2p", credit=20).start()
    res = rhea_send(router.url, "ri.r2p", n, timeout=TIMEOUT)
    assert _clean_send(res, n), (res, res.stderr)
    c.wait(TIMEOUT, count=n)
    assert c.ids == list(range(n))
    assert c.bodies == [f"m{i}" for i in range(n)]


def test_proton_send_rhea_receive(router):
    n = 50
    rx = rhea_recv_start(router.url, "ri.p2r", n, timeout=TIMEOUT)
    p = Producer(router.url, "ri.p2r", count=n).start()
    p.wait(TIMEOUT)
    got = rx.result()
    assert p.outcomes == {"accepted": n}
    assert got.exit_code == 0, got.stderr
    assert got["received"] == n
    assert got["ids"] == list(range(n))
    assert got["bodies_ok"] is True


def test_rhea_to_rhea_thousand(router):
    n = 1000
    rx = rhea_recv_start(router.url, "ri.r2r", n, timeout=30)
    res = rhea_send(router.url, "ri.r2r", n, size=64, timeout=30)
    got = rx.result()
    assert _clean_send(res, n), (res, res.stderr)
    assert got.exit_code == 0, got.stderr
    assert got["received"] == n
    assert got["ids"] == list(range(n))  # once each, in order
    assert got["bodies_ok"] is True


def test_rhea_anonymous_sender(router):
    n = 30
    c = Consumer(router.url, "ri.anon", credit=20).start()
    res = rhea_send(router.url, "ri.anon", n, anonymous=True, timeout=TIMEOUT)
    assert _clean_send(res, n), (res, res.stderr)
    c.wait(TIMEOUT, count=n)
    assert c.ids == list(range(n))
    assert all(m.address == "ri.anon" for m in c.messages)
    # Anonymous to nowhere: released, not an error.
    res = rhea_send(router.url, "ri.nobody", 5, anonymous=True, timeout=TIMEOUT)
    assert res == {"sent": 5, "accepted": 0, "rejected": 0, "released": 5, "modified": 0, "errors": []}, res


def test_rhea_dynamic_receiver(router):
    n = 20
    rx = rhea_recv_start(router.url, None, n, dynamic=True, timeout=TIMEOUT)
    addr = rx.dynamic_address()
    assert TEMP_ADDRESS_RE.match(addr), addr
    # Both a proton anonymous sender and a rhea targeted sender reach it.
    p = Producer(router.url, None, to=addr, count=n // 2).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n // 2}
    res = rhea_send(router.url, addr, n // 2, timeout=TIMEOUT)
    assert res["accepted"] == n // 2, res
    got = rx.result()
    assert got.exit_code == 0, got.stderr
    assert got["received"] == n
    assert got["ids"] == list(range(n // 2)) * 2
    assert got["bodies_ok"] is True


def test_rhea_producer_blocked_without_consumer(router):
    # No consumer: the router gives the sender no credit, so nothing is sent before the timeout.
    t0 = time.monotonic()
    res = rhea_send(router.url, "ri.block", 5, timeout=1.5)
    assert time.monotonic() - t0 < 10
    assert res.exit_code == 1
    assert res["sent"] == 0, res
    assert res["accepted"] == res["released"] == 0, res
    assert any("timeout" in e for e in res["errors"]), res

    # Again, and this time a consumer turns up while the sender waits.
    n = 25
    box = {}
    th = threading.Thread(target=lambda: box.setdefault("res", rhea_send(router.url, "ri.block", n,
                                                                          timeout=TIMEOUT)))
    th.start()
    time.sleep(1.0)
    assert "res" not in box, box  # still waiting for credit
    c = Consumer(router.url, "ri.block", credit=20).start()
    th.join(TIMEOUT + 20)
    assert not th.is_alive()
    res = box["res"]
    assert _clean_send(res, n), (res, res.stderr)
    c.wait(TIMEOUT, count=n)
    assert c.ids == list(range(n))
