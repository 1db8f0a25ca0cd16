"""Vhost policy: who may connect, from where, how much, and to which addresses (Qpid Dispatch 1.19's
``policy`` and ``vhost`` entities, ``qdrouter.json``; its checks live in ``src/policy.c`` and
``python/qpid_dispatch_internal/policy/policy_local.py``).

Sans-IO: :class:`Policy` is fed connection opens, link attaches and messages by the router
(router/core.py, router/policygate.py) and answers yes, or no with an AMQP error condition.

* With ``policy { enableVhostPolicy: true }`` every AMQP OPEN on a normal or route-container listener is
  matched to a vhost: the listener's ``policyVhost`` if it has one, else the OPEN's ``hostname`` (exactly, or
  with ``enableVhostNamePatterns`` by address-style patterns: ``*`` one dot-separated word, ``#`` any
  number), else ``defaultVhost`` (``$default``) when that vhost exists. No vhost: the connection is refused.
  Inter-router and edge connections are router protocol, secured by the listener (TLS, authenticatePeer),
  not by vhosts -- except that such a listener may name a ``policyVhost`` (a tdrouterd extension): then
  only the users, remote hosts and connection counts that vhost allows may join the mesh through it.
* The vhost caps its connections (``maxConnections``, ``maxConnectionsPerUser``,
  ``maxConnectionsPerHost``). The user (the SASL login; ``anonymous`` for ANONYMOUS) must be in one of its
  ``groups``, or the vhost must ``allowUnknownUser``, and then gets the ``$default`` group. The group's
  ``remoteHosts`` must include the peer's IP address. A refused OPEN is answered with a close carrying
  ``amqp:resource-limit-exceeded`` "connection disallowed by local policy", as Dispatch does.
* An approved connection gets its group's frame size, session count, session window and message size,
  and each link attach is checked against its limits (``maxSenders``, ``maxReceivers`` ->
  ``amqp:resource-limit-exceeded``) and addresses (``targets``/``targetPattern`` for what a client sends
  to, ``sources``/``sourcePattern`` for what it receives from, anonymous senders, dynamic sources,
  waypoint and fallback capabilities -> ``amqp:unauthorized-access``). ``$management`` is an address like
  any other: a group that does not list it cannot manage the router.
* Messages on an anonymous sender's link are checked against the targets by their ``to`` and, unless
  ``allowUserIdProxy``, a message whose ``user-id`` is not the connection's user is rejected
  (``amqp:unauthorized-access``).

Address rules, as Dispatch reads them: ``sources``/``targets`` are comma-separated names where ``*`` alone
allows every address, a trailing ``*`` makes a prefix, and ``${user}`` stands for the user name;
``sourcePattern``/``targetPattern`` are address patterns (``*``, ``#``, ``${user}`` as a whole word) and win
over the plain lists when both are given. An empty rule allows nothing.

docs/security.md has the configuration; the denial counters are the ``policy`` and ``vhostStats`` entities.
"""

from __future__ import annotations

import ipaddress
import logging
from dataclasses import dataclass, field
from typing import Any

from router.patterns import PatternTable, validate_pattern

log = logging.getLogger("router.policy")

DEFAULT_VHOST = "$default"
DEFAULT_GROUP = "$default"
#: The user name of a connection without a SASL login (Dispatch's "anonymous").
ANONYMOUS_USER = "anonymous"
USER_TOKEN = "${user}"

RESOURCE_LIMIT_EXCEEDED = "amqp:resource-limit-exceeded"
UNAUTHORIZED_ACCESS = "amqp:unauthorized-access"
CONNECTION_DISALLOWED = "connection disallowed by local policy"
SESSION_DISALLOWED = "session disallowed by local policy"
LINK_DISALLOWED = "link disallowed by local policy"
MESSAGE_DISALLOWED = "message disallowed by local policy"

#: Roles whose inbound connections vhost policy applies to (the others are routers).
POLICED_ROLES = frozenset({"normal", "route-container"})

