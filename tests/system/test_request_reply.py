"""Request/reply with dynamic reply addresses, the anonymous relay, and `unavailable` addresses
(Qpid Dispatch 1.19 src/router_core/forwarder.c, connections.c, delivery.c)."""

from __future__ import annotations

import re
import time

import pytest

from tests.system.clients import Consumer, Producer, Requester, Responder, close_all

pytestmark = pytest.mark.system

TIMEOUT = 15

TEMP_ADDRESS_RE = re.compile(r"^amqp:/_topo/0/Router\.A/temp\.\S+$")


@pytest.fixture(autouse=True)
def _close_clients(router_factory):
    yield
    close_all()


def _check_replies(req: Requester, n: int) -> None:
    by_corr = {m.correlation_id: m for m in req.replies}
    assert len(req.replies) == n, [m.correlation_id for m in req.replies]
    assert sorted(by_corr) == list(range(n))
    for i, m in by_corr.items():
        assert m.body == f"reply to {req.name}:req{i}"
    assert req.request_outcomes == {"accepted": n}


def test_request_reply_through_dynamic_address(router):
    n = 25
    svc = Responder(router.url, "rr.service").start()
    req = Requester(router.url, "rr.service", count=n).start()
    assert TEMP_ADDRESS_RE.match(req.reply_address), req.reply_address
    req.wait(TIMEOUT)
    _check_replies(req, n)
    svc.wait_for(lambda: sum(svc.reply_outcomes.values()) == n, TIMEOUT, "reply outcomes")
    assert svc.reply_outcomes == {"accepted": n}
    assert all(m.reply_to == req.reply_address for m in svc.requests)


def test_concurrent_requesters_get_only_their_replies(router):
    n = 15
    svc = Responder(router.url, "rr.service").start()
    reqs = [Requester(router.url, "rr.service", count=n).start() for _ in range(3)]
    addresses = {r.reply_address for r in reqs}
    assert len(addresses) == 3, addresses  # every dynamic address is unique
    for r in reqs:
        r.wait(TIMEOUT)
    time.sleep(0.2)  # a misrouted reply would show up as an extra one
    for r in reqs:
        _check_replies(r, n)
    assert len(svc.requests) == 3 * n


def test_dynamic_address_is_gone_after_detach(router):
    """Once the requester leaves, replies to its temporary address have nowhere to go: released."""
    req = Requester(router.url, "rr.none", count=0).start()
    addr = req.reply_address
    assert TEMP_ADDRESS_RE.match(addr), addr
    req.close()
    time.sleep(0.2)
    p = Producer(router.url, None, to=addr, count=3).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"released": 3}


def test_anonymous_relay_reaches_the_right_consumers(router):
    addrs = ["relay.a", "relay.b", "relay/c"]
    n = 60
    cs = [Consumer(router.url, a, credit=30).start() for a in addrs]
    p = Producer(router.url, None, count=n, to_fn=lambda i: addrs[i % 3]).start()
    assert p.target_address is None  # a null target: the anonymous relay
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    for k, c in enumerate(cs):
        c.wait(TIMEOUT, count=n // 3)
    time.sleep(0.1)
    for k, c in enumerate(cs):
        assert c.ids == list(range(k, n, 3)), addrs[k]
        assert all(m.address == addrs[k] for m in c.messages)


def test_anonymous_relay_no_consumer_releases(router):
    c = Consumer(router.url, "relay.here", credit=30).start()
    n = 20
    to = lambda i: "relay.here" if i % 2 else "relay.nobody"  # noqa: E731
    p = Producer(router.url, None, count=n, to_fn=to).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n // 2, "released": n // 2}
    assert p.ids_with("released") == list(range(0, n, 2))
    assert sorted(c.ids) == list(range(1, n, 2))
    # An anonymous sender keeps its credit: no destination for one address must not block others.
    assert not p.link_errors and not p.link_detached.is_set()


def test_anonymous_presettled_without_consumer_dropped_silently(router):
    c = Consumer(router.url, "relay.here", credit=30).start()
    n = 20
    to = lambda i: "relay.here" if i % 2 else "relay.nobody"  # noqa: E731
    p = Producer(router.url, None, count=n, to_fn=to, presettled=True).start()
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=n // 2)
    time.sleep(0.2)
    assert sorted(c.ids) == list(range(1, n, 2))
    assert p.outcomes == {}
    assert not p.link_errors and not p.link_detached.is_set()
    assert not p.remote_closed.is_set() and not p.transport_errors
    # The same link still works afterwards.
    p.send(range(n, n + 4))
    p.wait(TIMEOUT)
    c.wait(TIMEOUT, count=n // 2 + 2)
    assert sorted(c.ids)[-2:] == [n + 1, n + 3]


UNAVAILABLE_CONF = "address {\n prefix: gone\n distribution: unavailable\n}"


@pytest.mark.parametrize("role", ["sender", "receiver"])
def test_unavailable_address_refuses_attach(router_factory, role):
    r = router_factory(UNAVAILABLE_CONF)
    if role == "sender":
        client = Producer(r.url, "gone/x", count=1).start()
    else:
        client = Consumer(r.url, "gone.x").start()
    client.wait_for(lambda: bool(client.link_errors), TIMEOUT, "the attach to be refused")
    assert client.link_errors[0][0] == "amqp:not-found", client.link_errors
    if role == "sender":
        assert client.sent == 0
    else:
        assert client.received() == 0
    # Only the link is refused: the connection stays up.
    time.sleep(0.1)
    assert not client.remote_closed.is_set()


def test_unavailable_address_anonymous_send_rejected(router_factory):
    r = router_factory(UNAVAILABLE_CONF)
    ok = Consumer(r.url, "gone1", credit=10).start()  # a prefix matches whole tokens only
    n = 6
    p = Producer(r.url, None, count=n, to_fn=lambda i: "gone/x" if i % 2 == 0 else "gone1").start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"rejected": n // 2, "accepted": n // 2}
    assert sorted(i for i, _, _ in p.rejections) == list(range(0, n, 2))
    assert {cond for _, cond, _ in p.rejections} == {"amqp:not-found"}
    assert sorted(ok.ids) == list(range(1, n, 2))
