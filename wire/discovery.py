"""Multicast discovery: brokers on one network find each other without a list (ActiveMQ's ``multicast://``).

ActiveMQ Classic's ``MulticastDiscoveryAgent`` (activemq-broker, package
``org.apache.activemq.transport.discovery.multicast``) has every broker send a small UDP datagram to a
multicast group every ``keepAliveInterval`` (500 ms by default, its ``DEFAULT_IDLE_TIME``) naming the
service it offers; a service not heard from for ``keepAliveInterval * HEARTBEAT_MISS_BEFORE_DEATH``
(10 misses, so 5 s) is considered gone; a broker that stops says so once ("dead"), and a broker that hears
a new service announces itself at once, so newcomers are found quickly. ``multicast://default`` means the
group address 239.255.2.3, port 6155, group name ``default`` (its ``DEFAULT_HOST_IP``/``DEFAULT_PORT``;
the ActiveMQ "Discovery Transport Reference" and "Multicast Transport Reference" pages); the datagram's
time-to-live is 1, so announcements stay on the local network. This module keeps those semantics with a
datagram format of its own (ActiveMQ's carries OpenWire-specific text; nothing here talks to ActiveMQ):

Datagram (UTF-8 text, one line, fields separated by single spaces, at most :data:`MAX_DATAGRAM` bytes)::

    TDDISC/1 <kind> <group> <agent id> <service URL>

* ``TDDISC/1`` — magic and format version; a receiver ignores any other (a later version may add fields);
* ``<kind>`` — ``alive`` (the keep-alive) or ``dead`` (sent once when the agent stops);
* ``<group>`` — the discovery group name (``default`` for ``multicast://default``); other groups are ignored;
* ``<agent id>`` — random per agent (so per broker process): a receiver ignores its own datagrams;
* ``<service URL>`` — where the sender's bridges connect, e.g. ``amqp://127.0.0.1:5672``.

None of the fields may hold whitespace. Anything else — another magic, wrong field count, bad UTF-8, an
oversized datagram, a URL without ``://`` — is ignored silently: a discovery port is open to anyone on the
network, so bad input must not stop discovery, nor fill the log.

:class:`DiscoveryAgent` is the sans-IO core (times in ms passed in); :func:`run_multicast_discovery` is the
Trio layer: one UDP socket bound to the group's port with ``SO_REUSEADDR`` (and ``SO_REUSEPORT`` where the
OS has it) so several brokers on one machine share the port, joined to the group (``IP_ADD_MEMBERSHIP``)
on one interface, with ``IP_MULTICAST_LOOP`` on (brokers on the same machine hear each other) and
``IP_MULTICAST_TTL`` 1.

Interface: ``interface="0.0.0.0"`` (the default) lets the kernel pick the interface of the multicast route
(usually the default route's), as ActiveMQ does by default. ``interface="127.0.0.1"`` keeps discovery on
the loopback interface, i.e. on one machine — what tests and demos use; on Linux this works because the
socket both joins the group on ``lo`` and sends through it (``IP_MULTICAST_IF``). A host without a
multicast route refuses the join on ``0.0.0.0`` (``ENODEV``): give the address of a real interface then.
"""

from __future__ import annotations

import logging
import math
import socket
import uuid

import trio

__all__ = ["DiscoveryAgent", "run_multicast_discovery", "DEFAULT_GROUP", "DEFAULT_MULTICAST_HOST",
           "DEFAULT_MULTICAST_PORT", "DEFAULT_KEEPALIVE_MS", "HEARTBEAT_MISS_BEFORE_DEATH", "MAX_DATAGRAM"]

log = logging.getLogger("wire.discovery")

#: ``multicast://default`` (MulticastDiscoveryAgent's DEFAULT_HOST_IP, DEFAULT_PORT, group).
DEFAULT_MULTICAST_HOST = "239.255.2.3"
DEFAULT_MULTICAST_PORT = 6155
DEFAULT_GROUP = "default"
#: MulticastDiscoveryAgent's DEFAULT_IDLE_TIME: how often a service is announced.
DEFAULT_KEEPALIVE_MS = 500
#: MulticastDiscoveryAgent: a service missing this many keep-alives in a row is gone.
HEARTBEAT_MISS_BEFORE_DEATH = 10
#: Largest datagram sent or accepted: ours are under 300 bytes; a bound keeps a stranger's junk cheap.
MAX_DATAGRAM = 1024
#: Most services one agent tracks: a network of brokers has a handful; the bound keeps a flood of fake
#: announcements (anyone on the network can send them) from growing memory without limit.
MAX_SERVICES = 1024

