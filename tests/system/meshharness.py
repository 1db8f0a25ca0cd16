"""Start meshes of real ``tdrouterd`` processes for system tests (on top of tests/system/harness.py).

:class:`Mesh` starts interior routers on 127.0.0.1 with ephemeral ports and short routing timers
(HELLO every second, neighbours lost after 3 s, RA every second while the topology changes), in an
order that lets each connector point at a port already known: a router's ``connect`` may only name
routers started before it. A router restarted after ``kill -9`` keeps its listener ports, so the
connectors of the others find it again.

Convergence is checked the way a client sees it, not through logs: :meth:`Mesh.wait_route` attaches a
receiver for a fresh address on one router and waits until a sender on another router is given credit,
which happens only once the receiver's router is reachable and its address has propagated;
:meth:`Mesh.wait_reply_route` does the same for a receiver's dynamic (reply) address.
"""

from __future__ import annotations

import itertools
import re
import time

from tests.system.clients import Consumer, Producer
from tests.system.harness import RouterProcess

__all__ = ["MESH_TIMERS", "Mesh", "MeshRouter"]

#: Routing timers for tests (seconds; the schema's minimum is 1). Production defaults are 1/3/30/4/60.
MESH_TIMERS = {
    "helloIntervalSeconds": 1,
    "helloMaxAgeSeconds": 3,
    "raIntervalSeconds": 5,
    "raIntervalFluxSeconds": 1,
    "remoteLsMaxAgeSeconds": 15,
}

#: Reconnect quickly after a neighbour comes back (the driver's default backoff starts at 1 s, doubling).
CONNECTOR_RETRY = "retryDelaySeconds: 0.2\n    retryMultiplier: 1.5\n    retryMaxDelaySeconds: 1.0"

_probe_ids = itertools.count(1)


class MeshRouter(RouterProcess):
    """A RouterProcess whose router section also carries the routing timers (and any extra lines)."""

    def __init__(self, workdir, sections: str = "", *, router_id: str, mode: str = "interior",
                 timers: dict | None = None, router_extra: str = "", **kw):
        super().__init__(workdir, sections, router_id=router_id, mode=mode, **kw)
        lines = [f"    {k}: {v}" for k, v in (MESH_TIMERS if timers is None else timers).items()]
        lines += [f"    {line.strip()}" for line in router_extra.splitlines() if line.strip()]
        head = f"router {{\n    mode: {mode}\n    id: {router_id}\n"
        text = self.conf_path.read_text()
        assert text.startswith(head), text[:200]
        self.conf_path.write_text(head + "".join(line + "\n" for line in lines) + text[len(head):])

    def pin_ports(self) -> None:
        """Rewrite the config so that every listener reuses the port it got (for a restart)."""
        text = self.conf_path.read_text()
        out, name = [], None
        for line in text.splitlines():
            m = re.match(r"\s*name:\s*(\S+)", line)
            if m:
                name = m.group(1)
            if re.match(r"\s*port:\s*0\s*$", line) and name in self.ports:
                line = f"    port: {self.ports[name]}"
            if line.strip() == "}":
                name = None
            out.append(line)
        self.conf_path.write_text("\n".join(out) + "\n")

    def restart(self) -> "MeshRouter":
        """Start again after kill() or stop(), on the same ports."""
        self.pin_ports()
        self.proc = None  # start() begins afresh: new listeners, stdout lines, killed flag
        return self.start()


