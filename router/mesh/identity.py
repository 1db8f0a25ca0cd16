"""Router ids and instances: duplicate router ids, restarts, and refusing a router that claims an id in use.

Dispatch (``python/qpid_dispatch_internal/router/hello.py``) only logs a HELLO carrying its own id with
another ``instance``; a router that merely *reaches* the id elsewhere takes a newcomer with another
instance for a restart (``node.py`` ``update_instance``) and wipes the real router's state, which splits the
mesh. Here the router a newcomer connects to keeps the router it already has, first come, first served:

* an OPEN whose container id is this router's own id is refused at once (:meth:`RouterIdentity.check_open`;
  Dispatch and this router use the router id as container id);
* a HELLO claiming this router's id, or the id of a neighbour that HELLOs with another instance on another
  connection, is refused at once; one claiming a router that is reachable through another connection with
  another instance is refused if the conflict is still there at its next HELLO (a restarted router's own
  RA, flooded through its other connections, usually overtakes that HELLO and removes the conflict).

:class:`RouterIdentity` is a part of :class:`router.mesh.engine.RoutingEngine` (``engine.identity``), which
keeps ``take_refusals``, ``check_open`` and ``peer_refused`` as delegations for the core. The part owns the
refusals and the CRITICAL rate limit; what it needs of the engine's neighbour and router tables it asks
through :class:`IdentityHost`.

Refused connections are listed by :meth:`RouterIdentity.take_refusals`: the core closes each with
``protocol.DUPLICATE_ID_CONDITION`` and a description starting ``protocol.DUPLICATE_ID_REASON``, which the
refused router recognises (:meth:`RouterIdentity.peer_refused`). Nothing arriving on a refused connection is
processed, so the impostor's messages never reach the mesh.

Should two routers with one id both get in (the newcomer joined through routers that did not know the id
yet), a router whose live neighbour has the id drops floods claiming it with another instance and does not
pass them on, so each side of the mesh keeps its own router. An instance that is not the recorded one is
remembered as a rival; once the recorded instance has been quiet for ``hello_max_age`` (and no neighbour
HELLOs with it), a link-state request goes to the id, and the answer, from whichever router still has the
id, replaces the record. So the mesh heals within about ``hello_max_age`` of one of them leaving. Every case
is logged CRITICAL, rate-limited. Two routers started with one id in the same second share ``instance`` and
cannot be told apart this way.
"""

from __future__ import annotations

import logging
from typing import Iterable, Protocol

from router.mesh import messages as M
from router.mesh import protocol as P
from router.mesh.records import Conn as _Conn
from router.mesh.records import Node as _Node
from router.mesh.records import conn_name as _conn_name

__all__ = ["DUPLICATE_CONFIRM_INTERVALS", "DUPLICATE_LOG_INTERVAL", "IdentityHost", "RouterIdentity"]

log = logging.getLogger("router.mesh")

#: A duplicate router id is logged CRITICAL at most this often (seconds): every HELLO, RA and reconnect
#: of the impostor would trigger it, and one line per interval is enough to be noticed.
DUPLICATE_LOG_INTERVAL = 10.0
#: A HELLO claiming a router reachable through another connection with another instance is refused only
#: if the conflict is still there this many hello intervals after the first one (its next HELLO).
DUPLICATE_CONFIRM_INTERVALS = 0.5
#: ``Node.rival_instance`` after the neighbour HELLOing with the id went away: no instance heard yet.
UNKNOWN_RIVAL = -1


class IdentityHost(Protocol):
    """What :class:`RouterIdentity` asks of the routing engine it is part of
    (:class:`router.mesh.engine.RoutingEngine`)."""

    def connections(self) -> Iterable[_Conn]:
        """Every inter-router connection with attached control links."""

    def known_node(self, rid: str) -> _Node | None:
        """The record of router ``rid``, if there is one."""

    def node_record(self, rid: str, now: float) -> _Node | None:
        """The record of router ``rid``, created on first sight; None when the table is full."""

    def known_nodes(self) -> Iterable[_Node]:
        """Every router record."""

    def next_hop(self, rid: str) -> str | None:
        """The neighbour through which ``rid`` is reached, None if it is unreachable."""

    def neighbour_conn(self, rid: str) -> object | None:
        """The connection key of neighbour ``rid`` (two-way HELLO), None if it is not a neighbour."""

    def reachable(self, rid: str) -> bool:
        """``rid`` has a route."""

    def request_link_state(self, node: _Node, now: float) -> None:
        """Send ``node`` a link-state request (LSR)."""

    def request_mobile(self, node: _Node, now: float) -> None:
        """Send ``node`` a mobile-address request (MAR)."""

    def update_neighbours(self, now: float) -> None:
        """Recompute the neighbours and the link state (a connection was refused)."""

    def topology_changed(self) -> None:
        """Routes must be recomputed at the next settle (a router restarted: its state is void)."""


