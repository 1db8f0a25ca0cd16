"""tdbroker configuration: the Artemis ``broker.xml`` vocabulary, parsed and validated.

``load_broker_config(path)`` / ``parse_broker_config(text, path)`` return a
:class:`BrokerConfig` or raise :class:`BrokerConfigError` whose ``str()`` is
``"FILE:LINE: message"``.  The XML is parsed with defusedxml (no DTDs, entities
or external references).  Which elements are handled, ignored with a warning,
or refused is tabled in :mod:`broker.xmlschema`; the reference for users is
``docs/broker-configuration.md``.

It is the one walk over ``<core>`` (the dispatch to each element's parser and the checks that span
elements); the larger vocabularies have modules of their own (:mod:`broker.configconn` for
``<broker-connections>``, :mod:`broker.netconfig`, :mod:`broker.fedconfig`, :mod:`broker.diverts`,
:mod:`broker.xmlschema`).

The objects it returns, and Artemis' address wildcards, are in
:mod:`broker.configmodel` (re-exported here). Address wildcards follow Artemis:
words separated by ``.``, ``*`` matches exactly one word, ``#`` matches zero or
more words (:func:`artemis_match`). :meth:`BrokerConfig.settings_for` merges
every matching ``<address-setting>`` the way Artemis does: the most specific
match wins field by field, the less specific ones fill in what it leaves unset,
and the documented defaults fill in the rest.
"""

from __future__ import annotations

import pathlib

from . import diverts as divertconfig, netconfig, xmlschema as xs
from . import fedconfig  # Artemis core federation: <connectors>, <federations> ... (broker/fedconfig.py)
from .configmodel import (  # the objects this parser builds (re-exported: import them from here)
    ANY_WORDS, DELIMITER, Acceptor, AddressConfig,
    AddressSettings, BrokerConfig, BrokerConnection, BrokerConnectionElement, FlowRecordsConfig, QueueConfig,
    artemis_match, check_wildcard_words, match_specificity_cmp,
)
from .configconn import parse_broker_connections  # <broker-connections> (broker/configconn.py)
from .credentials import Credentials, CredentialsError
from .largemessage import DEFAULT_MIN_LARGE_MESSAGE_SIZE
from .selector import SelectorError, parse as parse_selector
from .security import (
    ENFORCED_PERMISSIONS, ROLES_FILE, UNENFORCED_PERMISSIONS, SecurityFileError, SecuritySetting, load_security,
    uri_tls, users_path,
)
from .xmlschema import BrokerConfigError, Ctx, children, did_you_mean, unknown_element

__all__ = [
    "Acceptor", "AddressConfig", "AddressSettings", "BrokerConfig", "BrokerConfigError", "FlowRecordsConfig",
    "BrokerConnection", "BrokerConnectionElement", "QueueConfig", "artemis_match",
    "load_broker_config", "match_specificity_cmp", "parse_broker_config",
]

def _address_setting_match(ctx: Ctx, elem, raw: str) -> str:
    """Validate an address-setting ``match``; Artemis allows ``#`` only as the last word."""
    pattern = raw
    if pattern.endswith(ANY_WORDS) and len(pattern) > 1 and not pattern.endswith(DELIMITER + ANY_WORDS):
        # Older stock broker.xml files say "activemq.management#"; Artemis treats it as ".#".
        pattern = pattern[:-1] + DELIMITER + ANY_WORDS
        ctx.warn(elem, f"match {raw!r} read as {pattern!r}; write the '{ANY_WORDS}' as a word of its own")
    if ANY_WORDS in pattern[:-1]:
        raise ctx.error(elem, f"address-setting match {raw!r}: '#' may only be the last word")
    check_wildcard_words(ctx, elem, "address-setting match", pattern)
    return pattern


# --- parsing -----------------------------------------------------------------

