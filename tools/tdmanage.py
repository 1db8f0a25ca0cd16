"""``tdmanage``: qdmanage for trio-dispatch routers and brokers (AMQP management from the command line).

    tdmanage query --type connection [identity host container]     rows as a JSON list of objects
    tdmanage read --type address --name news                        one entity
    tdmanage create --type address prefix=news distribution=multicast
    tdmanage update --type router.link --identity 7 adminStatus=disabled
    tdmanage delete --type listener --name extra
    tdmanage get-types | get-attributes | get-operations [TYPE]
    tdmanage get-mgmt-nodes | get-schema
    tdmanage purge --type queue --name orders                       any other operation, e.g. on a broker
    tdmanage startBrokerConnection --name peer-router

Output is indented JSON as qdmanage prints it; ``--json`` prints it on one line for scripts. A request the
agent refuses prints ``tdmanage: <status> <text>: <description>`` on stderr and exits 1.

A secured router: ``-b amqps://host:port`` (or ``--ssl-*``) with ``--sasl-username USER`` and the password
from ``--sasl-password-file`` or ``TD_SASL_PASSWORD`` (tools/security.py; never on the command line). The
login is PLAIN by default; ``--sasl-mechanisms SCRAM-SHA-256`` (or -512) logs in with SCRAM through
tools/engineclient.py, since proton's SASL has no SCRAM.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tools.mgmtclient import DEFAULT_TIMEOUT, ManagementClient, ManagementFailed
from tools.security import Security, SecurityOptionError, add_security_options

NODE_OPERATIONS = {"get-types": "GET-TYPES", "get-attributes": "GET-ATTRIBUTES",
                   "get-operations": "GET-OPERATIONS", "get-mgmt-nodes": "GET-MGMT-NODES",
                   "get-schema": "GET-SCHEMA"}


def parse_value(text: str) -> Any:
    """k=v values go as strings (the agent converts them by its schema), except JSON lists and maps."""
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def parse_assignments(items: list[str]) -> dict:
    attrs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"tdmanage: expected name=value, got {item!r}")
        attrs[key] = parse_value(value)
    return attrs


def run(opts) -> Any:
    """Perform the request; returns what to print (None for nothing)."""
    op = opts.operation
    with ManagementClient(opts.bus, timeout=opts.timeout, router_id=opts.router,
                          security=getattr(opts, "security", None)) as client:
        if op == "query":
            # Without --type, every entity (Dispatch's untyped QUERY); attributes that do not apply (None)
            # are left out of each entity, as qdmanage prints them (get_dicts(clean=True)).
            rows = client.query(opts.type, opts.args, limit=opts.limit)
            return [{k: v for k, v in row.items() if v is not None} for row in rows]
        if op in NODE_OPERATIONS:
            props = {"entityType": opts.type or (opts.args[0] if opts.args else None)}
            return client.call(NODE_OPERATIONS[op], name="self", **props)
        if op in ("read", "delete"):
            if not (opts.name or opts.identity):
                raise SystemExit(f"tdmanage: {op} needs --name or --identity")
            body = client.call(op.upper(), type=opts.type or "org.amqp.management", name=opts.name,
                               identity=opts.identity)
            return body if op == "read" else None
        attrs = parse_assignments(opts.args)
        if op in ("create", "update"):
            if not opts.type:
                raise SystemExit(f"tdmanage: {op} needs --type")
            if op == "update" and not (opts.name or opts.identity):
                raise SystemExit("tdmanage: update needs --name or --identity")
            return client.call(op.upper(), type=opts.type, name=opts.name, identity=opts.identity, body=attrs)
        # Any other operation (PURGE, startBrokerConnection...): name/identity and k=v as the body.
        kw = {"type": opts.type} if opts.type else {}
        return client.call(op, name=opts.name, identity=opts.identity, body=attrs, **kw)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tdmanage", description="AMQP management of a trio-dispatch router or "
                                "broker (qdmanage's commands).", epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("operation", help="query, read, create, update, delete, get-types, get-attributes, "
                   "get-operations, get-mgmt-nodes, get-schema, or any operation name")
    p.add_argument("args", nargs="*", help="attribute names (query) or name=value pairs (create, update)")
    p.add_argument("--type", help="entity type, full or short (connection, router.link, address, queue...)")
    p.add_argument("--name", help="entity name")
    p.add_argument("--identity", help="entity identity")
    p.add_argument("-b", "--bus", default="127.0.0.1:5672",
                   help="host:port or amqp[s]://host:port of the router or broker")
    p.add_argument("-r", "--router", default=None, metavar="ROUTER-ID", help="manage this router of the mesh")
    p.add_argument("--limit", type=int, default=None, help="query: at most this many rows")
    p.add_argument("--json", action="store_true", help="compact one-line JSON")
    p.add_argument("-t", "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds to wait for answers")
    add_security_options(p)
    return p


def main(argv=None) -> None:
    opts = parser().parse_intermixed_args(argv)
    opts.operation = opts.operation if opts.operation not in NODE_OPERATIONS.values() else opts.operation.lower()
    if opts.operation.lower() in ("query", "read", "create", "update", "delete"):
        opts.operation = opts.operation.lower()
    try:
        opts.security = Security.from_options(opts, url=opts.bus)
    except SecurityOptionError as exc:
        print(f"tdmanage: {exc}", file=sys.stderr)
        sys.exit(2)
    try:
        result = run(opts)
    except ManagementFailed as exc:
        print(f"tdmanage: {exc}", file=sys.stderr)
        sys.exit(1)
    except SystemExit:
        raise
    except SecurityOptionError as exc:
        print(f"tdmanage: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # connection refused, timeout: one line, not a traceback
        print(f"tdmanage: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
    if result is not None:
        print(json.dumps(result, default=str) if opts.json else json.dumps(result, indent=2, default=str))
    sys.exit(0)


if __name__ == "__main__":
    main()
