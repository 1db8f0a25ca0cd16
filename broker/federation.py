"""Artemis-style address federation between tdbrokers, over AMQP: the broker part (sans-IO).

Artemis' address federation (user manual, "Federation" / "Address Federation";
``artemis-server/.../federation/address/FederatedAddress.java``): this broker, the *downstream*, has an
``<upstream>`` for each broker it federates from. While a local multicast address that an
``<address-policy>`` matches has demand -- a queue bound to it (a subscription) -- the broker keeps a
*federation queue* on the upstream broker's address of the same name and consumes it into the local address,
as if the messages had been published here. One federation queue per address and upstream, however many
local queues there are.

On the wire (docs/federation.md "How it works"):

* the downstream attaches a receiver to the upstream's address: source capability ``topic``, a durable
  terminus (so the upstream keeps a durable subscription named
  ``<downstream name>.federated.<federation>.<upstream>.<address>.multicast``, which outlives a broken
  connection), and the link property :data:`LINK_FEDERATION`: the downstream's broker id, ``max-hops`` and
  the ``auto-delete`` settings;
* the upstream (:meth:`FederationPart.federation_consumer`) remembers the queue as a federation queue of that
  broker, lets into it only messages within ``max-hops`` (Artemis' filter ``hops IS NULL OR hops <
  max-hops``; -1: no filter), gives each message it sends a network id (``x-opt-td.net-id``, the network
  bridges' duplicate detection), and deletes the queue ``auto-delete-delay`` ms after its last consumer left
  when it holds no more than ``auto-delete-message-count`` messages (-1: any number);
* the downstream counts a hop on each message it takes (message annotation ``x-opt-amq-fed-hops``, the name
  Artemis' AMQP federation uses), applies the policy's transformer, and stores it into the local address;
  a copy it already stored (the upstream resends what it had no confirmation of) is dropped by its network
  id. A persistent message is acknowledged upstream only once it is on the downstream's disk.

Demand ignores the federation queues the *upstream itself* keeps here (Artemis'
``isBindingFromOpposingFederationTarget``), so two brokers that federate each other do not keep each other's
demand alive; queues that other brokers' federation made here do count, so fan-out trees work. With
``enable-divert-bindings`` a queue on a divert's forwarding address is demand for the divert's source address.
"""

from __future__ import annotations

import heapq
import logging
from typing import TYPE_CHECKING

import proton

from broker.addressing import MULTICAST
from broker.links import BrokerLink
from wire import raw
from wire.amqptypes import CodecError
from wire.msgannotations import read_annotation, set_annotations

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger("broker.federation")

FED_HOPS_ANNOTATION = "x-opt-amq-fed-hops"
#: Link property of a federation receiver: {origin, max-hops, auto-delete, auto-delete-delay,
#: auto-delete-message-count}.
LINK_FEDERATION = "td.federation"
#: Artemis' defaults when an address policy leaves them out (FederatedAddress: auto-delete on, after an hour,
#: whatever the message count).
DEFAULT_AUTO_DELETE = True
DEFAULT_AUTO_DELETE_DELAY_MS = 3_600_000
DEFAULT_AUTO_DELETE_MESSAGE_COUNT = -1
#: Credit of a federation receiver: as a network bridge's prefetch.
FEDERATION_CREDIT = 1000


def hops_allowed(hops, max_hops: int) -> bool:
    """Artemis' federation filter: ``hops IS NULL OR hops < max-hops``; -1 is no filter."""
    return max_hops == -1 or hops is None or (isinstance(hops, int) and hops < max_hops)