def load_broker_config(path) -> BrokerConfig:
    """Read and parse the broker.xml at ``path``."""
    p = pathlib.Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise BrokerConfigError(str(p), 0, f"cannot read broker configuration: {exc.strerror}") from None
    return parse_broker_config(data, str(p))


def parse_broker_config(text, path: str = "<broker.xml>") -> BrokerConfig:
    """Parse broker.xml ``text`` (str or bytes); errors name ``path``."""
    ctx = Ctx(path)
    root = xs.load_tree(text, path)
    ns, name = xs.split_tag(root.tag)
    if name != "configuration" or ns not in ("", xs.ROOT_NS):
        raise ctx.error(root, f"the root element must be <configuration xmlns=\"{xs.ROOT_NS}\">, got <{name}>")
    core = None
    for child in root:
        if not isinstance(child.tag, str):
            continue
        cns, cname = xs.split_tag(child.tag)
        if cname != "core" or cns not in xs.CORE_NAMESPACES:
            raise ctx.error(child, f"unknown element <{cname}> in <configuration>; only "
                                   f"<core xmlns=\"{xs.CORE_NS}\"> is supported")
        if core is not None:
            raise ctx.error(child, f"duplicate <core> (first at line {core.line})")
        core = child
    if core is None:
        raise ctx.error(root, f"<configuration> has no <core xmlns=\"{xs.CORE_NS}\"> element")
    return _parse_core(ctx, core)


def _once(ctx: Ctx, seen: dict, name: str, elem) -> None:
    if name in seen:
        raise ctx.error(elem, f"duplicate <{name}> (first at line {seen[name]})")
    seen[name] = elem.line


