"""The tdbroker endpoint in memory (no sockets): multicast subscriptions, dynamic sources, the
``$management`` hook, the management facade, flow-record hooks, durable delivery counts, redelivery delay
and expiry-delay, broker-connection links for queues created after start."""

from __future__ import annotations

import proton
import pytest
from proton import Message

from broker.connections import BridgeControl
from broker.journal import Journal
from broker.runtime import BridgeTask
from wire.terminus import capabilities as _symbols
from tests.paths import REPO
from tests.unit.broker.fixtures import make_broker
from tests.unit.enginepair import MODIFIED, Peer, Pipe, RouterHarness, pump, settle


@pytest.fixture
def harness(tmp_path):
    b = make_broker(tmp_path)
    return RouterHarness(router=b)


def test_multicast_address_gives_each_subscriber_a_copy(harness):
    b = harness.router
    c1, c2, prod = harness.connect(), harness.connect(), harness.connect()
    r1 = c1.receiver("news", credit=10)
    r2 = c2.receiver("news", credit=10)
    snd = prod.sender("news")
    harness.pump()
    assert len(b.multicast_queues("news")) == 2
    for i in range(3):
        prod.send(snd, body=f"n{i}")
    harness.pump()
    assert c1.bodies(r1) == ["n0", "n1", "n2"]
    assert c2.bodies(r2) == ["n0", "n1", "n2"]
    # Non-durable subscriptions go with their links.
    r1.close()
    harness.pump()
    assert len(b.multicast_queues("news")) == 1
    assert {a["name"]: a["routingTypes"] for a in b.mgmt_addresses()}["news"] == ["multicast"]


def test_topic_capability_makes_an_auto_created_address_multicast(harness):
    b = harness.router
    c = harness.connect()
    rcv = c.session.receiver("sub")
    rcv.source.address = "events"
    rcv.source.capabilities.put_array(False, proton.Data.SYMBOL)
    rcv.source.capabilities.enter()
    rcv.source.capabilities.put_symbol("topic")
    rcv.source.capabilities.exit()
    rcv.target.address = "sub"
    rcv.open()
    harness.pump()
    assert b.routing_type_for("events") == "multicast"
    assert [q["routingType"] for q in b.mgmt_queues() if q["address"] == "events"] == ["multicast"]


def test_durable_subscription_keeps_messages_while_the_subscriber_is_away(harness):
    b = harness.router
    sub = Peer(container="app")
    harness.connect(sub)
    rcv = sub.session.receiver("s1")
    rcv.source.address = "news"
    rcv.source.durability = proton.Terminus.DELIVERIES
    rcv.source.expiry_policy = proton.Terminus.EXPIRE_NEVER
    rcv.target.address = "s1"
    rcv.open()
    harness.pump()
    assert "app.s1" in b.queues
    harness.drop(sub)  # connection lost: the durable subscription stays
    prod = harness.connect()
    snd = prod.sender("news")
    harness.pump()
    prod.send(snd, body="while away")
    harness.pump()
    assert b.queues["app.s1"].message_count == 1
    back = Peer(container="app")
    harness.connect(back)
    rcv = back.session.receiver("s1")
    rcv.source.address = "news"
    rcv.source.durability = proton.Terminus.DELIVERIES
    rcv.target.address = "s1"
    rcv.open()
    rcv.flow(5)
    back._track(rcv)
    harness.pump()
    assert back.bodies(rcv) == ["while away"]
    rcv.close()  # closed (not detached): the subscription is deleted
    harness.pump()
    assert "app.s1" not in b.queues


class StubManagement:
    def __init__(self):
        self.requests = []

    def handle(self, data: bytes) -> bytes | None:
        req = Message()
        req.decode(data)
        self.requests.append(req)
        if req.body == "boom":
            raise ValueError("bad request")
        return Message(address=req.reply_to, correlation_id=req.id, body={"echo": req.body}).encode()


