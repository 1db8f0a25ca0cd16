"""The management facade of :class:`broker.server.Broker`: what ``broker/management.py`` calls (the broker
offers the same names, ``mgmt_queues`` ... ``stop_broker_connection``, by delegation).

Plain synchronous methods returning dicts (the management agent turns them into AMQP replies); the
start/stop of broker connections and of network connectors only triggers the Trio side
(:mod:`broker.connections`, :mod:`broker.netruntime`), which does the work. Unknown names raise KeyError,
invalid arguments ValueError, as the agent expects.

Counters are the queues' own (:class:`broker.queue.Queue`), so they are real, not estimated:
``deliveredCount`` counts every delivery handed to a consumer (redeliveries included),
``acknowledgedCount`` accepted ones, ``deadLetteredCount`` messages killed (rejected or too many
delivery attempts).

Network bridges (docs/networks.md) are read from :attr:`broker.Broker.network`: one row per bridge target
of each of our ``<networkConnector>`` elements (its :class:`broker.netruntime.ConnectorControl`, whose key
in ``network.controls`` is the row's identity: the connector's name, ``name@host:port`` for a second
target of the same connector) and one per reverse half of a peer's duplex connector (identity
``name@peer-host:port``: it is the peer's to start and stop). ActiveMQ's NetworkConnectorViewMBean
``start()``/``stop()`` act on a whole connector: so do ``start_network_connector`` and
``stop_network_connector`` given its name; given a ``name@host:port`` identity, on that one target.

Address federation (docs/federation-protocol.md) is read from :attr:`broker.Broker.federation`: a row per stream
(``FederationPart.mgmt_streams``: our ``<upstream>`` and ``<downstream>`` elements and the upstreams a remote
downstream's command made here), identity ``<federation>/<stream>``, and a row per federation queue that
another broker's federation keeps here (``FederationPart.federated_queues``, with the queue's counts).
``start_federation_stream`` / ``stop_federation_stream`` turn a stream's dial loop on and off, as
``start_network_connector`` / ``stop_network_connector`` do a bridge's.

The broker mirror (docs/mirror.md) is read from :attr:`broker.Broker.mirror` (``MirrorPart.mgmt_sources``:
a row per ``<mirror>`` we send, identity the amqp-connection name; ``MirrorPart.mgmt_targets``: a row per
mirror source we are the replica of, identity the source's broker id), and the acceptors from
:attr:`broker.Broker.acceptors` (name -> ``broker.acceptors.AcceptorControl``, filled by the daemon):
``start_acceptor`` / ``stop_acceptor`` trigger its Trio task as the connectors' start/stop do. A broker
without them (no mirror part, no acceptor controls: an in-process broker no daemon started) has no such
rows, and every acceptor name is unknown.
"""

from __future__ import annotations

import logging

from typing import TYPE_CHECKING

from broker.addressing import ANYCAST, MAX_QUEUE_NAME, ROUTING_TYPES

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger("broker.facade")


