"""TLS and SASL on a real tdrouterd with real proton clients (issue 12).

The router is configured as Qpid Dispatch 1.19 users configure theirs: ``sslProfile`` sections, a listener
with ``sslProfile``, ``requireSsl`` and ``authenticatePeer``, and ``router { saslConfigDir }`` naming a
Cyrus-style ``qdrouterd.conf`` whose ``sasldb_path`` is our users file. Certificates are made at test time by
trustme and the users file by wire.users: no key or password is committed.
"""

from __future__ import annotations


import pytest
from proton import SSLDomain
from proton import ConnectionException, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from tests.system.clients import Consumer, Producer, close_all
from tests.system.pki import write_pki
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient
from wire.users import Users

TIMEOUT = 20.0
USER, PASSWORD = "alice", "wonderland"
ROUTER_USER, ROUTER_PASSWORD = "router-b", "mesh-secret"


@pytest.fixture
def pki(tmp_path):
    """CA, server certificate for localhost, a client certificate it signed and one from another CA; the
    users file (alice, router-b) and the SASL configuration naming it."""
    files = write_pki(tmp_path, stranger=True, expired=True)
    users = Users()
    users.set_password(USER, PASSWORD)
    users.set_password(ROUTER_USER, ROUTER_PASSWORD)
    users.save(str(tmp_path / "users.db"))
    (tmp_path / "qdrouterd.conf").write_text("mech_list: ANONYMOUS PLAIN SCRAM-SHA-256 SCRAM-SHA-512\nsasldb_path: users.db\n")
    files["dir"] = str(tmp_path)
    return files


def profile(pki, name="tls", cert="server"):
    return (f"sslProfile {{\n    name: {name}\n    certFile: {pki[cert + '.pem']}\n"
            f"    privateKeyFile: {pki[cert + '.key']}\n    caCertFile: {pki['ca.pem']}\n}}\n")


def secure_router(router_factory, pki, listeners: str, **kw):
    return router_factory(profile(pki) + listeners, router_extra=f"saslConfigDir: {pki['dir']}", **kw)


def client_domain(pki, cert: str | None = "client") -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(pki["ca.pem"])
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    if cert is not None:
        domain.set_credentials(pki[cert + ".pem"], pki[cert + ".key"], None)
    return domain


def connect(url, **kw) -> BlockingConnection:
    return BlockingConnection(url, timeout=TIMEOUT, **kw)


def refused(url, **kw) -> str:
    with pytest.raises(ConnectionException) as info:
        connect(url, **kw).close()
    return str(info.value)


AUTH_LISTENER = ("listener {\n    name: secure\n    host: 127.0.0.1\n    port: 0\n    sslProfile: tls\n"
                 "    requireSsl: yes\n    authenticatePeer: yes\n    saslMechanisms: PLAIN SCRAM-SHA-256\n}\n")


def connection_rows(router) -> list[dict]:
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as client:
        return client.query("org.apache.qpid.dispatch.connection",
                            ["user", "sasl", "isEncrypted", "sslProto", "sslCipher", "sslSsf", "dir", "role"])


def test_plain_over_tls_logs_in_and_the_connection_entity_shows_the_user(router_factory, pki):
    router = secure_router(router_factory, pki, AUTH_LISTENER)
    url = f"amqps://localhost:{router.ports['secure']}"
    conn = connect(url, ssl_domain=client_domain(pki), allowed_mechs="PLAIN", user=USER, password=PASSWORD)
    try:
        receiver = conn.create_receiver("q", credit=1)   # first: the router gives the sender credit for it
        sender = conn.create_sender("q", options=AtMostOnce())   # presettled: send() does not wait for the receiver
        sender.send(Message(body="over tls"))
        assert receiver.receive(timeout=TIMEOUT).body == "over tls"
        [row] = [r for r in connection_rows(router) if r["user"] == USER]
        assert row["sasl"] == "PLAIN" and row["isEncrypted"] is True
        assert row["sslProto"].startswith("TLSv1.") and row["sslCipher"] and row["sslSsf"] >= 128
        plain = [r for r in connection_rows(router) if r["user"] != USER and r["dir"] == "in"]
        assert plain and all(r["isEncrypted"] is False and r["sslProto"] is None for r in plain)
    finally:
        conn.close()


@pytest.mark.parametrize("user,password", [(USER, "wrong"), ("mallory", PASSWORD)])
def test_wrong_password_and_unknown_user_are_refused(router_factory, pki, user, password):
    router = secure_router(router_factory, pki, AUTH_LISTENER)
    message = refused(f"amqps://localhost:{router.ports['secure']}", ssl_domain=client_domain(pki),
                      allowed_mechs="PLAIN", user=user, password=password)
    assert "amqp:unauthorized-access" in message and "Authentication failed" in message, message
    wait_for(lambda: "authentication failed: wrong password or unknown user" in router.stderr_text(),
             "the refusal logged")


