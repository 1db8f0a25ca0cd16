"""A network connector to a secured broker: ``ssl://`` in the URI means TLS (the certificate checked against
``trustStorePath``), and ``userName`` without ``password`` logs in with the password from the connecting
broker's credentials store (broker-credentials.properties beside broker.xml), never from the connector line.
"""

from __future__ import annotations

import subprocess
import sys

import trustme
from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.harness import REPO_ROOT
from tests.system.netharness import NetBroker, wait_consumers
from tools.daemons import free_port

SECURED = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>secured</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>true</security-enabled>
  <acceptors>
    <acceptor name="amqps">tcp://127.0.0.1:{port}?protocols=AMQP;sslEnabled=true;keyStorePath=server.pem</acceptor>
  </acceptors>
</core></configuration>
"""

SOURCE = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>source</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>false</security-enabled>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:{aport}?protocols=AMQP</acceptor></acceptors>
  <networkConnectors>
    <networkConnector name="to-secured" userName="bridge"
        uri="static:(ssl://localhost:{port}?trustStorePath={ca})?initialReconnectDelay=100"/>
  </networkConnectors>
</core></configuration>
"""


def test_a_connector_logs_in_over_tls_with_the_password_from_the_credentials_store(tmp_path):
    ca = trustme.CA()
    sdir, adir = tmp_path / "secured", tmp_path / "source"
    sdir.mkdir()
    adir.mkdir()
    ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(sdir / "server.pem"))
    ca.cert_pem.write_to_path(str(adir / "ca.pem"))
    (sdir / "artemis-users.properties").write_text("bridge = br1dge-pw\nreader = r3ad\n")
    port = free_port()
    (sdir / "broker.xml").write_text(SECURED.format(port=port))
    aport = free_port()
    (adir / "broker.xml").write_text(SOURCE.format(port=port, aport=aport, ca=adir / "ca.pem"))
    # the password goes into the source broker's credentials store, read from standard input
    subprocess.run([sys.executable, "-m", "broker.daemon", "-c", str(adir / "broker.xml"), "credential", "add",
                    "--user", "bridge"], input="br1dge-pw\n", text=True, check=True, cwd=REPO_ROOT,
                   capture_output=True, timeout=TIMEOUT)
    assert "br1dge-pw" not in (adir / "broker.xml").read_text()
    secured = BrokerProcess(sdir / "broker.xml", sdir).start()
    source = NetBroker("source", aport, adir).start()
    try:
        from proton import SSLDomain

        domain = SSLDomain(SSLDomain.MODE_CLIENT)
        domain.set_trusted_ca_db(str(adir / "ca.pem"))
        domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        conn = BlockingConnection(f"amqps://localhost:{port}", timeout=TIMEOUT, ssl_domain=domain,
                                  user="reader", password="r3ad", allowed_mechs="PLAIN")
        try:
            rx = conn.create_receiver("secret.jobs", credit=10)
            wait_consumers(source, "secret.jobs", 1)
            p = BlockingConnection(source.url, timeout=TIMEOUT)
            try:
                p.create_sender("secret.jobs").send(Message(body="over tls"))
            finally:
                p.close()
            assert rx.receive(TIMEOUT).body == "over tls"
            rx.accept()
        finally:
            conn.close()
        log = (sdir / "broker.stderr").read_text()
        assert "user 'bridge' (SCRAM-SHA-512)" in log, log[-2000:]
        assert "br1dge-pw" not in (adir / "broker.stderr").read_text()
    finally:
        assert source.stop() == 0
        assert secured.stop() == 0
