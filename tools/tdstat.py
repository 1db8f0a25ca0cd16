"""``tdstat``: qdstat's views of a running router (and a broker), in qdstat's layout (Qpid Dispatch 1.19
tools/qdstat, python/qpid_dispatch_internal/tools/display.py).

Same titles, column headers and order, ``ddd:hh:mm:ss`` times, ``-`` placeholders and 2-space row indent
as Qpid Dispatch 1.19's qdstat, so an operator's eyes and scripts carry over; ``--csv`` and ``--json``
for scripts. Rendering (``render_*``) is pure: rows in, lines out, so it is tested from canned data.
TLS and SASL options (qdstat's ``--ssl-*``/``--sasl-*``, passwords from a file or the environment only):
tools/security.py; ``--sasl-mechanisms SCRAM-SHA-256`` (or -512) logs in through tools/engineclient.py,
since proton's SASL has no SCRAM.

Why one module of ~640 lines: it is qdstat's table of views -- each view's attributes, renderer and the
entity it reads, fetched and printed by one ``run`` -- and a reader compares a view's columns with its
renderer side by side; the broker's views, a separate vocabulary, are in tools/tdstatbroker.py.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from typing import Callable

from tools.mgmtclient import DEFAULT_TIMEOUT, ManagementClient, ManagementFailed
from tools.security import Security, SecurityOptionError, add_security_options

T = "org.apache.qpid.dispatch."
INDENT = "  "
COLUMN_GAP = 2


# -- formatting -----------------------------------------------------------------------------------------
def fmt_time(seconds) -> str:
    """ddd:hh:mm:ss, or '-' when unknown."""
    if seconds is None:
        return "-"
    s = int(seconds)
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    return f"{days:03d}:{hours:02d}:{minutes:02d}:{s:02d}"


def fmt_mem(n) -> str:
    """Bytes as qdstat shows memory: '102 MiB', '741 KiB'."""
    if n is None:
        return "-"
    n = int(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n} {unit}"
        n //= 1024
    return f"{n} TiB"


def cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def comma(value) -> str:
    return "" if value is None else f"{int(value):,}"


class Table:
    """A titled table: qdstat's text layout (column width = widest cell + 2, last column not padded,
    a rule of '=' under the headers) or CSV (every non-empty cell quoted, empty cells bare)."""

    def __init__(self, title: str, headers: list[str], rows: list[list[str]]):
        self.title = title
        self.headers = headers
        self.rows = [[cell(c) for c in r] for r in rows]

    def lines(self, csv: bool = False) -> list[str]:
        out = [self.title] if self.title else []
        if csv:
            out.append(",".join(f'"{h}"' for h in self.headers))
            out.extend(",".join(f'"{c}"' if c != "" else "" for c in r) for r in self.rows)
            return out
        widths = [len(h) + COLUMN_GAP for h in self.headers]
        for r in self.rows:
            for i, c in enumerate(r):
                widths[i] = max(widths[i], len(c) + COLUMN_GAP)

        def line(cells: list[str]) -> str:
            return INDENT + "".join(c.ljust(w) for c, w in zip(cells[:-1], widths)) + cells[-1]

        out.append(line(self.headers))
        out.append(INDENT + "=" * sum(widths))
        out.extend(line(r) for r in self.rows)
        return out


def key_parts(key: str | None) -> tuple[str, str, str]:
    """(class, addr, phase) from a routing key (Qpid Dispatch 1.19 include/qpid/dispatch/iterator.h,
    src/iterator.c): M0examples -> mobile, examples, 0."""
    if not key:
        return "", "", ""
    klass = key[0]
    if klass == "M":
        return "mobile", key[2:], key[1]
    names = {"L": "local", "R": "router", "A": "area", "T": "topo", "C": "link-in", "D": "link-out",
             "E": "link-in", "F": "link-out", "H": "edge"}
    return names.get(klass, "unknown"), key[1:], ""


# -- views: attribute lists and renderers ------------------------------------------------------------
GENERAL_ATTRS = ["version", "mode", "id", "workerThreads", "uptimeSeconds", "memoryUsage", "area",
                 "linkRouteCount", "autoLinkCount", "linkCount", "nodeCount", "addrCount", "connectionCount",
                 "presettledDeliveries", "droppedPresettledDeliveries", "acceptedDeliveries",
                 "rejectedDeliveries", "releasedDeliveries", "modifiedDeliveries", "deliveriesDelayed1Sec",
                 "deliveriesDelayed10Sec", "deliveriesStuck", "deliveriesRedirectedToFallback", "linksBlocked",
                 "deliveriesIngress", "deliveriesEgress", "deliveriesTransit",
                 "deliveriesIngressRouteContainer", "deliveriesEgressRouteContainer"]
GENERAL_LABELS = ["Version", "Mode", "Router Id", "Worker Threads", "Uptime", "VmSize", "Area", "Link Routes",
                  "Auto Links", "Links", "Nodes", "Addresses", "Connections", "Presettled Count",
                  "Dropped Presettled Count", "Accepted Count", "Rejected Count", "Released Count",
                  "Modified Count", "Deliveries Delayed > 1sec", "Deliveries Delayed > 10sec",
                  "Deliveries Stuck > 10sec", "Deliveries to Fallback", "Links Blocked", "Ingress Count",
                  "Egress Count", "Transit Count", "Deliveries from Route Container",
                  "Deliveries to Route Container"]


def render_general(rows: list[dict], verbose: bool = False) -> list[Table]:
    r = rows[0] if rows else {}
    values = []
    for attr in GENERAL_ATTRS:
        v = r.get(attr)
        if attr == "uptimeSeconds":
            v = fmt_time(v)
        elif attr == "memoryUsage":
            v = fmt_mem(v)
        values.append(v)
    return [Table("Router Statistics", ["attr", "value"], [[label, v] for label, v in zip(GENERAL_LABELS, values)])]


CONNECTION_ATTRS = ["identity", "host", "container", "role", "protocol", "dir", "isEncrypted", "sslProto",
                    "sslCipher", "sasl", "isAuthenticated", "user", "tenant", "lastDlvSeconds", "uptimeSeconds"]


def _security(r: dict) -> str:
    if r.get("isEncrypted"):
        if r.get("sasl") == "GSSAPI":
            return "Kerberos"
        return f"{r.get('sslProto')}({r.get('sslCipher')})"
    return "no-security"


def _authentication(r: dict) -> str:
    if not r.get("isAuthenticated"):
        return "no-auth"
    mech = r.get("sasl")
    if mech == "ANONYMOUS":
        return "anonymous-user"
    if mech == "GSSAPI":
        return "Kerberos"
    if mech == "EXTERNAL":
        return "x.509"
    return f"{r.get('user')}({mech})"


def _by_identity(rows: list[dict]) -> list[dict]:
    def key(r):
        ident = str(r.get("identity"))
        return (0, int(ident), "") if ident.isdigit() else (1, 0, ident)
    return sorted(rows, key=key)


def render_connections(rows: list[dict], verbose: bool = False) -> list[Table]:
    headers = ["id", "host", "container", "role", "proto", "dir", "security", "authentication", "tenant",
               "last dlv", "uptime"]
    out = []
    for r in _by_identity(rows):
        out.append([r.get("identity"), r.get("host"), r.get("container"), r.get("role"), r.get("protocol"),
                    r.get("dir"), _security(r), _authentication(r), r.get("tenant") or "",
                    fmt_time(r.get("lastDlvSeconds")), fmt_time(r.get("uptimeSeconds"))])
    return [Table("Connections", headers, out)]


def render_edge(rows: list[dict], verbose: bool = False) -> list[Table]:
    edges = [r for r in _by_identity(rows) if r.get("role") == "edge"]
    headers = ["id", "host", "container", "role", "dir", "security", "authentication", "tenant"]
    active = any("active" in r for r in edges)
    if active:
        headers.append("active")
    out = []
    for r in edges:
        row = [r.get("identity"), r.get("host"), r.get("container"), r.get("role"), r.get("dir"), _security(r),
               _authentication(r), r.get("tenant") or ""]
        if active:
            row.append("yes" if r.get("active") else "no")
        out.append(row)
    return [Table("Connections", headers, out)]


LINK_ATTRS = ["linkType", "linkDir", "connectionId", "identity", "peer", "owningAddr", "capacity",
              "undeliveredCount", "unsettledCount", "deliveryCount", "presettledCount", "droppedPresettledCount",
              "acceptedCount", "rejectedCount", "releasedCount", "modifiedCount", "deliveriesDelayed1Sec",
              "deliveriesDelayed10Sec", "deliveriesStuck", "creditAvailable", "zeroCreditSeconds", "adminStatus",
              "operStatus", "linkName", "priority", "settleRate"]


def render_links(rows: list[dict], verbose: bool = False) -> list[Table]:
    headers = ["type", "dir", "conn id", "id", "peer", "class", "addr", "phs", "cap", "pri", "undel", "unsett",
               "deliv", "presett", "psdrop", "acc", "rej", "rel", "mod", "delay", "rate", "stuck", "cred", "blkd"]
    if verbose:
        headers += ["admin", "oper", "name"]
    out = []
    for r in rows:
        klass, addr, phase = key_parts(r.get("owningAddr"))
        delay = (r.get("deliveriesDelayed1Sec") or 0) + (r.get("deliveriesDelayed10Sec") or 0)
        blocked = r.get("zeroCreditSeconds")
        row = [r.get("linkType"), r.get("linkDir"), r.get("connectionId"), r.get("identity"), r.get("peer") or "",
               klass, addr, phase, r.get("capacity"), r.get("priority"), r.get("undeliveredCount"),
               r.get("unsettledCount"), r.get("deliveryCount"), r.get("presettledCount"),
               r.get("droppedPresettledCount"), r.get("acceptedCount"), r.get("rejectedCount"),
               r.get("releasedCount"), r.get("modifiedCount"), delay, r.get("settleRate"), r.get("deliveriesStuck"),
               r.get("creditAvailable"), fmt_time(blocked) if blocked else "-"]
        if verbose:
            row += [r.get("adminStatus"), r.get("operStatus"), r.get("linkName")]
        out.append(row)
    return [Table("Router Links", headers, out)]


ADDRESS_ATTRS = ["name", "distribution", "inProcess", "subscriberCount", "remoteCount", "containerCount",
                 "deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "deliveriesToContainer",
                 "deliveriesFromContainer", "deliveriesRedirectedToFallback", "priority"]


def render_addresses(rows: list[dict], verbose: bool = False) -> list[Table]:
    headers = ["class", "addr", "phs", "distrib", "pri"]
    if verbose:
        headers.append("in-proc")
    headers += ["local", "remote", "in", "out", "thru", "fallback"]
    if verbose:
        headers += ["to-proc", "from-proc"]
    out = []
    for r in sorted(rows, key=lambda r: key_parts(r.get("name"))[1]):
        klass, addr, phase = key_parts(r.get("name"))
        pri = r.get("priority")
        local = r.get("containerCount") if str(r.get("name"))[:1] in "CDEF" else r.get("subscriberCount")
        row = [klass, addr, phase, r.get("distribution"), "-" if pri is None or pri < 0 else pri]
        if verbose:
            row.append(r.get("inProcess"))
        row += [local, r.get("remoteCount"), r.get("deliveriesIngress"), r.get("deliveriesEgress"),
                r.get("deliveriesTransit"), r.get("deliveriesRedirectedToFallback")]
        if verbose:
            row += [r.get("deliveriesToContainer"), r.get("deliveriesFromContainer")]
        out.append(row)
    return [Table("Router Addresses", headers, out)]


NODE_ATTRS = ["id", "protocolVersion", "instance", "linkState", "nextHop", "validOrigins", "address",
              "routerLink", "cost", "lastTopoChange", "index"]


def render_nodes(rows: list[dict], verbose: bool = False) -> list[Table] | list[str]:
    if not rows:
        return ["Router is Standalone - No Router List"]
    changes = [r.get("lastTopoChange") for r in rows if r.get("nextHop") == "(self)" and r.get("lastTopoChange")]
    changes = changes or [r.get("lastTopoChange") for r in rows if r.get("lastTopoChange")]
    title = "Routers in the Network"
    if changes:
        when = time.strftime("%A %b %d %H:%M:%S %Y", time.gmtime(int(changes[0])))
        title += f"\nLast Topology Change: {when} GMT"
    headers = ["router-id", "next-hop", "link"] + (["ver", "cost", "neighbors", "valid-origins"] if verbose else [])
    out = []
    for r in sorted(rows, key=lambda r: str(r.get("id"))):
        hop = r.get("nextHop")
        if hop is None:
            row = [r.get("id"), "-", r.get("routerLink")]
        else:
            row = [r.get("id"), hop, "-"]
        if verbose:
            row += [r.get("protocolVersion"), r.get("cost"), str(list(r.get("linkState") or [])),
                    str(list(r.get("validOrigins") or []))]
        out.append(row)
    return [Table(title, headers, out)]


ALLOCATOR_ATTRS = ["identity", "typeName", "typeSize", "transferBatchSize", "localFreeListMax", "totalAllocFromHeap",
                   "heldByThreads", "batchesRebalancedToThreads", "batchesRebalancedToGlobal"]


def render_memory(rows: list[dict], vm_size=None, verbose: bool = False) -> list[Table] | list[str]:
    """qdstat -m: one row per type, sorted by type, named by the identity after its '/'; then the summary
    (Pooled = sum of size x total)."""
    if not rows or any(r.get("totalAllocFromHeap") is None for r in rows):
        return ["No memory statistics available"]
    headers = ["type", "size", "batch", "thread-max", "total", "in-threads", "rebal-in", "rebal-out"]
    out = [[_after_slash(r.get("identity")) or r.get("typeName"), comma(r.get("typeSize")),
            r.get("transferBatchSize"), comma(r.get("localFreeListMax")), comma(r.get("totalAllocFromHeap")),
            comma(r.get("heldByThreads")), comma(r.get("batchesRebalancedToThreads")),
            comma(r.get("batchesRebalancedToGlobal"))] for r in rows]
    out.sort(key=lambda row: str(row[0]))
    pooled = sum((r.get("typeSize") or 0) * (r.get("totalAllocFromHeap") or 0) for r in rows)
    return [Table("Memory Pools", headers, out),
            Table("\nMemory Summary", ["VmSize", "Pooled"], [[fmt_mem(vm_size), fmt_mem(pooled)]])]


def _after_slash(identity) -> str | None:
    """qdstat's _identity_clean: the part of an identity after its first '/'."""
    if not identity:
        return None
    return str(identity).split("/", 1)[-1]


