"""qdrouterd.conf-style configuration: parsing and validation.

The file is a list of sections::

    listener {
        host: 0.0.0.0       # trailing comments start with whitespace then '#'
        port: amqp
    }

Lexing (text -> raw sections, Dispatch's block form of nested maps) is :mod:`router.configlex`;
``parse_config`` turns the text into a :class:`RouterConfig` of validated
:class:`Entity` objects (values converted, defaults filled in) and raises
:class:`ConfigError` with ``path:line:`` for the first problem found.  The
attribute tables live in :mod:`router.schema`; ``validate_entity`` applies the
same checks to a single entity (for management CREATE).
"""

from __future__ import annotations

import difflib
import os
import secrets
import string
from dataclasses import dataclass, field
from typing import Any, Iterator

from . import schema
from .configlex import ConfigError, RawSection, lex
from .patterns import normalise_pattern, prefix_pattern, validate_pattern


@dataclass
class Entity:
    """One configured section."""

    type: str     # canonical section name, e.g. "listener"
    attrs: dict   # canonical camelCase name -> converted value, defaults filled in
    path: str
    line: int     # where the section starts
    #: canonical attribute name -> line it was given on (absent for defaults)
    attr_lines: dict = field(default_factory=dict, repr=False, compare=False)

    def __getitem__(self, k: str) -> Any:
        return self.attrs[k]

    def get(self, k: str, default: Any = None) -> Any:
        return self.attrs.get(k, default)

    @property
    def name(self) -> str | None:
        return self.attrs.get("name")

    def __repr__(self) -> str:
        # A repr can end up in a log line or a traceback: never with a password in it.
        return f"Entity({self.type!r}, {public_attrs(self.attrs)!r}, {self.path!r}, {self.line})"


def public_attrs(attrs: dict) -> dict:
    """*attrs* without secret values: a password that is set reads as None (Dispatch's connector
    ``saslPassword`` is write-only in the same way)."""
    return {k: (None if k in schema.SECRET_ATTRIBUTES else v) for k, v in attrs.items()}


@dataclass
class RouterConfig:
    path: str
    router: Entity
    listeners: list[Entity] = field(default_factory=list)
    connectors: list[Entity] = field(default_factory=list)
    addresses: list[Entity] = field(default_factory=list)
    link_routes: list[Entity] = field(default_factory=list)
    auto_links: list[Entity] = field(default_factory=list)
    logs: list[Entity] = field(default_factory=list)
    ssl_profiles: list[Entity] = field(default_factory=list)
    flow_records: list[Entity] = field(default_factory=list)
    policies: list[Entity] = field(default_factory=list)  # at most one
    vhosts: list[Entity] = field(default_factory=list)

    def entities(self) -> Iterator[Entity]:
        """Every entity, router first, then in the order of the lists above."""
        yield self.router
        for group in (self.listeners, self.connectors, self.addresses, self.link_routes,
                      self.auto_links, self.logs, self.ssl_profiles, self.flow_records, self.policies,
                      self.vhosts):
            yield from group

    def sections(self, kind: str) -> list[Entity]:
        """The entities of one non-singleton section type (``listener``, ``linkRoute``...)."""
        return getattr(self, _LISTS[kind])

    def http_listeners(self) -> list[Entity]:
        """The listeners with ``http: yes`` (served by router/httpserve.py)."""
        return [e for e in self.listeners if e.get("http")]


#: RouterConfig list attribute for each non-singleton section type
_LISTS = {
    "listener": "listeners", "connector": "connectors", "address": "addresses",
    "linkRoute": "link_routes", "autoLink": "auto_links", "log": "logs",
    "sslProfile": "ssl_profiles", "flowRecords": "flow_records", "policy": "policies", "vhost": "vhosts",
}

# ---------------------------------------------------------------------------
# Validation: raw items -> Entity
# ---------------------------------------------------------------------------

def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _section_type(name: str, path: str, line: int) -> schema.EntityType:
    refusal = schema.unenforced_section(name)
    if refusal is not None:
        raise ConfigError(path, line, refusal)
    et = schema.entity_type(name)
    if et is not None:
        return et
    if schema.camel_case(name) in schema.UNSUPPORTED_SECTIONS:
        raise ConfigError(path, line, f"section '{name}' is not supported by tdrouterd")
    known = list(schema.ENTITY_TYPES)
    hint = _suggest(schema.camel_case(name), known + ["container"])
    raise ConfigError(path, line, f"unknown section '{name}'{hint}; expected one of {', '.join(known)}")


def _random_id(mode: str) -> str:
    alphabet = string.ascii_letters + string.digits
    return mode + "".join(secrets.choice(alphabet) for _ in range(15))