# Dispatch 1.19's defaults (qdrouter.json, vhost and vhostUserGroupSettings).
MAX_CONNECTIONS_DEFAULT = 65535
MAX_LINKS_DEFAULT = 2147483647
GROUP_INTEGERS = {
    "maxFrameSize": 16384, "maxMessageSize": 0, "maxSessionWindow": 1638400, "maxSessions": 65536,
    "maxSenders": MAX_LINKS_DEFAULT, "maxReceivers": MAX_LINKS_DEFAULT,
}
GROUP_BOOLEANS = {
    "allowDynamicSource": False, "allowAnonymousSender": False, "allowUserIdProxy": False,
    "allowWaypointLinks": True, "allowFallbackLinks": True, "allowDynamicLinkRoutes": True,
    "allowAdminStatusUpdate": True,
}
GROUP_STRINGS = ("users", "remoteHosts", "sources", "targets", "sourcePattern", "targetPattern")
GROUP_KEYS = (*GROUP_STRINGS, *GROUP_INTEGERS, *GROUP_BOOLEANS)
#: Group settings that would need what tdrouterd does not do: refused when set to their non-default value.
#: allowAdminStatusUpdate: the management agent does not know which connection a request came from (a
#: request may come through other routers), so it cannot refuse it to one group.
GROUP_UNENFORCED = {
    "allowAdminStatusUpdate": (False, "the management agent cannot tell which connection a request came "
                                      "from; deny the group $management in its targets instead"),
}
#: Smallest frame size AMQP allows (AMQP 1.0 §2.7.1 open: max-frame-size >= 512).
MIN_FRAME_SIZE = 512


class PolicyError(ValueError):
    """A vhost setting that is wrong; ``key`` is its place (``groups.admin.maxSenders``) or None."""

    def __init__(self, key: str | None, message: str):
        super().__init__(message)
        self.key = key


def _split(value: Any) -> list[str]:
    """A comma-separated string (or a JSON list of strings) as its stripped, non-empty items."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        items = []
        for v in value:
            items.extend(_split(v))
        return items
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _integer(key: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool):
        raise PolicyError(key, f"{key} {value!r} is not an integer")
    try:
        n = int(str(value).strip().rstrip(","), 10) if not isinstance(value, int) else value
    except ValueError:
        raise PolicyError(key, f"{key} {value!r} is not an integer") from None
    if n < minimum:
        raise PolicyError(key, f"{key} {n} is below {minimum}")
    return n


def _boolean(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().rstrip(",").lower()
    if text in ("true", "yes", "1", "on"):
        return True
    if text in ("false", "no", "0", "off"):
        return False
    raise PolicyError(key, f"{key} {value!r} is not a boolean (true or false)")


class HostRanges:
    """A group's ``remoteHosts``: ``*``, addresses and ``low-high`` ranges of IPv4 or IPv6 addresses."""

    def __init__(self, text: Any, key: str = "remoteHosts"):
        self.text = ", ".join(_split(text))
        self.any = False
        self.ranges: list[tuple[Any, Any]] = []
        for item in _split(text):
            if item == "*":
                self.any = True
                continue
            low, sep, high = item.partition("-") if item.count("-") == 1 else (item, "", "")
            try:
                lo = ipaddress.ip_address(low.strip())
                hi = ipaddress.ip_address(high.strip()) if sep else lo
            except ValueError:
                raise PolicyError(key, f"{key}: {item!r} is not an IP address, a low-high range or '*' "
                                       "(host names are not looked up)") from None
            if lo.version != hi.version or lo > hi:
                raise PolicyError(key, f"{key}: range {item!r} must go from a lower to a higher address "
                                       "of one IP version")
            self.ranges.append((lo, hi))

    def allows(self, host: str) -> bool:
        if self.any:
            return True
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            return False
        if ip.version == 6 and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(lo.version == ip.version and lo <= ip <= hi for lo, hi in self.ranges)


@dataclass(frozen=True)
class GroupSettings:
    """One user group of a vhost (Dispatch's vhostUserGroupSettings), checked and converted."""

    name: str
    users: frozenset
    remote_hosts: HostRanges
    integers: dict
    booleans: dict
    sources: tuple   # plain names (with '*' and ${user}), or () when a pattern rule is given
    targets: tuple
    source_patterns: tuple
    target_patterns: tuple
    raw: dict        # the settings as given (management shows them)

    def __getattr__(self, name: str) -> Any:  # maxSenders, allowDynamicSource ...
        for table in (self.__dict__.get("integers") or {}, self.__dict__.get("booleans") or {}):
            if name in table:
                return table[name]
        raise AttributeError(name)


