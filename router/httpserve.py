"""tdrouterd's HTTP listeners: ``listener { http: yes }`` serves the web console, ``/metrics``,
``/healthz`` and management as JSON instead of AMQP on its port (Qpid Dispatch 1.19 ``qdrouter.json``
listener attributes ``http``, ``httpRootDir``, ``healthz``, ``metrics``, ``websockets``; Dispatch serves
its console and, from 1.x, ``/metrics`` and ``/healthz`` the same way, src/http-libwebsockets.c).

The endpoints themselves are wire/httpmgmt.py's (shared with tdbroker); this module is what is the
router's about them (docs/console.md):

* TLS: a listener with an ``sslProfile`` serves HTTPS (and WSS) with the TLS an AMQP listener with that
  profile would have (router/security.py makes the same :class:`wire.tls.ServerTls`): the profile's
  certificate, key, ciphers and protocols; ``requireSsl: yes`` answers plain HTTP with 400, without it
  the port serves both (as Dispatch's AMQP listeners take both).
* login: as on an AMQP listener. With ``authenticatePeer: yes`` a request needs Basic credentials checked
  against the users the router's SASL configuration names (router/security.py); without it, anonymous
  requests are served and credentials, when given, must still be right. On an HTTPS listener
  ``authenticatePeer: yes`` also requires a client certificate signed by the profile's ``caCertFile``,
  as on an AMQP listener, and that certificate logs the request in (the user named as SASL EXTERNAL would
  name it: the subject, or the profile's ``uidFormat``) unless Basic credentials are given.
* policy: with vhost policy enabled, each request is a connection to the listener's ``policyVhost`` (or
  the default vhost) for the policy's connection rules, and management and metrics need the user's group
  to allow the target ``$management`` -- what an AMQP client needs to send a management request.
* management: a request goes to the router's agent (router/management/agent.py) as an AMQP message; one
  with ``node`` naming another router goes over the mesh to ``_topo/0/<node>/$management`` and its answer
  comes back to this router's console relay address, as qdmanage's ``-r`` does.
* ``/metrics``: the router, per connection role, per address, per link (inter-router links included) and
  per mesh node, read from the same management rows as tdstat; memory is the resident set size.
* ``/healthz``: ready when every configured listener is listening and, on an interior router with
  inter-router connections configured, another router is reachable; on an edge router, when its uplink
  is connected.
"""

from __future__ import annotations

import itertools
import logging
import weakref
from functools import partial
from pathlib import Path

import trio

from router.services import bind_tcp_listeners
from wire import management as wm
from wire.http import HttpRequest, HttpResponse, serve_http_listeners, text_response, unauthorized
from wire.httpmgmt import ConsoleApp, Principal, _CredentialMemo, check_password
from wire.memory import resident_bytes
from wire.prometheus import MetricsText, management_rows

log = logging.getLogger("router.httpserve")

#: The router-internal address the answers of remote routers' agents come back to.
RELAY_ADDRESS = "$_console_relay"
#: How long a request to another router's agent may take before the console is told 504.
REMOTE_TIMEOUT_SECONDS = 5.0
#: Requests to other routers waiting for their answer at once; past it a request is answered 503.
MAX_REMOTE_PENDING = 256
GATEWAY_TIMEOUT = 504
SERVICE_UNAVAILABLE = 503


class ManagementRelay:
    """Sends management requests to other routers' agents over the mesh and hands back their answers.

    One per router: it owns the local endpoint :data:`RELAY_ADDRESS`; a request's correlation id finds
    the waiting caller."""

    def __init__(self, router):
        self.router = router
        self._waiting: dict[str, list] = {}
        self._ids = itertools.count(1)
        router.add_local_endpoint(RELAY_ADDRESS, self._on_reply)

    def _on_reply(self, data: bytes) -> None:
        try:
            msg = wm.decode_message(data)
        except wm.ManagementError:
            return
        slot = self._waiting.get(str(msg.correlation_id))
        if slot is not None:
            slot.append(data)
            slot[0].set()

    async def ask(self, node: str, request: bytes) -> bytes | None:
        """The answer of ``node``'s agent to ``request``; ManagementError 404 when the router is not
        reachable, 504 when it does not answer in time, 503 when too many requests wait already."""
        if len(self._waiting) >= MAX_REMOTE_PENDING:
            raise wm.ManagementError(SERVICE_UNAVAILABLE, "too many requests to other routers waiting")
        msg = wm.decode_message(request)
        key = f"relay-{next(self._ids)}"
        msg.address = f"_topo/0/{node}/{wm.MANAGEMENT_ADDRESS}"
        msg.reply_to = f"_topo/0/{self.router.id}/{RELAY_ADDRESS}"
        msg.correlation_id = key
        slot: list = [trio.Event()]
        self._waiting[key] = slot
        try:
            if not self.router.send_local(bytes(msg.encode())):
                raise wm.not_found(f"router {node!r} is not reachable")
            with trio.move_on_after(REMOTE_TIMEOUT_SECONDS):
                await slot[0].wait()
                return slot[1]
            raise wm.ManagementError(GATEWAY_TIMEOUT, f"router {node!r} did not answer within "
                                     f"{REMOTE_TIMEOUT_SECONDS:g} seconds")
        finally:
            del self._waiting[key]


