"""router/httpserve.py with wire/httpmgmt.py in process: /metrics, /healthz, management as JSON, Basic
login against the router's users and the vhost policy's say on $management (no sockets)."""

from __future__ import annotations

import base64
import json
import ssl

import pytest

from router.config import ConfigError, parse_config
from router.core import Router
from router.httpserve import RouterSite, relay_for, router_health
from router.management import ManagementAgent
from router.policy import Policy, vhost_from_attrs
from tests.unit.enginepair import RouterHarness, settle
from wire.http import HttpRequest
from wire.httpmgmt import ConsoleApp
from wire.tls import CertificateUserIds, ServerTls, TlsPeerInfo
from wire.users import Users

CONF = """
router {
    id: R1
}
listener {
    host: 127.0.0.1
    port: 0
    http: yes
    authenticatePeer: %s
}
"""


def make(authenticate="no", policy=None, users=None):
    cfg = parse_config(CONF % authenticate)
    router = Router("R1", clock=lambda: 1000.0, policy=policy)
    harness = RouterHarness(router)
    agent = ManagementAgent(router, config=cfg, clock=lambda: 1000.0)
    site = RouterSite(router, agent, cfg.listeners[0], users=users, config=cfg)
    return ConsoleApp(site), harness


def request(method, path, body=None, user=None, password="pw"):
    headers = {"content-type": "application/json"} if body is not None else {}
    if user is not None:
        headers["authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    data = json.dumps(body).encode() if body is not None else b""
    return HttpRequest(method, path, {}, headers, data, "127.0.0.1:5555")


def alice_users():
    users = Users()
    users.set_password("alice", "pw", iterations=4096)
    users.set_password("bob", "pw", iterations=4096)
    return users


async def test_metrics_are_prometheus_text_from_the_management_rows():
    app, harness = make()
    prod, cons = harness.connect(), harness.connect()
    rcv = cons.receiver("orders", credit=10)
    snd = prod.sender("orders")
    harness.pump()
    for i in range(3):
        prod.send(snd, body=i)
    harness.pump()
    for r in cons.received(rcv):
        settle(r)
    harness.pump()
    resp = await app.handle(request("GET", "/metrics"))
    assert resp.status == 200 and resp.content_type.startswith("text/plain; version=0.0.4")
    text = resp.body.decode()
    assert '# TYPE tdrouter_connections gauge' in text
    assert 'tdrouter_connections{router="R1"} 2' in text
    assert 'tdrouter_deliveries_total{router="R1",outcome="accepted"} 3' in text
    assert 'tdrouter_deliveries_ingress_total{router="R1"} 3' in text
    assert 'tdrouter_memory_resident_bytes{router="R1"} ' in text
    assert 'tdrouter_connections_by_role{router="R1",role="normal",dir="in"} 2' in text
    assert 'address="M0orders"' in text and 'tdrouter_address_subscribers{' in text
    assert 'tdrouter_link_deliveries_total{' in text and 'link_type="endpoint"' in text
    # every sample line belongs to a declared family
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert line.split("{")[0].split(" ")[0] in families, line


async def test_healthz_ready_for_a_standalone_router():
    app, _ = make()
    resp = await app.handle(request("GET", "/healthz"))
    body = json.loads(resp.body)
    assert resp.status == 200 and body["status"] == "ready" and body["router"] == "R1"


def test_healthz_not_ready_for_an_interior_without_its_mesh():
    cfg = parse_config("router {\n mode: interior\n id: I\n}\nconnector {\n role: inter-router\n port: 1\n}\n")
    router = Router("I", mode="interior", clock=lambda: 0.0)
    ready, detail = router_health(router, None, cfg)
    assert not ready and detail["reasons"] == ["no other router reachable"]


async def test_management_query_create_and_delete_as_json():
    app, _ = make()
    resp = await app.handle(request("POST", "/api/management",
                                    {"operation": "QUERY", "entityType": "router", "attributeNames": ["id", "mode"]}))
    answer = json.loads(resp.body)
    assert resp.status == 200 and answer["status"] == 200
    assert answer["body"] == {"attributeNames": ["id", "mode"], "results": [["R1", "standalone"]]}
    resp = await app.handle(request("POST", "/api/management", {
        "operation": "CREATE", "type": "org.apache.qpid.dispatch.router.config.address", "name": "a1",
        "body": {"prefix": "orders", "distribution": "multicast"}}))
    assert json.loads(resp.body)["status"] == 201
    resp = await app.handle(request("POST", "/api/management",
                                    {"operation": "DELETE", "type": "router.config.address", "name": "a1"}))
    assert json.loads(resp.body)["status"] == 204
    resp = await app.handle(request("POST", "/api/management",
                                    {"operation": "DELETE", "type": "router.config.address", "name": "a1"}))
    assert resp.status == 404 and json.loads(resp.body)["status"] == 404


@pytest.mark.parametrize("body,status", [
    ("not json", 400), ([1, 2], 400), ({"type": "router"}, 400), ({"operation": "FROB"}, 501),
    ({"operation": "QUERY", "entityType": {"x": 1}}, 400),
])
async def test_bad_management_requests(body, status):
    app, _ = make()
    req = request("POST", "/api/management", body)
    if body == "not json":
        req.body = b"{nope"
    resp = await app.handle(req)
    assert resp.status == status and json.loads(resp.body)["status"] == status


async def test_management_needs_post_and_the_console_is_served():
    app, _ = make()
    assert (await app.handle(request("GET", "/api/management"))).status == 405
    index = await app.handle(request("GET", "/"))
    assert index.status == 200 and index.content_type.startswith("text/html")


async def test_login_required_with_authenticate_peer():
    app, _ = make("yes", users=alice_users())
    assert (await app.handle(request("GET", "/metrics"))).status == 401
    assert (await app.handle(request("GET", "/"))).status == 401
    assert (await app.handle(request("GET", "/metrics", user="alice", password="wrong"))).status == 401
    assert (await app.handle(request("GET", "/metrics", user="mallory"))).status == 401
    assert (await app.handle(request("GET", "/metrics", user="alice"))).status == 200
    resp = await app.handle(request("GET", "/api/whoami", user="alice"))
    assert json.loads(resp.body) == {"user": "alice", "mayManage": True, "kind": "router", "id": "R1"}
    # /healthz asks for no login (a probe has none); it tells nothing but ready or not
    assert (await app.handle(request("GET", "/healthz"))).status == 200


async def test_wrong_credentials_refused_even_where_anonymous_is_allowed():
    app, _ = make("no", users=alice_users())
    assert (await app.handle(request("GET", "/metrics"))).status == 200
    assert (await app.handle(request("GET", "/metrics", user="alice", password="wrong"))).status == 401


async def test_vhost_policy_decides_who_may_manage():
    policy = Policy(enabled=True)
    policy.add_vhost(vhost_from_attrs({"hostname": "$default", "allowUnknownUser": False, "groups": {
        "admins": {"users": "alice", "targets": "$management, orders", "sources": "*", "remoteHosts": "*"},
        "users": {"users": "bob", "targets": "orders", "sources": "*", "remoteHosts": "*"},
    }}))
    app, _ = make("yes", policy=policy, users=alice_users())
    query = {"operation": "QUERY", "entityType": "router"}
    resp = await app.handle(request("POST", "/api/management", query, user="bob"))
    assert resp.status == 403 and "may not use management" in json.loads(resp.body)["description"]
    assert (await app.handle(request("GET", "/metrics", user="bob"))).status == 403
    assert (await app.handle(request("GET", "/", user="bob"))).status == 200  # the page itself: any user
    resp = await app.handle(request("POST", "/api/management", query, user="alice"))
    assert resp.status == 200
    assert policy.connections_current == 0   # each request's policy connection was released


def test_http_listener_settings_that_cannot_work_are_refused_at_their_line(tmp_path):
    base = "listener {\n    port: 0\n    http: yes\n%s}\n"
    cases = [("    role: inter-router\n", "role inter-router"),
             (f"    httpRootDir: {tmp_path / 'missing'}\n", "is not a directory")]
    for extra, words in cases:
        with pytest.raises(ConfigError) as info:
            parse_config(base % extra, "r.conf")
        assert words in info.value.message and info.value.line == 4, str(info.value)
    parse_config(base % f"    httpRootDir: {tmp_path}\n", "r.conf")


async def test_metrics_healthz_and_websockets_can_be_switched_off():
    app, _ = make()
    off = ConsoleApp(app.site, metrics=False, healthz=False, websockets=False)
    assert (await off.handle(request("GET", "/metrics"))).status == 404
    assert (await off.handle(request("GET", "/healthz"))).status == 404
    assert off.websocket_paths == ()


async def test_websocket_upgrade_asks_for_the_same_login():
    app, _ = make("yes", users=alice_users())
    assert app.websocket_refusal(request("GET", "/api/ws")).status == 401
    assert app.websocket_refusal(request("GET", "/api/ws", user="alice", password="bad")).status == 401
    assert app.websocket_refusal(request("GET", "/api/ws", user="alice")) is None


async def test_a_request_for_a_router_not_in_the_mesh_is_404():
    cfg = parse_config(CONF % "no")
    router = Router("R1", clock=lambda: 1000.0)
    agent = ManagementAgent(router, config=cfg, clock=lambda: 1000.0)
    app = ConsoleApp(RouterSite(router, agent, cfg.listeners[0], config=cfg, relay=relay_for(router)))
    resp = await app.handle(request("POST", "/api/management", {"operation": "QUERY", "entityType": "router",
                                                                "node": "Elsewhere"}))
    assert resp.status == 404 and "not reachable" in json.loads(resp.body)["description"]
    assert relay_for(router) is relay_for(router)   # one relay endpoint per router


async def test_another_sites_page_cannot_use_management():
    """Cross-site request forgery: a form post (not JSON) or another Origin is refused before the agent."""
    app, _ = make()
    create = {"operation": "CREATE", "type": "router.config.address", "name": "evil", "body": {"prefix": "x"}}
    form = request("POST", "/api/management", create)
    form.headers["content-type"] = "text/plain"
    assert (await app.handle(form)).status == 415
    foreign = request("POST", "/api/management", create)
    foreign.headers.update(origin="http://evil.example", host="127.0.0.1:8672")
    assert (await app.handle(foreign)).status == 403
    same = request("POST", "/api/management", create)
    same.headers.update(origin="http://127.0.0.1:8672", host="127.0.0.1:8672")
    assert json.loads((await app.handle(same)).body)["status"] == 201
    ws = request("GET", "/api/ws")
    ws.headers.update(origin="http://evil.example", host="127.0.0.1:8672")
    assert app.websocket_refusal(ws).status == 403
    # An origin is scheme, host and port: a plain page at the same host and port is not this HTTPS site.
    over_tls = TlsPeerInfo("TLSv1.3", "TLS_AES_256_GCM_SHA384", 256, None)
    plain_page = request("POST", "/api/management", create)
    plain_page.tls = over_tls
    plain_page.headers.update(origin="http://127.0.0.1:8672", host="127.0.0.1:8672")
    assert (await app.handle(plain_page)).status == 403
    tls_page = request("GET", "/api/ws")
    tls_page.tls = over_tls
    tls_page.headers.update(origin="https://127.0.0.1:8672", host="127.0.0.1:8672")
    assert app.websocket_refusal(tls_page) is None
    https_origin_on_plain = request("GET", "/api/ws")
    https_origin_on_plain.headers.update(origin="https://127.0.0.1:8672", host="127.0.0.1:8672")
    assert app.websocket_refusal(https_origin_on_plain).status == 403


async def test_management_cannot_create_an_http_listener():
    app, _ = make()
    resp = await app.handle(request("POST", "/api/management", {"operation": "CREATE", "type": "listener", "name": "w",
                                                                "body": {"port": 0, "http": True}}))
    answer = json.loads(resp.body)
    assert answer["status"] == 400 and "cannot be created through management" in answer["description"]


async def test_a_verified_client_certificate_logs_an_https_request_in_as_sasl_external_would():
    """authenticatePeer: yes on an HTTPS listener: the handshake required a certificate, and the user is the
    one the profile's uidFormat makes of it; Basic credentials, when given, are still checked."""
    cfg = parse_config(CONF % "yes")
    router = Router("R1", clock=lambda: 1000.0)
    agent = ManagementAgent(router, config=cfg, clock=lambda: 1000.0)
    tls = ServerTls(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), user_ids=CertificateUserIds(uid_format="n"))
    site = RouterSite(router, agent, cfg.listeners[0], users=alice_users(), config=cfg, tls=tls)
    peer = TlsPeerInfo("TLSv1.3", "TLS_AES_256_GCM_SHA384", 256, "CN=client.example,O=Example",
                       peer_subject_rdns=((("organizationName", "Example"),), (("commonName", "client.example"),)))
    with_cert = request("GET", "/metrics")
    with_cert.tls = peer
    assert site.authenticate(with_cert, None).user == "client.example"
    assert site.authenticate(with_cert, ("alice", "pw")).user == "alice"
    assert site.authenticate(with_cert, ("alice", "bad")).status == 401
    no_cert = request("GET", "/metrics")
    no_cert.tls = TlsPeerInfo("TLSv1.3", "TLS_AES_256_GCM_SHA384", 256, None)
    assert site.authenticate(no_cert, None).status == 401   # e.g. plain HTTP with requireSsl: no
