"""The broker's management agent: the same AMQP management protocol as the router's (wire/management.py)
for queues, addresses, broker connections and networks of brokers.

Entity types (Artemis names): ``org.apache.activemq.artemis.queue`` (QUERY, READ, CREATE, DELETE, PURGE),
``org.apache.activemq.artemis.address`` (QUERY, READ), ``org.apache.activemq.artemis.brokerConnection``
(QUERY, READ, ``startBrokerConnection``, ``stopBrokerConnection``), and for ActiveMQ-style networks of
brokers (docs/networks.md) ``org.apache.activemq.artemis.network`` (QUERY, READ: the broker's network id,
peers and duplicates dropped) and ``org.apache.activemq.artemis.networkBridge`` (QUERY, READ,
``startNetworkConnector``, ``stopNetworkConnector``: ActiveMQ Classic's NetworkConnectorViewMBean
``start()``/``stop()``), and for address federation (docs/federation-protocol.md)
``org.apache.activemq.artemis.federationStream`` (QUERY, READ, ``startFederationStream``,
``stopFederationStream``: identity ``<federation>/<stream>``) and ``org.apache.activemq.artemis.federationQueue``
(QUERY, READ: the federation queues other brokers keep here), and for the broker mirror (docs/mirror.md;
Artemis' "AMQP Broker Connections / Mirror") ``org.apache.activemq.artemis.mirror`` (QUERY, READ: one row per
``<mirror>`` this broker sends, with its lag) and ``org.apache.activemq.artemis.mirrorTarget`` (QUERY, READ:
one row per mirror source this broker is the replica of), and ``org.apache.activemq.artemis.acceptor``
(QUERY, READ, ``startAcceptor``, ``stopAcceptor``: Artemis' AcceptorControl ``start()``/``stop()``, how a
replica's client acceptor configured with ``autoStart=false`` is enabled after a disaster). Short names
(``queue``, ``address``, ``brokerConnection``, ``network``, ``networkBridge``, ``federationStream``,
``federationQueue``, ``mirror``, ``mirrorTarget``, ``acceptor``) are accepted too.

The agent only calls the broker's management facade (``mgmt_queues``, ``mgmt_addresses``,
``mgmt_connections``, ``create_queue``, ``delete_queue``, ``purge_queue``, ``start_broker_connection``,
``stop_broker_connection``, which the broker offers by delegation; ``mgmt_network``,
``mgmt_network_bridges``, ``start_network_connector``, ``stop_network_connector``, ``mgmt_federation_streams``,
``mgmt_federation_queues``, ``start_federation_stream``, ``stop_federation_stream``, ``mgmt_mirrors``,
``mgmt_mirror_targets``, ``mgmt_acceptors``, ``start_acceptor``, ``stop_acceptor``, which it calls on the
broker's ``facade`` part): KeyError from it means an unknown name
(404), ValueError an invalid request (400). Anyone who can reach the broker's ``$management`` can change
it: there is no policy yet.
"""

from __future__ import annotations

import logging
from typing import Any

from wire import management as wm
from wire.management import ManagementError, bad_request, not_found

log = logging.getLogger("broker.management")

ARTEMIS = "org.apache.activemq.artemis."
QUEUE = ARTEMIS + "queue"
ADDRESS = ARTEMIS + "address"
BROKER_CONNECTION = ARTEMIS + "brokerConnection"
NETWORK = ARTEMIS + "network"
NETWORK_BRIDGE = ARTEMIS + "networkBridge"
FEDERATION_STREAM = ARTEMIS + "federationStream"
FEDERATION_QUEUE = ARTEMIS + "federationQueue"
MIRROR = ARTEMIS + "mirror"
MIRROR_TARGET = ARTEMIS + "mirrorTarget"
ACCEPTOR = ARTEMIS + "acceptor"

# temporary: a dynamic (reply) queue that goes with its consumer. messageCount includes paged messages
# (as Artemis counts them); paging / pagedMessageCount / pagedSize: what of it is in page files (tdbroker).
QUEUE_ATTRIBUTES = ("name", "identity", "type", "address", "routingType", "durable", "messageCount",
                    "consumerCount", "deliveredCount", "acknowledgedCount", "deadLetteredCount",
                    "temporary", "paging", "pagedMessageCount", "pagedSize")