VHOST_ATTRS = ["hostname", "maxConnections", "maxMessageSize", "maxConnectionsPerUser", "maxConnectionsPerHost",
               "allowUnknownUser", "groups"]


def _plain(value) -> str:
    """A value as qdstat prints it (Python's str: True/False, not true/false)."""
    return "" if value is None else str(value)


def render_vhosts(rows: list[dict], verbose: bool = False) -> list[Table] | list[str]:
    if not rows:
        return ["No Vhosts"]
    headers = ["hostname", "maxConnections", "maxMessageSize", "maxConnectionsPerUser", "maxConnectionsPerHost",
               "allowUnknownUser", "groups"]
    out = [[r.get("hostname"), _plain(r.get("maxConnections")), _plain(r.get("maxMessageSize")),
            _plain(r.get("maxConnectionsPerUser")), _plain(r.get("maxConnectionsPerHost")),
            _plain(r.get("allowUnknownUser")), str(len(r.get("groups") or {}))] for r in rows]
    return [Table("Vhosts", headers, out)]


#: vhostGroups columns after vhost and group: (attribute, kind) with kind int, bool or (wide) str
VHOST_GROUP_COLUMNS = [("maxConnectionsPerUser", int), ("maxConnectionsPerHost", int), ("maxMessageSize", int),
                       ("maxFrameSize", int), ("maxSessionWindow", int), ("maxSessions", int),
                       ("maxSenders", int), ("maxReceivers", int), ("allowDynamicSource", bool),
                       ("allowAnonymousSender", bool), ("allowUserIdProxy", bool), ("allowWaypointLinks", bool),
                       ("allowDynamicLinkRoutes", bool), ("allowAdminStatusUpdate", bool),
                       ("allowFallbackLinks", bool)]
