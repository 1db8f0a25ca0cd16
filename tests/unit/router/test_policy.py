"""Vhost policy (router/policy.py, router/policyfiles.py, router/policygate.py) and its configuration: the
block form of ``groups``, policyDir files, connection/link/message decisions, and the router applying them
to in-memory engines (Qpid Dispatch 1.19 src/policy.c, python/qpid_dispatch_internal/policy/)."""

from __future__ import annotations

import json

import pytest
from proton import Endpoint

from router.config import ConfigError, parse_config
from router.core import Router
from router.management import ManagementAgent
from router.policy import (ANONYMOUS_USER, RESOURCE_LIMIT_EXCEEDED, UNAUTHORIZED_ACCESS, Denial, HostRanges,
                           Policy, PolicyError, parse_group, vhost_from_attrs)
from router.policyfiles import check_listener_vhosts, policy_from_config
from tests.unit.enginepair import ACCEPTED, REJECTED, RouterHarness, settle
from wire import management as wm

HEAD = "router {\n id: R\n}\npolicy {\n enableVhostPolicy: true\n}\n"

BLOCK = """vhost {
    hostname: example.com
    maxConnectionsPerUser: 2
    groups: {
        admin: {
            users: alice, bob
            remoteHosts: 10.0.0.0-10.0.0.255, ::1
            maxSenders: 3,
            allowDynamicSource: true
        }
        $default: {
            remoteHosts: *
            sources: public.*, ${user}.box
        }
    }
}
"""


def vhost(**groups):
    return vhost_from_attrs({"hostname": "$default", "allowUnknownUser": True, "groups": groups})


def policy(*vhosts, **kw) -> Policy:
    p = Policy(enabled=True, **kw)
    for v in vhosts:
        p.add_vhost(v)
    return p


# -- configuration -------------------------------------------------------------------------------------

def test_groups_in_dispatch_block_form_are_parsed_with_their_lines():
    cfg = parse_config(HEAD + BLOCK, "p.conf")
    [v] = cfg.vhosts
    assert v["name"] == "example.com"
    groups = v["groups"]
    assert groups["admin"] == {"users": "alice, bob", "remoteHosts": "10.0.0.0-10.0.0.255, ::1",
                               "maxSenders": "3", "allowDynamicSource": "true"}
    assert groups["$default"]["sources"] == "public.*, ${user}.box"
    assert v.attr_lines["groups.admin.maxSenders"] == 14
    built = vhost_from_attrs(v.attrs)
    assert built.groups["admin"].maxSenders == 3 and built.groups["admin"].allowDynamicSource is True
    assert built.user_groups == {"alice": "admin", "bob": "admin"}


def test_groups_as_json_are_the_same():
    text = HEAD + 'vhost {\n hostname: x\n groups: {"g": {"users": "u", "maxSenders": 3}}\n}\n'
    [v] = parse_config(text, "p.conf").vhosts
    assert vhost_from_attrs(v.attrs).groups["g"].maxSenders == 3


@pytest.mark.parametrize("change,line,words", [
    ("maxSenders: 3,", 14, "unknown setting 'maxSender'"),
    ("remoteHosts: 10.0.0.0-10.0.0.255, ::1", 13, "'10.0.0.9-10.0.0.1'"),
    ("maxSenders: 3,", 14, "maxSenders 'lots' is not an integer"),
    ("allowDynamicSource: true", 15, "is not a boolean"),
    ("sources: public.*, ${user}.box", 19, "'*' may only end a name"),
])
def test_a_bad_group_setting_is_refused_at_its_line(change, line, words):
    replacement = {"unknown setting 'maxSender'": "maxSender: 3",
                   "'10.0.0.9-10.0.0.1'": "remoteHosts: 10.0.0.9-10.0.0.1",
                   "maxSenders 'lots' is not an integer": "maxSenders: lots",
                   "is not a boolean": "allowDynamicSource: maybe",
                   "'*' may only end a name": "sources: pub*lic"}[words]
    with pytest.raises(ConfigError) as info:
        parse_config(HEAD + BLOCK.replace(change, replacement), "p.conf")
    assert info.value.line == line and words in info.value.message, str(info.value)


def test_a_user_in_two_groups_is_refused():
    with pytest.raises(ConfigError) as info:
        parse_config(HEAD + BLOCK.replace("remoteHosts: *", "users: bob\n remoteHosts: *"), "p.conf")
    assert "already in group 'admin'" in info.value.message


