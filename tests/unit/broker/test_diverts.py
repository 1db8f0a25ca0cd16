"""Artemis diverts (broker/diverts.py) and anycast addresses with several queues, in an in-memory broker:
every <divert> element, exclusive and not, filters, the four routing types, chains and the loop guard,
durable copies journaled on the forwarding queues (they survive a restart), configuration errors at
FILE:LINE, and the round robin of an anycast address over its queues."""

from __future__ import annotations

import pytest
from proton import Message

from broker.config import BrokerConfigError, parse_broker_config
from broker.selector import parse as parse_selector
from broker.diverts import ORIG_ADDRESS, ORIG_MESSAGE_ID, ORIG_QUEUE, divert_sources
from broker.server import Broker
from tests.unit.enginepair import RouterHarness

XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>b1</name>
  <persistence-enabled>{persist}</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="audit"><anycast><queue name="audit"/></anycast></address>
    <address name="spy"><multicast><queue name="spy1"/><queue name="spy2"/></multicast></address>
    <address name="both"><anycast><queue name="both.a1"/><queue name="both.a2"/></anycast>
      <multicast><queue name="both.m1"/><queue name="both.m2"/></multicast></address>
    <address name="work"><anycast><queue name="w1"/><queue name="w2"/><queue name="w3"/></anycast></address>
    <address name="news"><multicast><queue name="news.sub"/></multicast></address>
  </addresses>
  <diverts>
{diverts}
  </diverts>
