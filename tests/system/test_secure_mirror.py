"""A broker mirror to a replica that requires TLS and a SASL login: the mirror goes over the same TLS and
SASL as every broker connection (``sslEnabled``/``trustStorePath`` on the connection's URI, ``user`` and
``password``), and the replica applies a source's events only for a user with the ``manage`` permission
(the events create and delete queues, as management does) -- another user's mirror link is refused and the
source's management says why."""

from __future__ import annotations

import pytest
import trustme
from proton import Message, SSLDomain
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.waiting import wait_for
from tools.daemons import free_port
from tools.mgmtclient import ManagementClient

REPLICA = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>replica</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>true</security-enabled>
  <acceptors>
    <acceptor name="amqps">tcp://127.0.0.1:{port}?protocols=AMQP;sslEnabled=true;keyStorePath=server.pem</acceptor>
  </acceptors>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
  <security-settings>
    <security-setting match="#">
      <permission type="manage" roles="admin"/>
      <permission type="consume" roles="admin"/>
    </security-setting>
  </security-settings>
</core></configuration>
"""

SOURCE = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>source</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>false</security-enabled>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:{aport}?protocols=AMQP</acceptor></acceptors>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
  <broker-connections>
    <amqp-connection uri="tcp://localhost:{port}?sslEnabled=true;trustStorePath={ca}" name="dr"
        user="{user}" password="{password}" retry-interval="100"><mirror/></amqp-connection>
  </broker-connections>
</core></configuration>
"""


@pytest.fixture
def sites(tmp_path):
    ca = trustme.CA()
    rdir = tmp_path / "replica"
    rdir.mkdir()
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(rdir / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    (rdir / "artemis-users.properties").write_text("mirror = m1rr0r-pw\npete = p3te\n")
    (rdir / "artemis-roles.properties").write_text("admin = mirror\nproducer = pete\n")
    port = free_port()
    (rdir / "broker.xml").write_text(REPLICA.format(port=port))
    started = []

    def start(user: str, password: str):
        replica = BrokerProcess(rdir / "broker.xml", rdir).start()
        started.append(replica)
        sdir = tmp_path / f"source-{user}"
        sdir.mkdir()
        aport = free_port()
        (sdir / "broker.xml").write_text(SOURCE.format(port=port, aport=aport, ca=tmp_path / "ca.pem",
                                                       user=user, password=password))
        source = BrokerProcess(sdir / "broker.xml", sdir).start()
        started.append(source)
        return source, aport, port

    yield start, tmp_path / "ca.pem"
    for p in reversed(started):
        p.stop()


def mirror_row(aport: int) -> dict:
    mgmt = ManagementClient(f"127.0.0.1:{aport}", timeout=TIMEOUT)
    try:
        return mgmt.query("org.apache.activemq.artemis.mirror", ["name", "state", "lastError", "queuedEvents",
                                                                  "remoteBrokerId"])[0]
    finally:
        mgmt.close()


def test_a_mirror_over_tls_with_a_sasl_login_reaches_the_replica(sites):
    start, ca = sites
    source, aport, port = start("mirror", "m1rr0r-pw")
    wait_for(lambda: mirror_row(aport)["remoteBrokerId"] != "", "the replica to answer the mirror link", TIMEOUT)
    conn = BlockingConnection(f"127.0.0.1:{aport}", timeout=TIMEOUT)
    try:
        conn.create_sender("orders").send(Message(body="over tls", durable=True))
    finally:
        conn.close()
    wait_for(lambda: mirror_row(aport)["queuedEvents"] == 0, "the event to be confirmed", TIMEOUT)
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(ca))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    replica = BlockingConnection(f"amqps://localhost:{port}", timeout=TIMEOUT, ssl_domain=domain,
                                 user="mirror", password="m1rr0r-pw", allowed_mechs="SCRAM-SHA-256 PLAIN")
    try:
        rx = replica.create_receiver("orders", credit=1)
        assert rx.receive(TIMEOUT).body == "over tls"
        rx.accept()
    finally:
        replica.close()


def test_a_user_without_manage_cannot_mirror(sites):
    start, _ca = sites
    _source, aport, _port = start("pete", "p3te")
    wait_for(lambda: "manage" in mirror_row(aport)["lastError"], "the refusal in the source's lastError", TIMEOUT)
    assert mirror_row(aport)["remoteBrokerId"] == ""
