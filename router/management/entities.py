"""Operational entity types read from the live router: router, connection, router.link, router.address,
router.node, allocator (Qpid Dispatch 1.19 attribute names; Qpid Dispatch 1.19 tools/qdstat, qdrouter.json).

Everything is read at the moment of the request from the router's own records (``Router.connections``,
each connection's ``links``, the control links and link-routed pairs through their owners' ``management_rows``
(router/interrouter.py, router/linkroutes.py), ``Router.addresses``, the link routes and auto-links of
``Router.control``)
and the forwarder's counters (delayed, stuck and settle-rate figures: router/forwarder.py, docs/management.md);
attributes this router does not track (ingress histograms, zero-credit time, fallback) are 0 or null rather
than invented. Closing a connection or a link goes through ``Router.control``.
"""

from __future__ import annotations

import os
import time

from wire import raw
from wire.management import bad_request

from router.core import HEARTBEAT_ADDRESS, VERSION
from router.management.base import EntityAdapter, require_str
from router.edgetracking import TRACKING_KEY
from router.management.lookupserver import LOOKUP_ADDRESS

# Link counters a router-wide total is summed from (link attribute -> router attribute).
LINK_TOTALS = {
    "presettled": "presettledDeliveries",
    "dropped_presettled": "droppedPresettledDeliveries",
    "accepted": "acceptedDeliveries",
    "rejected": "rejectedDeliveries",
    "released": "releasedDeliveries",
    "modified": "modifiedDeliveries",
}


def _links(router):
    """Every message-routed link of every connection, in connection then attach order."""
    for rc in sorted(router.connections, key=lambda c: c.engine.id):
        for rl in sorted(rc.links.values(), key=lambda link: link.id):
            yield rc, rl


def _other_link_rows(router) -> list[dict]:
    """router.link attributes of the links outside the forwarder's link tables: the inter-router control
    links (router/interrouter.py) and both sides of every link-routed pair (router/linkroutes.py)."""
    return router.inter_router.management_rows(router.connections) + router.link_router.management_rows()


def _seconds(now: float, then) -> int | None:
    return None if then is None else max(0, int(now - then))