VHOST_GROUP_STRINGS = ["users", "remoteHosts", "sources", "targets", "sourcePattern", "targetPattern"]


def _group_value(group: dict, key: str, defaults: dict, kind) -> str:
    """qdstat's showNodefault*: the group's own value, else the schema's default, else '(nil)' ('False'
    for a boolean)."""
    if key in group:
        return _plain(group[key])
    if key in defaults:
        return _plain(defaults[key])
    return "False" if kind is bool else "(nil)"


def render_vhostgroups(rows: list[dict], defaults: dict | None = None,
                       verbose: bool = False) -> list[Table] | list[str]:
    """qdstat --vhostgroups: one table of every vhost's groups' limits and switches, then per group a
    table of its (possibly long) user, host and address lists. ``defaults``: the vhostUserGroupSettings
    defaults from GET-SCHEMA."""
    if not rows:
        return ["No Vhosts"]
    defaults = defaults or {}
    headers = ["vhost", "group"] + [k for k, _ in VHOST_GROUP_COLUMNS]
    table = []
    details: list = []
    for r in rows:
        for gname, group in (r.get("groups") or {}).items():
            group = group or {}
            table.append([r.get("hostname"), gname] + [_group_value(group, k, defaults, kind)
                                                       for k, kind in VHOST_GROUP_COLUMNS])
    for r in rows:
        for gname, group in (r.get("groups") or {}).items():
            group = group or {}
            attrs = [["vhost", r.get("hostname")], ["group", gname]]
            attrs += [[k, _group_value(group, k, defaults, str)] for k in VHOST_GROUP_STRINGS]
            details.append(Table(f"\nVhost '{r.get('hostname')}' UserGroup '{gname}'", ["attr", "value"], attrs))
    return [Table("Vhost Groups", headers, table), *details]