# Artemis' AddressControl: paging (isPaging), numberOfPages, addressSize (bytes held in memory); pagedSize:
# bytes in page files (tdbroker).
ADDRESS_ATTRIBUTES = ("name", "identity", "type", "routingTypes", "queues", "paging", "numberOfPages",
                      "addressSize", "pagedSize")
CONNECTION_ATTRIBUTES = ("name", "identity", "type", "uri", "status", "links", "autoStart")
# One row: brokerId is this broker's network id (kept beside the journal), peers the names of the brokers it
# has a network connection with, duplicatesDropped the messages from peers it had already stored.
NETWORK_ATTRIBUTES = ("name", "identity", "type", "brokerId", "peers", "bridgeCount", "duplicatesDropped")
# One row per bridge (broker/facade.py): name is the connector's, identity what start/stop accept for that
# one target; direction out, duplex (our duplex connector) or "duplex (remote's)" (a peer's, adopted);
# state stopped/connecting/connected/failed; demand a list of {kind, destination, consumers, static,
# forwarded, priority, path}; forwarded the messages sent over the bridge's current connection.
NETWORK_BRIDGE_ATTRIBUTES = ("name", "identity", "type", "remote", "direction", "duplex", "state",
                             "reconnectAttempts", "connections", "lastError", "peer", "peerId", "demand",
                             "forwarded")
# One row per federation stream (broker/facade.py): name and identity "<federation>/<stream>"; kind upstream
# or downstream; state stopped/connecting/connected/failed; peer the connected broker's name; addresses a list
# of {address, policy, copied} (an upstream's federation queues consumed now); copied the messages taken
# over the current connection; command (a downstream's: sent, accepted or refused), lastError, and
# sharedWith (a downstream riding on an upstream's connection, share-connection: that upstream's name).
FEDERATION_STREAM_ATTRIBUTES = ("name", "identity", "type", "federation", "stream", "kind", "state", "peer",
                                "reconnectAttempts", "remote", "addresses", "copied", "command", "lastError",
                                "sharedWith")
# One row per federation queue another broker's federation keeps here: origin that broker's id (originName
# its name when it is a network peer), its link's max-hops and auto-delete settings (delay in ms; message
# count -1: any), and the queue's messageCount and consumerCount.
FEDERATION_QUEUE_ATTRIBUTES = ("name", "identity", "type", "address", "origin", "originName", "maxHops",
                               "autoDelete", "autoDeleteDelay", "autoDeleteMessageCount", "messageCount",
                               "consumerCount")

# One row per <mirror> this broker sends (broker/mirror.py MirrorPart.mgmt_sources): name and identity the
# amqp-connection's; remote its uri; state the broker connection's (stopped/connecting/connected/failed);
# snfQueue the local store-and-forward queue; target the address the mirror link targets on the replica;
# queuedEvents the events captured and not yet confirmed by the replica, oldestEventAgeMs the age of the
# oldest of them (0: none) -- the mirror's lag; eventsSent confirmed since start; messageEvents, ackEvents,
# queueEvents captured since start; remoteBrokerId the replica's broker id once connected.
MIRROR_ATTRIBUTES = ("name", "identity", "type", "remote", "state", "snfQueue", "target", "durable",
                     "queuedEvents", "oldestEventAgeMs", "eventsSent", "messageEvents", "ackEvents",
                     "queueEvents", "remoteBrokerId", "lastError")
# One row per mirror source this broker is the replica of (MirrorPart.mgmt_targets): identity the source's
# broker id, name its name (its id when unknown); what it applied, the re-sent events it skipped
# (duplicatesSkipped), acknowledgements of messages it did not hold (acksUnmatched), events that came back
# round a dual mirror to where they started (loopsSkipped), and how long ago the
# last event came (lastEventAgeMs).
MIRROR_TARGET_ATTRIBUTES = ("name", "identity", "type", "sourceId", "sourceName", "address", "connected",
                            "messagesApplied", "acksApplied", "queueEventsApplied", "duplicatesSkipped",
                            "acksUnmatched", "loopsSkipped", "lastEventAgeMs")
