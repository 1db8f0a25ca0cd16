"""Real tdbrokers that mirror to each other, for the broker-mirror system tests (docs/mirror.md).

A :class:`Site` is one tdbroker on reserved 127.0.0.1 ports (:func:`tests.system.netharness.reserve_port`:
a broker killed with ``kill -9`` comes back on the same ports, and its peers' mirror connections find it
again), with a work directory of its own (configuration, journal, stderr), run as a
:class:`tests.system.brokerharness.BrokerProcess`. It has a client acceptor ``amqp`` and, when asked, a
separate ``mirror`` acceptor for the mirror connections that come in (and for management: the replica's
client acceptor may be configured ``autoStart=false``). :meth:`Site.configure` writes a broker.xml with
:func:`broker_xml`; :meth:`Site.use_blueprint` runs a file of conf/mirror/ with its ports swapped for
reserved ones.

Watching a mirror, through management (docs/management.md): :meth:`Site.mirror_row` (entity ``mirror``:
one row per ``<mirror>`` this broker sends, with its lag), :meth:`Site.target_rows` (``mirrorTarget``: the
sources this broker is the replica of), :meth:`Site.queue_counts`. :func:`wait_mirror_idle` waits until a
source has captured at least the events a test caused and the replica has confirmed every one of them.

Clients: :func:`produce` sends durable messages by id, :func:`browse_ids` reads a queue without taking
anything (a ``distribution-mode copy`` browser: reading a replica must not change it), :func:`drain_ids`
consumes.
"""

from __future__ import annotations

import contextlib
import pathlib
import socket
from xml.sax.saxutils import escape, quoteattr

from proton import Message
from proton.reactor import Copy

from broker.config import parse_broker_config
from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.clients import Consumer, Producer
from tests.system.netharness import HOST, blueprint_xml, reserve_port
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient

__all__ = [
    "ACCEPTOR",
    "BROKER_CONNECTION",
    "CLIENT_CREDIT",
    "FAST_RETRY_MS",
    "MIRROR",
    "MIRROR_BLUEPRINTS_DIR",
    "MIRROR_TARGET",
    "QUEUE",
    "Site",
    "acceptor_refuses",
    "broker_xml",
    "browse_ids",
    "drain_ids",
    "mirror_connection_xml",
    "produce",
    "running",
    "wait_count",
    "wait_mirror_idle",
]

MIRROR_BLUEPRINTS_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf" / "mirror"

ARTEMIS = "org.apache.activemq.artemis."
QUEUE = ARTEMIS + "queue"
BROKER_CONNECTION = ARTEMIS + "brokerConnection"
MIRROR = ARTEMIS + "mirror"
MIRROR_TARGET = ARTEMIS + "mirrorTarget"
ACCEPTOR = ARTEMIS + "acceptor"

#: A mirror connection's retry-interval in tests: a replica restarted by a test is found again within a
#: tenth of a second (Artemis' default, 5000 ms, would make each restart test wait seconds).
FAST_RETRY_MS = 100
#: A management request's timeout: answers take milliseconds; a broker that dies during a request must fail
#: the wait soon, not after the whole test timeout.
MGMT_TIMEOUT = 10.0
#: Credit of a test consumer that keeps receiving: enough for thousands of messages a second, bounded.
CLIENT_CREDIT = 500


# -- configuration text --------------------------------------------------------------------------------------

