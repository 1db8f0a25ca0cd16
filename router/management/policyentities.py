"""Policy entity types (Qpid Dispatch 1.19 ``qdrouter.json``): ``policy`` (the global settings and the
denial counters), ``vhost`` (CREATE, UPDATE, DELETE while the router runs) and ``vhostStats`` (each vhost's
connection and denial counters). The policy itself is router/policy.py.

A vhost changed through management applies to connections opened from then on; open connections keep what
they were given, as in Dispatch. Management is under policy like any address: a group whose targets do not
include ``$management`` cannot reach these.
"""

from __future__ import annotations

from wire.management import bad_request

from router.config import ConfigError, validate_entity
from router.management.base import EntityAdapter
from router.policy import (GROUP_BOOLEANS, GROUP_INTEGERS, GROUP_STRINGS, MAX_CONNECTIONS_DEFAULT, PolicyError,
                           vhost_from_attrs)
from router import schema


class PolicyEntity(EntityAdapter):
    short = "policy"
    description = "Router-wide connection limit, vhost policy settings and denial counters."
    attributes = ("name", "identity", "type", "maxConnections", "maxMessageSize", "enableVhostPolicy",
                  "enableVhostNamePatterns", "policyDir", "defaultVhost", "connectionsProcessed",
                  "connectionsDenied", "connectionsCurrent", "linksDenied", "maxMessageSizeDenied",
                  "totalDenials", "sessionsDenied", "messagesDenied")
    types = {"maxConnections": "integer", "maxMessageSize": "integer", "enableVhostPolicy": "boolean",
             "enableVhostNamePatterns": "boolean", "connectionsProcessed": "integer",
             "connectionsDenied": "integer", "connectionsCurrent": "integer", "linksDenied": "integer",
             "maxMessageSizeDenied": "integer", "totalDenials": "integer", "sessionsDenied": "integer",
             "messagesDenied": "integer"}

    def rows(self) -> list[dict]:
        p = self.router.policy
        cfg = self.agent.config
        configured = dict(cfg.policies[0].attrs) if cfg is not None and cfg.policies else {}
        values = {a.name: configured.get(a.name, a.default) for a in schema.ENTITY_TYPES["policy"]}
        values.update(
            enableVhostPolicy=p.enabled, enableVhostNamePatterns=p.name_patterns, defaultVhost=p.default_vhost,
            connectionsProcessed=p.connections_processed, connectionsDenied=p.connections_denied,
            connectionsCurrent=p.connections_current, linksDenied=p.links_denied,
            maxMessageSizeDenied=p.max_message_size_denied, totalDenials=p.total_denials,
            sessionsDenied=p.sessions_denied, messagesDenied=p.messages_denied)
        name = values.pop("name", None) or "policy/0"
        return [self.row(name, name, values)]


class VhostEntity(EntityAdapter):
    short = "vhost"
    configuration = True
    operations = ("CREATE", "UPDATE", "DELETE", "READ")
    description = "A vhost policy: connection limits and user groups (applies to connections opened later)."
    attributes = ("name", "identity", "type", *[a for a in schema.ENTITY_TYPES["vhost"].attrs if a != "name"])
    types = {a.name: a.type for a in schema.ENTITY_TYPES["vhost"]}

    def rows(self) -> list[dict]:
        out = []
        for host, v in self.router.policy.vhosts.items():
            values = {a.name: a.default for a in schema.ENTITY_TYPES["vhost"] if a.name != "name"}
            values.update(v.attrs)
            values["hostname"] = host
            values["groups"] = {name: _typed_group(g) for name, g in v.groups.items()}
            # Dispatch's identity: vhost/<hostname> (python/qpid_dispatch_internal/management/agent.py,
            # VhostEntity._identifier); the name is the configured one (the hostname when none).
            out.append(self.row(v.attrs.get("name") or host, f"vhost/{host}", values))
        return out

    def _vhost(self, attrs: dict):
        policy = self.router.policy
        if not policy.enabled:
            raise bad_request("vhost: vhost policies apply only with 'policy { enableVhostPolicy: true }' in "
                              "the router's configuration; this one would not be enforced")
        try:
            entity = validate_entity("vhost", attrs)
            return vhost_from_attrs(entity.attrs)
        except ConfigError as exc:
            raise bad_request(exc.message) from None
        except PolicyError as exc:
            raise bad_request(f"vhost: {exc}") from None

    def _row(self, host: str) -> dict:
        return next(r for r in self.rows() if r["hostname"] == host)

    def create(self, attrs: dict) -> dict:
        attrs = dict(attrs)
        if attrs.get("hostname") is None and attrs.get("name") is not None:
            attrs["hostname"] = attrs["name"]
        vhost = self._vhost(attrs)
        try:
            self.router.policy.add_vhost(vhost)
        except PolicyError as exc:
            raise bad_request(f"vhost: {exc}") from None
        return self._row(vhost.hostname)

    def update(self, row: dict, attrs: dict) -> dict:
        if attrs.get("hostname") not in (None, row["hostname"]):
            raise bad_request("vhost: hostname cannot be changed; delete the vhost and create another")
        merged = {k: v for k, v in row.items() if k not in ("name", "identity", "type") and v is not None}
        merged.update({k: v for k, v in attrs.items() if k not in ("name", "identity", "type")})
        vhost = self._vhost(merged)
        self.router.policy.replace_vhost(vhost)
        return self._row(vhost.hostname)

    def delete(self, row: dict) -> None:
        self.router.policy.remove_vhost(row["hostname"])


