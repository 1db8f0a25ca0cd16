"""A federation stream's connection settings on real tdbroker processes (docs/federation.md, broker/fedcalls.py):

* ``call-timeout``: an upstream that accepts TCP but never answers the OPEN is given up after the
  call-timeout and dialled again, and management names the call that timed out;
* ``share-connection``: an upstream and a downstream of one federation to the same broker use one TCP
  connection (counted by a proxy in front of that broker), and both work over it;
* ``ha``: the stream learns the upstream's network peers from its OPEN's failover-server-list and, when the
  upstream is killed, fails over to one of them and federates from it.
"""

from __future__ import annotations

import socket
import threading

import pytest

from tests.system.brokerharness import TIMEOUT
from tests.system.clients import close_all
from tests.system.fedharness import Subscriber, federation_queue, publish, wait_federated
from tests.system.netharness import HOST, Network, connector_xml, failover_servers, reserve_port, server_ports
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient

STREAM = "org.apache.activemq.artemis.federationStream"
POLICY = '<address-policy name="p" max-hops="1"><include address-match="news"/></address-policy>'
FAST = "<retry-interval>100</retry-interval><max-retry-interval>200</max-retry-interval>"


class CountingProxy:
    """A TCP listener that counts the connections it accepts and, given a ``target`` port, relays them
    there byte for byte (counting only those it could relay); without one it reads and discards (a peer
    that never answers)."""

    def __init__(self, target: int | None = None):
        self.target = target
        self.port = reserve_port()
        self.accepted = 0
        self._sock = socket.socket()
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((HOST, self.port))
        self._sock.listen(16)
        self._open: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            self.accepted += 1
            self._open.append(client)
            if self.target is None:
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            try:
                server = socket.create_connection((HOST, self.target))
            except OSError:   # the broker behind is not up yet: not a connection to it
                self.accepted -= 1
                client.close()
                continue
            self._open.append(server)
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket | None) -> None:
        try:
            while data := src.recv(65536):
                if dst is not None:
                    dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            if s is not None:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        for s in self._open:
            s.close()


def streams(broker) -> list[dict]:
    mgmt = ManagementClient(f"{HOST}:{broker.port}", timeout=TIMEOUT)
    try:
        return mgmt.query(STREAM, ["federation", "stream", "kind", "state", "remote", "lastError", "sharedWith",
                                   "reconnectAttempts", "command"])
    finally:
        mgmt.close()


def upstream_xml(port: int, settings: str) -> str:
    return (f'<connectors><connector name="c">tcp://{HOST}:{port}</connector></connectors>'
            f'<federations><federation name="f"><upstream name="up">{FAST}{settings}'
            '<static-connectors><connector-ref>c</connector-ref></static-connectors><policy ref="p"/></upstream>'
            f'{POLICY}</federation></federations>')


@pytest.fixture
def nets():
    made: list[Network] = []
    proxies: list[CountingProxy] = []
    yield made, proxies
    close_all()
    for p in proxies:
        p.close()
    problems = [p for net in made for p in net.stop()]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("call_timeout,dials", [(300, 3), (None, 1)])
def test_call_timeout_redials_an_upstream_that_never_answers(nets, tmp_path, call_timeout, dials):
    """call-timeout 300 ms: an upstream that swallows our OPEN is left and dialled again, several times in
    a few seconds, and lastError names the OPEN; with the default (30 s) the one connection just waits."""
    made, proxies = nets
    hole = CountingProxy()
    proxies.append(hole)
    net = Network(tmp_path, ["a"])
    made.append(net)
    settings = f"<call-timeout>{call_timeout}</call-timeout>" if call_timeout else ""
    net.configure("a", topics=["news"], extra=upstream_xml(hole.port, settings))
    net.start()
    if call_timeout:
        wait_for(lambda: hole.accepted >= dials, f"{dials} dials of the silent upstream (got {hole.accepted})",
                 TIMEOUT)
        row = next(r for r in streams(net["a"]) if r["stream"] == "up")
        assert "call-timeout: open unanswered" in row["lastError"], row
    else:
        wait_for(lambda: hole.accepted >= 1, "the first dial", TIMEOUT)
        threading.Event().wait(2.0)   # a 300 ms call-timeout would have redialled 3+ times by now
        assert hole.accepted == 1
        row = next(r for r in streams(net["a"]) if r["stream"] == "up")
        assert row["lastError"] == "", row


