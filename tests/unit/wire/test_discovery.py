"""wire.discovery: the sans-IO agent with plain times, then two real agents over multicast on this machine."""

from __future__ import annotations

import errno
import math
import random
import socket

import pytest
import trio

from wire.discovery import (DEFAULT_KEEPALIVE_MS, HEARTBEAT_MISS_BEFORE_DEATH, MAX_SERVICES, DiscoveryAgent,
                            run_multicast_discovery)

A_URL = "amqp://127.0.0.1:5672"
B_URL = "amqp://127.0.0.1:5673"


def _pair(**kw):
    return DiscoveryAgent("default", A_URL, agent_id="a", **kw), DiscoveryAgent("default", B_URL, agent_id="b", **kw)


def test_announcement_format_documented():
    a = DiscoveryAgent("default", A_URL, agent_id="abc")
    assert a.announcement() == b"TDDISC/1 alive default abc amqp://127.0.0.1:5672"
    assert a.farewell() == b"TDDISC/1 dead default abc amqp://127.0.0.1:5672"
    assert DiscoveryAgent("default", A_URL).agent_id != DiscoveryAgent("default", A_URL).agent_id


def test_activemq_defaults():
    a = DiscoveryAgent("default", A_URL)
    assert a.keepalive_ms == DEFAULT_KEEPALIVE_MS == 500
    assert a.expire_after_ms == 500 * HEARTBEAT_MISS_BEFORE_DEATH == 5000


def test_found_once_then_refreshed():
    a, b = _pair()
    assert a.received(b.announcement(), 0) == B_URL
    assert a.received(b.announcement(), 400) is None
    assert a.services == {B_URL}


def test_own_other_group_and_malformed_ignored():
    a, b = _pair()
    other = DiscoveryAgent("elsewhere", "amqp://h:1", agent_id="c")
    same_url_other_agent = DiscoveryAgent("default", A_URL, agent_id="z")
    bad = [
        a.announcement(), other.announcement(), same_url_other_agent.announcement(),
        b"", b"garbage", b"\xff\xfe\xfd", b"TDDISC/2 alive default b amqp://h:1",
        b"TDDISC/1 alive default b", b"TDDISC/1 alive default b amqp://h:1 extra",
        b"TDDISC/1 hello default b amqp://h:1", b"TDDISC/1 alive default b not-a-url",
        b"TDDISC/1 alive default b amqp://h:1\x00", b"TDDISC/1 alive default b amqp://" + b"h" * 2000,
        b"TDDISC/1  alive default b amqp://h:1",
    ]
    for data in bad:
        assert a.received(data, 0) is None, data
    assert a.services == frozenset()
    assert a.tick(10**9) == []


def test_silent_service_expires_after_ten_keepalives():
    a, b = _pair()
    a.received(b.announcement(), 1000)
    assert a.next_deadline() == -math.inf        # answer the newcomer at once
    assert a.announcement_due(1000) == a.announcement()
    assert a.next_deadline() == 1500            # next keepalive
    assert a.tick(5999) == []
    assert a.tick(6000) == [B_URL]
    assert a.services == frozenset()
    assert a.received(b.announcement(), 7000) == B_URL   # back again: found again


def test_keepalives_keep_a_service():
    a, b = _pair()
    for t in range(0, 20000, 500):
        a.received(b.announcement(), t)
        assert a.tick(t) == []
    assert a.services == {B_URL}


def test_farewell_reported_by_next_tick():
    a, b = _pair()
    a.received(b.announcement(), 0)
    a.announcement_due(0)
    assert a.received(b.farewell(), 10) is None
    assert a.next_deadline() == -math.inf
    assert a.tick(10) == [B_URL]
    assert a.tick(10) == []
    assert a.received(b.farewell(), 20) is None and a.tick(20) == []   # unknown service: nothing


def test_announcement_schedule():
    a, _ = _pair(keepalive_ms=100)
    assert a.announcement_due(0) is not None
    assert a.announcement_due(50) is None
    assert a.announcement_due(100) is not None
    assert a.next_deadline() == 200


