"""What management changes in a running router, as methods: the management façade.

The management agent (router/management/) reads the router's records to answer QUERY and READ, and
changes the router only through :class:`RouterControl`, which the router builds at the end of its
``__init__`` (``router.control``). In the manner of Qpid Dispatch 1.19, whose management agent hands
CREATE/DELETE of address configuration, link routes and auto-links to the routing core
(src/router_core/agent_config_address.c, agent_config_link_route.c, agent_config_auto_link.c) and closes
links and connections through it (agent_link.c, agent_connection.c).

Listeners and connectors are sockets, not routing state: the daemon's service manager
(router/services.py) owns them and is handed to the agent explicitly.
"""

from __future__ import annotations

import logging

from router.autolinks import AutoLink
from router.linkroutes import LinkRoute, route_serves
from router.links import RouterConnection, RouterLink

log = logging.getLogger("router.control")

# The conditions management closes with (Qpid Dispatch 1.19 src/router_core/agent_link.c and
# agent_connection.c: an administratively deleted link or connection).
LINK_FORCED = "amqp:link:detach-forced"
CONNECTION_FORCED = "amqp:connection:forced"


class RouterControl:
    """The changes management may make to one router. Each method raises ValueError (a conflict: the
    caller answers 400) or KeyError (no such thing) and otherwise leaves the router consistent."""

    def __init__(self, router):
        self.router = router

    # -- address configuration (``address`` entities) ----------------------------------------------------
    def add_address_config(self, entity) -> None:
        """Distribution and phases for addresses matching the entity's prefix or pattern, for addresses
        bound from now on. ValueError when that prefix or pattern is already configured."""
        self.router.address_config.add(entity)

    def remove_address_config(self, entity) -> None:
        """Forget an address configuration added before (KeyError when it is not there)."""
        self.router.address_config.remove(entity)

    # -- link routes -------------------------------------------------------------------------------------
    def add_link_route(self, entity) -> LinkRoute:
        """Route attaches matching a ``linkRoute`` entity from now on; a ``pattern`` entity makes a
        pattern route, advertised to the mesh as such (key E/F), a ``prefix`` entity a prefix route (C/D).
        ValueError when the direction already has that pattern or prefix, or the name is taken."""
        route = LinkRoute.from_entity(entity, len(self.link_routes()))
        self.router.link_router.add_route(route)
        return route

    def remove_link_route(self, name: str) -> LinkRoute:
        """Stop routing attaches for the link route ``name``; links it already routed stay up."""
        return self.router.link_router.remove_route(name)

    def link_routes(self) -> list[LinkRoute]:
        return self.router.link_router.routes()

    def link_route(self, name: str) -> LinkRoute | None:
        return next((r for r in self.link_routes() if r.name == name), None)

    def route_containers(self, route: LinkRoute) -> int:
        """How many of the router's connections lead to a container of ``route`` (management's
        ``containerCount`` and a link route's ``operStatus``)."""
        return sum(1 for rc in self.router.connections if route_serves(route, rc))

    # -- auto-links --------------------------------------------------------------------------------------
    def add_auto_link(self, entity) -> AutoLink:
        """Keep an ``autoLink`` entity's link attached from now on (at once on a matching open connection).
        ValueError when the name is taken."""
        al = AutoLink.from_entity(entity, len(self.router.auto_links.auto_links))
        self.router.auto_links.add(al)
        return al

    def remove_auto_link(self, name: str) -> AutoLink:
        """Forget the auto-link ``name`` and detach its link (it is not retried)."""
        return self.router.auto_links.remove(name)

    def auto_links(self) -> list[AutoLink]:
        return list(self.router.auto_links.auto_links)

    # -- links and connections ---------------------------------------------------------------------------
    def find_link(self, identity: str) -> RouterLink | None:
        """The message-routed link whose management identity is ``identity``."""
        for rc in self.router.connections:
            for rl in rc.links.values():
                if str(rl.id) == identity:
                    return rl
        return None

    def close_link(self, rl: RouterLink, description: str, *, condition: str = LINK_FORCED) -> None:
        """Take ``rl`` out of routing and detach it; its deliveries go back to their producers."""
        log.info("management: closing link %s (%s)", rl.name, description)
        self.router.close_link(rl, condition, description)

    def find_connection(self, identity: str) -> RouterConnection | None:
        """The connection whose management identity (its engine id) is ``identity``."""
        return next((rc for rc in self.router.connections if str(rc.engine.id) == identity), None)

    def close_connection(self, rc: RouterConnection, description: str, *,
                         condition: str = CONNECTION_FORCED) -> None:
        """Close ``rc`` towards its peer; the router forgets it when the engine reports the close."""
        log.info("management: closing connection %d (%s)", rc.engine.id, description)
        rc.engine.close(condition, description)