def _build(et: schema.EntityType, items: list, path: str, line: int,
           label: str | None = None, nested_lines: dict | None = None) -> Entity:
    """Convert and check *items* [(key, value, line)] of one section of type *et*."""
    label = label or et.name
    attrs: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key, value, ln in items:
        canon = et.resolve(key)
        if canon is None:
            raise ConfigError(path, ln, f"{label}: unknown attribute '{key}'"
                              f"{_suggest(schema.camel_case(key), et.known_names())}")
        if canon in attrs:
            how = f"'{key}' sets '{canon}', which is" if key != canon else f"'{canon}' is"
            raise ConfigError(path, ln, f"{label}: duplicate attribute: {how} already set at line {lines[canon]}")
        try:
            attrs[canon] = et.attrs[canon].convert(value)
        except ValueError as e:
            raise ConfigError(path, ln, f"{label}: {e}") from None
        refusal = schema.unenforced(et.name, canon, attrs[canon])
        if refusal is not None:
            raise ConfigError(path, ln, f"{label}: {refusal}")
        lines[canon] = ln
    for a in et:
        if a.name not in attrs:
            if a.required:
                raise ConfigError(path, line, f"{label}: missing required attribute '{a.name}'")
            attrs[a.name] = a.default
    lines.update(nested_lines or {})
    ent = Entity(et.name, attrs, path, line, lines)
    _RULES.get(et.name, lambda e, lbl: None)(ent, label)
    return ent


def _err(ent: Entity, attr: str | None, message: str) -> ConfigError:
    line = ent.attr_lines.get(attr, ent.line) if attr else ent.line
    return ConfigError(ent.path, line, message)


def _one_of(ent: Entity, label: str, a: str, b: str) -> None:
    if (ent[a] is None) == (ent[b] is None):
        raise _err(ent, None, f"{label}: give exactly one of '{a}' or '{b}'")


def _check_match(ent: Entity, label: str) -> None:
    """prefix xor pattern, both well formed."""
    _one_of(ent, label, "prefix", "pattern")
    if ent["prefix"] is not None:
        p = ent["prefix"]
        if not p.strip("./"):
            raise _err(ent, "prefix", f"{label}: prefix must not be empty")
        if "*" in p or "#" in p:
            raise _err(ent, "prefix", f"{label}: prefix {p!r} contains a wildcard; use 'pattern' instead")
    else:
        p = ent["pattern"]
        if not p.strip("./"):
            raise _err(ent, "pattern", f"{label}: pattern must not be empty")
        try:
            validate_pattern(p)
        except ValueError as e:
            raise _err(ent, "pattern", f"{label}: {e}") from None


def _match_key(ent: Entity) -> str:
    """Normalised pattern an address/linkRoute section occupies in its table."""
    if ent["prefix"] is not None:
        return prefix_pattern(ent["prefix"])
    return normalise_pattern(ent["pattern"])


def _rules_router(ent: Entity, label: str) -> None:
    if ent["id"] is None:
        ent.attrs["id"] = _random_id(ent["mode"])
    rid = ent["id"]
    if not rid or any(c.isspace() or not c.isprintable() for c in rid):
        raise _err(ent, "id", f"{label}: id {rid!r} must be non-empty, without whitespace or control characters")
    if ent["name"] is None:
        ent.attrs["name"] = rid


#: failoverUrls schemes (Dispatch's: ``[(amqp|amqps|ws|wss)://]host_or_ip[:port]``) and their default ports.
FAILOVER_SCHEMES = {"amqp": 5672, "amqps": 5671, "ws": 80, "wss": 443}


def failover_server_list(urls: str) -> list[dict]:
    """Dispatch's listener ``failoverUrls`` (comma separated ``[scheme://]host[:port]``) as the entries of the
    OPEN property ``failover-server-list``: ``{"network-host", "port", "scheme"?}`` each (values strings, as
    Dispatch sends them; a port missing from the URL is its scheme's, amqp's without one). ValueError names
    the URL that is not of that form."""
    entries = []
    for url in (u.strip() for u in urls.split(",")):
        if not url:
            raise ValueError(f"empty URL in {urls!r}; write [amqp|amqps|ws|wss://]host[:port], comma separated")
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "", url
        elif scheme not in FAILOVER_SCHEMES:
            raise ValueError(f"{url!r}: scheme {scheme!r} is none of {', '.join(FAILOVER_SCHEMES)}")
        if rest.startswith("["):   # [IPv6]:port
            host, _, port = rest[1:].partition("]")
            port = port[1:] if port.startswith(":") else port
        else:
            host, _, port = rest.rpartition(":") if ":" in rest else (rest, "", "")
        if not host or any(c in host for c in "/@ ") or (port and not (port.isdigit() and 0 < int(port) < 65536)):
            raise ValueError(f"{url!r} is not [amqp|amqps|ws|wss://]host[:port]")
        entry = {"network-host": host, "port": port or str(FAILOVER_SCHEMES[scheme or "amqp"])}
        if scheme:
            entry["scheme"] = scheme
        entries.append(entry)
    return entries


