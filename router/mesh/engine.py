"""RoutingEngine: the interior router's control plane (Qpid Dispatch 1.19
python/qpid_dispatch_internal/router/), sans-IO.

The router core drives it: ``link_up`` / ``link_lost`` when an inter-router connection's control links
come and go, ``receive`` for every message arriving on an incoming control link, ``tick(now)`` about
every 100 ms to a second, and ``add_local_address`` / ``remove_local_address`` when a mobile address
gains its first / loses its last local destination. Whatever the engine wants sent is collected by
``take_output()`` as ``(conn_key, message bytes)`` for that connection's outgoing control link; what it
learns reaches the core through the :class:`MeshListener` callbacks.

The engine owns all control-plane forwarding, because a 1.x peer addresses control messages to routers,
not to links: a message to ``_topo/0/all/qdrouter[.ma]`` is processed and re-sent to every neighbour not
yet in its ``x-opt-qd.trace`` (trace-based exclusion ends floods in cycles); one to
``_topo/0/<X>/qdrouter[.ma]`` is processed by X and forwarded hop by hop by everyone else; HELLO
(``_local/qdhello``) never leaves the link it was sent on.

Listener contract, in this order after every change:

1. for each router that stopped being reachable: ``remote_address_removed`` for each of its keys the core
   was told about, then ``router_lost`` (so the core may also rely on ``router_lost`` alone);
2. ``routes_changed`` when next hops, costs, valid origins or radius differ from the last call;
3. ``remote_address_added`` for keys of reachable routers (addresses of a router without a route are held
   back until it becomes reachable, so the core always has a next hop for them).

``valid_origins[dest]`` holds the other routers whose shortest path to ``dest`` runs through this
router; a message that entered the mesh here (ingress = own id) is always valid.

Duplicate router ids are handled by a part, ``engine.identity`` (:class:`router.mesh.identity.RouterIdentity`),
to which the engine is its :class:`router.mesh.identity.IdentityHost`; ``take_refusals``, ``check_open`` and
``peer_refused`` stay here as delegations, so the core talks to the engine alone. The protocol's own
addresses are counted by another part, ``engine.address_counters`` (router/mesh/counters.py). What remains
(neighbours, link state, routes, flooding) is one state machine over one node table, hence a little over
~600 lines.
"""

from __future__ import annotations

import logging
from typing import Iterable, Protocol

from router.mesh import messages as M
from router.mesh import protocol as P
from router.mesh.counters import ControlAddressCounters
from router.mesh.identity import RouterIdentity
from router.mesh.mobile import LocalAddresses
from router.mesh.paths import Routes, compute_routes
from router.mesh.records import Conn as _Conn
from router.mesh.records import Node as _Node
from router.mesh.records import conn_name as _conn_name
from router.mesh.records import strip_scheme as _strip_scheme
from wire.amqptypes import CodecError
from wire.annotations import set_router_annotations

__all__ = ["MeshListener", "RoutingEngine"]

log = logging.getLogger("router.mesh")

#: "More routers than the table holds" is logged at most this often (seconds).
TABLE_FULL_LOG_INTERVAL = 10.0
#: A malformed control message is logged at most this often (seconds), with the count dropped since the
#: last line: a neighbour sending garbage must not turn into a log flood.
MALFORMED_LOG_INTERVAL = 10.0
#: Nodes with no link state, referenced by nobody and not heard from for this many hello intervals are
#: forgotten (Dispatch: 3 ticks).
NODE_FORGET_TICKS = 3
#: Router records kept at most: Dispatch meshes hold 128 routers; twice that leaves room for records of
#: departed routers not yet forgotten, and bounds what a peer's bogus link states can make us allocate.
MAX_NODES = 2 * P.MAX_ROUTERS
#: LSR / MAR that got no answer are repeated after this many hello intervals (an answer can be lost
#: while routes settle: the unicast reply is dropped when the requester is not yet reachable).
REQUEST_RETRY_TICKS = 2


