"""Transactions through link routes (Qpid Dispatch 1.19 src/router_core/terminus.c: a coordinator terminus is
looked up as ``$coordinator``; modules/address_lookup_client/lookup_client.c: one no route covers is refused;
DISPATCH-1453: also under ``defaultDistribution: unavailable``), driven in memory."""

from __future__ import annotations

import proton
from proton import Data, Described, Endpoint, Message, symbol

from router.linkroutes import COORDINATOR_REFUSED, COORDINATOR_REFUSED_DESCRIPTION
from tests.unit.enginepair import ACCEPTED, RouterHarness
from tests.unit.router.fixtures import AutoLinkEntity as Entity, broker_answers

DECLARED = 0x33  # AMQP 1.0 §4.5.5
TRANSACTIONAL_STATE = 0x34  # §4.5.6


def coordinator(peer, name: str = "txn-ctrl") -> proton.Sender:
    """A sender to a transaction coordinator, as proton's Container.declare_transaction attaches it."""
    snd = peer.session.sender(name)
    snd.target.type = proton.Terminus.COORDINATOR
    caps = snd.target.capabilities
    caps.put_array(False, Data.SYMBOL)
    caps.enter()
    caps.put_symbol(symbol("amqp:local-transactions"))
    caps.exit()
    snd.open()
    peer.links[name] = snd
    return snd


def declare(peer, snd) -> proton.Delivery:
    return peer.send(snd, Message(body=Described(symbol("amqp:declare:list"), [None])))


def routed():
    h = RouterHarness(link_route_entities=[
        Entity(prefix="$coordinator", direction="in", connection="broker", addExternalPrefix="ignored."),
        Entity(prefix="q", direction="in", connection="broker"),
    ])
    return h, h.connect(name="broker"), h.connect()


def test_a_coordinator_is_routed_by_dollar_coordinator_and_declared_comes_back_with_its_id():
    h, broker, client = routed()
    ctrl = coordinator(client)
    h.pump()
    [b_ctrl] = broker_answers(broker)
    assert b_ctrl.remote_target.type == proton.Terminus.COORDINATOR
    assert b_ctrl.remote_target.address is None  # no prefix rewriting on a coordinator
    h.pump()
    assert ctrl.state & Endpoint.REMOTE_ACTIVE and ctrl.remote_target.type == proton.Terminus.COORDINATOR
    b_ctrl.flow(5)
    h.pump()
    d = declare(client, ctrl)
    h.pump()
    [got] = broker.received(b_ctrl)
    got.delivery.local.data = [b"txn-7"]
    got.delivery.update(DECLARED)
    got.delivery.settle()
    h.pump()
    assert d.remote_state == DECLARED and d.remote.data == [b"txn-7"]


def test_a_transfer_and_a_disposition_in_a_transaction_keep_their_transactional_state():
    h, broker, client = routed()
    snd = client.sender("q.orders", name="in-txn")
    h.pump()
    [b_rcv] = broker_answers(broker)
    h.pump()
    b_rcv.flow(1)
    h.pump()
    d = client.send(snd, Message(body="in a transaction"))
    d.local.data = [b"txn-7"]
    d.update(TRANSACTIONAL_STATE)
    h.pump()
    [got] = broker.received(b_rcv)
    assert got.delivery.remote_state == TRANSACTIONAL_STATE and got.delivery.remote.data == [b"txn-7"]
    got.delivery.local.data = [b"txn-7", Described(proton.ulong(0x24), [])]
    got.delivery.update(TRANSACTIONAL_STATE)
    h.pump()
    assert d.remote_state == TRANSACTIONAL_STATE
    assert d.remote.data == [b"txn-7", Described(proton.ulong(0x24), [])]
    got.delivery.update(ACCEPTED)
    got.delivery.settle()
    h.pump()
    assert d.remote_state == ACCEPTED and d.settled


def refused(h, client) -> None:
    ctrl = coordinator(client)
    h.pump()
    assert ctrl.state & Endpoint.REMOTE_CLOSED
    assert ctrl.remote_target.type == proton.Terminus.UNSPECIFIED  # null target, then the detach
    assert (ctrl.remote_condition.name, ctrl.remote_condition.description) == (
        COORDINATOR_REFUSED, COORDINATOR_REFUSED_DESCRIPTION)


def test_a_coordinator_without_a_covering_route_is_refused_with_dispatch_s_condition():
    h = RouterHarness(link_route_entities=[Entity(prefix="q", direction="in", connection="broker")])
    h.connect(name="broker")
    refused(h, h.connect())
    h = RouterHarness()  # no link routes at all
    refused(h, h.connect())
    h = RouterHarness(default_distribution="unavailable")  # DISPATCH-1453
    refused(h, h.connect())