def _parse_core(ctx: Ctx, core) -> BrokerConfig:
    cfg = BrokerConfig(path=ctx.path, name=None, persistence_enabled=xs.DEFAULT_PERSISTENCE_ENABLED,
                       journal_directory=xs.DEFAULT_JOURNAL_DIRECTORY,
                       journal_file_size=xs.DEFAULT_JOURNAL_FILE_SIZE, acceptors=[], addresses=[],
                       address_settings=[], broker_connections=[], warnings=ctx.warnings)
    seen: dict[str, int] = {}
    known = (set(xs.CORE_HANDLED) | xs.CORE_IGNORED | set(xs.CORE_UNSUPPORTED) | set(xs.CORE_LIMITS_UNENFORCED)
             | set(xs.CORE_SECURITY_UNENFORCED) | set(xs.CORE_SECURITY_ENFORCED) | set(netconfig.CORE_ELEMENTS)
             | set(divertconfig.CORE_ELEMENTS))
    known |= set(fedconfig.CORE_ELEMENTS)
    fed_elements: dict = {}   # parsed after the loop: federations refer to connectors written anywhere
    security_el = None
    security_settings = ([], None)
    credentials = Credentials(ctx.path)
    try:
        credentials.check()   # a store others may read is refused even before a connection needs it
    except CredentialsError as exc:
        raise BrokerConfigError(exc.path, exc.line, exc.message) from None
    for name, el in children(ctx, core):
        if name in xs.CORE_UNSUPPORTED:
            raise ctx.error(el, f"<{name}> is not supported by tdbroker: {xs.CORE_UNSUPPORTED[name]}")
        if name == "security-enabled":
            _once(ctx, seen, name, el)
            cfg.security_enabled = ctx.value(el, "bool")
            security_el = el
            continue
        if name == "security-settings":
            _once(ctx, seen, name, el)
            security_settings = (_parse_security_settings(ctx, el), el)
            continue
        if name in xs.CORE_SECURITY_UNENFORCED:
            _once(ctx, seen, name, el)
            if not _security_off(ctx, el, name):
                raise ctx.error(el, f"<{name}> is not enforced yet: {xs.CORE_SECURITY_UNENFORCED[name]}")
            continue
        if name in xs.CORE_IGNORED:
            ctx.warn(el, f"<{name}> is accepted but ignored by tdbroker")
            continue
        if name in xs.CORE_LIMITS_UNENFORCED:
            _unenforced_limit(ctx, el, name, xs.CORE_LIMITS_UNENFORCED[name])
            continue
        if name in netconfig.CORE_ELEMENTS:   # ActiveMQ networks of brokers (broker/netconfig.py)
            _once(ctx, seen, name, el)
            if name == "networkConnectors":
                cfg.network_connectors = netconfig.parse_network_connectors(ctx, el, credentials)
            elif name == "networkConnectorStartAsync":
                cfg.network_connector_start_async = ctx.value(el, "bool")
            else:
                cfg.bridge_policies = netconfig.parse_destination_policy(ctx, el)
            continue
        if name in divertconfig.CORE_ELEMENTS:   # Artemis diverts (broker/diverts.py)
            _once(ctx, seen, name, el)
            cfg.diverts = divertconfig.parse_diverts(ctx, el)
            continue
        if name in fedconfig.CORE_ELEMENTS:
            _once(ctx, seen, name, el)
            fed_elements[name] = el
            continue
        if name not in xs.CORE_HANDLED:
            raise unknown_element(ctx, el, "core", known)
        _once(ctx, seen, name, el)
        if name == "name":
            cfg.name = ctx.text(el)
        elif name == "persistence-enabled":
            cfg.persistence_enabled = ctx.value(el, "bool")
        elif name == "journal-directory":
            cfg.journal_directory = ctx.text(el)
        elif name == "journal-file-size":
            cfg.journal_file_size = ctx.value(el, "size")
            if cfg.journal_file_size <= 0:
                raise ctx.error(el, f"<journal-file-size> must be positive, got {el.text.strip()!r}")
        elif name == "journal-sync-transactional":
            cfg.journal_sync_transactional = ctx.value(el, "bool")
        elif name == "journal-sync-non-transactional":
            cfg.journal_sync_non_transactional = ctx.value(el, "bool")
        elif name == "acceptors":
            cfg.acceptors = _parse_acceptors(ctx, el)
        elif name == "addresses":
            cfg.addresses = _parse_addresses(ctx, el)
        elif name == "address-settings":
            cfg.address_settings = _parse_address_settings(ctx, el)
        elif name == "broker-connections":
            cfg.broker_connections = parse_broker_connections(ctx, el, credentials)
        elif name == "flow-records":
            cfg.flow_records = _parse_flow_records(ctx, el)
        elif name == "global-max-size":
            cfg.global_max_size = ctx.value(el, "size")
            cfg.global_max_size_line = el.line
        elif name == "paging-directory":
            cfg.paging_directory = ctx.text(el)
        elif name == "large-messages-directory":
            cfg.large_messages_directory = ctx.text(el)
        elif name == "max-disk-usage":
            cfg.max_disk_usage = ctx.value(el, "int")
            if cfg.max_disk_usage != -1 and not 0 <= cfg.max_disk_usage <= 100:
                raise ctx.error(el, f"<max-disk-usage> is a percentage (0-100) or -1 (no check), "
                                    f"got {cfg.max_disk_usage}")
        elif name == "min-disk-free":
            cfg.min_disk_free = ctx.value(el, "size")
            if cfg.min_disk_free < -1:
                raise ctx.error(el, f"<min-disk-free> is a byte size or -1 (no check), got {cfg.min_disk_free}")
        elif name == "disk-scan-period":
            cfg.disk_scan_period_ms = ctx.value(el, "long")
            if cfg.disk_scan_period_ms <= 0:
                raise ctx.error(el, f"<disk-scan-period> must be a positive number of ms, "
                                    f"got {cfg.disk_scan_period_ms}")
    (cfg.connectors, cfg.discovery_groups, cfg.broadcast_groups,
     cfg.federations) = fedconfig.parse_core_elements(ctx, fed_elements, credentials)
    _load_security(ctx, cfg, security_el)
    settings, settings_el = security_settings
    if settings:
        if not cfg.security_enabled:
            raise ctx.error(settings_el, "<security-setting> permissions need logins to check: with security off "
                                         "(no users file, or <security-enabled>false) they would be ignored; add "
                                         "artemis-users.properties or remove the <security-setting> elements")
        cfg.security.settings = settings
    return cfg