def test_management_link_hands_requests_to_the_agent_and_replies_to_a_dynamic_source(harness):
    b = harness.router
    b.management = StubManagement()
    c = harness.connect()
    rcv = c.receiver(dynamic=True, credit=5)
    snd = c.sender("$management")
    harness.pump()
    reply_to = rcv.remote_source.address
    assert reply_to and reply_to.startswith("temp.") and reply_to in b.queues
    d = c.send(snd, Message(id=7, reply_to=reply_to, body="ping"))
    harness.pump()
    assert d.remote_state == proton.Delivery.ACCEPTED
    [got] = c.received(rcv)
    assert got.message.body == {"echo": "ping"} and got.message.correlation_id == 7
    bad = c.send(snd, Message(id=8, reply_to=reply_to, body="boom"))
    harness.pump()
    assert bad.remote_state == proton.Delivery.REJECTED
    assert len(b.management.requests) == 2
    rcv.close()
    harness.pump()
    assert reply_to not in b.queues  # the temporary queue went with its link


def test_management_link_is_refused_without_an_agent(harness):
    c = harness.connect()
    snd = c.sender("$management")
    harness.pump()
    assert snd.remote_condition is not None and snd.remote_condition.name == "amqp:not-found"


def test_facade_creates_purges_and_deletes_queues_with_real_counters(harness):
    b = harness.router
    assert b.create_queue("work", "jobs")["address"] == "jobs"
    with pytest.raises(ValueError):
        b.create_queue("work")
    with pytest.raises(ValueError):
        b.create_queue("x", routing_type="broadcast")
    with pytest.raises(KeyError):
        b.delete_queue("nope")
    with pytest.raises(KeyError):
        b.purge_queue("nope")
    with pytest.raises(KeyError):
        b.start_broker_connection("nope")
    p, c = harness.connect(), harness.connect()
    snd = p.sender("jobs")
    harness.pump()
    for i in range(4):
        p.send(snd, body=i)
    harness.pump()
    rcv = c.receiver("work", credit=1)
    harness.pump()
    [first] = c.received(rcv)
    settle(first.delivery)
    rcv.flow(1)
    harness.pump()
    row = next(q for q in b.mgmt_queues() if q["name"] == "work")
    assert (row["messageCount"], row["consumerCount"], row["deliveredCount"], row["acknowledgedCount"]) == \
        (3, 1, 2, 1)  # one accepted, one more delivered on the refreshed credit
    assert b.purge_queue("work") == 2  # ready ones only; the one being delivered stays
    assert b.delete_queue("work") == 1
    harness.pump()
    assert rcv.remote_condition is not None and rcv.remote_condition.name == "amqp:resource-deleted"
    assert "work" not in {q["name"] for q in b.mgmt_queues()}


def test_dead_letter_count_after_max_attempts(harness):
    b = harness.router
    p, c = harness.connect(), harness.connect()
    snd = p.sender("orders")
    rcv = c.receiver("orders", credit=10)
    harness.pump()
    p.send(snd, body="poison")
    harness.pump()
    for _ in range(3):
        [got] = c.received(rcv, clear=True)
        settle(got.delivery, MODIFIED, failed=True)
        harness.pump()
    row = next(q for q in b.mgmt_queues() if q["name"] == "orders")
    assert row["deadLetteredCount"] == 1 and row["messageCount"] == 0
    assert b.queues["DLQ"].message_count == 1


class StubRecorder:
    def __init__(self, wanted):
        self.wanted = wanted
        self.events = []

    def wants(self, mid) -> bool:
        return mid in self.wanted

    def record(self, event, **fields):
        self.events.append((event, fields))


