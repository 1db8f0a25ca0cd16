"""Vhost policy on a real tdrouterd with real proton clients and tdmanage (issue 12).

The router is configured as Qpid Dispatch 1.19 users configure theirs: ``policy { enableVhostPolicy: true }``
and ``vhost`` sections whose ``groups`` are written in Dispatch's block form; users log in with SASL PLAIN
against a users file made at test time. The harness's own anonymous listener (``amqp``, which the test
fixtures use for management) is put in a vhost of its own with ``policyVhost``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from proton import ConnectionException, Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection, LinkDetached, SendException

from tests.paths import REPO
from tools.mgmtclient import ManagementClient
from wire.users import Users

TIMEOUT = 20.0
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}

LOCAL_VHOST = """
vhost {
    hostname: local
    groups: {
        local: {
            users: anonymous
            remoteHosts: 127.0.0.1
            sources: *
            targets: *
            allowDynamicSource: true
            allowAnonymousSender: true
        }
    }
}
"""

APP_VHOST = """
vhost {
    hostname: $default
    maxConnections: 6
    maxConnectionsPerUser: 2
    allowUnknownUser: false
    groups: {
        admin: {
            users: admin
            remoteHosts: *
            sources: *
            targets: *
            allowDynamicSource: true
            allowAnonymousSender: true
        }
        apps: {
            users: alice, bob
            remoteHosts: 127.0.0.1
            maxSessions: 2
            maxSenders: 2
            maxFrameSize: 2048
            maxMessageSize: 4000
            sources: public.*, ${user}.*
            targets: public.*, ${user}.*
        }
    }
}
"""


@pytest.fixture
def sasl_dir(tmp_path):
    users = Users()
    for user, password in PASSWORDS.items():
        users.set_password(user, password)
    users.save(str(tmp_path / "users.db"))
    (tmp_path / "qdrouterd.conf").write_text("mech_list: ANONYMOUS PLAIN SCRAM-SHA-256\nsasldb_path: users.db\n")
    return tmp_path


def policy_router(router_factory, sasl_dir, vhosts: str = APP_VHOST):
    sections = ("listener {\n    name: apps\n    host: 127.0.0.1\n    port: 0\n    authenticatePeer: yes\n"
                "    saslMechanisms: PLAIN SCRAM-SHA-256\n}\n"
                "policy {\n    enableVhostPolicy: true\n}\n" + LOCAL_VHOST + vhosts)
    return router_factory(sections, router_extra=f"saslConfigDir: {sasl_dir}",
                          listener_extra="policyVhost: local")


def login(router, user: str, **kw) -> BlockingConnection:
    return BlockingConnection(f"127.0.0.1:{router.ports['apps']}", timeout=TIMEOUT, user=user,
                              password=PASSWORDS[user], allowed_mechs="PLAIN", **kw)


def refused_login(router, user: str) -> str:
    with pytest.raises(ConnectionException) as info:
        login(router, user).close()
    return str(info.value)


def stats(router) -> dict:
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as client:
        return {r["hostname"]: r for r in client.query("org.apache.qpid.dispatch.vhostStats")}


def test_connection_limits_are_hit_and_recover(router_factory, sasl_dir):
    router = policy_router(router_factory, sasl_dir)
    first, second = login(router, "alice"), login(router, "alice")
    message = refused_login(router, "alice")
    assert "amqp:resource-limit-exceeded" in message and "connection disallowed by local policy" in message
    bob = login(router, "bob")          # the limit is per user: bob still gets in
    first.close()
    third = login(router, "alice")      # a slot came back
    s = stats(router)["$default"]
    assert s["connectionsDenied"] == 1 and s["connectionsApproved"] == 4 and s["connectionsCurrent"] == 3
    assert s["perUserState"] == {"alice": 2, "bob": 1}
    for c in (second, third, bob):
        c.close()
    assert "DENY AMQP Open for user 'alice'" in router.stderr_text()


def test_user_in_no_group_is_refused(router_factory, sasl_dir):
    vhosts = APP_VHOST.replace("users: alice, bob", "users: alice")
    router = policy_router(router_factory, sasl_dir, vhosts)
    message = refused_login(router, "bob")
    assert "amqp:resource-limit-exceeded" in message
    assert "user is in no group" in router.stderr_text()


def test_addresses_outside_the_groups_sources_and_targets_are_refused(router_factory, sasl_dir):
    router = policy_router(router_factory, sasl_dir)
    conn = login(router, "alice")
    try:
        receiver = conn.create_receiver("alice.inbox", credit=5)      # ${user}.* is alice's own
        sender = conn.create_sender("alice.inbox", options=AtMostOnce())
        sender.send(Message(body="mine"))
        assert receiver.receive(timeout=TIMEOUT).body == "mine"
        for make in (lambda: conn.create_sender("bob.inbox"), lambda: conn.create_receiver("bob.inbox"),
                     lambda: conn.create_sender("$management"), lambda: conn.create_sender(None),
                     lambda: conn.create_receiver(None, dynamic=True)):
            with pytest.raises(LinkDetached) as info:
                make()
            assert "amqp:unauthorized-access" in str(info.value), info.value
        conn.create_sender("public.news")    # the second sender: maxSenders 2
        with pytest.raises(LinkDetached) as info:
            conn.create_sender("public.more")
        assert "amqp:resource-limit-exceeded" in str(info.value) and "maxSenders 2" in str(info.value)
    finally:
        conn.close()
    s = stats(router)["$default"]
    assert s["senderDenied"] == 4 and s["receiverDenied"] == 2


def test_a_message_in_another_users_name_is_rejected(router_factory, sasl_dir):
    router = policy_router(router_factory, sasl_dir)
    conn = login(router, "alice")
    try:
        receiver = conn.create_receiver("public.q", credit=5)
        sender = conn.create_sender("public.q")
        with pytest.raises(SendException) as info:
            sender.send(Message(body="forged", user_id=b"bob"), timeout=TIMEOUT)
        assert info.value.state == Delivery.REJECTED
        presettled = conn.create_sender("public.q", name="presettled", options=AtMostOnce())
        presettled.send(Message(body="mine", user_id=b"alice"))     # her own name is fine
        assert receiver.receive(timeout=TIMEOUT).body == "mine"
    finally:
        conn.close()
    assert stats(router)["$default"]["messagesDenied"] == 1


def test_group_frame_size_sessions_and_message_size(router_factory, sasl_dir):
    router = policy_router(router_factory, sasl_dir)
    conn = login(router, "alice")
    try:
        transport = conn.conn.transport
        assert transport.remote_max_frame_size == 2048
        assert transport.remote_channel_max == 1      # maxSessions 2
        conn.create_receiver("public.big", credit=5)
        sender = conn.create_sender("public.big")
        assert sender.link.remote_max_message_size == 4000
        with pytest.raises((SendException, LinkDetached)):
            sender.send(Message(body="x" * 5000), timeout=TIMEOUT)
    finally:
        conn.close()
    assert stats(router)["$default"]["maxMessageSizeDenied"] == 1


def tdmanage(router, user: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TD_SASL_PASSWORD=PASSWORDS[user])
    return subprocess.run([sys.executable, "-m", "tools.tdmanage", "-b", f"127.0.0.1:{router.ports['apps']}",
                           "--sasl-mechanisms", "PLAIN", "--sasl-username", user, *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)


def test_an_ordinary_user_is_denied_management_while_an_admin_creates_a_listener(router_factory, sasl_dir):
    router = policy_router(router_factory, sasl_dir)
    denied = tdmanage(router, "alice", "create", "--type", "listener", "host=127.0.0.1", "port=0", "name=by-alice")
    assert denied.returncode != 0
    assert "amqp:unauthorized-access" in denied.stderr + denied.stdout, denied
    created = tdmanage(router, "admin", "create", "--type", "listener", "host=127.0.0.1", "port=0",
                       "name=by-admin", "policyVhost=local")
    assert created.returncode == 0, created.stderr
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as client:
        names = {r["name"] for r in client.query("org.apache.qpid.dispatch.listener", ["name"])}
    assert "by-admin" in names and "by-alice" not in names
    assert "password" not in denied.stderr + created.stderr


def test_vhost_created_through_management_applies_to_new_connections(router_factory, sasl_dir):
    vhosts = APP_VHOST.replace("hostname: $default", "hostname: apps.example")
    router = policy_router(router_factory, sasl_dir, vhosts)
    message = refused_login(router, "alice")      # her OPEN names 127.0.0.1: no vhost, no default
    assert "amqp:resource-limit-exceeded" in message
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as client:
        client.call("CREATE", type="org.apache.qpid.dispatch.vhost", name="$default",
                    body={"hostname": "$default", "groups": {"$default": {"remoteHosts": "*", "sources": "*",
                                                                           "targets": "*"}},
                          "allowUnknownUser": True})
    login(router, "alice").close()
    deadline = time.monotonic() + TIMEOUT
    while stats(router)["$default"]["connectionsApproved"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.05)


ROUTERS_VHOST = """
vhost {
    hostname: routers
    groups: {
        mesh: {
            users: admin
            remoteHosts: 127.0.0.1
        }
    }
}
"""


def inter_router_connector(port: int, user: str) -> str:
    return (f"connector {{\n    name: to-a\n    host: 127.0.0.1\n    port: {port}\n    role: inter-router\n"
            f"    saslMechanisms: SCRAM-SHA-256\n    saslUsername: {user}\n    saslPassword: pass:{PASSWORDS[user]}\n"
            "    retryDelaySeconds: 0.2\n    retryMaxDelaySeconds: 0.5\n}\n")


def test_an_inter_router_listener_takes_only_the_identities_its_policy_vhost_names(router_factory, sasl_dir):
    """A user with a good password but not a router's identity cannot join the mesh (tdrouterd's
    policyVhost on an inter-router listener)."""
    sections = ("listener {\n    name: inter-router\n    host: 127.0.0.1\n    port: 0\n    role: inter-router\n"
                "    authenticatePeer: yes\n    saslMechanisms: SCRAM-SHA-256\n    policyVhost: routers\n}\n"
                "policy {\n    enableVhostPolicy: true\n}\n" + LOCAL_VHOST + ROUTERS_VHOST)
    a = router_factory(sections, router_id="Router.A", mode="interior", router_extra=f"saslConfigDir: {sasl_dir}",
                       listener_extra="policyVhost: local")
    port = a.ports["inter-router"]
    rogue = router_factory(inter_router_connector(port, "alice"), router_id="Router.C", mode="interior")
    deadline = time.monotonic() + TIMEOUT
    while a.stderr_text().count("inter-router connection refused") < 2:
        assert time.monotonic() < deadline, a.stderr_text()
        time.sleep(0.05)
    assert "user is in no group" in a.stderr_text()
    b = router_factory(inter_router_connector(port, "admin"), router_id="Router.B", mode="interior")
    deadline = time.monotonic() + TIMEOUT
    while True:
        with ManagementClient(f"127.0.0.1:{a.ports['amqp']}", timeout=TIMEOUT) as client:
            rows = client.query("org.apache.qpid.dispatch.connection",
                                ["role", "user", "container", "operStatus", "opened"])
        # The rogue keeps reconnecting: an attempt not opened yet, or being refused ("closing"), is listed
        # until it is gone.
        routers = [r for r in rows if r["role"] == "inter-router" and r["operStatus"] == "up" and r["opened"]]
        if routers:
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert [(r["user"], r["container"]) for r in routers] == [("admin", "Router.B")]
    assert rogue.proc.poll() is None and b.proc.poll() is None
