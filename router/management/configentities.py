"""Configuration entity types: listener, connector, router.config.address, router.config.linkRoute,
router.config.autoLink and log — read, created and deleted while the router runs.

CREATE validates the attributes with the configuration file's own rules (:func:`router.config.validate_entity`,
so a bad value gets the same message as in qdrouterd.conf, naming the attribute) and then makes the change
live through the router's management façade (router/control.py): an address configuration applies to
addresses bound from then on, a link route to attaches from then on (advertised to the mesh at once when its
container is connected), an auto-link attaches at once on a matching open connection; a listener listens at
once and a connector starts connecting (through the daemon's service manager, router/services.py).
"""

from __future__ import annotations

import itertools
import logging

from wire.management import ManagementError, bad_request, INTERNAL_ERROR, NOT_IMPLEMENTED

from router.config import ConfigError, public_attrs, validate_entity
from router.logsetup import MODULES, level_of
from router.management.base import EntityAdapter
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


def _configured(agent, kind: str) -> list:
    """A copy of the configured entities of section type ``kind``; [] when the agent runs without the
    daemon's configuration."""
    return list(agent.config.sections(kind)) if agent.config is not None else []


class AddressConfigEntity(_ConfigAdapter):
    short = "router.config.address"
    kind = "address"
    aliases = ("address",)
    description = "Distribution and phases for addresses matching a prefix or pattern."

    def __init__(self, agent):
        super().__init__(agent)
        self.entities = _configured(agent, self.kind)

    def rows(self) -> list[dict]:
        return [self.row(e["name"], self.identity(e["name"]), public_attrs(e.attrs)) for e in self.entities]

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        entity.attrs["name"] = self.unique_name(entity, (e["name"] for e in self.entities))
        try:
            self.control.add_address_config(entity)
        except ValueError as exc:
            what = "prefix" if entity.get("prefix") is not None else "pattern"
            raise bad_request(f"address: {what} '{entity[what]}' is already configured ({exc})") from None
        self.entities.append(entity)
        return self.rows()[-1]

    def delete(self, row: dict) -> None:
        entity = next(e for e in self.entities if e["name"] == row["name"])
        self.control.remove_address_config(entity)
        self.entities.remove(entity)


class LinkRouteConfigEntity(_ConfigAdapter):
    short = "router.config.linkRoute"
    kind = "linkRoute"
    aliases = ("linkRoute",)
    extra = ("dir", "operStatus")
    description = "Route link attaches for a prefix or pattern to a container."

    def __init__(self, agent):
        super().__init__(agent)
        self.entities = _configured(agent, self.kind)
        # Names the router gave routes it was configured with (linkRoute/<n> when unnamed).
        for i, e in enumerate(self.entities):
            if not e.get("name"):
                e.attrs["name"] = f"linkRoute/{i}"

    def rows(self) -> list[dict]:
        out = []
        for e in self.entities:
            route = self.control.link_route(e["name"])
            active = route is not None and self.control.route_containers(route) > 0
            values = dict(e.attrs, dir=e["direction"], operStatus="active" if active else "inactive")
            out.append(self.row(e["name"], self.identity(e["name"]), values))
        return out

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        entity.attrs["name"] = self.unique_name(entity, (e["name"] for e in self.entities))
        try:
            self.control.add_link_route(entity)
        except ValueError as exc:
            raise bad_request(f"linkRoute: {exc}") from None
        self.entities.append(entity)
        return self.rows()[-1]

    def delete(self, row: dict) -> None:
        entity = next(e for e in self.entities if e["name"] == row["name"])
        self.control.remove_link_route(entity["name"])
        self.entities.remove(entity)


class AutoLinkConfigEntity(_ConfigAdapter):
    short = "router.config.autoLink"
    kind = "autoLink"
    aliases = ("autoLink",)
    extra = ("addr", "dir", "linkRef", "operStatus", "lastError")
    description = "A link the router keeps attached to a container for an address phase."

    def rows(self) -> list[dict]:
        out = []
        for al in self.control.auto_links():
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
        entity.attrs["name"] = self.unique_name(entity, (al.name for al in self.control.auto_links()))
        try:
            self.control.add_auto_link(entity)
        except ValueError as exc:
            raise bad_request(f"autoLink: {exc}") from None
        return next(r for r in self.rows() if r["name"] == entity["name"])

    def delete(self, row: dict) -> None:
        self.control.remove_auto_link(row["name"])


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
            return [(e, {}) for e in _configured(self.agent, self.kind)]
        return [(s.entity, s.status()) for s in svc.services(self.kind)]

    def rows(self) -> list[dict]:
        out = []
        for entity, status in self._entries():
            name = entity["name"]
            # saslPassword (and any other secret) is never returned: management is not a way to read it back.
            out.append(self.row(name, self.identity_of(entity), dict(public_attrs(entity.attrs), **status)))
        return out

    def default_name(self, entity) -> str:
        return f"{self.kind}/{entity.get('host')}:{entity.get('port')}"

    def identity_of(self, entity) -> str:
        """Dispatch's identity (python/qpid_dispatch_internal/management/agent.py,
        _host_port_name_identifier): ``listener/<host>:<port>:<name>`` for a named one,
        ``listener/<host>:<port>`` for an unnamed one (whose name is then that identity too)."""
        name = entity["name"]
        if name == self.default_name(entity):
            return name
        return f"{self.default_name(entity)}:{name}"

    def create(self, attrs: dict) -> dict:
        entity = _validate(self.kind, attrs)
        if not entity.get("name"):
            entity.attrs["name"] = self.default_name(entity)
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

    def create(self, attrs: dict) -> dict:
        vhost = attrs.get("policyVhost")
        if vhost:
            # As at start-up (router/policyfiles.py check_listener_vhosts): never taken and ignored.
            policy = self.router.policy
            if not policy.enabled:
                raise bad_request("listener: policyVhost would not be enforced without "
                                  "'policy { enableVhostPolicy: true }'")
            if vhost not in policy.vhosts:
                raise bad_request(f"listener: policyVhost {vhost!r} names no vhost")
        return super().create(attrs)


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
        for e in _configured(agent, self.kind):
            self.settings[(e.get("module") or "DEFAULT").upper()] = dict(e.attrs)

    def rows(self) -> list[dict]:
        out = []
        for module in schema.LOG_MODULES:
            values = dict(self.settings.get(module, {}), module=module)
            values.setdefault("enable", "default" if module != "DEFAULT" else "info+")
            default = self.settings.get("DEFAULT", {})
            for attr, fallback in (("includeTimestamp", True), ("includeSource", False)):
                if values.get(attr) is None:   # Dispatch shows what applies: the module's, else DEFAULT's
                    values[attr] = default.get(attr) if default.get(attr) is not None else fallback
            name = f"log/{module}"
            out.append(self.row(name, name, values))
        return out

    def update(self, row: dict, attrs: dict) -> dict:
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