def test_vhost_without_enable_vhost_policy_is_refused_not_ignored():
    with pytest.raises(ConfigError) as info:
        parse_config("router {\n id: R\n}\n" + BLOCK, "p.conf")
    assert info.value.line == 4 and "enableVhostPolicy: true" in info.value.message
    with pytest.raises(ConfigError) as info:
        parse_config("policy {\n policyDir: /etc\n}\n", "p.conf")
    assert info.value.line == 2 and "policyDir would not be enforced" in info.value.message


def test_duplicate_vhost_and_unclosed_block_are_refused():
    with pytest.raises(ConfigError, match="already defined at line 7"):
        parse_config(HEAD + BLOCK + BLOCK, "p.conf")
    with pytest.raises(ConfigError, match="not closed|unterminated"):
        parse_config(HEAD + "vhost {\n hostname: x\n groups: {\n  g: {\n   users: u\n }\n", "p.conf")


def test_allow_admin_status_update_false_is_refused():
    with pytest.raises(PolicyError, match="allowAdminStatusUpdate: False is not enforced"):
        parse_group("g", {"allowAdminStatusUpdate": "false"})


def test_policy_dir_files_are_read_and_their_errors_located(tmp_path):
    d = tmp_path / "policies"
    d.mkdir()
    (d / "a.json").write_text(json.dumps([["vhost", {"hostname": "one", "groups": {"g": {"users": "u"}}}]]))
    (d / "b.json").write_text('[\n ["vhost", {"hostname": "two",\n   "maxConnections": 5}]\n]\n')
    (d / "notes.txt").write_text("not read")
    cfg = parse_config(f"policy {{\n enableVhostPolicy: true\n policyDir: {d}\n}}\n", "p.conf")
    p = policy_from_config(cfg)
    assert set(p.vhosts) == {"one", "two"} and p.vhosts["two"].max_connections == 5
    (d / "c.json").write_text('[\n ["vhost", {"hostname": "three",\n "groups": {"g": {"maxSessions": 0}}}]\n]\n')
    with pytest.raises(ConfigError) as info:
        policy_from_config(cfg)
    assert info.value.path == str(d / "c.json") and info.value.line == 2 and "maxSessions" in info.value.message
    (d / "c.json").write_text("[1,")
    with pytest.raises(ConfigError, match="not valid JSON"):
        policy_from_config(cfg)


def test_listener_policy_vhost_must_name_a_vhost_and_needs_the_policy():
    cfg = parse_config(HEAD + BLOCK + "listener {\n port: 0\n policyVhost: nowhere\n}\n", "p.conf")
    with pytest.raises(ConfigError, match="policyVhost 'nowhere' names no vhost"):
        check_listener_vhosts(cfg, policy_from_config(cfg))
    cfg = parse_config("listener {\n port: 0\n policyVhost: x\n}\n", "p.conf")
    with pytest.raises(ConfigError, match="without 'policy { enableVhostPolicy: true }'"):
        check_listener_vhosts(cfg, policy_from_config(cfg))


# -- decisions -------------------------------------------------------------------------------------------

def test_host_ranges():
    r = HostRanges("10.0.0.0-10.0.0.255, ::1, 192.168.1.7")
    assert r.allows("10.0.0.7") and r.allows("::1") and r.allows("192.168.1.7") and r.allows("::ffff:10.0.0.1")
    assert not r.allows("10.0.1.0") and not r.allows("::2") and not r.allows("localhost")
    assert HostRanges("*").allows("anything") and not HostRanges("").allows("127.0.0.1")


def test_connection_limits_per_vhost_user_and_host_and_release():
    v = vhost_from_attrs({"hostname": "$default", "maxConnections": 3, "maxConnectionsPerUser": 2,
                          "maxConnectionsPerHost": 2, "allowUnknownUser": True,
                          "groups": {"$default": {"remoteHosts": "*"}}})
    p = policy(v)
    a1 = p.open_connection(hostname="h", user="alice", remote="10.0.0.1:1000")
    a2 = p.open_connection(hostname="h", user="alice", remote="10.0.0.2:1000")
    denied = p.open_connection(hostname="h", user="alice", remote="10.0.0.3:1000")
    assert isinstance(denied, Denial) and denied.condition == RESOURCE_LIMIT_EXCEEDED
    assert "maxConnectionsPerUser" in denied.reason
    b1 = p.open_connection(hostname="h", user="bob", remote="10.0.0.1:1001")
    assert isinstance(p.open_connection(hostname="h", user="carol", remote="10.0.0.9:1"), Denial)  # vhost max 3
    b1.release()
    a1.release()
    a1.release()   # idempotent
    assert v.stats.per_user == {"alice": 1} and v.stats.connections_current == 1
    assert v.stats.connections_approved == 3 and v.stats.connections_denied == 2
    assert p.connections_current == 1 and p.connections_processed == 5
    a2.release()
    assert v.stats.per_user == {} and v.stats.per_host == {}


