"""The web console in a real browser: Debian's headless Chromium (/usr/bin/chromium, installed by
.ci/install-chromium; never a downloaded browser) driven over its DevTools protocol (a few CDP calls over a
WebSocket, wsproto as the client), against a real mesh of three interior routers, an edge router and a
broker attached to one of them.

What a user would check by looking: the routers, the edge and the broker appear in the topology; the rate
on an inter-router connection rises while messages cross it; a router's page and the broker's page show
their tables; a router killed with SIGKILL vanishes from the picture once the mesh has noticed.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import time
import urllib.request

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request as WsRequest, TextMessage

from tests.system.brokerharness import BrokerProcess
from tests.system.clients import Consumer, Producer
from tests.system.meshharness import Mesh
from tools.daemons import free_port

pytestmark = [pytest.mark.system, pytest.mark.slow]

CHROMIUM = "/usr/bin/chromium"
#: How long a condition may take to show on the page (polling every half second, on a loaded machine).
PAGE_TIMEOUT = 30.0
#: The mesh notices a killed neighbour after helloMaxAgeSeconds (3 s in tests) and the page polls every 0.5 s.
VANISH_TIMEOUT = 30.0

if not os.path.exists(CHROMIUM):
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/install-chromium installs it")
    pytest.skip(f"{CHROMIUM} is not installed (.ci/install-chromium installs Debian's)", allow_module_level=True)


STATUS_JS = "document.getElementById('status') && document.getElementById('status').textContent"
NODES_JS = ("JSON.stringify(Array.from(document.querySelectorAll('#topology g.node'))"
            ".map(g => [g.dataset.kind, g.dataset.id]).sort())")


class Browser:
    """A headless Chromium with one page, driven over the DevTools protocol (Runtime.evaluate, Page.navigate)."""

    def __init__(self, workdir):
        self.port = free_port()
        self.log = open(workdir / "chromium.log", "wb")
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--disable-background-networking", f"--remote-debugging-port={self.port}",
             f"--user-data-dir={workdir / 'chromium-profile'}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log)
        self._ids = itertools.count(1)
        self.sock = None
        deadline = time.monotonic() + PAGE_TIMEOUT
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json/list", timeout=2) as resp:
                    pages = [t for t in json.load(resp) if t.get("type") == "page"]
                if pages:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"chromium did not start: see {workdir / 'chromium.log'}")
            time.sleep(0.2)
        path = "/" + pages[0]["webSocketDebuggerUrl"].split("/", 3)[3]
        self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=PAGE_TIMEOUT)
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.sock.sendall(self.ws.send(WsRequest(host=f"127.0.0.1:{self.port}", target=path)))
        self._pending: list[str] = []
        accepted = False
        while not accepted:
            self.ws.receive_data(self.sock.recv(65536))
            for ev in self.ws.events():
                if isinstance(ev, AcceptConnection):
                    accepted = True
                elif isinstance(ev, TextMessage):
                    self._pending.append(ev.data)
        self._parts: list[str] = []

    def _message(self) -> dict:
        while not self._pending:
            data = self.sock.recv(1 << 20)
            if not data:
                raise AssertionError("chromium closed the DevTools connection")
            self.ws.receive_data(data)
            for ev in self.ws.events():
                if isinstance(ev, TextMessage):
                    self._parts.append(ev.data)
                    if ev.message_finished:
                        self._pending.append("".join(self._parts))
                        self._parts = []
                elif isinstance(ev, CloseConnection):
                    raise AssertionError("chromium closed the DevTools connection")
        return json.loads(self._pending.pop(0))

    def call(self, method: str, **params) -> dict:
        call_id = next(self._ids)
        self.sock.sendall(self.ws.send(TextMessage(data=json.dumps({"id": call_id, "method": method,
                                                                     "params": params}))))
        while True:
            msg = self._message()
            if msg.get("id") == call_id:   # events (no id) are not needed here
                if "error" in msg:
                    raise AssertionError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def goto(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            return None   # the page is between two states (navigating): treated as "not yet"
        return result["result"].get("value")

    def wait_for(self, expression: str, what: str, timeout: float = PAGE_TIMEOUT, show: str = NODES_JS):
        """Poll ``expression`` in the page until it is truthy; its value. On timeout the error shows what
        ``show`` evaluates to (by default the topology's nodes)."""
        deadline = time.monotonic() + timeout
        while True:
            value = self.evaluate(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                status = self.evaluate(STATUS_JS)
                raise AssertionError(f"the page did not show {what} within {timeout:g} s (last value {value!r}, "
                                     f"page status {status!r}, showing {self.evaluate(show)!r})")
            time.sleep(0.2)

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def edge_rate_js(a: str, b: str) -> str:
    return (f"(() => {{ const g = document.querySelector('#topology g.edge[data-from=\"{a}\"][data-to=\"{b}\"]');"
            " return g ? Number(g.dataset.rate) : null; })()")


BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>Broker.Q</name>
  <journal-directory>{journal}</journal-directory>
  <security-enabled>false</security-enabled>
  <acceptors>
    <acceptor name="web">tcp://127.0.0.1:0?protocols=HTTP</acceptor>
  </acceptors>
  <addresses>
    <address name="queue"><anycast><queue name="queue"/></anycast></address>
  </addresses>
  <broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{router_port}" name="router" retry-interval="200">
      <peer address-match="queue"/>
    </amqp-connection>
  </broker-connections>
</core></configuration>
"""

A_SECTIONS = """
listener {
    name: web
    host: 127.0.0.1
    port: 0
    http: yes
}
listener {
    name: broker
    host: 127.0.0.1
    port: 0
    role: route-container
}
address {
    prefix: queue
    waypoint: yes
}
"""
EDGE_LISTENER = "listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n}"


@pytest.fixture
def world(tmp_path):
    """Interiors A, B, C (a triangle), edge router E on B, broker Broker.Q attached to A; A serves the console."""
    mesh = Mesh(tmp_path)
    broker = browser = None
    producer = consumer = None
    try:
        mesh.add("A", sections=A_SECTIONS)
        mesh.add("B", connect={"A": 1}, sections=EDGE_LISTENER)
        mesh.add("C", connect={"A": 1, "B": 1})
        edge_port = mesh["B"].ports["edge"]
        mesh.add("E", listen=False, mode="edge",
                 sections=f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {edge_port}\n"
                          "    role: edge\n    retryDelaySeconds: 0.2\n}")
        conf = tmp_path / "broker.xml"
        conf.write_text(BROKER_XML.format(journal=tmp_path / "journal", router_port=mesh["A"].ports["broker"]))
        broker = BrokerProcess(conf, tmp_path)
        broker.start()
        mesh.wait_converged()
        browser = Browser(tmp_path)
        yield mesh, broker, browser
    finally:
        if browser is not None:
            browser.close()
        if broker is not None and broker.is_running():
            broker.stop()
        mesh.stop_all()


def test_console_shows_the_mesh_its_traffic_and_a_router_leaving(world):
    mesh, broker, browser = world
    console = f"http://127.0.0.1:{mesh['A'].ports['web']}/?interval=500"
    browser.goto(console)
    expected = [["broker", "Broker.Q"], ["edge", "E"], ["interior", "A"], ["interior", "B"], ["interior", "C"]]
    wanted = json.dumps(json.dumps(expected, separators=(",", ":")))   # a JS string literal of JSON.stringify's text
    shown = browser.wait_for(f"(() => {{ const n = {NODES_JS}; return n === {wanted} && n; }})()",
                             "the three interiors, the edge router and the broker")
    assert json.loads(shown) == expected

    # Quiet, the A-C connection carries only management's own few requests a second.
    rate = edge_rate_js("A", "C")
    quiet = browser.wait_for(f"(() => {{ const r = {rate}; return r !== null && r < 20 && String(r); }})()",
                             "a quiet A-C connection")
    consumer = Consumer(mesh.url("C"), "traffic", credit=100).start()
    producer = Producer(mesh.url("A"), "traffic", count=200_000, interval=0.002).start()
    try:
        busy = browser.wait_for(f"(() => {{ const r = {rate}; return r !== null && r > 100 && String(r); }})()",
                                "the A-C rate rising under traffic")
        assert float(busy) > float(quiet) + 80
    finally:
        producer.close()
        consumer.close()

    # A router's page: its attributes, connections and configuration tables.
    browser.goto(console.replace("/?", "/?") + "#/router/B")
    browser.wait_for("document.querySelector('h2') && document.querySelector('h2').textContent === 'Router B' && "
                     "document.querySelectorAll('#connections tbody tr').length >= 3", "router B's page")
    roles = browser.evaluate("Array.from(document.querySelectorAll('#connections tbody tr td:nth-child(3)'))"
                             ".map(td => td.textContent)")
    assert "edge" in roles and roles.count("inter-router") == 2, roles
    # CREATE and DELETE from the page, as tdmanage does them (anonymous may manage on this listener).
    browser.evaluate("(() => { const f = document.getElementById('create-form').elements;"
                     " f['type'].value = 'address'; f['name'].value = 'console-made';"
                     " f['attributes'].value = 'prefix=console\\ndistribution=multicast';"
                     " document.getElementById('create-form').requestSubmit(); return true; })()")
    row = ("Array.from(document.querySelectorAll('#config-address tbody tr'))"
           ".find(tr => tr.firstChild.textContent === 'console-made')")
    result = "document.getElementById('action-result') && document.getElementById('action-result').textContent"
    browser.wait_for(f"!!({row})", "the address created from the page", show=result)
    assert browser.evaluate(f"({row}).children[1].textContent") == "console"
    browser.evaluate(f"({row}).querySelector('button.delete').click() || true")
    browser.wait_for(f"!({row}) && document.getElementById('action-result').textContent.includes('204')",
                     "the address deleted from the page", show=result)

    # The broker's page, served by tdbroker's HTTP acceptor.
    browser.goto(f"http://127.0.0.1:{broker.ports['web']}/?interval=500")
    browser.wait_for("Array.from(document.querySelectorAll('#queues tbody tr td:first-child'))"
                     ".some(td => td.textContent === 'queue')", "the broker's queue table")

    # Kill C: it leaves the topology (and with it the A-C and B-C connections).
    browser.goto(console)
    browser.wait_for(f"{NODES_JS}.includes('\"C\"')", "C before it is killed")
    mesh["C"].kill()
    browser.wait_for(f"(() => {{ const n = {NODES_JS}; return !n.includes('\"C\"') && n.includes('\"A\"') && n; }})()",
                     "C vanishing", timeout=VANISH_TIMEOUT)
    edges_of_c = "#topology g.edge[data-to=\"C\"], #topology g.edge[data-from=\"C\"]"
    assert browser.evaluate(f"document.querySelectorAll('{edges_of_c}').length") == 0
