"""Large messages (broker/largemessage.py, broker/largestream.py): streamed into a file of their own as they
arrive, a small reference in the journal and the queue, streamed out of the file to consumers, the file
removed with the last record that refers to it (also across a restart)."""

from __future__ import annotations

import os

import proton
import pytest
from proton import Message

from broker import largestream
from broker.largemessage import (FOOTER_BYTES, LargeMessageStore, file_id_of, is_reference, make_reference,
                                 parse_reference, reference_head)
from broker.moves import ORIG_QUEUE
from tests.unit.broker.fixtures import make_broker
from tests.unit.enginepair import Peer, RouterHarness, outcome, settle
from wire import codec
from wire.header import read_header, set_delivery_count
from wire.msgannotations import read_annotation, set_annotations

BIG = 600_000  # several times amqpMinLargeMessageSize (100 KiB)


def _message(size: int, *, durable: bool = True, **kw) -> Message:
    body = bytes(i % 251 for i in range(size))
    return Message(body=body, durable=durable, **kw)


def _files(tmp_path) -> list[str]:
    d = tmp_path / "large-messages"
    return sorted(os.listdir(d)) if d.exists() else []


def _commit(b) -> None:
    """What the group committer does after a batch: sync, then report what is on disk."""
    b.journal.sync()
    b.durable_up_to(b.journal.durable_id)
    b.on_batch_end()


@pytest.fixture
def harness(tmp_path):
    return RouterHarness(router=make_broker(tmp_path, persist=True))


def _send(h, msg: Message, address: str = "orders"):
    p = h.connect()
    snd = p.sender(address)
    h.pump()
    d = p.send(snd, msg)
    h.pump()
    return p, d


def test_a_reference_is_a_well_formed_message_whose_head_can_be_rewritten():
    head = Message(durable=True, priority=7, id="m1", properties={"k": 1}).encode()
    sections = codec.scan(head)
    assert sections.body_start is None
    ref = make_reference(head, 42, 10_000_000, len(head))
    assert is_reference(ref) and file_id_of(ref) == 42
    assert parse_reference(ref) == (42, 10_000_000, len(head)) and reference_head(ref) == head
    assert read_header(ref).durable and read_header(ref).priority == 7
    # what redelivery and dead-lettering do to the head keeps the footer (and so the reference) intact
    counted = set_delivery_count(ref, 3)
    assert is_reference(counted) and read_header(counted).delivery_count == 3
    annotated = set_annotations(ref, {ORIG_QUEUE: "orders"})
    assert is_reference(annotated) and read_annotation(annotated, ORIG_QUEUE) == "orders"
    assert parse_reference(annotated) == (42, 10_000_000, len(head))
    assert not is_reference(head) and file_id_of(Message(body=b"x" * 100).encode()) is None
    assert len(ref) == len(head) + FOOTER_BYTES


def test_a_large_durable_message_goes_to_a_file_and_the_journal_keeps_a_reference(harness, tmp_path):
    b = harness.router
    msg = _message(BIG, id="big-1")
    p, d = _send(harness, msg)
    assert len(_files(tmp_path)) == 1
    assert os.path.getsize(tmp_path / "large-messages" / _files(tmp_path)[0]) == len(msg.encode())
    assert outcome(d) is None or outcome(d)["state"] != "accepted"  # accepted once the record is on disk
    _commit(b)
    harness.pump()
    assert outcome(d)["state"] == "accepted"
    assert b.journal.stats.bytes_on_disk < 10_000  # a reference, not the message
    assert b.queues["orders"].size_bytes == len(msg.encode())  # the limits count the whole message
    [qm] = b.queues["orders"].ready()
    assert len(qm.payload) < 1000  # what is in memory is the reference
    c = harness.connect()
    r = c.receiver("orders", credit=5)
    harness.pump()
    got = c.received(r)
    assert len(got) == 1
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body and back.id == "big-1" and back.durable
    assert b.delivery.large.streamed_in == 1 and b.delivery.large.streamed_out == 1
    settle(got[0].delivery, proton.Delivery.ACCEPTED)
    harness.pump()
    assert _files(tmp_path) == []  # the last record referring to it is acknowledged


def test_a_small_or_non_durable_message_is_not_a_large_message(harness, tmp_path):
    b = harness.router
    _send(harness, _message(50_000))
    _send(harness, _message(BIG, durable=False))
    assert _files(tmp_path) == [] and b.queues["orders"].message_count == 2
    assert b.delivery.large.streamed_in == 0