def test_vhost_lookup_exact_pattern_default_and_listener():
    named = vhost_from_attrs({"hostname": "a.example", "groups": {"g": {"users": ANONYMOUS_USER, "remoteHosts": "*"}}})
    pattern = vhost_from_attrs({"hostname": "*.example", "groups": {"g": {"users": ANONYMOUS_USER, "remoteHosts": "*"}}})
    default = vhost(**{"$default": {"remoteHosts": "*"}})
    p = policy(named, pattern, default, name_patterns=True)
    assert p.lookup("a.example") is named and p.lookup("b.example") is pattern and p.lookup("other") is default
    assert p.open_connection(hostname="zzz", user=None, remote="1.2.3.4:5", listener_vhost="a.example").vhost is named
    p2 = policy(named, default_vhost="")
    assert isinstance(p2.open_connection(hostname="other", user=None, remote="1.2.3.4:5"), Denial)


def test_unknown_users_and_remote_hosts():
    v = vhost_from_attrs({"hostname": "$default", "groups": {
        "admin": {"users": "alice", "remoteHosts": "127.0.0.1"}}})
    p = policy(v)
    assert "no group" in p.open_connection(hostname=None, user="bob", remote="127.0.0.1:1").reason
    assert "remoteHosts" in p.open_connection(hostname=None, user="alice", remote="10.1.1.1:1").reason
    assert p.open_connection(hostname=None, user="alice", remote="127.0.0.1:1").group.name == "admin"
    assert p.open_connection(hostname=None, user="alice", remote="[::ffff:127.0.0.1]:1").group.name == "admin"


def approve(group: dict, user="alice"):
    return policy(vhost(**{"$default": dict({"remoteHosts": "*"}, **group)})).open_connection(
        hostname=None, user=user, remote="127.0.0.1:1")


def refusal(cp, *, client_sends=True, address="a", dynamic=False, waypoint=False, fallback=False, open_links=0):
    return cp.link_refusal(client_sends=client_sends, address=address, dynamic=dynamic, waypoint=waypoint,
                           fallback=fallback, open_links=open_links)


def test_sources_and_targets_names_prefixes_and_user():
    cp = approve({"sources": "public.*, ${user}.inbox, exact", "targets": "*"})
    assert refusal(cp, client_sends=False, address="public.news") is None
    assert refusal(cp, client_sends=False, address="alice.inbox") is None
    assert refusal(cp, client_sends=False, address="exact") is None
    for address in ("bob.inbox", "exact.not", "privat"):
        cond, desc = refusal(cp, client_sends=False, address=address)
        assert cond == UNAUTHORIZED_ACCESS and "link disallowed by local policy" in desc
    assert refusal(cp, address="anything") is None
    cond, _ = refusal(cp, address=None)
    assert cond == UNAUTHORIZED_ACCESS  # anonymous sender not allowed
    assert refusal(approve({}), address="a") is not None   # no targets: nothing allowed


def test_patterns_win_over_names():
    cp = approve({"sources": "*", "sourcePattern": "public.#, ${user}.*"})
    assert refusal(cp, client_sends=False, address="public.a.b") is None
    assert refusal(cp, client_sends=False, address="alice.x") is None
    assert refusal(cp, client_sends=False, address="alice.x.y") is not None
    assert refusal(cp, client_sends=False, address="other") is not None


def test_link_counts_dynamic_waypoint_and_fallback():
    cp = approve({"targets": "*", "sources": "*", "maxSenders": 2, "maxReceivers": 1,
                  "allowWaypointLinks": "false", "allowFallbackLinks": "no"})
    assert refusal(cp, open_links=1) is None
    cond, desc = refusal(cp, open_links=2)
    assert cond == RESOURCE_LIMIT_EXCEEDED and "maxSenders 2" in desc
    assert refusal(cp, client_sends=False, open_links=1)[0] == RESOURCE_LIMIT_EXCEEDED
    assert refusal(cp, client_sends=False, address=None, dynamic=True)[0] == UNAUTHORIZED_ACCESS
    assert refusal(cp, waypoint=True)[0] == UNAUTHORIZED_ACCESS
    assert refusal(cp, fallback=True)[0] == UNAUTHORIZED_ACCESS
    stats = cp.vhost.stats
    assert stats.sender_denied == 3 and stats.receiver_denied == 2 and cp.policy.links_denied == 5
    assert refusal(approve({"allowDynamicSource": True}), client_sends=False, address=None, dynamic=True) is None


