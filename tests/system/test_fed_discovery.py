"""Federation connectors found by UDP discovery: an upstream announces its connector with a
``<broadcast-group>``; a downstream whose ``<upstream>`` names a ``<discovery-group-ref>`` dials what it hears
there and federates the address."""

from __future__ import annotations

import random

from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, send_messages
from tests.system.netharness import Network, wait_consumers

BROADCAST = """<connectors><connector name="me">tcp://127.0.0.1:{port}</connector></connectors>
  <broadcast-groups><broadcast-group name="bg"><group-address>{group}</group-address>
    <group-port>{gport}</group-port><broadcast-period>200</broadcast-period><connector-ref>me</connector-ref>
  </broadcast-group></broadcast-groups>"""

DISCOVERY = """<discovery-groups><discovery-group name="dg"><group-address>{group}</group-address>
    <group-port>{gport}</group-port><refresh-timeout>2000</refresh-timeout></discovery-group></discovery-groups>
  <federations><federation name="f"><upstream name="up"><discovery-group-ref discovery-group-name="dg"/>
    <policy ref="p"/></upstream>
    <address-policy name="p" max-hops="1"><include address-match="news"/></address-policy>
  </federation></federations>"""


def test_a_discovered_upstream_is_federated_from(tmp_path):
    group, gport = f"239.255.{random.randint(1, 254)}.{random.randint(1, 254)}", random.randint(20000, 60000)
    net = Network(tmp_path, ["up", "down"])
    net.configure("up", topics=["news"], extra=BROADCAST.format(port=net.port("up"), group=group, gport=gport))
    net.configure("down", topics=["news"], extra=DISCOVERY.format(group=group, gport=gport))
    try:
        net.start()  # inside: a broker that fails to start must not leave the others running
        conn = BlockingConnection(net["down"].url, timeout=TIMEOUT)
        try:
            rx = conn.create_receiver("news", credit=10)
            # the federation queue appears on the upstream once the downstream found it and has demand
            wait_consumers(net["up"], "news", 1)
            send_messages(net["up"].url, "news", [Message(id=i, body=i) for i in range(3)])
            got = []
            for _ in range(3):
                got.append(rx.receive(TIMEOUT).body)
                rx.accept()
            assert got == [0, 1, 2]
        finally:
            conn.close()
    finally:
        assert not net.stop()