def _load_security(ctx: Ctx, cfg: BrokerConfig, el) -> None:
    """``<security-enabled>`` with the properties login module's files beside broker.xml (broker/security.py).

    true: the users file must exist (else a FILE:LINE error: refusing beats an open broker the operator
    believes closed). Absent: Artemis' default is true, so a users file turns security on; without one the
    broker is open and the daemon warns. false: open; the files are not read."""
    if cfg.security_enabled is False:
        return
    try:
        security = load_security(ctx.path)
    except SecurityFileError as exc:
        raise BrokerConfigError(exc.path, exc.line, exc.message) from None
    if security is None:
        if cfg.security_enabled:
            raise ctx.error(el, f"<security-enabled>true but there is no users file {users_path(ctx.path)}: "
                                "no one could log in. Create it (one 'user = password' line per user, "
                                f"roles in {ROLES_FILE}) or set <security-enabled>false</security-enabled>")
        return
    cfg.security_enabled = True
    cfg.security = security
    ctx.warnings.extend(security.warnings)


def _security_off(ctx: Ctx, el, name: str) -> bool:
    """Whether a security element (xmlschema.CORE_SECURITY_UNENFORCED) has the value that means "off"."""
    if name in xs.CORE_SECURITY_BOOLEANS:
        return ctx.value(el, "bool") is False
    return False


def _parse_security_settings(ctx: Ctx, parent) -> list[SecuritySetting]:
    """``<security-setting match><permission type roles/>``: the permission types tdbroker checks
    (security.ENFORCED_PERMISSIONS); the others are refused with the reason."""
    out: list[SecuritySetting] = []
    matches: dict[str, int] = {}
    for name, el in children(ctx, parent):
        if name != "security-setting":
            raise unknown_element(ctx, el, "security-settings", ["security-setting"])
        ctx.check_attrs(el, ("match",))
        match = _address_setting_match(ctx, el, ctx.attr(el, "match", required=True))
        if match in matches:
            raise ctx.error(el, f"duplicate security-setting match {match!r} (first at line {matches[match]})")
        matches[match] = el.line
        permissions: dict[str, frozenset] = {}
        for pname, pel in children(ctx, el):
            if pname != "permission":
                raise unknown_element(ctx, pel, "security-setting", ["permission"])
            ctx.check_attrs(pel, ("type", "roles"))
            kind = ctx.attr(pel, "type", required=True)
            if kind in UNENFORCED_PERMISSIONS:
                raise ctx.error(pel, f"permission type {kind!r} is not enforced yet: {UNENFORCED_PERMISSIONS[kind]}; "
                                     f"remove it (checked: {', '.join(ENFORCED_PERMISSIONS)})")
            if kind not in ENFORCED_PERMISSIONS:
                raise ctx.error(pel, f"unknown permission type {kind!r}{did_you_mean(kind, ENFORCED_PERMISSIONS)}")
            if kind in permissions:
                raise ctx.error(pel, f"permission type {kind!r} given twice in this security-setting")
            roles = ctx.attr(pel, "roles", required=True)
            permissions[kind] = frozenset(r.strip() for r in roles.split(",") if r.strip())
        out.append(SecuritySetting(match, permissions, el.line))
    return out


