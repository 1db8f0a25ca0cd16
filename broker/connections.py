"""Broker connections (Artemis ``<broker-connections><amqp-connection>``): tdbroker dials out.

For each local queue an element matches (``address-match`` against the queue's address with Artemis
wildcards, or ``queue-name``) the broker attaches, on one session per connection:

* ``<peer>``: a RECEIVER whose source address is the queue name with source capability ``qd.waypoint``
  (an array, as Artemis sends it) -- the router's phase-0 messages for the address arrive on it and are
  stored -- and a SENDER whose target is the queue name with target capability ``qd.waypoint`` -- the
  router grants credit on it while phase-1 consumers exist and the queue's messages leave through it;
* ``<sender>``: the same sender without the capability (the queue's messages are pushed to the remote
  node: the address for ``address-match``, the queue name for ``queue-name``);
* ``<receiver>``: the same receiver without the capability (the remote node's messages are pulled into
  the queue).

Queues created later (auto-created, by management) get their links as soon as they exist, and every
link is attached again on reconnect (retry-interval, reconnect-attempts, failover URIs after ``#``).
``auto-start="false"`` leaves the connection stopped until :meth:`BridgeControl.start` (the management ``start`` operation);
:meth:`BridgeControl.stop` closes it. ``user``/``password`` authenticate with SASL SCRAM or PLAIN; a
connection that names its user only has its password from the credentials store beside broker.xml
(:mod:`broker.credentials`, resolved by :mod:`broker.config`). Temporary
queues (dynamic sources, non-durable subscriptions) and mirrors' store-and-forward queues never get
broker-connection links. ``<mirror>`` attaches one more link, from its store-and-forward queue to the
replica (:meth:`broker.mirror.MirrorPart.attach_link`). ``<federation>`` is not implemented and is reported
once at start-up.

This module is sans-IO (state, link attachment); the Trio task that dials, retries and fails over is
:class:`broker.runtime.BridgeTask`.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import TYPE_CHECKING

import proton

from broker.config import BrokerConnection, BrokerConnectionElement, artemis_match
from wire import raw
from wire.terminus import WAYPOINT_CAPABILITY

# Strongest first: what a broker connection with user= offers to log in with (wire.sasl.SaslClient).
CLIENT_MECHANISMS = "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger("broker.connections")

LINK_KINDS = ("peer", "sender", "receiver")
STOPPED, CONNECTING, CONNECTED, FAILED = "stopped", "connecting", "connected", "failed"


def _waypoint_caps(terminus: proton.Terminus) -> None:
    caps = terminus.capabilities
    caps.put_array(False, proton.Data.SYMBOL)
    caps.enter()
    caps.put_symbol(WAYPOINT_CAPABILITY)
    caps.exit()


def element_matches(el: BrokerConnectionElement, qname: str, address: str) -> bool:
    if el.queue_name:
        return el.queue_name == qname
    return bool(el.address_match) and artemis_match(el.address_match, address)


def planned_links(broker: Broker, conn: BrokerConnection, only: str | None = None) -> list[tuple]:
    """``(kind, queue name, remote address)`` for every link ``conn`` wants (or only for queue ``only``)."""
    out = []
    snf = broker.mirror.snf_names
    for qname, info in list(broker.addressing.queue_info.items()):
        if info.temporary or qname in snf or (only is not None and qname != only):
            continue
        for el in conn.elements:
            if el.kind in LINK_KINDS and element_matches(el, qname, info.address):
                remote = qname if (el.kind == "peer" or el.queue_name) else info.address
                item = (el.kind, qname, remote)
                if item not in out:
                    out.append(item)
    return out


class BridgeControl:
    """One ``<amqp-connection>``: its state for management and the links it attaches, sans-IO. The Trio
    task that keeps the connection up is :class:`broker.runtime.BridgeTask`; it sets ``on_change``, which
    :meth:`start` and :meth:`stop` call."""

    def __init__(self, broker: Broker, conn: BrokerConnection):
        self.broker = broker
        self.conn = conn
        self.wanted = conn.auto_start
        self.status = STOPPED
        self.engine = None            # while connected (the peer answered our open)
        self._session = None
        self._attached: set = set()   # (kind, queue) with links on the current engine
        self.on_change = None         # () -> None: set by the task that acts on start/stop
        self.opened = False           # the current attempt reached the peer's open
        broker.bridges[conn.name] = self
        broker.addressing.subscribe(self.on_queue_created)

    # -- management triggers (sync; the Trio task does the work) -----------------------------------
    def start(self) -> None:
        self.wanted = True
        if self.status == FAILED:
            self.status = STOPPED
        self._changed()

    def stop(self) -> None:
        self.wanted = False
        self._changed()

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def link_count(self) -> int:
        e = self.engine
        return len(e.app.links) if e is not None and e.app is not None else 0

    # -- links ----------------------------------------------------------------------------------------
    def _open(self, engine) -> None:
        self.opened = True
        self.engine = engine
        self.status = CONNECTED
        self._attached = set()
        self._session = None
        self.attach_links(None)
        if self.broker.mirror.sources.get(self.conn.name) is not None:
            if self._session is None:
                self._session = engine.connection.session()
                self._session.open()
            self.broker.mirror.attach_link(self, engine, self._session)
            engine.wake()

    def on_queue_created(self, qname: str) -> None:
        if self.engine is not None and not self.engine.finished:
            self.attach_links(qname)

    def attach_links(self, only: str | None) -> int:
        """Attach the links of every matching queue not attached yet; returns how many pairs/links."""
        engine = self.engine
        broker = self.broker
        n = 0
        for kind, qname, remote in planned_links(broker, self.conn, only):
            if (kind, qname) in self._attached:
                continue
            if self._session is None:
                self._session = engine.connection.session()
                self._session.open()
            q = broker.addressing.queues[qname]
            prefix = f"{self.conn.name}.{qname}"
            if kind in ("peer", "receiver"):
                rx = self._session.receiver(f"{prefix}.receiver" if kind == "peer" else f"{prefix}.in")
                rx.source.address = remote
                if kind == "peer":
                    _waypoint_caps(rx.source)
                rx.target.address = qname
                rx.open()
                broker.attach_local(engine, raw.pointer(rx), q, incoming=True, name=rx.name)
            if kind in ("peer", "sender"):
                tx = self._session.sender(f"{prefix}.sender" if kind == "peer" else f"{prefix}.out")
                tx.source.address = qname
                tx.target.address = remote
                if kind == "peer":
                    _waypoint_caps(tx.target)
                tx.open()
                broker.attach_local(engine, raw.pointer(tx), q, incoming=False, name=tx.name)
            self._attached.add((kind, qname))
            n += 1
            log.info("broker connection %s: %s links for queue %s attached", self.conn.name, kind, qname)
        if n:
            broker.on_batch_end()
            engine.wake()
        return n

    # -- what the task calls ----------------------------------------------------------------------------
    def report_unimplemented(self) -> None:
        """Log once, at start-up, the elements tdbroker does not implement (mirror, federation)."""
        for el in self.conn.elements:
            if el.kind not in LINK_KINDS and el.kind != "mirror":
                log.warning("%s:%d: <%s> in broker connection %s is not implemented yet; ignored",
                            self.broker.cfg.path, el.line, el.kind, self.conn.name)

    def make_engine(self, remote: str):
        broker = self.broker
        # user/password: our SASL client layer (wire/sasl.py SaslClient) logs in with the strongest of
        # CLIENT_MECHANISMS the peer offers: SCRAM when it has it (the password never crosses the wire),
        # else PLAIN (a routers' or Artemis' acceptor).
        settings = broker.connection_settings(
            name=self.conn.name, sasl_username=self.conn.user or None, sasl_password=self.conn.password,
            sasl_client_mechanisms=CLIENT_MECHANISMS if self.conn.user else None,
            # who we are to a tdbroker at the other end (a mirror's replica names its source by it)
            properties=broker.network.open_properties())
        engine = broker.new_engine(settings, server=False, remote_host=remote)
        engine.app.on_open = self._open
        return engine

    def on_state(self, state: str) -> None:
        if state != "SUCCESS":
            self.engine = None
        if state == "CONNECTING":
            self.status = CONNECTING
        log.debug("broker connection %s: %s", self.conn.name, state)


def failover_targets(conn: BrokerConnection) -> list[tuple[str, int, object]]:
    """``(host, port, tls)`` of the connection's URI and then of each failover URI after ``#``; ``tls`` is
    that URI's :class:`wire.tls.ClientTls` (sslEnabled=true) or None."""
    tls = list(conn.tls) or [None]
    out = [(conn.host, conn.port, tls[0])]
    for i, uri in enumerate(conn.alternate_uris, 1):
        parts = urllib.parse.urlsplit(uri)
        if parts.hostname and parts.port:  # validated by broker.config
            out.append((parts.hostname, parts.port, tls[i] if i < len(tls) else None))
    return out
