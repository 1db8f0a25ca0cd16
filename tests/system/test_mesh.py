"""Interior router mesh (issue 4) with real tdrouterd processes: 1 and 2 hops, closest, balanced,
multicast through a cycle, a waypoint broker on another router, failover after kill -9, duplicate ids,
edge routers. Topologies and short routing timers come from tests/system/meshharness.py."""

from __future__ import annotations

import collections
import re
import threading
import time

import pytest

from tests.paths import REPO
from tests.system.clients import Consumer, Producer, close_all
from tests.system.harness import RouterProcess, free_port
from tests.system.meshharness import Mesh

pytestmark = pytest.mark.system

TIMEOUT = 30
ADDRESSES = """\
address {
    prefix: closest
    distribution: closest
}

address {
    prefix: balanced
    distribution: balanced
}

address {
    prefix: multicast
    distribution: multicast
}

address {
    prefix: queue
    waypoint: yes
}"""


@pytest.fixture
def mesh(tmp_path, request):
    """A Mesh whose routers are stopped at teardown and must exit 0 (unless killed on purpose)."""
    started = []
    m = Mesh(tmp_path, started.append, sections=ADDRESSES)
    yield m
    close_all()
    problems = []
    for r in started:
        if r.proc is None or r.killed or r.start_failed:
            continue
        try:
            code = r.stop()
        except Exception as e:  # noqa: BLE001 - report every router
            problems.append(f"{r.router_id}: {e}")
            continue
        if code != 0:
            problems.append(f"{r.router_id} exited with {code}\n{r.stderr_text()[-3000:]}")
    rep = getattr(request.node, "_rep_call", None)
    if rep is not None and rep.failed:
        for r in started:
            print(f"--- {r.router_id} stderr ---\n" + "\n".join(r.stderr_text().splitlines()[-60:]))
    if problems:
        pytest.fail("mesh teardown:\n" + "\n\n".join(problems), pytrace=False)


def line(mesh: Mesh) -> Mesh:
    """A - B - C."""
    mesh.add("A")
    mesh.add("B", connect={"A": 1})
    mesh.add("C", listen=False, connect={"B": 1})
    return mesh


def triangle(mesh: Mesh, ab: int = 1, ac: int = 1, bc: int = 1) -> Mesh:
    """A, B, C all connected; the last one started has only connectors (it can restart anywhere)."""
    mesh.add("A")
    mesh.add("B", connect={"A": ab})
    mesh.add("C", listen=False, connect={"A": ac, "B": bc})
    return mesh


def no_duplicates(consumers):
    ids = [i for c in consumers for i in c.ids]
    dup = [i for i, n in collections.Counter(ids).items() if n > 1]
    assert not dup, f"delivered more than once: {sorted(dup)[:20]}"
    return ids


@pytest.mark.parametrize("hops", [1, 2])
def test_route_across_hops(mesh, hops):
    line(mesh)
    dst = "B" if hops == 1 else "C"
    mesh.wait_route("A", dst, TIMEOUT)
    n = 200
    c = Consumer(mesh.url(dst), "hop/q", credit=50).start()
    c.wait_ready()
    p = Producer(mesh.url("A"), "hop/q", count=n).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    c.wait(TIMEOUT, count=n)
    assert c.ids == list(range(n))                   # one path: order is kept


def test_credit_only_once_a_router_in_the_mesh_has_a_destination(mesh):
    line(mesh)
    mesh.wait_route("A", "C", TIMEOUT)
    p = Producer(mesh.url("A"), "credit/q", count=10).start()
    p.wait_ready()
    time.sleep(2.0)                                  # several RA/MAU rounds: still no destination anywhere
    assert p.max_credit == 0 and p.sent == 0
    c = Consumer(mesh.url("C"), "credit/q", credit=10).start()
    p.wait(TIMEOUT)                                  # credit arrived with the remote consumer
    assert p.outcomes == {"accepted": 10}
    c.wait(TIMEOUT, count=10)