class MeshListener(Protocol):
    """What the router core implements to hear about routes and remote addresses."""

    def routes_changed(self, next_hops: dict[str, object], costs: dict[str, int],
                       valid_origins: dict[str, set[str]], radius: int) -> None: ...

    def router_lost(self, router_id: str) -> None: ...

    def remote_address_added(self, router_id: str, key: str, hint: int) -> None: ...

    def remote_address_removed(self, router_id: str, key: str) -> None: ...


class RoutingEngine:
    """Link-state routing engine of one interior router (see the module docstring). Its duplicate-id part
    is :attr:`identity`."""

    def __init__(self, router_id: str, listener: MeshListener, *, instance: int, area: str = P.DEFAULT_AREA,
                 hello_interval=P.HELLO_INTERVAL, hello_max_age=P.HELLO_MAX_AGE,
                 ra_interval=P.RA_INTERVAL, ra_interval_flux=P.RA_INTERVAL_FLUX,
                 remote_ls_max_age=P.REMOTE_LS_MAX_AGE):
        if not router_id:
            raise ValueError("router id must not be empty")
        self.id = router_id
        self.listener = listener
        self.instance = int(instance)
        self.area = area
        self.hello_interval = float(hello_interval)
        self.hello_max_age = float(hello_max_age)
        self.ra_interval = float(ra_interval)
        self.ra_interval_flux = float(ra_interval_flux)
        self.remote_ls_max_age = float(remote_ls_max_age)
        self._conns: dict[object, _Conn] = {}
        self._neighbours: dict[str, object] = {}      # neighbour id -> conn key (two-way HELLO)
        self._peers: dict[str, int] = {}               # my link state: neighbour id -> cost
        self.ls_seq = 0
        self._nodes: dict[str, _Node] = {}
        self._local = LocalAddresses(router_id, area)
        self._out: list[tuple[object, bytes]] = []
        #: the routing protocol's addresses, counted for management (router/mesh/counters.py)
        self.address_counters = ControlAddressCounters()
        self._routes = Routes()
        self._reported_routes = None
        self._reported_keys: dict[str, dict[str, int]] = {}   # router id -> keys the core was told
        self._dirty = False
        self._last_hello = float("-inf")
        self._last_ra = float("-inf")
        self._last_change = float("-inf")
        self._last_full_log = float("-inf")
        self._last_malformed_log = float("-inf")
        self._malformed_unlogged = 0
        self._now = 0.0
        self.identity = RouterIdentity(self, router_id, self.instance, hello_interval=self.hello_interval,
                                       hello_max_age=self.hello_max_age, remote_ls_max_age=self.remote_ls_max_age)

    # -- properties for management / tests --------------------------------------------------------

    @property
    def mobile_seq(self) -> int:
        return self._local.mobile_seq

    @property
    def neighbours(self) -> dict[str, object]:
        return dict(self._neighbours)

    @property
    def routes(self) -> Routes:
        return self._routes

    def remote_keys(self, router_id: str) -> dict[str, int]:
        """Mobile keys known for ``router_id`` (whether or not it is reachable)."""
        node = self._nodes.get(router_id)
        return dict(node.mobile.keys) if node else {}

    # -- events from the core ---------------------------------------------------------------------

    def take_refusals(self) -> list[tuple[object, str]]:
        """Connections to close for a duplicate router id (:meth:`RouterIdentity.take_refusals`)."""
        return self.identity.take_refusals()

    def check_open(self, container_id: str | None, conn_name: str, now: float) -> str | None:
        """Why an inter-router OPEN must be refused, or None (:meth:`RouterIdentity.check_open`)."""
        self._now = now
        return self.identity.check_open(container_id, conn_name, now)

    def peer_refused(self, conn_name: str, description: str, now: float) -> None:
        """A neighbour refused this router for a duplicate id (:meth:`RouterIdentity.peer_refused`)."""
        self._now = now
        self.identity.peer_refused(conn_name, description, now)

    def link_up(self, conn_key, cost: int, now: float) -> None:
        """The control links of an inter-router connection are attached; HELLO on it at once."""
        self._now = now
        self._conns[conn_key] = _Conn(conn_key, cost)
        self._send_hello(conn_key)

    def link_lost(self, conn_key, now: float) -> None:
        """The connection (or its control link) is gone: its neighbour is lost at once."""
        self._now = now
        if self._conns.pop(conn_key, None) is not None:
            self.update_neighbours(now)
            self._settle(now)

    def receive(self, conn_key, msg: bytes, now: float) -> None:
        """A complete control message from ``conn_key``. Never raises: bad input is logged and dropped."""
        self._now = now
        conn = self._conns.get(conn_key)
        if conn is None:
            log.warning("mesh: control message on unknown connection %s dropped", _conn_name(conn_key))
            return
        if conn.refused:
            return                                   # being closed for a duplicate router id
        try:
            env = M.decode(msg)
        except M.UnsupportedVersion as e:
            self._malformed(now, "mesh: ignored: %s", e)
            return
        except M.MeshMessageError as e:
            self._malformed(now, "mesh: malformed control message from %s dropped: %s",
                            conn.peer_id or _conn_name(conn_key), e)
            return
        try:
            self._dispatch(conn, env, msg, now)
            self._settle(now)
        except Exception:  # noqa: BLE001 - one bad message must not take the router down
            log.exception("mesh: error handling %s from %s", env.opcode, conn.peer_id or _conn_name(conn_key))

    def _malformed(self, now: float, fmt: str, *args) -> None:
        """Log a dropped control message (malformed, or sent where it makes no sense), at most once per
        MALFORMED_LOG_INTERVAL."""
        if now - self._last_malformed_log < MALFORMED_LOG_INTERVAL:
            self._malformed_unlogged += 1
            return
        suffix = f" ({self._malformed_unlogged} more dropped since the last such line)" if self._malformed_unlogged else ""
        self._last_malformed_log = now
        self._malformed_unlogged = 0
        log.warning(fmt + suffix, *args)

    def add_local_address(self, key: str, hint: int) -> None:
        """A mobile address got its first local destination (advertised on the next tick)."""
        self._local.add(key, hint)

    def remove_local_address(self, key: str) -> None:
        """A mobile address lost its last local destination (withdrawn on the next tick)."""
        self._local.remove(key)

    def tick(self, now: float) -> None:
        """Timers: HELLO, neighbour expiry, mobile updates, RA, link-state ageing, request retries."""
        self._now = now
        if now - self._last_hello >= self.hello_interval:
            self._last_hello = now
            for key in list(self._conns):
                self._send_hello(key)
        self.update_neighbours(now)
        mau = self._local.flush()
        if mau is not None:
            self._originate_flood(mau, P.ALL_ROUTERS_MA_ADDRESS)
            self._send_ra(now)
        self._age_nodes(now)
        self._settle(now)
        self._retry_requests(now)
        self.identity.chase_rivals(now)
        in_flux = now - self._last_change < 2 * self.ra_interval_flux
        if now - self._last_ra >= (self.ra_interval_flux if in_flux else self.ra_interval):
            self._send_ra(now)

    def take_output(self) -> list[tuple[object, bytes]]:
        """Messages to send: ``(conn_key, AMQP message bytes)`` for that connection's control link."""
        out, self._out = self._out, []
        return out

    def nodes(self) -> list[dict]:
        """Rows for management's ``router.node``: this router first, then every reachable one by id."""
        rows = [{
            "id": self.id, "protocolVersion": P.PROTOCOL_VERSION, "instance": self.instance,
            "linkState": sorted(self._peers), "nextHop": None, "validOrigins": [],
            "address": P.management_address(self.id, self.area), "routerLink": None, "cost": 0,
            "lastTopoChange": self._last_change if self._last_change > float("-inf") else None,
        }]
        r = self._routes
        for rid in sorted(r.cost):
            node = self._nodes.get(rid)
            hop = r.next_hop[rid]
            rows.append({
                "id": rid, "protocolVersion": P.PROTOCOL_VERSION,
                "instance": node.instance if node else None,
                "linkState": sorted(node.peers) if node and node.peers is not None else [],
                "nextHop": None if hop == rid else hop,
                "validOrigins": sorted(r.valid_origins.get(rid, ())),
                "address": P.management_address(rid, self.area),
                "routerLink": self._neighbours.get(rid), "cost": r.cost[rid],
                "lastTopoChange": node.last_topo_change if node else None,
            })
        return rows

    # -- neighbours -------------------------------------------------------------------------------

    def _send_hello(self, conn_key) -> None:
        if self._conns[conn_key].refused:
            return
        seen = sorted({c.peer_id for c in self._conns.values()
                       if c.peer_id and c.last_hello is not None
                       and self._now - c.last_hello <= self.hello_max_age})
        hello = M.Hello(self.id, self.instance, seen, self.area)
        self._out.append((conn_key, M.encode(hello, P.HELLO_ADDRESS, ingress=self.id, trace=[self.id])))
        self.address_counters.originated(P.HELLO_ADDRESS, 1)

    def _on_hello(self, conn: _Conn, hello: M.Hello, now: float) -> None:
        if not self.identity.admit_hello(conn, hello, now):
            return
        first = conn.peer_id != hello.id or conn.last_hello is None
        conn.peer_id = hello.id
        conn.peer_instance = hello.instance
        conn.last_hello = now
        conn.seen_me = self.id in hello.seen
        self._nodes[hello.id].last_seen = now
        if first:
            # answer at once so the peer sees itself in my `seen` one round trip later, not a helloInterval
            self._send_hello(conn.key)
        self.update_neighbours(now)

    def update_neighbours(self, now: float) -> None:
        """Recompute my neighbours (two-way HELLO within helloMaxAge) and my link state from them."""
        best: dict[str, _Conn] = {}
        for c in self._conns.values():
            if not (c.peer_id and c.seen_me and c.last_hello is not None
                    and now - c.last_hello <= self.hello_max_age):
                continue
            cur = best.get(c.peer_id)
            bound = self._neighbours.get(c.peer_id)
            # the cheapest connection; among equals keep the one in use (no flapping), then by key
            if cur is None or (c.cost, c.key != bound, str(c.key)) < (cur.cost, cur.key != bound, str(cur.key)):
                best[c.peer_id] = c
        neighbours = {rid: c.key for rid, c in best.items()}
        peers = {rid: c.cost for rid, c in best.items()}
        for rid in set(self._neighbours) - set(neighbours):
            log.info("mesh: neighbour %s lost", rid)
            self.identity.neighbour_gone(rid, now)
        for rid in set(neighbours) - set(self._neighbours):
            log.info("mesh: neighbour %s up (cost %d)", rid, peers[rid])
        if neighbours != self._neighbours:
            self._neighbours = neighbours
            self._dirty = True
        if peers != self._peers:
            self._peers = peers
            self.ls_seq += 1
            self._last_change = now
            self._dirty = True
            self._send_ra(now)

    # -- dispatch and forwarding ------------------------------------------------------------------

    def _dispatch(self, conn: _Conn, env: M.Envelope, raw: bytes, now: float) -> None:
        addr = _strip_scheme(env.to or env.to_override or "")
        if addr == P.HELLO_NODE:
            if env.opcode == P.HELLO:
                self.address_counters.delivered(addr)
                self._on_hello(conn, env.body, now)
            else:
                self._malformed(now, "mesh: %s sent to %s dropped", env.opcode, P.HELLO_NODE)
            return
        parts = addr.split("/")
        if len(parts) < 4 or parts[0] != "_topo" or parts[-1] not in (P.CONTROL_NODE, P.CONTROL_NODE_MA):
            self._malformed(now, "mesh: %s to unexpected address %r dropped", env.opcode, env.to)
            return
        target = "/".join(parts[2:-1])
        if env.body.id == self.id:
            # My id on a message I did not send (another router uses it, see RouterIdentity), or my own
            # message come back: either way nothing to process or pass on.
            instance = getattr(env.body, "instance", None)
            if instance is not None and instance != self.instance:
                self.identity.log_duplicate(f"{env.opcode} via {conn.peer_id or _conn_name(conn.key)}",
                                            instance, now)
            return
        if self.id in env.trace:
            return                                   # my own message come back: nothing to do
        if len(env.trace) > P.MAX_ROUTERS:
            self._malformed(now, "mesh: %s with a trace of %d routers dropped", env.opcode, len(env.trace))
            return
        if target == "all":
            self.address_counters.delivered(addr)
            if self._process(conn, env, now):
                self._forward_flood(conn, env, raw)
        elif target == self.id:
            self.address_counters.delivered(addr)
            self._process(conn, env, now)
        else:
            self._forward_unicast(target, env, raw)

    def _reannotate(self, env: M.Envelope, raw: bytes) -> bytes | None:
        try:
            return set_router_annotations(raw, to_override=env.to_override, phase=env.phase,
                                          ingress=env.ingress or self.id, trace=env.trace + [self.id],
                                          area_names=True)
        except CodecError as e:
            log.warning("mesh: cannot forward %s: %s", env.opcode, e)
            return None

    def _forward_flood(self, conn: _Conn, env: M.Envelope, raw: bytes) -> None:
        targets = [key for rid, key in sorted(self._neighbours.items())
                   if rid not in env.trace and key != conn.key and rid != conn.peer_id]
        if not targets:
            return
        data = self._reannotate(env, raw)
        if data is not None:
            self._out.extend((key, data) for key in targets)
            self.address_counters.forwarded(env.to or "", len(targets))

    def _forward_unicast(self, target: str, env: M.Envelope, raw: bytes) -> None:
        hop = self._routes.next_hop.get(target)
        if hop is None or hop in env.trace or hop not in self._neighbours:
            log.debug("mesh: %s for %s dropped: no route", env.opcode, target)
            return
        data = self._reannotate(env, raw)
        if data is not None:
            self._out.append((self._neighbours[hop], data))
            self.address_counters.forwarded(env.to or "", 1)

    def _originate_flood(self, msg, to: str) -> None:
        if not self._neighbours:
            return
        data = M.encode(msg, to, ingress=self.id, trace=[self.id])
        self._out.extend((key, data) for _, key in sorted(self._neighbours.items()))
        self.address_counters.originated(to, len(self._neighbours))

    def _unicast(self, dest: str, msg, to: str) -> bool:
        hop = self._routes.next_hop.get(dest)
        key = self._neighbours.get(hop) if hop is not None else None
        if key is None:
            return False
        self._out.append((key, M.encode(msg, to, ingress=self.id, trace=[self.id])))
        self.address_counters.originated(to, 1)
        return True

    def _send_ra(self, now: float) -> None:
        self._last_ra = now
        self._originate_flood(M.RouterAdvertisement(self.id, self.instance, self.ls_seq,
                                                     self._local.mobile_seq, self.area),
                              P.ALL_ROUTERS_ADDRESS)

    # -- protocol handlers ------------------------------------------------------------------------

    def node_record(self, rid: str, now: float) -> _Node | None:
        """The record of router ``rid``, created on first sight; None when the table is full."""
        node = self._nodes.get(rid)
        if node is None:
            if len(self._nodes) >= MAX_NODES:
                if now - self._last_full_log >= TABLE_FULL_LOG_INTERVAL:
                    self._last_full_log = now
                    log.warning("mesh: more than %d routers known; %s ignored", MAX_NODES, rid)
                return None
            node = self._nodes[rid] = _Node(rid, now)
        return node

    def _process(self, conn: _Conn, env: M.Envelope, now: float) -> bool:
        """Act on a control message for me; False if it was ignored as coming from a router whose id
        is used by another (a flood is then not passed on)."""
        body = env.body
        if env.opcode == P.RA:
            return self._on_ra(body, now)
        elif env.opcode == P.LSR:
            self._unicast(body.id, M.LinkStateUpdate(self.id, self.instance, self.ls_seq,
                                                     M.LinkState(self.id, self.ls_seq, dict(self._peers),
                                                                 self.area), self.area),
                          P.router_address(body.id, self.area))
        elif env.opcode == P.LSU:
            self._on_lsu(body, now)
        elif env.opcode == P.MAU:
            self._on_mau(body, now)
        elif env.opcode == P.MAR:
            if body.have_seq != self._local.mobile_seq:
                self._unicast(body.id, self._local.absolute(), P.router_ma_address(body.id, self.area))
        else:
            log.debug("mesh: %s on a _topo address ignored", env.opcode)
        return True

    def _on_ra(self, ra: M.RouterAdvertisement, now: float) -> bool:
        if not self.identity.check_instance(ra.id, ra.instance, now):
            return False
        node = self._nodes[ra.id]
        node.last_ra = node.last_seen = now
        if ra.ls_seq > node.ls_seq or (node.peers is None and ra.ls_seq > 0):
            node.ls_wanted = max(node.ls_wanted, ra.ls_seq)
            self._request_ls(node, now)
        if node.mobile.behind(ra.mobile_seq):
            node.mobile_wanted = max(node.mobile_wanted, ra.mobile_seq)
            self.request_mobile(node, now)
        return True

    def _on_lsu(self, lsu: M.LinkStateUpdate, now: float) -> None:
        if lsu.instance and not self.identity.check_instance(lsu.id, lsu.instance, now):
            return
        node = self.node_record(lsu.id, now)
        if node is None:
            return
        node.last_ra = node.last_seen = now
        if lsu.ls.id != lsu.id or (lsu.ls_seq <= node.ls_seq and node.peers is not None):
            return
        node.ls_seq = lsu.ls_seq
        node.peers = {rid: max(1, c) for rid, c in lsu.ls.peers.items() if rid != lsu.id}
        for rid in node.peers:
            if rid != self.id:
                self.node_record(rid, now)
        self._dirty = True

    def _on_mau(self, mau: M.MobileAddressUpdate, now: float) -> None:
        node = self.node_record(mau.id, now)
        if node is None:
            return
        node.last_seen = now
        change, need_mar = node.mobile.apply(mau)
        if need_mar:
            node.mobile_wanted = max(node.mobile_wanted, mau.mobile_seq)
            self.request_mobile(node, now)
        elif change is not None:
            self._report_keys(mau.id)

    def _request_ls(self, node: _Node, now: float) -> None:
        if self._unicast(node.id, M.LinkStateRequest(self.id, self.area), P.router_address(node.id, self.area)):
            node.ls_asked = now

    def request_mobile(self, node: _Node, now: float) -> None:
        """Ask ``node`` for its mobile addresses (MAR)."""
        mar = M.MobileAddressRequest(self.id, node.mobile.mobile_seq, self.area)
        if self._unicast(node.id, mar, P.router_ma_address(node.id, self.area)):
            node.mar_asked = now

    def _retry_requests(self, now: float) -> None:
        retry = REQUEST_RETRY_TICKS * self.hello_interval
        for node in self._nodes.values():
            if node.id not in self._routes.cost:
                continue
            if node.ls_wanted > node.ls_seq and now - node.ls_asked >= retry:
                self._request_ls(node, now)
            if node.mobile_wanted > node.mobile.mobile_seq and now - node.mar_asked >= retry:
                self.request_mobile(node, now)

    def _age_nodes(self, now: float) -> None:
        referenced = set(self._peers)
        for node in self._nodes.values():
            if node.peers:
                referenced.update(node.peers)
        for rid, node in list(self._nodes.items()):
            if node.peers is not None and now - node.last_ra > self.remote_ls_max_age:
                log.info("mesh: link state of %s expired (no RA for %.0f s)", rid, self.remote_ls_max_age)
                node.peers = None
                node.ls_seq = 0
                node.ls_wanted = 0
                self._dirty = True
            elif (node.peers is None and rid not in referenced and rid not in self._routes.cost
                  and now - node.last_seen > NODE_FORGET_TICKS * self.hello_interval
                  and not any(c.peer_id == rid for c in self._conns.values())):
                del self._nodes[rid]

    # -- IdentityHost: what self.identity calls back (with node_record, request_mobile and
    # update_neighbours above) ------------------------------------------------------------------

    def connections(self) -> Iterable[_Conn]:
        return self._conns.values()

    def known_node(self, rid: str) -> _Node | None:
        return self._nodes.get(rid)

    def known_nodes(self) -> Iterable[_Node]:
        return self._nodes.values()

    def next_hop(self, rid: str) -> str | None:
        return self._routes.next_hop.get(rid)

    def neighbour_conn(self, rid: str) -> object | None:
        return self._neighbours.get(rid)

    def reachable(self, rid: str) -> bool:
        return rid in self._routes.cost

    def request_link_state(self, node: _Node, now: float) -> None:
        self._request_ls(node, now)

    def topology_changed(self) -> None:
        self._dirty = True

    # -- routes and reports -----------------------------------------------------------------------

    def _settle(self, now: float) -> None:
        """Recompute routes if anything changed and bring the listener up to date."""
        if not self._dirty:
            return
        self._dirty = False
        states = {self.id: dict(self._peers)}
        for rid, node in self._nodes.items():
            if node.peers is not None:
                states[rid] = node.peers
        old = self._routes
        new = self._routes = compute_routes(self.id, states)
        next_hops = {dest: self._neighbours[hop] for dest, hop in new.next_hop.items()
                     if hop in self._neighbours}
        lost = sorted(set(old.cost) - set(new.cost))
        gained = sorted(set(new.cost) - set(old.cost))
        for rid in lost:
            for key in sorted(self._reported_keys.pop(rid, {})):
                self.listener.remote_address_removed(rid, key)
            log.info("mesh: router %s unreachable", rid)
            self.listener.router_lost(rid)
        report = (next_hops, dict(new.cost), {d: set(v) for d, v in new.valid_origins.items()}, new.radius)
        if report != self._reported_routes:
            self._reported_routes = report
            self.listener.routes_changed(*report)
        for rid in set(new.cost) | set(old.cost):
            if new.next_hop.get(rid) != old.next_hop.get(rid) or new.cost.get(rid) != old.cost.get(rid):
                self._last_change = now
                if rid in self._nodes:
                    self._nodes[rid].last_topo_change = now
        for rid in sorted(new.cost):
            self._report_keys(rid)
        if gained:
            log.info("mesh: routers reachable: %s", ", ".join(gained))
            self._send_ra(now)                        # let newcomers learn my sequence numbers now
            for rid in gained:
                node = self._nodes.get(rid)
                if node is not None:
                    if node.ls_wanted > node.ls_seq:
                        self._request_ls(node, now)
                    if node.mobile_wanted > node.mobile.mobile_seq:
                        self.request_mobile(node, now)

    def _report_keys(self, rid: str) -> None:
        """Tell the listener the difference between ``rid``'s known keys and what it was told."""
        if rid not in self._routes.cost:
            return                                    # held back until the router is reachable
        node = self._nodes.get(rid)
        have = node.mobile.keys if node else {}
        told = self._reported_keys.setdefault(rid, {})
        for key in sorted(set(told) - set(have)):
            del told[key]
            self.listener.remote_address_removed(rid, key)
        for key in sorted(set(have) - set(told)):
            told[key] = have[key]
            self.listener.remote_address_added(rid, key, have[key])
