"""Configuration entity types: listener, connector, router.config.address, router.config.linkRoute,
router.config.autoLink and log — read, created and deleted while the router runs.

CREATE validates the attributes with the configuration file's own rules (:func:`router.config.validate_entity`,
so a bad value gets the same message as in qdrouterd.conf, naming the attribute) and then makes the change
live: an address configuration applies to addresses bound from then on, a link route to attaches from then
on, an auto-link attaches at once on a matching open connection, a listener listens at once and a connector
starts connecting (through the daemon's service manager, router/services.py).
"""

from __future__ import annotations

import itertools
import logging

from wire.management import ManagementError, bad_request, INTERNAL_ERROR, NOT_IMPLEMENTED

from router.config import ConfigError, validate_entity
from router.management.base import EntityAdapter
from router.management.entities import detach_link
from router import schema

log = logging.getLogger("router.agent")


def _validate(kind: str, attrs: dict):
    try:
        return validate_entity(kind, attrs)
    except ConfigError as exc:
        raise bad_request(exc.message) from None


class _ConfigAdapter(EntityAdapter):
    """Rows are the validated configuration Entities (every schema attribute, defaults filled in)."""

    configuration = True
    kind = ""  # section name in router.schema
    operations = ("CREATE", "DELETE", "READ")

    def __init__(self, agent):
        super().__init__(agent)
        et = schema.ENTITY_TYPES[self.kind]
        self.attributes = ("name", "identity", "type", *[a for a in et.attrs if a != "name"], *self.extra)
        self.types = {a.name: a.type for a in et}
        self._identities: dict[str, str] = {}
        self._next_identity = itertools.count(1)

    extra: tuple[str, ...] = ()

    def identity(self, name: str) -> str:
        ident = self._identities.get(name)
        if ident is None:
            ident = self._identities[name] = str(next(self._next_identity))
        return ident

    def unique_name(self, entity, existing) -> str:
        if entity.get("name"):
            return entity["name"]
        names = set(existing)
        n = len(names)
        while f"{self.kind}/{n}" in names:
            n += 1
        return f"{self.kind}/{n}"


def _configured(agent, attr: str) -> list:
    return list(getattr(agent.config, attr, None) or [])


class AddressConfigEntity(_ConfigAdapter):
    short = "router.config.address"
    kind = "address"
    aliases = ("address",)
    description = "Distribution and phases for addresses matching a prefix or pattern."

    def __init__(self, agent):
        super().__init__(agent)
        self.entities = _configured(agent, "addresses")

    def rows(self) -> list[dict]:
        return [self.row(e["name"], self.identity(e["name"]), dict(e.attrs)) for e in self.entities]

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        entity.attrs["name"] = self.unique_name(entity, (e["name"] for e in self.entities))
        try:
            self.router.address_config.add(entity)
        except ValueError as exc:
            what = "prefix" if entity.get("prefix") is not None else "pattern"
            raise bad_request(f"address: {what} '{entity[what]}' is already configured ({exc})") from None
        self.entities.append(entity)
        return self.rows()[-1]

    def delete(self, row: dict) -> None:
        entity = next(e for e in self.entities if e["name"] == row["name"])
        self.router.address_config.remove(entity)
        self.entities.remove(entity)


class LinkRouteConfigEntity(_ConfigAdapter):
    short = "router.config.linkRoute"
    kind = "linkRoute"
    aliases = ("linkRoute",)
    extra = ("dir", "operStatus")
    description = "Route link attaches for a prefix or pattern to a container."

    def __init__(self, agent):
        super().__init__(agent)
        self.entities = _configured(agent, "link_routes")
        # Names the router gave routes it was configured with (linkRoute/<n> when unnamed).
        for i, e in enumerate(self.entities):
            if not e.get("name"):
                e.attrs["name"] = f"linkRoute/{i}"

    def _route(self, name: str):
        from router.management.entities import link_routes
        for _direction, _pattern, route in link_routes(self.router):
            if route.name == name:
                return route
        return None

    def rows(self) -> list[dict]:
        from router.management.entities import _route_containers
        out = []
        for e in self.entities:
            route = self._route(e["name"])
            active = route is not None and _route_containers(self.router, route) > 0
            values = dict(e.attrs, dir=e["direction"], operStatus="active" if active else "inactive")
            out.append(self.row(e["name"], self.identity(e["name"]), values))
        return out

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        entity.attrs["name"] = self.unique_name(entity, (e["name"] for e in self.entities))
        lr = self.router.link_router
        add = getattr(lr, "add_route", None)
        try:
            if add is not None:
                add(entity)
            else:
                _add_route_fallback(lr, entity)
        except ValueError as exc:
            raise bad_request(f"linkRoute: {exc}") from None
        self.entities.append(entity)
        return self.rows()[-1]

    def delete(self, row: dict) -> None:
        entity = next(e for e in self.entities if e["name"] == row["name"])
        lr = self.router.link_router
        remove = getattr(lr, "remove_route", None)
        if remove is not None:
            remove(entity["name"])
        else:
            table = lr.tables[entity["direction"]]
            if entity.get("pattern") is not None:
                table.remove(entity["pattern"])
            else:
                table.remove_prefix(entity["prefix"])
        self.entities.remove(entity)


def _add_route_fallback(lr, entity) -> None:
    """Until LinkRouter has add_route(entity): the same LinkRoute its constructor builds."""
    from router.linkroutes import LinkRoute

    pattern = entity.get("pattern")
    route = LinkRoute(name=entity["name"], pattern=pattern or entity.get("prefix"),
                      direction=entity["direction"], connection=entity.get("connection"),
                      container_id=entity.get("containerId"), add_prefix=entity.get("addExternalPrefix"),
                      del_prefix=entity.get("delExternalPrefix"))
    table = lr.tables[route.direction]
    if pattern is not None:
        table.add(pattern, route)
    else:
        table.add_prefix(entity["prefix"], route)