VHOST_STATS_ATTRS = ["hostname", "connectionsApproved", "connectionsDenied", "connectionsCurrent", "sessionDenied",
                     "senderDenied", "receiverDenied", "maxMessageSizeDenied", "perUserState"]


def render_vhoststats(rows: list[dict], verbose: bool = False) -> list[Table] | list[str]:
    """qdstat --vhoststats: the counters of each vhost, then the connections of each user."""
    if not rows:
        return ["No Vhost Stats"]
    headers = VHOST_STATS_ATTRS[:8]
    stats = [[r.get("hostname")] + [_plain(r.get(a)) for a in headers[1:]] for r in rows]
    users = [[r.get("hostname"), user, _plain(state)]
             for r in rows for user, state in (r.get("perUserState") or {}).items()]
    return [Table("Vhost Stats", headers, stats),
            Table("\nVhost User Stats", ["vhost", "user", "remote hosts"], users)]


AUTOLINK_ATTRS = ["address", "direction", "phase", "externalAddress", "linkRef", "operStatus", "lastError"]


def render_autolinks(rows: list[dict], verbose: bool = False) -> list[Table] | list[str]:
    if not rows:
        return ["AutoLinks", "No AutoLinks found"]
    out = [[r.get("address"), r.get("direction"), r.get("phase"), r.get("externalAddress") or "",
            r.get("linkRef") or "", r.get("operStatus"), r.get("lastError") or ""] for r in rows]
    return [Table("AutoLinks", ["addr", "dir", "phs", "extAddr", "link", "status", "lastErr"], out)]


