"""router/mesh/counters.py: the routing protocol's addresses as management counts them."""

from router.mesh import protocol as P
from router.mesh.counters import CONTROL_ADDRESSES, ControlAddressCounters, key_of


def test_keys_of_the_protocols_addresses():
    assert key_of(P.HELLO_ADDRESS) == "Lqdhello"
    assert key_of(P.ALL_ROUTERS_ADDRESS) == "Tqdrouter"
    assert key_of(P.ALL_ROUTERS_MA_ADDRESS) == "Tqdrouter.ma"
    assert key_of(P.router_address("B")) == "Tqdrouter"
    assert key_of("_topo/0/all/qdrouter.ma") == "Tqdrouter.ma"
    assert key_of("amqp:/_topo/0/B/$management") is None and key_of("qdrouter") is None


def test_counts_ingress_egress_and_transit_per_address():
    c = ControlAddressCounters()
    c.originated(P.ALL_ROUTERS_ADDRESS, 2)      # an RA flooded to two neighbours
    c.delivered(P.ALL_ROUTERS_ADDRESS)          # another router's RA reached the engine
    c.forwarded(P.ALL_ROUTERS_ADDRESS, 1)       # ... and went on to one more
    c.originated(P.HELLO_ADDRESS, 1)            # HELLO: one hop, never transit
    c.originated(P.HELLO_ADDRESS, 0)            # no neighbour: nothing sent, nothing counted
    rows = {r["key"]: r for r in c.rows(reachable_routers=3)}
    assert [r["key"] for r in c.rows(0)] == [k for k, _ in CONTROL_ADDRESSES]
    t = rows["Tqdrouter"]
    assert (t["deliveriesIngress"], t["deliveriesEgress"], t["deliveriesTransit"], t["remoteCount"]) == (1, 1, 3, 3)
    h = rows["Lqdhello"]
    assert (h["deliveriesIngress"], h["deliveriesTransit"], h["subscriberCount"], h["remoteCount"]) == (1, 0, 1, 0)
