"""The rest of Qpid Dispatch 1.19's entity types (``qdmanage get-types``), so that GET-ATTRIBUTES,
GET-OPERATIONS, GET-SCHEMA and QUERY answer for every type Dispatch has.

* ``sslProfile``: the TLS profiles of the configuration file (router/security.py), secrets left out. They are
  loaded and checked at start-up only, so the type is READ-only here (CREATE is refused with the reason by the
  agent).
* ``authServicePlugin``, ``router.config.exchange``, ``router.config.binding``, ``console``: features
  tdrouterd does not have (an authentication service, Dispatch's exchanges and bindings, the deprecated
  console). The types exist with Dispatch's attribute names, answer QUERY with no rows, and allow only READ:
  a CREATE is refused instead of being accepted and not enforced.
* ``logStats``: per-module log counters are not kept; no rows.
* ``vhostUserGroupSettings`` is in router/management/policyentities.py.

Dispatch's test-only ``dummy`` type is left out on purpose. Attribute names: Qpid Dispatch 1.19
python/qpid_dispatch_internal/management/qdrouter.json.
"""

from __future__ import annotations

from router import schema
from router.config import public_attrs
from router.management.base import EntityAdapter

BASE = ("name", "identity", "type")


class SslProfileEntity(EntityAdapter):
    short = "sslProfile"
    configuration = True
    description = "A TLS profile of the configuration file (checked at start-up; not created at run time)."
    attributes = (*BASE, *[a.name for a in schema.ENTITY_TYPES["sslProfile"] if a.name != "name"])

    def rows(self) -> list[dict]:
        cfg = self.agent.config
        out = []
        for e in (cfg.ssl_profiles if cfg is not None else ()):
            name = e.get("name")
            # Dispatch names a profile by its name (agent.py, SslProfileEntity._identifier).
            out.append(self.row(name, f"sslProfile/{name}", public_attrs(e.attrs)))
        return out


class _AbsentFeature(EntityAdapter):
    """A Dispatch type for a feature tdrouterd does not have: known, READ-only, no rows."""


class AuthServicePluginEntity(_AbsentFeature):
    short = "authServicePlugin"
    configuration = True
    description = "An external SASL authentication service (not supported by tdrouterd)."
    attributes = (*BASE, "host", "port", "realm", "sslProfile", "authService", "saslInitHostname",
                  "authSslProfile")


class LogStatsEntity(_AbsentFeature):
    short = "logStats"
    description = "Per-module log counters (not kept by tdrouterd)."
    attributes = (*BASE, "traceCount", "debugCount", "infoCount", "noticeCount", "warningCount", "errorCount",
                  "criticalCount")
    types = {a: "integer" for a in attributes[3:]}


class ExchangeEntity(_AbsentFeature):
    short = "router.config.exchange"
    configuration = True
    description = "A topic exchange (not supported by tdrouterd: use multicast addresses or a broker)."
    attributes = (*BASE, "address", "phase", "alternateAddress", "alternatePhase", "matchMethod", "bindingCount",
                  "receivedCount", "droppedCount", "forwardedCount", "divertedCount")


class BindingEntity(_AbsentFeature):
    short = "router.config.binding"
    configuration = True
    description = "A binding of an exchange (not supported by tdrouterd)."
    attributes = (*BASE, "exchangeName", "bindingKey", "nextHopAddress", "nextHopPhase", "matchedCount")


class ConsoleEntity(_AbsentFeature):
    short = "console"
    configuration = True
    description = "Dispatch's deprecated web console launcher (not supported by tdrouterd)."
    attributes = (*BASE, "listener", "wsport", "proxy", "home", "args")


def other_adapters(agent) -> list[EntityAdapter]:
    return [cls(agent) for cls in (SslProfileEntity, AuthServicePluginEntity, LogStatsEntity, ExchangeEntity,
                                   BindingEntity, ConsoleEntity)]