# -- the router applying it ------------------------------------------------------------------------------

def router_with(group: dict, **vhost_attrs) -> RouterHarness:
    attrs = {"hostname": "$default", "allowUnknownUser": True,
             "groups": {"$default": dict({"remoteHosts": "*"}, **group)}, **vhost_attrs}
    return RouterHarness(policy=policy(vhost_from_attrs(attrs)))


def test_router_refuses_a_connection_with_resource_limit_exceeded():
    h = router_with({}, maxConnections=1)
    first = h.connect()
    second = h.connect()
    h.pump()
    assert first.connection.remote_condition is None
    cond = second.connection.remote_condition
    assert cond.name == RESOURCE_LIMIT_EXCEEDED and cond.description == "connection disallowed by local policy"
    assert second.connection.state & Endpoint.REMOTE_CLOSED
    assert h.router.policy.connections_denied == 1
    h.drop(first)
    third = h.connect()
    h.pump()
    assert third.connection.remote_condition is None and h.router.policy.connections_current == 1


def test_router_gives_the_groups_frame_size_and_channel_max():
    h = router_with({"maxFrameSize": 1024, "maxSessions": 3})
    client = h.connect()
    h.pump()
    assert client.transport.remote_max_frame_size == 1024 and client.transport.remote_channel_max == 2


def test_router_ends_a_session_past_max_sessions():
    h = router_with({"maxSessions": 1, "targets": "*"})
    client = h.connect()
    extra = client.connection.session()
    extra.open()
    h.pump()
    # channel-max 0: a conforming peer cannot begin a second session at all ...
    assert client.transport.remote_channel_max == 0 and extra.state & Endpoint.REMOTE_UNINIT
    # ... and one that did would have it ended: the router counts the sessions it has begun.
    engine = client.router_engine
    assert h.router.session_refusal(engine, None) == (
        RESOURCE_LIMIT_EXCEEDED, "session disallowed by local policy: maxSessions 1 reached")
    assert h.router.policy.sessions_denied == 1


def test_router_refuses_links_and_counts_them():
    h = router_with({"targets": "ok.*", "sources": "ok.*", "maxReceivers": 1})
    client = h.connect()
    good = client.sender("ok.a")
    bad = client.sender("no.a")
    rcv1 = client.receiver("ok.b")
    rcv2 = client.receiver("ok.c")
    h.pump()
    assert good.state & Endpoint.REMOTE_ACTIVE and rcv1.state & Endpoint.REMOTE_ACTIVE
    assert bad.remote_condition.name == UNAUTHORIZED_ACCESS and bad.remote_target.address is None
    assert rcv2.remote_condition.name == RESOURCE_LIMIT_EXCEEDED
    rcv1.close()
    h.pump()
    rcv3 = client.receiver("ok.d")   # the closed one no longer counts
    h.pump()
    assert rcv3.state & Endpoint.REMOTE_ACTIVE and rcv3.remote_condition is None


def test_router_rejects_forged_user_id_and_disallowed_anonymous_targets():
    h = router_with({"targets": "ok.*", "sources": "*", "allowAnonymousSender": True})
    client = h.connect()
    rcv = client.receiver("ok.q")
    rcv.flow(10)
    anon = client.sender(None)
    snd = client.sender("ok.q")
    h.pump()
    forged = client.send(snd, body="forged", user_id=b"bob")
    own = client.send(snd, body="own", user_id=ANONYMOUS_USER.encode())
    elsewhere = client.send(anon, body="elsewhere", address="no.q")
    allowed = client.send(anon, body="allowed", address="ok.q")
    h.pump()
    assert forged.remote_state == REJECTED and forged.remote.condition.name == UNAUTHORIZED_ACCESS
    assert elsewhere.remote_state == REJECTED and "target 'no.q'" in elsewhere.remote.condition.description
    got = client.received(rcv)
    assert [r.body for r in got] == ["own", "allowed"]
    for r in got:
        settle(r, ACCEPTED)
    h.pump()
    assert own.remote_state == ACCEPTED and allowed.remote_state == ACCEPTED
    assert h.router.policy.messages_denied == 2
    assert snd.credit > 0 and anon.credit > 0   # refused messages gave their credit back


def test_inter_router_and_edge_roles_are_not_policed():
    h = router_with({}, maxConnections=0)
    client = h.connect(role="route-container")
    h.pump()
    assert client.connection.remote_condition.name == RESOURCE_LIMIT_EXCEEDED
    edge = h.connect(role="edge")
    h.pump()
    assert edge.connection.remote_condition is None