def _parse_flow_records(ctx: Ctx, el) -> FlowRecordsConfig:
    ctx.check_attrs(el, xs.FLOW_RECORDS_ATTRS)
    directory = ctx.attr(el, "directory", required=True)
    raw = el.attrib.get("sample")
    sample = xs.DEFAULT_FLOW_SAMPLE
    if raw is not None:
        try:
            sample = float(raw)
        except ValueError:
            raise ctx.error(el, f"<flow-records> sample must be a number in (0, 1], got {raw!r}") from None
        if not 0.0 < sample <= 1.0:
            raise ctx.error(el, f"<flow-records> sample must be in (0, 1], got {raw!r}")
    rotate = ctx.attr(el, "rotate-mb", "int", xs.DEFAULT_FLOW_ROTATE_MB)
    if rotate <= 0:
        raise ctx.error(el, f"<flow-records> rotate-mb must be positive, got {rotate}")
    for child in el:
        if isinstance(child.tag, str):
            raise unknown_element(ctx, child, "flow-records", [])
    return FlowRecordsConfig(directory, sample, rotate, el.line)


def _parse_acceptors(ctx: Ctx, parent) -> list[Acceptor]:
    out: list[Acceptor] = []
    names: dict[str, int] = {}
    for name, el in children(ctx, parent):
        if name != "acceptor":
            raise unknown_element(ctx, el, "acceptors", ["acceptor"])
        ctx.check_attrs(el, ("name",))
        aname = ctx.attr(el, "name") or f"acceptor-{len(out) + 1}"
        if aname in names:
            raise ctx.error(el, f"duplicate acceptor name {aname!r} (first at line {names[aname]})")
        names[aname] = el.line
        if not xs.has_text(el):
            raise ctx.error(el, f"<acceptor name=\"{aname}\"> needs a URI such as "
                                "tcp://0.0.0.0:5672?protocols=AMQP")
        host, port, params = xs.parse_tcp_uri(ctx, el, ctx.text(el), "acceptor URI")
        raw = params.pop("protocols", None)
        if raw is None:
            protocols = (xs.AMQP_PROTOCOL,)
        else:
            protocols = tuple(p.strip().upper() for p in raw.split(",") if p.strip())
            if xs.HTTP_PROTOCOL in protocols:
                out.append(_http_acceptor(ctx, el, aname, host, port, protocols, params))
                continue
            if xs.AMQP_PROTOCOL not in protocols:
                raise ctx.error(el, f"acceptor {aname!r}: protocols={raw} does not include AMQP, "
                                    "the only protocol tdbroker speaks")
            others = [p for p in protocols if p != xs.AMQP_PROTOCOL]
            if others:
                ctx.warn(el, f"acceptor {aname!r}: tdbroker speaks AMQP only; ignoring {','.join(others)}")
        connections_allowed = _int_param(ctx, el, aname, params, "connectionsAllowed",
                                         xs.DEFAULT_CONNECTIONS_ALLOWED, minimum=-1)
        handshake_timeout = _int_param(ctx, el, aname, params, "handshake-timeout",
                                       xs.DEFAULT_HANDSHAKE_TIMEOUT_SECONDS, minimum=0)
        auto_start = xs.convert(ctx, el, f"acceptor {aname!r}: autoStart",
                                params.pop("autoStart", str(xs.DEFAULT_ACCEPTOR_AUTO_START).lower()), "bool")
        tls = uri_tls(ctx, el, f"acceptor {aname!r}", params, server=True)
        # Artemis' AMQP acceptor parameter; minLargeMessageSize (its core-protocol name) is taken as the same.
        if "amqpMinLargeMessageSize" in params and "minLargeMessageSize" in params:
            raise ctx.error(el, f"acceptor {aname!r}: give amqpMinLargeMessageSize or minLargeMessageSize, not both")
        key = "minLargeMessageSize" if "minLargeMessageSize" in params else "amqpMinLargeMessageSize"
        min_large = _int_param(ctx, el, aname, params, key, DEFAULT_MIN_LARGE_MESSAGE_SIZE, minimum=-1)
        out.append(Acceptor(aname, host, port, protocols, params, el.line,
                            connections_allowed=connections_allowed, handshake_timeout=float(handshake_timeout),
                            tls=tls, auto_start=auto_start, min_large_message_size=min_large))
    return out


