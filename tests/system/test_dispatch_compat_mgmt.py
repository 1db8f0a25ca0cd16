"""Dispatch compatibility of management and tdstat (issue 13, "Management"): what Qpid Dispatch 1.19's
qdstat and qdmanage show and answer, on real tdrouterd processes with real proton clients.

* ``tdstat -m`` has qdstat's Memory Pools / Memory Summary layout over the router's own record counts;
* ``tdstat --vhosts / --vhostgroups / --vhoststats`` have qdstat's layout over the vhost types;
* a fresh router lists the internal addresses Dispatch's does (``$_management_internal``,
  ``_$qd.edge_heartbeat``) and they work;
* entity names and identities follow Dispatch (router, listener, connector), and an untyped QUERY answers
  the router's attributes;
* GET-ATTRIBUTES and GET-OPERATIONS answer for every type Dispatch 1.19 has;
* ``router.link``'s ``priority`` (qdstat -l ``pri``) is Dispatch's: 4 on endpoint links, 0..9 on the ten
  inter-router data links of each direction.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from tests.paths import REPO
from tests.system.clients import close_all
from tests.system.harness import RouterProcess, free_port
from tests.system.meshharness import Mesh
from tools.mgmtclient import ManagementClient
from wire import management as wm

TIMEOUT = 20.0
T = "org.apache.qpid.dispatch."

#: Every entity type of Qpid Dispatch 1.19 (``qdmanage get-types``) except its test-only ``dummy``.
DISPATCH_TYPES = [
    "entity", "org.amqp.management", "management", "configurationEntity", "operationalEntity", "router",
    "sslProfile", "authServicePlugin", "listener", "connector", "log", "logStats", "router.config.address",
    "router.config.linkRoute", "router.config.autoLink", "router.config.exchange", "router.config.binding",
    "router.link", "router.address", "router.node", "connection", "allocator", "console", "policy", "vhost",
    "vhostUserGroupSettings", "vhostStats", "router.connection.linkRoute",
]
#: The base types carry no attributes of their own and only the node-level operations.
ABSTRACT_TYPES = {"entity", "org.amqp.management", "management", "configurationEntity", "operationalEntity"}

LOCAL_VHOST = """
policy {
    enableVhostPolicy: true
}
vhost {
    hostname: local
    maxConnections: 50
    groups: {
        local: {
            users: anonymous
            remoteHosts: 127.0.0.1
            sources: *
            targets: *
            allowDynamicSource: true
            allowAnonymousSender: true
            maxSenders: 20
        }
    }
}
"""


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    """A standalone router as a Dispatch user configures one: vhost policy, an unnamed listener, a named
    connector (to a port nobody listens on)."""
    sections = LOCAL_VHOST + (
        "listener {\n    host: 127.0.0.1\n    port: 0\n    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n"
        "    policyVhost: local\n}\n"
        f"connector {{\n    name: away\n    host: 127.0.0.1\n    port: {free_port()}\n    role: normal\n}}\n")
    r = RouterProcess(tmp_path_factory.mktemp("mgmt"), sections, router_id="QDR.S",
                      listener_extra="policyVhost: local").start()
    yield r
    close_all()
    assert r.stop() == 0


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    m = Mesh(tmp_path_factory.mktemp("mesh"), None)
    m.add("A", sections="linkRoute {\n    prefix: lr\n    direction: in\n    containerId: broker\n}")
    m.add("B", connect={"A": 1})
    m.wait_route("B", "A", TIMEOUT)
    yield m
    close_all()
    m.stop_all()


def bus(router) -> str:
    return f"127.0.0.1:{router.ports['amqp']}"


def tdstat(router, *args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "tools.tdstat", "-b", bus(router), *args], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return out.splitlines()


def table(lines: list[str], title: str) -> tuple[list[str], list[list[str]]]:
    """(header words, rows as lists of words) of the table under ``title`` (qdstat's layout: title, header,
    rule of '=', rows indented by two spaces, up to a blank line)."""
    i = lines.index(title)
    head = lines[i + 1]
    assert head.startswith("  ") and set(lines[i + 2].strip()) == {"="}, lines[i:i + 3]
    rows = []
    for line in lines[i + 3:]:
        if not line.startswith("  "):
            break
        rows.append(line.split())
    return head.split(), rows


# -- qdstat -m ------------------------------------------------------------------------------------------
def test_tdstat_memory_has_qdstats_layout_over_the_routers_own_counts(router):
    lines = tdstat(router, "-m")
    head, rows = table(lines, "Memory Pools")
    assert head == ["type", "size", "batch", "thread-max", "total", "in-threads", "rebal-in", "rebal-out"]
    types = [r[0] for r in rows]
    assert types == sorted(types) and {"Address", "InDelivery", "RouterConnection", "RouterLink"} <= set(types)
    summary_head, [summary] = table(lines, "Memory Summary")
    assert summary_head == ["VmSize", "Pooled"] and summary[1] in ("B", "KiB", "MiB")
    # The counts are the router's own: as many links, connections and addresses as it reports itself.
    receiver_conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        for i in range(3):
            receiver_conn.create_receiver(f"memory.{i}", credit=1)
        with ManagementClient(bus(router), timeout=TIMEOUT) as client:
            pools = {r["identity"]: r for r in client.query(T + "allocator")}
            [general] = client.query(T + "router", ["linkCount", "connectionCount", "addrCount"])
    finally:
        receiver_conn.close()
    assert pools["allocator/RouterLink"]["totalAllocFromHeap"] == general["linkCount"] >= 5
    assert pools["allocator/RouterConnection"]["totalAllocFromHeap"] == general["connectionCount"] >= 2
    assert pools["allocator/Address"]["totalAllocFromHeap"] == general["addrCount"]
    assert all(p["name"] == p["identity"] and p["heldByThreads"] == p["totalAllocFromHeap"]
               for p in pools.values())


# -- qdstat --vhosts, --vhostgroups, --vhoststats ---------------------------------------------------------
def test_tdstat_vhost_views_have_qdstats_layout(router):
    lines = tdstat(router, "--vhosts")
    assert lines[0] == "Vhosts"          # qdstat prints these views without the date and router id
    head, rows = table(lines, "Vhosts")
    assert head == ["hostname", "maxConnections", "maxMessageSize", "maxConnectionsPerUser",
                    "maxConnectionsPerHost", "allowUnknownUser", "groups"]
    assert rows == [["local", "50", "0", "65535", "65535", "False", "1"]]

    lines = tdstat(router, "--vhostgroups")
    head, rows = table(lines, "Vhost Groups")
    assert head[:4] == ["vhost", "group", "maxConnectionsPerUser", "maxConnectionsPerHost"]
    assert head[-1] == "allowFallbackLinks" and len(head) == 17
    [row] = rows
    values = dict(zip(head, row))
    assert values["vhost"] == "local" and values["group"] == "local"
    assert values["maxSenders"] == "20"                  # the group's own setting
    assert values["maxFrameSize"] == "16384"             # Dispatch's default for one it leaves out
    assert values["allowDynamicSource"] == "True" and values["allowUserIdProxy"] == "False"
    attr_head, attrs = table(lines, "Vhost 'local' UserGroup 'local'")
    assert attr_head == ["attr", "value"]
    assert dict((r[0], " ".join(r[1:])) for r in attrs)["users"] == "anonymous"

    lines = tdstat(router, "--vhoststats")
    head, rows = table(lines, "Vhost Stats")
    assert head == ["hostname", "connectionsApproved", "connectionsDenied", "connectionsCurrent", "sessionDenied",
                    "senderDenied", "receiverDenied", "maxMessageSizeDenied"]
    [row] = rows
    assert row[0] == "local" and int(row[1]) >= 1 and int(row[3]) >= 1
    head, users = table(lines, "Vhost User Stats")
    assert head == ["vhost", "user", "remote", "hosts"] and users[0][:2] == ["local", "anonymous"]


# -- qdstat -a on a fresh router ----------------------------------------------------------------------------
def test_fresh_router_lists_dispatchs_internal_addresses_and_they_work(router):
    with ManagementClient(bus(router), timeout=TIMEOUT) as client:
        rows = {r["name"]: r for r in client.query(T + "router.address", ["name", "distribution"])}
    assert rows["L$_management_internal"]["distribution"] == "closest"
    assert rows["M0$management"]["distribution"] == "closest"
    assert rows["L$management"]["distribution"] == "closest"
    assert rows["M0_$qd.edge_heartbeat"]["distribution"] == "balanced"
    lines = tdstat(router, "-a")
    _, table_rows = table(lines, "Router Addresses")
    internal = [r[:3] for r in table_rows if not r[1].startswith("temp.")]
    assert internal == [["local", "$_management_internal", "closest"], ["mobile", "$management", "0"],
                        ["local", "$management", "closest"], ["mobile", "_$qd.edge_heartbeat", "0"]]

    # $_management_internal answers management requests (Dispatch's Python agent's address), sent the way
    # Dispatch's client sends them: on a sender attached to the node's address, replies to a dynamic receiver.
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        replies = conn.create_receiver(None, dynamic=True, credit=1)
        request = Message()
        request.decode(wm.build_request("QUERY", type=wm.NODE_TYPE, name="self", entityType=T + "router",
                                        body={"attributeNames": ["id"]}, correlation_id=str(uuid.uuid4()),
                                        reply_to=replies.remote_source.address, to=None))
        conn.create_sender("_local/$_management_internal").send(request, timeout=TIMEOUT)
        response = wm.parse_response(replies.receive(timeout=TIMEOUT))
        assert response.status == wm.OK and response.body["results"] == [["QDR.S"]]
    finally:
        conn.close()
    # A heartbeat (what an edge router sends) is accepted, as Dispatch's heartbeat server accepts it.
    conn = BlockingConnection(router.url, timeout=TIMEOUT)
    try:
        sender = conn.create_sender("_$qd.edge_heartbeat")
        delivery = sender.send(Message(body="beat"), timeout=TIMEOUT)
        assert delivery.remote_state == Delivery.ACCEPTED
    finally:
        conn.close()


# -- entity names and the untyped QUERY ---------------------------------------------------------------------
def test_entity_names_and_identities_are_dispatchs(router):
    with ManagementClient(bus(router), timeout=TIMEOUT) as client:
        [typed] = client.query(T + "router", ["name", "identity", "id"])
        assert typed == {"name": "QDR.S", "identity": "1", "id": "QDR.S"}    # Dispatch's core agent
        body = client.call("QUERY", name="self", body={"attributeNames": ["name", "identity", "linkCount",
                                                                            "connectionCount"]})
        untyped = [dict(zip(body["attributeNames"], r)) for r in body["results"]]
        [row] = [r for r in untyped if r["linkCount"] is not None]
        assert row["name"] == row["identity"] == "router/QDR.S"           # Dispatch's Python agent
        assert row["linkCount"] >= 2 and row["connectionCount"] >= 1
        assert client.call("READ", identity="router/QDR.S")["id"] == "QDR.S"
        listeners = {r["name"]: r["identity"] for r in client.query(T + "listener", ["name", "identity"])}
        assert listeners["amqp"] == "listener/127.0.0.1:0:amqp"            # named: host:port:name
        assert listeners["listener/127.0.0.1:0"] == "listener/127.0.0.1:0"  # unnamed: named by its identity
        [connector] = client.query(T + "connector", ["name", "identity", "port"])
        assert connector["identity"] == f"connector/127.0.0.1:{connector['port']}:away"
        assert client.call("READ", type=T + "connector", identity=connector["identity"])["name"] == "away"
        # vhost/<hostname> and vhostStats/<hostname> (Dispatch's VhostEntity and VhostStatsEntity identifiers)
        assert client.query(T + "vhost", ["identity", "hostname"]) == [{"identity": "vhost/local",
                                                                         "hostname": "local"}]
        assert client.query(T + "vhostStats", ["name", "identity"]) == [{"name": "vhostStats/local",
                                                                          "identity": "vhostStats/local"}]
        # A name no type has is Dispatch's 404.
        response = client.request("QUERY", name="self", body={"attributeNames": ["noSuchAttribute"]})
        assert response.status == wm.NOT_FOUND
    # qdmanage query without --type: every entity, attributes that do not apply left out.
    out = subprocess.run([sys.executable, "-m", "tools.tdmanage", "-b", bus(router), "query", "name", "linkCount"],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=True).stdout
    entities = json.loads(out)
    assert [e for e in entities if "linkCount" in e] == [{"name": "router/QDR.S", "linkCount": row["linkCount"]}]
    assert {"name": "listener/127.0.0.1:0"} in entities


# -- GET-ATTRIBUTES / GET-OPERATIONS for every type ---------------------------------------------------------
def test_get_attributes_and_get_operations_answer_for_every_dispatch_type(router):
    with ManagementClient(bus(router), timeout=TIMEOUT) as client:
        everything = client.call("GET-ATTRIBUTES", name="self")
        operations = client.call("GET-OPERATIONS", name="self")
        for short in DISPATCH_TYPES:
            full = T + short
            assert full in everything, full
            assert full in operations, full
            if short in ABSTRACT_TYPES:
                continue
            attrs = client.call("GET-ATTRIBUTES", name="self", entityType=full)
            assert set(attrs) == {full} and {"name", "identity", "type"} <= set(attrs[full]), full
            ops = client.call("GET-OPERATIONS", name="self", entityType=full)
            assert set(ops) == {full} and "READ" in ops[full], full
            response = client.request("QUERY", name="self", entityType=full, body={"attributeNames": []})
            assert response.status == wm.OK, (full, response)
        schema = client.call("GET-SCHEMA", name="self")
        group = schema["entityTypes"]["vhostUserGroupSettings"]["attributes"]
        assert group["maxFrameSize"]["default"] == 16384 and group["allowWaypointLinks"]["default"] is True


# -- link priority (qdstat -l pri) ----------------------------------------------------------------------------
def test_link_priorities_are_dispatchs(mesh):
    for rid in ("A", "B"):
        with ManagementClient(mesh.url(rid).replace("amqp://", ""), timeout=TIMEOUT) as client:
            links = client.query(T + "router.link", ["linkType", "linkDir", "priority", "deliveryCount"])
        for direction in ("in", "out"):
            data = sorted(r["priority"] for r in links
                          if r["linkType"] == "inter-router" and r["linkDir"] == direction)
            assert data == list(range(10)), (rid, direction, data)
        endpoint = [r["priority"] for r in links if r["linkType"] == "endpoint"]
        assert endpoint and set(endpoint) == {4}, (rid, endpoint)
        # Dispatch lists the two router-control links of each inter-router connection too, priority 9,
        # and counts them in the router's linkCount (24 links on a fresh 2-router mesh's pair of routers).
        control = [r for r in links if r["linkType"] == "router-control"]
        assert sorted(r["linkDir"] for r in control) == ["in", "out"], (rid, control)
        assert {r["priority"] for r in control} == {9} and all(r["deliveryCount"] > 0 for r in control), control
        with ManagementClient(mesh.url(rid).replace("amqp://", ""), timeout=TIMEOUT) as client:
            [router] = client.query(T + "router", ["linkCount"])
            after = client.query(T + "router.link", ["identity"])
        assert router["linkCount"] == len(after), (router, len(after))


# -- the address lookup server of an interior router ------------------------------------------------------------
def test_interior_lists_the_address_lookup_server_and_it_answers(mesh):
    """What a Dispatch edge router asks its interior before it attaches a link-routed address
    (address_lookup_server.c): version 1, opcode 1, body [address, receiving]."""
    url = mesh.url("A")
    with ManagementClient(url.replace("amqp://", ""), timeout=TIMEOUT) as client:
        rows = {r["name"]: r for r in client.query(T + "router.address", ["name", "distribution", "inProcess"])}
    assert rows["M0_$qd.addr_lookup"] == {"name": "M0_$qd.addr_lookup", "distribution": "balanced", "inProcess": 0}
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        replies = conn.create_receiver(None, dynamic=True, credit=2)
        sender = conn.create_sender("_$qd.addr_lookup")
        answers = []
        for address in ("lr.orders", "plain.queue"):
            request = Message(reply_to=replies.remote_source.address, correlation_id=address,
                              properties={"version": 1, "opcode": 1}, body=[address, True])
            assert sender.send(request, timeout=TIMEOUT).remote_state == Delivery.ACCEPTED
            reply = replies.receive(timeout=TIMEOUT)
            answers.append((reply.correlation_id, reply.properties["status"], reply.body))
    finally:
        conn.close()
    # lr.* is an 'in' link route of A with no container connected; plain.queue is no link route
    assert answers == [("lr.orders", 0, [True, False]), ("plain.queue", 3, [False, False])]


# -- the routing protocol's addresses on an interior ------------------------------------------------------------
def test_interior_lists_the_routing_protocols_addresses_with_their_traffic(mesh):
    """Dispatch's interiors list qdhello, qdrouter and qdrouter.ma (local, and topological with one remote
    per reachable router); here they count the control links' traffic (router/mesh/counters.py)."""
    with ManagementClient(mesh.url("B").replace("amqp://", ""), timeout=TIMEOUT) as client:
        rows = {r["key"]: r for r in client.query(T + "router.address", [
            "key", "distribution", "subscriberCount", "remoteCount", "deliveriesIngress", "deliveriesEgress",
            "deliveriesTransit"])}
    shape = {k: (rows[k]["distribution"], rows[k]["subscriberCount"], rows[k]["remoteCount"])
             for k in ("Lqdhello", "Lqdrouter", "Tqdrouter", "Lqdrouter.ma", "Tqdrouter.ma")}
    assert shape == {"Lqdhello": ("flood", 1, 0), "Lqdrouter": ("flood", 0, 0), "Tqdrouter": ("flood", 0, 1),
                     "Lqdrouter.ma": ("multicast", 0, 0), "Tqdrouter.ma": ("multicast", 0, 1)}, shape
    hello, ra = rows["Lqdhello"], rows["Tqdrouter"]
    assert hello["deliveriesIngress"] > 0 and hello["deliveriesEgress"] > 0, hello     # HELLOs both ways
    assert ra["deliveriesIngress"] > 0 and ra["deliveriesTransit"] >= ra["deliveriesIngress"], ra   # RAs sent