_MAGIC = "TDDISC/1"
_ALIVE = "alive"
_DEAD = "dead"


def _check_field(name, value):
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"discovery {name} must be non-empty and hold no whitespace: {value!r}")


class DiscoveryAgent:
    """Sans-IO multicast discovery for one group: builds our announcements, reads others', and tells which
    services appeared and which went silent. Times are milliseconds of any monotonic clock.

    ``own_service`` is the URL announced for this broker (None: listen only). ``expire_after_ms`` defaults
    to ``keepalive_ms * HEARTBEAT_MISS_BEFORE_DEATH`` as in ActiveMQ."""

    def __init__(self, group: str, own_service: str | None, *, keepalive_ms: float = DEFAULT_KEEPALIVE_MS,
                 expire_after_ms: float | None = None, agent_id: str | None = None):
        _check_field("group", group)
        if own_service is not None:
            _check_field("service URL", own_service)
            if "://" not in own_service:
                raise ValueError(f"discovery service must be a URL like amqp://host:port: {own_service!r}")
        if keepalive_ms <= 0:
            raise ValueError(f"discovery keepalive must be positive, not {keepalive_ms}")
        if expire_after_ms is None:
            expire_after_ms = keepalive_ms * HEARTBEAT_MISS_BEFORE_DEATH
        if expire_after_ms <= keepalive_ms:
            raise ValueError(f"discovery expiry ({expire_after_ms} ms) must exceed the keepalive ({keepalive_ms} ms)")
        self.group = group
        self.own_service = own_service
        self.keepalive_ms = keepalive_ms
        self.expire_after_ms = expire_after_ms
        self.agent_id = agent_id if agent_id is not None else uuid.uuid4().hex
        _check_field("agent id", self.agent_id)
        self._last_seen: dict[str, float] = {}   # service URL -> time of its last announcement
        self._gone: list[str] = []               # said goodbye since the last tick
        self._next_announce: float | None = None  # None: due now
        self._alive = self._datagram(_ALIVE)
        self._dead = self._datagram(_DEAD)

    def _datagram(self, kind):
        if self.own_service is None:
            return None
        data = " ".join((_MAGIC, kind, self.group, self.agent_id, self.own_service)).encode()
        if len(data) > MAX_DATAGRAM:
            raise ValueError(f"discovery announcement longer than {MAX_DATAGRAM} bytes")
        return data

    # -- what we send --------------------------------------------------------------------------------

    def announcement(self) -> bytes | None:
        """Our keep-alive datagram (None for a listen-only agent)."""
        return self._alive

    def farewell(self) -> bytes | None:
        """The datagram to send once when stopping, so others drop us at once (None: listen only)."""
        return self._dead

    def announcement_due(self, now_ms: float) -> bytes | None:
        """Our announcement if one is due at ``now_ms`` (then the next is due a keepalive later)."""
        if self._alive is None or (self._next_announce is not None and now_ms < self._next_announce):
            return None
        self._next_announce = now_ms + self.keepalive_ms
        return self._alive

    # -- what we hear --------------------------------------------------------------------------------

    def received(self, data: bytes, now_ms: float) -> str | None:
        """Take in a datagram: the service URL if it is newly seen, else None. Our own datagrams, other
        groups and anything malformed are ignored; this never raises on bad input."""
        if len(data) > MAX_DATAGRAM:
            return None
        try:
            fields = data.decode("utf-8").split(" ")
        except UnicodeDecodeError:
            return None
        if len(fields) != 5 or fields[0] != _MAGIC:
            return None
        _, kind, group, agent_id, service = fields
        if group != self.group or agent_id == self.agent_id or service == self.own_service:
            return None
        if "://" not in service or any(c.isspace() or not c.isprintable() for c in service):
            return None
        if kind == _ALIVE:
            if service in self._last_seen:
                self._last_seen[service] = now_ms
                return None
            if len(self._last_seen) >= MAX_SERVICES:
                return None
            self._last_seen[service] = now_ms
            # Answer a newcomer at once (as MulticastDiscoveryAgent does) so it need not wait a keepalive.
            self._next_announce = None
            return service
        if kind == _DEAD:
            if self._last_seen.pop(service, None) is not None:
                self._gone.append(service)
        return None

    def tick(self, now_ms: float) -> list[str]:
        """The services gone since the last tick: those that said goodbye, and those silent for
        ``expire_after_ms`` or longer."""
        gone = self._gone
        self._gone = []
        limit = now_ms - self.expire_after_ms
        expired = [s for s, seen in self._last_seen.items() if seen <= limit]
        for s in expired:
            del self._last_seen[s]
        gone.extend(expired)
        return gone

    def next_deadline(self) -> float | None:
        """When :meth:`tick` or :meth:`announcement_due` next has something to do (ms; ``-inf`` when it
        is due now), or None when nothing is pending (a listen-only agent that knows no service)."""
        if self._gone or (self._alive is not None and self._next_announce is None):
            return -math.inf
        times = [seen + self.expire_after_ms for seen in self._last_seen.values()]
        if self._next_announce is not None:
            times.append(self._next_announce)
        return min(times) if times else None

    @property
    def services(self) -> frozenset[str]:
        """The services currently known alive."""
        return frozenset(self._last_seen)


