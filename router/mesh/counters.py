"""What the routing protocol's own addresses carry, for ``router.address`` (``qdstat -a``) on an interior.

Qpid Dispatch 1.19 lists the router protocol's addresses in its routing table: ``qdhello`` (local,
flood), ``qdrouter`` (local and topological, flood) and ``qdrouter.ma`` (local and topological,
multicast), because its Python router subscribes to them through the core (python/qpid_dispatch_internal/
router/node.py, src/router_core/route_tables.c). Here the routing engine (router/mesh/engine.py) sends and
receives those messages on the inter-router control links directly, so they never pass the address table;
:class:`ControlAddressCounters` counts them the way the table counts messages (ingress: originated here;
egress: delivered to this router's engine; transit: copies sent on to other routers) so that the rows
management shows are real. A client's message to one of these addresses is not given to the engine (a
client cannot inject routing messages): those rows count protocol traffic only.
"""

from __future__ import annotations

from router.mesh import protocol as P

#: (routing-table key, distribution) of the protocol's addresses, in the order Dispatch lists them.
CONTROL_ADDRESSES = (
    ("L" + P.HELLO_NODE.rsplit("/", 1)[-1], "flood"),
    ("L" + P.CONTROL_NODE, "flood"),
    ("T" + P.CONTROL_NODE, "flood"),
    ("L" + P.CONTROL_NODE_MA, "multicast"),
    ("T" + P.CONTROL_NODE_MA, "multicast"),
)
HELLO_KEY = CONTROL_ADDRESSES[0][0]


def key_of(to: str) -> str | None:
    """The routing-table key of a control message's address (``amqp:/_topo/0/all/qdrouter`` ->
    ``Tqdrouter``, ``_local/qdhello`` -> ``Lqdhello``); None for anything else."""
    path = to.split(":/", 1)[-1] if to.startswith("amqp:") else to
    node = path.rsplit("/", 1)[-1]
    if path.startswith("_local/"):
        key = "L" + node
    elif path.startswith("_topo/"):
        key = "T" + node
    else:
        return None
    return key if any(key == k for k, _ in CONTROL_ADDRESSES) else None


class ControlAddressCounters:
    """Per-address delivery counts of the routing protocol's traffic (cold path: control messages only)."""

    def __init__(self):
        self.counts = {key: [0, 0, 0] for key, _ in CONTROL_ADDRESSES}  # ingress, egress, transit

    def _add(self, to: str, index: int, n: int) -> None:
        key = key_of(to)
        if key is not None and n:
            self.counts[key][index] += n

    def originated(self, to: str, copies: int) -> None:
        """This router sent a message of its own to ``copies`` neighbours."""
        self._add(to, 0, 1 if copies else 0)
        if key_of(to) != HELLO_KEY:   # HELLO goes one hop: Dispatch forwards no qdhello to other routers
            self._add(to, 2, copies)

    def delivered(self, to: str) -> None:
        """A message reached this router's engine."""
        self._add(to, 1, 1)

    def forwarded(self, to: str, copies: int) -> None:
        """A message was passed on to ``copies`` other routers."""
        self._add(to, 2, copies)

    def rows(self, reachable_routers: int) -> list[dict]:
        """``router.address`` values for each address: the engine is the local subscriber of the local
        ones (qdhello, as Dispatch counts it); each reachable router has the topological ones."""
        out = []
        for key, distribution in CONTROL_ADDRESSES:
            ingress, egress, transit = self.counts[key]
            out.append({"key": key, "distribution": distribution,
                        "subscriberCount": 1 if key == HELLO_KEY else 0,
                        "remoteCount": reachable_routers if key.startswith("T") else 0,
                        "deliveriesIngress": ingress, "deliveriesEgress": egress, "deliveriesTransit": transit})
        return out