LINKROUTE_ATTRS = ["prefix", "pattern", "direction", "distribution", "operStatus", "addExternalPrefix",
                   "delExternalPrefix"]


def render_linkroutes(rows: list[dict], verbose: bool = False) -> list[Table] | list[str]:
    if not rows:
        return ["Link Routes", "No Link Routes found"]
    ext = any(r.get("addExternalPrefix") or r.get("delExternalPrefix") for r in rows)
    headers = ["address", "dir", "distrib", "status"] + (["add-ext-prefix", "del-ext-prefix"] if ext else [])
    out = []
    for r in rows:
        row = [r.get("prefix") or r.get("pattern"), r.get("direction"), r.get("distribution"), r.get("operStatus")]
        if ext:
            row += [r.get("addExternalPrefix") or "", r.get("delExternalPrefix") or ""]
        out.append(row)
    return [Table("Link Routes", headers, out)]


def render_broker(queues: list[dict], connections: list[dict], verbose: bool = False, **network) -> list[Table]:
    """``--broker``'s tables (tools/tdstatbroker.py, which uses this module's layout)."""
    from tools.tdstatbroker import render_broker as render

    return render(queues, connections, verbose, **network)


def render_lines(parts, csv: bool = False) -> list[str]:
    out: list[str] = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        else:  # a Table (under ``python -m tools.tdstat``, tools/tdstatbroker.py's come from a second copy)
            lines = part.lines(csv)
            out.extend(x for line in lines for x in line.split("\n"))
    return out


