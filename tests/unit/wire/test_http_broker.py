"""broker/httpserve.py in process: an acceptor with protocols=HTTP (configuration and refusals), the broker's
/metrics (queue depth and counters, journal), /healthz, management as JSON, and Basic login against the
broker's users with the manage permission deciding management."""

from __future__ import annotations

import base64
import json
import ssl

import pytest
import trustme

from broker.config import BrokerConfigError, parse_broker_config
from broker.daemon import attach_management
from broker.httpserve import BrokerSite
from broker.security import BrokerSecurity, SecuritySetting
from tests.unit.broker.fixtures import make_broker
from wire.http import HttpRequest
from wire.httpmgmt import ConsoleApp
from wire.users import Users


def acceptors_xml(uri: str) -> str:
    return ("<configuration xmlns=\"urn:activemq\"><core xmlns=\"urn:activemq:core\">\n"
            "<persistence-enabled>false</persistence-enabled>\n<acceptors>\n"
            f"<acceptor name=\"web\">{uri}</acceptor>\n</acceptors>\n</core></configuration>\n")


def test_an_http_acceptor_is_configured_by_protocols_http(tmp_path):
    cfg = parse_broker_config(acceptors_xml(f"tcp://127.0.0.1:0?protocols=HTTP&amp;httpRootDir={tmp_path}"))
    [acc] = cfg.acceptors
    assert acc.protocols == ("HTTP",) and acc.params == {"httpRootDir": str(tmp_path)}


def test_an_http_acceptor_with_ssl_enabled_serves_https_with_the_key_store(tmp_path):
    """The TLS parameters an AMQP acceptor takes make the HTTP acceptor's TLS (TLS only, as Artemis's)."""
    trustme.CA().issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
    cfg = parse_broker_config(acceptors_xml(
        f"tcp://127.0.0.1:0?protocols=HTTP&amp;sslEnabled=true&amp;keyStorePath={tmp_path / 'server.pem'}"))
    [acc] = cfg.acceptors
    assert acc.params == {} and acc.tls is not None and acc.tls.required
    assert acc.tls.context.verify_mode == ssl.CERT_NONE   # no needClientAuth: no client certificate asked


@pytest.mark.parametrize("uri,words", [
    ("tcp://127.0.0.1:0?protocols=AMQP,HTTP", "serves HTTP only"),
    ("tcp://127.0.0.1:0?protocols=HTTP&amp;sslEnabled=true", "an sslEnabled acceptor needs keyStorePath"),
    ("tcp://127.0.0.1:0?protocols=HTTP&amp;keyStorePath=k.pem", "given without sslEnabled=true"),
    ("tcp://127.0.0.1:0?protocols=HTTP&amp;sslEnabled=true&amp;keyStorePath=/no/such.pem", "/no/such.pem"),
    ("tcp://127.0.0.1:0?protocols=HTTP&amp;connectionsAllowed=3", "connectionsAllowed not supported"),
    ("tcp://127.0.0.1:0?protocols=HTTP&amp;httpRootDir=/no/such/dir", "is not a directory"),
])
def test_what_an_http_acceptor_cannot_do_is_refused_at_its_line(uri, words):
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(acceptors_xml(uri), "b.xml")
    assert words in str(info.value) and "b.xml:4:" in str(info.value), str(info.value)


def request(method, path, body=None, user=None, password="pw"):
    headers = {"content-type": "application/json"} if body is not None else {}
    if user is not None:
        headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    return HttpRequest(method, path, {}, headers, json.dumps(body).encode() if body is not None else b"", "127.0.0.1:1")


def app_for(broker):
    attach_management(broker)
    broker.acceptors = {}
    return ConsoleApp(BrokerSite(broker, broker.cfg))


async def test_metrics_healthz_and_management(tmp_path):
    broker = make_broker(tmp_path, persist=True)
    app = app_for(broker)
    resp = await app.handle(request("POST", "/api/management", {
        "operation": "CREATE", "type": "queue", "name": "jobs", "body": {"address": "jobs"}}))
    assert json.loads(resp.body)["status"] == 201
    text = (await app.handle(request("GET", "/metrics"))).body.decode()
    assert 'tdbroker_queue_messages{broker="b1",queue="jobs",address="jobs",routing_type="anycast"} 0' in text
    assert 'tdbroker_queue_messages_expired_total{broker="b1",queue="orders"' in text
    assert 'tdbroker_journal_syncs_total{broker="b1"}' in text
    assert 'tdbroker_journal_bytes_on_disk{broker="b1"}' in text
    health = await app.handle(request("GET", "/healthz"))
    assert health.status == 200 and json.loads(health.body)["broker"] == "b1"
    other = await app.handle(request("POST", "/api/management", {"operation": "QUERY", "entityType": "queue",
                                                                  "node": "elsewhere"}))
    assert other.status == 404
    broker.close_journal()


async def test_login_and_the_manage_permission(tmp_path):
    broker = make_broker(tmp_path)
    users = Users()
    users.set_password("admin", "pw")
    users.set_password("viewer", "pw")
    broker.cfg.security = BrokerSecurity(users, roles={"admins": ("admin",), "viewers": ("viewer",)},
                                         settings=[SecuritySetting("#", {"manage": frozenset({"admins"}),
                                                                         "send": frozenset({"viewers"})}, 1)])
    broker.cfg.security_enabled = True
    app = app_for(broker)
    query = {"operation": "QUERY", "entityType": "queue"}
    assert (await app.handle(request("POST", "/api/management", query))).status == 401
    assert (await app.handle(request("POST", "/api/management", query, user="admin", password="no"))).status == 401
    assert (await app.handle(request("POST", "/api/management", query, user="viewer"))).status == 403
    assert (await app.handle(request("GET", "/metrics", user="viewer"))).status == 403
    assert (await app.handle(request("POST", "/api/management", query, user="admin"))).status == 200
    assert (await app.handle(request("GET", "/metrics", user="admin"))).status == 200