def parse_group(name: str, settings: Any) -> GroupSettings:
    """A group from its settings map (values as strings, numbers, booleans or lists)."""
    where = f"groups.{name}"
    if not isinstance(settings, dict):
        raise PolicyError(where, f"{where} must be a map of settings")
    unknown = [k for k in settings if k not in GROUP_KEYS]
    if unknown:
        raise PolicyError(f"{where}.{unknown[0]}", f"{where}: unknown setting {unknown[0]!r}; known: "
                                                   f"{', '.join(GROUP_KEYS)}")
    integers = {k: _integer(f"{where}.{k}", settings[k]) if k in settings else d for k, d in GROUP_INTEGERS.items()}
    for key in ("maxSessions",):
        if integers[key] < 1:
            raise PolicyError(f"{where}.{key}", f"{where}.{key} must be at least 1")
    if integers["maxFrameSize"] < MIN_FRAME_SIZE:
        raise PolicyError(f"{where}.maxFrameSize", f"{where}.maxFrameSize must be at least {MIN_FRAME_SIZE} "
                                                   "(AMQP 1.0 section 2.7.1)")
    booleans = {k: _boolean(f"{where}.{k}", settings[k]) if k in settings else d for k, d in GROUP_BOOLEANS.items()}
    for key, (refused_value, why) in GROUP_UNENFORCED.items():
        if booleans[key] == refused_value:
            raise PolicyError(f"{where}.{key}", f"{where}.{key}: {refused_value} is not enforced yet: {why}")
    patterns = {}
    for key in ("sourcePattern", "targetPattern"):
        items = _split(settings.get(key))
        for p in items:
            try:
                validate_pattern(p.replace(USER_TOKEN, "user"))
            except ValueError as exc:
                raise PolicyError(f"{where}.{key}", f"{where}.{key}: {exc}") from None
        patterns[key] = tuple(items)
    for key in ("sources", "targets"):
        for item in _split(settings.get(key)):
            if "*" in item[:-1]:
                raise PolicyError(f"{where}.{key}", f"{where}.{key}: {item!r}: '*' may only end a name "
                                                    f"(use {key[:-1]}Pattern for wildcards inside)")
    raw = {k: integers[k] if k in integers else booleans[k] if k in booleans else settings[k]
           for k in GROUP_KEYS if k in settings}
    return GroupSettings(
        name=name, users=frozenset(_split(settings.get("users"))),
        remote_hosts=HostRanges(settings.get("remoteHosts"), f"{where}.remoteHosts"),
        integers=integers, booleans=booleans,
        sources=() if patterns["sourcePattern"] else tuple(_split(settings.get("sources"))),
        targets=() if patterns["targetPattern"] else tuple(_split(settings.get("targets"))),
        source_patterns=patterns["sourcePattern"], target_patterns=patterns["targetPattern"], raw=raw)


class AddressRule:
    """What one connection may use as sources or targets: its group's names or patterns with ``${user}``
    replaced by the connection's user."""

    def __init__(self, names: tuple, patterns: tuple, user: str):
        self.everything = False
        self.exact: set[str] = set()
        self.prefixes: list[str] = []
        self.table: PatternTable | None = None
        if patterns:
            self.table = PatternTable()
            for p in patterns:
                p = p.replace(USER_TOKEN, user)
                if p.strip("./") in ("#",):
                    self.everything = True
                try:
                    self.table.add(p, True)
                except ValueError:  # the same pattern twice (or a user name that makes a bad token)
                    pass
            return
        for n in names:
            n = n.replace(USER_TOKEN, user)
            if n == "*":
                self.everything = True
            elif n.endswith("*"):
                self.prefixes.append(n[:-1])
            else:
                self.exact.add(n)

    def allows(self, address: str | None) -> bool:
        if address is None:
            return False
        if self.everything or address in self.exact:
            return True
        if self.table is not None:
            return self.table.lookup(address) is not None
        return any(address.startswith(p) for p in self.prefixes)