def test_flow_records_only_for_sampled_messages(harness):
    b = harness.router
    b.recorder = StubRecorder({"m1"})
    p, c = harness.connect(), harness.connect()
    snd = p.sender("orders")
    rcv = c.receiver("orders", credit=10)
    harness.pump()
    p.send(snd, Message(id="m1", body="a"))
    p.send(snd, Message(id="m2", body="b"))
    harness.pump()
    for r in c.received(rcv):
        settle(r.delivery)
    harness.pump()
    kinds = [(e, f["mid"]) for e, f in b.recorder.events]
    assert kinds == [("store", "m1"), ("deliver", "m1"), ("settle", "m1")]
    store = b.recorder.events[0][1]
    assert store["address"] == "orders" and store["size"] > 0
    assert b.recorder.events[2][1]["outcome"] == "accepted"


def test_delivery_count_updates_survive_a_restart(tmp_path):
    b = make_broker(tmp_path, persist=True)
    h = RouterHarness(router=b)
    p, c = h.connect(), h.connect()
    snd = p.sender("orders")
    rcv = c.receiver("orders", credit=10)
    h.pump()
    p.send(snd, Message(body="x", durable=True))
    h.pump()
    [got] = c.received(rcv, clear=True)
    settle(got.delivery, MODIFIED, failed=True)
    h.pump()
    [again] = c.received(rcv, clear=True)
    assert again.message.delivery_count == 1
    b.journal.sync()
    b.close_journal()
    j = Journal(tmp_path / "journal")
    [stored] = j.recover()
    j.close()
    assert stored.delivery_count == 1


def test_redelivery_delay_holds_a_failed_message_back(tmp_path):
    now = [1_000_000]
    b = make_broker(tmp_path, clock=lambda: now[0])
    b.create_queue("slow.q")
    h = RouterHarness(router=b)
    p, c = h.connect(), h.connect()
    snd = p.sender("slow.q")
    rcv = c.receiver("slow.q", credit=10)
    h.pump()
    p.send(snd, body="r")
    h.pump()
    [got] = c.received(rcv, clear=True)
    settle(got.delivery, MODIFIED, failed=True)
    h.pump()
    assert c.received(rcv) == [] and b.next_timer() == now[0] + 500
    now[0] += 500
    b.expire_due()
    h.pump()
    assert [r.body for r in c.received(rcv)] == ["r"]


def test_expiry_delay_applies_to_messages_without_an_expiry(tmp_path):
    now = [5_000]
    b = make_broker(tmp_path, clock=lambda: now[0])
    b.create_queue("short.q")
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender("short.q")
    h.pump()
    p.send(snd, body="e")
    h.pump()
    assert b.queues["short.q"].next_expiry() == 6_000


def test_timers_look_only_at_queues_holding_timed_messages(tmp_path):
    """Every batch asks for the next timer: it must cost the queues with an expiry or a delay, not every
    queue (broker.addressing.AddressModel.timed), and a queue leaves that set once its timed message is gone."""
    now = [5_000]
    b = make_broker(tmp_path, clock=lambda: now[0])
    for i in range(50):
        b.create_queue(f"plain.{i}")
    b.create_queue("short.q")
    h = RouterHarness(router=b)
    p = h.connect()
    plain, short = p.sender("plain.7"), p.sender("short.q")
    h.pump()
    p.send(plain, body="untimed")
    h.pump()
    assert b.addressing.timed == set() and b.next_timer() is None
    p.send(short, Message(body="e", ttl=2.0))
    h.pump()
    assert b.addressing.timed == {b.queues["short.q"]} and b.next_timer() == 7_000
    now[0] = 7_000
    assert b.expire_due() == 1
    assert b.next_timer() is None and b.addressing.timed == set()
    assert b.queues["plain.7"].message_count == 1


