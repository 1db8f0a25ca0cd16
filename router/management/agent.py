"""The router's management agent: AMQP management requests in, responses out (Qpid Dispatch 1.19
python/qpid_dispatch/management/client.py, src/router_core/management_agent.c).

``ManagementAgent.handle(msg)`` takes one request message (bytes) and returns the response message
(bytes, addressed to the request's ``reply_to``), or None when the request has nowhere to be answered.
It is sans-IO and synchronous; the daemon registers it as the router's local ``$management`` endpoint.

Entity types are adapters (router/management/entities.py, configentities.py) over the live router:
QUERY and READ read the router's own records and counters at the moment of the request; CREATE, UPDATE
and DELETE go through the router's management façade, ``router.control`` (router/control.py: address
configuration, link routes, auto-links, closing links and connections), and the daemon's service manager
(listeners, connectors). The request plumbing (paging, attribute names, entity keys) is the one every
agent shares, in wire/management.py.

Who may send to ``$management`` is decided like for any address: by the listener's authentication and,
with vhost policy (router/policy.py), by the user's group's targets and sources.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from wire import management as wm
from wire.management import ManagementError, bad_request, not_found

from router import schema
from router.addresses import BALANCED, CLOSEST
from router.logsetup import RECENT
from router.management.base import EntityAdapter, TYPE_PREFIX
from router.management.configentities import config_adapters
from router.management.entities import operational_adapters
from router.management.lookupserver import LOOKUP_ADDRESS, AddressLookupServer
from router.management.othertypes import other_adapters
from router.management.policyentities import policy_adapters

log = logging.getLogger("router.agent")

# Operations the node itself answers (org.amqp.management / management in GET-OPERATIONS).
# Operations of the node (Qpid Dispatch 1.19 qdrouter.json, as qdmanage get-operations shows them): the AMQP
# management ones, and Dispatch's own on its 'management' type (not PROFILE: it profiles Dispatch's Python
# agent and has no counterpart here).
AMQP_NODE_OPERATIONS = ("QUERY", "GET-TYPES", "GET-ANNOTATIONS", "GET-OPERATIONS", "GET-ATTRIBUTES",
                        "GET-MGMT-NODES", "READ")
NODE_OPERATIONS = ("GET-SCHEMA", "GET-JSON-SCHEMA", "GET-LOG", *AMQP_NODE_OPERATIONS)
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
#: The Python agent's own address in Dispatch 1.19 (qdstat -a lists it as 'local $_management_internal').
INTERNAL_ADDRESS = "$_management_internal"


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
        self.clock = clock or router.clock
        self.started_at = self.clock()
        self.adapters: dict[str, EntityAdapter] = {}
        self.lookup_server: AddressLookupServer | None = None
        for adapter in (*operational_adapters(self), *config_adapters(self), *policy_adapters(self),
                        *other_adapters(self)):
            self.adapters[adapter.type] = adapter
        # Dispatch's Python agent serves its own local address besides $management (python/qpid_dispatch_
        # internal/management/agent.py, Agent.activate: class L, closest); here one agent answers both.
        add_internal = getattr(router, "add_internal_endpoint", None)
        if add_internal is not None:
            add_internal("L" + INTERNAL_ADDRESS, CLOSEST, self._internal_request)
            if router.mode == "interior":   # Dispatch enables its lookup server on interior routers only
                self.lookup_server = AddressLookupServer(router)
                add_internal("M0" + LOOKUP_ADDRESS, BALANCED, self.lookup_server.on_request)

    def _internal_request(self, data: bytes) -> None:
        """A request to ``$_management_internal``: answered like one to ``$management``."""
        reply = self.handle(data)
        if reply is not None:
            self.router.send_local(reply)

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
            "GET-SCHEMA": self._get_schema, "GET-JSON-SCHEMA": self._get_json_schema, "GET-LOG": self._get_log,
            "GET-ANNOTATIONS": self._get_annotations,
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
        if t is not None:
            # Dispatch answers an unknown entityType with 400 "No such entity type"
            # (src/router_core/management_agent.c).
            adapter = self.adapter(t, status=wm.BAD_REQUEST)
            names = wm.query_attribute_names(req, adapter.type, adapter.attributes)
            rows = adapter.rows()
        else:
            # Dispatch's untyped QUERY (python/qpid_dispatch_internal/management/agent.py, ManagementEntity
            # .query): the columns are the ones asked for, else every attribute of every type; a name no type
            # has is 404; an entity none of whose asked-for attributes applies is left out.
            known = list(dict.fromkeys(n for a in self.adapters.values() for n in a.attributes))
            names = req.attribute_names or known
            unknown = [n for n in names if n not in known]
            if unknown:
                raise not_found(f"Unknown attributes {unknown}.")
            rows = [r for a in self.adapters.values() for r in a.untyped_rows()
                    if any(r.get(n) is not None for n in names)]
        return wm.OK, wm.query_page(req, names, rows)

    def _find(self, req: wm.Request) -> tuple[EntityAdapter, dict]:
        key_attr, key = wm.entity_key(req)
        adapters = [self.adapter(req.type)] if req.type and req.type != wm.NODE_TYPE else self.adapters.values()
        for adapter in adapters:
            for row in adapter.rows():
                if row.get(key_attr) == key:
                    return adapter, row
            for row in adapter.untyped_rows():   # e.g. the router as 'router/<id>'
                if row.get(key_attr) == key:
                    return adapter, row
        what = f" of type {adapters[0].type}" if isinstance(adapters, list) else ""
        raise not_found(f"No entity with {key_attr} '{key}'{what}")

    def _read(self, req: wm.Request) -> tuple[int, Any]:
        if req.type in (None, wm.NODE_TYPE, MANAGEMENT_TYPE) and (req.name or req.identity) == "self":
            return wm.OK, {"name": "self", "identity": "self", "type": MANAGEMENT_TYPE}
        _, row = self._find(req)
        return wm.OK, dict(row)

    def _create(self, req: wm.Request) -> tuple[int, Any]:
        # A security entity that is not enforced yet (authServicePlugin) is refused with
        # its reason, as the configuration file refuses it, not as an unknown type.
        refusal = schema.unenforced_section((req.type or "").removeprefix(schema.SCHEMA_PREFIX))
        if refusal is not None:
            raise bad_request(refusal)
        # TLS profiles are loaded and checked (files, keys) at start-up only (router/security.py); a listener or
        # connector created here may name one of those.
        et = schema.entity_type((req.type or "").removeprefix(schema.SCHEMA_PREFIX))
        if et is not None and et.name == "sslProfile":
            raise bad_request("sslProfile cannot be created through management in tdrouterd: define it in the "
                              "configuration file (it is checked at start-up) and name it in the listener or "
                              "connector")
        adapter = self.adapter(req.type)
        attrs = wm.body_attributes(req)
        attrs.pop("type", None)
        attrs.pop("identity", None)
        if req.name is not None:
            if attrs.get("name") not in (None, req.name):
                raise bad_request(f"name '{req.name}' differs from the body's name '{attrs['name']}'")
            attrs["name"] = req.name
        self._require("CREATE", adapter)
        if attrs.get("name") is not None and any(r.get("name") == attrs["name"] for r in adapter.rows()):
            # Dispatch's wording (python/qpid_dispatch_internal/management/agent.py)
            raise bad_request(f"Name conflicts with an existing entity: {adapter.short} '{attrs['name']}'")
        row = adapter.create(attrs)
        log.info("management: created %s %s", adapter.short, row.get("name"))
        return wm.CREATED, row

    def _update(self, req: wm.Request) -> tuple[int, Any]:
        adapter, row = self._find(req)
        self._require("UPDATE", adapter)
        attrs = wm.body_attributes(req)
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
        wm.require_operation(op, adapter.type, adapter.operations)

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
            "org.apache.qpid.dispatch.org.amqp.management": list(AMQP_NODE_OPERATIONS),
            MANAGEMENT_TYPE: list(NODE_OPERATIONS),
        }
        body.update({a.type: list(a.operations) for a in self._filtered(req)})
        return wm.OK, body

    def _get_annotations(self, req: wm.Request) -> tuple[int, Any]:
        """No type has annotations (Dispatch answers GET-ANNOTATIONS with an empty map too)."""
        return wm.OK, {}

    def _get_mgmt_nodes(self, req: wm.Request) -> tuple[int, Any]:
        own = self.router.id
        return wm.OK, [f"amqp:/_topo/0/{n['id']}/$management" for n in self.router.mesh_nodes()
                       if n["id"] != own]

    def _get_log(self, req: wm.Request) -> tuple[int, Any]:
        """The recent log records (router/logsetup.py RECENT), optionally of one ``module``, as Dispatch's
        GET-LOG answers: a list of ``[module, level, text, file, line, time]`` (qdstat --log)."""
        module = req.properties.get("module")
        if module is not None and not isinstance(module, str):
            raise bad_request("application property 'module' must be a string")
        return wm.OK, RECENT.entries(module)

    def _get_json_schema(self, req: wm.Request) -> tuple[int, Any]:
        """GET-SCHEMA's map as JSON text, as Dispatch answers GET-JSON-SCHEMA (qdmanage get-json-schema)."""
        return wm.OK, json.dumps(self._get_schema(req)[1], indent=2, sort_keys=True)

    def _get_schema(self, req: wm.Request) -> tuple[int, Any]:
        types = {}
        for a in self.adapters.values():
            types[a.short] = {
                "fullyQualifiedType": a.type,
                "description": a.description,
                "operations": list(a.operations),
                "attributes": {n: a.attribute_schema(n) for n in a.attributes},
            }
        return wm.OK, {"prefix": TYPE_PREFIX.rstrip("."), "entityTypes": types}

