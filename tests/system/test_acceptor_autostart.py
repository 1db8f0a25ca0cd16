"""A real tdbroker with an acceptor configured ``autoStart=false`` (Artemis' acceptor parameter; a mirror
replica's client acceptor, issue 16): it says so at start-up, refuses connections while the other acceptor
serves, listens once the management operation ``startAcceptor`` starts it, and ``stopAcceptor`` closes its
connections and stops listening again."""

from __future__ import annotations

import socket

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, BrokerProcess, receive_messages, send_messages
from tests.system.harness import free_port
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient

XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>replica</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>false</security-enabled>
  <acceptors>
    <acceptor name="mirror">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
    <acceptor name="clients">tcp://127.0.0.1:{clients_port}?protocols=AMQP;autoStart=false</acceptor>
  </acceptors>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
</core></configuration>
"""

ACCEPTOR = "acceptor"


def refuses(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port."""
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def acceptor_row(mc: ManagementClient, name: str) -> dict:
    [row] = [r for r in mc.query(ACCEPTOR, ["name", "started", "autoStart", "connections", "bound"])
             if r["name"] == name]
    return row


@pytest.fixture
def broker(tmp_path):
    clients_port = free_port()
    conf = tmp_path / "broker.xml"
    conf.write_text(XML.format(clients_port=clients_port))
    proc = BrokerProcess(conf, tmp_path).start()
    proc.clients_port = clients_port
    yield proc
    proc.stop()


def test_an_acceptor_with_auto_start_false_listens_only_once_started(broker):
    port = broker.clients_port
    lines = broker.stdout_lines
    assert "tdbroker: acceptor clients not started (autoStart=false)" in [line.strip() for line in lines]
    assert list(broker.ports) == ["mirror"]
    ready = [line.strip() for line in lines].index("tdbroker: ready")
    assert [line.strip() for line in lines].index("tdbroker: acceptor clients not started (autoStart=false)") < ready
    assert refuses(port)

    # The started acceptor serves meanwhile.
    mirror_url = f"127.0.0.1:{broker.ports['mirror']}"
    send_messages(mirror_url, "orders", [Message(body="m1"), Message(body="m2")])
    assert refuses(port)

    with ManagementClient(mirror_url, timeout=TIMEOUT) as mc:
        row = acceptor_row(mc, "clients")
        assert (row["started"], row["autoStart"], row["connections"]) == (False, False, 0)
        mc.call("startAcceptor", type=ACCEPTOR, name="clients")
        # start() binds before the operation answers: a client may connect at once.
        assert not refuses(port)
        assert acceptor_row(mc, "clients")["started"] is True
        # credit 1: a consumer keeps accepting past its count, and m2 is for the other acceptor's consumer
        [m1] = receive_messages(f"127.0.0.1:{port}", "orders", 1, credit=1, replenish=False)
        assert m1.body == "m1"

        conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=TIMEOUT)
        try:
            wait_for(lambda: acceptor_row(mc, "clients")["connections"] == 1, "the client's connection counted")
            mc.call("stopAcceptor", type=ACCEPTOR, name="clients")
            wait_for(lambda: acceptor_row(mc, "clients")["connections"] == 0, "the client's connection closed")
            assert refuses(port)
            with pytest.raises(Exception):
                conn.create_receiver("orders")   # the broker closed this connection
        finally:
            try:
                conn.close()
            except Exception:   # already closed by the broker
                pass
        row = acceptor_row(mc, "clients")
        assert (row["started"], row["bound"]) == (False, [])

    # The other acceptor never stopped serving; the message left for it is still there.
    [m2] = receive_messages(mirror_url, "orders", 1)
    assert m2.body == "m2"
