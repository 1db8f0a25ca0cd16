"""HTTP listeners of real daemons: tdrouterd's ``listener { http: yes }`` and tdbroker's acceptor with
``protocols=HTTP`` serve /metrics, /healthz, management as JSON (POST and WebSocket) and the console; with a
login required, nothing but /healthz is served without the right credentials."""

from __future__ import annotations

import base64
import json
import socket
import urllib.error
import urllib.request

import pytest
from proton import Message

from tests.system.brokerharness import TIMEOUT, BrokerProcess, send_messages
from tests.system.harness import run_daemon_expecting_failure
from tests.system.meshharness import Mesh
from wire.users import Users
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request as WsRequest, TextMessage

pytestmark = pytest.mark.system

HTTP_LISTENER = """
listener {
    name: web
    host: 127.0.0.1
    port: 0
    http: yes
%s}
"""


def http(port: int, path: str, body=None, auth: tuple | None = None) -> tuple[int, str, str]:
    """(status, content type, body) of one request."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method="POST" if data else "GET")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if auth is not None:
        req.add_header("Authorization", "Basic " + base64.b64encode(":".join(auth).encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            return resp.status, resp.headers.get("Content-Type"), resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get("Content-Type"), err.read().decode()


def websocket_call(port: int, request: dict) -> dict:
    """One JSON management request over the WebSocket endpoint (wsproto as the client)."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
        ws = WSConnection(ConnectionType.CLIENT)
        sock.sendall(ws.send(WsRequest(host="127.0.0.1", target="/api/ws")))
        while True:
            ws.receive_data(sock.recv(65536))
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    sock.sendall(ws.send(TextMessage(data=json.dumps(request))))
                elif isinstance(event, TextMessage):
                    return json.loads(event.data)


def metric(text: str, prefix: str) -> float:
    """The value of the first sample line starting with ``prefix``."""
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {prefix!r} in:\n{text[:2000]}")


def test_router_metrics_healthz_and_management(router_factory):
    router = router_factory(HTTP_LISTENER % "")
    port = router.ports["web"]
    status, ctype, text = http(port, "/metrics")
    assert status == 200 and ctype.startswith("text/plain; version=0.0.4")
    assert metric(text, 'tdrouter_connections{router="Router.A"}') == 0
    assert metric(text, 'tdrouter_memory_resident_bytes{router="Router.A"}') > 1_000_000
    status, ctype, body = http(port, "/healthz")
    assert status == 200 and json.loads(body)["status"] == "ready"
    status, _, body = http(port, "/api/management", {"operation": "CREATE", "type": "router.config.address",
                                                    "name": "orders", "body": {"prefix": "orders",
                                                                               "distribution": "multicast"}})
    assert status == 200 and json.loads(body)["status"] == 201, body
    answer = websocket_call(port, {"id": 7, "operation": "QUERY", "entityType": "router.config.address",
                                   "attributeNames": ["name", "prefix", "distribution"]})
    assert answer["id"] == 7 and answer["status"] == 200
    assert ["orders", "orders", "multicast"] in answer["body"]["results"]
    status, ctype, page = http(port, "/")
    assert status == 200 and "console.js" in page
    assert http(port, "/console.js")[0] == 200


def test_router_http_login_as_on_amqp(router_factory, tmp_path):
    users = Users()
    users.set_password("alice", "wonderland")
    users.save(str(tmp_path / "users.db"))
    (tmp_path / "qdrouterd.conf").write_text("mech_list: ANONYMOUS PLAIN SCRAM-SHA-256\nsasldb_path: users.db\n")
    router = router_factory(HTTP_LISTENER % "    authenticatePeer: yes\n", router_extra=f"saslConfigDir: {tmp_path}")
    port = router.ports["web"]
    query = {"operation": "QUERY", "entityType": "router"}
    assert http(port, "/api/management", query)[0] == 401
    assert http(port, "/metrics")[0] == 401
    assert http(port, "/", auth=("alice", "wrong"))[0] == 401
    assert http(port, "/metrics", auth=("alice", "wonderland"))[0] == 200
    status, _, body = http(port, "/api/management", query, auth=("alice", "wonderland"))
    assert status == 200 and json.loads(body)["body"]["results"][0]
    assert http(port, "/healthz")[0] == 200   # a probe needs no login


