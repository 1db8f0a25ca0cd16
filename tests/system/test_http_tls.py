"""HTTPS on real daemons (issue 18): tdrouterd's ``listener { http: yes  sslProfile: ... }`` and tdbroker's
``protocols=HTTP;sslEnabled=true;keyStorePath=...`` acceptor serve /healthz, /metrics and management (POST
and WSS) over TLS with the same certificate handling as their AMQP listeners; plain HTTP to a TLS-only port
gets no service. Certificates are made at test time by trustme (tests/system/pki.py)."""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl

import pytest
import trustme

from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.harness import run_daemon_expecting_failure
from tests.system.pki import write_pki
from wire.users import Users
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request as WsRequest, TextMessage

pytestmark = pytest.mark.system


@pytest.fixture
def pki(tmp_path):
    files = write_pki(tmp_path, stranger=True)
    files["dir"] = str(tmp_path)
    return files


def profile(pki) -> str:
    return (f"sslProfile {{\n    name: web-tls\n    certFile: {pki['server.pem']}\n"
            f"    privateKeyFile: {pki['server.key']}\n    caCertFile: {pki['ca.pem']}\n}}\n")


def https_listener(extra: str = "") -> str:
    return ("listener {\n    name: web\n    host: 127.0.0.1\n    port: 0\n    http: yes\n"
            f"    sslProfile: web-tls\n{extra}}}\n")


def client_context(pki, cert: str | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki["ca.pem"])
    if cert is not None:
        ctx.load_cert_chain(pki[f"{cert}.pem"], pki[f"{cert}.key"])
    return ctx