_RELAYS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def relay_for(router) -> ManagementRelay:
    """The router's relay, made at its first HTTP listener (one endpoint per router)."""
    relay = _RELAYS.get(router)
    if relay is None:
        relay = _RELAYS[router] = ManagementRelay(router)
    return relay


class RouterSite:
    """wire.httpmgmt.Site for one HTTP listener of the router."""

    realm = "tdrouterd"
    kind = "router"

    def __init__(self, router, agent, entity, *, users=None, services=None, config=None, relay=None, tls=None):
        self.router = router
        self.tls = tls  # wire.tls.ServerTls (HTTPS) or None
        self.agent = agent
        self.entity = entity
        self.users = users
        self.services = services
        self.config = config
        self.relay = relay
        self.require_login = bool(entity.get("authenticatePeer"))
        self._memo = _CredentialMemo()

    def node_id(self) -> str:
        return self.router.id

    # -- who -----------------------------------------------------------------------------------------
    def authenticate(self, request: HttpRequest, credentials) -> Principal | HttpResponse:
        user = None
        if credentials is not None:
            if self.users is None or not check_password(self.users, self._memo, *credentials):
                log.info("HTTP login refused for %r from %s", credentials[0], request.remote)
                return unauthorized(self.realm)
            user = credentials[0]
        elif self.tls is not None and request.tls is not None and request.tls.peer_subject is not None:
            # A verified client certificate (the handshake required one): the EXTERNAL-style login.
            user = self.tls.user_ids.user_for(request.tls)
        elif self.require_login:
            return unauthorized(self.realm)
        policy = getattr(self.router, "policy", None)
        if policy is None or not policy.enabled:
            return Principal(user, True)
        verdict = policy.open_connection(hostname=request.header("host", "").split(":")[0] or None, user=user,
                                         remote=request.remote, listener_vhost=self.entity.get("policyVhost"))
        if not hasattr(verdict, "targets"):
            return text_response(403, f"forbidden: {verdict.reason}\n")
        return Principal(user, verdict.targets.allows(wm.MANAGEMENT_ADDRESS), verdict.release)

    # -- what ----------------------------------------------------------------------------------------
    async def management(self, message: bytes, node: str | None) -> bytes | None:
        if node is None or node == self.router.id:
            return self.agent.handle(message)
        if self.relay is None:
            raise wm.not_found(f"router {node!r} is not reachable")
        return await self.relay.ask(node, message)

    def metrics(self) -> str:
        return router_metrics(self.agent.dispatch, self.router.id)

    def health(self) -> tuple[bool, dict]:
        return router_health(self.router, self.services, self.config)


def router_health(router, services, config) -> tuple[bool, dict]:
    """(ready, detail): see the module docstring."""
    reasons = []
    listeners = services.services("listener") if services is not None else []
    down = [s.name for s in listeners if not s.bound]
    if down:
        reasons.append(f"listeners not listening: {', '.join(down)}")
    others = [n for n in router.mesh_nodes() if n.get("id") != router.id]
    connectors = services.services("connector") if services is not None else []
    if router.mode == "interior" and config is not None:
        mesh_configured = any((e.get("role") or "normal") == "inter-router"
                              for e in (*config.listeners, *config.connectors))
        if mesh_configured and not others:
            reasons.append("no other router reachable")
    if router.mode == "edge":
        uplinks = [s for s in connectors if (s.entity.get("role") or "normal") == "edge"]
        if uplinks and not any(s.state == "SUCCESS" for s in uplinks):
            reasons.append("edge uplink not connected")
    detail = {"router": router.id, "mode": router.mode, "listeners": len(listeners),
              "routersReachable": len(others), "connections": len(router.connections)}
    if reasons:
        detail["reasons"] = reasons
    return not reasons, detail