def test_share_connection_carries_the_upstream_and_the_downstreams_command_on_one_connection(nets, tmp_path):
    """A has an upstream and a downstream to B, both share-connection: one connection reaches B (through
    the proxy); A federates B's messages over it, and the command it carried made B federate from A."""
    made, proxies = nets
    net = Network(tmp_path, ["a", "b"])
    made.append(net)
    proxy = CountingProxy(net.port("b"))
    proxies.append(proxy)
    share = "<share-connection>true</share-connection>"
    fed = (f'<connectors><connector name="b">tcp://{HOST}:{proxy.port}</connector>'
           f'<connector name="me">tcp://{HOST}:{net.port("a")}</connector></connectors>'
           f'<federations><federation name="f">'
           f'<upstream name="up">{FAST}{share}<static-connectors><connector-ref>b</connector-ref>'
           '</static-connectors><policy ref="p"/></upstream>'
           f'<downstream name="down">{FAST}{share}<static-connectors><connector-ref>b</connector-ref>'
           '</static-connectors><policy ref="p"/><upstream-connector-ref>me</upstream-connector-ref></downstream>'
           f'{POLICY}</federation></federations>')
    net.configure("a", topics=["news"], extra=fed)
    net.configure("b", topics=["news"])
    net.start(["b"])   # first: A's first dial then reaches it
    net.start(["a"])
    on_a, on_b = Subscriber(net["a"], "news").start(), Subscriber(net["b"], "news").start()
    wait_federated(net["b"], federation_queue("a", "up", "news", "f"))     # A's upstream, over the proxy
    wait_federated(net["a"], federation_queue("b", "down", "news", "f"))   # B's upstream made by the command
    publish(net["b"], "news", ["from-b"])
    publish(net["a"], "news", ["from-a"])
    on_a.wait_ids(["from-a", "from-b"])
    on_b.wait_ids(["from-a", "from-b"])
    assert proxy.accepted == 1, f"{proxy.accepted} connections from A to B: the downstream did not share"
    rows = {r["stream"]: r for r in streams(net["a"])}
    assert rows["down"]["sharedWith"] == "up" and rows["down"]["command"] == "accepted", rows
    assert rows["up"]["state"] == rows["down"]["state"] == "connected", rows


def test_ha_fails_over_to_a_broker_of_the_upstreams_network(nets, tmp_path):
    """B and C are a network; A federates news from B with ha: B's OPEN lists C. Once B is killed,
    A's stream dials C, keeps its federation queue there, and what is published on C reaches A."""
    made, _ = nets
    net = Network(tmp_path, ["a", "b", "c"])
    made.append(net)
    net.configure("c", topics=["news"])
    net.configure("b", topics=["news"], connectors=[connector_xml("to-c", net.port("c"), topics=["news"],
                                                                  duplex=True)])
    net.configure("a", topics=["news"], extra=upstream_xml(net.port("b"), "<ha>true</ha>"))
    net.start(["b", "c"])
    wait_for(lambda: net.port("c") in server_ports(failover_servers(net["b"])), "C in B's failover list", TIMEOUT)
    net.start(["a"])
    on_a = Subscriber(net["a"], "news").start()
    wait_federated(net["b"], federation_queue("a", "up", "news", "f"))
    net["b"].kill()
    wait_federated(net["c"], federation_queue("a", "up", "news", "f"))
    publish(net["c"], "news", ["after-failover"])
    on_a.wait_ids(["after-failover"])
    row = next(r for r in streams(net["a"]) if r["stream"] == "up")
    assert row["remote"].endswith(f":{net.port('c')}") and row["state"] == "connected", row