def _typed_group(group) -> dict:
    """A group's settings as given, numbers and switches as numbers and booleans (Dispatch reads them as
    JSON, so qdmanage and qdstat --vhostgroups show ``True``/``16384``, not the configuration's text)."""
    typed = {**group.integers, **group.booleans}
    return {k: typed.get(k, v) for k, v in group.raw.items()}


class VhostStatsEntity(EntityAdapter):
    short = "vhostStats"
    description = "Connections and denials of each vhost."
    attributes = ("name", "identity", "type", "hostname", "connectionsApproved", "connectionsDenied",
                  "connectionsCurrent", "sessionDenied", "senderDenied", "receiverDenied",
                  "maxMessageSizeDenied", "messagesDenied", "perUserState", "perHostState")
    types = {a: "integer" for a in attributes[4:12]}
    types.update(perUserState="map", perHostState="map")

    def rows(self) -> list[dict]:
        out = []
        for host, v in self.router.policy.vhosts.items():
            s = v.stats
            name = f"vhostStats/{host}"   # Dispatch: VhostStatsEntity._identifier is the hostname
            out.append(self.row(name, name, {
                "hostname": host, "connectionsApproved": s.connections_approved,
                "connectionsDenied": s.connections_denied, "connectionsCurrent": s.connections_current,
                "sessionDenied": s.session_denied, "senderDenied": s.sender_denied,
                "receiverDenied": s.receiver_denied, "maxMessageSizeDenied": s.max_message_size_denied,
                "messagesDenied": s.messages_denied, "perUserState": dict(s.per_user),
                "perHostState": dict(s.per_host)}))
        return out


class VhostUserGroupSettingsEntity(EntityAdapter):
    """The settings of one user group of a vhost. As in Dispatch, groups are not entities of their own (they
    are the ``groups`` map of a ``vhost``): the type answers GET-ATTRIBUTES, GET-SCHEMA (with the defaults
    qdstat --vhostgroups shows for a setting a group leaves out) and QUERY, with no rows."""

    short = "vhostUserGroupSettings"
    configuration = True
    description = "The settings of a vhost's user group (in the vhost's 'groups' map)."
    attributes = ("name", "identity", "type", "users", "remoteHosts", "maxConnectionsPerUser",
                  "maxConnectionsPerHost", *GROUP_INTEGERS, *GROUP_BOOLEANS,
                  *[g for g in GROUP_STRINGS if g not in ("users", "remoteHosts")])
    types = {**{k: "integer" for k in ("maxConnectionsPerUser", "maxConnectionsPerHost", *GROUP_INTEGERS)},
             **{k: "boolean" for k in GROUP_BOOLEANS}}
    defaults = {"maxConnectionsPerUser": MAX_CONNECTIONS_DEFAULT, "maxConnectionsPerHost": MAX_CONNECTIONS_DEFAULT,
                **GROUP_INTEGERS, **GROUP_BOOLEANS}


def policy_adapters(agent) -> list[EntityAdapter]:
    return [cls(agent) for cls in (PolicyEntity, VhostEntity, VhostStatsEntity, VhostUserGroupSettingsEntity)]
