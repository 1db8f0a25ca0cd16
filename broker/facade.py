"""The management facade of :class:`broker.server.Broker` (what ``broker/management.py`` calls), the
``$management`` request hook and the flow-record hooks.

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

from broker.addressing import ANYCAST, MAX_QUEUE_NAME, ROUTING_TYPES
from broker.queue import QueuedMessage
from wire import codec, raw

log = logging.getLogger("broker.facade")


class ManagementFacade:
    """Mixin: the management view and commands of a Broker."""

    # -- views -------------------------------------------------------------------------------------------
    def _paged(self, name: str) -> tuple[int, int, int]:
        """(messages, bytes, page files) paged for queue ``name``."""
        return self.pager.stats(name) if self.pager is not None else (0, 0, 0)

    def mgmt_queues(self) -> list[dict]:
        out = []
        for name, q in self.queues.items():
            info = self.queue_info[name]
            paged, paged_bytes, _pages = self._paged(name)
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
        for address, types in self.addresses.items():
            names = [n for n, i in self.queue_info.items() if i.address == address]
            paged = [self._paged(n) for n in names]
            out.append({
                "name": address,
                "routingTypes": sorted(types),
                "queues": names,
                # Artemis' AddressControl: isPaging, getNumberOfPages, getAddressSize (bytes in memory).
                "paging": any(p[0] for p in paged),
                "numberOfPages": sum(p[2] for p in paged),
                "addressSize": sum(self.queues[n].size_bytes for n in names),
                "pagedSize": sum(p[1] for p in paged),
            })
        return out

    def mgmt_connections(self) -> list[dict]:
        out = []
        for name, ctl in self.bridges.items():
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
        if name in self.queues:
            raise ValueError(f"queue {name} already exists")
        self._create_queue(name, address, routing_type=rt, durable=bool(durable))
        log.info("queue %s created on %s (%s) by management", name, address, rt)
        self.on_batch_end()
        return {"name": name, "address": address, "routingType": rt, "durable": bool(durable)}

    def delete_queue(self, name: str) -> int:
        """Delete a queue and its messages (consumers are detached); returns how many it held."""
        if name not in self.queues:
            raise KeyError(name)
        n = self._remove_queue(name, "deleted by management")
        self.on_batch_end()
        return n

    def purge_queue(self, name: str) -> int:
        """Remove every ready message of a queue (not those being delivered); returns how many."""
        q = self.queues.get(name)
        if q is None:
            raise KeyError(name)
        gone = q.purge_messages()
        if self.journal is not None:
            for msg in gone:
                if msg.record_id is not None:
                    self.journal.append_ack(msg.record_id)
                    msg.record_id = None
        # Paged messages go too; durable ones still in memory (being delivered) keep their records.
        paged = self.forget_paged(name, keep=q.record_ids())
        self.on_batch_end()
        return len(gone) + paged

    def start_broker_connection(self, name: str) -> None:
        self.bridges[name].start()

    def stop_broker_connection(self, name: str) -> None:
        self.bridges[name].stop()

    # -- hooks: flow records and the $management link -------------------------------------------------------------------
    @staticmethod
    def _message_id(payload: bytes):
        try:
            return codec.properties_fields(payload, 1)[0]
        except Exception:  # a body we cannot walk has no id worth recording
            return None

    def _record(self, rec, event: str, payload: bytes, **fields) -> None:
        mid = self._message_id(payload)
        if mid is None:
            return
        try:
            if rec.wants(mid):
                from wire.flowrecords import message_id_str  # only reached with a recorder configured

                rec.record(event, mid=message_id_str(mid), **fields)
        except Exception:  # recording is best effort: it must never stop a delivery
            log.exception("flow recorder failed on %s", event)

    def _record_store(self, rec, bl, targets, payload: bytes) -> None:
        address = bl.address if bl.mode == "fanout" else self.queue_info[bl.queue.name].address
        self._record(rec, "store", payload, address=address, size=len(payload), queues=len(targets))

    def _management_request(self, bl, d, payload: bytes) -> None:
        """Hand a request to the management agent; deliver its reply to the reply's ``to``."""
        try:
            reply = self.management.handle(payload)
        except Exception as exc:  # a bad request or an agent bug: reject this one, keep the broker
            log.exception("management request failed")
            raw.set_rejected(d, "amqp:internal-error", f"management: {exc}"[:200])
            self._answer(bl, d, accepted=False)
            return
        if reply:
            try:
                to = codec.message_to(reply)
            except Exception:
                to = None
            q = self.queues.get(to) if to else None
            if q is None and to:
                name = next((n for n, i in self.queue_info.items() if i.address == to), None)
                q = self.queues.get(name) if name else None
            if q is None:
                log.warning("management reply to %r dropped: no such queue", to)
            else:
                reply_msg = QueuedMessage.from_bytes(bytes(reply), self.clock())
                reply_msg.durable = False
                q.enqueue(reply_msg)
                self._dirty.add(q)
        self._answer(bl, d)
