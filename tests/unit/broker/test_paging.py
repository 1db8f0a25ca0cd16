"""Paging (issue 10: address-full-policy PAGE was refused at start-up): the spool's bookkeeping without I/O,
its entry format, and a real Broker in memory (proton peers, a real journal and page files in tmp_path,
the pager's Trio task running) that pages beyond max-size-bytes / global-max-size and reads back in order,
across a restart for durable messages."""

from __future__ import annotations

import os

import pytest
import trio
from proton import Message

from broker.config import parse_broker_config
from broker.paging import (
    FLUSH_BYTES, KIND_BODY, KIND_JOURNAL, NO_EXPIRY, PagedMessage, PageSpool, decode_entries,
)
from broker.server import Broker
from tests.unit.enginepair import REJECTED, RouterHarness, outcome, settle

KB = 1024
BODY = b"p" * 1000


# ---- the spool, sans I/O ------------------------------------------------------------------------------

def entry(i: int, size: int = 100, kind: int = KIND_BODY) -> PagedMessage:
    payload = bytes([i % 256]) * size
    return PagedMessage(kind, i if kind == KIND_JOURNAL else 0, 1000 + i, NO_EXPIRY, 0, size, payload)


def test_entries_round_trip_and_damage_is_detected():
    items = [entry(1), entry(2, 5000), entry(3, kind=KIND_JOURNAL)]
    data = b"".join(e.encode() for e in items)
    got, used = decode_entries(data + data[:10])  # a partial entry at the end is left for the next read
    assert used == len(data)
    assert [(e.kind, e.record_id, e.enqueued_at, e.size) for e in got] == \
        [(e.kind, e.record_id, e.enqueued_at, e.size) for e in items]
    assert got[0].payload == items[0].payload and got[2].payload is None  # journal bodies stay out
    assert len(items[2].encode()) < 50
    damaged = bytearray(data)
    damaged[20] ^= 1
    with pytest.raises(ValueError, match="checksum"):
        decode_entries(bytes(damaged))


def test_spool_keeps_fifo_across_memory_disk_and_read_ahead(tmp_path):
    spool = PageSpool("q", str(tmp_path), page_size=64 * KB)
    n = 0
    for _ in range(3):
        while spool.tail_bytes < FLUSH_BYTES:
            spool.append(entry(n, 1000))
            n += 1
        path, data, new = spool.begin_flush()
        assert spool.peek() is None  # the oldest entries are being written: wait for them
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "ab") as f:
            f.write(data)
        spool.finish_flush(path, data, new)
    spool.append(entry(n, 1000))  # a tail behind what is on disk
    n += 1
    assert spool.pages == 3 and len(spool) == n
    assert spool.peek() is None and not spool.read_due()  # nothing is read back until its queue has room
    got = []
    while len(spool):
        spool.wanted = True
        if spool.read_due():
            path, offset, limit = spool.begin_read()
            with open(path, "rb") as f:
                f.seek(offset)
                entries, used = decode_entries(f.read(limit))
            done = spool.finish_read(entries, used)
            if done is not None:
                os.unlink(done)
        while spool.peek() is not None:
            got.append(spool.pop().enqueued_at - 1000)
    assert got == list(range(n))
    assert spool.pages == 0 and not os.listdir(tmp_path)


# ---- a broker in memory ---------------------------------------------------------------------------------

XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>pager</name>
  <persistence-enabled>{persist}</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  {core}
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="other"><anycast><queue name="other"/></anycast></address>
    <address name="news"><multicast/></address>
  </addresses>
  <address-settings>
    <address-setting match="#"><address-full-policy>{catch_all}</address-full-policy></address-setting>
    <address-setting match="orders">
      <max-size-bytes>{limit}</max-size-bytes>
      <address-full-policy>PAGE</address-full-policy>
      <page-size-bytes>64K</page-size-bytes>
    </address-setting>
  </address-settings>