def https(port: int, path: str, ctx: ssl.SSLContext, body=None, auth: tuple | None = None) -> tuple[int, str]:
    """(status, body) of one request over HTTPS to localhost (the name the server certificate carries)."""
    conn = http.client.HTTPSConnection("localhost", port, context=ctx, timeout=TIMEOUT)
    headers = {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    try:
        conn.request("POST" if data is not None else "GET", path, body=data, headers=headers)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def plain_http(port: int, path: str) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read().decode()
    finally:
        conn.close()


def wss_call(port: int, ctx: ssl.SSLContext, request: dict) -> dict:
    """One JSON management request over the WebSocket endpoint, through TLS (wss://)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as sock:
            ws = WSConnection(ConnectionType.CLIENT)
            sock.sendall(ws.send(WsRequest(host="localhost", target="/api/ws")))
            while True:
                data = sock.recv(65536)
                assert data, "the server closed the WebSocket"
                ws.receive_data(data)
                for event in ws.events():
                    if isinstance(event, AcceptConnection):
                        sock.sendall(ws.send(TextMessage(data=json.dumps(request))))
                    elif isinstance(event, TextMessage):
                        return json.loads(event.data)


def assert_plain_http_refused(port: int) -> None:
    """Plain HTTP to a TLS-only port is not served: answered 400 naming https, then closed."""
    status, body = plain_http(port, "/healthz")
    assert status == 400 and "https://" in body, (status, body)


QUERY_ROUTER = {"operation": "QUERY", "entityType": "router", "attributeNames": ["id"]}


def test_router_https_listener_serves_healthz_metrics_and_management(router_factory, pki):
    router = router_factory(profile(pki) + https_listener("    requireSsl: yes\n"))
    port = router.ports["web"]
    assert router.listeners["web"].role == "https"  # its start-up line says what it serves
    ctx = client_context(pki)
    status, body = https(port, "/healthz", ctx)
    assert status == 200 and json.loads(body)["status"] == "ready"
    status, body = https(port, "/metrics", ctx)
    assert status == 200 and 'tdrouter_connections{router="Router.A"}' in body
    status, body = https(port, "/api/management", ctx, QUERY_ROUTER)
    assert status == 200 and json.loads(body)["body"]["results"] == [["Router.A"]], body
    answer = wss_call(port, ctx, dict(QUERY_ROUTER, id=3))
    assert answer["id"] == 3 and answer["body"]["results"] == [["Router.A"]]
    assert_plain_http_refused(port)
    # A client that does not trust the router's CA fails the handshake: the certificate is the profile's.
    with pytest.raises(ssl.SSLCertVerificationError):
        https(port, "/healthz", ssl.create_default_context())


def test_router_https_listener_without_require_ssl_also_serves_plain_http(router_factory, pki):
    """requireSsl: no (Dispatch's default) takes TLS and plaintext on the port, as an AMQP listener does."""
    router = router_factory(profile(pki) + https_listener())
    port = router.ports["web"]
    assert https(port, "/healthz", client_context(pki))[0] == 200
    assert plain_http(port, "/healthz")[0] == 200


def test_router_https_authenticate_peer_needs_a_client_certificate(router_factory, pki, tmp_path):
    """authenticatePeer: yes on an HTTPS listener: as on an AMQP listener, the client presents a certificate
    signed by the profile's CA, and it logs the request in (Basic credentials are then optional)."""
    users = Users()
    users.set_password("alice", "wonderland")
    users.save(str(tmp_path / "users.db"))
    (tmp_path / "qdrouterd.conf").write_text("mech_list: ANONYMOUS PLAIN\nsasldb_path: users.db\n")
    router = router_factory(profile(pki) + https_listener("    requireSsl: yes\n    authenticatePeer: yes\n"),
                            router_extra=f"saslConfigDir: {tmp_path}")
    port = router.ports["web"]
    status, body = https(port, "/api/management", client_context(pki, "client"), QUERY_ROUTER)
    assert status == 200 and json.loads(body)["body"]["results"] == [["Router.A"]], body
    assert https(port, "/metrics", client_context(pki, "client"), auth=("alice", "wonderland"))[0] == 200
    assert https(port, "/metrics", client_context(pki, "client"), auth=("alice", "wrong"))[0] == 401
    for cert in (None, "stranger"):   # no certificate, or one from another CA: the handshake fails
        with pytest.raises((ssl.SSLError, ConnectionError)):
            https(port, "/healthz", client_context(pki, cert))


def test_router_https_listener_with_a_bad_profile_is_refused_at_start_up(tmp_path, pki):
    code, stderr = run_daemon_expecting_failure(
        "router {\n    id: R\n}\n"
        f"sslProfile {{\n    name: web-tls\n    certFile: {tmp_path / 'missing.pem'}\n}}\n"
        "listener {\n    name: web\n    host: 127.0.0.1\n    port: 0\n    http: yes\n    sslProfile: web-tls\n}\n",
        tmp_path)
    assert code != 0 and "bad.conf:6" in stderr and "missing.pem" in stderr, stderr
    assert "Traceback" not in stderr


BROKER_HTTPS_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>broker-web</name>
  <journal-directory>{journal}</journal-directory>
  {security}
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
    <acceptor name="web">tcp://127.0.0.1:0?protocols=HTTP;sslEnabled=true;keyStorePath=server.pem;trustStorePath=ca.pem{params}</acceptor>
  </acceptors>
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
  </addresses>
</core></configuration>
"""


@pytest.fixture
def broker_ca():
    return trustme.CA()


@pytest.fixture
def https_broker(tmp_path, broker_ca):
    brokers = []

    def make(security: str = "", params: str = "") -> BrokerProcess:
        broker_ca.issue_cert("localhost", "127.0.0.1").private_key_and_cert_chain_pem.write_to_path(
            str(tmp_path / "server.pem"))
        broker_ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        conf = tmp_path / "broker.xml"
        conf.write_text(BROKER_HTTPS_XML.format(journal=tmp_path / "journal", security=security, params=params))
        b = BrokerProcess(conf, tmp_path)
        brokers.append(b)
        b.start()
        return b

    yield make
    for b in brokers:
        assert b.stop() == 0


def test_broker_https_acceptor_serves_healthz_metrics_and_management(https_broker, broker_ca, tmp_path):
    (tmp_path / "artemis-users.properties").write_text("admin = secret\n")
    (tmp_path / "artemis-roles.properties").write_text("admins = admin\n")
    broker = https_broker("<security-enabled>true</security-enabled>")
    port = broker.ports["web"]
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    status, body = https(port, "/healthz", ctx)
    assert status == 200 and json.loads(body)["broker"] == "broker-web"
    assert https(port, "/metrics", ctx)[0] == 401
    status, body = https(port, "/metrics", ctx, auth=("admin", "secret"))
    assert status == 200 and 'queue="orders"' in body
    query = {"operation": "QUERY", "entityType": "queue"}
    status, body = https(port, "/api/management", ctx, query, auth=("admin", "secret"))
    assert status == 200 and ["orders"] == [r[0] for r in json.loads(body)["body"]["results"]], body
    assert_plain_http_refused(port)


def test_broker_https_acceptor_need_client_auth(https_broker, broker_ca, tmp_path):
    broker = https_broker(params=";needClientAuth=true")
    port = broker.ports["web"]
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
    with pytest.raises((ssl.SSLError, ConnectionError)):
        https(port, "/healthz", ctx)
    broker_ca.issue_cert("client.example").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "client.pem"))
    ctx.load_cert_chain(str(tmp_path / "client.pem"))
    status, body = https(port, "/healthz", ctx)
    assert status == 200 and json.loads(body)["broker"] == "broker-web"
