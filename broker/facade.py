"""The management facade of :class:`broker.server.Broker`: what ``broker/management.py`` calls (the broker
offers the same names, ``mgmt_queues`` ... ``stop_broker_connection``, by delegation).

Plain synchronous methods returning dicts (the management agent turns them into AMQP replies); the
start/stop of broker connections only triggers the Trio side (:mod:`broker.connections`), which does
the work. Unknown names raise KeyError, invalid arguments ValueError, as the agent expects.

Counters are the queues' own (:class:`broker.queue.Queue`), so they are real, not estimated:
``deliveredCount`` counts every delivery handed to a consumer (redeliveries included),
``acknowledgedCount`` accepted ones, ``deadLetteredCount`` messages killed (rejected or too many
delivery attempts).
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