class Mesh:
    """Interior routers by name. ``factory`` is the ``router_factory`` fixture's ``make`` or None.

    Routers are registered with the fixture when one is given (so teardown stops them and checks their
    exit status); otherwise the caller must call :meth:`stop_all`.
    """

    def __init__(self, workdir, register=None, *, timers: dict | None = None, sections: str = ""):
        self.workdir = workdir
        self.register = register
        self.timers = MESH_TIMERS if timers is None else timers
        self.sections = sections
        self.routers: dict[str, MeshRouter] = {}

    def add(self, rid: str, *, listen: bool = True, connect: dict[str, int] | None = None,
            sections: str = "", router_id: str | None = None, mode: str = "interior") -> MeshRouter:
        """Start router ``rid`` (AMQP id ``router_id`` or ``rid``) with an inter-router listener (when
        ``listen``) and an inter-router connector to each router of ``connect`` ({name: cost})."""
        parts = [self.sections, sections]
        if listen:
            parts.append("listener {\n    name: inter-router\n    host: 127.0.0.1\n    port: 0\n"
                         "    role: inter-router\n    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}")
        for peer, cost in (connect or {}).items():
            port = self.routers[peer].ports["inter-router"]
            parts.append(f"connector {{\n    name: to-{peer}\n    host: 127.0.0.1\n    port: {port}\n"
                         f"    role: inter-router\n    cost: {cost}\n    {CONNECTOR_RETRY}\n}}")
        r = MeshRouter(self.workdir / rid, "\n\n".join(p for p in parts if p.strip()),
                       router_id=router_id or rid, mode=mode, timers=self.timers)
        self.routers[rid] = r
        if self.register is not None:
            self.register(r)
        return r.start()

    def __getitem__(self, rid: str) -> MeshRouter:
        return self.routers[rid]

    def url(self, rid: str) -> str:
        return self.routers[rid].url

    def wait_route(self, src: str, dst: str, timeout: float = 20.0) -> float:
        """Block until a sender on ``src`` gets credit for an address whose only consumer is on ``dst``;
        returns the seconds it took. Raises AssertionError (with both routers' stderr tails) on timeout.

        This proves one direction only: ``src``'s side of the mesh knows ``dst``'s mobile addresses. A
        request/reply exchange needs :meth:`wait_reply_route` for the way back as well."""
        start = time.monotonic()
        consumer = Consumer(self.url(dst), f"mesh-probe.{next(_probe_ids)}.{src}.{dst}", credit=1).start()
        return self._wait_credit(src, dst, consumer, consumer.address, start, timeout)

    def wait_reply_route(self, src: str, dst: str, timeout: float = 20.0) -> float:
        """Block until a sender on ``src`` gets credit for the dynamic (reply) address of a receiver on
        ``dst`` (``_topo/0/<dst>/temp.*``, or ``_edge/<dst>/temp.*`` when ``dst`` is an edge router):
        the path a reply from ``src`` to a client of ``dst`` takes. It exists once ``src`` knows router
        ``dst`` (an interior) or the edge key ``H<dst>`` its interior advertises (Qpid Dispatch 1.19
        python/qpid_dispatch/management/client.py, src/router_core/management_agent.c); that
        advertisement goes out on the interior's next tick, independently of ``dst``'s mobile addresses."""
        start = time.monotonic()
        consumer = Consumer(self.url(dst), dynamic=True, credit=1).start()
        consumer.wait_ready()
        return self._wait_credit(src, dst, consumer, consumer.dynamic_address, start, timeout)

    def _wait_credit(self, src: str, dst: str, consumer: Consumer, address: str, start: float,
                     timeout: float) -> float:
        producer = Producer(self.url(src), address).start()
        try:
            deadline = start + timeout
            while time.monotonic() < deadline:
                if producer.credit > 0:
                    return time.monotonic() - start
                time.sleep(0.05)
            raise AssertionError(
                f"no route from {src} to {address} on {dst} after {timeout}s\n"
                + "\n".join(f"--- {n} stderr ---\n" + "\n".join(r.stderr_text().splitlines()[-30:])
                            for n, r in self.routers.items() if n in (src, dst)))
        finally:
            producer.close()
            consumer.close()

    def wait_converged(self, timeout: float = 30.0) -> None:
        """Every router reaches every other one (checked both ways between consecutive routers and
        from the first to all)."""
        names = [n for n, r in self.routers.items() if r.is_running()]
        deadline = time.monotonic() + timeout
        for a, b in itertools.permutations(names, 2):
            self.wait_route(a, b, timeout=max(1.0, deadline - time.monotonic()))

    def stop_all(self) -> None:
        for r in self.routers.values():
            if r.is_running():
                r.stop()