# -- metrics -----------------------------------------------------------------------------------------
_ROUTER_COUNTERS = (
    ("deliveries_ingress_total", "deliveriesIngress", "Deliveries that entered the mesh at this router."),
    ("deliveries_egress_total", "deliveriesEgress", "Deliveries sent to consumers of this router."),
    ("deliveries_transit_total", "deliveriesTransit", "Deliveries that passed through to another router."),
    ("deliveries_ingress_route_container_total", "deliveriesIngressRouteContainer",
     "Deliveries received from route-container connections (brokers)."),
    ("deliveries_egress_route_container_total", "deliveriesEgressRouteContainer",
     "Deliveries sent to route-container connections (brokers)."),
    ("deliveries_delayed_1s_total", "deliveriesDelayed1Sec", "Deliveries settled after more than one second."),
    ("deliveries_delayed_10s_total", "deliveriesDelayed10Sec", "Deliveries settled after more than ten seconds."),
    ("deliveries_redirected_to_fallback_total", "deliveriesRedirectedToFallback",
     "Deliveries sent to a fallback destination."),
)
_ROUTER_GAUGES = (
    ("connections", "connectionCount", "Open connections."),
    ("links", "linkCount", "Attached links."),
    ("addresses", "addrCount", "Addresses in the routing table."),
    ("routers_reachable", "nodeCount", "Other routers of the mesh this router knows a route to."),
    ("link_routes", "linkRouteCount", "Link routes."),
    ("auto_links", "autoLinkCount", "Auto-links."),
    ("deliveries_stuck", "deliveriesStuck", "Deliveries unsettled for more than ten seconds now."),
    ("links_blocked", "linksBlocked", "Links without credit for more than ten seconds."),
    ("uptime_seconds", "uptimeSeconds", "Seconds since the router started."),
    ("memory_virtual_bytes", "memoryUsage", "Virtual memory size of the process."),
)
_OUTCOMES = (("accepted", "acceptedDeliveries", "acceptedCount"), ("rejected", "rejectedDeliveries", "rejectedCount"),
             ("released", "releasedDeliveries", "releasedCount"), ("modified", "modifiedDeliveries", "modifiedCount"),
             ("presettled", "presettledDeliveries", "presettledCount"),
             ("dropped_presettled", "droppedPresettledDeliveries", "droppedPresettledCount"))
_ADDRESS_FAMILIES = (
    ("address_deliveries_ingress_total", "counter", "deliveriesIngress", "Deliveries that entered at this router."),
    ("address_deliveries_egress_total", "counter", "deliveriesEgress", "Deliveries sent to local consumers."),
    ("address_deliveries_transit_total", "counter", "deliveriesTransit", "Deliveries passed to other routers."),
    ("address_deliveries_to_container_total", "counter", "deliveriesToContainer",
     "Deliveries sent to a waypoint container."),
    ("address_deliveries_from_container_total", "counter", "deliveriesFromContainer",
     "Deliveries received from a waypoint container."),
    ("address_subscribers", "gauge", "subscriberCount", "Local consumers."),
    ("address_remote_routers", "gauge", "remoteCount", "Other routers with consumers."),
)
_LINK_FAMILIES = (
    ("link_deliveries_total", "counter", "deliveryCount", "Deliveries over the link."),
    ("link_undelivered", "gauge", "undeliveredCount", "Deliveries waiting for credit on the link."),
    ("link_unsettled", "gauge", "unsettledCount", "Deliveries sent or received and not settled."),
    ("link_credit", "gauge", "creditAvailable", "Credit the link has."),
    ("link_deliveries_delayed_1s_total", "counter", "deliveriesDelayed1Sec", "Deliveries settled after >1 s."),
    ("link_deliveries_delayed_10s_total", "counter", "deliveriesDelayed10Sec", "Deliveries settled after >10 s."),
    ("link_deliveries_stuck", "gauge", "deliveriesStuck", "Deliveries unsettled for more than ten seconds."),
)


