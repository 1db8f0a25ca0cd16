"""A router with a waypoint address and a tdbroker attached as an Artemis ``<peer>``: messages sent with
no consumer anywhere are stored by the broker, and a consumer attaching later gets them, in order."""

from __future__ import annotations

import re

import pytest
from proton import Message

from broker.journal import Journal
from tests.system.brokerharness import BROKER_XML, TIMEOUT, WAYPOINT, BrokerProcess, wait_queue_empty
from tests.system.clients import Consumer, Producer
from tests.system.harness import REPO_ROOT, free_port
from tools.daemons import BROKER, run_expecting_failure

pytestmark = pytest.mark.system

COUNT = 200


@pytest.fixture
def brokered(router_factory, tmp_path):
    router = router_factory(WAYPOINT)
    conf = tmp_path / "broker.xml"
    brokers: list[BrokerProcess] = []

    def start_broker(router_port: int | None = None) -> BrokerProcess:
        port = router.ports["amqp"] if router_port is None else router_port
        conf.write_text(BROKER_XML.format(journal=tmp_path / "journal", router_port=port))
        b = BrokerProcess(conf, tmp_path).start()
        brokers.append(b)
        return b

    yield router, start_broker
    for b in brokers:
        code = b.stop()
        assert code == 0, f"tdbroker exited with {code}:\n{b.stderr_text()}"


def _durable(i: int) -> Message:
    return Message(id=i, body=f"m{i}", durable=True)


def _store(router, n: int, *, durable: bool) -> None:
    p = Producer(router.url, "queue", count=n, message_fn=_durable if durable else None).start()
    try:
        p.wait(TIMEOUT)
        assert p.outcomes == {"accepted": n}, p.outcomes
    finally:
        p.close()


def _consume(router, n: int) -> list:
    c = Consumer(router.url, "queue", count=n, credit=50).start()
    try:
        c.wait(TIMEOUT)
        got = [m.id for m in c.messages]
    finally:
        c.close()
    return got


@pytest.mark.parametrize("durable", [False, True], ids=["non-durable", "durable"])
def test_broker_stores_and_forwards_in_order(brokered, durable):
    router, start_broker = brokered
    broker = start_broker()
    assert broker.ports["amqp"] > 0
    _store(router, COUNT, durable=durable)
    got = _consume(router, COUNT)
    assert got == list(range(COUNT))


def test_durable_messages_survive_broker_restart(brokered):
    router, start_broker = brokered
    first = start_broker()
    _store(router, COUNT, durable=True)
    assert first.stop() == 0
    second = start_broker()
    got = _consume(router, COUNT)
    assert got == list(range(COUNT))
    # The consumer's accepts are journaled (once they have come back through the router): nothing is
    # left to recover.
    wait_queue_empty(second)
    assert second.stop() == 0
    journal = Journal(second.journal_dir)
    try:
        assert journal.recover() == []
    finally:
        journal.close()


def test_bad_config_is_reported_with_file_and_line(tmp_path):
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.replace("<journal-directory>", "<jurnal-directory>")
                    .replace("</journal-directory>", "</jurnal-directory>"))
    code, stderr = run_expecting_failure(BROKER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert code == 2
    assert re.match(rf"^{re.escape(str(conf))}:5: .*jurnal-directory", stderr), stderr


def test_unsettled_messages_of_a_vanished_consumer_come_back_in_order(brokered):
    router, start_broker = brokered
    start_broker()
    _store(router, 50, durable=True)
    holder = Consumer(router.url, "queue", count=10, credit=10, replenish=False, outcome="hold").start()
    try:
        holder.wait(TIMEOUT)
        assert [m.id for m in holder.messages] == list(range(10))
    finally:
        holder.close()
    assert _consume(router, 50) == list(range(50))


def test_clients_can_use_the_broker_directly(brokered):
    router, start_broker = brokered
    broker = start_broker()
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    p = Producer(url, "direct", count=20, message_fn=_durable).start()
    try:
        p.wait(TIMEOUT)
        assert p.outcomes == {"accepted": 20}
    finally:
        p.close()
    c = Consumer(url, "direct", count=20).start()
    try:
        c.wait(TIMEOUT)
        assert [m.id for m in c.messages] == list(range(20))
    finally:
        c.close()


def test_broker_reconnects_and_reattaches_its_links(brokered, router_factory):
    """The broker starts before its router, and outlives a router restart: the waypoint links are
    attached again on every connection, and what the broker stored is still delivered."""
    _, start_broker = brokered
    port = free_port()
    fixed = f"listener {{\n name: fixed\n host: 127.0.0.1\n port: {port}\n}}\n"
    start_broker(router_port=port)
    first = router_factory(WAYPOINT + "\n" + fixed, router_id="Router.B")
    _store(first, 30, durable=True)
    assert first.stop() == 0
    second = router_factory(WAYPOINT + "\n" + fixed, router_id="Router.C")
    _store(second, 10, durable=False)  # new ids 0..9 again, queued behind the first 30
    got = _consume(second, 40)
    assert got == list(range(30)) + list(range(10))


def test_unknown_queue_is_refused_without_auto_create(tmp_path):
    conf = tmp_path / "broker.xml"
    text = BROKER_XML.format(journal=tmp_path / "journal", router_port=free_port())
    text = text.replace("  <broker-connections>", "  <address-settings><address-setting match=\"#\">"
                        "<auto-create-queues>false</auto-create-queues></address-setting></address-settings>\n"
                        "  <broker-connections>")
    conf.write_text(text)
    broker = BrokerProcess(conf, tmp_path).start()
    try:
        url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
        c = Consumer(url, "nowhere", count=1).start(wait=False)
        try:
            c.wait_for(lambda: bool(c.link_errors), TIMEOUT, "the attach to be refused")
            assert "amqp:not-found" in str(c.link_errors)
        finally:
            c.close()
    finally:
        assert broker.stop() == 0