def vm_size() -> int | None:
    """The process's virtual size in bytes (qdstat's VmSize). /proc is kernel memory, not disk: the
    read does not block the event loop."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class RouterEntity(EntityAdapter):
    short = "router"
    description = "The router itself: identity, mode and router-wide counters."
    attributes = (
        "name", "identity", "type", "id", "mode", "area", "version", "addrCount", "linkCount", "nodeCount",
        "linkRouteCount", "autoLinkCount", "connectionCount", "presettledDeliveries",
        "droppedPresettledDeliveries", "acceptedDeliveries", "rejectedDeliveries", "releasedDeliveries",
        "modifiedDeliveries", "deliveriesDelayed1Sec", "deliveriesDelayed10Sec", "deliveriesStuck",
        "deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "deliveriesIngressRouteContainer",
        "deliveriesEgressRouteContainer", "deliveriesRedirectedToFallback", "linksBlocked", "uptimeSeconds",
        "memoryUsage", "workerThreads", "defaultDistribution", "metadata",
        # tdrouterd's own: large messages streamed through (router/streams.py)
        "streamingDeliveries", "streamedDeliveries", "streamsAborted", "streamsHeldOff",
    )

    def rows(self) -> list[dict]:
        r = self.router
        agent = self.agent
        cfg = agent.config.router if agent.config is not None else None
        totals = dict.fromkeys(LINK_TOTALS.values(), 0)
        # Counters of links that already closed (management names), so that totals never fall back.
        closed = r.closed_link_totals
        for k in totals:
            totals[k] += closed.get(k, 0)
        ingress, egress = closed.get("deliveriesIngress", 0), closed.get("deliveriesEgress", 0)
        ingress_rc = closed.get("deliveriesIngressRouteContainer", 0)
        egress_rc = closed.get("deliveriesEgressRouteContainer", 0)
        links = len(_other_link_rows(r))   # Dispatch's linkCount counts router-control and link-routed links too
        for rc, rl in _links(r):
            links += 1
            for attr, key in LINK_TOTALS.items():
                totals[key] += getattr(rl, attr)
            if rl.incoming:
                ingress += rl.delivery_count
                if rc.role == "route-container":
                    ingress_rc += rl.delivery_count
            else:
                egress += rl.delivery_count
                if rc.role == "route-container":
                    egress_rc += rl.delivery_count
        totals["droppedPresettledDeliveries"] += r.dropped_presettled
        # Link-routed deliveries (router/linkroutes.py) from and to the routes' containers.
        ingress_rc += r.link_router.deliveries_from_container
        egress_rc += r.link_router.deliveries_to_container
        routed = r.link_router.streams
        nodes = [n for n in r.mesh_nodes() if n["id"] != r.id]
        mode = (cfg.get("mode") if cfg is not None else None) or r.mode
        values = {
            "id": r.id, "mode": mode, "area": "0", "version": VERSION,
            "addrCount": len(r.addresses), "linkCount": links, "nodeCount": len(nodes),
            "linkRouteCount": len(self.control.link_routes()), "autoLinkCount": len(self.control.auto_links()),
            "connectionCount": len(r.connections),
            "deliveriesDelayed1Sec": r.forwarder.delayed_1s, "deliveriesDelayed10Sec": r.forwarder.delayed_10s,
            "deliveriesStuck": r.forwarder.deliveries_stuck,
            "deliveriesIngress": ingress, "deliveriesEgress": egress,
            "deliveriesTransit": r.deliveries_transit,
            "deliveriesIngressRouteContainer": ingress_rc, "deliveriesEgressRouteContainer": egress_rc,
            "deliveriesRedirectedToFallback": 0,
            "linksBlocked": r.forwarder.links_blocked(r.connections),
            "uptimeSeconds": _seconds(agent.clock(), agent.started_at),
            "memoryUsage": vm_size(), "workerThreads": 1,
            "defaultDistribution": r.address_config.default_distribution,
            "metadata": cfg.get("metadata") if cfg is not None else None,
            # Message-routed (router/streams.py) and link-routed (router/routedstreams.py) streams together.
            "streamingDeliveries": len(r.streams) + len(routed.by_delivery),
            "streamedDeliveries": r.streams.started + routed.started,
            "streamsAborted": r.streams.aborted + routed.aborted,
            "streamsHeldOff": len(r.streams.held) + len(routed.held),
            **totals,
        }
        return [self.row(r.id, "1", values)]

    def untyped_rows(self) -> list[dict]:
        """Dispatch 1.19 answers a typed QUERY of the router from its core (src/router_core/agent_router.c:
        name = the router id, identity "1") and an untyped one from its Python agent, where the router
        entity is named as every entity there without a configured name: ``router/<id>`` for both name and
        identity (python/qpid_dispatch_internal/management/agent.py, EntityAdapter.validate)."""
        out = []
        for row in self.rows():
            name = f"router/{row['id']}"
            out.append(dict(row, name=name, identity=name))
        return out


def sasl_of(engine) -> tuple[str | None, str | None]:
    """(mechanism, user) the peer authenticated with; (None, None) when it skipped SASL. Our SASL layer
    (wire/saslserver.py) answers first; proton's SASL when it ran instead."""
    mech = getattr(engine, "sasl_mechanism", None)
    if mech:
        user = getattr(engine, "user", None)
        return mech, (user or ("anonymous" if mech == "ANONYMOUS" else None))
    try:
        sasl = engine.transport.sasl()
        mech = sasl.mech or None
        return mech, (sasl.user or ("anonymous" if mech == "ANONYMOUS" else None))
    except Exception:  # proton raises when there is no SASL layer
        return None, None