# -- Trio layer ---------------------------------------------------------------------------------------

def _multicast_socket(host: str, port: int, interface: str, ttl: int):
    """A UDP socket bound to ``port``, joined to group ``host`` on ``interface``, sending through it."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            except OSError:  # defined but refused by this kernel: SO_REUSEADDR is enough on Linux
                pass
        group = socket.inet_aton(host)
        ifaddr = socket.inet_aton(interface)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, group + ifaddr)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, ttl)
        if interface != "0.0.0.0":
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, ifaddr)
        return sock
    except BaseException:
        sock.close()
        raise


async def _bind(sock, host, port):
    # Binding to the group address (Linux, BSD) delivers only that group's datagrams on this port;
    # systems that refuse it get the wildcard address, and the agent filters by group name anyway.
    try:
        await sock.bind((host, port))
    except OSError:
        await sock.bind(("", port))


async def run_multicast_discovery(agent: DiscoveryAgent, host: str = DEFAULT_MULTICAST_HOST,
                                  port: int = DEFAULT_MULTICAST_PORT, *, on_found, on_lost,
                                  clock=trio.current_time, interface: str = "0.0.0.0", ttl: int = 1,
                                  send_farewell: bool = True, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run ``agent`` on the multicast group ``host``:``port`` until cancelled: announce every keepalive,
    call ``on_found(url)`` for each newly seen service and ``on_lost(url)`` for each that went silent or
    said goodbye (plain functions: they must not block). ``clock`` gives monotonic seconds (the Trio
    clock by default, so MockClock works). ``interface`` chooses the interface (see the module
    docstring). On cancellation a goodbye datagram is sent unless ``send_farewell`` is false.
    ``task_status.started()`` is called once the socket is joined and bound. Setting up the socket may
    raise OSError (e.g. ENODEV: no multicast route for ``interface``); after that, send and receive
    errors are logged and discovery goes on."""
    sock = _multicast_socket(host, port, interface, ttl)
    with sock:
        await _bind(sock, host, port)
        task_status.started()
        dest = (host, port)
        send_failed = False
        try:
            while True:
                now_ms = clock() * 1000.0
                data = agent.announcement_due(now_ms)
                if data is not None:
                    try:
                        await sock.sendto(data, dest)
                        send_failed = False
                    except OSError as e:
                        if not send_failed:   # once per outage, not every keepalive
                            log.warning("discovery: cannot send to %s:%s: %s", host, port, e)
                        send_failed = True
                for url in agent.tick(now_ms):
                    on_lost(url)
                deadline = agent.next_deadline()
                wait_s = math.inf if deadline is None else max(0.0, deadline - now_ms) / 1000.0
                with trio.move_on_after(wait_s):
                    try:
                        datagram, _addr = await sock.recvfrom(MAX_DATAGRAM + 1)
                    except OSError as e:
                        log.debug("discovery: receive failed: %s", e)
                        await trio.sleep(0.05)  # e.g. ICMP errors reported on the socket; do not spin
                        continue
                    url = agent.received(datagram, clock() * 1000.0)
                    if url is not None:
                        on_found(url)
        finally:
            bye = agent.farewell() if send_farewell else None
            if bye is not None:
                with trio.CancelScope(shield=True):
                    try:
                        await sock.sendto(bye, dest)
                    except OSError:
                        pass
