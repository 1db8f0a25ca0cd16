"""Dispatch compatibility (issue 13): what Qpid Dispatch 1.19's own management client does must work.

Dispatch's Python management client (``python/qpid_dispatch/management/client.py``, ``Node.connect(url,
router=ID)``) attaches a sender whose *target* is ``_topo/0/<ID>/$management`` and a dynamic receiver for the
replies, and sends requests without a ``to``. These tests do exactly that, with proton's blocking client.
"""

from __future__ import annotations

import uuid

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.system.clients import close_all
from tests.system.meshharness import Mesh
from wire import management as wm

TIMEOUT = 20.0


class DispatchNode:
    """What Dispatch's ``Node.connect(url, router=ID)`` attaches: a sender targeted at the management node's
    address and a dynamic receiver; requests carry no ``to``."""

    def __init__(self, url: str, address: str):
        self.connection = BlockingConnection(url, timeout=TIMEOUT)
        self.receiver = self.connection.create_receiver(None, dynamic=True, credit=10)
        self.reply_to = self.receiver.remote_source.address
        self.sender = self.connection.create_sender(address)

    def query(self, entity_type: str) -> wm.Response:
        cid = str(uuid.uuid4())
        msg = Message()
        msg.decode(wm.build_request("QUERY", type=wm.NODE_TYPE, name="self", entityType=entity_type,
                                    body={"attributeNames": []}, reply_to=self.reply_to, correlation_id=cid,
                                    to=None))
        self.sender.send(msg, timeout=TIMEOUT)      # RELEASED raises SendException, as in Dispatch's client
        while True:
            reply = self.receiver.receive(timeout=TIMEOUT)
            if self.receiver.fetcher.unsettled:   # routers send replies pre-settled
                self.receiver.accept()
            if str(reply.correlation_id) == cid:
                return wm.parse_response(reply)

    def close(self) -> None:
        self.connection.close()


@pytest.fixture
def mesh(tmp_path, router_factory):
    m = Mesh(tmp_path, None)
    yield m
    close_all()
    m.stop_all()


def test_management_of_another_router_through_a_link_addressed_sender(mesh):
    mesh.add("A")
    mesh.add("B", connect={"A": 1})
    mesh.wait_reply_route("B", "A")          # B's replies can reach a client of A
    for target in ("_topo/0/B/$management", "_topo/0/A/$management", "$management"):
        node = DispatchNode(mesh.url("A"), target)
        try:
            response = node.query("org.apache.qpid.dispatch.router")
            assert response.status == wm.OK, (target, response)
            [row] = [dict(zip(response.body["attributeNames"], r)) for r in response.body["results"]]
            assert row["id"] == ("A" if target != "_topo/0/B/$management" else "B"), (target, row)
        finally:
            node.close()


def test_management_stays_reachable_with_default_distribution_unavailable(router_factory):
    router = router_factory(router_extra="defaultDistribution: unavailable")
    for target in ("$management", f"_topo/0/{router.router_id}/$management", "_local/$management"):
        node = DispatchNode(router.url, target)
        try:
            assert node.query("org.apache.qpid.dispatch.router").status == wm.OK
        finally:
            node.close()


def test_management_of_an_interior_from_an_edge_through_a_link_addressed_sender(mesh):
    edge_listener = ("listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n"
                     "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")
    mesh.add("IA", sections=edge_listener)
    mesh.add("IB", listen=False, connect={"IA": 1})
    port = mesh["IA"].ports["edge"]
    mesh.add("EA", listen=False, mode="edge",
             sections=f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {port}\n    role: edge\n}}")
    mesh.wait_route("EA", "IB", TIMEOUT)
    mesh.wait_reply_route("IB", "EA", TIMEOUT)
    for target, expected in (("_topo/0/IB/$management", "IB"), ("_topo/0/IA/$management", "IA"),
                             ("_topo/0/EA/$management", "EA"), ("$management", "EA")):
        node = DispatchNode(mesh.url("EA"), target)
        try:
            response = node.query("org.apache.qpid.dispatch.router")
            assert response.status == wm.OK, (target, response)
            [row] = [dict(zip(response.body["attributeNames"], r)) for r in response.body["results"]]
            assert row["id"] == expected, (target, row)
        finally:
            node.close()


def test_management_refuses_an_inter_router_listener_on_a_standalone_router(router_factory):
    from tools.mgmtclient import ManagementClient

    router = router_factory()
    with ManagementClient(router.url.replace("amqp://", ""), timeout=TIMEOUT) as client:
        response = client.request("CREATE", type="org.apache.qpid.dispatch.listener", name="mesh",
                                  body={"host": "127.0.0.1", "port": "0", "role": "inter-router"})
        assert response.status == wm.BAD_REQUEST
        assert "standalone router cannot have an inter-router listener" in response.description
        names = [r["name"] for r in client.query("org.apache.qpid.dispatch.listener", ["name"])]
    assert "mesh" not in names