class ConnectionEntity(EntityAdapter):
    short = "connection"
    description = "One open AMQP connection."
    attributes = (
        "name", "identity", "type", "adminStatus", "operStatus", "protocol", "container", "opened", "host",
        "dir", "role", "isAuthenticated", "isEncrypted", "enableProtocolTrace", "sasl", "user", "ssl",
        "sslProto", "sslCipher", "sslSsf", "tenant", "uptimeSeconds", "properties", "lastDlvSeconds",
        "active",
    )
    operations = ("READ", "UPDATE")

    def rows(self) -> list[dict]:
        now = self.agent.clock()
        out = []
        for rc in sorted(self.router.connections, key=lambda c: c.engine.id):
            e = rc.engine
            mech, user = sasl_of(e)
            tls = getattr(e, "tls", None)  # wire.tls.TlsPeerInfo, None on plaintext
            # Dispatch's operStatus is "up" or "closing": a connection being closed (refused by policy,
            # by the router's mode, or deleted) is still listed until its close completes; "opened" is
            # false until the peer's OPEN has arrived (after SASL).
            values = {
                "adminStatus": "enabled", "operStatus": "closing" if e.closing else "up", "protocol": "amqp",
                "container": e.remote_container or "", "opened": rc.remote_open, "host": e.remote_host,
                "dir": "in" if e.server else "out", "role": rc.role or "normal",
                "isAuthenticated": mech is not None, "isEncrypted": tls is not None, "enableProtocolTrace": False,
                "sasl": mech, "user": user or "anonymous", "ssl": tls is not None,
                "sslProto": tls.protocol if tls else None, "sslCipher": tls.cipher if tls else None,
                "sslSsf": tls.bits if tls else 0,
                "uptimeSeconds": _seconds(now, rc.opened_at), "properties": _remote_properties(e),
                "lastDlvSeconds": _seconds(now, rc.last_delivery_at), "active": True,
            }
            out.append(self.row(f"connection/{e.remote_host}", str(e.id), values))
        return out

    def update(self, row: dict, attrs: dict) -> dict:
        """adminStatus: deleted closes the connection (Dispatch's way to kick a client)."""
        status = require_str(attrs, "adminStatus", ("enabled", "deleted"))
        unknown = set(attrs) - {"adminStatus"}
        if unknown:
            raise bad_request(f"attribute '{sorted(unknown)[0]}' cannot be updated on a connection")
        if status == "deleted":
            rc = self.control.find_connection(row["identity"])
            if rc is not None:
                self.control.close_connection(rc, "closed by management")
            row = dict(row, adminStatus="deleted", operStatus="down")
        return row


def _remote_properties(engine) -> dict:
    try:
        props = engine.connection.remote_properties
    except Exception:
        return {}
    return {str(k): v for k, v in (props or {}).items() if isinstance(v, (str, int, float, bool))}


def link_type(rc, rl=None) -> str:
    role = rc.role or "normal"
    if role == "inter-router" or (rl is not None and rl.inter_router):
        return "inter-router"
    if role == "edge":
        return "edge-downlink"
    return "endpoint"


# Qpid Dispatch 1.19 include/qpid/dispatch/amqp.h: QDR_DEFAULT_PRIORITY (every endpoint link) and
# QDR_N_PRIORITIES (inter-router data links per connection, one per priority 0..9).
DEFAULT_LINK_PRIORITY = 4
DATA_LINK_COUNT = 10

#: router.link values of a link that counts nothing: what the control and link-routed rows leave out.
_LINK_ZEROS = {
    "adminStatus": "enabled", "operStatus": "up", "owningAddr": None, "peer": None, "undeliveredCount": 0,
    "unsettledCount": 0, "deliveryCount": 0, "presettledCount": 0, "droppedPresettledCount": 0,
    "acceptedCount": 0, "rejectedCount": 0, "releasedCount": 0, "modifiedCount": 0, "deliveriesDelayed1Sec": 0,
    "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0, "creditAvailable": 0, "zeroCreditSeconds": 0,
    "settleRate": 0, "priority": DEFAULT_LINK_PRIORITY,
}


def data_link_priorities(router) -> dict:
    """The priority of each inter-router data link, as Dispatch reports ``qdr_link_t.priority``
    (src/router_core/connections.c, qdr_attach_link_data_CT): an outgoing data link has the priority the
    router sends that priority's messages on (``MeshConnection.data_links``); an incoming one, Dispatch's
    rule, its place among the connection's incoming data links in attach order (the first ten are 0..9)."""
    out = {}
    for rc in router.connections:
        mesh = rc.mesh
        if mesh is None:
            continue
        for prio, rl in mesh.data_links.items():
            out[rl] = prio
        incoming = sorted((rl for rl in rc.links.values() if rl.inter_router and rl.incoming), key=lambda rl: rl.id)
        for prio, rl in enumerate(incoming[:DATA_LINK_COUNT]):
            out[rl] = prio
    return out


def _kind(row: dict) -> str:
    return "router-control link" if row.get("linkType") == "router-control" else "link-routed link"