def test_anonymous_is_refused_on_authenticate_peer(router_factory, pki):
    router = secure_router(router_factory, pki, AUTH_LISTENER)
    message = refused(f"amqps://localhost:{router.ports['secure']}", ssl_domain=client_domain(pki),
                      allowed_mechs="ANONYMOUS")
    assert "amqp:unauthorized-access" in message, message   # ANONYMOUS is not offered: nothing in common


def test_plaintext_to_a_require_ssl_listener_is_refused(router_factory, pki):
    router = secure_router(router_factory, pki, AUTH_LISTENER)
    message = refused(f"amqp://127.0.0.1:{router.ports['secure']}", allowed_mechs="PLAIN", user=USER,
                      password=PASSWORD, allow_insecure_mechs=True)
    assert "amqp:unauthorized-access" in message and "requireSsl" in message, message
    wait_for(lambda: "plaintext on a listener that requires TLS" in router.stderr_text(), "the refusal logged")


@pytest.mark.parametrize("cert", ["stranger", None, "expired"])
def test_untrusted_missing_or_expired_client_certificate_is_refused(router_factory, pki, cert):
    router = secure_router(router_factory, pki, AUTH_LISTENER)
    refused(f"amqps://localhost:{router.ports['secure']}", ssl_domain=client_domain(pki, cert),
            allowed_mechs="PLAIN", user=USER, password=PASSWORD)
    wait_for(lambda: "TLS handshake failed" in router.stderr_text(), "the failed handshake logged")
    if cert == "expired":
        assert "certificate has expired" in router.stderr_text()
    # the same login with the good certificate goes through
    connect(f"amqps://localhost:{router.ports['secure']}", ssl_domain=client_domain(pki, "client"),
            allowed_mechs="PLAIN", user=USER, password=PASSWORD).close()


