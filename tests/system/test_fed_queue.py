"""Queue federation and divert bindings on real tdbrokers: a consumer on a federated queue pulls from the
upstream's queue only while it can take more, behind the upstream's own consumers; a queue on a divert's
forwarding address is demand for the divert's source address (enable-divert-bindings)."""

from __future__ import annotations

from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, send_messages
from tests.system.clients import Consumer
from tests.system.netharness import Network, broker_xml, wait_consumers, wait_messages

UPSTREAM = """<connectors><connector name="up">tcp://127.0.0.1:{port}</connector></connectors>
  <federations><federation name="f"><upstream name="up">
    <static-connectors><connector-ref>up</connector-ref></static-connectors><policy ref="p"/></upstream>
    {policy}
  </federation></federations>"""

QUEUE_POLICY = '<queue-policy name="p"><include queue-match="jobs" address-match="#"/></queue-policy>'
DIVERT_POLICY = ('<address-policy name="p" enable-divert-bindings="true"><include address-match="news"/>'
                 '</address-policy>')
DIVERT = """<diverts><divert name="keep"><address>news</address><forwarding-address>archive</forwarding-address>
  </divert></diverts>
  """


def test_a_federated_queue_pulls_what_its_consumer_can_take_and_no_more(tmp_path):
    net = Network(tmp_path, ["up", "down"])
    net.configure("up")
    net.configure("down", extra=UPSTREAM.format(port=net.port("up"), policy=QUEUE_POLICY))
    try:
        net.start()  # inside: a broker that fails to start must not leave the others running
        send_messages(net["up"].url, "jobs", [Message(id=i, body=i, durable=True) for i in range(5)])
        # a consumer on the downstream with credit for 2, never replenished: the queue pulls those 2 only
        remote = Consumer(net["down"].url, "jobs", count=2, credit=2, replenish=False).start()
        try:
            remote.wait(TIMEOUT)
            assert [m.id for m in remote.messages] == [0, 1]
            # the other 3 are still upstream: a consumer there gets exactly them (fewer if the
            # downstream had pulled more than its consumer could take)
            local = BlockingConnection(net["up"].url, timeout=TIMEOUT)
            try:
                lrx = local.create_receiver("jobs", credit=10)
                mine = []
                for _ in range(3):
                    mine.append(lrx.receive(TIMEOUT).body)
                    lrx.accept()
            finally:
                local.close()
            assert mine == [2, 3, 4]
        finally:
            remote.close()
    finally:
        assert not net.stop()


def test_the_upstreams_own_consumer_comes_before_the_federation_consumer(tmp_path):
    net = Network(tmp_path, ["up", "down"])
    net.configure("up")
    net.configure("down", extra=UPSTREAM.format(port=net.port("up"), policy=QUEUE_POLICY))
    try:
        net.start()  # inside: a broker that fails to start must not leave the others running
        remote = Consumer(net["down"].url, "jobs", credit=10).start()
        local = Consumer(net["up"].url, "jobs", count=5, credit=10).start()
        try:
            wait_consumers(net["up"], "jobs", 2)        # the local one and the federation consumer
            send_messages(net["up"].url, "jobs", [Message(id=i, body=i) for i in range(5)])
            local.wait(TIMEOUT)
            assert [m.id for m in local.messages] == [0, 1, 2, 3, 4] and remote.messages == []
        finally:
            remote.close()
            local.close()
    finally:
        assert not net.stop()


def test_divert_bindings_make_demand_for_the_diverted_address(tmp_path):
    net = Network(tmp_path, ["up", "down"])
    net.configure("up", topics=["news"])
    down = net["down"]
    down.write(broker_xml("down", down.port, down.journal,
                          extra=UPSTREAM.format(port=net.port("up"), policy=DIVERT_POLICY) + DIVERT).replace(
        "<addresses></addresses>", '<addresses><address name="news"><multicast/></address>'
        '<address name="archive"><anycast><queue name="archive"/></anycast></address></addresses>'))
    try:
        net.start()  # inside: a broker that fails to start must not leave the others running
        wait_consumers(net["up"], "news", 1)  # no subscriber on down: the divert's queue is the demand
        send_messages(net["up"].url, "news", [Message(id=i, body=i) for i in range(3)])
        wait_messages(net["down"], "archive", 3)
    finally:
        assert not net.stop()