# -- fetching -------------------------------------------------------------------------------------------
# view name -> (entity type, attributes, renderer)
VIEWS: dict[str, tuple[str, list[str], Callable]] = {
    "general": (T + "router", GENERAL_ATTRS, render_general),
    "connections": (T + "connection", CONNECTION_ATTRS, render_connections),
    "edge": (T + "connection", CONNECTION_ATTRS, render_edge),
    "links": (T + "router.link", LINK_ATTRS, render_links),
    "address": (T + "router.address", ADDRESS_ATTRS, render_addresses),
    "nodes": (T + "router.node", NODE_ATTRS, render_nodes),
    "memory": (T + "allocator", ALLOCATOR_ATTRS, render_memory),
    "autolinks": (T + "router.config.autoLink", AUTOLINK_ATTRS, render_autolinks),
    "linkroutes": (T + "router.config.linkRoute", LINKROUTE_ATTRS, render_linkroutes),
    "vhosts": (T + "vhost", VHOST_ATTRS, render_vhosts),
    "vhostgroups": (T + "vhost", ["hostname", "groups"], render_vhostgroups),
    "vhoststats": (T + "vhostStats", VHOST_STATS_ATTRS, render_vhoststats),
}
#: Views qdstat prints without the date and router id lines (tools/qdstat displayVhosts and the like).
HEADERLESS_VIEWS = {"vhosts", "vhostgroups", "vhoststats"}
GROUP_SETTINGS = "vhostUserGroupSettings"