def test_reverse_direction_and_presettled(mesh):
    line(mesh)
    mesh.wait_route("C", "A", TIMEOUT)
    c = Consumer(mesh.url("A"), "back/q", credit=100).start()
    c.wait_ready()
    mesh.wait_route("C", "A", TIMEOUT)
    p = Producer(mesh.url("C"), "back/q", count=50, presettled=True).start()
    p.wait_sent(timeout=TIMEOUT)
    c.wait(TIMEOUT, count=50)
    assert sorted(c.ids) == list(range(50))


def test_closest_prefers_the_near_consumer(mesh):
    line(mesh)
    near = Consumer(mesh.url("B"), "closest/x", credit=50).start()
    far = Consumer(mesh.url("C"), "closest/x", credit=50).start()
    mesh.wait_route("A", "C", TIMEOUT)
    mesh.wait_route("A", "B", TIMEOUT)
    n = 100
    p = Producer(mesh.url("A"), "closest/x", count=n).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    assert (near.received(), far.received()) == (n, 0)
    # a consumer on the producer's own router is closer still
    local = Consumer(mesh.url("A"), "closest/x", credit=50).start()
    local.wait_ready()
    p.send(range(n, 2 * n))
    p.wait(TIMEOUT)
    assert local.received() == n and near.received() == n and far.received() == 0


def test_balanced_spreads_across_routers(mesh):
    triangle(mesh)
    cb = Consumer(mesh.url("B"), "balanced/x", credit=100).start()
    cc = Consumer(mesh.url("C"), "balanced/x", credit=100).start()
    mesh.wait_route("A", "B", TIMEOUT)
    mesh.wait_route("A", "C", TIMEOUT)
    n = 400
    p = Producer(mesh.url("A"), "balanced/x", count=n).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    counts = (cb.received(), cc.received())
    assert sum(counts) == n and min(counts) >= n // 5, f"balanced did not spread: {counts}"
    assert sorted(no_duplicates([cb, cc])) == list(range(n))


def test_multicast_reaches_every_consumer_once_in_a_triangle(mesh):
    triangle(mesh)
    consumers = {name: [Consumer(mesh.url(name), "multicast/news", credit=100).start() for _ in range(k)]
                 for name, k in (("A", 1), ("B", 2), ("C", 1))}
    for name in ("B", "C"):
        mesh.wait_route("A", name, TIMEOUT)
    time.sleep(1.0)                                  # both consumers on B known everywhere
    n = 100
    p = Producer(mesh.url("A"), "multicast/news", count=n).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": n}
    time.sleep(1.0)                                  # a duplicate through the cycle would arrive by now
    for name, cs in consumers.items():
        for c in cs:
            assert sorted(c.ids) == list(range(n)), f"consumer on {name}: {c.received()} messages"


def test_waypoint_broker_on_another_router(mesh, tmp_path):
    from tests.system.brokerharness import BROKER_XML, BrokerProcess

    line(mesh)
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "journal", router_port=mesh["C"].ports["amqp"]))
    broker = BrokerProcess(conf, tmp_path).start()
    try:
        mesh.wait_route("A", "C", TIMEOUT)
        n = 50
        p = Producer(mesh.url("A"), "queue", count=n).start()
        p.wait(TIMEOUT)                              # stored by the broker two hops away
        assert p.outcomes == {"accepted": n}
        c = Consumer(mesh.url("B"), "queue", credit=20).start()
        c.wait(TIMEOUT, count=n)
        assert c.ids == list(range(n))
    finally:
        close_all()
        assert broker.stop() == 0, broker.stderr_text()