def test_the_threshold_is_the_acceptor_parameter(tmp_path):
    b = make_broker(tmp_path, persist=True)
    h = RouterHarness(router=b)
    p = h.connect()
    p.router_engine.app.min_large_message_size = -1  # amqpMinLargeMessageSize=-1: never
    snd = p.sender("orders")
    h.pump()
    p.send(snd, _message(BIG))
    h.pump()
    assert _files(tmp_path) == [] and b.queues["orders"].message_count == 1
    p.router_engine.app.min_large_message_size = 1000
    p.send(snd, _message(5000))
    h.pump()
    assert len(_files(tmp_path)) == 1


def test_a_large_message_is_written_as_it_arrives_not_held(harness, tmp_path):
    b = harness.router
    p = harness.connect()
    snd = p.sender("orders")
    harness.pump()
    data = _message(3_000_000).encode()
    dl = snd.delivery(p.next_tag())
    held = []
    for i in range(0, len(data), 200_000):
        snd.send(data[i:i + 200_000])
        harness.pump()
        held.append(p.router_engine.assembler.total)
        if i + 200_000 < len(data):
            assert b.messages_arriving() == 1
    snd.advance()
    harness.pump()
    assert max(held) == 0  # wire keeps nothing of a streamed delivery
    assert b.queues["orders"].message_count == 1 and len(_files(tmp_path)) == 1
    assert dl is not None


def test_an_aborted_large_message_leaves_no_file(harness, tmp_path):
    b = harness.router
    p = harness.connect()
    snd = p.sender("orders")
    harness.pump()
    data = _message(BIG).encode()
    d = snd.delivery(p.next_tag())
    snd.send(data[:300_000])
    harness.pump()
    assert [f[-8:] for f in os.listdir(tmp_path / "large-messages")] == [".msg.tmp"]
    d.abort()
    harness.pump()
    assert _files(tmp_path) == [] and b.queues["orders"].message_count == 0
    after = p.send(snd, Message(body="next", durable=True))
    harness.pump()
    _commit(b)
    harness.pump()
    assert outcome(after)["state"] == "accepted"


def test_a_producer_leaving_mid_message_leaves_no_file(harness, tmp_path):
    p = harness.connect()
    snd = p.sender("orders")
    harness.pump()
    snd.delivery(p.next_tag())
    snd.send(_message(BIG).encode()[:300_000])
    harness.pump()
    harness.drop(p)
    assert _files(tmp_path) == []


def test_restart_recovers_the_reference_and_removes_orphans(tmp_path):
    b = make_broker(tmp_path, persist=True)
    h = RouterHarness(router=b)
    msg = _message(BIG, id="survivor")
    _send(h, msg)
    _commit(b)
    b.close_journal()
    (tmp_path / "large-messages" / "77.msg").write_bytes(b"left by a crash")
    (tmp_path / "large-messages" / "78.msg.tmp").write_bytes(b"half written")
    b2 = make_broker(tmp_path, persist=True)
    assert len(_files(tmp_path)) == 1
    h2 = RouterHarness(router=b2)
    c = h2.connect()
    r = c.receiver("orders", credit=5)
    h2.pump()
    got = c.received(r)
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body and back.id == "survivor"
    settle(got[0].delivery, proton.Delivery.ACCEPTED)
    h2.pump()
    _commit(b2)
    b2.close_journal()
    assert _files(tmp_path) == []
    b3 = make_broker(tmp_path, persist=True)
    assert b3.queues["orders"].message_count == 0
    # new files do not reuse the number of one that went
    assert b3.storage.large.next_id > b2.storage.large.next_id


def test_a_reference_whose_file_is_missing_is_dropped_at_start(tmp_path):
    b = make_broker(tmp_path, persist=True)
    _send(RouterHarness(router=b), _message(BIG))
    _commit(b)
    b.close_journal()
    os.unlink(tmp_path / "large-messages" / _files(tmp_path)[0])
    b2 = make_broker(tmp_path, persist=True)
    assert b2.queues["orders"].message_count == 0


def test_rejected_large_message_is_dead_lettered_as_a_reference(harness, tmp_path):
    b = harness.router
    msg = _message(BIG, id="bad")
    _send(harness, msg)
    _commit(b)
    c = harness.connect()
    r = c.receiver("orders", credit=1)
    harness.pump()
    got = c.received(r, clear=True)
    settle(got[0].delivery, proton.Delivery.REJECTED)
    harness.pump()
    assert b.queues["DLQ"].message_count == 1 and len(_files(tmp_path)) == 1
    _commit(b)
    r2 = c.receiver("DLQ", credit=1)
    harness.pump()
    got = c.received(r2)
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body and back.annotations[ORIG_QUEUE] == "orders"
    settle(got[0].delivery, proton.Delivery.ACCEPTED)
    harness.pump()
    assert _files(tmp_path) == []


