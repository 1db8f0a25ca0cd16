"""A large durable message through a real tdbroker, across a restart, with bounded broker memory (issue 17).

A 50 MB durable message is sent straight to the broker (no router), the broker is restarted, and the
message is received intact; and one through a router whose waypoint the broker serves as an Artemis
``<peer>`` (the broker's own links to the router stream it the same way). The broker streams it into ``large-messages/<id>.msg`` as it arrives and back
out of the file when it delivers it (broker/largestream.py), so its resident memory grows by far less than
the message, both while storing it and while delivering it; the file goes once the message is consumed.
"""

from __future__ import annotations

import hashlib
import os
import pathlib

from proton import Message

from tests.system.brokerharness import (BROKER_XML as PEER_XML, TIMEOUT, WAYPOINT, BrokerProcess, receive_messages,
                                        send_messages, wait_queue_empty)
from tests.system.clients import Consumer, Producer

SIZE = 50 * 1000 * 1000
# What the broker's RSS may grow by while it stores or delivers the message: well under its size (the
# streaming window is 1 MiB per connection, plus proton's frames and the socket buffers).
RSS_GROWTH_LIMIT = 32 * 1024 * 1024

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>large-1</name>
  <persistence-enabled>true</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP;amqpMinLargeMessageSize=102400</acceptor>
  </acceptors>
  <addresses>
    <address name="big"><anycast><queue name="big"/></anycast></address>
  </addresses>
</core>
</configuration>
"""


def _status(pid: int, field: str) -> int:
    """A /proc/PID/status memory figure in bytes (VmRSS now, VmHWM the highest since the start)."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _body() -> bytes:
    block = hashlib.sha256(b"large").digest() * 2048  # 64 KiB, not all one byte (nothing compresses it)
    return (block * (SIZE // len(block) + 1))[:SIZE]


def test_a_50_mb_durable_message_is_stored_and_delivered_across_a_restart_with_bounded_memory(tmp_path):
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "journal"))
    large_dir = tmp_path / "large-messages"
    body = _body()
    digest = hashlib.sha256(body).hexdigest()

    broker = BrokerProcess(conf, tmp_path).start()
    try:
        url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
        pid = broker.proc.pid
        before = _status(pid, "VmRSS")
        send_messages(url, "big", [Message(id="big-1", body=body, durable=True)], timeout=TIMEOUT * 2)
        stored_growth = _status(pid, "VmHWM") - before
        files = os.listdir(large_dir)
        assert len(files) == 1 and files[0].endswith(".msg")
        assert os.path.getsize(large_dir / files[0]) > SIZE
    finally:
        assert broker.stop() == 0
    del body  # the test's own copy must not be what is measured (it is not: the broker is another process)

    broker = BrokerProcess(conf, tmp_path).start()
    try:
        url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
        pid = broker.proc.pid
        before = _status(pid, "VmRSS")
        got = receive_messages(url, "big", 1, timeout=TIMEOUT * 2)
        delivered_growth = _status(pid, "VmHWM") - before
        assert len(got) == 1 and got[0].id == "big-1" and got[0].durable
        assert hashlib.sha256(got[0].body).hexdigest() == digest
        wait_queue_empty(broker, "big")
        assert os.listdir(large_dir) == []  # removed with the acknowledgement
    finally:
        assert broker.stop() == 0
    assert stored_growth < RSS_GROWTH_LIMIT, f"storing grew the broker's RSS by {stored_growth} bytes"
    assert delivered_growth < RSS_GROWTH_LIMIT, f"delivering grew the broker's RSS by {delivered_growth} bytes"
    print(f"broker RSS growth: storing {stored_growth / 2**20:.1f} MiB, delivering {delivered_growth / 2**20:.1f} MiB")


def test_a_large_message_through_a_router_waypoint_is_stored_and_delivered_with_bounded_broker_memory(
        router_factory, tmp_path):
    router = router_factory(WAYPOINT)
    conf = tmp_path / "broker.xml"
    conf.write_text(PEER_XML.format(journal=tmp_path / "journal", router_port=router.ports["amqp"]))
    body = _body()
    broker = BrokerProcess(conf, tmp_path).start()
    try:
        pid = broker.proc.pid
        before = _status(pid, "VmRSS")
        send_messages(router.url, "queue", [Message(id="routed", body=body, durable=True)], timeout=TIMEOUT * 2)
        stored_growth = _status(pid, "VmHWM") - before
        assert len(os.listdir(tmp_path / "large-messages")) == 1
        got = receive_messages(router.url, "queue", 1, timeout=TIMEOUT * 2)
        delivered_growth = _status(pid, "VmHWM") - before
        assert got[0].id == "routed" and got[0].body == body
        wait_queue_empty(broker)
        assert os.listdir(tmp_path / "large-messages") == []
    finally:
        assert broker.stop() == 0
    assert stored_growth < RSS_GROWTH_LIMIT and delivered_growth < RSS_GROWTH_LIMIT, (stored_growth,
                                                                                     delivered_growth)


MIXED_SIZES = (100, 300_000, 100, 3_000_000, 50_000, 100, 700_000, 10, 1_500_000)


def test_small_and_large_durable_messages_mixed_through_a_waypoint_all_arrive_in_order(router_factory, tmp_path):
    """Producer and consumer at the same time through a router whose waypoint a tdbroker serves: messages
    of 10 B to 3 MB, durable, the large ones streamed into and out of the broker's large-message files
    while small ones queue behind them on the same links; every message arrives, in order, intact."""
    router = router_factory(WAYPOINT)
    conf = tmp_path / "broker.xml"
    conf.write_text(PEER_XML.format(journal=tmp_path / "journal", router_port=router.ports["amqp"]))
    broker = BrokerProcess(conf, tmp_path).start()
    n = 36

    def body(i):
        return (hashlib.sha256(b"%d" % i).digest() * (MIXED_SIZES[i % len(MIXED_SIZES)] // 32 + 1))[
            :MIXED_SIZES[i % len(MIXED_SIZES)]]

    try:
        c = Consumer(router.url, "queue", count=n, credit=3).start()
        c.wait_ready()
        p = Producer(router.url, "queue", count=n, message_fn=lambda i: Message(id=i, body=body(i), durable=True))
        p.start()
        c.wait(TIMEOUT * 2)
        p.wait(TIMEOUT * 2)
        assert p.outcomes == {"accepted": n}, p.outcomes
        assert [m.id for m in c.messages] == list(range(n))
        assert all(m.body == body(i) for i, m in enumerate(c.messages))
        p.close()
        c.close()
        wait_queue_empty(broker)
        assert os.listdir(tmp_path / "large-messages") == []
    finally:
        assert broker.stop() == 0
