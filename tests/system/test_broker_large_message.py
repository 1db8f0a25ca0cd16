"""A very large message is refused while it arrives, not after being buffered whole (issue 10: a 300 MB
delivery was held whole). A real tdbroker and a real proton client sending a 100 MB message; the broker's
peak RSS (VmHWM) must not grow by anything like the message, and a normal client keeps working.

* to an address whose max-size-bytes (10 MB) it exceeds, under the policies that used to store or drop it
  whole (BLOCK, DROP) and under PAGE: refused with ``amqp:link:message-size-exceeded`` once past the
  bound, which the link also advertised at attach (max-message-size);
* over global-max-size;
* durable, while the disk is over max-disk-usage: rejected with ``amqp:resource-limit-exceeded``, its bytes
  dropped as they arrive, the link kept.
"""

from __future__ import annotations

import os
import threading

import pytest
from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tests.system.brokerharness import BrokerProcess
from tests.system.clients import Producer, close_all
from tests.system.procstat import memory_mib

pytestmark = pytest.mark.system

TIMEOUT = 120
MB = 1024 * 1024
BIG = 100 * MB
XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>large</name>
  <journal-directory>{journal}</journal-directory>
  {core}
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="big"><anycast><queue name="big"/></anycast></address></addresses>
  <address-settings>
    <address-setting match="#"><address-full-policy>{policy}</address-full-policy></address-setting>
    <address-setting match="big"><max-size-bytes>{limit}</max-size-bytes></address-setting>
  </address-settings>
</core>
</configuration>
"""


def _status(pid: int) -> dict[str, int]:
    return memory_mib(pid)


class OneBigSend(MessagingHandler):
    """Sends one message and records its outcome, the link's condition and its advertised max size."""

    def __init__(self, url: str, message: Message, then: Message | None = None):
        super().__init__(auto_settle=True)
        self.url, self.message, self.then = url, message, then
        self.outcomes: list[tuple[str, str | None, str | None]] = []
        self.link_condition = None
        self.max_message_size = None
        self.done = threading.Event()
        self._sent = 0

    def on_start(self, event):
        conn = event.container.connect(self.url, reconnect=False)
        self.sender = event.container.create_sender(conn, "big")

    def on_link_opened(self, event):
        self.max_message_size = event.link.remote_max_message_size

    def on_sendable(self, event):
        if self._sent == 0:
            event.sender.send(self.message)
            self._sent = 1

    def _record(self, event, name):
        cond = event.delivery.remote.condition
        self.outcomes.append((name, cond.name if cond else None, cond.description if cond else None))
        if self.then is not None and len(self.outcomes) == 1 and event.link.state & event.link.LOCAL_ACTIVE \
                and not event.link.state & event.link.REMOTE_CLOSED:
            event.sender.send(self.then)
            return
        event.connection.close()
        self.done.set()

    def on_accepted(self, event):
        self._record(event, "accepted")

    def on_rejected(self, event):
        self._record(event, "rejected")

    def on_link_remote_close(self, event):
        cond = event.link.remote_condition
        self.link_condition = (cond.name, cond.description) if cond else None

    def on_link_error(self, event):
        pass

    def on_transport_closed(self, event):
        self.done.set()


def run_send(url: str, message: Message, then: Message | None = None) -> OneBigSend:
    h = OneBigSend(url, message, then)
    c = Container(h)
    t = threading.Thread(target=c.run, daemon=True)
    t.start()
    assert h.done.wait(TIMEOUT), "the big send did not finish"
    t.join(TIMEOUT)
    return h


@pytest.fixture
def broker_for(tmp_path):
    started = []

    def start(policy: str = "PAGE", limit: str = "10MB", core: str = "") -> BrokerProcess:
        conf = tmp_path / "broker.xml"
        conf.write_text(XML.format(journal=tmp_path / "journal", policy=policy, limit=limit, core=core))
        b = BrokerProcess(conf, tmp_path).start()
        started.append(b)
        return b

    yield start
    close_all()
    for b in started:
        assert b.stop() == 0, b.stderr_text()


def _still_works(url: str) -> None:
    p = Producer(url, "big", count=3).start()
    p.wait(TIMEOUT)
    assert p.outcomes["accepted"] == 3, p.outcomes


@pytest.mark.parametrize("policy,limit,core,bound", [
    ("BLOCK", "10MB", "", 10 * MB),
    ("DROP", "10MB", "", 10 * MB),
    ("PAGE", "10MB", "", 10 * MB),
    ("BLOCK", "-1", "<global-max-size>20MB</global-max-size>", 20 * MB),
])
def test_a_100_mb_message_over_what_the_address_can_hold_is_refused_early(broker_for, policy, limit, core,
                                                                         bound):
    broker = broker_for(policy, limit, core)
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    before = _status(broker.proc.pid)
    h = run_send(url, Message(id="big", body=b"b" * BIG))
    after = _status(broker.proc.pid)
    print(f"{policy} {limit} {core}: broker VmHWM {before['VmHWM']} -> {after['VmHWM']} MB, VmRSS "
          f"{before['VmRSS']} -> {after['VmRSS']} MB for a {BIG // MB} MB message")
    assert h.max_message_size == bound  # advertised at attach (AMQP 1.0 §2.7.3)
    assert h.outcomes and h.outcomes[0][:2] == ("rejected", "amqp:link:message-size-exceeded"), h.outcomes
    assert h.link_condition[0] == "amqp:link:message-size-exceeded"
    assert after["VmHWM"] - before["VmHWM"] < bound // MB + 30, (before, after)
    assert os.path.exists(f"/proc/{broker.proc.pid}")
    _still_works(url)


def test_a_100_mb_durable_message_is_dropped_as_it_arrives_while_the_disk_is_full(broker_for, tmp_path):
    st = os.statvfs(tmp_path)
    used = 100 * (1 - st.f_bavail / st.f_blocks)
    if used < 2:
        pytest.skip(f"the test disk is only {used:.1f}% used: cannot set max-disk-usage below it")
    broker = broker_for("PAGE", "-1", f"<max-disk-usage>{int(used) - 1}</max-disk-usage>")
    url = f"amqp://127.0.0.1:{broker.ports['amqp']}"
    before = _status(broker.proc.pid)
    h = run_send(url, Message(id="big", body=b"b" * BIG, durable=True),
                 then=Message(id="small", body="kept in memory", durable=False))
    after = _status(broker.proc.pid)
    print(f"durable, disk over max-disk-usage: broker VmHWM {before['VmHWM']} -> {after['VmHWM']} MB, VmRSS "
          f"{before['VmRSS']} -> {after['VmRSS']} MB for a {BIG // MB} MB message")
    assert h.outcomes[0][:2] == ("rejected", "amqp:resource-limit-exceeded"), h.outcomes
    assert "max-disk-usage" in h.outcomes[0][2]
    assert h.outcomes[1][0] == "accepted"  # same link: it was not detached
    assert after["VmHWM"] - before["VmHWM"] < 30, (before, after)
