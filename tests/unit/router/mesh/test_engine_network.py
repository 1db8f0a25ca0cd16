"""Simulated meshes of RoutingEngines (tests/unit/meshfabric.py): convergence on a line, a triangle and a
hub, failure and rejoin, lost MAUs recovered by MAR, address propagation across hops."""

from __future__ import annotations

import pytest

from router.mesh import messages as M
from tests.unit.meshfabric import Fabric


def mesh(names, links):
    f = Fabric()
    for n in names:
        f.add(n)
    for link in links:
        f.connect(*link)
    return f


def converged(f: Fabric) -> bool:
    names = set(f.engines)
    return all(set(f.listeners[n].costs) == names - {n} for n in names)


def test_line_converges_with_costs_and_two_hop_addresses():
    f = mesh("ABC", [("A", "B", 1), ("B", "C", 3)])
    f.engines["C"].add_local_address("M0queue", 2)
    f.run(5)
    a, b, c = (f.listeners[n] for n in "ABC")
    assert a.next_hops == {"B": "A>B", "C": "A>B"} and a.costs == {"B": 1, "C": 4}
    assert c.next_hops == {"B": "C>B", "A": "C>B"} and c.costs == {"B": 3, "A": 4}
    assert (a.radius, b.radius, c.radius) == (2, 1, 2)
    assert b.valid_origins == {"A": {"C"}, "C": {"A"}}
    assert a.addresses["C"] == {"M0queue": 2} and b.addresses["C"] == {"M0queue": 2}
    assert not c.addresses.get("C")                  # own addresses are never reported back
    assert f.engines["A"].neighbours == {"B": "A>B"}


def test_converges_within_a_few_seconds():
    f = mesh("ABCD", [("A", "B"), ("B", "C"), ("C", "D")])
    f.run(3)
    assert converged(f)


def test_triangle_floods_end_and_steady_state_is_quiet():
    f = mesh("ABC", [("A", "B"), ("B", "C"), ("C", "A")])
    f.run(10)
    assert converged(f)
    f.sent.clear()
    f.run(60)
    # steady state: HELLOs (6 per second) and periodic RAs only; every RA reaches each router once
    # directly and is re-flooded at most once more, so a few per router per raInterval
    assert set(f.sent) <= {"HELLO", "RA"}
    assert f.sent["HELLO"] == pytest.approx(360, abs=12)
    assert f.sent["RA"] <= 3 * 2 * 4


def test_hub_and_spoke_routes_through_the_hub():
    f = mesh(["H", "S1", "S2", "S3"], [("H", "S1"), ("H", "S2"), ("H", "S3")])
    f.engines["S3"].add_local_address("M0svc", 3)
    f.run(6)
    s1 = f.listeners["S1"]
    assert s1.next_hops == {"H": "S1>H", "S2": "S1>H", "S3": "S1>H"}
    assert s1.where("M0svc") == {"S3"}
    assert f.listeners["H"].valid_origins["S3"] == {"S1", "S2"}


def test_address_removal_propagates():
    f = mesh("ABC", [("A", "B"), ("B", "C")])
    f.engines["C"].add_local_address("M0q", 3)
    f.run(5)
    assert f.listeners["A"].where("M0q") == {"C"}
    f.engines["C"].remove_local_address("M0q")
    f.run(0.2)
    assert f.listeners["A"].where("M0q") == set()
    assert ("del", "C", "M0q") in f.listeners["A"].events


def test_failure_reroutes_and_rejoin_restores():
    f = mesh("ABC", [("A", "B", 1), ("B", "C", 1), ("A", "C", 5)])
    f.engines["B"].add_local_address("M0b", 3)
    f.run(6)
    a = f.listeners["A"]
    assert a.next_hops["C"] == "A>B" and a.costs["C"] == 2
    f.kill("B")                                      # connections break: link_lost at once
    f.run(0.1)
    assert a.next_hops == {"C": "A>C"} and a.costs == {"C": 5}
    assert "B" in a.lost and "B" not in a.addresses and ("del", "B", "M0b") in a.events
    assert f.listeners["C"].next_hops == {"A": "C>A"}
    # B restarts (new instance) and reconnects: routes and its addresses come back
    f.add("B")
    f.engines["B"].add_local_address("M0b2", 2)
    f.connect("A", "B")
    f.connect("B", "C")
    f.run(6)
    assert a.next_hops["C"] == "A>B" and a.costs["C"] == 2
    assert a.where("M0b2") == {"B"} and a.where("M0b") == set()