def test_broker_connection_links_follow_queues_created_later(tmp_path):
    conns = """<broker-connections>
      <amqp-connection uri="tcp://127.0.0.1:1" name="r" auto-start="false">
        <peer address-match="orders.#"/><sender queue-name="outq"/><receiver address-match="inq"/>
      </amqp-connection></broker-connections>"""
    b = make_broker(tmp_path, connections=conns)
    ctl = b.bridges["r"]
    assert isinstance(ctl, BridgeControl) and ctl.status == "stopped"
    assert b.mgmt_connections() == [{"name": "r", "uri": "tcp://127.0.0.1:1", "status": "stopped",
                                     "links": 0, "autoStart": False}]
    engine = ctl.make_engine("test")
    remote = Peer(server=True)
    pipe = Pipe(engine, remote)
    pump(pipe)
    assert ctl.status == "connected"
    assert sorted(remote.links) == ["r.orders.receiver", "r.orders.sender"]
    src = remote.links["r.orders.receiver"].remote_source
    assert src.address == "orders" and _symbols(src.capabilities) == ["qd.waypoint"]
    b.create_queue("orders.late")
    b.create_queue("outq", "elsewhere")
    b.create_queue("inq")
    pump(pipe)
    assert {"r.orders.late.receiver", "r.orders.late.sender", "r.outq.out", "r.inq.in"} <= set(remote.links)
    assert remote.links["r.outq.out"].remote_target.address == "outq"
    assert remote.links["r.inq.in"].remote_source.address == "inq"
    assert _symbols(remote.links["r.inq.in"].remote_source.capabilities) == []
    assert ctl.link_count() == 6
    b.stop_broker_connection("r")
    assert ctl.wanted is False


def test_bindings_file_rebinds_queues_created_at_run_time(tmp_path):
    b = make_broker(tmp_path, persist=True)
    b.create_queue("audit", "events", routing_type="multicast")
    from broker.addressing import write_bindings

    write_bindings(b.bindings_path(), b.take_bindings())
    b.close_journal()
    b2 = make_broker(tmp_path, persist=True)
    try:
        info = b2.queue_info["audit"]
        assert (info.address, info.routing_type) == ("events", "multicast")
    finally:
        b2.close_journal()


async def test_auto_start_false_waits_for_start_and_stop_closes(tmp_path, nursery):
    """Two brokers over real loopback sockets in one Trio run: the dialling one's connection stays
    stopped until start_broker_connection, connects and attaches its peer links, and stop closes it."""
    import trio

    from wire.driver import serve_listener

    remote = make_broker(tmp_path / "remote")
    listeners = await nursery.start(serve_listener, "127.0.0.1", 0,
                                    lambda r: remote.new_engine(remote.connection_settings(), server=True,
                                                                remote_host=r))
    port = listeners[0].socket.getsockname()[1]
    conns = f"""<broker-connections><amqp-connection uri="tcp://127.0.0.1:{port}" name="up" auto-start="false"
        retry-interval="50"><peer queue-name="orders"/></amqp-connection></broker-connections>"""
    local = make_broker(tmp_path / "local", connections=conns)
    ctl = local.bridges["up"]
    nursery.start_soon(BridgeTask(ctl).run)

    async def until(pred, what):
        with trio.fail_after(10):
            while not pred():
                await trio.sleep(0.01)

    await trio.sleep(0.2)
    assert ctl.status == "stopped" and not remote.connections
    local.start_broker_connection("up")
    await until(lambda: ctl.status == "connected" and ctl.link_count() == 2, "connected")
    await until(lambda: remote.queues["orders"].consumer_count == 1, "the peer sender to attach remotely")
    [row] = local.mgmt_connections()
    assert row["status"] == "connected" and row["links"] == 2
    local.stop_broker_connection("up")
    await until(lambda: ctl.status == "stopped", "stopped")
    await until(lambda: not remote.connections, "the remote side to see the close")
    local.start_broker_connection("up")  # and again
    await until(lambda: ctl.status == "connected", "reconnected")


