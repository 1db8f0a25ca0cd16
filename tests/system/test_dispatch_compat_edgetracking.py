"""Dispatch compatibility (issue 13): an interior tdrouterd serves Qpid Dispatch 1.19's edge address tracking
(src/router_core/modules/edge_addr_tracking/edge_addr_tracking.c), which a Dispatch edge router connected
to it relies on to know when its local producers' messages have somewhere to go.

A proton client plays the Dispatch edge: it connects to the interior's ``role: edge`` listener with the
open a Dispatch edge sends (its router id as container, product, version and annotations version),
attaches a receiver from ``_$qd.edge_addr_tracking`` and a sender for its producer's address, and reads
``[key, can_send]`` as consumers come and go on the interior and on another router of the mesh.
"""

from __future__ import annotations

import pytest
from proton import symbol
from proton.utils import BlockingConnection, LinkDetached

from tests.system.clients import close_all
from tests.system.harness import run_tool
from tests.system.meshharness import Mesh

TIMEOUT = 20.0
TRACKING = "_$qd.edge_addr_tracking"

EDGE_LISTENER = ("listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n"
                 "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")

# What a Dispatch 1.19 edge router's OPEN carries (src/router_node.c, the connection properties).
DISPATCH_EDGE_OPEN = {symbol("product"): "qpid-dispatch-router", symbol("version"): "1.19.0",
                      symbol("qd.annotations-version"): 1}


@pytest.fixture(scope="module")
def mesh(tmp_path_factory):
    """Interiors A (with an edge listener) and B, connected."""
    m = Mesh(tmp_path_factory.mktemp("edge-tracking"), None)
    try:
        m.add("A", sections=EDGE_LISTENER)
        m.add("B", listen=False, connect={"A": 1})
        yield m
    finally:
        close_all()
        m.stop_all()


def dispatch_edge(mesh: Mesh, edge_id: str) -> BlockingConnection:
    """A connection to A's edge listener that opens as a Dispatch edge router does."""
    return BlockingConnection(f"amqp://127.0.0.1:{mesh['A'].ports['edge']}", timeout=TIMEOUT,
                              container_id=edge_id, properties=DISPATCH_EDGE_OPEN)


def address_rows(mesh: Mesh, rid: str, *args: str) -> list[list[str]]:
    """``tdstat -a [args]`` on ``rid``: the rows of the Router Addresses table, as words."""
    bus = f"127.0.0.1:{mesh[rid].ports['amqp']}"
    lines = run_tool("tools.tdstat", "-a", *args, "-b", bus).stdout.splitlines()
    i = lines.index("Router Addresses")
    return [line.split() for line in lines[i + 3:] if line.startswith("  ")]


def next_update(tracker) -> list:
    """The next tracking message's body; it must have come pre-settled with header durable=false."""
    msg = tracker.receive(timeout=TIMEOUT)
    assert msg.durable is False
    assert not tracker.fetcher.unsettled   # proton's BlockingReceiver keeps only unsettled deliveries there
    return msg.body


def test_interior_lists_the_tracking_address_as_dispatch(mesh):
    rows = [r for r in address_rows(mesh, "A") if r[1].startswith("_$qd.")]
    assert rows == [["mobile", "_$qd.addr_lookup", "0", "balanced", "-", "0", "0", "0", "0", "0", "0"],
                    ["mobile", "_$qd.edge_addr_tracking", "0", "balanced", "-", "0", "0", "0", "0", "0", "0"],
                    ["mobile", "_$qd.edge_heartbeat", "0", "balanced", "-", "0", "0", "0", "0", "0", "0"]]
    # -v: a core endpoint, not an in-process subscriber (in-proc 0), as Dispatch shows it.
    verbose = [r for r in address_rows(mesh, "A", "-v") if r[1] == TRACKING]
    assert verbose == [["mobile", TRACKING, "0", "balanced", "-"] + ["0"] * 9]


def test_a_dispatch_edge_hears_when_its_producer_address_gains_and_loses_consumers(mesh):
    edge = dispatch_edge(mesh, "EdgeE1")
    local = BlockingConnection(mesh.url("A"), timeout=TIMEOUT)
    remote = BlockingConnection(mesh.url("B"), timeout=TIMEOUT)
    try:
        tracker = edge.create_receiver(TRACKING, credit=10)
        edge.create_sender("X")                  # the edge's uplink sender for its local producer of X
        # Nothing is said while X has no consumer: the first update to arrive must be the one below.
        consumer = local.create_receiver("X", credit=1)
        assert next_update(tracker) == ["M0X", True]
        consumer.close()
        assert next_update(tracker) == ["M0X", False]
        # A consumer on the other router of the mesh is a destination just the same.
        consumer = remote.create_receiver("X", credit=1)
        assert next_update(tracker) == ["M0X", True]
        consumer.close()
        assert next_update(tracker) == ["M0X", False]
    finally:
        for c in (edge, local, remote):
            c.close()


def test_a_tracking_receiver_on_a_client_connection_is_detached(mesh):
    conn = BlockingConnection(mesh.url("A"), timeout=TIMEOUT)
    try:
        with pytest.raises(LinkDetached) as detached:
            conn.create_receiver(TRACKING, credit=1)
        assert detached.value.condition is None    # detached, without an error, as Dispatch does
    finally:
        conn.close()