def _rules_connection(ent: Entity, label: str) -> None:
    if ent.type == "connector" and ent["retryMaxDelaySeconds"] < ent["retryDelaySeconds"]:
        raise _err(ent, "retryMaxDelaySeconds",
                   f"{label}: retryMaxDelaySeconds {ent['retryMaxDelaySeconds']} is below "
                   f"retryDelaySeconds {ent['retryDelaySeconds']}")
    if ent["name"] is None:
        ent.attrs["name"] = f"{ent.type}/{ent['host']}:{ent['port']}"
    if ent.type == "listener" and ent["failoverUrls"] is not None:
        try:
            failover_server_list(ent["failoverUrls"])
        except ValueError as e:
            raise _err(ent, "failoverUrls", f"{label}: failoverUrls: {e}") from None
    if ent.type == "listener" and ent["http"]:
        _rules_http_listener(ent, label)


def _rules_http_listener(ent: Entity, label: str) -> None:
    """``http: yes`` (router/httpserve.py): what an HTTP listener cannot do is refused, not ignored."""
    if ent.path == "<management>":
        raise _err(ent, "http", f"{label}: an HTTP listener cannot be created through management in tdrouterd: "
                   "configure it in the file (it is started with the router)")
    if (ent["role"] or "normal") != "normal":
        raise _err(ent, "role", f"{label}: an HTTP listener serves the console and metrics; role "
                   f"{ent['role']} needs an AMQP listener (remove http or role)")
    root = ent["httpRootDir"]
    if root is not None and not os.path.isdir(root):
        raise _err(ent, "httpRootDir", f"{label}: httpRootDir {root!r} is not a directory")


def _rules_address(ent: Entity, label: str) -> None:
    _check_match(ent, label)   # enableFallback: yes is refused (schema.NOT_IMPLEMENTED) before this


def _rules_link_route(ent: Entity, label: str) -> None:
    # containerId and connection: either, both (a connection matching either is the container, as
    # Dispatch's route_control.c declares one identifier for the two) or neither (a route this router
    # only forwards towards the router whose container has it; older mesh configurations do that).
    _check_match(ent, label)


def _rules_auto_link(ent: Entity, label: str) -> None:
    # containerId and connection as for linkRoute; with neither the auto-link never attaches (the daemon
    # warns at start-up).
    if ent["phase"] is None:
        ent.attrs["phase"] = 1 if ent["direction"] == "in" else 0   # fallback: yes is refused (schema.NOT_IMPLEMENTED)


def _rules_log(ent: Entity, label: str) -> None:
    if ent["name"] is None:
        ent.attrs["name"] = f"log/{ent['module']}"


def _rules_vhost(ent: Entity, label: str) -> None:
    from router.policy import PolicyError, vhost_from_attrs

    try:
        vhost_from_attrs(ent.attrs)
    except PolicyError as exc:
        key = exc.key or ""
        line = ent.attr_lines.get(key) or ent.attr_lines.get(key.split(".")[0]) or ent.line
        raise ConfigError(ent.path, line, f"{label} {ent['hostname']!r}: {exc}") from None
    if ent["name"] is None:
        ent.attrs["name"] = ent["hostname"]


_RULES = {
    "router": _rules_router, "listener": _rules_connection, "connector": _rules_connection,
    "address": _rules_address, "linkRoute": _rules_link_route, "autoLink": _rules_auto_link,
    "log": _rules_log, "vhost": _rules_vhost,
}


def validate_entity(type: str, attrs: dict, path: str = "<management>", line: int = 0) -> Entity:
    """Validate one entity given as a dict (camelCase, dashed or legacy names; values
    as strings or already typed), with the same checks as the config file.

    Names of address/linkRoute/autoLink entities are left as given (None when
    absent): the caller assigns one.  A ``type`` key naming the same entity
    type is ignored.
    """
    refusal = schema.unenforced_section(type.removeprefix(schema.SCHEMA_PREFIX))
    if refusal is not None:
        raise ConfigError(path, line, refusal)
    et = schema.entity_type(type)
    if et is None:
        raise ConfigError(path, line, f"unknown entity type '{type}'"
                          f"{_suggest(type, list(schema.ENTITY_TYPES))}")
    items = []
    for k, v in attrs.items():
        if v is None or (k == "type" and schema.entity_type(str(v)) is et):
            continue
        items.append((k, v, line))
    return _build(et, items, path, line)


# ---------------------------------------------------------------------------
# Whole file
# ---------------------------------------------------------------------------