class RouterIdentity:
    """The part of a :class:`router.mesh.engine.RoutingEngine` that keeps one router per id (see the module
    docstring): ``router_id`` and ``instance`` are this router's; the intervals are the engine's timers."""

    def __init__(self, host: IdentityHost, router_id: str, instance: int, *, hello_interval: float,
                 hello_max_age: float, remote_ls_max_age: float) -> None:
        self.host = host
        self.id = router_id
        self.instance = instance
        self.hello_interval = hello_interval
        self.hello_max_age = hello_max_age
        self.remote_ls_max_age = remote_ls_max_age
        self._refusals: list[tuple[object, str]] = []
        self._last_dup_log = float("-inf")

    # -- what the core calls (through the engine's delegations) -------------------------------------

    def take_refusals(self) -> list[tuple[object, str]]:
        """Connections to close for a duplicate router id: ``(conn_key, description)``. The core closes
        each with ``protocol.DUPLICATE_ID_CONDITION`` and this description (which names the id)."""
        out, self._refusals = self._refusals, []
        return out

    def check_open(self, container_id: str | None, conn_name: str, now: float) -> str | None:
        """An inter-router connection's OPEN arrived. Returns why it must be refused (the description
        for the close), or None: a peer whose container id is this router's own id claims the id. Other
        conflicts need the HELLO's instance (a second connection from a known router is legitimate)."""
        if not container_id or container_id != self.id:
            return None
        self.log_duplicate(f"OPEN on connection {conn_name}, refused", None, now)
        return f"{P.DUPLICATE_ID_REASON} {self.id!r}: it is the id of the router {self.id!r} you connected to"

    def peer_refused(self, conn_name: str, description: str, now: float) -> None:
        """A neighbour closed an inter-router connection of this router for a duplicate router id."""
        if now - self._last_dup_log >= DUPLICATE_LOG_INTERVAL:
            self._last_dup_log = now
            log.critical("mesh: %s: this router (id %r, instance %s) was refused by the router on connection "
                         "%s: %s", P.DUPLICATE_ID_REASON, self.id, self.instance, conn_name, description)

    # -- what the engine calls -------------------------------------------------------------------

    def admit_hello(self, conn: _Conn, hello: M.Hello, now: float) -> bool:
        """False if ``hello`` must be ignored: its id is in use (the connection is refused now, or at the
        next HELLO if the conflict remains) or belongs to an ignored instance."""
        conflict, certain = self._hello_conflict(conn, hello, now)
        if conflict is not None:
            if conn.conflict_since is None:
                conn.conflict_since = now
            if certain or now - conn.conflict_since >= DUPLICATE_CONFIRM_INTERVALS * self.hello_interval:
                self._refuse(conn, hello, conflict, now)
            return False                              # not a neighbour while in doubt
        conn.conflict_since = None
        return self.check_instance(hello.id, hello.instance, now, direct=True)

    def _hello_conflict(self, conn: _Conn, hello: M.Hello, now: float) -> tuple[str | None, bool]:
        """Why ``hello`` on ``conn`` claims a router id already in use (None if it does not), and whether
        that is certain (own id, or a live neighbour with another instance) or may be a restart whose
        news has not arrived yet (a router reachable through another connection)."""
        rid = hello.id
        if rid == self.id:
            return f"it is the id of the router {rid!r} you connected to", True
        if conn.peer_id == rid and conn.peer_instance == hello.instance and conn.last_hello is not None:
            return None, False                        # an established neighbour carries on
        live = self._live_neighbour(rid, now, besides=conn)
        if live is not None and live.peer_instance != hello.instance:
            return (f"router {rid!r} (instance {live.peer_instance}) is already a neighbour of {self.id!r} "
                    f"on connection {_conn_name(live.key)}", True)
        node = self.host.known_node(rid)
        hop = self.host.next_hop(rid)
        if (node is not None and node.instance is not None and node.instance != hello.instance
                and hop is not None and self.host.neighbour_conn(hop) not in (None, conn.key)):
            return (f"router {rid!r} (instance {node.instance}) is reachable from {self.id!r} through "
                    f"{hop!r}", False)
        return None, False

    def _live_neighbour(self, rid: str, now: float, besides: _Conn | None = None) -> _Conn | None:
        """A connection (not ``besides``) on which ``rid`` HELLOed within helloMaxAge."""
        for c in self.host.connections():
            if (c is not besides and not c.refused and c.peer_id == rid and c.last_hello is not None
                    and now - c.last_hello <= self.hello_max_age):
                return c
        return None

    def _refuse(self, conn: _Conn, hello: M.Hello, conflict: str, now: float) -> None:
        """Close ``conn``: its router claims an id in use (first come, first served)."""
        conn.refused = True
        conn.peer_id = conn.peer_instance = conn.last_hello = None
        conn.seen_me = False
        self._refusals.append((conn.key, f"{P.DUPLICATE_ID_REASON} {hello.id!r}: {conflict}"))
        if hello.id == self.id:
            self.log_duplicate(f"HELLO on connection {_conn_name(conn.key)}, refused", hello.instance, now)
        else:
            self.log_duplicate(f"a router with instance {hello.instance} on connection {_conn_name(conn.key)}: "
                            f"{conflict}; its connection is refused", hello.instance, now, rid=hello.id)
        self.host.update_neighbours(now)

    # -- instances --------------------------------------------------------------------------------

    def log_duplicate(self, what: str, instance, now: float, rid: str | None = None) -> None:
        """Log a duplicate router id (mine, or another router's ``rid``) CRITICAL, rate-limited."""
        if now - self._last_dup_log >= DUPLICATE_LOG_INTERVAL:
            self._last_dup_log = now
            if rid is None:
                log.critical("mesh: duplicate router id: another router uses this router's id %r (%s, "
                             "instance %s, mine %s): router ids must be unique in a mesh",
                             self.id, what, instance, self.instance)
            else:
                log.critical("mesh: duplicate router id %r: %s: router ids must be unique in a mesh",
                             rid, what)

    def check_instance(self, rid: str, instance: int, now: float, *, direct: bool = False) -> bool:
        """Track ``rid``'s boot instance; a new one means it restarted and its state is void. False
        for a message to be ignored (and not passed on): from an older incarnation, or from a second
        router with the id. ``direct``: a HELLO from the neighbour itself (already cleared by
        :meth:`_hello_conflict`), which is authoritative."""
        node = self.host.node_record(rid, now)
        if node is None:
            return False
        if node.instance is None or instance == node.instance:
            node.instance = instance
            node.instance_heard = now
            if node.rival_instance is not None and node.ls_asked > node.rival_heard:
                node.rival_instance = None             # the recorded instance answered the chase
            return True
        if not direct:
            live = self._live_neighbour(rid, now)
            if live is not None and live.peer_instance != instance:
                # my neighbour HELLOs as rid with another instance: this comes from a second router
                node.rival_instance, node.rival_heard = instance, now
                self.log_duplicate(f"instance {instance} heard through the mesh while the neighbour on "
                                f"connection {_conn_name(live.key)} has instance {live.peer_instance}; "
                                f"its messages are dropped here", instance, now, rid=rid)
                return False
        if direct or instance > node.instance:
            log.info("mesh: router %s restarted (instance %s -> %s)", rid, node.instance, instance)
        elif now - node.instance_heard > self.hello_max_age:
            # An older instance back after a newer one went quiet: two routers had the id (the newer
            # one has gone, or is on the far side of the mesh). The one still talking takes the record.
            self.log_duplicate(f"instance {instance} is back after instance {node.instance} went quiet; "
                            f"{rid!r} is instance {instance} again", instance, now, rid=rid)
        else:
            # a late message of an earlier incarnation, or a second router: chased by chase_rivals
            node.rival_instance, node.rival_heard = instance, now
            log.debug("mesh: message of router %s from instance %s (now %s) ignored", rid, instance,
                      node.instance)
            return False
        chased = node.rival_instance is not None
        node.instance = instance
        node.instance_heard = now
        node.rival_instance = None
        node.ls_seq = 0
        node.ls_wanted = 0
        node.peers = None
        node.mobile.reset()
        node.mobile_wanted = 0
        node.ls_asked = node.mar_asked = float("-inf")
        if chased:
            # maybe taken over by the answer to a chase (an LSU, no RA): ask for its addresses once
            self.host.request_mobile(node, now)
        self.host.topology_changed()
        return True

    def neighbour_gone(self, rid: str, now: float) -> None:
        """No neighbour HELLOs as ``rid`` any more. If ``rid`` stays reachable it is the same router through
        another path, or a second router with the id: chase it (an LSR once the recorded instance has been
        quiet for helloMaxAge) so that whichever answers is the one recorded."""
        node = self.host.known_node(rid)
        if node is not None and node.rival_instance is None:
            node.rival_instance, node.rival_heard = UNKNOWN_RIVAL, now

    def chase_rivals(self, now: float) -> None:
        """Routers heard with two instances whose recorded one went quiet: ask for link state, so that
        the router that still has the id answers (its LSU replaces the record). See the module docstring."""
        for node in self.host.known_nodes():
            if node.rival_instance is None:
                continue
            if now - node.rival_heard > self.remote_ls_max_age:
                node.rival_instance = None             # not heard again: a late message after all
            elif (now - node.instance_heard > self.hello_max_age and self.host.reachable(node.id)
                    and self._live_neighbour(node.id, now) is None
                    and now - node.ls_asked >= self.hello_max_age):
                self.host.request_link_state(node, now)