@dataclass
class VhostStats:
    """Counters of one vhost (Dispatch's vhostStats)."""

    connections_approved: int = 0
    connections_denied: int = 0
    session_denied: int = 0
    sender_denied: int = 0
    receiver_denied: int = 0
    max_message_size_denied: int = 0
    messages_denied: int = 0
    per_user: dict = field(default_factory=dict)   # user -> current connections
    per_host: dict = field(default_factory=dict)   # host -> current connections

    @property
    def connections_current(self) -> int:
        return sum(self.per_user.values())


VHOST_KEYS = ("hostname", "maxConnections", "maxMessageSize", "maxConnectionsPerUser",
              "maxConnectionsPerHost", "allowUnknownUser", "groups")


@dataclass
class Vhost:
    """One vhost: connection limits and user groups."""

    hostname: str
    max_connections: int = MAX_CONNECTIONS_DEFAULT
    max_connections_per_user: int = MAX_CONNECTIONS_DEFAULT
    max_connections_per_host: int = MAX_CONNECTIONS_DEFAULT
    max_message_size: int = 0
    allow_unknown_user: bool = False
    groups: dict = field(default_factory=dict)        # name -> GroupSettings
    user_groups: dict = field(default_factory=dict)   # user -> group name
    stats: VhostStats = field(default_factory=VhostStats)
    attrs: dict = field(default_factory=dict)         # as configured (management shows them)

    def group_for(self, user: str) -> GroupSettings | None:
        name = self.user_groups.get(user)
        if name is None:
            if not self.allow_unknown_user:
                return None
            name = DEFAULT_GROUP
        return self.groups.get(name)


def vhost_from_attrs(attrs: dict) -> Vhost:
    """A Vhost from its attributes (configuration file, policyDir JSON or management), checked."""
    hostname = attrs.get("hostname") if attrs.get("hostname") is not None else attrs.get("id")
    if not hostname or not isinstance(hostname, str):
        raise PolicyError("hostname", "vhost needs a hostname (the AMQP OPEN hostname it applies to, or "
                                      f"{DEFAULT_VHOST!r})")
    groups_in = attrs.get("groups") or {}
    if not isinstance(groups_in, dict):
        raise PolicyError("groups", "vhost groups must be a map of group name -> settings")
    v = Vhost(
        hostname=hostname,
        max_connections=_integer("maxConnections", attrs.get("maxConnections", MAX_CONNECTIONS_DEFAULT)),
        max_connections_per_user=_integer("maxConnectionsPerUser",
                                          attrs.get("maxConnectionsPerUser", MAX_CONNECTIONS_DEFAULT)),
        max_connections_per_host=_integer("maxConnectionsPerHost",
                                          attrs.get("maxConnectionsPerHost", MAX_CONNECTIONS_DEFAULT)),
        max_message_size=_integer("maxMessageSize", attrs.get("maxMessageSize", 0)),
        allow_unknown_user=_boolean("allowUnknownUser", attrs.get("allowUnknownUser", False)),
        attrs={k: attrs.get(k) for k in VHOST_KEYS if k in attrs},
    )
    for name, settings in groups_in.items():
        group = parse_group(str(name), settings)
        v.groups[group.name] = group
        for user in group.users:
            if user in v.user_groups:
                raise PolicyError(f"groups.{name}.users", f"groups.{name}: user {user!r} is already in group "
                                                          f"{v.user_groups[user]!r} (a user has one group per vhost)")
            v.user_groups[user] = group.name
    return v


@dataclass(frozen=True)
class Denial:
    """Why a connection was refused: the AMQP condition the peer gets and the reason the log gets."""

    condition: str
    description: str
    reason: str


def _host_of(remote: str) -> str:
    """The IP address of ``HOST:PORT`` / ``[V6]:PORT`` (the driver's remote_host)."""
    if remote.startswith("["):
        return remote[1:].split("]", 1)[0]
    if remote.count(":") == 1:
        return remote.rsplit(":", 1)[0]
    return remote


