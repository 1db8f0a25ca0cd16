"""Address limits in tdbroker (issue 10: 400 MB were accepted against a 10 MB FAIL limit, silently):
max-size-bytes with FAIL / DROP / BLOCK, global-max-size, PAGE accepted (tests/unit/broker/test_paging.py
pages), and a multi-frame message refused while it still arrives. In memory, a real Broker behind proton peers."""

from __future__ import annotations

import tempfile

import pytest
from proton import Message

from broker.config import parse_broker_config
from broker.server import Broker
from tests.unit.enginepair import RouterHarness, outcome, settle

BODY = b"x" * 1000
XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>limits</name>
  <persistence-enabled>false</persistence-enabled>
  <paging-directory>{paging}</paging-directory>
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
      <address-full-policy>{policy}</address-full-policy>
    </address-setting>
  </address-settings>
</core></configuration>
"""


def make(policy="FAIL", limit="10K", core="", catch_all="FAIL") -> tuple[Broker, RouterHarness]:
    # PAGE needs a paging directory: a fresh one, never the repository's data/paging.
    paging = tempfile.mkdtemp(prefix="tdbroker-paging-")
    broker = Broker(parse_broker_config(XML.format(policy=policy, limit=limit, core=core, catch_all=catch_all,
                                                   paging=paging)))
    broker.open_journal()
    return broker, RouterHarness(router=broker)


def send_n(h, peer, snd, n, body=BODY):
    ds = [peer.send(snd, Message(body=body)) for _ in range(n)]
    h.pump()
    return ds


def states(ds) -> list:
    return [outcome(d)["state"] for d in ds]


def test_fail_rejects_beyond_the_limit_and_accepts_again_once_drained():
    broker, h = make("FAIL", "10K")
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    ds = send_n(h, prod, snd, 30)
    got = states(ds)
    accepted = got.count("accepted")
    assert 8 <= accepted <= 10 and got[:accepted] == ["accepted"] * accepted
    assert set(got[accepted:]) == {"rejected"}
    assert outcome(ds[-1])["condition"] == ("amqp:resource-limit-exceeded", "Address is full: orders")
    q = broker.queues["orders"]
    assert q.size_bytes <= 10 * 1024 and q.message_count == accepted
    # Another address has no limit of its own: unaffected.
    other = prod.sender("other")
    h.pump()
    assert set(states(send_n(h, prod, other, 30))) == {"accepted"}
    # A consumer drains the address: sends are accepted again.
    cons = h.connect()
    rcv = cons.receiver("orders", credit=100)
    h.pump()
    for r in cons.received(rcv, clear=True):
        settle(r)
    h.pump()
    assert q.size_bytes == 0
    assert states(send_n(h, prod, snd, 5)) == ["accepted"] * 5


def test_drop_accepts_drops_and_counts():
    broker, h = make("DROP", "10K")
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    assert set(states(send_n(h, prod, snd, 30))) == {"accepted"}
    q = broker.queues["orders"]
    assert q.size_bytes <= 10 * 1024
    assert broker.limits.dropped["orders"] == 30 - q.message_count


def test_block_withholds_credit_until_consumers_make_room():
    broker, h = make("BLOCK", "10K")
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    window = snd.credit
    assert window > 50
    assert set(states(send_n(h, prod, snd, 50))) == {"accepted"}  # what the window allows is stored
    q = broker.queues["orders"]
    stored_credit = snd.credit
    assert stored_credit < window - 30  # credit came back only while there was room
    assert broker.limits.blocked
    # A consumer takes everything: the owed credit comes back.
    cons = h.connect()
    rcv = cons.receiver("orders", credit=100)
    h.pump()
    for r in cons.received(rcv, clear=True):
        settle(r)
    h.pump()
    assert q.size_bytes == 0
    assert snd.credit == window
    assert not broker.limits.blocked


def test_global_max_size_applies_each_address_policy():
    broker, h = make("FAIL", "-1", core="<global-max-size>20K</global-max-size>")
    prod = h.connect()
    orders, other = prod.sender("orders"), prod.sender("other")
    h.pump()
    first = states(send_n(h, prod, orders, 15))
    assert first == ["accepted"] * 15
    second = states(send_n(h, prod, other, 15))
    assert "rejected" in second  # the catch-all policy is FAIL
    assert broker.meter.total <= 20 * 1024


def test_multicast_counts_each_subscription_queue():
    broker, h = make("FAIL", "-1", core="<global-max-size>20K</global-max-size>")
    subs = h.connect()
    subs.receiver("news", credit=0)
    subs.receiver("news", credit=0)
    prod = h.connect()
    snd = prod.sender("news")
    h.pump()
    got = states(send_n(h, prod, snd, 20))
    assert 8 <= got.count("accepted") <= 10
    assert broker.meter.total <= 20 * 1024


def test_a_multi_frame_message_is_refused_while_it_arrives():
    broker, h = make("FAIL", "10K")
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    big = prod.send(snd, Message(body=b"y" * 3_000_000))  # ~180 frames of 16 KiB: checked every 64
    h.pump()
    assert outcome(big)["state"] == "rejected"
    assert snd.remote_condition.name == "amqp:link:message-size-exceeded"
    assert broker.queues["orders"].message_count == 0
    assert not broker.messages_arriving()  # nothing of it is kept


@pytest.mark.parametrize("setting,core,pages", [
    ("<max-size-bytes>10M</max-size-bytes>", "", True),  # PAGE is the default policy
    ("<max-size-bytes>10M</max-size-bytes><address-full-policy>PAGE</address-full-policy>", "", True),
    ("", "<global-max-size>1G</global-max-size>", True),
    ("<max-size-bytes>10M</max-size-bytes><address-full-policy>FAIL</address-full-policy>", "", False),
])
def test_page_with_a_limit_is_accepted_and_needs_the_pager(setting, core, pages):
    """Paging is implemented (broker/paging.py): a PAGE limit is no longer refused at start-up."""
    text = ("<configuration xmlns=\"urn:activemq\"><core xmlns=\"urn:activemq:core\">\n" + core + "\n"
            "<persistence-enabled>false</persistence-enabled>"
            "<address-settings>\n<address-setting match=\"q\">" + setting + "</address-setting>\n"
            "</address-settings></core></configuration>")
    cfg = parse_broker_config(text, "b.xml")
    assert Broker(cfg).limits.may_page is pages


def test_unlimited_page_as_in_artemis_stock_configuration_is_accepted():
    text = ("<configuration xmlns=\"urn:activemq\"><core xmlns=\"urn:activemq:core\"><address-settings>"
            "<address-setting match=\"#\"><max-size-bytes>-1</max-size-bytes>"
            "<address-full-policy>PAGE</address-full-policy></address-setting>"
            "</address-settings></core></configuration>")
    cfg = parse_broker_config(text)
    assert not Broker(cfg).limits.active


@pytest.mark.parametrize("policy,limit,core", [
    ("BLOCK", "10K", ""), ("DROP", "10K", ""), ("PAGE", "10K", ""),
    ("FAIL", "-1", "<global-max-size>20K</global-max-size>"),
])
def test_a_message_larger_than_its_address_can_hold_is_refused_at_its_first_frames(policy, limit, core):
    """Issue 10: a 300 MB message must not be buffered whole before it is refused. Whatever the policy, a
    message above max-size-bytes (or global-max-size) can never be held: the link says so at attach
    (max-message-size) and the message is refused once its bytes so far pass it."""
    broker, h = make(policy, limit, core=core)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    largest = 10 * 1024 if limit == "10K" else 20 * 1024
    assert snd.remote_max_message_size == largest
    seen = []
    real = broker.admission.check_arriving  # observe how much was held when it was refused

    def spy(bl, arriving, held):
        seen.append(held)
        return real(bl, arriving, held)

    broker.admission.check_arriving = spy
    big = prod.send(snd, Message(body=b"y" * 3_000_000))
    h.pump()
    assert outcome(big)["state"] == "rejected"
    assert outcome(big)["condition"][0] == "amqp:link:message-size-exceeded"
    assert snd.remote_condition.name == "amqp:link:message-size-exceeded"
    assert seen and max(seen) < largest + 70_000  # refused within a read of the bound, not at 3 MB
    assert broker.queues["orders"].message_count == 0 and not broker.messages_arriving()


def test_a_complete_message_larger_than_the_address_is_rejected_and_the_link_stays():
    broker, h = make("BLOCK", "10K")
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    d = prod.send(snd, Message(body=b"z" * 11_000))  # one read: complete before any check
    ok = prod.send(snd, Message(body=b"small"))
    h.pump()
    assert outcome(d)["state"] == "rejected" and outcome(d)["condition"][0] == "amqp:resource-limit-exceeded"
    assert outcome(ok)["state"] == "accepted"


LIMIT_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <persistence-enabled>false</persistence-enabled>
  {core}
  <address-settings><address-setting match="#">{setting}</address-setting></address-settings>
</core></configuration>
"""


@pytest.mark.parametrize("core,setting", [
    ("<global-max-messages>1000</global-max-messages>", ""),
    ("", "<max-size-messages>1000</max-size-messages>"),
    ("", "<max-size-bytes-reject-threshold>10M</max-size-bytes-reject-threshold>"),
    ("", "<page-limit-bytes>100M</page-limit-bytes>"),
    ("", "<page-limit-messages>1000</page-limit-messages>"),
])
def test_a_limit_tdbroker_does_not_enforce_is_refused_with_file_and_line(core, setting):
    """Accepting and ignoring a limit would promise a bound that does not hold: refused, unless -1."""
    from broker.config import BrokerConfigError

    with pytest.raises(BrokerConfigError, match="does not enforce") as info:
        parse_broker_config(LIMIT_XML.format(core=core, setting=setting), "b.xml")
    assert str(info.value).startswith("b.xml:")
    no_limit = parse_broker_config(LIMIT_XML.format(core=core.replace(">1000<", ">-1<"),
                                                     setting=setting.replace(">1000<", ">-1<")
                                                     .replace(">10M<", ">-1<").replace(">100M<", ">-1<")), "b.xml")
    assert no_limit is not None