def fetch_view(client: ManagementClient, view: str, *, limit=None, router_id=None) -> dict:
    """The rows one view needs (plus the router's memory size for -m)."""
    entity_type, attrs, _ = VIEWS[view]
    data = {"rows": client.query(entity_type, attrs, limit=limit, router_id=router_id)}
    if view == "memory":
        [r] = client.query(T + "router", ["memoryUsage"], router_id=router_id) or [{}]
        data["vm_size"] = r.get("memoryUsage")
    if view == "vhostgroups":
        schema = client.call("GET-SCHEMA", router_id=router_id) if data["rows"] else {}
        attrs = (schema.get("entityTypes", {}).get(GROUP_SETTINGS, {}).get("attributes", {}))
        data["defaults"] = {k: a["default"] for k, a in attrs.items() if isinstance(a, dict) and "default" in a}
    return data


def render_view(view: str, data: dict, *, verbose: bool = False, csv: bool = False) -> list[str]:
    renderer = VIEWS[view][2]
    if view == "memory":
        parts = renderer(data["rows"], data.get("vm_size"), verbose=verbose)
    elif view == "vhostgroups":
        parts = renderer(data["rows"], data.get("defaults"), verbose=verbose)
    else:
        parts = renderer(data["rows"], verbose=verbose)
    return render_lines(parts, csv)


def render_log(entries: list, limit: int | None = None) -> list[str]:
    """qdstat --log's lines: ``<ctime> <module> (<level>) <text>`` per record of the router's recent log
    (GET-LOG answers ``[module, level, text, file, line, time]``), oldest first."""
    entries = list(entries or [])
    if limit is not None:
        entries = entries[-limit:] if limit > 0 else []
    out = []
    for e in entries:
        when = time.ctime(e[5]) if len(e) > 5 and isinstance(e[5], (int, float)) else "-"
        out.append(f"{when} {e[0]} ({e[1]}) {e[2]}")
    return out