</core></configuration>
"""


def broker(tmp_path, diverts: str = "", *, persist: bool = False) -> Broker:
    text = XML.format(persist=str(persist).lower(), journal=tmp_path / "journal", diverts=diverts)
    b = Broker(parse_broker_config(text, str(tmp_path / "broker.xml")))
    b.open_journal()
    return b


def divert(name, address, forward, **children) -> str:
    extra = "".join(f"<{k.replace('_', '-')}>{v}</{k.replace('_', '-')}>" for k, v in children.items()
                    if k != "filter")
    if "filter" in children:
        extra += f'<filter string="{children["filter"]}"/>'
    return (f'<divert name="{name}"><address>{address}</address>'
            f'<forwarding-address>{forward}</forwarding-address>{extra}</divert>')


def send(b, address, *messages):
    h = RouterHarness(router=b)
    p = h.connect()
    snd = p.sender(address)
    h.pump()
    for m in messages:
        p.send(snd, m if isinstance(m, Message) else Message(body=m))
    h.pump()
    return h


def bodies(b, queue) -> list:
    out = []
    for qm in b.queues[queue].ready():
        m = Message()
        m.decode(qm.payload)
        out.append(m.body)
    return out


def counts(b, *queues) -> list[int]:
    return [b.queues[q].message_count for q in queues]


# --- anycast addresses with several queues ------------------------------------------------------------

def test_an_anycast_address_with_several_queues_gives_each_message_to_one_of_them_in_turn(tmp_path):
    b = broker(tmp_path)
    send(b, "work", *[f"m{i}" for i in range(6)])
    assert bodies(b, "w1") == ["m0", "m3"] and bodies(b, "w2") == ["m1", "m4"] and bodies(b, "w3") == ["m2", "m5"]


def test_the_round_robin_prefers_a_queue_with_a_consumer_and_skips_one_whose_filter_refuses(tmp_path):
    b = broker(tmp_path)
    h = RouterHarness(router=b)
    c = h.connect()
    c.receiver("work::w2", credit=0)  # a consumer without credit: messages wait on w2
    h.pump()
    send(b, "work", "a", "b", "c")
    assert counts(b, "w1", "w2", "w3") == [0, 3, 0]
    b2 = broker(tmp_path / "f")
    b2.addressing.queue_info["w1"].selector = parse_selector("color = 'red'")
    b2.addressing.filtered.add("w1")
    send(b2, "work", *[Message(body=c, properties={"color": c}) for c in ("blue", "red", "red")])
    # blue: w1's filter refuses it, w2 takes it; then w3, then w1 again (which selects red).
    assert bodies(b2, "w1") == ["red"] and bodies(b2, "w2") == ["blue"] and bodies(b2, "w3") == ["red"]


def test_a_link_naming_a_queue_or_its_fqqn_stores_into_that_queue_only(tmp_path):
    b = broker(tmp_path)
    send(b, "w2", "by-name")
    send(b, "work::w3", "by-fqqn")
    assert counts(b, "w1", "w2", "w3") == [0, 1, 1]


def test_a_queue_added_to_an_address_later_takes_its_turn(tmp_path):
    b = broker(tmp_path)
    send(b, "orders", "one")
    b.create_queue("orders.2", address="orders")
    send(b, "orders", "two", "three")
    assert bodies(b, "orders") == ["one", "two"] and bodies(b, "orders.2") == ["three"]


# --- diverts ----------------------------------------------------------------------------------------------

def test_a_non_exclusive_divert_copies_and_the_original_still_arrives(tmp_path):
    b = broker(tmp_path, divert("d1", "orders", "audit"))
    send(b, "orders", Message(id="m-1", body="o1"))
    assert bodies(b, "orders") == ["o1"] and bodies(b, "audit") == ["o1"]
    copy = Message()
    copy.decode(b.queues["audit"].ready()[0].payload)
    # Artemis' DivertImpl: the copy's address is the forwarding address; the original's is kept.
    assert copy.address == "audit" and copy.id == "m-1"
    assert copy.annotations[ORIG_ADDRESS] == "orders" and copy.annotations[ORIG_MESSAGE_ID] == "m-1"
    assert copy.annotations[ORIG_QUEUE] == "d1"
    assert b.addressing.diverts.diverted == {"d1": 1}


def test_an_exclusive_divert_takes_the_message_away(tmp_path):
    b = broker(tmp_path, divert("d1", "orders", "audit", exclusive="true"))
    send(b, "orders", "o1")
    assert counts(b, "orders", "audit") == [0, 1]


def test_exclusive_diverts_come_first_and_stop_the_non_exclusive_ones(tmp_path):
    b = broker(tmp_path, divert("ex", "orders", "audit", exclusive="true", filter="kind = 'x'")
               + divert("copy", "orders", "spy"))
    send(b, "orders", Message(body="plain"), Message(body="x", properties={"kind": "x"}))
    assert bodies(b, "orders") == ["plain"] and bodies(b, "audit") == ["x"]
    assert bodies(b, "spy1") == ["plain"] and bodies(b, "spy2") == ["plain"]


def test_a_filter_diverts_only_what_it_selects(tmp_path):
    b = broker(tmp_path, divert("ny", "orders", "audit", exclusive="true", filter="office = 'New York'"))
    send(b, "orders", Message(body="ny", properties={"office": "New York"}),
         Message(body="ldn", properties={"office": "London"}), Message(body="none"))
    assert bodies(b, "audit") == ["ny"] and bodies(b, "orders") == ["ldn", "none"]


@pytest.mark.parametrize("routing_type, anycast, multicast", [
    ("ANYCAST", 1, 0), ("MULTICAST", 0, 2), ("STRIP", 1, 2), (None, 1, 2),  # STRIP is the default
])
def test_routing_types_decide_which_queues_of_the_forwarding_address_get_the_copy(tmp_path, routing_type,
                                                                                  anycast, multicast):
    extra = {"routing_type": routing_type} if routing_type else {}
    b = broker(tmp_path, divert("d", "orders", "both", **extra))
    send(b, "orders", "o")
    assert sum(counts(b, "both.a1", "both.a2")) == anycast
    assert counts(b, "both.m1", "both.m2") == [multicast // 2] * 2


def test_pass_keeps_the_routing_type_the_message_was_sent_with(tmp_path):
    b = broker(tmp_path, divert("from-anycast", "orders", "both", routing_type="PASS")
               + divert("from-multicast", "news", "both", routing_type="PASS"))
    send(b, "orders", "sent-anycast")
    assert sum(counts(b, "both.a1", "both.a2")) == 1 and counts(b, "both.m1", "both.m2") == [0, 0]
    send(b, "news", "sent-multicast")
    assert sum(counts(b, "both.a1", "both.a2")) == 1 and counts(b, "both.m1", "both.m2") == [1, 1]
    assert bodies(b, "news.sub") == ["sent-multicast"]


def test_a_composite_divert_sends_a_copy_to_each_forwarding_address(tmp_path):
    b = broker(tmp_path, divert("fan", "orders", "audit, spy", exclusive="true"))
    send(b, "orders", "o")
    assert counts(b, "orders", "audit", "spy1", "spy2") == [0, 1, 1, 1]


def test_diverts_sharing_a_routing_name_take_turns(tmp_path):
    b = broker(tmp_path, divert("r1", "orders", "audit", routing_name="pair")
               + divert("r2", "orders", "spy", routing_name="pair", routing_type="MULTICAST"))
    send(b, "orders", "a", "b")
    assert bodies(b, "audit") == ["a"] and bodies(b, "spy1") == ["b"] and bodies(b, "orders") == ["a", "b"]


def test_a_wildcard_divert_address_sees_every_matching_address(tmp_path):
    b = broker(tmp_path, divert("words", "news.#", "audit"))
    b.create_queue("news.eu", address="news.eu")
    send(b, "news.eu", "eu")
    send(b, "news", "plain")
    assert bodies(b, "audit") == ["eu", "plain"]


def test_diverts_chain_and_each_copy_keeps_the_address_it_came_from(tmp_path):
    b = broker(tmp_path, divert("a", "orders", "audit") + divert("b", "audit", "spy", routing_type="MULTICAST"))
    send(b, "orders", "o")
    assert counts(b, "orders", "audit", "spy1", "spy2") == [1, 1, 1, 1]
    last = Message()
    last.decode(b.queues["spy1"].ready()[0].payload)
    assert last.address == "spy" and last.annotations[ORIG_ADDRESS] == "audit"


def test_a_divert_to_an_address_without_queues_drops_its_copy_and_creates_nothing(tmp_path):
    b = broker(tmp_path, divert("lost", "orders", "nowhere", exclusive="true"))
    send(b, "orders", "o")
    assert "nowhere" not in b.queues and counts(b, "orders") == [0]


def test_an_fqqn_send_is_diverted_only_by_exclusive_diverts(tmp_path):
    b = broker(tmp_path, divert("copy", "work", "audit") + divert("ex", "work", "spy", exclusive="true",
                                                                  filter="grab = true"))
    send(b, "work::w1", Message(body="plain"), Message(body="grab", properties={"grab": True}))
    assert bodies(b, "w1") == ["plain"] and bodies(b, "audit") == [] and bodies(b, "spy1") == ["grab"]


def test_durable_diverted_copies_are_journaled_on_the_forwarding_queue_and_survive_a_restart(tmp_path):
    d = divert("d1", "orders", "audit") + divert("d2", "orders", "spy", routing_type="MULTICAST")
    b = broker(tmp_path, d, persist=True)
    send(b, "orders", Message(body="keep", durable=True), Message(body="volatile"))
    b.journal.sync()
    b.close_journal()
    b2 = broker(tmp_path, d, persist=True)
    try:
        assert bodies(b2, "orders") == ["keep"] and bodies(b2, "audit") == ["keep"]
        assert bodies(b2, "spy1") == ["keep"] and bodies(b2, "spy2") == ["keep"]
        m = Message()
        m.decode(b2.queues["audit"].ready()[0].payload)
        assert m.annotations[ORIG_ADDRESS] == "orders"
    finally:
        b2.close_journal()


def test_divert_sources_name_the_addresses_that_feed_a_forwarding_address(tmp_path):
    b = broker(tmp_path, divert("a", "orders", "audit, spy") + divert("b", "news.#", "audit")
               + divert("c", "audit", "both"))
    diverts = b.addressing.diverts
    assert diverts.divert_sources("audit") == ["orders", "news.#"]
    assert diverts.divert_sources("both") == ["audit"]
    assert diverts.divert_sources("both", transitive=True) == ["audit", "orders", "news.#"]
    # The module function takes whatever holds the diverts (federation passes the broker).
    for holder in (b, b.addressing, diverts, b.cfg, b.cfg.diverts):
        assert divert_sources(holder, "spy") == ["orders"]
    assert divert_sources(b, "both", transitive=True) == ["audit", "orders", "news.#"]
    assert diverts.divert_sources("orders") == []


# --- configuration --------------------------------------------------------------------------------------

def test_defaults_follow_artemis(tmp_path):
    b = broker(tmp_path, divert("d", "orders", "audit"))
    [d] = b.cfg.diverts
    assert (d.exclusive, d.routing_type, d.filter, d.routing_name) == (False, "STRIP", None, None)


@pytest.mark.parametrize("body, message", [
    ('<divert name="x"><forwarding-address>a</forwarding-address></divert>', "divert x needs an <address>"),
    ('<divert name="x"><address>a</address></divert>', "divert x needs an <forwarding-address>"),
    ('<divert><address>a</address><forwarding-address>b</forwarding-address></divert>', 'needs a name="..."'),
    (divert("x", "a", "b", routing_type="BROADCAST"), "<routing-type> must be one of STRIP, PASS, ANYCAST"),
    (divert("x", "a", "b", exclusive="maybe"), "exclusive"),
    (divert("x", "a", "b", filter="color = "), "divert x: filter"),
    (divert("x", "a", "b.#"), "must be a plain address"),
    (divert("x", "wo#", "b"), "'#' and '*' must stand for a whole word"),
    (divert("x", "a", "b") + divert("x", "c", "d"), "duplicate divert name 'x'"),
    (divert("x", "a", "b") + divert("y", "b", "a"), "diverts form a cycle"),
    (divert("x", "a.#", "a.b"), "diverts form a cycle"),
    ('<divert name="x"><address>a</address><forwarding-address>b</forwarding-address><colour/></divert>',
     "unknown element <colour>"),
    ('<divert name="x"><address>a</address><forwarding-address>b</forwarding-address>'
     '<transformer-class-name>no.such.module:Nope</transformer-class-name></divert>', "divert x"),
])
def test_configuration_errors_name_file_and_line(tmp_path, body, message):
    with pytest.raises(BrokerConfigError) as err:
        broker(tmp_path, body)
    text = str(err.value)
    assert message in text, text
    assert text.startswith(f"{tmp_path / 'broker.xml'}:") and text.split(":")[1].isdigit()


def test_a_transformer_rewrites_each_diverted_copy(tmp_path, monkeypatch):
    pytest.importorskip("broker.transformers")
    mod = tmp_path / "divert_tx_mod.py"
    mod.write_text("class Stamp:\n"
                   "    def init(self, props):\n        self.tag = props['tag']\n"
                   "    def transform(self, m):\n        m.properties = dict(m.properties or {}, tag=self.tag)\n"
                   "        return m\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    b = broker(tmp_path, '<divert name="t"><address>orders</address><forwarding-address>audit</forwarding-address>'
                         '<transformer><class-name>divert_tx_mod:Stamp</class-name>'
                         '<property key="tag" value="seen"/></transformer></divert>')
    send(b, "orders", Message(body="o", properties={"k": 1}))
    copy, original = Message(), Message()
    copy.decode(b.queues["audit"].ready()[0].payload)
    original.decode(b.queues["orders"].ready()[0].payload)
    assert copy.properties == {"k": 1, "tag": "seen"} and original.properties == {"k": 1}
