"""Per-connection and per-router records of :class:`router.mesh.engine.RoutingEngine`, and small helpers."""

from __future__ import annotations

from router.mesh.mobile import RemoteAddresses

__all__ = ["Conn", "Node", "conn_name", "strip_scheme"]


class Conn:
    """One inter-router connection (its control link pair) and who HELLOs on it."""
    __slots__ = ("key", "cost", "peer_id", "peer_instance", "last_hello", "seen_me", "refused",
                 "conflict_since")

    def __init__(self, key, cost: int):
        self.key = key
        self.cost = max(1, int(cost))
        self.peer_id: str | None = None
        self.peer_instance: int | None = None
        self.last_hello: float | None = None
        self.seen_me = False
        #: refused for a duplicate router id: everything arriving on it is dropped until it closes
        self.refused = False
        #: when a HELLO on it first claimed an id reachable elsewhere (see router.mesh.identity)
        self.conflict_since: float | None = None


class Node:
    """What this router knows about another router."""
    __slots__ = ("id", "instance", "instance_heard", "rival_instance", "rival_heard", "ls_seq", "peers",
                 "last_ra", "last_seen", "ls_wanted", "ls_asked", "mobile", "mobile_wanted", "mar_asked",
                 "last_topo_change")

    def __init__(self, rid: str, now: float):
        self.id = rid
        self.instance: int | None = None
        #: when a message carrying ``instance`` last arrived (one that went quiet may be replaced)
        self.instance_heard = now
        #: another instance heard with this id and ignored (see router.mesh.identity), and when
        self.rival_instance: int | None = None
        self.rival_heard = now
        self.ls_seq = 0
        self.peers: dict[str, int] | None = None
        self.last_ra = now
        self.last_seen = now
        self.ls_wanted = 0
        self.ls_asked = float("-inf")
        self.mobile = RemoteAddresses()
        self.mobile_wanted = 0
        self.mar_asked = float("-inf")
        self.last_topo_change = now


def conn_name(key) -> str:
    """A readable name for a connection key in logs (the core's connection name when it has one)."""
    if isinstance(key, (str, int)):
        return str(key)
    name = getattr(key, "name", None)
    number = getattr(getattr(key, "engine", None), "id", None)   # the core's connection number
    if number is not None:
        return f"{number} ({name})" if name else str(number)
    return str(name) if name else repr(key)


def strip_scheme(addr: str) -> str:
    """``amqp://host/x``, ``amqp:/x`` and ``/x`` all mean ``x`` (Qpid Dispatch 1.19
    include/qpid/dispatch/iterator.h, src/iterator.c)."""
    if addr.startswith("amqp://"):
        addr = addr[7:]
        slash = addr.find("/")
        addr = "" if slash < 0 else addr[slash + 1:]
    elif addr.startswith("amqp:"):
        addr = addr[5:]
    return addr.lstrip("/")