class LinkEntity(EntityAdapter):
    short = "router.link"
    description = ("One link attached to the router: message-routed (endpoint, inter-router data, edge), "
                   "router-control, or one side of a link-routed pair.")
    attributes = (
        "adminStatus", "operStatus", "linkName", "linkType", "linkDir", "owningAddr", "capacity", "peer",
        "undeliveredCount", "unsettledCount", "deliveryCount", "presettledCount", "droppedPresettledCount",
        "acceptedCount", "rejectedCount", "releasedCount", "modifiedCount", "deliveriesDelayed1Sec",
        "deliveriesDelayed10Sec", "deliveriesStuck", "creditAvailable", "zeroCreditSeconds", "settleRate",
        "ingressHistogram", "priority", "connectionId", "name", "identity", "type",
    )
    operations = ("UPDATE", "READ")

    def rows(self) -> list[dict]:
        out = [self.row(values["linkName"], values["identity"], dict(_LINK_ZEROS, **values))
               for values in _other_link_rows(self.router)]
        priorities = data_link_priorities(self.router)
        forwarder = self.router.forwarder
        for rc, rl in _links(self.router):
            addr = rl.address
            try:
                credit = raw.link_credit(rl.ptr)
            except Exception:  # a link being torn down may already be freed by the engine
                credit = 0
            values = {
                "adminStatus": "enabled", "operStatus": "up", "linkName": rl.name, "linkType": link_type(rc, rl),
                "linkDir": "in" if rl.incoming else "out",
                # Dispatch's data links are anonymous: no owning address (qdstat -l shows no class or addr).
                "owningAddr": addr.key if addr is not None and not rl.inter_router else None,
                "capacity": rl.capacity, "peer": None,
                "undeliveredCount": len(rl.undelivered),
                "unsettledCount": rl.outstanding if rl.incoming else len(rl.unsettled),
                "deliveryCount": rl.delivery_count, "presettledCount": rl.presettled,
                "droppedPresettledCount": rl.dropped_presettled, "acceptedCount": rl.accepted,
                "rejectedCount": rl.rejected, "releasedCount": rl.released, "modifiedCount": rl.modified,
                "deliveriesDelayed1Sec": rl.delayed_1s, "deliveriesDelayed10Sec": rl.delayed_10s,
                "deliveriesStuck": rl.stuck, "creditAvailable": credit,
                "zeroCreditSeconds": 0 if rl.incoming else forwarder.zero_credit_seconds(rl),
                "settleRate": forwarder.settle_rate(rl),
                "priority": priorities.get(rl, DEFAULT_LINK_PRIORITY), "connectionId": str(rc.engine.id),
            }
            out.append(self.row(rl.name, str(rl.id), values))
        out.sort(key=lambda row: (int(row["connectionId"]), int(row["identity"])))
        return out

    def update(self, row: dict, attrs: dict) -> dict:
        """adminStatus disabled/deleted detaches the link (its deliveries go back to their producers)."""
        unknown = set(attrs) - {"adminStatus"}
        if unknown:
            raise bad_request(f"attribute '{sorted(unknown)[0]}' cannot be updated on a link")
        status = require_str(attrs, "adminStatus", ("enabled", "disabled", "deleted"))
        if status is None:
            raise bad_request("UPDATE of a link needs attribute 'adminStatus'")
        if status == "enabled":
            return row
        rl = self.control.find_link(row["identity"])
        if rl is None:
            if row.get("linkType") == "router-control" or row.get("peer") is not None:
                # Only message-routed links are the forwarder's to detach; saying "done" would be a lie.
                raise bad_request(f"link {row['identity']} is a {_kind(row)}: management cannot detach it; "
                                  f"close its connection (connection {row['connectionId']}) instead")
            return row   # it went away meanwhile
        self.control.close_link(rl, f"link {status} by management")
        return dict(row, adminStatus=status, operStatus="down")


#: Dispatch lists its core's addresses in creation order: the router's own nodes first (qdstat --limit 2 -a
#: shows M0$management and M0_$qd.edge_heartbeat), the management agent's local addresses after them. qdstat
#: sorts by text only (a stable sort), so this order also decides between addresses of the same text.
_OWN_NODES_FIRST = ("M0$management", "M0" + HEARTBEAT_ADDRESS, "M0_$qd.addr_lookup", TRACKING_KEY,
                    "L$management", "L$_management_internal")
_CLASS_ORDER = {"M": 0, "L": 1, "T": 2}   # local router-control addresses come before topological ones


def _dispatch_order(key: str) -> tuple:
    if key in _OWN_NODES_FIRST:
        return 0, _OWN_NODES_FIRST.index(key)
    text = key[2:] if key[:1] == "M" else key[1:]
    return 1, text, _CLASS_ORDER.get(key[:1], 3), key