class AutoLinkConfigEntity(_ConfigAdapter):
    short = "router.config.autoLink"
    kind = "autoLink"
    aliases = ("autoLink",)
    extra = ("addr", "dir", "linkRef", "operStatus", "lastError")
    description = "A link the router keeps attached to a container for an address phase."

    @property
    def manager(self):
        return self.router.auto_links

    def rows(self) -> list[dict]:
        out = []
        for al in self.manager.auto_links:
            values = {
                "address": al.address, "addr": al.address, "direction": al.direction, "dir": al.direction,
                "phase": al.phase, "connection": al.connection, "containerId": al.container_id,
                "externalAddress": al.external_address, "fallback": False,
                "linkRef": str(al.link.id) if al.link is not None else None,
                "operStatus": al.oper_status, "lastError": al.last_error,
            }
            out.append(self.row(al.name, self.identity(al.name), values))
        return out

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        entity.attrs["name"] = self.unique_name(entity, (al.name for al in self.manager.auto_links))
        add = getattr(self.manager, "add", None)
        if add is not None:
            add(entity)
        else:
            from router.autolinks import AutoLink
            al = AutoLink.from_entity(entity, len(self.manager.auto_links))
            self.manager.auto_links.append(al)
            for rc in sorted(self.router.connections, key=lambda c: c.engine.id):
                if rc.engine.remote_container is not None and al.matches(rc):
                    self.manager._attach(al, rc)
                    break
        return next(r for r in self.rows() if r["name"] == entity["name"])

    def delete(self, row: dict) -> None:
        remove = getattr(self.manager, "remove", None)
        if remove is not None:
            remove(row["name"])
            return
        al = next(a for a in self.manager.auto_links if a.name == row["name"])
        self.manager.auto_links.remove(al)  # first, so the detach below is not retried
        if al.link is not None and al.rc is not None:
            detach_link(self.router, al.rc, al.link, "amqp:link:detach-forced", "autoLink deleted")


class _ServiceAdapter(_ConfigAdapter):
    """Listeners and connectors live in the daemon's service manager (router/services.py)."""

    def _services(self):
        svc = self.agent.services
        if svc is None:
            raise ManagementError(NOT_IMPLEMENTED, f"{self.kind}s cannot be changed without the daemon")
        return svc

    def _entries(self) -> list:
        svc = self.agent.services
        if svc is None:
            return [(e, {}) for e in _configured(self.agent, self.kind + "s")]
        return [(s.entity, s.status()) for s in svc.services(self.kind)]

    def rows(self) -> list[dict]:
        out = []
        for entity, status in self._entries():
            name = entity["name"]
            out.append(self.row(name, name, dict(entity.attrs, **status)))
        return out

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        if not entity.get("name"):
            entity.attrs["name"] = f"{self.kind}/{entity.get('host')}:{entity.get('port')}"
        try:
            self._services().add(self.kind, entity)
        except OSError as exc:
            raise bad_request(f"{self.kind}: cannot listen on {entity.get('host')}:{entity.get('port')}: "
                              f"{exc.strerror or exc}") from None
        except ValueError as exc:
            raise bad_request(f"{self.kind}: {exc}") from None
        return next(r for r in self.rows() if r["name"] == entity["name"])

    def delete(self, row: dict) -> None:
        try:
            self._services().remove(self.kind, row["name"])
        except KeyError:
            raise ManagementError(INTERNAL_ERROR, f"{self.kind} {row['name']} vanished") from None


class ListenerEntity(_ServiceAdapter):
    short = "listener"
    kind = "listener"
    description = "Accepts AMQP connections on a host and port."


class ConnectorEntity(_ServiceAdapter):
    short = "connector"
    kind = "connector"
    extra = ("connectionStatus", "connectionMsg", "failoverUrls")
    description = "Keeps an outgoing AMQP connection up."


class LogEntity(_ConfigAdapter):
    short = "log"
    kind = "log"
    operations = ("UPDATE", "READ")
    description = "Logging of one module; UPDATE of 'enable' changes the level at once."

    def __init__(self, agent):
        super().__init__(agent)
        self.settings = {}
        for e in _configured(agent, "logs"):
            self.settings[(e.get("module") or "DEFAULT").upper()] = dict(e.attrs)

    def rows(self) -> list[dict]:
        out = []
        for module in schema.LOG_MODULES:
            values = dict(self.settings.get(module, {}), module=module)
            values.setdefault("enable", "default" if module != "DEFAULT" else "info+")
            name = f"log/{module}"
            out.append(self.row(name, name, values))
        return out

    def update(self, row: dict, attrs: dict) -> dict:
        from router.logsetup import MODULES, level_of

        unknown = set(attrs) - {"enable", "module", "includeTimestamp", "includeSource", "outputFile"}
        if unknown:
            raise bad_request(f"attribute '{sorted(unknown)[0]}' is not a log attribute")
        module = row["module"]
        if attrs.get("module") not in (None, module):
            raise bad_request("attribute 'module' cannot be changed")
        checked = _validate("log", dict(attrs, module=module))
        enable = checked.get("enable")
        if enable is not None:
            logging.getLogger(MODULES.get(module, module.lower())).setLevel(level_of(enable))
        stored = self.settings.setdefault(module, {})
        stored.update({k: checked.get(k) for k in attrs if k != "module"})
        return next(r for r in self.rows() if r["module"] == module)


def config_adapters(agent) -> list[EntityAdapter]:
    return [cls(agent) for cls in (ListenerEntity, ConnectorEntity, AddressConfigEntity,
                                   LinkRouteConfigEntity, AutoLinkConfigEntity, LogEntity)]
