"""Route computation over the collected link states (Qpid Dispatch 1.19
python/qpid_dispatch_internal/router/path.py), pure functions.

Input: ``link_states`` = ``{router_id: {peer_id: cost}}`` — my own entry included — as learned from LSUs.
A peer that some router reports but whose own link state is unknown gets the stand-in ``{reporter: 1}``
(the first reporter in id order), so that it is reachable enough to trade link state with.

Dijkstra treats each link state as directed edges ``router -> peer``: a router that stopped listing a
dead neighbour cuts the path even while the dead router's own stale link state still lists it.

Ties are broken deterministically so that every router of the mesh computes the same trees: routers
leave the heap in (cost, id) order, and when two paths reach a node at the same cost the one whose
predecessor has the lower id (lexical) wins.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

__all__ = ["Routes", "complete_link_states", "shortest_paths", "compute_routes"]


@dataclass
class Routes:
    """The result of :func:`compute_routes` for router ``me``.

    * ``next_hop[dest]`` — the neighbour (router id) on the shortest path to ``dest`` (a neighbour maps
      to itself);
    * ``cost[dest]`` — the path cost;
    * ``hops[dest]`` — the hop count of that path;
    * ``radius`` — the largest hop count to any reachable router (0 alone);
    * ``valid_origins[dest]`` — the routers R (neither me nor dest) whose own shortest path to ``dest``
      passes through me: a message that entered the mesh at R may be forwarded by me toward ``dest``.
    """
    next_hop: dict[str, str] = field(default_factory=dict)
    cost: dict[str, int] = field(default_factory=dict)
    hops: dict[str, int] = field(default_factory=dict)
    radius: int = 0
    valid_origins: dict[str, set[str]] = field(default_factory=dict)


def complete_link_states(link_states: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """A copy of ``link_states`` in which every referenced but unknown peer has ``{reporter: 1}``."""
    out = {rid: dict(peers) for rid, peers in link_states.items()}
    for rid in sorted(link_states):
        for peer in link_states[rid]:
            if peer not in out:
                out[peer] = {rid: 1}
    return out


def shortest_paths(root: str, graph: dict[str, dict[str, int]]) -> tuple[dict[str, int], dict[str, str]]:
    """Dijkstra from ``root`` -> (cost to each reachable router, predecessor of each one but root).
    Costs below 1 count as 1 (Dispatch's minimum link cost)."""
    dist = {root: 0}
    prev: dict[str, str] = {}
    done: set[str] = set()
    heap = [(0, root)]
    while heap:
        d, u = heapq.heappop(heap)
        if u in done:
            continue
        done.add(u)
        for v, c in graph.get(u, {}).items():
            if v in done or v == root:
                continue
            nd = d + max(1, c)
            old = dist.get(v)
            if old is None or nd < old or (nd == old and u < prev[v]):
                dist[v] = nd
                prev[v] = u
                heapq.heappush(heap, (nd, v))
    return dist, prev


def _first_hop(dest: str, root: str, prev: dict[str, str]) -> str:
    u = dest
    while prev[u] != root:
        u = prev[u]
    return u


def _hops(dest: str, root: str, prev: dict[str, str]) -> int:
    n = 0
    u = dest
    while u != root:
        u = prev[u]
        n += 1
    return n


def compute_routes(me: str, link_states: dict[str, dict[str, int]]) -> Routes:
    """Next hops, costs, hop counts, radius and valid origins of router ``me``."""
    graph = complete_link_states(link_states)
    graph.setdefault(me, {})
    dist, prev = shortest_paths(me, graph)
    routes = Routes()
    for dest in dist:
        if dest == me:
            continue
        routes.next_hop[dest] = _first_hop(dest, me, prev)
        routes.cost[dest] = dist[dest]
        routes.hops[dest] = _hops(dest, me, prev)
    routes.radius = max(routes.hops.values(), default=0)
    # Valid origins: run Dijkstra from every other reachable router R and see which destinations'
    # shortest paths from R run through me (me strictly inside the path).
    reachable = sorted(routes.cost)
    routes.valid_origins = {dest: set() for dest in reachable}
    for origin in reachable:
        odist, oprev = shortest_paths(origin, graph)
        if me not in odist:
            continue
        for dest in reachable:
            if dest == origin or dest not in odist:
                continue
            u = oprev[dest]
            while u != origin:
                if u == me:
                    routes.valid_origins[dest].add(origin)
                    break
                u = oprev[u]
    return routes