async def test_failover_uri_is_tried_when_the_first_fails(tmp_path, nursery):
    import trio

    from tests.system.harness import free_port
    from wire.driver import serve_listener

    remote = make_broker(tmp_path / "remote")
    listeners = await nursery.start(serve_listener, "127.0.0.1", 0,
                                    lambda r: remote.new_engine(remote.connection_settings(), server=True,
                                                                remote_host=r))
    port = listeners[0].socket.getsockname()[1]
    dead = free_port()
    conns = f"""<broker-connections><amqp-connection uri="tcp://127.0.0.1:{dead}#tcp://127.0.0.1:{port}"
        name="up" retry-interval="20" reconnect-attempts="3"><peer queue-name="orders"/></amqp-connection>
        </broker-connections>"""
    local = make_broker(tmp_path / "local", connections=conns)
    ctl = local.bridges["up"]
    nursery.start_soon(BridgeTask(ctl).run)
    with trio.fail_after(10):
        while ctl.status != "connected":
            await trio.sleep(0.01)
    assert remote.connections


async def test_reconnect_attempts_give_up_as_failed(tmp_path, nursery):
    import trio

    from tests.system.harness import free_port

    conns = f"""<broker-connections><amqp-connection uri="tcp://127.0.0.1:{free_port()}" name="up"
        retry-interval="10" reconnect-attempts="2"><peer queue-name="orders"/></amqp-connection>
        </broker-connections>"""
    local = make_broker(tmp_path, connections=conns)
    ctl = local.bridges["up"]
    nursery.start_soon(BridgeTask(ctl).run)
    with trio.fail_after(10):
        while ctl.status != "failed":
            await trio.sleep(0.01)
    assert local.mgmt_connections()[0]["status"] == "failed" and ctl.wanted is False


# ---- the sans-IO core: time and durability are inputs (issue 11) ---------------------------------------

CORE_MODULES = ("server", "addressing", "queue", "delivery", "admission", "storage", "timers", "moves",
                "network", "netbridge", "federation", "fedcommand", "diverts",
                "facade", "links", "connections", "limits", "disk")


def test_the_core_modules_import_no_trio():
    """Time and I/O come from broker/runtime.py; the core is plain classes fed events and time."""
    import ast

    root = REPO / "broker"
    offenders = []
    for name in CORE_MODULES:
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            offenders += [f"{name}.py: {n}" for n in names if n == "trio" or n.startswith("trio.")]
    assert offenders == []


def test_expiry_is_driven_by_tick_and_next_deadline(tmp_path):
    now = [1_000_000]
    b = make_broker(tmp_path, clock=lambda: now[0])
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender("orders")
    h.pump()
    assert b.next_deadline() is None
    p.send(snd, Message(body="brief", ttl=2.0))
    p.send(snd, Message(body="stays"))
    h.pump()
    assert b.next_deadline() == now[0] + 2000
    assert b.tick(now[0] + 1999) == 0 and b.queues["orders"].message_count == 2
    assert b.tick(now[0] + 2000) == 1  # no expiry-address configured: dropped and counted
    assert b.queues["orders"].message_count == 1 and b.messages_dropped == 1
    assert b.next_deadline() is None


def test_redelivery_delay_ends_at_the_tick_that_reaches_it(tmp_path):
    now = [1_000_000]
    b = make_broker(tmp_path, clock=lambda: now[0])
    b.create_queue("slow.q")
    h = RouterHarness(router=b)
    p, c = h.connect(), h.connect()
    snd = p.sender("slow.q")
    rcv = c.receiver("slow.q", credit=10)
    h.pump()
    p.send(snd, body="again")
    h.pump()
    [got] = c.received(rcv, clear=True)
    settle(got.delivery, MODIFIED, failed=True)
    h.pump()
    assert b.next_deadline() == now[0] + 500
    b.tick(now[0] + 499)
    h.pump()
    assert c.received(rcv) == []
    b.tick(now[0] + 500)
    h.pump()
    assert [r.body for r in c.received(rcv)] == ["again"]