def message_hops(payload: bytes):
    try:
        value = read_annotation(payload, FED_HOPS_ANNOTATION)
    except CodecError:
        return None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _Inbound:
    """Wire's owner of a federation receiver at the downstream: counts the hop, applies the transformer,
    then hands the message to the broker's data path like any producer's (other events pass through)."""

    def __init__(self, delivery, receiver: UpstreamReceiver):
        self.delivery = delivery
        self.receiver = receiver

    def on_message(self, engine, bl, d, payload):
        if payload is not None:
            r = self.receiver
            hops = message_hops(payload)
            if not hops_allowed(hops, r.policy.max_hops):
                # over max-hops (a subscription the upstream restored before our attach set its filter):
                # accepted and dropped, as the upstream's filter would have kept it
                self.delivery.answer(bl, d)
                return
            try:
                payload = set_annotations(payload, {FED_HOPS_ANNOTATION: (hops or 0) + 1})
                if r.transformer is not None:
                    from broker.transformers import apply_transformer

                    payload = apply_transformer(r.transformer, payload)
            except (CodecError, ValueError) as exc:
                raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
                self.delivery.answer(bl, d, accepted=False)
                return
            r.copied += 1
        self.delivery.on_message(engine, bl, d, payload)

    def __getattr__(self, name):  # on_partial, on_delivery_update, on_link_flow, on_oversized
        return getattr(self.delivery, name)


class UpstreamReceiver:
    """One federation queue consumed from the upstream: its link and counters."""

    __slots__ = ("address", "policy", "link", "copied", "transformer")

    def __init__(self, address: str, policy, transformer):
        self.address = address
        self.policy = policy
        self.link = None
        self.copied = 0
        self.transformer = transformer


class Upstream:
    """One ``<upstream>`` of a ``<federation>``: the connection's state and the federation queues consumed."""

    def __init__(self, part: FederationPart, federation, stream, address_policies: list):
        self.part = part
        self.federation = federation
        self.stream = stream
        self.address_policies = address_policies
        self.engine = None
        self.peer_id: str | None = None
        self.peer_name = ""
        self.session = None
        self.receivers: dict[str, UpstreamReceiver] = {}
        self.control = None  # broker.fedruntime.StreamControl

    @property
    def name(self) -> str:
        return f"{self.federation.name}/{self.stream.name}"

    def opened(self, engine) -> None:
        broker = self.part.broker
        props = broker.network.remote_properties(engine)
        peer = props.get("td.broker-id")
        if not isinstance(peer, str) or not peer:
            engine.close("amqp:precondition-failed", "not a tdbroker: no broker id in its open")
            log.warning("federation %s: the upstream is not a tdbroker; closing", self.name)
            return
        self.engine = engine
        self.peer_id = peer
        self.peer_name = str(props.get("td.broker-name") or peer)
        engine.app.network_peer = peer  # duplicate detection of what it resends (broker.network)
        self.session = engine.connection.session()
        self.session.open()
        self.receivers = {}
        log.info("federation %s: connected to upstream %s", self.name, self.peer_name)
        self.refresh()

    def closed(self) -> None:
        self.engine = None
        self.session = None
        self.receivers = {}

    def refresh(self) -> None:
        """Federation queues for the addresses with demand now; none for those without."""
        engine = self.engine
        if engine is None or engine.finished:
            return
        wanted = self.part.demand(self)
        for address in [a for a in self.receivers if a not in wanted]:
            self._stop(address)
        for address, policy in wanted.items():
            if address not in self.receivers:
                self._start(address, policy)
        engine.wake()

    def _link_name(self, address: str) -> str:
        return f"federated.{self.federation.name}.{self.stream.name}.{address}.multicast"

    def _start(self, address: str, policy) -> None:
        broker = self.part.broker
        rx = self.session.receiver(self._link_name(address))
        rx.source.address = address
        rx.source.durability = proton.Terminus.DELIVERIES
        rx.source.expiry_policy = proton.Terminus.EXPIRE_NEVER
        caps = rx.source.capabilities
        caps.put_array(False, proton.Data.SYMBOL)
        caps.enter()
        caps.put_symbol("topic")
        caps.exit()
        rx.target.address = address
        auto_delete = DEFAULT_AUTO_DELETE if policy.auto_delete is None else policy.auto_delete
        rx.properties = {proton.symbol(LINK_FEDERATION): {
            "origin": broker.network.broker_id, "max-hops": policy.max_hops, "auto-delete": auto_delete,
            "auto-delete-delay": DEFAULT_AUTO_DELETE_DELAY_MS if policy.auto_delete_delay_ms is None
            else policy.auto_delete_delay_ms,
            "auto-delete-message-count": DEFAULT_AUTO_DELETE_MESSAGE_COUNT
            if policy.auto_delete_message_count is None else policy.auto_delete_message_count}}
        rx.open()
        broker.addressing.addresses.setdefault(address, set()).add(MULTICAST)
        receiver = UpstreamReceiver(address, policy, self.part.transformer(self.federation, policy))
        bl = broker.delivery.receiving(self.engine, raw.pointer(rx), rx.name, BrokerLink.FANOUT, address)
        bl.owner = _Inbound(broker.delivery, receiver)
        self.engine.own_link(bl.ptr, bl)
        raw.link_flow(bl.ptr, max(0, FEDERATION_CREDIT - raw.link_credit(bl.ptr)))
        receiver.link = bl
        self.receivers[address] = receiver
        log.info("federation %s: federating %s from %s", self.name, address, self.peer_name)

    def _stop(self, address: str) -> None:
        """No demand: detach (not close) the receiver, so the upstream keeps the queue until its
        auto-delete, as Artemis removes only the remote consumer."""
        receiver = self.receivers.pop(address)
        bl = receiver.link
        links = self.engine.app.links
        if links.get(bl.ptr) is bl:
            del links[bl.ptr]
        bl.closed = True
        self.engine.disown_link(bl.ptr)
        raw.link_object(bl.ptr).detach()
        log.info("federation %s: no demand for %s any more", self.name, address)

    def describe(self) -> dict:
        ctl = self.control
        return {"federation": self.federation.name, "stream": self.stream.name, "kind": "upstream",
                "state": ctl.status if ctl is not None else "stopped", "peer": self.peer_name,
                "reconnectAttempts": ctl.attempts if ctl is not None else 0,
                "remote": ctl.remote or ctl.label if ctl is not None else "",
                "addresses": [{"address": r.address, "policy": r.policy.name, "copied": r.copied}
                              for r in self.receivers.values()],
                "copied": sum(r.copied for r in self.receivers.values())}


