"""The router's management agent: AMQP management requests in, responses out (Qpid Dispatch 1.19
python/qpid_dispatch/management/client.py, src/router_core/management_agent.c).

``ManagementAgent.handle(msg)`` takes one request message (bytes) and returns the response message
(bytes, addressed to the request's ``reply_to``), or None when the request has nowhere to be answered.
It is sans-IO and synchronous; the daemon registers it as the router's local ``$management`` endpoint.

Entity types are adapters (router/management/entities.py, configentities.py) over the live router:
QUERY and READ read the router's own records and counters at the moment of the request; CREATE, UPDATE
and DELETE call into the router (address configuration, link routes, auto-links, link admin status)
and into the daemon's service manager (listeners, connectors).

Anyone who can send to ``$management`` can change the router: there is no access policy yet.
"""

from __future__ import annotations

import logging
from typing import Any

from wire import management as wm
from wire.management import ManagementError, bad_request, not_found

from router.management.base import EntityAdapter, TYPE_PREFIX
from router.management.configentities import config_adapters
from router.management.entities import operational_adapters

log = logging.getLogger("router.agent")

# Operations the node itself answers (org.amqp.management / management in GET-OPERATIONS).
NODE_OPERATIONS = ("QUERY", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-MGMT-NODES", "READ",
                   "GET-SCHEMA")
NODE_TYPES = {
    "org.apache.qpid.dispatch.entity": [],
    "org.apache.qpid.dispatch.configurationEntity": ["org.apache.qpid.dispatch.entity"],
    "org.apache.qpid.dispatch.operationalEntity": ["org.apache.qpid.dispatch.entity"],
    "org.apache.qpid.dispatch.org.amqp.management": ["org.apache.qpid.dispatch.operationalEntity",
                                                     "org.apache.qpid.dispatch.entity"],
    "org.apache.qpid.dispatch.management": ["org.apache.qpid.dispatch.org.amqp.management",
                                            "org.apache.qpid.dispatch.operationalEntity",
                                            "org.apache.qpid.dispatch.entity"],
}
MANAGEMENT_TYPE = TYPE_PREFIX + "management"


