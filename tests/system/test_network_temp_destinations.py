"""Temporary destinations across network bridges (``bridgeTempDestinations``, default true): a remote
temporary queue's consumers make demand on every connector between the two brokers -- temporary
destinations are bridged or not as a whole, whatever each connector's destination lists say (ActiveMQ's
``isPermissableDestination`` checks them first) -- so two bridges can serve one temporary queue, and its
consumers leaving must end both demands cleanly.
"""

from __future__ import annotations

import pytest

from tests.system.brokerharness import TIMEOUT
from tests.system.clients import Consumer, close_all
from tests.system.netharness import Network, connector_xml, wait_consumers
from tests.system.waiting import wait_for

pytestmark = pytest.mark.system


def test_two_bridges_share_a_remote_temporary_queue_and_both_demands_end(tmp_path):
    """A dials B twice ("one" conduit, "two" without conduit: one demand per consumer). A temporary queue
    on B with two consumers (its creator and one attached by name) is demand on both bridges; the
    consumers leave one after the other; A's demands all end and A keeps running."""
    net = Network(tmp_path, ["A", "B"])
    net.configure("A", connectors=[
        connector_xml("one", net.port("B"), queues=["one.>"]),
        connector_xml("two", net.port("B"), queues=["two.>"], conduitSubscriptions=False),
    ])
    net.configure("B")
    problems = []
    try:
        net["A"].mgmt_timeout = 2.0   # A may die during a management request (the bug): fail the wait fast
        net.start()
        creator = Consumer(net["B"].url, dynamic=True, credit=10).start(timeout=TIMEOUT)
        temp = creator.dynamic_address
        by_name = Consumer(net["B"].url, temp, credit=10).start(timeout=TIMEOUT)
        wait_consumers(net["A"], temp, 3)       # "one": a conduit demand; "two": one per consumer
        by_name.close()
        wait_consumers(net["A"], temp, 2)
        creator.close()
        wait_for(lambda: not net["A"].is_running() or net["A"].stats(temp).consumers == 0,
                 f"A's demands for {temp} to end", TIMEOUT)
        assert net["A"].is_running(), f"A exited with {net['A'].process.returncode}"
    finally:
        close_all()
        problems = net.stop()
    assert not problems, "\n".join(problems)
