"""Networks of real tdbroker processes for the network-of-brokers system tests (docs/networks.md).

A :class:`Network` reserves a fixed 127.0.0.1 port for every broker before any starts, because a
``<networkConnector uri="static:(tcp://127.0.0.1:PORT)">`` must name the remote broker's acceptor, and a
broker killed with ``kill -9`` must come back on the same port for its peers' bridges to find it again.
Each broker has a work directory of its own (configuration, journal, stderr) and runs as a
:class:`tests.system.brokerharness.BrokerProcess`. Brokers start and stop in parallel (a network of five
starts in about the time of one).

Building configurations: :func:`broker_xml` writes a whole broker.xml; :func:`connector_xml` one
``<networkConnector>`` (with fast reconnect options, so that a restarted peer is found in a fraction of a
second); :func:`replay_policy_xml` a ``<destinationPolicy>``. :func:`blueprint_xml` rewrites a blueprint of
conf/networks/ onto reserved ports and a temporary journal, so that the tests run the shipped files.

Watching a network: a network consumer counts as a consumer of the local queue it takes from (as ActiveMQ
shows it in the queue's consumer count), so :meth:`NetBroker.stats` (management QUERY of the broker's queues)
shows demand arriving and leaving; :func:`wait_consumers` and :func:`wait_messages` wait for a count.
:func:`exactly_once` checks the ids that a set of consumers received.
"""

from __future__ import annotations

import collections
import concurrent.futures
import os
import pathlib
import random
import re
import socket
from xml.sax.saxutils import escape, quoteattr

from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.waiting import wait_for
from tools.daemons import free_port
from tools.mgmtclient import ManagementClient

__all__ = [
    "BLUEPRINTS_DIR",
    "FAST_RECONNECT",
    "HOST",
    "NetBroker",
    "Network",
    "QueueStats",
    "blueprint_ports",
    "blueprint_xml",
    "broker_xml",
    "connector_xml",
    "exactly_once",
    "failover_servers",
    "replay_policy_xml",
    "reserve_port",
    "server_ports",
    "wait_consumers",
    "wait_messages",
]

HOST = "127.0.0.1"
QUEUE_TYPE = "org.apache.activemq.artemis.queue"
BLUEPRINTS_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf" / "networks"

#: static: discovery options for tests: the first retry after 100 ms (ActiveMQ's code default is 1000 ms),
#: never more than 1 s apart, so that a peer restarted by a test is found again quickly.
FAST_RECONNECT = {"initialReconnectDelay": 100, "maxReconnectDelay": 1000}

#: A management request's timeout: answers take milliseconds; a broker that dies during a request must fail
#: the wait soon, not after the whole test timeout.
MGMT_TIMEOUT = 10.0

#: The OPEN property in which a broker lists the other brokers of its network (Artemis' name for it).
FAILOVER_SERVER_LIST = "failover-server-list"


# -- configuration text --------------------------------------------------------------------------------------

#: Ports handed out by :func:`reserve_port` in this process (never twice).
_reserved: set = set()
#: Where reserved ports are drawn from when the kernel's ephemeral range is known: below it, so that no
#: client connection's local port (taken from the ephemeral range) can occupy a port between its reservation
#: and the broker binding it -- a broker restarted after kill -9 must get its port back.
_RESERVED_LOW = 20000


def _ephemeral_low() -> int | None:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _worker_share(low: int, high: int) -> tuple[int, int]:
    """The part of [low, high) this test process draws from: under pytest-xdist (``make test`` runs two
    workers) each worker has a slice of its own, so two workers never reserve the same port."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if count <= 1 or index >= count:
        return low, high
    size = (high - low) // count
    return low + index * size, low + (index + 1) * size


def reserve_port() -> int:
    """A free 127.0.0.1 port for a broker's fixed acceptor: outside the ephemeral range where that is known
    (see :data:`_RESERVED_LOW`), in this test worker's share of it, else any free port."""
    low = _ephemeral_low()
    share = _worker_share(_RESERVED_LOW, low) if low and low > _RESERVED_LOW + 1000 else None
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(*share) if share else free_port()
        if port in _reserved:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((HOST, port))
        except OSError:
            continue
        _reserved.add(port)
        return port
    raise RuntimeError("no free port to reserve")