# One row per <acceptor> (broker/acceptors.py AcceptorControl.describe): host and port as configured, bound
# the "host:port" it listens on now (empty while not started), autoStart its URI parameter, tls, connections
# open through it now, lastError why it last failed to start listening (a port in use).
ACCEPTOR_ATTRIBUTES = ("name", "identity", "type", "host", "port", "bound", "started", "autoStart", "tls",
                       "connections", "lastError")

ATTRIBUTES = {QUEUE: QUEUE_ATTRIBUTES, ADDRESS: ADDRESS_ATTRIBUTES, BROKER_CONNECTION: CONNECTION_ATTRIBUTES,
              NETWORK: NETWORK_ATTRIBUTES, NETWORK_BRIDGE: NETWORK_BRIDGE_ATTRIBUTES,
              FEDERATION_STREAM: FEDERATION_STREAM_ATTRIBUTES, FEDERATION_QUEUE: FEDERATION_QUEUE_ATTRIBUTES,
              MIRROR: MIRROR_ATTRIBUTES, MIRROR_TARGET: MIRROR_TARGET_ATTRIBUTES, ACCEPTOR: ACCEPTOR_ATTRIBUTES}
OPERATIONS = {
    QUEUE: ("QUERY", "READ", "CREATE", "DELETE", "PURGE"),
    ADDRESS: ("QUERY", "READ"),
    BROKER_CONNECTION: ("QUERY", "READ", "startBrokerConnection", "stopBrokerConnection"),
    NETWORK: ("QUERY", "READ"),
    NETWORK_BRIDGE: ("QUERY", "READ", "startNetworkConnector", "stopNetworkConnector"),
    FEDERATION_STREAM: ("QUERY", "READ", "startFederationStream", "stopFederationStream"),
    FEDERATION_QUEUE: ("QUERY", "READ"),
    MIRROR: ("QUERY", "READ"),
    MIRROR_TARGET: ("QUERY", "READ"),
    ACCEPTOR: ("QUERY", "READ", "startAcceptor", "stopAcceptor"),
}
# Entity type -> the facade's view of it, for the types a facade may lack (a test's fake of the network
# part has no federation; a facade of an older broker no mirror): no such view, no rows.
OPTIONAL_VIEWS = {FEDERATION_STREAM: "mgmt_federation_streams", FEDERATION_QUEUE: "mgmt_federation_queues",
                  MIRROR: "mgmt_mirrors", MIRROR_TARGET: "mgmt_mirror_targets", ACCEPTOR: "mgmt_acceptors"}
# Management requests that are not about one entity type.
NODE_OPERATIONS = ("QUERY", "GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-MGMT-NODES")


def _full_type(name: str | None) -> str | None:
    if name is None:
        return None
    full = name if name.startswith(ARTEMIS) else ARTEMIS + name
    return full if full in ATTRIBUTES else None


def _facade_error(exc: Exception):
    """The facade's errors as status codes: KeyError = no such thing (404), ValueError = invalid (400)."""
    if isinstance(exc, KeyError):
        return wm.NOT_FOUND, f"Not found: {exc.args[0] if exc.args else exc}"
    if isinstance(exc, ValueError):
        return wm.BAD_REQUEST, str(exc)
    return None