def test_an_http_listener_port_in_use_is_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, stderr = run_daemon_expecting_failure(
            f"router {{\n    id: R\n}}\nlistener {{\n    port: 0\n    host: 127.0.0.1\n}}\n"
            f"listener {{\n    name: web\n    host: 127.0.0.1\n    port: {port}\n    http: yes\n}}\n", tmp_path)
    assert code == 1, stderr
    assert f"bad.conf:8: listener web: cannot listen on 127.0.0.1:{port}" in stderr, stderr
    assert "Traceback" not in stderr


BROKER_HTTP_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>broker-web</name>
  <journal-directory>{journal}</journal-directory>
  {security}
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
    <acceptor name="web">tcp://127.0.0.1:0?protocols=HTTP</acceptor>
  </acceptors>
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
  </addresses>
</core></configuration>
"""


@pytest.fixture
def broker_factory(tmp_path):
    brokers = []

    def make(security: str = "") -> BrokerProcess:
        conf = tmp_path / "broker.xml"
        conf.write_text(BROKER_HTTP_XML.format(journal=tmp_path / "journal", security=security))
        b = BrokerProcess(conf, tmp_path)
        brokers.append(b)
        b.start()
        return b

    yield make
    for b in brokers:
        assert b.stop() == 0


def test_broker_metrics_show_queue_depth_and_journal(broker_factory):
    broker = broker_factory()
    port = broker.ports["web"]
    send_messages(broker.url_for("amqp"), "orders", [Message(body=i, durable=True) for i in range(5)])
    _, _, text = http(port, "/metrics")
    labels = 'broker="broker-web",queue="orders",address="orders",routing_type="anycast"'
    assert metric(text, f"tdbroker_queue_messages{{{labels}}}") == 5
    assert metric(text, f"tdbroker_queue_messages_added_total{{{labels}}}") == 5
    assert metric(text, 'tdbroker_journal_syncs_total{broker="broker-web"}') >= 1
    assert metric(text, 'tdbroker_journal_bytes_on_disk{broker="broker-web"}') > 0
    status, _, body = http(port, "/healthz")
    assert status == 200 and json.loads(body)["broker"] == "broker-web"
    status, _, body = http(port, "/api/management", {"operation": "PURGE", "type": "queue", "name": "orders"})
    assert status == 200 and json.loads(body)["body"]["messagesRemoved"] == 5


def test_broker_http_requires_a_login_when_security_is_enabled(broker_factory, tmp_path):
    (tmp_path / "artemis-users.properties").write_text("admin = secret\n")
    (tmp_path / "artemis-roles.properties").write_text("admins = admin\n")
    broker = broker_factory("<security-enabled>true</security-enabled>")
    port = broker.ports["web"]
    query = {"operation": "QUERY", "entityType": "queue"}
    assert http(port, "/api/management", query)[0] == 401
    assert http(port, "/metrics", auth=("admin", "wrong"))[0] == 401
    status, _, body = http(port, "/api/management", query, auth=("admin", "secret"))
    assert status == 200 and ["orders"] == [r[0] for r in json.loads(body)["body"]["results"]]


def test_management_of_another_router_through_the_mesh(tmp_path):
    """``node`` sends the request over the mesh to _topo/0/<node>/$management; the answer comes back."""
    mesh = Mesh(tmp_path)
    try:
        mesh.add("A", sections=HTTP_LISTENER % "")
        mesh.add("B", connect={"A": 1})
        mesh.wait_converged()
        port = mesh["A"].ports["web"]
        status, _, body = http(port, "/api/management", {"operation": "QUERY", "entityType": "router",
                                                        "attributeNames": ["id"], "node": "B"})
        assert status == 200 and json.loads(body)["body"]["results"] == [["B"]]
        status, _, body = http(port, "/api/management", {"operation": "QUERY", "entityType": "router",
                                                        "node": "Nowhere"})
        assert status == 404, body
    finally:
        mesh.stop_all()