def _attr_value(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def connector_xml(name: str, ports, *, queues=(), topics=(), excluded_queues=(), reconnect=None,
                  **attributes) -> str:
    """One ``<networkConnector>`` named ``name`` to the brokers on ``ports`` (``static:(...)``, one bridge per
    port). ``queues`` / ``topics``: its ``dynamicallyIncludedDestinations`` (ActiveMQ wildcards), so that
    several connectors between the same pair each bridge destinations of their own; ``attributes`` are
    ActiveMQ attribute names (``duplex=True``, ``networkTTL=2``, ``conduitSubscriptions=False``...)."""
    if isinstance(ports, int):
        ports = [ports]
    options = FAST_RECONNECT if reconnect is None else reconnect
    uri = "static:(" + ",".join(f"tcp://{HOST}:{p}" for p in ports) + ")"
    if options:
        uri += "?" + "&".join(f"{k}={v}" for k, v in options.items())
    attrs = "".join(f" {k}={quoteattr(_attr_value(v))}" for k, v in attributes.items())
    lists = []
    included = [f'<queue physicalName={quoteattr(q)}/>' for q in queues] + \
               [f'<topic physicalName={quoteattr(t)}/>' for t in topics]
    if included:
        lists.append("<dynamicallyIncludedDestinations>" + "".join(included) + "</dynamicallyIncludedDestinations>")
    if excluded_queues:
        lists.append("<excludedDestinations>" + "".join(f'<queue physicalName={quoteattr(q)}/>'
                                                         for q in excluded_queues) + "</excludedDestinations>")
    head = f"<networkConnector name={quoteattr(name)} uri={quoteattr(uri)}{attrs}"
    return head + (">" + "".join(lists) + "</networkConnector>" if lists else "/>")


def replay_policy_xml(*entries) -> str:
    """A ``<destinationPolicy>`` with one ``conditionalNetworkBridgeFilterFactory`` per entry; an entry is
    ``(queue_pattern, {attribute: value})``, e.g. ``("replay.>", {"replayWhenNoConsumers": True})``."""
    items = []
    for pattern, attrs in entries:
        text = "".join(f" {k}={quoteattr(_attr_value(v))}" for k, v in attrs.items())
        items.append(f"<policyEntry queue={quoteattr(pattern)}><networkBridgeFilterFactory>"
                     f"<conditionalNetworkBridgeFilterFactory{text}/></networkBridgeFilterFactory></policyEntry>")
    return "<destinationPolicy><policyMap><policyEntries>" + "".join(items) + \
        "</policyEntries></policyMap></destinationPolicy>"


def broker_xml(name: str, port: int, journal: pathlib.Path, *, connectors=(), topics=(), policy: str = "",
               extra: str = "") -> str:
    """A broker.xml: ``name``, the AMQP acceptor on ``port``, the journal, a multicast ``<address>`` for
    each of ``topics`` (queues are auto-created anycast, as in conf/broker.xml), the ``connectors``
    (:func:`connector_xml` texts) and a ``<destinationPolicy>`` text."""
    addresses = "".join(f"<address name={quoteattr(t)}><multicast/></address>" for t in topics)
    network = "<networkConnectors>\n    " + "\n    ".join(connectors) + "\n  </networkConnectors>" \
        if connectors else ""
    return f"""\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{escape(name)}</name>
  <journal-directory>{escape(str(journal))}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://{HOST}:{port}?protocols=AMQP</acceptor></acceptors>
  <addresses>{addresses}</addresses>
  {network}
  {policy}
  {extra}
</core></configuration>
"""


_ACCEPTOR_PORT = re.compile(r"<acceptor\b[^>]*>\s*tcp://127\.0\.0\.1:(\d+)")
_LOCAL_PORT = re.compile(r"(?<=127\.0\.0\.1:)(\d+)")
_JOURNAL = re.compile(r"<journal-directory>[^<]*</journal-directory>")


def blueprint_ports(directory: pathlib.Path) -> dict:
    """``{file stem: acceptor port}`` of a blueprint directory's broker XML files."""
    out = {}
    for path in sorted(directory.glob("*.xml")):
        match = _ACCEPTOR_PORT.search(path.read_text())
        assert match, f"{path}: no <acceptor>tcp://127.0.0.1:PORT"
        out[path.stem] = int(match[1])
    return out


def blueprint_xml(path: pathlib.Path, port_map: dict, journal: pathlib.Path) -> str:
    """The blueprint file at ``path`` with every 127.0.0.1 port replaced through ``port_map`` (blueprint
    port -> reserved port; any other port is an error) and its journal moved to ``journal``."""
    text = path.read_text()

    def swap(match) -> str:
        port = int(match[1])
        assert port in port_map, f"{path.name}: port {port} is not the acceptor of a broker of the blueprint"
        return str(port_map[port])

    text = _LOCAL_PORT.sub(swap, text)
    text, count = _JOURNAL.subn(f"<journal-directory>{escape(str(journal))}</journal-directory>", text)
    assert count == 1, f"{path.name}: expected one <journal-directory>"
    return text


# -- processes -----------------------------------------------------------------------------------------------

QueueStats = collections.namedtuple("QueueStats", "consumers messages")


class NetBroker:
    """One broker of a :class:`Network`: a reserved port, a work directory, and its process once started."""

    def __init__(self, name: str, port: int, workdir: pathlib.Path):
        self.name = name
        self.port = port
        self.workdir = workdir
        self.conf = workdir / "broker.xml"
        self.journal = workdir / "journal"
        self.process: BrokerProcess | None = None
        self.mgmt_timeout = MGMT_TIMEOUT
        self._mgmt: ManagementClient | None = None

    @property
    def url(self) -> str:
        return f"amqp://{HOST}:{self.port}"

    def write(self, text: str) -> None:
        self.conf.write_text(text)

    def start(self) -> "NetBroker":
        """Start (or restart, on the same port and journal) and wait for the ready line."""
        self.process = BrokerProcess(self.conf, self.workdir).start()
        assert self.process.ports.get("amqp") == self.port, (self.name, self.process.ports)
        return self

    def kill(self) -> None:
        """``kill -9``: no close frames, no journal sync."""
        self._close_mgmt()
        self.process.kill()

    def stop(self) -> int:
        self._close_mgmt()
        return 0 if self.process is None else self.process.stop()

    def is_running(self) -> bool:
        return self.process is not None and self.process.is_running()

    # -- management --
    def _close_mgmt(self) -> None:
        if self._mgmt is not None:
            self._mgmt.close()
            self._mgmt = None

    def queues(self) -> list:
        """Every queue row (name, address, consumerCount, messageCount) from a management QUERY."""
        for attempt in (1, 2):
            try:
                if self._mgmt is None:
                    self._mgmt = ManagementClient(f"{HOST}:{self.port}", timeout=self.mgmt_timeout)
                return self._mgmt.query(QUEUE_TYPE, ["name", "address", "consumerCount", "messageCount"])
            except Exception:  # a connection left over from before a restart: open a new one once
                self._close_mgmt()
                if attempt == 2:
                    raise
        return []

    def stats(self, address: str) -> QueueStats:
        """Consumers (local and network) and messages over the queues of ``address``: the anycast queue of
        that name, or a topic's subscription queues. (0, 0) while there is none."""
        rows = [r for r in self.queues() if r["address"] == address]
        return QueueStats(sum(r["consumerCount"] for r in rows), sum(r["messageCount"] for r in rows))

    def describe(self, address: str | None = None) -> str:
        rows = self.queues() if self.is_running() else []
        if address is not None:
            rows = [r for r in rows if r["address"] == address]
        return f"{self.name}: " + ", ".join(
            f"{r['name']}@{r['address']} consumers={r['consumerCount']} messages={r['messageCount']}" for r in rows)

    def __repr__(self) -> str:
        return f"<NetBroker {self.name} port {self.port}>"


class Network:
    """Brokers on reserved ports under ``root``: reserve names first (:meth:`port` then works for every one
    of them), write each broker's configuration, then :meth:`start`. :meth:`stop` stops them all and
    returns a description of each broker that did not exit with status 0 (a killed one is not checked)."""

    def __init__(self, root: pathlib.Path, names):
        self.root = root
        self.brokers: dict[str, NetBroker] = {}
        for name in names:
            port = reserve_port()
            workdir = root / name
            workdir.mkdir(parents=True, exist_ok=True)
            self.brokers[name] = NetBroker(name, port, workdir)

    def __getitem__(self, name: str) -> NetBroker:
        return self.brokers[name]

    def port(self, name: str) -> int:
        return self.brokers[name].port

    def configure(self, name: str, **kw) -> None:
        """Write broker ``name``'s broker.xml with :func:`broker_xml` (``kw``: connectors, topics, policy)."""
        b = self.brokers[name]
        b.write(broker_xml(name, b.port, b.journal, **kw))

    def start(self, names=None) -> "Network":
        """Start the named brokers (all by default) in parallel; a broker whose peers are not up yet keeps
        retrying its connectors, so the order does not matter."""
        chosen = [self.brokers[n] for n in (names or self.brokers)]
        with concurrent.futures.ThreadPoolExecutor(len(chosen)) as pool:
            for future in [pool.submit(b.start) for b in chosen]:
                future.result()
        return self

    def stop(self) -> list:
        """Stop every running broker in parallel; the problems (non-zero exits with stderr tails)."""
        running = [b for b in self.brokers.values() if b.process is not None]
        problems = []
        with concurrent.futures.ThreadPoolExecutor(max(1, len(running))) as pool:
            futures = {pool.submit(b.stop): b for b in running}
            for future, b in futures.items():
                try:
                    code = future.result()
                except Exception as exc:  # noqa: BLE001 - reported with the others
                    problems.append(f"{b.name}: {exc}")
                    continue
                if code != 0 and not b.process.killed:
                    problems.append(f"{b.name} exited with {code}:\n{b.process.stderr_tail(60)}")
        return problems


# -- waiting and checking ------------------------------------------------------------------------------------

def wait_consumers(broker: NetBroker, address: str, n: int, timeout: float = TIMEOUT) -> None:
    """Until ``broker`` counts exactly ``n`` consumers (local plus network) on ``address``."""
    seen = []

    def done() -> bool:
        seen[:] = [broker.stats(address)]
        return seen[0].consumers == n
    try:
        wait_for(done, f"{n} consumers of {address} on {broker.name}", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}; {broker.describe(address)}") from None


def wait_messages(broker: NetBroker, address: str, n: int, timeout: float = TIMEOUT) -> None:
    """Until ``broker`` holds exactly ``n`` messages on the queues of ``address``."""
    seen = []

    def done() -> bool:
        seen[:] = [broker.stats(address)]
        return seen[0].messages == n
    try:
        wait_for(done, f"{n} messages of {address} on {broker.name}", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}; {broker.describe(address)}") from None


def exactly_once(expected, *consumers) -> collections.Counter:
    """Assert that the ``consumers`` together received each id of ``expected`` exactly once and nothing
    else; return the Counter of received ids."""
    got = collections.Counter(i for c in consumers for i in c.ids)
    expected = list(expected)
    duplicates = sorted((i, n) for i, n in got.items() if n > 1)
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    assert not (duplicates or missing or unexpected), (
        f"duplicates (id, times): {duplicates[:20]} ({len(duplicates)}); missing: {missing[:20]} "
        f"({len(missing)}); unexpected: {unexpected[:20]} ({len(unexpected)})")
    return got


def failover_servers(broker: NetBroker, timeout: float = TIMEOUT) -> list | None:
    """The ``failover-server-list`` of the OPEN frame a client gets from ``broker`` (None if absent)."""
    conn = BlockingConnection(broker.url, timeout=timeout)
    try:
        props = conn.conn.remote_properties or {}
        return next((v for k, v in props.items() if str(k) == FAILOVER_SERVER_LIST), None)
    finally:
        conn.close()


def server_ports(entries) -> set:
    """The ports of a failover-server-list's entries (maps with hostname, network-host, port, scheme)."""
    out = set()
    for entry in entries or ():
        entry = {str(k): v for k, v in entry.items()}
        out.add(int(entry["port"]))
    return out