def test_a_durable_message_is_accepted_when_the_journal_reports_its_record_on_disk(tmp_path):
    from tests.unit.enginepair import outcome

    b = make_broker(tmp_path, persist=True)
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender("orders")
    h.pump()
    first = p.send(snd, Message(body="one", durable=True))
    second = p.send(snd, Message(body="two", durable=True))
    h.pump()
    assert [outcome(d)["state"] for d in (first, second)] == ["none", "none"]  # waits for the disk
    b.journal.sync()
    durable = b.journal.durable_id
    b.durable_up_to(durable - 1)  # the committer's report covers only the first record
    h.pump()
    assert [outcome(d)["state"] for d in (first, second)] == ["accepted", "none"]
    b.durable_up_to(durable)
    h.pump()
    assert [outcome(d)["state"] for d in (first, second)] == ["accepted", "accepted"]
    b.close_journal()


async def test_the_runtime_timer_wakes_for_a_deadline_that_appears_while_it_sleeps(tmp_path, autojump_clock):
    import trio

    from broker.runtime import BrokerRuntime

    b = make_broker(tmp_path, clock=lambda: int(trio.current_time() * 1000))
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender("orders")
    h.pump()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(BrokerRuntime(b).timer_loop)
        await trio.sleep(5)  # asleep with no deadline at all
        p.send(snd, Message(body="brief", ttl=1.0))
        h.pump()
        assert b.queues["orders"].message_count == 1
        await trio.sleep(1.01)
        assert b.queues["orders"].message_count == 0 and b.messages_dropped == 1
        nursery.cancel_scope.cancel()


def test_messages_in_flight_to_a_deleted_queue_are_released(harness):
    """The broker detached the link (and wire no longer routes it to the data path): what the sender had
    already sent, one frame or many, is released so that it may try elsewhere."""
    from tests.unit.enginepair import outcome

    b = harness.router
    b.create_queue("work")
    p = harness.connect()
    snd = p.sender("work")
    harness.pump()
    small = p.send(snd, Message(body="in flight"))
    large = p.send(snd, Message(body=b"x" * 100_000))  # several transfer frames
    b.delete_queue("work")
    harness.pump()
    assert snd.remote_condition is not None and snd.remote_condition.name == "amqp:resource-deleted"
    assert [outcome(d)["state"] for d in (small, large)] == ["released", "released"]
    assert b.messages_arriving() == 0


def test_an_aborted_multi_frame_delivery_leaves_nothing_and_the_link_goes_on(harness):
    """Aborted deliveries are wire's (AMQP 1.0 §2.7.5 aborted): the broker stores nothing of it, holds
    nothing, and the next message on the link is stored as usual."""
    from tests.unit.enginepair import outcome

    b = harness.router
    p = harness.connect()
    snd = p.sender("orders")
    harness.pump()
    d = snd.delivery(p.next_tag())
    snd.send(Message(body=b"a" * 60_000).encode()[:40_000])  # part of it: more frames would follow
    harness.pump()
    assert b.messages_arriving() == 1
    d.abort()
    harness.pump()
    assert b.messages_arriving() == 0 and b.queues["orders"].message_count == 0
    after = p.send(snd, Message(body="next"))
    harness.pump()
    assert outcome(after)["state"] == "accepted" and b.queues["orders"].message_count == 1


def test_a_browser_is_served_without_taking_the_messages(harness):
    """distribution-mode copy (a JMS QueueBrowser) sees the messages and leaves them (broker/browse.py;
    tests/unit/broker/test_browse.py has the details)."""
    b = harness.router
    c = harness.connect()
    snd = c.sender("q")
    harness.pump()
    c.send(snd, body="keep me")
    harness.pump()
    browser = c.receiver("q", name="browser", open=False)
    browser.source.distribution_mode = proton.Terminus.DIST_MODE_COPY
    browser.open()
    browser.flow(5)
    harness.pump()
    assert browser.remote_condition is None
    assert c.bodies(browser) == ["keep me"]
    assert [q["messageCount"] for q in b.mgmt_queues() if q["name"] == "q"] == [1]
