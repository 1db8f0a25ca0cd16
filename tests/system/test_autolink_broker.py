"""Auto-links to a real tdbroker: the router attaches the waypoint links itself over its connector."""

import os

import pytest
from proton.reactor import Container

from tools.demo import BROKER_XML, ROUTER_CONF, Daemon, ReceiveAll, SendAll

pytestmark = pytest.mark.system

AUTOLINK_ROUTER_CONF = ROUTER_CONF + """\
address {
    prefix: queue
    waypoint: yes
}
connector {
    name: my-broker
    host: 127.0.0.1
    port: BROKER_PORT
    role: route-container
    retryDelaySeconds: 0.2
}
autoLink {
    address: queue
    direction: out
    connection: my-broker
}
autoLink {
    address: queue
    direction: in
    connection: my-broker
}
"""


def test_auto_links_store_in_the_broker_and_drain_from_it(tmp_path):
    xml = BROKER_XML.format(journal=os.path.join(tmp_path, "journal"), queue="queue", connections="")
    with Daemon("broker.daemon", "broker.xml", xml, str(tmp_path)) as broker, \
            Daemon("router.daemon", "router.conf",
                   AUTOLINK_ROUTER_CONF.replace("BROKER_PORT", str(broker.port)), str(tmp_path)) as router:
        url = f"amqp://127.0.0.1:{router.port}"
        sender = SendAll(url, "queue", 40)
        Container(sender).run()  # credit only once the router's out auto-link reached the broker
        assert sender.accepted == 40
        receiver = ReceiveAll(url, "queue", 40)
        Container(receiver).run()  # phase 1 comes from the broker over the in auto-link
        assert receiver.bodies == [f"message {i}" for i in range(40)]