class ManagementAgent:
    """Answers AMQP management requests for one router.

    ``config`` is the daemon's RouterConfig (the configured addresses, link routes, auto-links, logs and
    the router section), ``services`` the daemon's service manager (listeners and connectors); both are
    optional so the agent can run over a bare Router in tests.
    """

    def __init__(self, router, *, config=None, services=None, clock=None):
        self.router = router
        self.config = config
        self.services = services
        self.clock = clock or getattr(router, "_clock", None) or (lambda: 0.0)
        self.started_at = self.clock()
        self.adapters: dict[str, EntityAdapter] = {}
        for adapter in (*operational_adapters(self), *config_adapters(self)):
            self.adapters[adapter.type] = adapter

    # -- entry point --------------------------------------------------------------------------------
    def handle(self, data: bytes) -> bytes | None:
        """Answer one request message; None when it has no reply_to (nothing can be sent back)."""
        return wm.answer(data, self.dispatch, log)

    def dispatch(self, req: wm.Request) -> tuple[int, Any]:
        op = req.operation
        handler = {
            "QUERY": self._query, "READ": self._read, "CREATE": self._create, "UPDATE": self._update,
            "DELETE": self._delete, "GET-TYPES": self._get_types, "GET-ATTRIBUTES": self._get_attributes,
            "GET-OPERATIONS": self._get_operations, "GET-MGMT-NODES": self._get_mgmt_nodes,
            "GET-SCHEMA": self._get_schema,
        }.get(op)
        if handler is None:
            raise ManagementError(wm.NOT_IMPLEMENTED, f"operation '{op}' is not implemented")
        return handler(req)

    # -- types --------------------------------------------------------------------------------------
    def adapter(self, type_name: str | None, *, status: int = wm.NOT_FOUND) -> EntityAdapter:
        """The adapter for a full or short type name ('org.apache.qpid.dispatch.router.link' or 'router.link')."""
        if not type_name:
            raise bad_request("missing application property 'type'")
        adapter = self.adapters.get(type_name) or self.adapters.get(TYPE_PREFIX + type_name)
        if adapter is None:
            for a in self.adapters.values():  # Dispatch's short aliases: 'address', 'linkRoute', 'autoLink'
                if type_name in a.aliases:
                    return a
            raise ManagementError(status, f"No such entity type '{type_name}'")
        return adapter

    def _filtered(self, req: wm.Request) -> list[EntityAdapter]:
        t = req.target_type
        if t is None:
            return list(self.adapters.values())
        return [self.adapter(t, status=wm.BAD_REQUEST)]

    # -- operations ---------------------------------------------------------------------------------
    def _query(self, req: wm.Request) -> tuple[int, Any]:
        t = req.target_type
        count = wm.MAX_QUERY_COUNT if req.count is None else min(req.count, wm.MAX_QUERY_COUNT)
        if t is not None:
            # Dispatch answers an unknown entityType with 400 "No such entity type" (reference sample).
            adapter = self.adapter(t, status=wm.BAD_REQUEST)
            names = req.attribute_names or list(adapter.attributes)
            unknown = [n for n in names if n not in adapter.attributes]
            if unknown:
                raise bad_request(f"Unknown attribute{'s' if len(unknown) > 1 else ''} "
                                  f"{', '.join(repr(n) for n in unknown)} for type {adapter.type}")
            rows = adapter.rows()
        else:
            names = req.attribute_names or ["name", "identity", "type"]
            rows = [r for a in self.adapters.values() for r in a.rows()]
        page = rows[req.offset:req.offset + count]
        return wm.OK, {"attributeNames": names, "results": [[r.get(n) for n in names] for r in page]}

    def _find(self, req: wm.Request) -> tuple[EntityAdapter, dict]:
        key_attr, key = ("identity", req.identity) if req.identity else ("name", req.name)
        if not key:
            raise bad_request(f"{req.operation} needs application property 'name' or 'identity'")
        adapters = [self.adapter(req.type)] if req.type and req.type != wm.NODE_TYPE else self.adapters.values()
        for adapter in adapters:
            for row in adapter.rows():
                if row.get(key_attr) == key:
                    return adapter, row
        what = f" of type {adapters[0].type}" if isinstance(adapters, list) else ""
        raise not_found(f"No entity with {key_attr} '{key}'{what}")

    def _read(self, req: wm.Request) -> tuple[int, Any]:
        if req.type in (None, wm.NODE_TYPE, MANAGEMENT_TYPE) and (req.name or req.identity) == "self":
            return wm.OK, {"name": "self", "identity": "self", "type": MANAGEMENT_TYPE}
        _, row = self._find(req)
        return wm.OK, dict(row)

    def _body_attrs(self, req: wm.Request) -> dict:
        body = req.body if req.body is not None else {}
        if not isinstance(body, dict):
            raise bad_request(f"{req.operation} body must be a map of attributes")
        return {str(k): v for k, v in body.items()}

    def _create(self, req: wm.Request) -> tuple[int, Any]:
        adapter = self.adapter(req.type)
        attrs = self._body_attrs(req)
        attrs.pop("type", None)
        attrs.pop("identity", None)
        if req.name is not None:
            if attrs.get("name") not in (None, req.name):
                raise bad_request(f"name '{req.name}' differs from the body's name '{attrs['name']}'")
            attrs["name"] = req.name
        self._require("CREATE", adapter)
        if attrs.get("name") is not None and any(r.get("name") == attrs["name"] for r in adapter.rows()):
            raise bad_request(f"{adapter.short}: name '{attrs['name']}' is already in use")
        row = adapter.create(attrs)
        log.info("management: created %s %s", adapter.short, row.get("name"))
        return wm.CREATED, row

    def _update(self, req: wm.Request) -> tuple[int, Any]:
        adapter, row = self._find(req)
        self._require("UPDATE", adapter)
        attrs = self._body_attrs(req)
        for k in ("type", "identity", "name"):
            if k in attrs and attrs[k] != row.get(k):
                raise bad_request(f"attribute '{k}' cannot be changed")
            attrs.pop(k, None)
        return wm.OK, adapter.update(row, attrs)

    def _delete(self, req: wm.Request) -> tuple[int, Any]:
        adapter, row = self._find(req)
        self._require("DELETE", adapter)
        adapter.delete(row)
        log.info("management: deleted %s %s", adapter.short, row.get("name"))
        return wm.NO_CONTENT, {}

    @staticmethod
    def _require(op: str, adapter: EntityAdapter) -> None:
        if op not in adapter.operations:
            raise bad_request(f"operation {op} is not allowed on type {adapter.type} "
                              f"(allowed: {', '.join(adapter.operations)})")

    def _get_types(self, req: wm.Request) -> tuple[int, Any]:
        if req.target_type:
            return wm.OK, {a.type: a.base_types() for a in self._filtered(req)}
        body = dict(NODE_TYPES)
        body.update({a.type: a.base_types() for a in self.adapters.values()})
        return wm.OK, body

    def _get_attributes(self, req: wm.Request) -> tuple[int, Any]:
        body = {} if req.target_type else {t: [] for t in NODE_TYPES}
        body.update({a.type: list(a.attributes) for a in self._filtered(req)})
        return wm.OK, body

    def _get_operations(self, req: wm.Request) -> tuple[int, Any]:
        body = {} if req.target_type else {
            "org.apache.qpid.dispatch.entity": [],
            "org.apache.qpid.dispatch.configurationEntity": ["READ"],
            "org.apache.qpid.dispatch.operationalEntity": ["READ"],
            "org.apache.qpid.dispatch.org.amqp.management": list(NODE_OPERATIONS),
            MANAGEMENT_TYPE: list(NODE_OPERATIONS),
        }
        body.update({a.type: list(a.operations) for a in self._filtered(req)})
        return wm.OK, body

    def _get_mgmt_nodes(self, req: wm.Request) -> tuple[int, Any]:
        own = getattr(self.router, "id", None)
        nodes = mesh_nodes(self.router)
        return wm.OK, [f"amqp:/_topo/0/{n['id']}/$management" for n in nodes if n.get("id") != own]

    def _get_schema(self, req: wm.Request) -> tuple[int, Any]:
        types = {}
        for a in self.adapters.values():
            types[a.short] = {
                "fullyQualifiedType": a.type,
                "description": a.description,
                "operations": list(a.operations),
                "attributes": {n: {"type": a.attribute_type(n)} for n in a.attributes},
            }
        return wm.OK, {"prefix": TYPE_PREFIX.rstrip("."), "entityTypes": types}


def mesh_nodes(router) -> list[dict]:
    """The mesh's routers as dicts keyed like router.node, when the router has a mesh; else []."""
    try:
        nodes = getattr(router, "mesh_nodes", lambda: [])()
    except Exception:  # the mesh is another module's state; management must not fail with it
        log.exception("router.mesh_nodes() failed")
        return []
    return [dict(n) for n in nodes or [] if isinstance(n, dict)]