def header(now: datetime.datetime, who: str) -> list[str]:
    return [now.strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC", who, ""]


def _router_id(client: ManagementClient, router_id=None) -> str:
    rows = client.query(T + "router", ["id"], router_id=router_id)
    return str(rows[0].get("id")) if rows else "-"


def run(opts, out=sys.stdout) -> int:
    now = datetime.datetime.now(datetime.timezone.utc)
    with ManagementClient(opts.bus, timeout=opts.timeout, router_id=opts.router,
                          security=getattr(opts, "security", None)) as client:
        if opts.view == "broker":
            from tools.tdstatbroker import fetch_broker

            data = fetch_broker(client, opts.limit)
            if opts.json:
                print(json.dumps(data, indent=2), file=out)
                return 0
            parts = render_broker(data["queues"], data["brokerConnections"], opts.verbose,
                                  network=data["network"], bridges=data["networkBridges"],
                                  streams=data["federationStreams"], federation_queues=data["federationQueues"],
                                  mirrors=data["mirrors"], mirror_targets=data["mirrorTargets"],
                                  acceptors=data["acceptors"])
            lines = header(now, f"broker {opts.bus}") + render_lines(parts, opts.csv)
            print("\n".join(lines), file=out)
            return 0
        if opts.view == "log":
            entries = client.call("GET-LOG", router_id=opts.router)
            if opts.json:
                print(json.dumps(entries, indent=2, default=str), file=out)
                return 0
            print("\n".join(render_log(entries, opts.limit)), file=out)
            return 0
        if opts.all_routers:
            nodes = client.query(T + "router.node", ["id"])
            ids = sorted(str(n["id"]) for n in nodes) or [_router_id(client)]
            blocks = {rid: fetch_view(client, opts.view, limit=opts.limit, router_id=rid) for rid in ids}
            if opts.json:
                print(json.dumps({rid: b["rows"] for rid, b in blocks.items()}, indent=2, default=str), file=out)
                return 0
            lines = [now.strftime("%Y-%m-%d %H:%M:%S.%f") + " UTC"]
            for rid, data in blocks.items():
                lines += [f"Router  {rid}", ""] + render_view(opts.view, data, verbose=opts.verbose,
                                                             csv=opts.csv) + [""]
            print("\n".join(lines), file=out)
            return 0
        data = fetch_view(client, opts.view, limit=opts.limit)
        if opts.json:
            print(json.dumps(data["rows"], indent=2, default=str), file=out)
            return 0
        lines = [] if opts.view in HEADERLESS_VIEWS else header(now, _router_id(client, opts.router))
        lines += render_view(opts.view, data, verbose=opts.verbose, csv=opts.csv)
        print("\n".join(lines), file=out)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdstat", description="Show the state of a trio-dispatch router or broker "
                                "(qdstat's views and layout).")
    views = p.add_mutually_exclusive_group()
    for flags, view, text in ((("-g", "--general"), "general", "router statistics"),
                              (("-c", "--connections"), "connections", "connections"),
                              (("-l", "--links"), "links", "router links"),
                              (("-a", "--address"), "address", "router addresses"),
                              (("-n", "--nodes"), "nodes", "routers in the network"),
                              (("-m", "--memory"), "memory", "memory use"),
                              (("--autolinks",), "autolinks", "auto-links"),
                              (("--linkroutes",), "linkroutes", "link routes"),
                              (("--vhosts",), "vhosts", "vhost policies"),
                              (("--vhostgroups",), "vhostgroups", "vhost user groups"),
                              (("--vhoststats",), "vhoststats", "vhost statistics"),
                              (("-e", "--edge"), "edge", "edge router connections"),
                              (("--log",), "log", "the router's recent log lines (GET-LOG)"),
                              (("--broker",), "broker",
                               "a tdbroker's queues, broker connections, network bridges, federation, mirrors and "
                               "acceptors")):
        views.add_argument(*flags, dest="view", action="store_const", const=view, help=f"show {text}")
    p.add_argument("-b", "--bus", default="127.0.0.1:5672",
                   help="host:port or amqp[s]://host:port of the router or broker")
    p.add_argument("-r", "--router", default=None, metavar="ROUTER-ID", help="ask this router of the mesh")
    p.add_argument("--all-routers", action="store_true", help="show the view for every router of the mesh")
    p.add_argument("-v", "--verbose", action="store_true", help="more columns")
    p.add_argument("--limit", type=int, default=None, help="at most this many rows")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--csv", action="store_true", help="comma separated values")
    fmt.add_argument("--json", action="store_true", help="the raw rows as JSON")
    p.add_argument("-t", "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for answers")
    add_security_options(p)
    return p


# The exit status of a process that wrote into a pipe nobody reads (128 + SIGPIPE), as shells report it for
# C tools that SIGPIPE kills.
EXIT_BROKEN_PIPE = 128 + 13


def main(argv=None) -> None:
    """tdstat's entry point. Output into a pipe whose reader has gone (``tdstat -l | head``) ends tdstat
    quietly, as it ends other Unix tools, instead of with a BrokenPipeError."""
    try:
        _main(argv)
    except BrokenPipeError:
        # Python ignores SIGPIPE, so the write raised; standard output is pointed at /dev/null so that the
        # interpreter's final flush of what is still buffered does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(EXIT_BROKEN_PIPE)


def _main(argv) -> None:
    opts = parser().parse_args(argv)
    if opts.view is None:
        opts.view = "general"
    try:
        opts.security = Security.from_options(opts, url=opts.bus)
    except SecurityOptionError as exc:
        print(f"tdstat: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        code = run(opts)
    except ManagementFailed as exc:
        print(f"tdstat: {exc}", file=sys.stderr)
        code = 1
    except SecurityOptionError as exc:
        print(f"tdstat: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:
        raise   # main's
    except Exception as exc:  # connection refused, timeout: one line, not a traceback
        print(f"tdstat: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    sys.stdout.flush()   # what is still buffered meets a closed pipe here, inside main's handler
    sys.exit(code)


if __name__ == "__main__":
    main()
