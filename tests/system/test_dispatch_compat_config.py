"""Dispatch compatibility (issue 13): a Qpid Dispatch 1.19 configuration that uses ``policy``, ``vhost``
with nested ``groups``, ``sslProfile`` (with ``uidFormat``/``uidNameMappingFile``) and SASL EXTERNAL starts
and behaves as in Dispatch, checked together on real routers with real proton clients.

The expected user ids follow Dispatch's ``tests/system_tests_user_id.py`` (uidFormat fields joined by
``;``, a mapping file translating them); the policy behaviour follows Dispatch's policy documentation
("Configuring authorization", vhost groups with ``users``, ``remoteHosts``, ``sources``, ``targets``).
Certificates are made at test time (tests/system/pki.py); no key is committed.
"""

from __future__ import annotations

import json

import pytest
from proton import ConnectionException, Message, SSLDomain
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached

from tests.system.clients import Consumer, Producer, close_all
from tests.system.harness import run_daemon_expecting_failure
from tests.system.pki import write_pki
from tests.system.test_router_policy import LOCAL_VHOST
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient

TIMEOUT = 20.0

def dispatch_config(pki: dict) -> str:
    """What a Dispatch user writes: client certificates authenticate with EXTERNAL; their common name
    (uidFormat n), translated by the mapping file, is the user the vhost's groups name."""
    return f"""
sslProfile {{
    name: clients
    certFile: {pki['server.pem']}
    privateKeyFile: {pki['server.key']}
    caCertFile: {pki['ca.pem']}
    uidFormat: n
    uidNameMappingFile: {pki['names.json']}
}}

listener {{
    name: x509
    host: 127.0.0.1
    port: 0
    sslProfile: clients
    requireSsl: yes
    authenticatePeer: yes
    saslMechanisms: EXTERNAL
}}

policy {{
    maxConnections: 20
    enableVhostPolicy: true
    defaultVhost: $default
}}
{LOCAL_VHOST}
vhost {{
    hostname: $default
    maxConnectionsPerUser: 1
    allowUnknownUser: false
    groups: {{
        apps: {{
            users: carol
            remoteHosts: *
            sources: carol.*, public.*
            targets: carol.*
            allowDynamicSource: true
        }}
        operators: {{
            users: dave.example
            remoteHosts: 127.0.0.1
            sources: *
            targets: *
            allowAnonymousSender: true
        }}
    }}
}}
"""


@pytest.fixture
def pki(tmp_path):
    files = write_pki(tmp_path, stranger=True, extra_clients=("dave", "eve"))
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"client.example": "carol"}))
    files["names.json"] = str(names)
    return files


def domain(pki, cert: str) -> SSLDomain:
    d = SSLDomain(SSLDomain.MODE_CLIENT)
    d.set_trusted_ca_db(pki["ca.pem"])
    d.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    d.set_credentials(pki[cert + ".pem"], pki[cert + ".key"], None)
    return d


def login(router, pki, cert: str) -> BlockingConnection:
    return BlockingConnection(f"amqps://localhost:{router.ports['x509']}", timeout=TIMEOUT,
                              ssl_domain=domain(pki, cert), allowed_mechs="EXTERNAL")


def refused(make) -> str:
    with pytest.raises(ConnectionException) as info:
        make().close()
    return str(info.value)


def management(router) -> ManagementClient:
    return ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT)


def test_policy_vhost_groups_ssl_profile_and_external_together(router_factory, pki):
    router = router_factory(dispatch_config(pki), listener_extra="policyVhost: local")
    carol = login(router, pki, "client")
    dave = login(router, pki, "dave")
    try:
        with management(router) as client:
            users = {r["user"]: r for r in client.query("org.apache.qpid.dispatch.connection",
                                                        ["user", "sasl", "isEncrypted"])}
        assert users["carol"]["sasl"] == "EXTERNAL" and users["carol"]["isEncrypted"] is True, users
        assert "dave.example" in users, users

        # carol's group: her own addresses both ways, public.* to read only
        inbox = carol.create_receiver("carol.inbox", credit=5)
        carol.create_sender("carol.inbox", options=AtMostOnce()).send(Message(body="to myself"))
        assert inbox.receive(timeout=TIMEOUT).body == "to myself"
        carol.create_receiver("public.news", credit=5)
        for make in (lambda: carol.create_sender("public.news"), lambda: carol.create_receiver("dave.inbox"),
                     lambda: carol.create_sender(None)):
            with pytest.raises(LinkDetached) as info:
                make()
            assert "amqp:unauthorized-access" in str(info.value), info.value
        # dave's group: anything, anonymous senders too
        dave.create_sender(None, options=AtMostOnce()).send(Message(address="carol.inbox", body="from dave"))
        dave.create_receiver("dave.inbox")   # the attach round trip pumps dave's connection: the message is out
        assert inbox.receive(timeout=TIMEOUT).body == "from dave"

        # maxConnectionsPerUser 1; a user in no group (allowUnknownUser false); no certificate trusted
        assert "amqp:resource-limit-exceeded" in refused(lambda: login(router, pki, "client"))
        assert "amqp:resource-limit-exceeded" in refused(lambda: login(router, pki, "eve"))
        refused(lambda: login(router, pki, "stranger"))
        refused(lambda: BlockingConnection(f"amqp://127.0.0.1:{router.ports['x509']}", timeout=TIMEOUT,
                                           allowed_mechs="ANONYMOUS"))
    finally:
        carol.close()
        dave.close()
    with management(router) as client:
        stats = {r["hostname"]: r for r in client.query("org.apache.qpid.dispatch.vhostStats")}["$default"]
        vhost = {r["hostname"]: r for r in client.query("org.apache.qpid.dispatch.vhost")}["$default"]
    assert stats["connectionsDenied"] == 2 and stats["connectionsApproved"] == 2, stats
    assert stats["senderDenied"] == 2 and stats["receiverDenied"] == 1, stats
    assert set(vhost["groups"]) == {"apps", "operators"}, vhost
    assert "DENY AMQP Open for user 'eve.example'" in router.stderr_text()