def test_listen_only_agent():
    a = DiscoveryAgent("default", None)
    assert a.announcement() is None and a.farewell() is None and a.announcement_due(0) is None
    assert a.next_deadline() is None
    b = DiscoveryAgent("default", B_URL)
    assert a.received(b.announcement(), 0) == B_URL
    assert a.next_deadline() == 5000


def test_services_bounded():
    a = DiscoveryAgent("default", A_URL)
    for i in range(MAX_SERVICES + 10):
        a.received(f"TDDISC/1 alive default x{i} amqp://h:{i}".encode(), 0)
    assert len(a.services) == MAX_SERVICES


@pytest.mark.parametrize("args,kw", [
    (("", A_URL), {}), (("a b", A_URL), {}), (("default", "no-scheme"), {}), (("default", "amqp://h :1"), {}),
    (("default", A_URL), {"keepalive_ms": 0}), (("default", A_URL), {"keepalive_ms": 500, "expire_after_ms": 400}),
    (("default", A_URL), {"agent_id": "has space"}),
])
def test_bad_arguments_refused(args, kw):
    with pytest.raises(ValueError):
        DiscoveryAgent(*args, **kw)


# -- real multicast on this machine ---------------------------------------------------------------------

def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _start(nursery, agent, host, port, found, lost, interface="127.0.0.1", **kw):
    """Start discovery for ``agent`` in its own cancel scope; returns the scope. Skips the test only when
    the kernel refuses multicast on the interface (with the reason)."""
    scope = trio.CancelScope()

    async def run(task_status=trio.TASK_STATUS_IGNORED):
        with scope:
            await run_multicast_discovery(agent, host, port, on_found=found.append_and_notify,
                                          on_lost=lost.append_and_notify, interface=interface,
                                          task_status=task_status, **kw)

    try:
        await nursery.start(run)
    except OSError as e:
        if e.errno in (errno.ENODEV, errno.EADDRNOTAVAIL, errno.ENOPROTOOPT, errno.EPERM):
            pytest.skip(f"kernel refuses multicast on interface {interface}: {e}")
        raise
    return scope


class _Seen(list):
    """URLs reported, with a way to wait for one."""

    def __init__(self):
        super().__init__()
        self._changed = trio.Event()

    def append_and_notify(self, url):
        self.append(url)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, url):
        while url not in self:
            await self._changed.wait()


# Keep-alives every 50 ms, expiry after 1.5 s: a busy machine would have to delay 30 keep-alives in a
# row for a false expiry (which the exact found/lost lists below would catch).
@pytest.mark.parametrize("send_farewell,interface", [(True, "127.0.0.1"), (False, "127.0.0.1"), (True, "0.0.0.0")],
                         ids=["loopback-farewell", "loopback-expiry", "default-interface"])
async def test_two_agents_find_each_other_and_lose_one_that_stops(send_farewell, interface):
    host = f"239.255.{random.randint(10, 250)}.{random.randint(1, 250)}"
    port = _free_udp_port()
    a, b = (DiscoveryAgent("grp", A_URL, keepalive_ms=50, expire_after_ms=1500),
            DiscoveryAgent("grp", B_URL, keepalive_ms=50, expire_after_ms=1500))
    a_found, a_lost, b_found, b_lost = _Seen(), _Seen(), _Seen(), _Seen()
    async with trio.open_nursery() as nursery:
        with trio.fail_after(30):
            await _start(nursery, a, host, port, a_found, a_lost, interface)
            b_scope = await _start(nursery, b, host, port, b_found, b_lost, interface, send_farewell=send_farewell)
            await a_found.wait_for(B_URL)
            await b_found.wait_for(A_URL)
            assert a.services == {B_URL} and b.services == {A_URL}
            b_scope.cancel()
            lost_at = trio.current_time()
            await a_lost.wait_for(B_URL)
            if not send_farewell:                # gone by silence, not sooner
                assert trio.current_time() - lost_at >= 1.5 - 0.1
            assert a.services == frozenset()
            assert a_found == [B_URL] and b_lost == [] and a_lost == [B_URL]
        nursery.cancel_scope.cancel()
