"""broker/mirror.py and broker/mirrortarget.py in process: a source broker's events reach a replica over
engines pumped in memory (no sockets), with the journals synced by hand."""

from __future__ import annotations

import proton
import pytest

from broker.config import parse_broker_config
from broker.mirror import SNF_PREFIX, address_filter, filter_allows
from broker.mirrorcodec import MR_ID, identity_of, read_event
from broker.server import Broker
from tests.unit.enginepair import ACCEPTED, Peer, Pipe, pump, settle
from wire.msgannotations import read_delivery_annotations

XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <persistence-enabled>{persist}</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="news"><multicast/></address>
  </addresses>
  {connections}
</core></configuration>
"""

MIRROR = """<broker-connections><amqp-connection uri="tcp://127.0.0.1:1" name="{name}" auto-start="false">
  <mirror {attrs}/></amqp-connection></broker-connections>"""


def broker(tmp_path, name: str, *, mirror: str | None = None, attrs: str = "", persist: bool = True) -> Broker:
    conns = MIRROR.format(name=mirror, attrs=attrs) if mirror else ""
    text = XML.format(name=name, persist=str(persist).lower(), journal=tmp_path / name, connections=conns)
    b = Broker(parse_broker_config(text))
    b.open_journal()
    return b


def sync(*brokers: Broker) -> None:
    """What the group committer does: write, then settle what waited for the disk."""
    for b in brokers:
        if b.journal is not None:
            b.journal.sync()
            b.durable_up_to(b.journal.durable_id)
        b.on_batch_end()


def settle_all(pipes, *brokers) -> None:
    for _ in range(6):
        pump(*pipes)
        sync(*brokers)
    pump(*pipes)


def connect(source: Broker, name: str, replica: Broker) -> Pipe:
    engine = source.bridges[name].make_engine("test")
    return Pipe(engine, replica.new_engine(replica.connection_settings(), server=True))


def client(b: Broker) -> tuple[Peer, Pipe]:
    peer = Peer()
    return peer, Pipe(peer, b.new_engine(b.connection_settings(), server=True))


def bodies(b: Broker, queue: str) -> list:
    out = []
    for m in b.queues[queue].ready():
        msg = proton.Message()
        msg.decode(m.payload)
        out.append(msg.body)
    return out


def produce(b: Broker, address: str, n: int, *, durable: bool = True, start: int = 0):
    peer, pipe = client(b)
    snd = peer.sender(address)
    pump(pipe)
    for i in range(start, start + n):
        peer.send(snd, proton.Message(body=f"m{i}", durable=durable))
    return peer, pipe


@pytest.fixture
def pair(tmp_path):
    a = broker(tmp_path, "a", mirror="m")
    b = broker(tmp_path, "b")
    link = connect(a, "m", b)
    settle_all([link], a, b)
    yield a, b, link
    a.close_journal()
    b.close_journal()


def test_address_filter_rules():
    flt = address_filter("orders,news.,!orders.secret")
    assert flt == (("orders", "news."), ("orders.secret",))
    assert filter_allows(flt, "orders.eu") and not filter_allows(flt, "orders.secret.x")
    assert not filter_allows(flt, "other") and filter_allows(address_filter(None), "anything")
    assert filter_allows(address_filter("!x"), "y") and not filter_allows(address_filter("!x"), "x1")
    with pytest.raises(ValueError):
        address_filter("a,,b")


def test_messages_and_acks_reach_the_replica_in_order(pair):
    a, b, link = pair
    assert b.mirror.target.source_id == a.mirror.broker_id
    peer, pipe = produce(a, "orders", 10)
    settle_all([link, pipe], a, b)
    assert bodies(b, "orders") == [f"m{i}" for i in range(10)]
    # a consumer on the source takes the first four: the replica drops them
    cons, cpipe = client(a)
    rx = cons.receiver("orders", credit=4)
    settle_all([link, pipe, cpipe], a, b)
    for got in cons.received(rx):
        settle(got.delivery, ACCEPTED)
    settle_all([link, pipe, cpipe], a, b)
    assert bodies(b, "orders") == [f"m{i}" for i in range(4, 10)]
    [row] = a.mirror.mgmt_sources()
    assert row["queuedEvents"] == 0 and row["messageEvents"] == 10 and row["ackEvents"] == 4
    assert row["remoteBrokerId"] == b.mirror.broker_id and row["eventsSent"] == 14
    [trow] = b.mirror.mgmt_targets()
    assert (trow["messagesApplied"], trow["acksApplied"], trow["connected"]) == (10, 4, True)


def test_message_events_carry_their_identity_and_no_backfill(tmp_path):
    a = broker(tmp_path, "a2", mirror="m")
    b = broker(tmp_path, "b2")
    peer, pipe = produce(a, "orders", 3)   # stored before the replica was ever connected: captured all the same
    settle_all([pipe], a)
    q = a.queues[SNF_PREFIX + "m"]
    events = [read_event(m.payload) for m in q.ready()]
    assert [e[0] for e in events] == [None, None, None]
    assert [e[1][MR_ID] for e in events] == [f"r{m.record_id}" for m in a.queues["orders"].ready()]
    a.close_journal()
    # a restarted source keeps the events (durable store-and-forward queue) but sends no backfill
    a = broker(tmp_path, "a2", mirror="m")
    assert a.queues[SNF_PREFIX + "m"].message_count == 3
    a.queues["orders"]  # the 3 messages are there; only the 3 events go
    link = connect(a, "m", b)
    settle_all([link], a, b)
    assert bodies(b, "orders") == ["m0", "m1", "m2"]
    a.close_journal()
    b.close_journal()


def test_queue_creation_and_removal_are_mirrored(pair):
    a, b, link = pair
    a.create_queue("audit", "events", routing_type="multicast")
    settle_all([link], a, b)
    assert b.queue_info["audit"].address == "events" and b.queue_info["audit"].routing_type == "multicast"
    a.delete_queue("audit")
    settle_all([link], a, b)
    assert "audit" not in b.queues


def test_events_wait_while_the_connection_is_down(pair):
    a, b, link = pair
    link.cut()
    peer, pipe = produce(a, "orders", 5)
    settle_all([pipe], a)
    a.bridges["m"].engine = None
    [row] = a.mirror.mgmt_sources()
    assert row["queuedEvents"] == 5
    a.on_connection_close(link.a.engine)
    link2 = connect(a, "m", b)
    settle_all([link2], a, b)
    assert bodies(b, "orders") == [f"m{i}" for i in range(5)]


def test_a_resent_event_is_skipped_and_a_replica_restart_finds_its_messages(tmp_path):
    a = broker(tmp_path, "a3", mirror="m")
    b = broker(tmp_path, "b3")
    link = connect(a, "m", b)
    settle_all([link], a, b)
    peer, pipe = produce(a, "orders", 3)
    pump(pipe)
    sync(a)
    pump(link)       # the events arrive at the replica, which stores them ...
    b.journal.sync()  # ... on disk, but its answers never reach the source (crash)
    b.close_journal()
    b = broker(tmp_path, "b3")
    assert len(b.mirror.index) == 3
    a.on_connection_close(link.a.engine)
    link2 = connect(a, "m", b)
    settle_all([link2, pipe], a, b)
    assert bodies(b, "orders") == ["m0", "m1", "m2"]
    assert b.mirror.mgmt_targets()[0]["duplicatesSkipped"] == 3
    assert a.queues[SNF_PREFIX + "m"].message_count == 0
    a.close_journal()
    b.close_journal()


def test_a_replica_refuses_itself_and_a_second_source(tmp_path):
    a = broker(tmp_path, "a4", mirror="m")
    b = broker(tmp_path, "b4")
    c = broker(tmp_path, "c4", mirror="m")
    link = connect(a, "m", b)
    settle_all([link], a, b)
    link2 = connect(c, "m", b)
    settle_all([link2], c, b)
    [row] = c.mirror.mgmt_sources()
    assert "refuses a second mirror source" in row["lastError"], row
    self_link = connect(c, "m", c)
    settle_all([self_link], c)
    [row] = c.mirror.mgmt_sources()
    assert "refuses to mirror to itself" in row["lastError"], row
    for x in (a, b, c):
        x.close_journal()


def test_dual_mirror_sends_nothing_back(tmp_path):
    a = broker(tmp_path, "a5", mirror="to-b")
    b = broker(tmp_path, "b5", mirror="to-a")
    ab = connect(a, "to-b", b)
    ba = connect(b, "to-a", a)
    settle_all([ab, ba], a, b)
    peer, pipe = produce(a, "orders", 4)
    settle_all([ab, ba, pipe], a, b)
    assert bodies(b, "orders") == ["m0", "m1", "m2", "m3"]
    assert bodies(a, "orders") == ["m0", "m1", "m2", "m3"]
    assert b.mirror.mgmt_sources()[0]["messageEvents"] == 0   # nothing captured to go back to a
    # consumed on b: the acknowledgements reach a
    cons, cpipe = client(b)
    rx = cons.receiver("orders", credit=2)
    settle_all([ab, ba, pipe, cpipe], a, b)
    for got in cons.received(rx):
        settle(got.delivery, ACCEPTED)
    settle_all([ab, ba, pipe, cpipe], a, b)
    assert bodies(a, "orders") == ["m2", "m3"] and bodies(b, "orders") == ["m2", "m3"]
    assert a.mirror.mgmt_sources()[0]["ackEvents"] == 0   # a applied b's acks: not sent back to b
    a.close_journal()
    b.close_journal()


def test_identity_of_a_stored_copy():
    payload = proton.Message(body="x").encode()
    assert identity_of(payload, "src", "me") is None
    from broker.mirrorcodec import message_event
    ev = message_event(payload, "r7", "q", "q", "")
    assert identity_of(ev, "src", "me") == ("src", "r7")
    assert identity_of(message_event(payload, "r7", "q", "q", "me"), "src", "me") == ("", "r7")
    assert read_delivery_annotations(ev, (MR_ID,)) == {MR_ID: "r7"}


def test_no_backfill_of_messages_stored_before_the_mirror_was_configured(tmp_path):
    plain = broker(tmp_path, "a6")
    peer, pipe = produce(plain, "orders", 2)
    settle_all([pipe], plain)
    plain.close_journal()
    a = broker(tmp_path, "a6", mirror="m")
    b = broker(tmp_path, "b6")
    assert bodies(a, "orders") == ["m0", "m1"]
    peer, pipe = produce(a, "orders", 1, start=2)
    link = connect(a, "m", b)
    settle_all([link, pipe], a, b)
    assert bodies(b, "orders") == ["m2"]
    # the old ones' acknowledgements go too, and the replica, which never had them, skips them
    cons, cpipe = client(a)
    rx = cons.receiver("orders", credit=3)
    settle_all([link, pipe, cpipe], a, b)
    for got in cons.received(rx):
        settle(got.delivery, ACCEPTED)
    settle_all([link, pipe, cpipe], a, b)
    assert bodies(b, "orders") == [] and b.mirror.mgmt_targets()[0]["acksUnmatched"] == 2
    a.close_journal()
    b.close_journal()


def test_an_event_goes_to_the_replica_only_once_its_record_is_on_disk(pair):
    """Were it sent before, a crash of the source could leave the replica with a message the source lost
    (and a restarted source reuses the lost record ids)."""
    a, b, link = pair
    peer, pipe = produce(a, "orders", 3)
    for _ in range(5):
        pump(pipe, link)
        b.on_batch_end()
        a.on_batch_end()
    assert "orders" not in b.queues or bodies(b, "orders") == []
    assert a.mirror.mgmt_sources()[0]["queuedEvents"] == 3
    settle_all([link, pipe], a, b)
    assert bodies(b, "orders") == ["m0", "m1", "m2"]


def test_source_mirror_address_names_the_durable_store_and_forward_queue_and_the_target(tmp_path):
    a = broker(tmp_path, "a7", mirror="m", attrs='source-mirror-address="dr.events"')
    b = broker(tmp_path, "b7")
    assert SNF_PREFIX + "m" not in a.queues and a.queue_info["dr.events"].durable
    peer, pipe = produce(a, "orders", 2)
    settle_all([pipe], a)
    a.close_journal()
    a = broker(tmp_path, "a7", mirror="m", attrs='source-mirror-address="dr.events"')
    assert a.queues["dr.events"].message_count == 2          # kept across the restart
    link = connect(a, "m", b)
    settle_all([link], a, b)
    assert bodies(b, "orders") == ["m0", "m1"] and b.mirror.mgmt_targets()[0]["address"] == "dr.events"
    a.close_journal()
    b.close_journal()