def _merge_router(parts: list[RawSection], path: str) -> tuple[list, int]:
    """Items of the router section merged with a legacy 'container' section."""
    routers = [s for s in parts if s.name != "container"]
    containers = [s for s in parts if s.name == "container"]
    for group, what in ((routers, "router"), (containers, "container")):
        if len(group) > 1:
            raise ConfigError(path, group[1].line,
                              f"duplicate '{what}' section (first at line {group[0].line}); "
                              "only one is allowed")
    items = [it for s in routers + containers for it in s.items]
    first = (routers + containers)[0].line if routers or containers else 0
    return items, first


def _assign_names(ents: list[Entity], kind: str) -> None:
    """Unique names within one section type; explicit names must not repeat."""
    taken: dict[str, Entity] = {}
    for e in ents:
        if "name" in e.attr_lines:
            if e["name"] in taken:
                prev = taken[e["name"]]
                raise _err(e, "name", f"{kind}: name '{e['name']}' is already used by the "
                           f"{kind} at line {prev.line}")
            taken[e["name"]] = e
    for index, e in enumerate(ents):
        if "name" in e.attr_lines:
            continue
        base = e["name"] or f"{kind}/{index}"
        name, n = base, 1
        while name in taken:
            name, n = f"{base}/{n}", n + 1
        e.attrs["name"] = name
        taken[name] = e


def _check_duplicates(ents: list[Entity], kind: str, key) -> None:
    seen: dict[Any, Entity] = {}
    for e in ents:
        k = key(e)
        if k in seen:
            what = "prefix" if e["prefix"] is not None else "pattern"
            raise _err(e, what, f"{kind}: {what} '{e[what]}' duplicates the {kind} at line "
                       f"{seen[k].line} (both match '{k[0] if isinstance(k, tuple) else k}')")
        seen[k] = e


def parse_config(text: str, path: str = "<config>") -> RouterConfig:
    """Parse and validate qdrouterd.conf-style *text*; raise ConfigError on the first problem."""
    raw = lex(text, path)
    groups: dict[str, list[RawSection]] = {name: [] for name in schema.ENTITY_TYPES}
    for sec in raw:
        groups[_section_type(sec.name, path, sec.line).name].append(sec)

    items, line = _merge_router(groups.pop("router"), path)
    router = _build(schema.ENTITY_TYPES["router"], items, path, line)
    cfg = RouterConfig(path, router)
    for kind, attr in _LISTS.items():
        ents = [_build(schema.ENTITY_TYPES[kind], s.items, path, s.line, nested_lines=s.nested_lines)
                for s in groups[kind]]
        _assign_names(ents, kind)
        setattr(cfg, attr, ents)

    # References from listeners/connectors to sslProfile sections, and the profiles' files, are checked
    # by router/security.py (daemon check_config), which needs the files on disk.
    modules: dict[str, Entity] = {}
    for e in cfg.logs:
        if e["module"] in modules:
            raise _err(e, "module", f"log: module '{e['module']}' is already configured at line "
                       f"{modules[e['module']].line}")
        modules[e["module"]] = e
    _check_duplicates(cfg.addresses, "address", _match_key)
    _check_duplicates(cfg.link_routes, "linkRoute", lambda e: (_match_key(e), e["direction"]))
    if len(cfg.policies) > 1:
        raise ConfigError(path, cfg.policies[1].line, "policy: only one policy section is allowed "
                          f"(the first is at line {cfg.policies[0].line})")
    _check_vhosts(cfg)
    return cfg


def _check_vhosts(cfg: RouterConfig) -> None:
    """Vhosts act only under ``policy { enableVhostPolicy: true }``: one without it would be a policy
    accepted and ignored, so it is refused; hostnames are unique."""
    enabled = bool(cfg.policies and cfg.policies[0]["enableVhostPolicy"])
    seen: dict[str, Entity] = {}
    for e in cfg.vhosts:
        if not enabled:
            raise _err(e, None, f"vhost {e['hostname']!r} would not be enforced: vhost policies apply only with "
                                "'policy { enableVhostPolicy: true }'; add that section or remove the vhost")
        if e["hostname"] in seen:
            raise _err(e, "hostname", f"vhost: hostname {e['hostname']!r} is already defined at line "
                                      f"{seen[e['hostname']].line}")
        seen[e["hostname"]] = e
    if cfg.policies and not enabled:
        p = cfg.policies[0]
        for attr in ("enableVhostNamePatterns", "policyDir"):
            if attr in p.attr_lines and p[attr]:
                raise _err(p, attr, f"policy: {attr} would not be enforced without enableVhostPolicy: true")


def load_config(path: str) -> RouterConfig:
    """Read and parse the file at *path*."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError(str(path), 0, f"cannot read configuration file: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), 0, f"configuration file is not UTF-8: {e}") from None
    return parse_config(text, str(path))
