"""Network connectors that find their peers without a fixed list: ``multicast://`` discovery (brokers
announce their acceptor on a UDP group and bridge to every broker they hear) and ``masterslave:(a,b)``
(one bridge that goes to whichever of a pair answers)."""

from __future__ import annotations

import random

from proton import Message

from tests.system.brokerharness import TIMEOUT, send_messages
from tests.system.netharness import Network, wait_consumers


def _group() -> str:
    # a group and port of our own: other tests (and other machines' brokers) announce elsewhere
    return f"multicast://239.255.{random.randint(1, 254)}.{random.randint(1, 254)}:{random.randint(20000, 60000)}"


def test_brokers_on_one_multicast_group_find_each_other_and_bridge_both_ways(tmp_path):
    uri = f"{_group()}?group=test-{random.randint(0, 1 << 30)}"
    net = Network(tmp_path, ["m1", "m2"])
    for name in ("m1", "m2"):
        net.configure(name, connectors=[f'<networkConnector name="auto" uri="{uri}"/>'])
    try:
        net.start()  # inside: a broker that fails to start must not leave the others running
        from proton.utils import BlockingConnection

        # each broker bridges to the other: a consumer on either makes demand on the other
        for consumer_on, producer_on, queue in (("m2", "m1", "east"), ("m1", "m2", "west")):
            conn = BlockingConnection(net[consumer_on].url, timeout=TIMEOUT)
            try:
                rx = conn.create_receiver(queue, credit=10)
                wait_consumers(net[producer_on], queue, 1)
                send_messages(net[producer_on].url, queue, [Message(id=i, body=i) for i in range(3)])
                got = []
                for _ in range(3):
                    got.append(rx.receive(TIMEOUT).body)
                    rx.accept()
                assert got == [0, 1, 2]
            finally:
                conn.close()
    finally:
        assert not net.stop()


def test_masterslave_bridge_goes_to_whichever_of_the_pair_is_up(tmp_path):
    net = Network(tmp_path, ["src", "master", "slave"])
    uri = (f"masterslave:(tcp://127.0.0.1:{net.port('master')},tcp://127.0.0.1:{net.port('slave')})"
           "?initialReconnectDelay=100&amp;maxReconnectDelay=200")
    net.configure("src", connectors=[f'<networkConnector name="ms" uri="{uri}"/>'])
    net.configure("master")
    net.configure("slave")
    try:
        net.start(["src", "slave"])  # the master is down: the bridge finds the slave
        from proton.utils import BlockingConnection

        conn = BlockingConnection(net["slave"].url, timeout=TIMEOUT)
        try:
            rx = conn.create_receiver("jobs", credit=10)
            wait_consumers(net["src"], "jobs", 1)
            send_messages(net["src"].url, "jobs", [Message(id=1, body="to the slave")])
            assert rx.receive(TIMEOUT).body == "to the slave"
            rx.accept()
        finally:
            conn.close()
    finally:
        assert not net.stop()