def test_failover_in_a_triangle_after_kill_9(mesh):
    """A -> B goes through C (A-C and C-B cost 1, A-B cost 5). C is killed mid-stream: deliveries in
    flight through C come back modified (they may have been delivered), ones that never left A come
    back released (and were never delivered), the rest flow on the direct A-B link, nothing is lost."""
    triangle(mesh, ab=5, ac=1, bc=1)
    c = Consumer(mesh.url("B"), "fail/q", credit=20).start()
    mesh.wait_route("A", "B", TIMEOUT)
    n = 400
    p = Producer(mesh.url("A"), "fail/q", count=n, interval=0.01).start()
    c.wait(TIMEOUT, count=100)
    mesh["C"].kill()
    killed_at = time.monotonic()
    p.wait(TIMEOUT * 2)
    outcomes = dict(p.outcomes)
    released = p.ids_with("released")
    failed = p.ids_with("modified")
    print(f"failover: outcomes {outcomes}, released {len(released)}, modified {len(failed)}, "
          f"all settled {time.monotonic() - killed_at:.1f}s after the kill")
    assert set(outcomes) <= {"accepted", "released", "modified"}, outcomes
    assert sum(outcomes.values()) == n
    # released means "not delivered": none of those reached the consumer
    assert not set(released) & set(c.ids), sorted(set(released) & set(c.ids))[:20]
    # resend what came back released or modified: afterwards every id has been received
    p.send(released + failed)
    p.wait(TIMEOUT)
    deadline = time.monotonic() + TIMEOUT
    while set(c.ids) != set(range(n)) and time.monotonic() < deadline:
        time.sleep(0.1)
    missing = sorted(set(range(n)) - set(c.ids))
    assert not missing, f"lost: {missing[:20]}"
    accepted_ids = [i for i, lst in p.outcome_of.items() if "accepted" in lst]
    assert sorted(accepted_ids) == list(range(n))
    # C comes back and rejoins without restarting the others
    mesh["C"].restart()
    mesh.wait_route("C", "B", TIMEOUT)
    mesh.wait_route("A", "C", TIMEOUT)


