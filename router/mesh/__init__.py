"""The inter-router (mesh) control plane: Qpid Dispatch 1.x compatible link-state routing, sans-IO.

* :mod:`router.mesh.protocol` — addresses, opcodes, capabilities, OPEN property keys, timers' defaults;
* :mod:`router.mesh.messages` — HELLO / RA / LSR / LSU / MAU / MAR as full AMQP message bytes;
* :mod:`router.mesh.paths` — Dijkstra, next hops, costs, radius, valid origins;
* :mod:`router.mesh.mobile` — mobile address sync (differential MAU, MAR recovery);
* :mod:`router.mesh.engine` — :class:`RoutingEngine`, which the router core drives with events and time
  (its per-connection and per-router records live in :mod:`router.mesh.records`).

Nothing here does IO: the core feeds control messages and ``tick(now)`` in, and sends what
``take_output()`` returns on each connection's outgoing ``qd.router`` control link.
"""

from router.mesh.engine import MeshListener, RoutingEngine

__all__ = ["MeshListener", "RoutingEngine"]
