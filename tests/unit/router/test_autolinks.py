"""Auto-links (Qpid Dispatch 1.19 src/router_core/route_control.c, qdrouter.json autoLink), driven in memory:
the router attaches links to a broker-like container."""

from __future__ import annotations

import proton
from proton import Endpoint

from router.autolinks import ACTIVE, ATTACHING, FAILED, INACTIVE, RETRY_FIRST_SECONDS, RETRY_SECONDS
from tests.unit.enginepair import ACCEPTED, AddressEntity, RouterHarness, settle
from tests.unit.router.fixtures import AutoLinkEntity, open_sessions


def answer_attaches(peer) -> list:
    """The container opens every link the router attached, mirroring its termini; returns them."""
    opened = []
    open_sessions(peer)
    link = peer.connection.link_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
    while link:
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.open()
        peer.links[link.name] = link
        if link.is_receiver:
            peer._track(link)
        opened.append(link)
        link = link.next(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
    return opened


def retry_at(al):
    """When the auto-link's only link is to be attached again."""
    [attachment] = al.attachments.values()
    return attachment.retry_at


def setup(clock):
    h = RouterHarness(
        address_entities=[AddressEntity("queue", waypoint=True)],
        auto_link_entities=[
            AutoLinkEntity(address="queue", direction="out", connection="broker", name="to-broker"),
            AutoLinkEntity(address="queue", direction="in", connection="broker", name="from-broker",
                           externalAddress="broker.queue"),
        ],
        clock=lambda: clock[0],
    )
    by_name = {al.name: al for al in h.router.auto_links.auto_links}
    return h, by_name


def test_auto_links_carry_a_brokered_flow_end_to_end():
    clock = [0.0]
    h, al = setup(clock)
    producer = h.connect()
    snd = producer.sender("queue")
    h.pump()
    assert snd.credit == 0 and al["to-broker"].oper_status == INACTIVE

    broker = h.connect(name="broker")  # the listener/connector name the auto-links refer to
    assert al["to-broker"].oper_status == ATTACHING
    links = {link.name: link for link in answer_attaches(broker)}
    to_broker = links["R1.to-broker"]  # the broker receives (router sends): phase 0
    from_broker = links["R1.from-broker"]  # the broker sends (router receives): phase 1
    assert to_broker.is_receiver and to_broker.remote_target.address == "queue"
    assert from_broker.is_sender and from_broker.remote_source.address == "broker.queue"
    to_broker.flow(100)
    h.pump()
    assert al["to-broker"].oper_status == ACTIVE and al["from-broker"].oper_status == ACTIVE
    assert snd.credit == 250  # the broker's queue is phase 0's destination
    assert from_broker.credit == 0  # no phase-1 consumer yet: the router does not pull

    d = producer.send(snd, body="stored")
    h.pump()
    [stored] = broker.received(to_broker, clear=True)
    assert stored.body == "stored" and not d.settled
    settle(stored, ACCEPTED)
    h.pump()
    assert d.settled and d.remote_state == ACCEPTED

    consumer = h.connect()
    c_rcv = consumer.receiver("queue", credit=5)
    h.pump()
    assert from_broker.credit == 250
    out = broker.send(from_broker, body="stored")
    h.pump()
    assert consumer.bodies(c_rcv) == ["stored"]
    settle(consumer.received(c_rcv)[0], ACCEPTED)
    h.pump()
    assert out.settled and out.remote_state == ACCEPTED


def test_detached_auto_link_is_retried_after_2_then_5_seconds():
    clock = [100.0]
    h, al = setup(clock)
    broker = h.connect(name="broker")
    links = {link.name: link for link in answer_attaches(broker)}
    h.pump()
    assert al["to-broker"].oper_status == ACTIVE

    links["R1.to-broker"].condition = proton.Condition("amqp:not-found", "queue deleted")
    links["R1.to-broker"].close()
    h.pump()
    assert al["to-broker"].oper_status == FAILED
    assert al["to-broker"].last_error == "queue deleted"   # the description only, as Dispatch shows lastError

    clock[0] += RETRY_FIRST_SECONDS - 0.1
    h.router.tick(clock[0])
    h.pump()
    assert answer_attaches(broker) == []  # not yet
    clock[0] += 0.2
    h.router.tick(clock[0])
    h.pump()
    # The container refuses the new attach (null terminus, then a detach with an error): the second
    # consecutive failure waits RETRY_SECONDS.
    open_sessions(broker)
    refused = broker.connection.link_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
    assert refused.name == "R1.to-broker"
    refused.target.type = proton.Terminus.UNSPECIFIED  # encoded as a null target: AMQP's refusal
    refused.condition = proton.Condition("amqp:not-found", "still no queue")
    refused.open()
    refused.close()
    h.pump()
    assert al["to-broker"].oper_status == FAILED
    assert retry_at(al["to-broker"]) == clock[0] + RETRY_SECONDS

    clock[0] += RETRY_SECONDS
    h.router.tick(clock[0])
    h.pump()
    [again] = answer_attaches(broker)
    h.pump()
    assert again.name == "R1.to-broker" and al["to-broker"].oper_status == ACTIVE
    assert al["to-broker"].last_error is None

    again.close()  # after a success the count starts again: the next retry is RETRY_FIRST_SECONDS away
    h.pump()
    assert retry_at(al["to-broker"]) == clock[0] + RETRY_FIRST_SECONDS


def test_auto_links_go_inactive_with_their_connection_and_come_back_with_a_new_one():
    clock = [0.0]
    h, al = setup(clock)
    broker = h.connect(name="broker")
    answer_attaches(broker)
    h.pump()
    assert al["from-broker"].oper_status == ACTIVE
    h.drop(broker)
    assert al["from-broker"].oper_status == INACTIVE and al["to-broker"].oper_status == INACTIVE
    broker2 = h.connect(name="broker")
    assert len(answer_attaches(broker2)) == 2
    h.pump()
    assert al["from-broker"].oper_status == ACTIVE


def test_auto_link_by_container_id_ignores_other_connections():
    h = RouterHarness(auto_link_entities=[
        AutoLinkEntity(address="q", direction="out", containerId="the-broker", name="al")])
    other = h.connect()
    assert answer_attaches(other) == []
    from tests.unit.enginepair import Peer

    broker = h.connect(Peer(container="the-broker"))
    assert [link.name for link in answer_attaches(broker)] == ["R1.al"]


def test_retry_delays_are_dispatch_s():
    assert (RETRY_FIRST_SECONDS, RETRY_SECONDS) == (2.0, 5.0)


def test_auto_link_added_and_removed_while_running():
    """add() attaches at once on a matching open connection; remove() detaches the link with no error (as
    Dispatch's route_control.c deactivates a deleted auto-link) and forgets the auto-link, so it is not
    retried; a second auto-link with a taken name is refused."""
    from router.autolinks import AutoLink

    clock = [0.0]
    h, _ = setup(clock)
    broker = h.connect(name="broker")
    answer_attaches(broker)
    manager = h.router.auto_links
    added = AutoLink.from_entity(AutoLinkEntity(address="extra", direction="out", connection="broker",
                                                name="extra"), 2)
    manager.add(added)
    assert added.oper_status == ATTACHING
    h.pump()
    [link] = answer_attaches(broker)
    h.pump()
    assert link.name == "R1.extra" and added.oper_status == ACTIVE
    try:
        manager.add(AutoLink.from_entity(AutoLinkEntity(address="x", direction="in", connection="broker",
                                                        name="extra"), 3))
    except ValueError as exc:
        assert "extra" in str(exc)
    else:
        raise AssertionError("a second auto-link named 'extra' was accepted")

    assert manager.remove("extra") is added
    h.pump()
    assert link.state & Endpoint.REMOTE_CLOSED
    assert link.remote_condition is None
    assert "extra" not in {al.name for al in manager.auto_links}
    clock[0] += RETRY_SECONDS + 1
    h.router.tick(clock[0])
    h.pump()
    assert answer_attaches(broker) == []  # not retried


def test_an_auto_link_attaches_on_every_connection_of_its_listener_each_with_its_own_retries():
    """Two containers accepted on the listener the auto-link names: a link on each, both destinations of
    the address; one detached is retried on its own connection; remove() detaches both without an error."""
    clock = [0.0]
    h = RouterHarness(auto_link_entities=[
        AutoLinkEntity(address="shared", direction="out", connection="containers", name="al")],
        clock=lambda: clock[0])
    [al] = h.router.auto_links.auto_links
    first = h.connect(name="containers")
    second = h.connect(name="containers")
    [a] = answer_attaches(first)
    [b] = answer_attaches(second)
    h.pump()
    assert a.name == b.name == "R1.al" and al.oper_status == ACTIVE
    assert len(h.router.addresses.get("M0shared").rlinks) == 2
    assert al.link is not None

    b.close()
    h.pump()
    assert len(h.router.addresses.get("M0shared").rlinks) == 1
    clock[0] += RETRY_FIRST_SECONDS
    h.router.tick(clock[0])
    h.pump()
    assert answer_attaches(first) == []
    [b2] = answer_attaches(second)
    h.pump()
    assert len(h.router.addresses.get("M0shared").rlinks) == 2 and al.oper_status == ACTIVE

    h.drop(first)
    assert al.oper_status == ACTIVE  # the other connection's link is still up
    h.router.auto_links.remove("al")
    h.pump()
    assert b2.state & Endpoint.REMOTE_CLOSED and b2.remote_condition is None
    assert al.link is None and al.oper_status == INACTIVE