def router_metrics(dispatch, router_id: str) -> str:
    """The Prometheus text for one router, from its agent's ``dispatch``."""
    m = MetricsText("tdrouter")
    base = {"router": router_id}
    for row in management_rows(dispatch, "router"):
        m.add("info", "gauge", "The router: its mode and version (value 1).", 1,
              dict(base, mode=row.get("mode"), version=row.get("version")))
        for name, attr, help_text in _ROUTER_GAUGES:
            m.add(name, "gauge", help_text, row.get(attr), base)
        for name, attr, help_text in _ROUTER_COUNTERS:
            m.add(name, "counter", help_text, row.get(attr), base)
        for outcome, attr, _ in _OUTCOMES:
            m.add("deliveries_total", "counter", "Deliveries settled, by outcome.", row.get(attr),
                  dict(base, outcome=outcome))
    m.add("memory_resident_bytes", "gauge", "Resident set size of the process.", resident_bytes(), base)
    by_role: dict[tuple, int] = {}
    remote_of: dict = {}   # connection identity -> the peer's container id (a router's id, a broker's name)
    for row in management_rows(dispatch, "connection"):
        remote_of[row.get("identity")] = row.get("container") or ""
        key = (row.get("role") or "normal", row.get("dir") or "in")
        by_role[key] = by_role.get(key, 0) + 1
    for (role, direction), n in sorted(by_role.items()):
        m.add("connections_by_role", "gauge", "Open connections by role and direction.", n,
              dict(base, role=role, dir=direction))
    for row in management_rows(dispatch, "router.address"):
        labels = dict(base, address=row.get("key") or row.get("name"), distribution=row.get("distribution"))
        for name, kind, attr, help_text in _ADDRESS_FAMILIES:
            m.add(name, kind, help_text, row.get(attr), labels)
    for row in management_rows(dispatch, "router.link"):
        labels = dict(base, link=row.get("identity"), link_name=row.get("linkName"), link_type=row.get("linkType"),
                      dir=row.get("linkDir"), address=row.get("owningAddr") or "", connection=row.get("connectionId"),
                      remote=remote_of.get(row.get("connectionId"), ""))
        for name, kind, attr, help_text in _LINK_FAMILIES:
            m.add(name, kind, help_text, row.get(attr), labels)
        for outcome, _, attr in _OUTCOMES:
            m.add("link_settled_total", "counter", "Deliveries settled on the link, by outcome.", row.get(attr),
                  dict(labels, outcome=outcome))
    for row in management_rows(dispatch, "router.node"):
        if row.get("nextHop") == "(self)":
            continue
        m.add("mesh_node_cost", "gauge", "Cost of the route to another router of the mesh.", row.get("cost"),
              dict(base, node=row.get("id"), next_hop=row.get("nextHop") or ""))
    return m.render()


# -- the listener -------------------------------------------------------------------------------------
def console_root(entity) -> Path | None:
    """The listener's httpRootDir (None: the console shipped in the package)."""
    root = entity.get("httpRootDir")
    return Path(root) if root else None


def bind_http_listener(entity, announce=print) -> list:
    """Bind one ``http: yes`` listener now (OSError: the port is taken) and announce it as every listener
    is announced, with ``role http`` (``role https`` when it has an sslProfile); returns the trio listeners
    for :func:`serve_http_listener`."""
    listeners = bind_tcp_listeners(entity.get("host") or "", int(entity["port"]))
    role = "https" if entity.get("sslProfile") else "http"
    for lst in listeners:
        h, p = lst.socket.getsockname()[:2]
        announce(f"tdrouterd: listening on {h}:{p} (listener {entity.get('name') or '-'}, role {role})", flush=True)
    return listeners


def http_listener_tls(entity, security):
    """The listener's TLS (wire.tls.ServerTls) from its sslProfile, requireSsl and authenticatePeer, made
    exactly as for an AMQP listener; None for plain HTTP. SecurityConfigError as for an AMQP listener
    (the router checked every listener at start-up already, so it does not happen there)."""
    if security is None:
        return None
    return security.connection_kwargs("listener", entity)["tls"]


def serve_http_listener(nursery: trio.Nursery, listeners: list, router, agent, entity, *, security=None,
                        services=None, config=None) -> None:
    """Serve a bound HTTP listener in ``nursery`` with the router's agent behind it (HTTPS with an
    sslProfile)."""
    tls = http_listener_tls(entity, security)
    site = RouterSite(router, agent, entity, users=security.users if security is not None else None,
                      services=services, config=config, relay=relay_for(router), tls=tls)
    app = ConsoleApp(site, console_root(entity), metrics=entity.get("metrics") is not False,
                     healthz=entity.get("healthz") is not False, websockets=entity.get("websockets") is not False)
    nursery.start_soon(partial(serve_http_listeners, app, listeners, nursery, tls=tls))
