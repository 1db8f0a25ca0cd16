"""router.link and ``tdstat -l`` list every kind of link Dispatch lists (issue 18): a real interior tdrouterd
with a link route to a real tdbroker and an inter-router connection to a second interior shows its two
``router-control`` links, its twenty ``inter-router`` data links, and both sides of a link-routed pair
(``endpoint`` links owned by the route's ``D`` address, each naming the other as ``peer``) with the pair's
delivery and accepted counts after traffic, in management and in tdstat's table."""

from __future__ import annotations

import re
import time

import pytest

from tests.system.brokerharness import LINK_ROUTES, TIMEOUT, BrokerProcess, attach_when_routed, send_all
from tests.system.clients import Consumer, close_all
from tests.system.harness import free_port, run_tool
from tests.system.meshharness import Mesh
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.system

N = 12

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>views-broker</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP</acceptor></acceptors>
</core></configuration>
"""


@pytest.fixture
def two_routers_and_a_broker(tmp_path):
    """Interior A (link routes ``test`` to a tdbroker) and interior B connected to A."""
    port = free_port()
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "journal", port=port))
    broker = BrokerProcess(conf, tmp_path).start()
    started = []
    mesh = Mesh(tmp_path, started.append)
    try:
        mesh.add("A", sections=LINK_ROUTES.format(port=port))
        mesh.add("B", listen=False, connect={"A": 1})
        yield mesh
    finally:
        close_all()
        codes = {r.router_id: r.stop() for r in started if r.proc is not None and not r.start_failed}
        assert broker.stop() == 0, broker.stderr_text()
        assert all(code == 0 for code in codes.values()), codes


def _links(router) -> list[dict]:
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as mc:
        return mc.query("org.apache.qpid.dispatch.router.link")


def _wait_links(router, ready, what: str) -> list[dict]:
    deadline = time.monotonic() + TIMEOUT
    while True:
        rows = _links(router)
        if ready(rows):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"router.link never showed {what}: {rows}")
        time.sleep(0.1)


def _table(text: str) -> list[dict]:
    """tdstat's plain table as dicts: each column starts where its header starts (the layout pads every
    cell to its column's width), so empty cells are read as empty."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.lstrip().startswith("type "))
    columns = list(re.finditer(r"\S+(?: \S+)*", lines[head]))   # names hold single spaces ("conn id")
    names, starts = [m.group(0) for m in columns], [m.start() for m in columns]
    rows = []
    for line in lines[head + 2:]:
        if not line.strip():
            break
        cells = [line[s:e].strip() for s, e in zip(starts, starts[1:] + [len(line)])]
        rows.append(dict(zip(names, cells)))
    return rows


def _routed_pair_counted(rows: list[dict]) -> bool:
    routed = [r for r in rows if (r.get("owningAddr") or "").startswith("D")]
    return len(routed) == 2 and all(r["deliveryCount"] == N and r["acceptedCount"] == N for r in routed)


def test_control_data_and_link_routed_links_in_router_link_and_tdstat(two_routers_and_a_broker):
    mesh = two_routers_and_a_broker
    a = mesh["A"]
    mesh.wait_route("B", "A")
    consumer = attach_when_routed(lambda: Consumer(a.url, "test.views", count=N, credit=50, name="lr-consumer"))
    try:
        send_all(a.url, "test.views", list(range(N)))
        consumer.wait(TIMEOUT)
        # The consumer's accepts reach the router after it has the messages: wait for the counts.
        rows = _wait_links(a, _routed_pair_counted, f"the routed pair with {N} accepted deliveries")

        control = [r for r in rows if r["linkType"] == "router-control"]
        assert sorted(r["linkDir"] for r in control) == ["in", "out"]
        assert len({r["connectionId"] for r in control}) == 1
        assert all(r["deliveryCount"] > 0 and r["presettledCount"] == r["deliveryCount"] for r in control)
        assert [r["owningAddr"] for r in control if r["linkDir"] == "out"] == ["Lqdhello"]
        assert len([r for r in rows if r["linkType"] == "inter-router"]) == 20

        routed = {r["linkDir"]: r for r in rows if (r["owningAddr"] or "").startswith("D")}
        client_side, broker_side = routed["out"], routed["in"]   # the router sends to the consumer
        assert client_side["owningAddr"] == broker_side["owningAddr"] == "Dtest"
        assert client_side["linkType"] == broker_side["linkType"] == "endpoint"
        assert client_side["peer"] == broker_side["identity"] and broker_side["peer"] == client_side["identity"]
        assert client_side["connectionId"] != broker_side["connectionId"]

        out = run_tool("tools.tdstat", "-l", "-b", f"127.0.0.1:{a.ports['amqp']}").stdout
        table = _table(out)
        assert sorted(r["dir"] for r in table if r["type"] == "router-control") == ["in", "out"], out
        hello = [r for r in table if r["type"] == "router-control" and r["dir"] == "out"]
        assert (hello[0]["class"], hello[0]["addr"], hello[0]["pri"]) == ("local", "qdhello", "9"), out
        tds_routed = [r for r in table if r["class"] == "link-out"]
        assert len(tds_routed) == 2, out
        for r in tds_routed:
            assert (r["type"], r["addr"], r["deliv"], r["acc"]) == ("endpoint", "test", str(N), str(N)), out
            assert r["peer"] in {client_side["identity"], broker_side["identity"]}, out
        data = [r for r in table if r["type"] == "inter-router"]
        assert len(data) == 20 and all(r["class"] == r["addr"] == "" for r in data), out   # anonymous, as Dispatch's
    finally:
        consumer.close()