def test_released_large_message_is_redelivered_with_its_count(harness, tmp_path):
    b = harness.router
    msg = _message(BIG)
    _send(harness, msg)
    _commit(b)
    c = harness.connect()
    r = c.receiver("orders", credit=1)
    harness.pump()
    got = c.received(r, clear=True)
    d = got[0].delivery
    d.update(proton.Delivery.MODIFIED)
    d.local.failed = True
    d.settle()
    harness.pump()
    r.flow(1)
    harness.pump()
    got = c.received(r)
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body and back.delivery_count == 1
    assert len(_files(tmp_path)) == 1


def test_multicast_copies_share_one_file(harness, tmp_path):
    b = harness.router
    subs = []
    for name in ("s1", "s2"):
        peer = Peer(container=name)
        harness.connect(peer)
        rcv = peer.session.receiver(name)
        rcv.source.address = "news"
        rcv.source.durability = proton.Terminus.DELIVERIES
        rcv.source.expiry_policy = proton.Terminus.EXPIRE_NEVER
        rcv.target.address = name
        rcv.open()
        peer._track(rcv)
        subs.append((peer, rcv))
    harness.pump()
    msg = _message(BIG)
    _send(harness, msg, "news")
    _commit(b)
    assert len(_files(tmp_path)) == 1
    for i, (peer, rcv) in enumerate(subs):
        rcv.flow(1)
        harness.pump()
        got = peer.received(rcv)
        back = Message()
        back.decode(got[0].data)
        assert back.body == msg.body
        settle(got[0].delivery, proton.Delivery.ACCEPTED)
        harness.pump()
        assert len(_files(tmp_path)) == (0 if i == 1 else 1)


def test_a_non_durable_subscription_gets_the_message_whole(harness, tmp_path):
    b = harness.router
    c = harness.connect()
    r = c.receiver("news", credit=5)  # a non-durable subscription: no journal record, no file for it
    harness.pump()
    msg = _message(BIG)
    _send(harness, msg, "news")
    assert _files(tmp_path) == []
    got = c.received(r)
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body


def _stuck_consumer(harness, credit: int = 5):
    """A consumer that stops reading once attached: the broker's output to it stays queued."""
    c = harness.connect()
    r = c.receiver("orders", credit=credit)
    c.paused = True  # enginepair.Pipe carries nothing to a paused side (its socket is not read)
    harness.pump()
    return c, r


def test_the_file_is_read_only_while_the_consumer_output_is_below_the_limit(harness):
    b = harness.router
    msg = _message(4_000_000)
    _send(harness, msg)
    _send(harness, Message(body="small behind it", durable=True))
    _commit(b)
    c, r = _stuck_consumer(harness)
    engine = c.router_engine
    s = b.delivery.large.sending[engine][0]
    assert engine.output_blocked and s.offset < s.end
    assert largestream.OUTPUT_HIGH <= engine.out_pending < largestream.OUTPUT_HIGH + largestream.SEND_CHUNK + 1000
    assert len(s.bl.backlog) == 1  # the small one waits behind the large one on the link
    c.paused = False
    harness.pump()
    got = c.received(r)
    assert len(got) == 2
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body
    back.decode(got[1].data)
    assert back.body == "small behind it"
    assert engine not in b.delivery.large.sending and not engine.output_blocked


def test_a_consumer_leaving_mid_message_gets_it_aborted_and_another_gets_it_whole(harness, tmp_path):
    b = harness.router
    msg = _message(4_000_000)
    _send(harness, msg)
    _commit(b)
    c, _r = _stuck_consumer(harness)
    assert b.delivery.large.sending
    harness.drop(c)
    assert not b.delivery.large.sending and b.delivery.large.aborted_out == 1
    assert b.queues["orders"].message_count == 1 and len(_files(tmp_path)) == 1
    c2 = harness.connect()
    r2 = c2.receiver("orders", credit=1)
    harness.pump()
    got = c2.received(r2)
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body and back.delivery_count == 1