class _Flow:
    """Watches a consumer's count from a thread of its own, every SAMPLE_SECONDS, for as long as the
    ``with`` block lasts: the longest time it did not grow. Sampling only while the test polls would count
    the seconds the test spends starting a router (seconds under load) as a stall of the traffic."""

    SAMPLE_SECONDS = 0.02

    def __init__(self, consumer):
        self.consumer = consumer
        self.count = consumer.received()
        self.since = time.monotonic()
        self.longest_stall = 0.0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="flow-watch", daemon=True)

    def __enter__(self) -> "_Flow":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        while not self._done.wait(self.SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> int:
        with self._lock:
            now, n = time.monotonic(), self.consumer.received()
            self.longest_stall = max(self.longest_stall, now - self.since)
            if n > self.count:
                self.count, self.since = n, now
            return n

    def reset(self) -> None:
        """Forget the stalls seen so far (one in progress goes on counting from the last arrival)."""
        with self._lock:
            self.longest_stall = 0.0

    def wait(self, predicate, timeout: float, what: str) -> float:
        """Poll ``predicate`` until it holds; the seconds it took."""
        start = time.monotonic()
        while True:
            if predicate():
                return time.monotonic() - start
            if time.monotonic() - start > timeout:
                raise AssertionError(f"{what}: not within {timeout} s")
            time.sleep(self.SAMPLE_SECONDS)


def _refusals(router) -> list[str]:
    """The impostor's log lines saying a peer closed its connection for a duplicate router id."""
    return [ln for ln in router.stderr_text().splitlines()
            if "closed by peer" in ln and "amqp:not-allowed" in ln and "duplicate router id" in ln]


@pytest.mark.parametrize("via", ["A", "B"])
def test_duplicate_router_id_is_refused_and_the_mesh_stays_whole(mesh, via):
    """Line A - B - C with a consumer on C and a steady producer on A; an impostor started with C's id
    connects to A (two hops from the real C) or to B (C's neighbour). The router it connects to logs
    CRITICAL and closes the impostor's connection with amqp:not-allowed, again at every reconnect, while
    the real C is alive; traffic to the real C never stops; after the impostor leaves the mesh is whole
    within helloMaxAge (3 s)."""
    line(mesh)
    c_started = time.time()
    c = Consumer(mesh.url("C"), "dup/q", credit=50).start()
    c.wait_ready()
    mesh.wait_route("A", "C", TIMEOUT)
    p = Producer(mesh.url("A"), "dup/q", count=100_000, interval=0.01).start()   # paced, never runs out
    with _Flow(c) as flow:
        flow.wait(lambda: c.received() >= 20, TIMEOUT, "traffic from A to C before the impostor")
        # instance = start time in whole seconds: the impostor must start in a later second to be told apart
        flow.wait(lambda: time.time() >= int(c_started) + 1, 2, "a second after C started")

        flow.reset()
        impostor = mesh.add("C-impostor", listen=False, connect={via: 1}, router_id="C")
        # refused, and refused again when its connector comes back: the real C is alive
        flow.wait(lambda: len(_refusals(impostor)) >= 3, TIMEOUT, f"{via} refusing the impostor 3 times")
        crit = [ln for ln in mesh[via].stderr_text().splitlines() if "duplicate router id" in ln]
        assert crit and all(" CRITICAL " in ln for ln in crit) and "'C'" in crit[0], crit
        assert [ln for ln in impostor.stderr_text().splitlines()
                if " CRITICAL " in ln and "was refused by the router on connection" in ln]
        for name in "AB":                                # nobody took the impostor for a restart of C
            assert " restarted " not in mesh[name].stderr_text()
        seen = c.received()
        flow.wait(lambda: c.received() >= seen + 100, TIMEOUT, "traffic from A to C with the impostor around")
        stall_with_impostor = flow.longest_stall

        assert impostor.stop() == 0
        left = time.monotonic()
        seen = c.received()
        flow.wait(lambda: c.received() >= seen + 20, 3.0, "traffic from A to C after the impostor left")
        fresh = mesh.wait_route("A", "C", 3.0)           # a new address on C is routable from A: MAUs work
        print(f"duplicate id via {via}: longest stall of A->C traffic while the impostor was around "
              f"{stall_with_impostor:.2f} s; whole {time.monotonic() - left:.2f} s after it left "
              f"(fresh route A->C in {fresh:.2f} s)")
        assert stall_with_impostor < 3.0, stall_with_impostor
        p.close()
        assert set(p.outcomes) <= {"accepted"}, p.outcomes
        ids = c.ids  # one snapshot: the consumer is still receiving what was in flight when the producer closed
        assert ids == list(range(len(ids))), "a delivery to C was lost or duplicated"
        assert {i for i, o in p.outcome_of.items() if o == ["accepted"]} <= set(c.ids)


def test_duplicate_router_id_is_logged_critical(mesh):
    mesh.add("A", router_id="Same.Id")
    twin = mesh.add("A2", listen=False, connect={"A": 1}, router_id="Same.Id")
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        logs = mesh["A"].stderr_text() + twin.stderr_text()
        if "duplicate router id" in logs:
            break
        time.sleep(0.2)
    lines = [ln for ln in logs.splitlines() if "duplicate router id" in ln]
    assert lines, "no duplicate-id log line"
    assert any("CRITICAL" in ln or "critical" in ln for ln in lines), lines


def test_edge_to_edge_through_two_interiors(mesh):
    edge_listener = ("listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n"
                     "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")
    mesh.add("IA", sections=edge_listener)
    mesh.add("IB", listen=False, connect={"IA": 1}, sections=edge_listener)
    for edge, interior in (("EA", "IA"), ("EB", "IB")):
        port = mesh[interior].ports["edge"]
        mesh.add(edge, listen=False, mode="edge",
                 sections=f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {port}\n"
                          f"    role: edge\n}}")
    mesh.wait_route("EA", "EB", TIMEOUT)
    c = Consumer(mesh.url("EB"), "edge/q", credit=50).start()
    c.wait_ready()
    mesh.wait_route("EA", "EB", TIMEOUT)
    p = Producer(mesh.url("EA"), "edge/q", count=100).start()
    p.wait(TIMEOUT)
    assert p.outcomes == {"accepted": 100}
    assert c.ids == list(range(100))


def test_management_from_an_edge_reaches_a_remote_interior(mesh):
    """tdstat on an edge router asks another interior (-r): the request goes up the uplink and the
    reply finds the edge's dynamic address (_edge/<id>/...) through the mesh.

    Both directions are waited for: wait_route(EA, IB) only shows that IA knows IB (the request's way);
    the reply needs IB to know EA's key H<EA>, which IA advertises on its next tick. A request that
    reaches IB before that has its reply dropped (no route, as in Dispatch) and the client times out:
    the in-process client below asks at once, without tdstat's start-up time to hide that."""
    import subprocess
    import sys

    from tools.mgmtclient import ManagementClient

    edge_listener = ("listener {\n    name: edge\n    host: 127.0.0.1\n    port: 0\n    role: edge\n"
                     "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")
    mesh.add("IA", sections=edge_listener)
    mesh.add("IB", listen=False, connect={"IA": 1})
    port = mesh["IA"].ports["edge"]
    mesh.add("EA", listen=False, mode="edge",
             sections=f"connector {{\n    name: uplink\n    host: 127.0.0.1\n    port: {port}\n    role: edge\n}}")
    mesh.wait_route("EA", "IB", TIMEOUT)             # requests from EA reach IB
    mesh.wait_reply_route("IB", "EA", TIMEOUT)       # and IB's replies find EA's dynamic addresses
    bus = mesh.url("EA").replace("amqp://", "")
    with ManagementClient(bus, timeout=10, router_id="IB") as client:
        assert [r["id"] for r in client.query("org.apache.qpid.dispatch.router", ["id"])] == ["IB"]
    out = subprocess.run([sys.executable, "-m", "tools.tdstat", "-g", "-r", "IB", "-b", bus, "-t", "10"],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[1] == "IB" and "  Router Id                        IB" in lines


CONF_MESH = REPO / "conf" / "mesh"


@pytest.mark.parametrize("topology,files,pairs", [
    ("line", ["line-A", "line-B", "line-C"], [("line-A", "line-C"), ("line-C", "line-A")]),
    ("triangle", ["triangle-A", "triangle-B", "triangle-C"], [("triangle-B", "triangle-C")]),
    ("hub", ["hub", "spoke-1", "spoke-2", "spoke-3"], [("spoke-1", "spoke-3"), ("spoke-2", "hub")]),
    ("edges", ["edges-interior-A", "edges-interior-B", "edges-edge-A", "edges-edge-B"],
     [("edges-edge-A", "edges-edge-B"), ("edges-edge-B", "edges-interior-A")]),
])
def test_conf_mesh_topologies_run(mesh, tmp_path, topology, files, pairs):
    """The files of conf/mesh, as shipped except for the ports (free ones instead of 5672...)."""
    texts = {f: (CONF_MESH / f"{f}.conf").read_text() for f in files}
    ports = sorted({int(p) for t in texts.values() for p in re.findall(r"^\s*port:\s*(\d+)\s*$", t, re.M)})
    remap = {p: free_port() for p in ports}
    for f in files:
        text = re.sub(r"^(\s*port:\s*)(\d+)\s*$", lambda m: f"{m.group(1)}{remap[int(m.group(2))]}",
                      texts[f], flags=re.M)
        rid = re.search(r"^\s*id:\s*(\S+)", text, re.M).group(1)
        r = RouterProcess(tmp_path / f, router_id=rid)
        r.conf_path.write_text(text)
        mesh.routers[f] = r
        mesh.register(r)
        r.start()
    for src, dst in pairs:
        mesh.wait_route(src, dst, 60)               # production timers: RA every 4 s while in flux