class ManagementFacade:
    """The management view and commands of a broker: reads its parts, changes them through the broker."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.addressing = broker.addressing
        self.storage = broker.storage

    # -- views -------------------------------------------------------------------------------------------
    def mgmt_queues(self) -> list[dict]:
        out = []
        info_of = self.addressing.queue_info
        for name, q in self.addressing.queues.items():
            info = info_of[name]
            paged, paged_bytes, _pages = self.storage.paged_stats(name)
            out.append({
                "name": name,
                "address": info.address,
                "routingType": info.routing_type,
                "durable": info.durable,
                "temporary": info.temporary,
                "messageCount": q.message_count + paged,  # as Artemis counts: paged messages included
                "consumerCount": q.consumer_count,
                "deliveredCount": q.messages_delivered,
                "acknowledgedCount": q.messages_acknowledged,
                "deadLetteredCount": q.messages_killed,
                "expiredCount": q.messages_expired,
                "messagesAdded": q.messages_added + paged,
                "paging": paged > 0,
                "pagedMessageCount": paged,
                "pagedSize": paged_bytes,
            })
        return out

    def mgmt_addresses(self) -> list[dict]:
        out = []
        queues = self.addressing.queues
        for address, types in self.addressing.addresses.items():
            names = [n for n, i in self.addressing.queue_info.items() if i.address == address]
            paged = [self.storage.paged_stats(n) for n in names]
            out.append({
                "name": address,
                "routingTypes": sorted(types),
                "queues": names,
                # Artemis' AddressControl: isPaging, getNumberOfPages, getAddressSize (bytes in memory).
                "paging": any(p[0] for p in paged),
                "numberOfPages": sum(p[2] for p in paged),
                "addressSize": sum(queues[n].size_bytes for n in names),
                "pagedSize": sum(p[1] for p in paged),
            })
        return out

    def mgmt_connections(self) -> list[dict]:
        out = []
        for name, ctl in self.broker.bridges.items():
            out.append({
                "name": name,
                "uri": ctl.conn.uri,
                "status": ctl.status,
                "links": ctl.link_count(),
                "autoStart": ctl.conn.auto_start,
            })
        return out

    def mgmt_network(self) -> list[dict]:
        """The broker's part in a network of brokers: one row (its network id, the peers it is connected
        to, its bridges and how many duplicate messages from peers it dropped)."""
        net = self.broker.network
        peers = sorted(p["name"] for p in net.peers.values() if p["connections"])
        return [{"name": net.name, "brokerId": net.broker_id, "peers": peers,
                 "bridgeCount": len(net.controls) + len(self._peer_duplex_bridges()),
                 "duplicatesDropped": net.duplicates_dropped}]

    def mgmt_network_bridges(self) -> list[dict]:
        """Every network bridge: ours (connected or not) then the peers' duplex halves (see the module
        docstring); each row is ``Network.mgmt_bridges``' plus ``identity``."""
        rows = []
        for key, ctl in self.broker.network.controls.items():
            rows.extend({**row, "identity": key} for row in ctl.describe())
        for bridge in self._peer_duplex_bridges():
            remote = bridge.engine.remote_host
            rows.append({"name": bridge.connector.name, "remote": remote, "duplex": True, "state": "connected",
                         "reconnectAttempts": 0, "connections": 1, "lastError": "", **bridge.describe(),
                         "direction": "duplex (remote's)", "identity": f"{bridge.connector.name}@{remote}"})
        return rows

    def mgmt_federation_streams(self) -> list[dict]:
        """Every federation stream (see the module docstring), ``identity`` ``<federation>/<stream>``; the
        peer only while connected (an upstream remembers its last peer after the connection closed)."""
        return [{**row, "name": f"{row['federation']}/{row['stream']}",
                 "identity": f"{row['federation']}/{row['stream']}",
                 "peer": row.get("peer") if row.get("state") == "connected" else ""}
                for row in self.broker.federation.mgmt_streams()]

    def mgmt_federation_queues(self) -> list[dict]:
        """The federation queues other brokers' federations keep here: their link's settings (the origin
        broker's id and, when it is a network peer, its name) and the queue's message and consumer counts."""
        peers = self.broker.network.peers
        rows = []
        for name, settings in self.broker.federation.federated_queues.items():
            q = self.addressing.queues.get(name)
            info = self.addressing.queue_info.get(name)
            if q is None or info is None:
                continue
            origin = settings.get("origin")
            rows.append({"name": name, "address": info.address, "origin": origin or "",
                         "originName": (peers.get(origin) or {}).get("name") or "" if origin else "",
                         "maxHops": settings.get("max-hops"), "autoDelete": settings.get("auto-delete"),
                         "autoDeleteDelay": settings.get("auto-delete-delay"),
                         "autoDeleteMessageCount": settings.get("auto-delete-message-count"),
                         "messageCount": q.message_count + self.storage.paged_stats(name)[0],
                         "consumerCount": q.consumer_count})
        return rows

    def mgmt_mirrors(self) -> list[dict]:
        """Every ``<mirror>`` this broker sends, with its lag (queued events, age of the oldest)."""
        part = getattr(self.broker, "mirror", None)
        if part is None:
            return []
        return [{**row, "identity": row.get("name")} for row in part.mgmt_sources()]

    def mgmt_mirror_targets(self) -> list[dict]:
        """Every mirror source this broker is the replica of: identity its broker id, name its name (the
        id while its name is unknown)."""
        part = getattr(self.broker, "mirror", None)
        if part is None:
            return []
        return [{**row, "identity": row.get("sourceId"), "name": row.get("sourceName") or row.get("sourceId")}
                for row in part.mgmt_targets()]

    def mgmt_acceptors(self) -> list[dict]:
        """Every acceptor, started or not; ``bound`` the ``host:port`` addresses it listens on now."""
        rows = []
        for name, control in self._acceptor_controls().items():
            row = {"name": name, **control.describe()}
            bound = row["bound"] if "bound" in row else getattr(control, "bound", None)
            row["bound"] = [b if isinstance(b, str) else f"{b[0]}:{b[1]}" for b in bound or []]
            rows.append(row)
        return rows

    def _peer_duplex_bridges(self) -> list:
        return [b for b in self.broker.network.bridges if b.direction == "duplex"]

    # -- commands ----------------------------------------------------------------------------------------
    def create_queue(self, name: str, address: str | None = None, routing_type: str = ANYCAST,
                     durable: bool = True) -> dict:
        """Create a queue bound to ``address`` (default: its own name). ValueError when the name is
        taken or an argument is invalid."""
        if not isinstance(name, str) or not name or len(name) > MAX_QUEUE_NAME or "::" in name:
            raise ValueError(f"invalid queue name {name!r}")
        if address is None or address == "":
            address = name
        if not isinstance(address, str) or "::" in address:
            raise ValueError(f"invalid address {address!r}")
        rt = str(routing_type).lower()
        if rt not in ROUTING_TYPES:
            raise ValueError(f"routing type must be anycast or multicast, got {routing_type!r}")
        if name in self.addressing.queues:
            raise ValueError(f"queue {name} already exists")
        self.addressing.add_queue(name, address, routing_type=rt, durable=bool(durable))
        log.info("queue %s created on %s (%s) by management", name, address, rt)
        self.broker.on_batch_end()
        return {"name": name, "address": address, "routingType": rt, "durable": bool(durable)}

    def delete_queue(self, name: str) -> int:
        """Delete a queue and its messages (consumers are detached); returns how many it held."""
        if name not in self.addressing.queues:
            raise KeyError(name)
        n = self.broker.remove_queue(name, "deleted by management")
        self.broker.on_batch_end()
        return n

    def purge_queue(self, name: str) -> int:
        """Remove every ready message of a queue (not those being delivered); returns how many."""
        q = self.addressing.queues.get(name)
        if q is None:
            raise KeyError(name)
        gone = q.purge_messages()
        self.storage.acknowledge(gone)
        # Paged messages go too; durable ones still in memory (being delivered) keep their records.
        paged = self.storage.forget_paged(name, keep=q.record_ids())
        self.broker.on_batch_end()
        return len(gone) + paged

    def start_broker_connection(self, name: str) -> None:
        self.broker.bridges[name].start()

    def stop_broker_connection(self, name: str) -> None:
        self.broker.bridges[name].stop()

    def start_network_connector(self, name: str) -> None:
        """Start a network connector (every target) or one target (``name@host:port``); KeyError when
        unknown."""
        for ctl in self._network_controls(name):
            ctl.start()
        log.info("network connector %s started by management", name)

    def stop_network_connector(self, name: str) -> None:
        """Stop a network connector: its bridges' connections close and it does not reconnect until started."""
        for ctl in self._network_controls(name):
            ctl.stop()
        log.info("network connector %s stopped by management", name)

    def start_federation_stream(self, identity: str) -> None:
        """Start a federation stream's dial loop (``<federation>/<stream>``); KeyError when unknown."""
        for ctl in self._federation_controls(identity):
            ctl.start()
        log.info("federation stream %s started by management", identity)

    def stop_federation_stream(self, identity: str) -> None:
        """Stop a federation stream: its connection closes (an upstream's federation queues stay on the
        upstream broker until their auto-delete) and it does not reconnect until started."""
        for ctl in self._federation_controls(identity):
            ctl.stop()
        log.info("federation stream %s stopped by management", identity)

    def start_acceptor(self, name: str) -> bool:
        """Start listening on an acceptor (one configured ``autoStart=false``, or stopped): True when it
        listens, False when it could not bind (its ``lastError`` says why); KeyError when unknown."""
        started = self._acceptor(name).start() is not False
        if started:
            log.info("acceptor %s started by management", name)
        return started

    def stop_acceptor(self, name: str) -> None:
        """Stop listening on an acceptor and close the connections made through it; KeyError when unknown."""
        self._acceptor(name).stop()
        log.info("acceptor %s stopped by management", name)

    def _acceptor_controls(self) -> dict:
        return getattr(self.broker, "acceptors", None) or {}

    def _acceptor(self, name: str):
        control = self._acceptor_controls().get(name)
        if control is None:
            raise KeyError(f"acceptor {name}")
        return control

    def _federation_controls(self, identity: str) -> list:
        part = self.broker.federation
        controls = [ctl for ctl in part.controls if _stream_identity(ctl) == identity]
        if controls:
            return controls
        for ctl in part.controls:
            shared = getattr(ctl, "shared", None)
            if shared is not None and shared.label == identity:
                raise ValueError(f"federation stream {identity} shares the connection of {ctl.upstream.name} "
                                 f"(share-connection): start or stop {ctl.upstream.name}")
        if any(f"{r['federation']}/{r['stream']}" == identity for r in part.mgmt_streams()):
            raise ValueError(f"federation stream {identity} has no dial loop: the federation runtime is not "
                             "running")
        raise KeyError(f"federation stream {identity}")

    def _network_controls(self, name: str) -> list:
        net = self.broker.network
        controls = [ctl for key, ctl in net.controls.items() if key == name or ctl.connector.name == name]
        if controls:
            return controls
        if any(b.connector.name == name for b in self._peer_duplex_bridges()):
            raise ValueError(f"network connector {name} is a peer's duplex connector: start or stop it on "
                             "that broker")
        raise KeyError(f"network connector {name}")


def _stream_identity(ctl) -> str:
    """``<federation>/<stream>`` of a federation dial loop's control (an upstream's or a downstream's)."""
    up = getattr(ctl, "upstream", None)
    if up is not None:
        return up.name
    return f"{ctl.federation.name}/{ctl.stream.name}"