</core></configuration>
"""


def make(tmp_path, *, limit="10K", core="", catch_all="FAIL", persist=True) -> tuple[Broker, RouterHarness]:
    text = XML.format(limit=limit, core=core, catch_all=catch_all, persist=str(persist).lower(),
                      journal=tmp_path / "journal")
    broker = Broker(parse_broker_config(text))
    broker.open_journal()
    return broker, RouterHarness(router=broker)


async def settle_io(b: Broker, h: RouterHarness, until=lambda: True, timeout: float = 10) -> None:
    """Pump the in-memory connections and sync the journal until ``until()`` holds and the pager is idle."""
    with trio.fail_after(timeout):
        while True:
            h.pump()
            if b.journal is not None and b.journal.pending:
                b.journal.sync()
                b.durable_up_to(b.journal.durable_id)  # what the group committer reports after a sync
            await trio.sleep(0.005)
            h.pump()
            if until() and not any(s.busy for s in b.pager.spools.values()):
                return


def paged(b: Broker, queue: str = "orders") -> int:
    return b.pager.stats(queue)[0]


def send(h, peer, snd, n, *, durable=False, start=0, **kw) -> list:
    ds = [peer.send(snd, Message(id=start + i, body=BODY, durable=durable, **kw)) for i in range(n)]
    h.pump()
    return ds


async def consume_all(b, h, expected: int, credit: int = 50) -> list:
    cons = h.connect()
    rcv = cons.receiver("orders", credit=credit)
    got = []

    def drain():
        for r in cons.received(rcv, clear=True):
            got.append(r.message.id)
            settle(r)
        rcv.flow(max(0, credit - rcv.credit))
        return len(got) >= expected and b.queues["orders"].delivering_count == 0

    await settle_io(b, h, until=drain)
    return got


async def test_page_beyond_the_limit_and_read_back_in_order(tmp_path, nursery):
    b, h = make(tmp_path)
    await nursery.start(b.pager.run)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    ds = send(h, prod, snd, 300) + send(h, prod, snd, 300, durable=True, start=300)
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    q = b.queues["orders"]
    assert q.size_bytes <= 10 * KB  # memory stays within max-size-bytes
    assert paged(b) == 600 - q.message_count > 500
    assert b.pager.stats("orders")[2] >= 2  # page files of about 64 KiB (page-size-bytes)
    [row] = [r for r in b.mgmt_queues() if r["name"] == "orders"]
    assert row["messageCount"] == 600 and row["pagedMessageCount"] == paged(b) and row["paging"] is True
    [addr] = [a for a in b.mgmt_addresses() if a["name"] == "orders"]
    assert addr["paging"] is True and addr["numberOfPages"] >= 2 and addr["addressSize"] == q.size_bytes
    assert await consume_all(b, h, 600) == list(range(600))
    assert paged(b) == 0 and q.message_count == 0
    await settle_io(b, h, until=lambda: not any(s.files for s in b.pager.spools.values()))
    assert not [n for _d, _s, files in os.walk(tmp_path / "paging") for n in files if n.endswith(".page")]


async def test_durable_paged_messages_survive_a_restart_non_durable_ones_do_not(tmp_path, nursery):
    b, h = make(tmp_path)
    await nursery.start(b.pager.run)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    ds = send(h, prod, snd, 200, durable=True) + send(h, prod, snd, 100, start=200) + \
        send(h, prod, snd, 100, durable=True, start=300)
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    in_memory = b.queues["orders"].message_count
    assert in_memory < 15 and paged(b) == 400 - in_memory
    b.close_journal()

    b2, h2 = make(tmp_path)
    await nursery.start(b2.pager.run)
    q = b2.queues["orders"]
    assert q.size_bytes <= 10 * KB and b2.meter.total <= 10 * KB  # recovery reads only what fits
    assert q.message_count + paged(b2) == 300
    got = await consume_all(b2, h2, 300)
    assert got == list(range(200)) + list(range(300, 400))  # in order, no loss, no duplicate
    b2.journal.sync()
    b2.close_journal()
    b3, _h3 = make(tmp_path)
    assert b3.queues["orders"].message_count == 0 and paged(b3) == 0  # every one acknowledged
    b3.close_journal()


async def test_global_max_size_pages_every_page_address(tmp_path, nursery):
    b, h = make(tmp_path, limit="-1", catch_all="PAGE", core="<global-max-size>20K</global-max-size>")
    await nursery.start(b.pager.run)
    prod = h.connect()
    orders, other = prod.sender("orders"), prod.sender("other")
    h.pump()
    ds = send(h, prod, orders, 100) + send(h, prod, other, 100)
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    # Within the limit, plus one message for "other": a queue with nothing in memory always takes one.
    assert b.meter.total <= 20 * KB + len(Message(id=1, body=BODY).encode())
    assert paged(b, "orders") > 70 and paged(b, "other") == 99  # "other" came when the broker was full
    assert await consume_all(b, h, 100) == list(range(100))


async def test_a_queue_with_nothing_in_memory_always_takes_one(tmp_path, nursery):
    """No deadlock: a message bigger than the room left still comes back once its queue is empty."""
    b, h = make(tmp_path, limit="3K")
    await nursery.start(b.pager.run)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    big = Message(id=1, body=b"b" * 2500)
    ds = [prod.send(snd, Message(id=0, body=b"a" * 2500)), prod.send(snd, big), prod.send(snd, Message(id=2, body=b"c"))]
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    assert paged(b) == 2
    assert await consume_all(b, h, 3, credit=1) == [0, 1, 2]


async def test_priority_within_memory_fifo_through_the_page(tmp_path, nursery):
    b, h = make(tmp_path, limit="3K")
    await nursery.start(b.pager.run)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    ds = [prod.send(snd, Message(id=i, body=BODY, priority=p)) for i, p in enumerate([1, 1, 1, 9, 1, 9])]
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    # 0 and 1 fit in memory; 2-5 are paged and come back one by one, in page order, as room appears. In
    # memory, priority applies as always: 3 (priority 9) overtakes 2 once both are back, 5 overtakes 4;
    # nothing overtakes a message still paged before it.
    assert b.queues["orders"].message_count == 2 and paged(b) == 4
    got = await consume_all(b, h, 6, credit=1)
    assert got == [0, 1, 3, 2, 5, 4]


async def test_purge_and_delete_drop_paged_messages_and_their_journal_records(tmp_path, nursery):
    b, h = make(tmp_path)
    await nursery.start(b.pager.run)
    b.create_queue("extra", address="orders")
    prod = h.connect()
    snd = prod.sender("orders::orders")  # the address's anycast queues take turns: name the queue
    h.pump()
    ds = send(h, prod, snd, 100, durable=True)
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    assert paged(b) > 80
    assert b.purge_queue("orders") == 100
    assert paged(b) == 0 and b.queues["orders"].message_count == 0
    b.journal.sync()
    b.close_journal()
    b2, _ = make(tmp_path)
    assert b2.queues["orders"].message_count == 0 and paged(b2) == 0
    b2.close_journal()


async def test_page_needs_no_persistence(tmp_path, nursery):
    b, h = make(tmp_path, persist=False)
    await nursery.start(b.pager.run)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    ds = send(h, prod, snd, 400, durable=True)
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    assert paged(b) > 380 and b.queues["orders"].size_bytes <= 10 * KB
    assert await consume_all(b, h, 400) == list(range(400))


async def test_dead_letters_join_a_paging_dead_letter_queue_behind_what_it_paged(tmp_path, nursery):
    text = XML.format(limit="10K", core="", catch_all="FAIL", persist="true", journal=tmp_path / "journal")
    text = text.replace('<address-setting match="#"><address-full-policy>FAIL</address-full-policy>',
                        '<address-setting match="#"><address-full-policy>FAIL</address-full-policy>'
                        '<dead-letter-address>orders</dead-letter-address>')
    b = Broker(parse_broker_config(text))
    b.open_journal()
    h = RouterHarness(router=b)
    await nursery.start(b.pager.run)
    prod = h.connect()
    orders, other = prod.sender("orders"), prod.sender("other")
    h.pump()
    ds = send(h, prod, orders, 20)  # 'orders' is the dead-letter queue too: it pages
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    assert paged(b) == 10
    ds = send(h, prod, other, 3, start=100)
    await settle_io(b, h, until=lambda: all(outcome(d)["state"] == "accepted" for d in ds))
    cons = h.connect()
    rcv = cons.receiver("other", credit=3)
    await settle_io(b, h, until=lambda: len(cons.received(rcv)) == 3)
    for r in cons.received(rcv, clear=True):
        settle(r, REJECTED)  # dead-lettered to 'orders', which is paging: they join its page, in order
    await settle_io(b, h, until=lambda: paged(b) == 13)
    assert await consume_all(b, h, 23) == list(range(20)) + [100, 101, 102]