def test_a_large_message_over_the_disk_headroom_is_refused_while_it_arrives(harness, tmp_path):
    b = harness.router
    b.storage.disk_headroom = lambda: 1_000_000  # bytes left below max-disk-usage
    p = harness.connect()
    snd = p.sender("orders")
    harness.pump()
    snd.delivery(p.next_tag())
    data = _message(3_000_000).encode()
    for i in range(0, 2_000_000, 200_000):
        snd.send(data[i:i + 200_000])
        harness.pump()
    assert snd.remote_condition is not None and snd.remote_condition.name == "amqp:link:message-size-exceeded"
    assert _files(tmp_path) == [] and b.queues["orders"].message_count == 0


PAGING_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <persistence-enabled>true</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="audit"><anycast><queue name="audit"/></anycast></address>
  </addresses>
  <diverts>
    <divert name="to-audit"><address>orders</address><forwarding-address>audit</forwarding-address></divert>
  </diverts>
  <address-settings>
    <address-setting match="orders">
      <max-size-bytes>1M</max-size-bytes>
      <address-full-policy>PAGE</address-full-policy>
    </address-setting>
  </address-settings>
</core></configuration>
"""


async def test_large_messages_page_and_divert_as_references(tmp_path, nursery):
    import trio

    from broker.config import parse_broker_config
    from broker.server import Broker

    b = Broker(parse_broker_config(PAGING_XML.format(journal=tmp_path / "journal")))
    b.open_journal()
    await nursery.start(b.pager.run)
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender("orders")
    h.pump()
    sent = [Message(id=i, body=b"s" * 3000, durable=True) for i in range(10)]
    sent += [_message(BIG + i, id=10 + i) for i in range(3)]
    ds = [p.send(snd, m) for m in sent]
    h.pump()
    for _ in range(200):
        _commit(b)
        h.pump()
        if all(outcome(d) and outcome(d)["state"] == "accepted" for d in ds):
            break
        await trio.sleep(0.01)
    assert b.pager.stats("orders")[0] >= 2  # large ones are paged (as references): they count their full size
    assert b.queues["audit"].message_count == 13  # the divert copied every one
    assert len(_files(tmp_path)) == 3  # one file per large message, shared by the queue and its copy
    for queue in ("orders", "audit"):
        c = h.connect()
        r = c.receiver(queue, credit=20)
        got = []
        for _ in range(500):
            _commit(b)
            h.pump()
            for rec in c.received(r, clear=True):
                m = Message()
                m.decode(rec.data)
                got.append(m)
                settle(rec.delivery, proton.Delivery.ACCEPTED)
            if len(got) == 13:
                break
            await trio.sleep(0.01)
        assert [m.id for m in got] == list(range(13))
        assert [m.body for m in got] == [m.body for m in sent]
        h.pump()  # the last settlements
    _commit(b)
    assert b.storage.large.records == {}
    assert _files(tmp_path) == []


def test_a_link_another_part_owns_gets_its_messages_whole(harness, tmp_path):
    """Federation receivers and mirror targets own their links and delegate the rest to the delivery path
    (their __getattr__): a large message on such a link must reach their on_message whole, not be
    streamed past them into a queue."""
    b = harness.router
    p = harness.connect()
    snd = p.sender("orders")
    harness.pump()
    [bl] = [x for x in p.router_engine.app.links.values() if x.incoming]
    seen = []

    class Wrapper:
        def __init__(self, delivery):
            self.delivery = delivery

        def on_message(self, engine, link, d, payload):
            seen.append(len(payload))
            self.delivery.store(link, d, payload)

        def __getattr__(self, name):
            return getattr(self.delivery, name)

    bl.owner = Wrapper(b.delivery)
    p.send(snd, _message(BIG))
    harness.pump()
    assert seen and seen[0] > BIG and _files(tmp_path) == []
    assert b.queues["orders"].message_count == 1


def test_a_message_whose_file_went_is_dropped_and_the_next_is_delivered(harness, tmp_path, caplog):
    b = harness.router
    _send(harness, _message(BIG))
    _send(harness, Message(body="after", durable=True))
    _commit(b)
    os.unlink(tmp_path / "large-messages" / _files(tmp_path)[0])  # removed behind the broker's back
    c = harness.connect()
    r = c.receiver("orders", credit=5)
    harness.pump()
    got = c.received(r)
    assert len(got) == 1
    back = Message()
    back.decode(got[0].data)
    assert back.body == "after"
    assert b.queues["orders"].message_count == 1  # "after", not yet settled
    assert "cannot be read" in caplog.text


def test_a_drain_is_answered_after_the_large_message_it_waits_behind(harness):
    b = harness.router
    msg = _message(3_000_000)
    _send(harness, msg)
    _commit(b)
    c, r = _stuck_consumer(harness, credit=0)
    r.drain(5)  # "send what you have, then use up my credit"
    harness.pump()
    [bl] = [x for x in c.router_engine.app.links.values() if not x.incoming]
    assert bl.streaming is not None and bl.drain_pending  # the queue is empty, the link is still sending
    c.paused = False
    harness.pump()
    assert len(c.received(r)) == 1 and r.credit == 0 and not r.draining()


def test_a_presettled_consumer_gets_a_large_message_settled_at_its_end(harness, tmp_path):
    b = harness.router
    msg = _message(BIG)
    _send(harness, msg)
    _commit(b)
    c = harness.connect()
    r = c.receiver("orders", credit=5, settled=True)
    harness.pump()
    got = c.received(r)
    back = Message()
    back.decode(got[0].data)
    assert back.body == msg.body
    _commit(b)
    assert b.queues["orders"].message_count == 0 and _files(tmp_path) == []


MIRROR_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{name}</name>
  <persistence-enabled>true</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
  {connections}
</core></configuration>
"""