# -- management --------------------------------------------------------------------------------------------

def test_management_vhost_create_update_delete_and_stats():
    p = policy(vhost(**{"$default": {"remoteHosts": "*"}}))
    agent = ManagementAgent(Router("R", policy=p))
    status, row = agent.dispatch(_req("CREATE", "org.apache.qpid.dispatch.vhost", name="extra",
                                      body={"groups": {"g": {"users": "u", "maxSenders": 4}}}))
    assert status == wm.CREATED and row["hostname"] == "extra" and "extra" in p.vhosts
    status, row = agent.dispatch(_req("UPDATE", "org.apache.qpid.dispatch.vhost", name="extra",
                                      body={"maxConnections": 7}))
    assert status == wm.OK and p.vhosts["extra"].max_connections == 7 and p.vhosts["extra"].groups["g"].maxSenders == 4
    with pytest.raises(wm.ManagementError, match="unknown setting"):
        agent.dispatch(_req("CREATE", "vhost", name="bad", body={"groups": {"g": {"maxSender": 1}}}))
    status, _ = agent.dispatch(_req("DELETE", "vhost", name="extra"))
    assert status == wm.NO_CONTENT and "extra" not in p.vhosts
    p.open_connection(hostname=None, user="x", remote="1.1.1.1:1")
    status, page = agent.dispatch(_req("QUERY", None, entity_type="org.apache.qpid.dispatch.vhostStats"))
    names = page["attributeNames"]
    [row] = [dict(zip(names, r)) for r in page["results"]]
    assert row["connectionsApproved"] == 1 and row["perUserState"] == {"x": 1}
    status, page = agent.dispatch(_req("QUERY", None, entity_type="org.apache.qpid.dispatch.policy"))
    [row] = [dict(zip(page["attributeNames"], r)) for r in page["results"]]
    assert row["enableVhostPolicy"] is True and row["connectionsProcessed"] == 1


def test_management_refuses_vhosts_while_vhost_policy_is_off():
    agent = ManagementAgent(Router("R"))
    with pytest.raises(wm.ManagementError, match="enableVhostPolicy: true"):
        agent.dispatch(_req("CREATE", "vhost", name="v", body={}))


def _req(op, type, *, name=None, body=None, entity_type=None):
    return wm.Request(operation=op, type=type, name=name, entity_type=entity_type,
                      body=body if body is not None else {})


def test_link_routed_messages_of_a_policed_client_are_checked_too():
    from tests.unit.router.fixtures import AutoLinkEntity, broker_answers

    routes = [AutoLinkEntity(prefix="test", connection="broker", direction=d) for d in ("in", "out")]
    attrs = {"hostname": "$default", "allowUnknownUser": True,
             "groups": {"$default": {"remoteHosts": "*", "targets": "test.*", "sources": "*",
                                     "maxMessageSize": 2000}}}
    h = RouterHarness(link_route_entities=routes, policy=policy(vhost_from_attrs(attrs)))
    broker = h.connect(name="broker", role="route-container")
    client = h.connect()
    snd = client.sender("test.q1", name="routed")
    h.pump()
    [b_rcv] = broker_answers(broker)
    h.pump()
    b_rcv.flow(5)
    h.pump()
    forged = client.send(snd, body="forged", user_id=b"bob")
    own = client.send(snd, body="own")
    h.pump()
    assert forged.remote_state == REJECTED and forged.remote.condition.name == UNAUTHORIZED_ACCESS
    assert [r.body for r in broker.received(b_rcv)] == ["own"]
    assert h.router.policy.messages_denied == 1 and own.remote_state is not REJECTED
    client.send(snd, body="x" * 5000)
    h.pump()
    assert snd.remote_condition.name == "amqp:link:message-size-exceeded"
    assert b_rcv.state & Endpoint.REMOTE_CLOSED   # the broker's side of the pair is detached too
    assert h.router.policy.max_message_size_denied == 1


def test_management_refuses_a_listener_whose_policy_vhost_would_not_apply():
    agent = ManagementAgent(Router("R"))
    with pytest.raises(wm.ManagementError, match="policyVhost would not be enforced"):
        agent.dispatch(_req("CREATE", "listener", name="l", body={"port": "0", "policyVhost": "v"}))
    agent = ManagementAgent(Router("R", policy=policy(vhost(**{"$default": {"remoteHosts": "*"}}))))
    with pytest.raises(wm.ManagementError, match="policyVhost 'v' names no vhost"):
        agent.dispatch(_req("CREATE", "listener", name="l", body={"port": "0", "policyVhost": "v"}))