def test_silent_router_is_noticed_within_hello_max_age():
    f = mesh("ABC", [("A", "B"), ("B", "C"), ("A", "C", 3)])
    f.run(6)
    f.silent.add("B")                                # no link_lost: like a pulled cable
    f.run(1.8)
    assert "B" in f.listeners["A"].costs             # not yet: the last HELLO is < helloMaxAge (3 s) old
    f.run(1.3)
    assert "B" not in f.listeners["A"].costs and f.listeners["A"].next_hops == {"C": "A>C"}
    assert "B" in f.listeners["C"].lost


def test_lost_mau_is_recovered_by_mar():
    f = mesh("ABC", [("A", "B"), ("B", "C")])
    f.run(5)

    def drop_differential_mau(src, dst, data):
        # lose C's differential MAUs and its RAs (which would also reveal the new mobile_seq) toward A
        env = M.decode(data)
        return dst == "A" and env.body.id == "C" and env.opcode in ("MAU", "RA")
    f.drop = drop_differential_mau
    f.engines["C"].add_local_address("M0one", 3)
    f.run(0.2)
    f.engines["C"].add_local_address("M0two", 3)
    f.run(0.2)
    assert f.listeners["A"].where("M0one") == set()  # both differential MAUs were lost on the way to A
    f.drop = None
    f.engines["C"].add_local_address("M0three", 3)   # seq 3 after A has 0: a gap -> MAR -> absolute MAU
    f.sent.clear()
    f.run(0.2)
    assert f.sent["MAR"] >= 1
    assert {k for k in f.listeners["A"].addresses["C"]} == {"M0one", "M0two", "M0three"}


def test_lost_mau_is_recovered_from_the_next_ra_alone():
    f = mesh("AB", [("A", "B")])
    f.run(3)
    f.drop = lambda src, dst, data: M.decode(data).opcode == "MAU" and not M.decode(data).body.absolute
    f.engines["B"].add_local_address("M0x", 3)
    f.run(0.1)
    f.drop = None
    f.run(0.3)                                       # the RA sent with the MAU says mobile_seq 1
    assert f.listeners["A"].where("M0x") == {"B"}


def test_two_hop_unicast_is_forwarded_with_trace():
    f = mesh("ABC", [("A", "B"), ("B", "C")])
    f.run(5)
    seen = []

    def spy(src, dst, data):
        env = M.decode(data)
        if env.opcode == "LSR":
            seen.append((src, dst, env.ingress, list(env.trace)))
        return False
    f.drop = spy
    a = f.engines["A"]
    a._request_ls(a._nodes["C"], f.now)
    f.deliver()
    assert seen[:2] == [("A", "B", "A", ["A"]), ("B", "C", "A", ["A", "B"])]


def test_radius_and_valid_origins_in_a_longer_line():
    f = mesh("ABCDE", [("A", "B"), ("B", "C"), ("C", "D"), ("D", "E")])
    f.run(8)
    assert converged(f)
    c = f.listeners["C"]
    assert c.radius == 2 and f.listeners["A"].radius == 4
    assert c.valid_origins["E"] == {"A", "B"} and c.valid_origins["A"] == {"D", "E"}


def test_nodes_rows_for_management():
    f = mesh("ABC", [("A", "B"), ("B", "C")])
    f.run(5)
    rows = {r["id"]: r for r in f.engines["A"].nodes()}
    assert rows["A"]["nextHop"] is None and rows["A"]["linkState"] == ["B"] and rows["A"]["cost"] == 0
    assert rows["B"]["nextHop"] is None and rows["B"]["routerLink"] == "A>B"
    assert rows["B"]["linkState"] == ["A", "C"]
    assert rows["C"]["nextHop"] == "B" and rows["C"]["routerLink"] is None and rows["C"]["cost"] == 2
    assert rows["C"]["address"] == "amqp:/_topo/0/C/$management"
    assert rows["C"]["protocolVersion"] == 1 and rows["C"]["instance"] == f.engines["C"].instance