def _http_acceptor(ctx: Ctx, el, aname: str, host: str, port: int, protocols: tuple, params: dict) -> Acceptor:
    """``protocols=HTTP``: the console, /metrics and /healthz (broker/httpserve.py, docs/console.md).
    ``httpRootDir`` and the TLS parameters an AMQP acceptor takes (``sslEnabled=true``, ``keyStorePath``
    ...: HTTPS, read by the same :func:`uri_tls`) apply to it; any other parameter would be ignored, so it
    is refused."""
    if protocols != (xs.HTTP_PROTOCOL,):
        raise ctx.error(el, f"acceptor {aname!r}: protocols={','.join(protocols)}: an HTTP acceptor serves HTTP "
                            "only; give protocols=HTTP alone, on a port of its own")
    root = params.pop("httpRootDir", None)
    if root is not None and not pathlib.Path(root).is_dir():
        raise ctx.error(el, f"acceptor {aname!r}: httpRootDir {root!r} is not a directory")
    tls = uri_tls(ctx, el, f"acceptor {aname!r}", params, server=True)
    if params:
        raise ctx.error(el, f"acceptor {aname!r}: {', '.join(sorted(params))} not supported on an HTTP acceptor "
                            "(only httpRootDir and the TLS parameters; connection limits apply to AMQP acceptors)")
    return Acceptor(aname, host, port, protocols, {"httpRootDir": root} if root else {}, el.line, tls=tls)