def _attr(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def mirror_connection_xml(name: str, port: int, *, retry_interval: int = FAST_RETRY_MS, auto_start: bool = True,
                          **mirror_attrs) -> str:
    """One ``<amqp-connection>`` named ``name`` to 127.0.0.1:``port`` holding a ``<mirror>``; ``mirror_attrs``
    are its attributes with ``_`` for ``-`` (``message_acknowledgements=False``, ``address_filter="a,!b"``)."""
    attrs = "".join(f" {k.replace('_', '-')}={quoteattr(_attr(v))}" for k, v in mirror_attrs.items())
    return (f'<amqp-connection name={quoteattr(name)} uri="tcp://{HOST}:{port}" retry-interval="{retry_interval}" '
            f'auto-start="{_attr(auto_start)}"><mirror{attrs}/></amqp-connection>')


def broker_xml(name: str, journal: pathlib.Path, *, client_port: int, client_auto_start: bool = True,
               mirror_port: int | None = None, connections=(), queues=("orders",), extra: str = "") -> str:
    """A broker.xml: ``name``, the journal, the client acceptor ``amqp`` on ``client_port`` (``autoStart=false``
    unless ``client_auto_start``), a ``mirror`` acceptor on ``mirror_port`` if given, an anycast address and
    queue per name in ``queues``, the broker ``connections`` (:func:`mirror_connection_xml` texts)."""
    auto = "" if client_auto_start else ";autoStart=false"
    acceptors = f'<acceptor name="amqp">tcp://{HOST}:{client_port}?protocols=AMQP{auto}</acceptor>'
    if mirror_port is not None:
        acceptors += f'<acceptor name="mirror">tcp://{HOST}:{mirror_port}?protocols=AMQP</acceptor>'
    addresses = "".join(f"<address name={quoteattr(q)}><anycast><queue name={quoteattr(q)}/></anycast></address>"
                        for q in queues)
    links = f"<broker-connections>{''.join(connections)}</broker-connections>" if connections else ""
    return f"""\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{escape(name)}</name>
  <security-enabled>false</security-enabled>
  <persistence-enabled>true</persistence-enabled>
  <journal-directory>{escape(str(journal))}</journal-directory>
  <acceptors>{acceptors}</acceptors>
  <addresses>{addresses}</addresses>
  {links}
  {extra}
</core></configuration>
"""


# -- processes -----------------------------------------------------------------------------------------------

class Site:
    """One tdbroker of a mirror test: reserved ports, a work directory, its process once started."""

    def __init__(self, name: str, root: pathlib.Path, *, mirror_acceptor: bool = True):
        self.name = name
        self.workdir = root / name
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf = self.workdir / "broker.xml"
        self.journal = self.workdir / "journal"
        self.client_port = reserve_port()
        self.mirror_port = reserve_port() if mirror_acceptor else None
        #: acceptor name -> (port, autoStart), from the configuration written last
        self.acceptors: dict[str, tuple[int, bool]] = {}
        self.process: BrokerProcess | None = None
        self._mgmt: ManagementClient | None = None

    # -- configuration --
    def configure(self, *, client_auto_start: bool = True, connections=(), queues=("orders",), extra: str = "") -> None:
        self.write(broker_xml(self.name, self.journal, client_port=self.client_port,
                              client_auto_start=client_auto_start, mirror_port=self.mirror_port,
                              connections=connections, queues=queues, extra=extra))

    def use_blueprint(self, stem: str, port_map: dict) -> None:
        """Run conf/mirror/``stem``.xml, every blueprint port swapped through ``port_map`` (see
        :meth:`blueprint_ports`) and the journal moved into the work directory."""
        self.write(blueprint_xml(MIRROR_BLUEPRINTS_DIR / f"{stem}.xml", port_map, self.journal))

    def blueprint_ports(self, stem: str) -> dict:
        """``{blueprint port: reserved port}`` for this site's acceptors in conf/mirror/``stem``.xml."""
        path = MIRROR_BLUEPRINTS_DIR / f"{stem}.xml"
        mine = {"amqp": self.client_port, "mirror": self.mirror_port}
        return {a.port: mine[a.name] for a in parse_broker_config(path.read_text(), str(path)).acceptors}

    def write(self, text: str) -> None:
        cfg = parse_broker_config(text, str(self.conf))
        self.acceptors = {a.name: (a.port, a.auto_start) for a in cfg.acceptors}
        self.conf.write_text(text)

    # -- life cycle --
    def start(self) -> "Site":
        """Start (or restart, on the same ports and journal); the started acceptors must be on their ports."""
        self.process = BrokerProcess(self.conf, self.workdir).start()
        started = {name: port for name, (port, auto) in self.acceptors.items() if auto}
        assert self.process.ports == started, (self.name, self.process.ports, started)
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

    @property
    def url(self) -> str:
        """Where clients connect: the ``amqp`` acceptor (refused while it is not started)."""
        return f"amqp://{HOST}:{self.client_port}"

    @property
    def mgmt_port(self) -> int:
        """The acceptor management goes through: the mirror acceptor when there is one (always started)."""
        return self.mirror_port if self.mirror_port is not None else self.client_port

    # -- management --
    def _close_mgmt(self) -> None:
        if self._mgmt is not None:
            self._mgmt.close()
            self._mgmt = None

    def _request(self, fn):
        for attempt in (1, 2):
            try:
                if self._mgmt is None:
                    self._mgmt = ManagementClient(f"{HOST}:{self.mgmt_port}", timeout=MGMT_TIMEOUT)
                return fn(self._mgmt)
            except Exception:  # a connection left over from before a restart: open a new one once
                self._close_mgmt()
                if attempt == 2:
                    raise
        return None

    def query(self, entity_type: str, attributes=()) -> list[dict]:
        return self._request(lambda m: m.query(entity_type, list(attributes)))

    def call(self, operation: str, **kw):
        """A management operation that must succeed (ManagementFailed otherwise); its body."""
        return self._request(lambda m: m.call(operation, **kw))

    def queue_counts(self) -> dict:
        """``{queue name: messageCount}`` of every queue."""
        return {r["name"]: r["messageCount"] for r in self.query(QUEUE, ["name", "messageCount"])}

    def mirror_row(self, name: str) -> dict:
        """The ``mirror`` row of this broker's mirror connection ``name``."""
        rows = [r for r in self.query(MIRROR) if r["name"] == name]
        assert rows, f"{self.name} has no mirror {name!r}"
        return rows[0]

    def target_rows(self) -> list[dict]:
        """The ``mirrorTarget`` rows: one per mirror source this broker is the replica of."""
        return self.query(MIRROR_TARGET)

    def acceptor_row(self, name: str) -> dict:
        return self.call("READ", type=ACCEPTOR, name=name)

    def stderr_tail(self, lines: int = 60) -> str:
        return self.process.stderr_tail(lines) if self.process is not None else "(never started)"

    def __repr__(self) -> str:
        return f"<Site {self.name} amqp {self.client_port} mirror {self.mirror_port}>"


@contextlib.contextmanager
def running(*sites: Site):
    """Stop every site that runs at the end and fail if one exited with an error (a site the test killed is
    not checked); when the body failed, print each site's stderr tail next to the failure."""
    failed = False
    try:
        yield sites
    except BaseException:
        failed = True
        raise
    finally:
        problems = []
        for site in sites:
            if site.process is None:
                continue
            if failed:
                print(f"--- {site.name} stderr ---\n{site.stderr_tail(80)}")
            if not site.is_running():
                continue
            code = site.stop()
            if code != 0 and not site.process.killed:
                problems.append(f"{site.name} exited with {code}:\n{site.stderr_tail(60)}")
        if problems and not failed:
            raise AssertionError("broker teardown failed:\n" + "\n\n".join(problems))


# -- waiting -------------------------------------------------------------------------------------------------

def wait_mirror_idle(source: Site, name: str, *, message_events: int = 0, ack_events: int = 0,
                     queue_events: int = 0, timeout: float = TIMEOUT) -> dict:
    """Until ``source``'s mirror ``name`` is connected, has captured at least the given numbers of events
    since it started, and has none left that the replica has not confirmed; its row then."""
    seen: list = [None]

    def idle():
        row = seen[0] = source.mirror_row(name)
        return (row["state"] == "connected" and row["queuedEvents"] == 0 and row["messageEvents"] >= message_events
                and row["ackEvents"] >= ack_events and row["queueEvents"] >= queue_events and row)
    try:
        return wait_for(idle, f"{source.name}'s mirror {name} to be idle", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last row {seen[0]}") from None


def wait_count(site: Site, queue: str, n: int, timeout: float = TIMEOUT) -> None:
    """Until ``site``'s queue holds exactly ``n`` messages (0: or has no such queue)."""
    seen: list = [None]

    def done():
        seen[0] = site.queue_counts().get(queue)
        return seen[0] == n or (n == 0 and seen[0] is None)
    try:
        wait_for(done, f"{n} messages on {site.name}'s {queue}", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen[0]}") from None


def acceptor_refuses(port: int) -> bool:
    """Whether a TCP connection to 127.0.0.1:``port`` is refused (nothing listens there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        try:
            s.connect((HOST, port))
        except ConnectionRefusedError:
            return True
    return False


# -- clients -------------------------------------------------------------------------------------------------

def produce(url: str, address: str, ids, *, timeout: float = TIMEOUT) -> None:
    """Send one durable message per id (``id`` and body ``m<id>``) and require every one accepted."""
    ids = list(ids)
    p = Producer(url, address, count=len(ids),
                 message_fn=lambda k: Message(id=ids[k], body=f"m{ids[k]}", durable=True)).start()
    try:
        p.wait(timeout)
        assert p.outcomes == {"accepted": len(ids)}, p.describe()
    finally:
        p.close()


def browse_ids(url: str, queue: str, n: int, timeout: float = TIMEOUT) -> list:
    """The ids of the ``n`` messages in ``queue``, in queue order, read by a browser (nothing is taken)."""
    if n == 0:
        return []
    c = Consumer(url, queue, count=n, credit=n, replenish=False, options=[Copy()]).start()
    try:
        c.wait(timeout)
        return c.ids
    finally:
        c.close()


def drain_ids(url: str, queue: str, n: int, timeout: float = TIMEOUT) -> list:
    """Consume (accept) ``n`` messages of ``queue``; their ids in the order received."""
    c = Consumer(url, queue, count=n, credit=n, replenish=False).start()
    try:
        c.wait(timeout)
        return c.ids
    finally:
        c.close()
