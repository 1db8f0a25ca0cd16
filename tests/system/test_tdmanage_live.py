"""tdmanage (and tdstat -r) against real tdrouterd processes: live configuration changes take effect at
once, bad requests get 4xx without disturbing traffic, management reaches any router of a mesh."""

from __future__ import annotations

import json
import socket
import time

import pytest

from tests.system.clients import Consumer, Producer, close_all
from tests.system.harness import free_port, run_tool
from tests.system.meshharness import Mesh

pytestmark = pytest.mark.system

TIMEOUT = 20


@pytest.fixture(autouse=True)
def _close_clients(router_factory):
    yield
    close_all()


def tdmanage(router, *args: str, check: bool = True):
    return run_tool("tools.tdmanage", *args, "-b", f"127.0.0.1:{router.ports['amqp']}", check=check)


def tdmanage_json(router, *args: str):
    return json.loads(tdmanage(router, *args).stdout)


def wait_until(predicate, timeout: float = TIMEOUT, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_create_address_multicast_changes_live_routing(router_factory):
    r = router_factory()
    # Before: the default (balanced) gives each message to one consumer only.
    a1, a2 = (Consumer(r.url, "news.before", credit=10).start() for _ in range(2))
    Producer(r.url, "news.before", count=4).start().wait(TIMEOUT)
    assert a1.received() + a2.received() == 4
    created = tdmanage_json(r, "create", "--type", "address", "--name", "news", "prefix=news",
                            "distribution=multicast")
    assert created["distribution"] == "multicast" and created["type"] == "org.apache.qpid.dispatch.router.config.address"
    c1, c2 = (Consumer(r.url, "news.after", credit=10, count=3).start() for _ in range(2))
    Producer(r.url, "news.after", count=3).start().wait(TIMEOUT)
    c1.wait(TIMEOUT)
    c2.wait(TIMEOUT)
    assert c1.ids == c2.ids == [0, 1, 2]
    rows = tdmanage_json(r, "query", "--type", "org.apache.qpid.dispatch.router.config.address", "name", "prefix",
                         "distribution")
    assert rows == [{"name": "news", "prefix": "news", "distribution": "multicast"}]
    assert tdmanage(r, "delete", "--type", "address", "--name", "news").stdout == ""
    assert tdmanage_json(r, "query", "--type", "address") == []


def test_create_listener_accepts_a_client_and_delete_stops_it(router_factory):
    r = router_factory()
    port = free_port()
    tdmanage(r, "create", "--type", "listener", "--name", "extra", "host=127.0.0.1", f"port={port}")
    wait_until(lambda: f"tdrouterd: listening on 127.0.0.1:{port} (listener extra, role normal)" in r.stdout_lines,
               what="the new listener's start-up line")
    url = f"amqp://127.0.0.1:{port}"
    c = Consumer(url, "via-extra", count=2).start()
    Producer(r.url, "via-extra", count=2).start().wait(TIMEOUT)
    c.wait(TIMEOUT)
    listeners = {row["name"]: row for row in tdmanage_json(r, "query", "--type", "listener")}
    assert listeners["extra"]["port"] == str(port) and "amqp" in listeners
    # A port in use is a 400 naming the problem, and the router carries on.
    bad = tdmanage(r, "create", "--type", "listener", "--name", "again", "host=127.0.0.1", f"port={port}",
                   check=False)
    assert bad.returncode == 1 and "400" in bad.stderr and "cannot listen" in bad.stderr
    tdmanage(r, "delete", "--type", "listener", "--name", "extra")

    def refused() -> bool:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return False
        except OSError:
            return True

    wait_until(refused, what="the deleted listener to stop accepting")
    # The connection it had accepted stays up (as in Dispatch): it still receives.
    Producer(r.url, "via-extra", count=1, message_fn=lambda i: __import__("proton").Message(id=2, body="late")).start().wait(TIMEOUT)
    c.wait(TIMEOUT, count=3)


def _connections_from(router, container: str) -> list:
    rows = json.loads(run_tool("tools.tdmanage", "query", "--type", "connection", "container", "dir", "-b",
                               f"127.0.0.1:{router.ports['amqp']}").stdout)
    return [row for row in rows if row["container"] == container]


def test_create_and_delete_connector(router_factory):
    b = router_factory(router_id="Router.B")
    a = router_factory(router_id="Router.A")
    port_b = b.ports["amqp"]
    tdmanage(a, "create", "--type", "connector", "--name", "to-b", "host=127.0.0.1", f"port={port_b}",
             "retryDelaySeconds=0.2", "retryMaxDelaySeconds=0.5")
    wait_until(lambda: len(_connections_from(b, "Router.A")) == 1, what="Router.A's connection to Router.B")
    [row] = tdmanage_json(a, "query", "--type", "connector", "name", "connectionStatus", "port")
    assert row == {"name": "to-b", "connectionStatus": "SUCCESS", "port": str(port_b)}
    tdmanage(a, "delete", "--type", "connector", "--name", "to-b")
    wait_until(lambda: not _connections_from(b, "Router.A"), what="the connector's connection to close")
    time.sleep(1.5)  # three times the retry delay: a connector that still retried would be back
    assert not _connections_from(b, "Router.A")
    assert tdmanage_json(a, "query", "--type", "connector") == []


def test_configured_connector_deleted_drops_its_connection(router_factory):
    b = router_factory(router_id="Router.B")
    a = router_factory(f"connector {{\n name: peer\n host: 127.0.0.1\n port: {b.ports['amqp']}\n"
                       " retryDelaySeconds: 0.2\n}", router_id="Router.A")
    wait_until(lambda: len(_connections_from(b, "Router.A")) == 1, what="the configured connector")
    tdmanage(a, "delete", "--type", "org.apache.qpid.dispatch.connector", "--name", "peer")
    wait_until(lambda: not _connections_from(b, "Router.A"), what="the connection to close")
    time.sleep(1.0)
    assert not _connections_from(b, "Router.A")


def test_bad_requests_are_4xx_and_traffic_goes_on(router_factory):
    r = router_factory()
    c = Consumer(r.url, "steady", credit=20, count=3).start()
    p = Producer(r.url, "steady", count=1).start()
    p.wait(TIMEOUT)
    cases = [
        (("query", "--type", "org.apache.qpid.dispatch.nosuchtype"), "400", "No such entity type"),
        (("read", "--type", "org.apache.qpid.dispatch.nosuchtype", "--name", "x"), "404", "No such entity type"),
        (("read", "--type", "address", "--name", "missing"), "404", "missing"),
        (("create", "--type", "autoLink", "address=q"), "400", "'direction'"),
        (("create", "--type", "address", "prefix=x", "distribution=sideways"), "400", "distribution"),
        (("create", "--type", "address", "prefix=x", "colour=red"), "400", "'colour'"),
        (("create", "--type", "listener", "port=notaport"), "400", "port"),
        (("query", "--type", "router.link", "linkType", "nosuchattr"), "400", "'nosuchattr'"),
        (("update", "--type", "router.link", "--identity", "99999", "adminStatus=disabled"), "404", "99999"),
    ]
    for args, status, words in cases:
        proc = tdmanage(r, *args, check=False)
        assert proc.returncode == 1, args
        assert proc.stderr.startswith(f"tdmanage: {status} "), (args, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
    p.send([1, 2])
    p.wait(TIMEOUT)
    c.wait(TIMEOUT)
    assert c.ids == [0, 1, 2]
    assert r.is_running()


def test_update_link_admin_status_detaches_it(router_factory):
    r = router_factory()
    c = Consumer(r.url, "victim", name="victim-consumer").start()
    rows = tdmanage_json(r, "query", "--type", "router.link", "identity", "linkName")
    [row] = [x for x in rows if x["linkName"] == "victim-consumer-rx"]
    out = tdmanage_json(r, "update", "--type", "router.link", "--identity", row["identity"], "adminStatus=disabled")
    assert out["adminStatus"] == "disabled"
    wait_until(lambda: c.link_detached.is_set(), what="the link to be detached")


def test_get_types_operations_and_json(router_factory):
    r = router_factory()
    ops = tdmanage_json(r, "get-operations")
    assert ops["org.apache.qpid.dispatch.router.link"] == ["UPDATE", "READ"]
    attrs = tdmanage_json(r, "get-attributes", "--type", "org.apache.qpid.dispatch.connection")
    assert "container" in attrs["org.apache.qpid.dispatch.connection"]
    assert "org.apache.qpid.dispatch.listener" in tdmanage_json(r, "get-types")
    compact = tdmanage(r, "query", "--type", "router", "id", "mode", "--json").stdout
    assert compact.strip() == '[{"id": "Router.A", "mode": "standalone"}]'


@pytest.fixture
def two_router_mesh(tmp_path):
    started = []
    m = Mesh(tmp_path, started.append)
    yield m
    close_all()
    for r in started:
        if r.is_running():
            assert r.stop() == 0, r.stderr_text()[-2000:]


def test_management_across_the_mesh(two_router_mesh):
    m = two_router_mesh
    a = m.add("Router.A")
    m.add("Router.B", connect={"Router.A": 1})
    m.wait_converged()
    bus = f"127.0.0.1:{a.ports['amqp']}"
    out = run_tool("tools.tdstat", "-g", "-r", "Router.B", "-b", bus).stdout.splitlines()
    assert out[1] == "Router.B" and "  Router Id                        Router.B" in out
    assert "  Mode                             interior" in out
    nodes = run_tool("tools.tdstat", "-n", "-b", bus).stdout.splitlines()
    assert nodes[3] == "Routers in the Network" and nodes[4].startswith("Last Topology Change: ")
    assert nodes[5:] == ["  router-id  next-hop  link", "  " + "=" * 27,
                         "  Router.A   (self)    -", "  Router.B   -         0"]
    verbose = run_tool("tools.tdstat", "-n", "-v", "-b", bus).stdout.splitlines()
    assert verbose[7:] == ["  Router.A   (self)    -     1          ['Router.B']  []",
                           "  Router.B   -         0     1    1     ['Router.A']  []"]
    every = run_tool("tools.tdstat", "-c", "--all-routers", "-b", bus).stdout
    assert "Router  Router.A" in every and "Router  Router.B" in every
    rows = json.loads(run_tool("tools.tdmanage", "query", "--type", "router", "id", "-r", "Router.B",
                               "-b", bus).stdout)
    assert rows == [{"id": "Router.B"}]
    nodes = json.loads(run_tool("tools.tdmanage", "get-mgmt-nodes", "-b", bus).stdout)
    assert nodes == ["amqp:/_topo/0/Router.B/$management"]


def test_unknown_router_id_times_out_with_a_clear_message(router_factory):
    r = router_factory()
    proc = run_tool("tools.tdstat", "-g", "-r", "Router.Nowhere", "-t", "2", "-b", f"127.0.0.1:{r.ports['amqp']}",
                    check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "tdstat: TimeoutError: no answer from _topo/0/Router.Nowhere/$management within 2 s"
    assert run_tool("tools.tdstat", "-g", "-b", f"127.0.0.1:{r.ports['amqp']}").returncode == 0


# -- a pattern link route created through tdmanage, used across a mesh -------------------------------------

ORDERS_BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<core xmlns="urn:activemq:core">
  <name>orders-broker</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="orders.42.eu"><anycast><queue name="orders.42.eu"/></anycast></address>
  </addresses>
</core>
</configuration>
"""

#: Two link routes (client senders in, client receivers out) for one pattern, to the connection named
#: ``broker``: the form tdmanage creates them in, and the configuration file's form of the same.
ORDERS_ROUTES = [("orders-in", "in"), ("orders-out", "out")]
ORDERS_PATTERN = "orders.*.eu"
ORDERS_ROUTES_CONF = "\n\n".join(
    f"linkRoute {{\n    name: {name}\n    pattern: {ORDERS_PATTERN}\n    direction: {direction}\n"
    "    connection: broker\n}" for name, direction in ORDERS_ROUTES)


@pytest.fixture
def orders_broker(tmp_path):
    from tools.daemons import BROKER, DaemonProcess

    conf = tmp_path / "orders-broker.xml"
    conf.write_text(ORDERS_BROKER_XML.format(journal=tmp_path / "journal"))
    broker = DaemonProcess(BROKER, conf, start_timeout=TIMEOUT).start()
    yield broker
    close_all()
    assert broker.stop() in (0, None), broker.stderr_text()[-2000:]


def _attach_when_routed(make_client, timeout: float = TIMEOUT):
    """A link-routed client attached once the route has reached its router. Until then the router refuses
    the attach with qd:no-route-to-dest; each refused client is closed and a new one tried."""
    deadline = time.monotonic() + timeout
    while True:
        client = make_client().start()
        if not client.link_errors:
            return client
        client.close()
        if time.monotonic() > deadline:
            raise AssertionError(f"the link was never routed: {client.link_errors}")
        time.sleep(0.2)


@pytest.mark.parametrize("created_on", ["C", "A"], ids=["on-the-container-router", "on-the-client-router"])
def test_pattern_link_route_created_with_tdmanage_routes_across_a_mesh(two_router_mesh, orders_broker, created_on):
    """A - B - C with a broker behind C (connector ``broker``, role route-container). The pattern link
    routes are created with tdmanage on one router (C next to the container, or A next to the client);
    the other routers have them from their configuration. A sender and a receiver attached on A for
    ``orders.42.eu`` are link-routed through B and C to the broker's queue. A management-created pattern
    route used to be keyed as a prefix route (C.../D... instead of E.../F...), so A and C disagreed on the
    route and the attach was refused with qd:no-route-to-dest."""
    m = two_router_mesh
    container = ("connector {\n    name: broker\n    host: 127.0.0.1\n"
                 f"    port: {orders_broker.ports['amqp']}\n    role: route-container\n"
                 "    retryDelaySeconds: 0.2\n}")

    def routes(rid: str) -> str:
        return "" if rid == created_on else ORDERS_ROUTES_CONF

    m.add("A", sections=routes("A"))
    m.add("B", connect={"A": 1}, sections=routes("B"))
    m.add("C", connect={"B": 1}, sections=container + "\n\n" + routes("C"))
    for name, direction in ORDERS_ROUTES:
        created = tdmanage_json(m[created_on], "create", "--type", "linkRoute", "--name", name,
                                f"pattern={ORDERS_PATTERN}", f"direction={direction}", "connection=broker")
        assert created["pattern"] == ORDERS_PATTERN and created["prefix"] is None
    keys = {row["key"] for row in tdmanage_json(m[created_on], "query", "--type", "router.address", "key")}
    assert {"E" + ORDERS_PATTERN, "F" + ORDERS_PATTERN} <= keys
    m.wait_converged()

    producer = _attach_when_routed(lambda: Producer(m.url("A"), "orders.42.eu", count=5))
    producer.wait(TIMEOUT)
    assert producer.outcomes == {"accepted": 5}  # the broker's outcomes: it holds them
    consumer = _attach_when_routed(lambda: Consumer(m.url("A"), "orders.42.eu", credit=10, count=5))
    consumer.wait(TIMEOUT)
    assert consumer.ids == [0, 1, 2, 3, 4]
    # The broker served them: its queue delivered and was acknowledged all five.
    broker_bus = f"127.0.0.1:{orders_broker.ports['amqp']}"

    def queue_row() -> dict:
        rows = json.loads(run_tool("tools.tdmanage", "query", "--type", "org.apache.activemq.artemis.queue",
                                   "name", "messageCount", "acknowledgedCount", "-b", broker_bus).stdout)
        [row] = [r for r in rows if r["name"] == "orders.42.eu"]
        return row

    wait_until(lambda: queue_row() == {"name": "orders.42.eu", "messageCount": 0, "acknowledgedCount": 5},
               what="the broker's queue to have all five acknowledged")


def test_security_settings_not_enforced_are_refused_and_passwords_never_shown(router_factory):
    """Issue 12: a CREATE with a security setting the router cannot enforce (an undefined sslProfile,
    authenticatePeer without users, saslPlugin) is a 400 naming it (not a listener that takes plaintext
    anonymous clients), and a connector's saslPassword is never returned."""
    b = router_factory(router_id="Router.B")
    a = router_factory(f"connector {{\n name: up\n host: 127.0.0.1\n port: {b.ports['amqp']}\n"
                       " saslUsername: admin\n saslPassword: pass:hunter2\n retryDelaySeconds: 0.2\n}",
                       router_id="Router.A")
    port = free_port()
    for args, words in (
        (("create", "--type", "listener", "--name", "tls", "host=127.0.0.1", f"port={port}", "sslProfile=x"),
         "sslProfile 'x' is not defined"),
        (("create", "--type", "listener", "--name", "auth", "host=127.0.0.1", f"port={port}",
          "authenticatePeer=yes"), "authenticatePeer: yes leaves no mechanism"),
        (("create", "--type", "sslProfile", "--name", "x", "certFile=/c"), "cannot be created through management"),
        (("create", "--type", "listener", "--name", "plug", "host=127.0.0.1", f"port={port}", "saslPlugin=p"),
         "saslPlugin is not enforced yet"),
    ):
        proc = tdmanage(a, *args, check=False)
        assert proc.returncode == 1 and proc.stderr.startswith("tdmanage: 400 "), (args, proc.stderr)
        assert words in proc.stderr, (args, proc.stderr)
    with socket.socket() as s:   # nothing was opened on the refused listener's port
        assert s.connect_ex(("127.0.0.1", port)) != 0
    [row] = tdmanage_json(a, "query", "--type", "connector")
    assert row["saslUsername"] == "admin" and row.get("saslPassword") is None
    read = tdmanage_json(a, "read", "--type", "connector", "--name", "up")
    assert read.get("saslPassword") is None
    assert "hunter2" not in tdmanage(a, "query", "--type", "connector").stdout
    assert "hunter2" not in a.stderr_text()     # nor in the router's log