def test_a_mirror_gets_a_large_message_whole(tmp_path):
    """A <mirror> sends a large message whole inside its event (events are not streamed); the replica,
    whose mirror target assembles what it receives, stores it whole."""
    from broker.config import parse_broker_config
    from broker.server import Broker
    from tests.unit.enginepair import Pipe, pump

    def make(name, connections=""):
        b = Broker(parse_broker_config(MIRROR_XML.format(name=name, journal=tmp_path / name / "journal",
                                                         connections=connections)))
        b.open_journal()
        return b

    a = make("a", '<broker-connections><amqp-connection uri="tcp://127.0.0.1:1" name="m" auto-start="false">'
                  '<mirror/></amqp-connection></broker-connections>')
    replica = make("b")
    link = Pipe(a.bridges["m"].make_engine("test"), replica.new_engine(replica.connection_settings(), server=True))
    peer = Peer()
    pipe = Pipe(peer, a.new_engine(a.connection_settings(), server=True))
    pipes = [link, pipe]

    def settle_all():
        for _ in range(8):
            pump(*pipes)
            for b in (a, replica):
                _commit(b)
        pump(*pipes)

    settle_all()
    snd = peer.sender("orders")
    pump(*pipes)
    msg = _message(BIG, id="mirrored")
    peer.send(snd, msg)
    settle_all()
    assert len(os.listdir(tmp_path / "a" / "large-messages")) == 1
    [copy] = replica.queues["orders"].ready()
    back = Message()
    back.decode(copy.payload)
    assert back.body == msg.body and back.id == "mirrored"
    a.close_journal()
    replica.close_journal()


def test_an_unusable_large_messages_directory_is_reported_at_its_element(tmp_path):
    from broker.config import load_broker_config
    from broker.daemon import storage_failure

    conf = tmp_path / "broker.xml"
    conf.write_text(MIRROR_XML.format(name="x", journal=tmp_path / "journal", connections="").replace(
        "</core>", f"  <large-messages-directory>{tmp_path / 'lm'}</large-messages-directory>\n</core>"))
    cfg = load_broker_config(str(conf))
    assert cfg.large_messages_path == str(tmp_path / "lm")
    err = storage_failure(cfg, PermissionError(13, "Permission denied", str(tmp_path / "lm")))
    line = 1 + conf.read_text().splitlines().index(f"  <large-messages-directory>{tmp_path / 'lm'}</large-messages-directory>")
    assert "<large-messages-directory>" in str(err) and f"broker.xml:{line}:" in str(err)


async def test_recovery_counts_a_large_message_at_its_whole_size(tmp_path, nursery):
    import trio

    from broker.config import parse_broker_config
    from broker.server import Broker

    def make():
        b = Broker(parse_broker_config(PAGING_XML.format(journal=tmp_path / "journal")))
        b.open_journal()
        return b

    b = make()
    await nursery.start(b.pager.run)
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender("orders")
    h.pump()
    ds = [p.send(snd, _message(BIG + i)) for i in range(3)]
    for _ in range(200):
        h.pump()
        _commit(b)
        if all(outcome(d) and outcome(d)["state"] == "accepted" for d in ds):
            break
        await trio.sleep(0.01)
    b.close_journal()
    b2 = make()
    q = b2.queues["orders"]
    assert q.message_count == 1 and b2.pager.stats("orders")[0] == 2  # 1 MB max-size-bytes: one fits
    assert q.size_bytes <= 1024 * 1024
    b2.close_journal()