class ConnectionPolicy:
    """What one approved connection may do: its vhost, group and user, and the rules its links meet."""

    def __init__(self, policy: "Policy", vhost: Vhost, group: GroupSettings, user: str, host: str):
        self.policy = policy
        self.vhost = vhost
        self.group = group
        self.user = user
        self.host = host
        self.sources = AddressRule(group.sources, group.source_patterns, user)
        self.targets = AddressRule(group.targets, group.target_patterns, user)
        self.max_message_size = group.maxMessageSize or vhost.max_message_size or policy.max_message_size
        self.released = False

    # -- links -------------------------------------------------------------------------------------
    def link_refusal(self, *, client_sends: bool, address: str | None, dynamic: bool, waypoint: bool,
                     fallback: bool, open_links: int) -> tuple[str, str] | None:
        """None when the client may attach this link, else (condition, description). ``client_sends``:
        the client is the sender (the router receives); ``open_links``: the connection's links of the same
        direction already attached."""
        g = self.group
        limit = g.maxSenders if client_sends else g.maxReceivers
        refusal = None
        if open_links >= limit:
            refusal = (RESOURCE_LIMIT_EXCEEDED,
                       f"{LINK_DISALLOWED}: {'maxSenders' if client_sends else 'maxReceivers'} {limit} reached")
        elif waypoint and not g.allowWaypointLinks:
            refusal = (UNAUTHORIZED_ACCESS, f"{LINK_DISALLOWED}: waypoint links are not allowed")
        elif fallback and not g.allowFallbackLinks:
            refusal = (UNAUTHORIZED_ACCESS, f"{LINK_DISALLOWED}: fallback links are not allowed")
        elif client_sends:
            if address is None:
                if not g.allowAnonymousSender:
                    refusal = (UNAUTHORIZED_ACCESS, f"{LINK_DISALLOWED}: anonymous senders are not allowed")
            elif not self.targets.allows(address):
                refusal = (UNAUTHORIZED_ACCESS, f"{LINK_DISALLOWED}: target {address!r} is not allowed")
        elif dynamic:
            if not g.allowDynamicSource:
                refusal = (UNAUTHORIZED_ACCESS, f"{LINK_DISALLOWED}: dynamic sources are not allowed")
        elif not self.sources.allows(address):
            refusal = (UNAUTHORIZED_ACCESS, f"{LINK_DISALLOWED}: source {address!r} is not allowed")
        if refusal is not None:
            stats = self.vhost.stats
            if client_sends:
                stats.sender_denied += 1
            else:
                stats.receiver_denied += 1
            self.policy.links_denied += 1
            log.info("DENY link for user %r, rhost %s, vhost %r: %s", self.user, self.host,
                     self.vhost.hostname, refusal[1])
        return refusal

    def session_refused(self) -> None:
        self.vhost.stats.session_denied += 1
        self.policy.sessions_denied += 1

    def message_denied(self) -> None:
        self.vhost.stats.messages_denied += 1
        self.policy.messages_denied += 1

    def oversized(self) -> None:
        self.vhost.stats.max_message_size_denied += 1
        self.policy.max_message_size_denied += 1

    def release(self) -> None:
        """The connection is over: it no longer counts against its vhost's limits."""
        if self.released:
            return
        self.released = True
        stats = self.vhost.stats
        for table, key in ((stats.per_user, self.user), (stats.per_host, self.host)):
            n = table.get(key, 0) - 1
            if n > 0:
                table[key] = n
            else:
                table.pop(key, None)
        self.policy.connections_current -= 1