class FederationPart:
    """The broker's federations (see the module docstring): its upstreams' demand, and the federation
    queues other brokers keep here."""

    def __init__(self, broker: Broker):
        self.broker = broker
        self.upstreams: list[Upstream] = []
        for fed in getattr(broker.cfg, "federations", []) or []:
            for stream in fed.upstreams:
                address_policies, _queue_policies = fed.policies_for(stream)
                self.upstreams.append(Upstream(self, fed, stream, address_policies))
        self.federated_queues: dict[str, dict] = {}  # queue here -> the federation link's settings
        self._transformers: dict = {}
        self._checks: list = []                      # heap of (clock ms, queue): auto-delete checks
        self._refreshing = False
        if self.upstreams:
            broker.delivery.consumer_listeners.append(self._consumer_changed)
            broker.addressing.subscribe(lambda _name: self.refresh())
        else:
            broker.delivery.consumer_listeners.append(self._consumer_changed_upstream_side)

    # -- downstream: demand ------------------------------------------------------------------------------
    def demand(self, up: Upstream) -> dict:
        """Address -> policy for every local multicast address with a queue bound that a policy of ``up``
        matches, not counting the federation queues ``up``'s broker keeps here."""
        addressing = self.broker.addressing
        out = {}
        diverted = []
        for name, info in addressing.queue_info.items():
            origin = self.federated_queues.get(name, {}).get("origin")
            if origin is not None and origin == up.peer_id:
                continue
            if info.routing_type == MULTICAST:
                self._match(up, info.address, out)
            diverted.append(info.address)
        if any(p.enable_divert_bindings for p in up.address_policies):
            try:
                from broker.diverts import divert_sources
            except ImportError:
                divert_sources = None
            if divert_sources is not None:
                for target in set(diverted):
                    for source in divert_sources(self.broker, target):
                        self._match(up, source, out, diverts_only=True)
        return out

    @staticmethod
    def _match(up: Upstream, address: str, out: dict, *, diverts_only: bool = False) -> None:
        if address in out:
            return
        for policy in up.address_policies:
            if (not diverts_only or policy.enable_divert_bindings) and policy.matches(address):
                out[address] = policy
                return

    def refresh(self) -> None:
        if self._refreshing:
            return
        self._refreshing = True
        try:
            for up in self.upstreams:
                up.refresh()
        finally:
            self._refreshing = False

    def transformer(self, federation, policy):
        ref = getattr(policy, "transformer_ref", None)
        if not ref:
            return None
        key = (federation.name, ref)
        if key not in self._transformers:
            from broker.transformers import load_transformer

            self._transformers[key] = load_transformer(federation.transformers[ref])
        return self._transformers[key]

    def _consumer_changed(self, bl, added: bool) -> None:
        self._consumer_changed_upstream_side(bl, added)
        if bl.queue is not None:
            info = self.broker.addressing.queue_info.get(bl.queue.name)
            if info is not None and info.routing_type == MULTICAST:
                self.refresh()

    def queue_removed(self, name: str) -> None:
        self.federated_queues.pop(name, None)
        if self.upstreams:
            self.refresh()

    def connection_closed(self, engine) -> None:
        for up in self.upstreams:
            if up.engine is engine:
                up.closed()

    # -- upstream side: federation queues other brokers keep here ------------------------------------------
    @staticmethod
    def link_settings(lo) -> dict | None:
        """The :data:`LINK_FEDERATION` property of a receiver's attach, or None."""
        try:
            props = lo.remote_properties
        except Exception:  # noqa: BLE001 - malformed: not a federation link
            return None
        if not isinstance(props, dict):
            return None
        value = next((v for k, v in props.items() if str(k) == LINK_FEDERATION), None)
        return {str(k): v for k, v in value.items()} if isinstance(value, dict) else None

    def federation_consumer(self, q, settings: dict):
        """A downstream's federation receiver is bound to queue ``q`` here: remember it, filter by max-hops;
        returns the consumer's outgoing transform (the network id of each message)."""
        max_hops = settings.get("max-hops")
        max_hops = max_hops if isinstance(max_hops, int) and not isinstance(max_hops, bool) else 0
        origin = settings.get("origin")
        self.federated_queues[q.name] = {
            "origin": origin if isinstance(origin, str) else None, "max-hops": max_hops,
            "auto-delete": settings.get("auto-delete") is not False,
            "auto-delete-delay": _int(settings.get("auto-delete-delay"), DEFAULT_AUTO_DELETE_DELAY_MS),
            "auto-delete-message-count": _int(settings.get("auto-delete-message-count"),
                                              DEFAULT_AUTO_DELETE_MESSAGE_COUNT)}
        if max_hops != -1:
            self.broker.addressing.set_admit(q.name, lambda payload, m=max_hops: hops_allowed(message_hops(payload), m))
        network = self.broker.network
        return lambda msg, n=q.name: network.stamp_net_id(n, msg)

    def _consumer_changed_upstream_side(self, bl, added: bool) -> None:
        q = bl.queue
        if added or q is None or q.name not in self.federated_queues:
            return
        settings = self.federated_queues[q.name]
        if settings["auto-delete"]:
            heapq.heappush(self._checks, (self.broker.clock() + max(0, settings["auto-delete-delay"]), q.name))

    def next_deadline(self) -> int | None:
        return self._checks[0][0] if self._checks else None

    def tick(self, now: int) -> int:
        """Auto-delete the federation queues whose delay ended with no consumer and few enough messages."""
        n = 0
        addressing = self.broker.addressing
        while self._checks and self._checks[0][0] <= now:
            _, name = heapq.heappop(self._checks)
            settings = self.federated_queues.get(name)
            q = addressing.queues.get(name)
            if settings is None or q is None or q.consumer_count:
                continue
            limit = settings["auto-delete-message-count"]
            if limit != -1 and q.message_count > limit:
                continue
            self.broker.remove_queue(name, "federation queue auto-deleted")
            n += 1
        return n

    # -- management ------------------------------------------------------------------------------------------
    def mgmt_streams(self) -> list[dict]:
        return [up.describe() for up in self.upstreams]


def _int(value, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


__all__ = ["FED_HOPS_ANNOTATION", "FederationPart", "LINK_FEDERATION", "Upstream", "hops_allowed"]
