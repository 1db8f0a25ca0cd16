"""Route computation: Dijkstra with costs, deterministic ties, stand-in link states, radius, valid origins."""

from __future__ import annotations

import itertools
import random

from router.mesh.paths import complete_link_states, compute_routes, shortest_paths


def sym(*edges):
    """Link states of an undirected graph given as (a, b, cost) edges."""
    ls = {}
    for a, b, c in edges:
        ls.setdefault(a, {})[b] = c
        ls.setdefault(b, {})[a] = c
    return ls


def test_line_of_three():
    ls = sym(("A", "B", 1), ("B", "C", 1))
    r = compute_routes("A", ls)
    assert r.next_hop == {"B": "B", "C": "B"}
    assert r.cost == {"B": 1, "C": 2}
    assert r.hops == {"B": 1, "C": 2}
    assert r.radius == 2
    mid = compute_routes("B", ls)
    assert mid.radius == 1
    # B is on A's path to C and on C's path to A; an end router is on nobody's path
    assert mid.valid_origins == {"A": {"C"}, "C": {"A"}}
    assert r.valid_origins == {"B": set(), "C": set()}


def test_costs_pick_the_cheaper_longer_path():
    ls = sym(("A", "B", 10), ("A", "C", 1), ("C", "B", 2))
    r = compute_routes("A", ls)
    assert r.next_hop["B"] == "C" and r.cost["B"] == 3 and r.hops["B"] == 2
    assert r.radius == 2
    # C forwards A's traffic to B and B's to A
    assert compute_routes("C", ls).valid_origins == {"A": {"B"}, "B": {"A"}}


def test_equal_cost_ties_break_by_router_id():
    # A square: A-B-D and A-C-D cost the same; the lower id (B) wins, whatever the input order
    edges = [("A", "C", 1), ("C", "D", 1), ("A", "B", 1), ("B", "D", 1)]
    for perm in itertools.permutations(edges):
        r = compute_routes("A", sym(*perm))
        assert r.next_hop["D"] == "B", perm
    # and the same choice seen from D toward A
    assert compute_routes("D", sym(*edges)).next_hop["A"] == "B"
    # valid origins follow the same tie-break: B carries A<->D, C carries nothing between them
    assert compute_routes("B", sym(*edges)).valid_origins["D"] == {"A"}
    assert compute_routes("C", sym(*edges)).valid_origins["D"] == set()


def test_tie_break_compares_predecessors_not_arrival_order():
    # Z is reached at cost 2 through "M" (popped first, cost 1 from A) and through "B" (cost 1 too);
    # the predecessor with the lower id wins.
    ls = sym(("A", "M", 1), ("A", "B", 1), ("M", "Z", 1), ("B", "Z", 1))
    dist, prev = shortest_paths("A", complete_link_states(ls))
    assert prev["Z"] == "B" and dist["Z"] == 2


def test_unknown_peer_gets_a_stand_in_link_state():
    # A knows only its own link state: B is reachable through the fake {A: 1}
    r = compute_routes("A", {"A": {"B": 3}})
    assert r.next_hop == {"B": "B"} and r.cost == {"B": 3}
    # B's peers are unknown beyond B, so C (only listed by B's real LS) needs B's LS
    r = compute_routes("A", {"A": {"B": 1}, "B": {"A": 1, "C": 1}})
    assert r.next_hop == {"B": "B", "C": "B"}
    assert complete_link_states({"B": {"C": 1}, "A": {"C": 5}})["C"] == {"A": 1}


def test_links_are_directed_a_dead_router_is_cut_off():
    # C died: A and B dropped it from their link states, C's stale one still lists them
    ls = {"A": {"B": 1}, "B": {"A": 1}, "C": {"A": 1, "B": 1}}
    r = compute_routes("A", ls)
    assert "C" not in r.cost
    assert set(r.valid_origins) == {"B"}


def test_alone():
    r = compute_routes("A", {})
    assert r.next_hop == {} and r.radius == 0 and r.valid_origins == {}


def test_hub_and_spoke():
    ls = sym(("H", "S1", 1), ("H", "S2", 1), ("H", "S3", 1))
    r = compute_routes("S1", ls)
    assert r.next_hop == {"H": "H", "S2": "H", "S3": "H"}
    assert r.radius == 2
    hub = compute_routes("H", ls)
    assert hub.valid_origins == {"S1": {"S2", "S3"}, "S2": {"S1", "S3"}, "S3": {"S1", "S2"}}


def test_valid_origins_agree_with_each_origins_own_next_hops():
    """Property: X is in valid_origins[dest] at router M iff M lies on X's computed path to dest."""
    rnd = random.Random(7)
    ids = [f"R{i}" for i in range(8)]
    for _ in range(30):
        edges = [(ids[i], ids[i + 1], rnd.randint(1, 4)) for i in range(len(ids) - 1)]
        edges += [(rnd.choice(ids), rnd.choice(ids), rnd.randint(1, 4)) for _ in range(5)]
        ls = sym(*[(a, b, c) for a, b, c in edges if a != b])
        routes = {rid: compute_routes(rid, ls) for rid in ids}
        for origin in ids:
            for dest in ids:
                if origin == dest:
                    continue
                path, u = [], origin
                while u != dest:                     # follow each router's own next hop
                    u = routes[u].next_hop[dest]
                    path.append(u)
                    assert len(path) <= len(ids), "next hops loop"
                for m in ids:
                    if m in (origin, dest):
                        continue
                    assert (origin in routes[m].valid_origins[dest]) == (m in path[:-1]), (origin, dest, m)