def _int_param(ctx: Ctx, el, aname: str, params: dict, key: str, default: int, *, minimum: int) -> int:
    """An integer acceptor URI parameter (removed from ``params``), FILE:LINE error when it is not one."""
    raw = params.pop(key, None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ctx.error(el, f"acceptor {aname!r}: {key}={raw!r} is not an integer") from None
    if value < minimum:
        raise ctx.error(el, f"acceptor {aname!r}: {key}={value} must be at least {minimum}")
    return value


def _parse_addresses(ctx: Ctx, parent) -> list[AddressConfig]:
    out: list[AddressConfig] = []
    addr_lines: dict[str, int] = {}
    queue_lines: dict[str, int] = {}
    for name, el in children(ctx, parent):
        if name != "address":
            raise unknown_element(ctx, el, "addresses", ["address"])
        ctx.check_attrs(el, ("name",))
        aname = ctx.attr(el, "name", required=True)
        if aname in addr_lines:
            raise ctx.error(el, f"duplicate address {aname!r} (first at line {addr_lines[aname]})")
        addr_lines[aname] = el.line
        addr = AddressConfig(aname, set(), [], el.line)
        seen_rt: dict[str, int] = {}
        for rname, rel in children(ctx, el):
            if rname == "queue":
                raise ctx.error(rel, f"<queue> must be inside <anycast> or <multicast> of address {aname!r}")
            if rname not in ("anycast", "multicast"):
                raise unknown_element(ctx, rel, "address", ["anycast", "multicast"])
            _once(ctx, seen_rt, rname, rel)
            addr.routing_types.add(rname)
            for qname, qel in children(ctx, rel):
                if qname != "queue":
                    raise unknown_element(ctx, qel, rname, ["queue"])
                q = _parse_queue(ctx, qel, aname, rname)
                if q.name in queue_lines:
                    raise ctx.error(qel, f"duplicate queue name {q.name!r} (first at line "
                                         f"{queue_lines[q.name]}); queue names are broker-wide")
                queue_lines[q.name] = qel.line
                addr.queues.append(q)
        out.append(addr)
    return out


def _parse_queue(ctx: Ctx, el, address: str, routing_type: str) -> QueueConfig:
    ctx.check_attrs(el, xs.QUEUE_ATTRS, xs.QUEUE_IGNORED_ATTRS)
    qname = ctx.attr(el, "name", required=True)
    max_consumers = ctx.attr(el, "max-consumers", "int", None)
    durable, filt = xs.DEFAULT_QUEUE_DURABLE, None
    seen: dict[str, int] = {}
    for name, child in children(ctx, el):
        _once(ctx, seen, name, child)
        if name == "durable":
            durable = ctx.value(child, "bool")
        elif name == "filter":
            ctx.check_attrs(child, ("string",))
            filt = ctx.attr(child, "string", required=True)
            try:
                parse_selector(filt)
            except SelectorError as exc:
                raise ctx.error(child, f"queue {qname}: filter {filt!r}: {exc}") from None
        elif name == "max-consumers":
            if max_consumers is not None:
                raise ctx.error(child, "max-consumers given both as attribute and element")
            ctx.warn(child, "<max-consumers> element: Artemis spells this as the queue attribute "
                            "max-consumers=\"N\"")
            max_consumers = ctx.value(child, "int")
        elif name == "user":
            ctx.warn(child, "<user> on a queue is ignored by tdbroker")
        else:
            raise unknown_element(ctx, child, "queue", ["durable", "filter", "user"])
    if max_consumers is None:
        max_consumers = xs.DEFAULT_MAX_CONSUMERS
    if max_consumers < -1:
        raise ctx.error(el, f"queue {qname!r}: max-consumers must be -1 (unlimited) or >= 0, got {max_consumers}")
    return QueueConfig(qname, address, routing_type, durable, max_consumers, filt, el.line)


def _unenforced_limit(ctx: Ctx, el, name: str, instead: str) -> None:
    """A limit tdbroker does not enforce: ``-1`` (Artemis' "no limit") is fine, any other value is refused."""
    text = ctx.text(el)
    if text.strip() != "-1":
        raise ctx.error(el, f"<{name}> {text} is a limit tdbroker does not enforce; {instead}, or set -1")


def _parse_address_settings(ctx: Ctx, parent) -> list[AddressSettings]:
    out: list[AddressSettings] = []
    matches: dict[str, int] = {}
    choices = (set(xs.ADDRESS_SETTING_FIELDS) | xs.ADDRESS_SETTING_IGNORED
               | set(xs.ADDRESS_SETTING_LIMITS_UNENFORCED) | xs.ADDRESS_SETTING_NEEDS_PAGE_LIMIT)
    for name, el in children(ctx, parent):
        if name != "address-setting":
            raise unknown_element(ctx, el, "address-settings", ["address-setting"])
        ctx.check_attrs(el, ("match",))
        match = _address_setting_match(ctx, el, ctx.attr(el, "match", required=True))
        if match in matches:
            raise ctx.error(el, f"duplicate address-setting match {match!r} (first at line {matches[match]})")
        matches[match] = el.line
        values: dict = {}
        seen: dict[str, int] = {}
        for sname, sel in children(ctx, el):
            if sname in xs.ADDRESS_SETTING_FIELDS:
                _once(ctx, seen, sname, sel)
                fld, kind, _default = xs.ADDRESS_SETTING_FIELDS[sname]
                values[fld] = ctx.value(sel, kind)
                if fld == "max_delivery_attempts" and values[fld] < -1:
                    raise ctx.error(sel, "<max-delivery-attempts> must be -1 (unlimited) or >= 0")
                if fld == "page_size_bytes" and values[fld] <= 0:
                    raise ctx.error(sel, "<page-size-bytes> must be a positive byte size")
            elif sname in xs.ADDRESS_SETTING_IGNORED:
                ctx.warn(sel, f"<{sname}> is accepted but ignored by tdbroker")
            elif sname in xs.ADDRESS_SETTING_LIMITS_UNENFORCED:
                _unenforced_limit(ctx, sel, sname, xs.ADDRESS_SETTING_LIMITS_UNENFORCED[sname])
            elif sname in xs.ADDRESS_SETTING_NEEDS_PAGE_LIMIT:
                ctx.warn(sel, f"<{sname}> has no effect without a page limit (tdbroker sets none)")
            else:
                raise unknown_element(ctx, sel, "address-setting", choices)
        out.append(AddressSettings(match=match, line=el.line, **values))
    return out