def test_tls_listener_without_require_ssl_takes_tls_and_plaintext(router_factory, pki):
    router = secure_router(router_factory, pki, "listener {\n    name: both\n    host: 127.0.0.1\n    port: 0\n"
                                                "    sslProfile: tls\n}\n")
    port = router.ports["both"]
    connect(f"amqps://localhost:{port}", ssl_domain=client_domain(pki, None), allowed_mechs="ANONYMOUS").close()
    connect(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS").close()


def _inter_router_listener() -> str:
    return ("listener {\n    name: inter-router\n    host: 127.0.0.1\n    port: 0\n    role: inter-router\n"
            "    sslProfile: tls\n    requireSsl: yes\n    authenticatePeer: yes\n"
            "    saslMechanisms: SCRAM-SHA-256\n}\n")


def _inter_router_connector(pki, port: int, password: str) -> str:
    return (profile(pki, "mesh", cert="client")
            + f"connector {{\n    name: to-a\n    host: localhost\n    port: {port}\n    role: inter-router\n"
              f"    sslProfile: mesh\n    saslMechanisms: SCRAM-SHA-256\n    saslUsername: {ROUTER_USER}\n"
              f"    saslPassword: pass:{password}\n    retryDelaySeconds: 0.2\n    retryMaxDelaySeconds: 0.5\n}}\n")


def test_inter_router_over_tls_and_scram_routes_and_a_router_without_credentials_is_refused(router_factory, pki):
    a = secure_router(router_factory, pki, _inter_router_listener(), router_id="Router.A", mode="interior")
    port = a.ports["inter-router"]
    b = router_factory(_inter_router_connector(pki, port, ROUTER_PASSWORD), router_id="Router.B", mode="interior")
    consumer = Consumer(b.url, "mesh/q", credit=10).start()
    producer = None
    try:
        consumer.wait_ready()
        producer = Producer(a.url, "mesh/q", count=3).start()
        producer.wait(TIMEOUT)
        assert producer.outcomes == {"accepted": 3}
        wait_for(lambda: consumer.ids == [0, 1, 2], "the consumer on B to get the messages from A")
        [row] = [r for r in connection_rows(a) if r["role"] == "inter-router"]
        assert (row["user"], row["sasl"], row["isEncrypted"]) == (ROUTER_USER, "SCRAM-SHA-256", True)
    finally:
        close_all([c for c in (consumer, producer) if c is not None])

    rogue = router_factory(_inter_router_connector(pki, port, "guess"), router_id="Router.C", mode="interior")
    wait_for(lambda: rogue.stderr_text().count(f"connection to localhost:{port} ended") >= 2,
             "the rogue router's logins to be refused (twice)")
    roles = [r["role"] for r in connection_rows(a)]
    assert roles.count("inter-router") == 1, roles     # only Router.B


def test_management_creates_a_tls_listener_naming_a_configured_profile(router_factory, pki):
    """A listener CREATEd through management with sslProfile/requireSsl/authenticatePeer is enforced like
    a configured one; naming an undefined profile is a 400, and the key password is never returned."""
    from tests.system.harness import free_port

    router = secure_router(router_factory, pki, "")
    port = free_port()
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as client:
        bad = client.request("CREATE", type="org.apache.qpid.dispatch.listener", name="bad",
                             body={"host": "127.0.0.1", "port": str(port), "sslProfile": "nope"})
        assert bad.status == 400 and "sslProfile 'nope' is not defined" in bad.description, bad.description
        client.call("CREATE", type="org.apache.qpid.dispatch.listener", name="made",
                    body={"host": "127.0.0.1", "port": str(port), "sslProfile": "tls", "requireSsl": True,
                          "authenticatePeer": True, "saslMechanisms": "PLAIN"})
    url = f"amqps://localhost:{port}"
    connect(url, ssl_domain=client_domain(pki), allowed_mechs="PLAIN", user=USER, password=PASSWORD).close()
    message = refused(url, ssl_domain=client_domain(pki), allowed_mechs="PLAIN", user=USER, password="wrong")
    assert "amqp:unauthorized-access" in message, message
    refused(f"amqp://127.0.0.1:{port}", allowed_mechs="ANONYMOUS")


def test_sasl_external_logs_in_as_the_client_certificate_subject(router_factory, pki):
    router = secure_router(router_factory, pki, "listener {\n    name: x509\n    host: 127.0.0.1\n    port: 0\n"
                                                "    sslProfile: tls\n    requireSsl: yes\n    authenticatePeer: yes\n"
                                                "    saslMechanisms: EXTERNAL\n}\n")
    conn = connect(f"amqps://localhost:{router.ports['x509']}", ssl_domain=client_domain(pki),
                   allowed_mechs="EXTERNAL")
    try:
        [row] = [r for r in connection_rows(router) if r["sasl"] == "EXTERNAL"]
        assert "CN=client.example" in row["user"] and row["isEncrypted"] is True, row
    finally:
        conn.close()
    refused(f"amqps://localhost:{router.ports['x509']}", ssl_domain=client_domain(pki, "stranger"),
            allowed_mechs="EXTERNAL")


# rhea (Node) logs in with PLAIN over TLS and a client certificate, and sends a message to itself.
# rhea 3 ships no SCRAM client: tests/system/test_rhea_security.py logs rhea in with SCRAM-SHA-256/512 over
# TLS through our own mechanism, tests/clients/rhea/scram.js.
RHEA_PLAIN_OVER_TLS = r"""
const fs = require('fs');
const rhea = require('rhea');
const [port, ca, cert, key, user, password] = process.argv.slice(1);
const container = rhea.create_container();
const done = (result) => { console.log(JSON.stringify(result)); process.exit(0); };
setTimeout(() => done({error: 'timed out'}), 15000);
container.on('message', (ctx) => { done({body: ctx.message.body}); });
container.on('sendable', (ctx) => {
    if (!ctx.sender.sent) { ctx.sender.sent = true; ctx.sender.send({body: 'from rhea over tls'}); }
});
container.on('connection_error', (ctx) => done({error: String(ctx.connection.error && ctx.connection.error.condition)}));
container.on('disconnected', (ctx) => done({error: 'disconnected: ' + String(ctx.error || ctx.connection.error)}));
const conn = container.connect({host: 'localhost', port: Number(port), transport: 'tls', servername: 'localhost',
    ca: fs.readFileSync(ca), cert: fs.readFileSync(cert), key: fs.readFileSync(key),
    username: user, password: password, reconnect: false});
conn.open_receiver('rhea-q');
conn.open_sender('rhea-q');
"""


@pytest.mark.parametrize("password,expected", [(PASSWORD, {"body": "from rhea over tls"}), ("wrong", None)])
def test_rhea_plain_over_tls(router_factory, pki, password, expected):
    import json
    import subprocess

    from tests.system.rhea import RHEA_DIR, require_rhea

    node = require_rhea()
    router = secure_router(router_factory, pki, AUTH_LISTENER)
    proc = subprocess.run([node, "-e", RHEA_PLAIN_OVER_TLS, str(router.ports["secure"]), pki["ca.pem"],
                           pki["client.pem"], pki["client.key"], USER, password],
                          cwd=RHEA_DIR, capture_output=True, text=True, timeout=60)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if expected is not None:
        assert result == expected, (result, proc.stderr)
    else:
        assert "error" in result and "body" not in result, result
        wait_for(lambda: "authentication failed" in router.stderr_text(), "the refusal logged")
