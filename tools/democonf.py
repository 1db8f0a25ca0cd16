"""The configurations ``tddemo`` runs (tools/demo.py): a standalone router, its waypoint and link-route
variants, and a one-queue broker (the demos' own with a dead-letter address). Each demo prints what it ran
(tools/demoshow.py), so these are what a user copies.

Templates use ``str.format`` fields (``{journal}``, ``{queue}``, ``{connections}``) or a plain placeholder
(``BROKER_PORT``) where the text holds braces of its own.
"""

from __future__ import annotations

import os

ROUTER_CONF = """\
router {
    mode: standalone
    id: Demo.Router
}
listener {
    host: 127.0.0.1
    port: 0
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
log {
    module: DEFAULT
    enable: warning+
}
"""

WAYPOINT_ROUTER_CONF = ROUTER_CONF + """address {
    prefix: queue
    waypoint: yes
}
"""

_BROKER_XML = """<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>demo-broker</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="{queue}"><anycast><queue name="{queue}"/></anycast></address>{dead_letter_address}
  </addresses>
  <address-settings>
    <address-setting match="#">{dead_letter_setting}
      <auto-create-queues>true</auto-create-queues>
    </address-setting>
  </address-settings>
  {connections}
</core>
</configuration>
"""

#: The broker of tests and tools that start one queue (journal, queue and connections to fill in).
BROKER_XML = _BROKER_XML.replace("{dead_letter_address}", "").replace("{dead_letter_setting}", "")
#: The demos' broker: rejected messages go to the dead-letter address DLQ, as Artemis'
#: ``<dead-letter-address>`` address setting does ("Undelivered Messages" in the Artemis documentation).
DEMO_BROKER_XML = _BROKER_XML.replace(
    "{dead_letter_address}", '\n    <address name="DLQ"><anycast><queue name="DLQ"/></anycast></address>').replace(
    "{dead_letter_setting}", "\n      <dead-letter-address>DLQ</dead-letter-address>")

PEER_CONNECTION = """<broker-connections>
    <amqp-connection uri="tcp://127.0.0.1:{port}" name="my-router" retry-interval="200">
      <peer address-match="queue"/>
    </amqp-connection>
  </broker-connections>"""

LINK_ROUTE_ROUTER_CONF = ROUTER_CONF + """connector {
    name: my-broker
    host: 127.0.0.1
    port: BROKER_PORT
    role: route-container
    retryDelaySeconds: 0.2
}
linkRoute {
    prefix: test
    direction: in
    connection: my-broker
}
linkRoute {
    prefix: test
    direction: out
    connection: my-broker
}
"""


def router_flow(records: str | None) -> str:
    """With --records the router writes its own records (ingress/egress/settle) beside the clients'."""
    if not records:
        return ""
    return f"flowRecords {{\n    directory: {os.path.abspath(records)}\n}}\n"


def broker_flow(records: str | None) -> str:
    """With --records the broker writes store/deliver/settle records too."""
    if not records:
        return ""
    return f'<flow-records directory="{os.path.abspath(records)}"/>\n  '