def test_inter_router_connection_authenticated_by_certificate_with_external(router_factory, pki):
    """Dispatch's usual mesh set-up: the connector's sslProfile presents a client certificate and
    ``saslMechanisms: EXTERNAL`` logs in with it; the listener requires it."""
    listener = f"""
sslProfile {{
    name: mesh
    certFile: {pki['server.pem']}
    privateKeyFile: {pki['server.key']}
    caCertFile: {pki['ca.pem']}
    uidFormat: on
}}
listener {{
    name: inter-router
    host: 127.0.0.1
    port: 0
    role: inter-router
    sslProfile: mesh
    requireSsl: yes
    authenticatePeer: yes
    saslMechanisms: EXTERNAL
}}
"""
    a = router_factory(listener, router_id="Router.A", mode="interior")

    def connector(cert: str) -> str:
        return f"""
sslProfile {{
    name: mesh-client
    certFile: {pki[cert + '.pem']}
    privateKeyFile: {pki[cert + '.key']}
    caCertFile: {pki['ca.pem']}
}}
connector {{
    name: to-a
    host: localhost
    port: {a.ports['inter-router']}
    role: inter-router
    sslProfile: mesh-client
    saslMechanisms: EXTERNAL
    retryDelaySeconds: 0.2
    retryMaxDelaySeconds: 0.5
}}
"""
    b = router_factory(connector("dave"), router_id="Router.B", mode="interior")
    consumer = Consumer(b.url, "mesh/q", credit=10).start()
    producer = None
    try:
        consumer.wait_ready()
        producer = Producer(a.url, "mesh/q", count=3).start()
        producer.wait(TIMEOUT)
        assert producer.outcomes == {"accepted": 3}
        wait_for(lambda: consumer.ids == [0, 1, 2], "the consumer on B to get the messages from A")
        with management(a) as client:
            [row] = [r for r in client.query("org.apache.qpid.dispatch.connection", ["user", "sasl", "role"])
                     if r["role"] == "inter-router"]
        organization = "trustme"   # trustme's leaf certificates carry O=trustme v<version>
        assert row["sasl"] == "EXTERNAL" and row["user"].startswith(organization), row
        assert row["user"].endswith(";dave.example"), row
    finally:
        close_all([c for c in (consumer, producer) if c is not None])
    # A certificate from another CA does not get in.
    c = router_factory(connector("stranger"), router_id="Router.C", mode="interior")
    wait_for(lambda: c.stderr_text().count(f"connection to localhost:{a.ports['inter-router']} ended") >= 2,
             "Router.C's certificate to be refused (twice)")


@pytest.mark.parametrize("attribute", ["uidFormat", "uidNameMappingFile"])
def test_bad_uid_format_or_mapping_file_stops_start_up_with_file_and_line(pki, tmp_path, attribute):
    bad_names = tmp_path / "bad.json"
    bad_names.write_text("[1, 2]")
    value = "nx" if attribute == "uidFormat" else bad_names
    conf = (f"router {{\n    id: Router.Bad\n}}\nsslProfile {{\n    name: p\n    certFile: {pki['server.pem']}\n"
            f"    privateKeyFile: {pki['server.key']}\n    {attribute}: {value}\n}}\n")
    code, stderr = run_daemon_expecting_failure(conf, tmp_path)
    assert code == 2, stderr
    assert "bad.conf:8:" in stderr and attribute in stderr, stderr