class BrokerManagement:
    """Answers management requests for one broker (``handle(msg) -> reply bytes | None``)."""

    def __init__(self, broker):
        self.broker = broker
        # The network names are the facade part's; a broker without one (a test's fake) offers them itself.
        self.facade = getattr(broker, "facade", broker)

    def handle(self, data: bytes) -> bytes | None:
        return wm.answer(data, self.dispatch, log, _facade_error)

    # -- rows ------------------------------------------------------------------------------------------
    def rows(self, type_name: str) -> list[dict]:
        b = self.broker
        if type_name == QUEUE:
            source = b.mgmt_queues()
        elif type_name == ADDRESS:
            source = b.mgmt_addresses()
        elif type_name == BROKER_CONNECTION:
            source = b.mgmt_connections()
        elif type_name == NETWORK:
            source = self.facade.mgmt_network()
        elif type_name in OPTIONAL_VIEWS:
            view = getattr(self.facade, OPTIONAL_VIEWS[type_name], None)
            source = view() if view is not None else []
        else:
            source = self.facade.mgmt_network_bridges()
        out = []
        for item in source:
            row = {a: item.get(a) for a in ATTRIBUTES[type_name]}
            row["identity"] = item.get("identity") or item.get("name")
            row["type"] = type_name
            out.append(row)
        return out

    def _type(self, name: str | None, *, status: int = wm.NOT_FOUND) -> str:
        if not name:
            raise bad_request("missing application property 'type'")
        full = _full_type(name)
        if full is None:
            raise ManagementError(status, f"No such entity type '{name}'")
        return full

    def _find(self, req: wm.Request, type_name: str) -> dict:
        attr, key = wm.entity_key(req)  # a broker entity's identity is its name
        for row in self.rows(type_name):
            if row[attr] == key:
                return row
        raise not_found(f"No entity with {attr} '{key}' of type {type_name}")

    # -- operations ------------------------------------------------------------------------------------
    def dispatch(self, req: wm.Request) -> tuple[int, Any]:
        op = req.operation
        if op == "QUERY":
            return self._query(req)
        if op == "GET-TYPES":
            return wm.OK, {t: [] for t in ATTRIBUTES}
        if op == "GET-ATTRIBUTES":
            types = [self._type(req.target_type, status=wm.BAD_REQUEST)] if req.target_type else list(ATTRIBUTES)
            return wm.OK, {t: list(ATTRIBUTES[t]) for t in types}
        if op == "GET-OPERATIONS":
            types = [self._type(req.target_type, status=wm.BAD_REQUEST)] if req.target_type else list(ATTRIBUTES)
            return wm.OK, {t: list(OPERATIONS[t]) for t in types}
        if op == "GET-MGMT-NODES":
            return wm.OK, []
        if op in ("STARTBROKERCONNECTION", "STOPBROKERCONNECTION"):
            return self._broker_connection(req, start=op.startswith("START"))
        if op in ("STARTNETWORKCONNECTOR", "STOPNETWORKCONNECTOR"):
            return self._network_connector(req, start=op.startswith("START"))
        if op in ("STARTFEDERATIONSTREAM", "STOPFEDERATIONSTREAM"):
            return self._federation_stream(req, start=op.startswith("START"))
        if op in ("STARTACCEPTOR", "STOPACCEPTOR"):
            return self._acceptor(req, start=op.startswith("START"))
        type_name = self._type(req.type)
        if op not in ("READ", "CREATE", "DELETE", "UPDATE", "PURGE"):
            raise ManagementError(wm.NOT_IMPLEMENTED, f"operation '{op}' is not implemented")
        wm.require_operation(op, type_name, OPERATIONS[type_name])
        if op == "READ":
            return wm.OK, self._find(req, type_name)
        if op == "CREATE":
            return self._create_queue(req)
        if op == "DELETE":
            row = self._find(req, type_name)
            self.broker.delete_queue(row["name"])
            log.info("management: deleted queue %s", row["name"])
            return wm.NO_CONTENT, {}
        row = self._find(req, type_name)  # PURGE
        removed = self.broker.purge_queue(row["name"])
        return wm.OK, {"name": row["name"], "messagesRemoved": removed}

    def _query(self, req: wm.Request) -> tuple[int, Any]:
        if req.target_type:
            type_name = self._type(req.target_type, status=wm.BAD_REQUEST)
            names = wm.query_attribute_names(req, type_name, ATTRIBUTES[type_name])
            rows = self.rows(type_name)
        else:
            names = wm.query_attribute_names(req)
            rows = [r for t in ATTRIBUTES for r in self.rows(t)]
        return wm.OK, wm.query_page(req, names, rows)

    def _create_queue(self, req: wm.Request) -> tuple[int, Any]:
        body = wm.body_attributes(req)
        allowed = {"name", "address", "routingType", "durable", "type", "identity"}
        unknown = sorted(set(body) - allowed)
        if unknown:
            raise bad_request(f"unknown queue attribute '{unknown[0]}' (allowed: name, address, routingType, "
                              "durable)")
        name = req.name or body.get("name")
        if not name or not isinstance(name, str):
            raise bad_request("CREATE of a queue needs attribute 'name'")
        address = body.get("address")
        if address is not None and not isinstance(address, str):
            raise bad_request("attribute 'address' must be a string")
        routing = body.get("routingType", "anycast")
        if not isinstance(routing, str):
            raise bad_request("attribute 'routingType' must be a string (anycast or multicast)")
        durable = body.get("durable", True)
        if isinstance(durable, str) and durable.lower() in ("true", "false", "yes", "no"):
            durable = durable.lower() in ("true", "yes")
        if not isinstance(durable, bool):
            raise bad_request("attribute 'durable' must be a boolean")
        self.broker.create_queue(name, address=address, routing_type=routing, durable=durable)
        log.info("management: created queue %s", name)
        return wm.CREATED, next((r for r in self.rows(QUEUE) if r["name"] == name), {"name": name})

    @staticmethod
    def _named(req: wm.Request, type_name: str) -> str:
        """The name a start/stop operation acts on (``name``, ``identity`` or the body's ``name``)."""
        if req.type not in (None, wm.NODE_TYPE) and _full_type(req.type) != type_name:
            raise bad_request(f"{req.operation} applies to type {type_name}")
        name = req.name or req.identity
        if name is None and isinstance(req.body, dict):
            name = req.body.get("name")
        if not name or not isinstance(name, str):
            raise bad_request(f"{req.operation} needs 'name'")
        return name

    def _network_connector(self, req: wm.Request, *, start: bool) -> tuple[int, Any]:
        """Start or stop a network connector (every bridge target) or one target (its identity); the
        answer is the bridge rows it has now (the Trio side connects or closes soon after)."""
        name = self._named(req, NETWORK_BRIDGE)
        if start:
            self.facade.start_network_connector(name)
        else:
            self.facade.stop_network_connector(name)
        log.info("management: %s network connector %s", "started" if start else "stopped", name)
        rows = [r for r in self.rows(NETWORK_BRIDGE) if name in (r["name"], r["identity"])
                and r["direction"] != "duplex (remote's)"]
        return wm.OK, {"name": name, "bridges": rows}

    def _federation_stream(self, req: wm.Request, *, start: bool) -> tuple[int, Any]:
        """Start or stop a federation stream by its identity ``<federation>/<stream>``; the answer is its
        row now (the Trio side connects or closes soon after)."""
        name = self._named(req, FEDERATION_STREAM)
        if start:
            self.facade.start_federation_stream(name)
        else:
            self.facade.stop_federation_stream(name)
        log.info("management: %s federation stream %s", "started" if start else "stopped", name)
        row = next((r for r in self.rows(FEDERATION_STREAM) if r["identity"] == name), {"name": name})
        return wm.OK, row

    def _acceptor(self, req: wm.Request, *, start: bool) -> tuple[int, Any]:
        """Start or stop an acceptor by name (Artemis' AcceptorControl ``start()``/``stop()``); stopping it
        closes the connections made through it. The answer is its row now: an acceptor binds before
        ``start`` returns, so ``started`` is already true; one that could not bind (a port in use) is a
        500 with its ``lastError``, as Artemis' ``start()`` throws."""
        name = self._named(req, ACCEPTOR)
        if start and not self.facade.start_acceptor(name):
            row = next((r for r in self.rows(ACCEPTOR) if r["name"] == name), {})
            raise ManagementError(wm.INTERNAL_ERROR, f"acceptor {name} did not start: "
                                                     f"{row.get('lastError') or 'no reason given'}")
        if not start:
            self.facade.stop_acceptor(name)
        log.info("management: %s acceptor %s", "started" if start else "stopped", name)
        row = next((r for r in self.rows(ACCEPTOR) if r["name"] == name), {"name": name})
        return wm.OK, row

    def _broker_connection(self, req: wm.Request, *, start: bool) -> tuple[int, Any]:
        name = self._named(req, BROKER_CONNECTION)
        if start:
            self.broker.start_broker_connection(name)
        else:
            self.broker.stop_broker_connection(name)
        row = next((r for r in self.rows(BROKER_CONNECTION) if r["name"] == name), {"name": name})
        return wm.OK, row
