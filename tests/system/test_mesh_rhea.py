"""An independent AMQP stack across the mesh: rhea (JavaScript) clients on different routers."""

from __future__ import annotations

import pytest

from tests.system.clients import close_all
from tests.system.meshharness import Mesh
from tests.system.rhea import rhea_recv_start, rhea_send

pytestmark = [pytest.mark.system, pytest.mark.rhea]

TIMEOUT = 30


@pytest.fixture
def line(tmp_path):
    m = Mesh(tmp_path)
    try:
        m.add("A")
        m.add("B", connect={"A": 1})
        m.add("C", listen=False, connect={"B": 1})
        m.wait_route("A", "C")
        yield m
    finally:
        close_all()
        m.stop_all()


def test_rhea_across_two_hops_both_ways(line):
    n = 200
    rx = rhea_recv_start(line.url("C"), "mesh.rhea.ac", n, timeout=TIMEOUT)
    rx.wait_attached()
    line.wait_route("A", "C")
    res = rhea_send(line.url("A"), "mesh.rhea.ac", n, timeout=TIMEOUT)
    got = rx.result()
    assert res["accepted"] == n and res.exit_code == 0, (res, res.stderr)
    assert got["received"] == n and got["ids"] == list(range(n)) and got["bodies_ok"] is True

    rx = rhea_recv_start(line.url("A"), "mesh.rhea.ca", n, timeout=TIMEOUT)
    rx.wait_attached()
    res = rhea_send(line.url("C"), "mesh.rhea.ca", n, timeout=TIMEOUT)
    got = rx.result()
    assert res["accepted"] == n, (res, res.stderr)
    assert got["received"] == n and got["ids"] == list(range(n))


def test_rhea_large_messages_stream_across_two_hops(line):
    """Issue 17: 3 MB messages from rhea stream through both routers (router/streams.py) and arrive whole."""
    n = 4
    rx = rhea_recv_start(line.url("C"), "mesh.rhea.large", n, timeout=TIMEOUT)
    rx.wait_attached()
    line.wait_route("A", "C")
    res = rhea_send(line.url("A"), "mesh.rhea.large", n, size=3_000_000, timeout=TIMEOUT)
    got = rx.result()
    assert res["accepted"] == n and res.exit_code == 0, (res, res.stderr)
    assert got["received"] == n and got["ids"] == list(range(n)) and got["bodies_ok"] is True
