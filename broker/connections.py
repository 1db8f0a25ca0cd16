"""Broker connections (Artemis ``<broker-connections><amqp-connection>``): tdbroker dials out.

Only ``<peer>`` is implemented: for each local queue that matches (``address-match`` against the queue's
address with Artemis wildcards, or ``queue-name``), the broker attaches, on one session,

* a RECEIVER with source address = queue name and source capability ``qd.waypoint`` (an array, as
  Artemis sends it): the router's phase-0 messages for the address arrive on it and are stored;
* a SENDER with target address = queue name and target capability ``qd.waypoint``: the router grants
  credit on it while phase-1 consumers exist, and the queue's messages are delivered through it.

The links are attached again on every reconnect. ``sender``, ``receiver``, ``mirror`` and ``federation``
elements are not implemented yet and are reported once at start-up.
"""

from __future__ import annotations

import logging

import proton

from broker.config import BrokerConnection, artemis_match
from broker.server import Broker
from wire.driver import Backoff, run_connector

log = logging.getLogger("broker.connections")

WAYPOINT_CAPABILITY = "qd.waypoint"


def _waypoint_caps(terminus: proton.Terminus) -> None:
    caps = terminus.capabilities
    caps.put_array(False, proton.Data.SYMBOL)
    caps.enter()
    caps.put_symbol(WAYPOINT_CAPABILITY)
    caps.exit()


def peer_queues(broker: Broker, conn: BrokerConnection) -> list[str]:
    """Names of the local queues any ``<peer>`` of ``conn`` matches, in queue order."""
    names = []
    for el in conn.elements:
        if el.kind != "peer":
            continue
        for qname, address in broker.queue_address.items():
            if qname in names:
                continue
            if (el.queue_name and el.queue_name == qname) or (
                    el.address_match and artemis_match(el.address_match, address)):
                names.append(qname)
    return names


def open_peer_links(broker: Broker, conn: BrokerConnection, engine) -> None:
    """Attach the two waypoint links of every matching queue on a fresh session."""
    names = peer_queues(broker, conn)
    if not names:
        return
    session = engine.connection.session()
    session.open()
    for qname in names:
        q = broker.queues[qname]
        rx = session.receiver(f"{conn.name}.{qname}.receiver")
        rx.source.address = qname
        _waypoint_caps(rx.source)
        rx.target.address = qname
        rx.open()
        broker.attach_local(engine, rx._impl, q, incoming=True, name=rx.name)
        tx = session.sender(f"{conn.name}.{qname}.sender")
        tx.source.address = qname
        tx.target.address = qname
        _waypoint_caps(tx.target)
        tx.open()
        broker.attach_local(engine, tx._impl, q, incoming=False, name=tx.name)
        log.info("broker connection %s: peer links for queue %s attached", conn.name, qname)
    engine.wake()


def backoff_for(conn: BrokerConnection) -> Backoff:
    attempts = conn.reconnect_attempts
    return Backoff(initial=max(conn.retry_interval_ms, 1) / 1000.0, multiplier=1.0,
                   max_delay=max(conn.retry_interval_ms, 1) / 1000.0,
                   max_attempts=0 if attempts < 0 else attempts + 1)


async def run_broker_connection(broker: Broker, conn: BrokerConnection) -> None:
    """Keep one ``<amqp-connection>`` up (reconnecting per retry-interval / reconnect-attempts)."""
    for el in conn.elements:
        if el.kind != "peer":
            log.warning("%s:%d: <%s> in broker connection %s is not implemented yet; ignored",
                        broker.cfg.path, el.line, el.kind, conn.name)
    settings = broker.connection_settings(name=conn.name)

    def make_engine(remote: str):
        engine = broker.new_engine(settings, server=False, remote_host=remote)
        engine.app.on_open = lambda e: open_peer_links(broker, conn, e)
        return engine

    def on_state(state: str) -> None:
        log.debug("broker connection %s: %s", conn.name, state)

    await run_connector(conn.host, conn.port, make_engine, backoff_for(conn), on_state=on_state)
    log.warning("broker connection %s to %s:%d gave up after %d attempts", conn.name, conn.host, conn.port,
                conn.reconnect_attempts)
