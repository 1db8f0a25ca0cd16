"""An in-memory mesh of RoutingEngines for unit tests: no sockets, no Trio, simulated time.

:class:`Fabric` wires engines together with bidirectional "connections" (a conn key on each side),
delivers whatever ``take_output()`` returns to the engine at the other end, and advances time with
``run(seconds)``. A drop filter lets tests lose chosen messages; ``kill`` makes a router vanish (its
neighbours get ``link_lost``, as when its TCP connections break) and ``partition`` makes one go silent
(nobody is told: only helloMaxAge notices). A connection an engine refuses (``take_refusals``, a duplicate
router id) is closed as the core would: the refused end hears ``peer_refused``, both ends ``link_lost``;
``refusals`` records them.
"""

from __future__ import annotations

import collections
from typing import Callable

from router.mesh.engine import RoutingEngine
from router.mesh.messages import decode

FAST = dict(hello_interval=1.0, hello_max_age=3.0, ra_interval=30.0, ra_interval_flux=1.0,
            remote_ls_max_age=60.0)


class Recorder:
    """A MeshListener that keeps the latest routes and the remote address table the core would hold."""

    def __init__(self):
        self.next_hops: dict[str, object] = {}
        self.costs: dict[str, int] = {}
        self.valid_origins: dict[str, set[str]] = {}
        self.radius = 0
        self.addresses: dict[str, dict[str, int]] = collections.defaultdict(dict)
        self.lost: list[str] = []
        self.events: list[tuple] = []

    def routes_changed(self, next_hops, costs, valid_origins, radius):
        self.next_hops, self.costs, self.valid_origins, self.radius = next_hops, costs, valid_origins, radius
        self.events.append(("routes", dict(costs)))

    def router_lost(self, router_id):
        self.lost.append(router_id)
        self.addresses.pop(router_id, None)
        self.events.append(("lost", router_id))

    def remote_address_added(self, router_id, key, hint):
        # the engine promises a route exists for router_id before its addresses are reported
        assert router_id in self.next_hops, f"address {key} of {router_id} reported without a route"
        self.addresses[router_id][key] = hint
        self.events.append(("add", router_id, key))

    def remote_address_removed(self, router_id, key):
        self.addresses[router_id].pop(key, None)
        self.events.append(("del", router_id, key))

    def where(self, key: str) -> set[str]:
        return {rid for rid, keys in self.addresses.items() if key in keys}


class Fabric:
    """Engines by router id, connected by in-memory links; ``now`` is the simulated clock."""

    def __init__(self, **timers):
        self.timers = dict(FAST, **timers)
        self.now = 0.0
        self.engines: dict[str, RoutingEngine] = {}
        self.listeners: dict[str, Recorder] = {}
        self.wires: dict[tuple[str, object], tuple[str, object]] = {}
        self.silent: set[str] = set()
        self.drop: Callable[[str, str, bytes], bool] | None = None
        self.sent = collections.Counter()          # opcode -> messages delivered
        self.refusals: list[tuple[float, str, str, str]] = []   # (time, refusing router, peer, description)
        self._instance = 1000

    def add(self, rid: str, *, instance: int | None = None) -> RoutingEngine:
        self._instance += 1
        rec = Recorder()
        eng = RoutingEngine(rid, rec, instance=self._instance if instance is None else instance,
                            **self.timers)
        self.engines[rid] = eng
        self.listeners[rid] = rec
        return eng

    def connect(self, a: str, b: str, cost: int = 1, tag: str = "") -> None:
        ka, kb = f"{a}>{b}{tag}", f"{b}>{a}{tag}"
        self.wires[(a, ka)] = (b, kb)
        self.wires[(b, kb)] = (a, ka)
        self.engines[a].link_up(ka, cost, self.now)
        self.engines[b].link_up(kb, cost, self.now)

    def disconnect(self, a: str, b: str, tag: str = "") -> None:
        ka, kb = f"{a}>{b}{tag}", f"{b}>{a}{tag}"
        self.wires.pop((a, ka), None)
        self.wires.pop((b, kb), None)
        if a in self.engines:
            self.engines[a].link_lost(ka, self.now)
        if b in self.engines:
            self.engines[b].link_lost(kb, self.now)

    def kill(self, rid: str) -> None:
        """The router dies and its connections break (neighbours get link_lost)."""
        for (src, key), (dst, dkey) in list(self.wires.items()):
            if src == rid:
                del self.wires[(src, key)]
                del self.wires[(dst, dkey)]
                if dst in self.engines:
                    self.engines[dst].link_lost(dkey, self.now)
        del self.engines[rid]
        del self.listeners[rid]

    def _close_refused(self) -> None:
        for rid, eng in list(self.engines.items()):
            for key, description in eng.take_refusals():
                peer = self.wires.pop((rid, key), None)
                if peer is None:
                    continue
                self.wires.pop(peer, None)
                self.refusals.append((self.now, rid, peer[0], description))
                if peer[0] in self.engines:
                    self.engines[peer[0]].peer_refused(peer[1], description, self.now)
                    self.engines[peer[0]].link_lost(peer[1], self.now)
                eng.link_lost(key, self.now)

    def deliver(self, limit: int = 100_000) -> int:
        """Deliver output until every engine is quiet; returns the number of messages delivered."""
        n = 0
        while True:
            self._close_refused()
            batch = []
            for rid, eng in list(self.engines.items()):
                for key, data in eng.take_output():
                    batch.append((rid, key, data))
            if not batch:
                return n
            for rid, key, data in batch:
                if rid in self.silent:
                    continue
                peer = self.wires.get((rid, key))
                if peer is None or peer[0] not in self.engines or peer[0] in self.silent:
                    continue
                if self.drop is not None and self.drop(rid, peer[0], data):
                    continue
                self.sent[decode(data).opcode] += 1
                self.engines[peer[0]].receive(peer[1], data, self.now)
                n += 1
                if n > limit:
                    raise AssertionError("control traffic does not settle (a forwarding loop?)")

    def run(self, seconds: float, step: float = 0.1) -> None:
        end = self.now + seconds
        while self.now < end - 1e-9:
            self.now = round(self.now + step, 6)
            for rid, eng in list(self.engines.items()):
                if rid not in self.silent:
                    eng.tick(self.now)
            self.deliver()

    def converge(self, seconds: float = 10.0) -> None:
        self.run(seconds)