#: router.address values of a row that counts nothing (the routing protocol's rows fill in the rest).
_ADDRESS_ZEROS = {"priority": -1, "containerCount": 0, "remoteHostRouters": [], "deliveriesToContainer": 0,
                  "deliveriesFromContainer": 0, "deliveriesRedirectedToFallback": 0, "transitOutstanding": None,
                  "trackedDeliveries": 0, "deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0}

#: Routing keys of the router's core endpoints (not in-process subscribers in Dispatch's terms).
CORE_ENDPOINT_KEYS = frozenset({"M0" + HEARTBEAT_ADDRESS, "M0" + LOOKUP_ADDRESS, TRACKING_KEY})


class AddressEntity(EntityAdapter):
    short = "router.address"
    description = ("One routing-table entry (key as Dispatch's: M0addr, Lname, Rrouter, C/D prefix and E/F "
                   "pattern link routes).")
    attributes = (
        "name", "identity", "type", "key", "distribution", "priority", "inProcess", "subscriberCount",
        "remoteCount", "containerCount", "remoteHostRouters", "deliveriesIngress", "deliveriesEgress",
        "deliveriesTransit", "deliveriesToContainer", "deliveriesFromContainer",
        "deliveriesRedirectedToFallback", "transitOutstanding", "trackedDeliveries",
        "deliveriesIngressRouteContainer", "deliveriesEgressRouteContainer",
    )

    def rows(self) -> list[dict]:
        r = self.router
        out = []
        protocol = {}
        if r.mesh is not None:   # an interior: the routing protocol's own addresses (router/mesh/counters.py)
            reachable = sum(1 for node in r.mesh_nodes() if node.get("id") != r.id)
            protocol = {row["key"]: row for row in r.mesh.address_counters.rows(reachable)}
        for key in sorted([*r.addresses, *protocol], key=_dispatch_order):
            if key in protocol:
                values = dict(_ADDRESS_ZEROS, inProcess=1, **protocol[key])
                out.append(self.row(key, key, values))
                continue
            addr = r.addresses[key]
            # Dispatch counts in-process subscribers (its Python agent); a core endpoint such as the
            # heartbeat server is none (src/router_core/agent_address.c inProcess).
            in_process = 1 if addr.handler is not None and key not in CORE_ENDPOINT_KEYS else 0
            remote = sorted(addr.rnodes)
            values = {
                "key": key, "distribution": addr.distribution, "priority": -1, "inProcess": in_process,
                "subscriberCount": len(addr.rlinks), "remoteCount": len(remote), "containerCount": 0,
                "remoteHostRouters": list(remote), "deliveriesIngress": addr.deliveries_ingress,
                "deliveriesEgress": addr.deliveries_egress,
                "deliveriesTransit": addr.deliveries_transit,
                "deliveriesToContainer": addr.deliveries_to_container,
                "deliveriesFromContainer": addr.deliveries_from_container,
                "deliveriesRedirectedToFallback": 0, "transitOutstanding": None, "trackedDeliveries": 0,
                "deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0,
            }
            out.append(self.row(key, key, values))
        for route in self.control.link_routes():
            key = route.key  # Dispatch's classes: C/D for a prefix route in/out, E/F for a pattern route
            containers = self.control.route_containers(route)
            values = {"key": key, "distribution": "linkBalanced", "priority": -1, "inProcess": 0,
                      "subscriberCount": 0, "remoteCount": 0, "containerCount": containers,
                      "remoteHostRouters": [], "deliveriesIngress": 0, "deliveriesEgress": 0,
                      "deliveriesTransit": 0, "deliveriesToContainer": 0, "deliveriesFromContainer": 0,
                      "deliveriesRedirectedToFallback": 0, "trackedDeliveries": 0}
            out.append(self.row(key, key, values))
        return out


class NodeEntity(EntityAdapter):
    short = "router.node"
    description = "One router of the mesh (empty on a standalone router)."
    attributes = ("id", "protocolVersion", "instance", "linkState", "nextHop", "validOrigins", "address",
                  "routerLink", "cost", "lastTopoChange", "index", "name", "identity", "type")

    def rows(self) -> list[dict]:
        out = []
        own = self.router.id
        for index, node in enumerate(sorted(self.router.mesh_nodes(), key=lambda n: str(n["id"]))):
            values = {k: node.get(k) for k in self.attributes if k in node}
            if node.get("id") == own:
                # Dispatch shows the router itself with next hop "(self)" and no link or cost.
                values.update(nextHop="(self)", routerLink=None, cost=None)
            values["lastTopoChange"] = self._epoch(node.get("lastTopoChange"))
            values["routerLink"] = self._link_index(values.get("routerLink"))
            values = {k: _plain(v) for k, v in values.items()}
            values.setdefault("address", f"amqp:/_topo/0/{node.get('id')}")
            values.setdefault("index", index)
            name = f"router.node/{node.get('id')}"
            out.append(self.row(name, name, values))
        return out


    def _link_index(self, link):
        """routerLink as Dispatch shows it: the index of the inter-router connection (0 for the first);
        the mesh may hand over the connection record itself."""
        if link is None or isinstance(link, int):
            return link
        mesh_conns = sorted((rc for rc in self.router.connections if rc.mesh is not None),
                            key=lambda rc: rc.engine.id)
        for index, rc in enumerate(mesh_conns):
            if rc is link:
                return index
        return None

    def _epoch(self, when):
        """lastTopoChange as seconds since the epoch (Dispatch's form); the mesh may keep it on the
        router's monotonic clock, which is converted through the agent's clock."""
        if when is None:
            return None
        if when < EPOCH_THRESHOLD:
            when = time.time() - (self.agent.clock() - when)
        return int(when)


def _plain(value):
    """A value the AMQP encoder takes: primitives and lists/maps of them; anything else as its str()."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


# Monotonic clocks count from boot (or Trio's random offset): anything below this is not an epoch time.
EPOCH_THRESHOLD = 1_000_000_000


class AllocatorEntity(EntityAdapter):
    """``qdstat -m``'s memory pools, honestly: Dispatch keeps per-type free lists (src/alloc_pool.c); this
    router has none, so each row is one of the router's own record types with its instance size in bytes
    (``__basicsize__``: every one has ``__slots__``) and how many are alive now (``totalAllocFromHeap`` =
    ``heldByThreads``). No batches are ever moved between threads (one thread), so the batch and rebalance
    columns are 0. Rows are named as Dispatch names them: ``allocator/<type>`` (python/qpid_dispatch_internal/
    management/agent.py, AllocatorEntity)."""

    short = "allocator"
    description = "The router's record types: instance size and how many are alive."
    attributes = ("name", "identity", "type", "typeName", "typeSize", "transferBatchSize", "localFreeListMax",
                  "globalFreeListMax", "totalAllocFromHeap", "totalFreeToHeap", "heldByThreads",
                  "batchesRebalancedToThreads", "batchesRebalancedToGlobal")
    types = {a: "integer" for a in attributes[4:]}

    def live_counts(self) -> list[tuple[type, int]]:
        """(record type, live instances) for each of the router's per-connection, per-link, per-address
        and per-message records."""
        from router.addresses import Address
        from router.links import InDelivery, RouterConnection, RouterLink

        r = self.router
        links = [rl for rc in r.connections for rl in rc.links.values()]
        in_flight = set()
        for rl in links:
            in_flight.update(map(id, rl.undelivered))
            in_flight.update(map(id, rl.unsettled.values()))
        return [(Address, len(r.addresses)), (InDelivery, len(in_flight)), (RouterConnection, len(r.connections)),
                (RouterLink, len(links))]

    def rows(self) -> list[dict]:
        out = []
        for cls, live in self.live_counts():
            values = {"typeName": cls.__name__, "typeSize": cls.__basicsize__, "transferBatchSize": 0,
                      "localFreeListMax": 0, "globalFreeListMax": 0, "totalAllocFromHeap": live,
                      "totalFreeToHeap": 0, "heldByThreads": live, "batchesRebalancedToThreads": 0,
                      "batchesRebalancedToGlobal": 0}
            name = f"allocator/{cls.__name__}"
            out.append(self.row(name, name, values))
        return out


def operational_adapters(agent) -> list[EntityAdapter]:
    return [cls(agent) for cls in (RouterEntity, ConnectionEntity, LinkEntity, AddressEntity, NodeEntity,
                                   AllocatorEntity, ConnectionLinkRouteEntity)]


class ConnectionLinkRouteEntity(EntityAdapter):
    """Dispatch's connection-scoped link routes (``router.connection.linkRoute``, created on a connection by
    its own client). tdrouterd has none: the type answers QUERY with no rows, and CREATE is refused."""

    short = "router.connection.linkRoute"
    configuration = True
    operations = ("CREATE", "DELETE", "READ")
    description = "Connection-scoped link routes (none: tdrouterd does not create them)."
    attributes = ("name", "identity", "type", "pattern", "direction", "containerId")

    def create(self, attrs: dict) -> dict:
        from wire.management import ManagementError, NOT_IMPLEMENTED

        raise ManagementError(NOT_IMPLEMENTED, "connection-scoped link routes are not supported by tdrouterd; "
                                               "configure a linkRoute instead")