def test_parallel_connections_to_one_neighbour():
    f = mesh("AB", [])
    f.connect("A", "B", 5, tag="#1")
    f.connect("A", "B", 2, tag="#2")
    f.run(3)
    assert f.listeners["A"].next_hops == {"B": "A>B#2"} and f.listeners["A"].costs == {"B": 2}
    f.disconnect("A", "B", tag="#2")
    f.run(0.1)
    assert f.listeners["A"].next_hops == {"B": "A>B#1"} and f.listeners["A"].costs == {"B": 5}


def test_ra_interval_is_short_in_flux_and_long_when_stable():
    f = mesh("AB", [("A", "B")])
    f.run(5)                                         # converged; flux (2 x raIntervalFlux) is over
    ras = []
    f.drop = lambda src, dst, data: ras.append((f.now, src)) or False if M.decode(data).opcode == "RA" else False
    f.run(65)
    from_a = [t for t, src in ras if src == "A"]
    assert len(from_a) == 2, from_a                  # every raInterval (30 s)
    ras.clear()
    f.add("C")
    f.connect("B", "C")                              # the topology changes: RAs every raIntervalFlux (1 s)
    f.run(2.05)
    assert len([t for t, src in ras if src == "A"]) >= 2


def test_dead_routers_link_state_ages_out_and_its_record_is_forgotten():
    f = Fabric(remote_ls_max_age=10.0)
    for n in "ABC":
        f.add(n)
    f.connect("A", "B")
    f.connect("B", "C")
    f.run(5)
    a = f.engines["A"]
    assert a._nodes["C"].peers == {"B": 1}
    f.kill("C")
    f.run(5)
    assert "C" not in f.listeners["A"].costs and a._nodes["C"].peers is not None   # stale but kept
    f.run(6.5)
    assert "C" not in a._nodes                       # no RA for remoteLsMaxAge, unreferenced: forgotten
    # and a new C (restarted) is learned from scratch
    f.add("C")
    f.engines["C"].add_local_address("M0c", 3)
    f.connect("B", "C")
    f.run(4)
    assert f.listeners["A"].where("M0c") == {"C"}


def test_neighbours_form_within_one_exchange_not_a_hello_interval():
    f = mesh("AB", [])
    f.connect("A", "B", 2)
    f.deliver()                                      # no time passes
    assert f.listeners["A"].costs == {"B": 2} and f.listeners["B"].costs == {"A": 2}


def test_random_meshes_converge_to_the_routes_of_the_real_graph():
    import random

    from router.mesh.paths import compute_routes
    rnd = random.Random(11)
    for trial in range(8):
        n = rnd.randint(3, 7)
        names = [f"R{i}" for i in range(n)]
        edges = {}
        for i in range(1, n):                        # a random spanning tree keeps it connected
            edges[tuple(sorted((names[i], names[rnd.randrange(i)])))] = rnd.randint(1, 5)
        for _ in range(rnd.randint(0, n)):
            a, b = rnd.sample(names, 2)
            edges.setdefault(tuple(sorted((a, b))), rnd.randint(1, 5))
        f = mesh(names, [(a, b, c) for (a, b), c in edges.items()])
        f.engines[names[-1]].add_local_address("M0x", 3)
        f.run(8)
        truth = {}
        for (a, b), c in edges.items():
            truth.setdefault(a, {})[b] = c
            truth.setdefault(b, {})[a] = c
        for rid in names:
            want = compute_routes(rid, truth)
            got = f.listeners[rid]
            assert got.costs == want.cost, (trial, rid)
            assert {d: k.split(">")[1] for d, k in got.next_hops.items()} == want.next_hop, (trial, rid)
            assert got.radius == want.radius and got.valid_origins == want.valid_origins
            if rid != names[-1]:
                assert got.where("M0x") == {names[-1]}
