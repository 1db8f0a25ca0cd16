"""Sockets-free harness for several interior routers joined by in-memory inter-router connections.

Every router runs the real routing engine (:mod:`router.mesh`) on a shared fake clock; ``advance``
moves the clock in small steps, ticking every router and pumping every pipe, so HELLO/RA/LSU/MAU
exchanges happen exactly as between daemons, only faster.
"""

from __future__ import annotations

from tests.unit.enginepair import Peer, Pipe, pump

FAST_TIMERS = {"hello_interval": 0.5, "hello_max_age": 1.5, "ra_interval": 5.0, "ra_interval_flux": 1.0,
               "remote_ls_max_age": 10.0}


class MeshHarness:
    """Routers by id, inter-router pipes between them, client peers attached anywhere."""

    def __init__(self, *ids: str, **router_kw):
        from router.core import Router

        self.now = 1000.0
        self.routers = {}
        for rid in ids:
            kw = dict(router_kw)
            kw.setdefault("mesh_timers", FAST_TIMERS)
            self.routers[rid] = Router(rid, mode="interior", clock=lambda: self.now, **kw)
        self.pipes: list[Pipe] = []
        self.links: dict = {}

    def link(self, a: str, b: str, cost: int = 1) -> Pipe:
        """An inter-router connection from a (connector) to b (listener)."""
        ra, rb = self.routers[a], self.routers[b]
        ea = ra.new_engine(ra.connection_settings(role="inter-router", cost=cost, name=f"to-{b}"), server=False)
        eb = rb.new_engine(rb.connection_settings(role="inter-router", name=f"from-{a}"), server=True)
        pipe = Pipe(ea, eb)
        pipe.engines = (ea, eb)
        self.pipes.append(pipe)
        self.links[(a, b)] = pipe
        self.pump()
        return pipe

    def add_edge(self, eid: str, interior: str, **router_kw) -> Pipe:
        """An edge router eid with its uplink (role edge) to an interior router."""
        from router.core import Router

        e = self.routers[eid] = Router(eid, mode="edge", clock=lambda: self.now, **router_kw)
        ri = self.routers[interior]
        ee = e.new_engine(e.connection_settings(role="edge", name="uplink"), server=False)
        ei = ri.new_engine(ri.connection_settings(role="edge", name=f"edge-{eid}"), server=True)
        pipe = Pipe(ee, ei)
        pipe.engines = (ee, ei)
        self.pipes.append(pipe)
        self.links[(eid, interior)] = pipe
        self.pump()
        return pipe

    def cut(self, a: str, b: str) -> None:
        """The network between a and b fails: both engines see the connection drop."""
        pipe = self.links.pop((a, b))
        pipe.cut()
        for e in pipe.engines:
            e.abort()
        self.pump()

    def kill(self, rid: str) -> None:
        """Router rid dies: every pipe touching it is cut; it receives nothing more."""
        for (a, b) in list(self.links):
            if rid in (a, b):
                pipe = self.links.pop((a, b))
                pipe.cut()
                for e in pipe.engines:
                    if (e.handler is not self.routers[rid]):
                        e.abort()
        for p in list(self.pipes):
            if getattr(p, "client_of", None) == rid:
                p.cut()
        del self.routers[rid]
        self.pump()

    def client(self, rid: str, peer: Peer | None = None, **settings_kw) -> Peer:
        """A client (a new Peer by default) on router rid; settings_kw go to the router's engine
        (e.g. ``name="broker"``, ``role="route-container"``)."""
        r = self.routers[rid]
        engine = r.new_engine(r.connection_settings(**settings_kw), server=True)
        peer = peer or Peer()
        pipe = Pipe(peer, engine)
        pipe.client_of = rid
        peer.router_engine = engine
        peer.pipe = pipe
        self.pipes.append(pipe)
        self.pump()
        return peer

    def pump(self) -> int:
        return pump(*self.pipes)

    def advance(self, seconds: float, step: float = 0.25) -> None:
        end = self.now + seconds
        while self.now < end:
            self.now = min(end, self.now + step)
            for r in list(self.routers.values()):
                r.tick(self.now)
            self.pump()

    def settle_topology(self, seconds: float = 6.0) -> None:
        self.advance(seconds)