class Policy:
    """The router's policy: the global settings and the vhosts (by hostname), with their counters."""

    def __init__(self, *, enabled: bool = False, name_patterns: bool = False, default_vhost: str = DEFAULT_VHOST,
                 max_message_size: int = 0):
        self.enabled = enabled
        self.name_patterns = name_patterns
        self.default_vhost = default_vhost or ""
        self.max_message_size = max_message_size
        self.vhosts: dict[str, Vhost] = {}
        self._patterns: PatternTable | None = PatternTable() if name_patterns else None
        # Counters (Dispatch's policy entity, plus sessions and messages).
        self.connections_processed = 0
        self.connections_denied = 0
        self.connections_current = 0
        self.links_denied = 0
        self.sessions_denied = 0
        self.messages_denied = 0
        self.max_message_size_denied = 0

    @property
    def total_denials(self) -> int:
        return self.connections_denied + self.links_denied + self.sessions_denied + self.messages_denied \
            + self.max_message_size_denied

    # -- vhosts ----------------------------------------------------------------------------------
    def add_vhost(self, vhost: Vhost) -> None:
        if vhost.hostname in self.vhosts:
            raise PolicyError("hostname", f"vhost {vhost.hostname!r} is already defined")
        if self._patterns is not None and ("*" in vhost.hostname or "#" in vhost.hostname):
            try:
                self._patterns.add(vhost.hostname, vhost)
            except ValueError as exc:
                raise PolicyError("hostname", f"vhost hostname {vhost.hostname!r}: {exc}") from None
        self.vhosts[vhost.hostname] = vhost

    def replace_vhost(self, vhost: Vhost) -> None:
        """Put a changed vhost in place of the one of the same hostname. New connections get the new
        settings; open ones keep theirs and still count (the counters carry over)."""
        old = self.vhosts[vhost.hostname]
        vhost.stats = old.stats
        self.remove_vhost(old.hostname)
        self.add_vhost(vhost)

    def remove_vhost(self, hostname: str) -> Vhost:
        """Forget a vhost; its open connections keep what they were given (as in Dispatch)."""
        vhost = self.vhosts.pop(hostname)
        if self._patterns is not None and hostname in self._patterns:
            self._patterns.remove(hostname)
        return vhost

    def lookup(self, hostname: str | None) -> Vhost | None:
        """The vhost for an OPEN hostname: exact, then (with name patterns) by pattern, then the default."""
        if hostname:
            v = self.vhosts.get(hostname)
            if v is not None:
                return v
            if self._patterns is not None:
                v = self._patterns.lookup(hostname)
                if v is not None:
                    return v
        return self.vhosts.get(self.default_vhost) if self.default_vhost else None

    # -- connections -------------------------------------------------------------------------------
    def open_connection(self, *, hostname: str | None, user: str | None, remote: str,
                        listener_vhost: str | None = None) -> ConnectionPolicy | Denial:
        """Approve (and count) a connection, or say why not."""
        self.connections_processed += 1
        user = user or ANONYMOUS_USER
        host = _host_of(remote)
        name = listener_vhost or hostname
        vhost = self.vhosts.get(listener_vhost) if listener_vhost else self.lookup(hostname)
        if vhost is None:
            return self._deny(None, user, host, name, f"no vhost policy for {name!r} and no default vhost")
        stats = vhost.stats
        if stats.connections_current >= vhost.max_connections:
            return self._deny(vhost, user, host, name, f"vhost maxConnections {vhost.max_connections} reached")
        if stats.per_user.get(user, 0) >= vhost.max_connections_per_user:
            return self._deny(vhost, user, host, name,
                              f"maxConnectionsPerUser {vhost.max_connections_per_user} reached")
        if stats.per_host.get(host, 0) >= vhost.max_connections_per_host:
            return self._deny(vhost, user, host, name,
                              f"maxConnectionsPerHost {vhost.max_connections_per_host} reached")
        group = vhost.group_for(user)
        if group is None:
            return self._deny(vhost, user, host, name, "user is in no group and unknown users are not allowed"
                              if not vhost.allow_unknown_user else f"no {DEFAULT_GROUP!r} group for unknown users")
        if not group.remote_hosts.allows(host):
            return self._deny(vhost, user, host, name, f"remote host not in group {group.name!r}'s remoteHosts")
        stats.connections_approved += 1
        stats.per_user[user] = stats.per_user.get(user, 0) + 1
        stats.per_host[host] = stats.per_host.get(host, 0) + 1
        self.connections_current += 1
        log.debug("ALLOW connection for user %r, rhost %s, vhost %r, group %r", user, host, vhost.hostname,
                  group.name)
        return ConnectionPolicy(self, vhost, group, user, host)

    def _deny(self, vhost: Vhost | None, user: str, host: str, name: str | None, reason: str) -> Denial:
        self.connections_denied += 1
        if vhost is not None:
            vhost.stats.connections_denied += 1
        log.info("DENY AMQP Open for user %r, rhost %s, vhost %r: %s", user, host, name, reason)
        return Denial(RESOURCE_LIMIT_EXCEEDED, CONNECTION_DISALLOWED, reason)
