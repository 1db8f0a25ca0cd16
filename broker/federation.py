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
from broker.fedcommand import ControlOwner
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
#: Link property of a queue federation receiver: {origin, priority}.
LINK_FEDERATION_QUEUE = "td.federation-queue"
#: Most credit a queue federation receiver has out at a time (its local consumers' credit, at most this):
#: credit cannot be taken back, so this bounds what is pulled after the local consumers stop taking.
QUEUE_PULL_BATCH = 10
#: Artemis' defaults when an address policy leaves them out (FederatedAddress: auto-delete on, after an hour,
#: whatever the message count).
DEFAULT_AUTO_DELETE = True
DEFAULT_AUTO_DELETE_DELAY_MS = 3_600_000
DEFAULT_AUTO_DELETE_MESSAGE_COUNT = -1
#: Credit of a federation receiver: as a network bridge's prefetch.
FEDERATION_CREDIT = 1000
#: The address of the control link a downstream sends its command on.
CONTROL_ADDRESS = "$td.federation.control"
CONTROL = "federation-control"  # BrokerLink.mode of a control link
#: Commands a downstream may have in flight (it sends one per connection).
CONTROL_CREDIT = 10


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

    def __init__(self, delivery, receiver: UpstreamReceiver, *, count_hops: bool = True):
        self.delivery = delivery
        self.receiver = receiver
        self.count_hops = count_hops

    def on_message(self, engine, bl, d, payload):
        if payload is not None and not self.count_hops:
            r = self.receiver
            if r.transformer is not None:
                try:
                    from broker.transformers import apply_transformer

                    payload = apply_transformer(r.transformer, payload)
                except ValueError as exc:
                    raw.set_rejected(d, "amqp:decode-error", str(exc)[:200])
                    self.delivery.answer(bl, d, accepted=False)
                    return
            r.copied += 1
        elif payload is not None:
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

    def __init__(self, part: FederationPart, federation, stream, address_policies: list, targets=None,
                 *, commanded_by: str | None = None, queue_policies: list | None = None):
        self.part = part
        self.federation = federation
        self.stream = stream
        self.address_policies = address_policies
        self.queue_policies = queue_policies or []
        self.queue_receivers: dict[str, UpstreamReceiver] = {}  # local queue -> its pull from the upstream
        self.targets = targets  # list[NetworkTarget]; None: the stream's static-connectors
        self.commanded_by = commanded_by  # a downstream's broker that asked for this upstream, or None
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
        self.queue_receivers = {}

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
        if self.queue_policies:
            queues = self.part.queue_demand(self)
            for qname in [n for n in self.queue_receivers if n not in queues]:
                self._stop_queue(qname)
            for qname, (policy, priority) in queues.items():
                if qname not in self.queue_receivers:
                    self._start_queue(qname, policy, priority)
        engine.wake()

    def _start_queue(self, qname: str, policy, priority: int) -> None:
        """Queue federation: pull from the upstream's queue of the same name, at the local consumers'
        priority plus priority-adjustment (Artemis: -1, so the upstream's own consumers come first)."""
        broker = self.part.broker
        rx = self.session.receiver(f"federated.{self.federation.name}.{self.stream.name}.{qname}.queue")
        rx.source.address = qname
        caps = rx.source.capabilities
        caps.put_array(False, proton.Data.SYMBOL)
        caps.enter()
        caps.put_symbol("queue")
        caps.exit()
        rx.target.address = qname
        rx.properties = {proton.symbol(LINK_FEDERATION_QUEUE): {
            "origin": broker.network.broker_id, "priority": priority}}
        rx.open()
        receiver = UpstreamReceiver(qname, policy, self.part.transformer(self.federation, policy))
        q = broker.addressing.queues[qname]
        bl = broker.delivery.attach(self.engine, raw.pointer(rx), q, incoming=True, name=rx.name, pulled=True)
        bl.owner = _Inbound(broker.delivery, receiver, count_hops=False)
        self.engine.own_link(bl.ptr, bl)
        receiver.link = bl
        self.queue_receivers[qname] = receiver
        log.info("federation %s: queue %s pulls from %s (priority %d)", self.name, qname, self.peer_name, priority)

    def _stop_queue(self, qname: str) -> None:
        self._let_go(self.queue_receivers.pop(qname).link).close()
        log.info("federation %s: queue %s no longer pulls", self.name, qname)

    def _let_go(self, bl):
        """Forget a receiver's link here and in wire (wire frees it after the peer's detach, unannounced);
        returns its proton link for the caller to close or detach."""
        links = self.engine.app.links
        if links.get(bl.ptr) is bl:
            del links[bl.ptr]
        bl.closed = True
        self.engine.disown_link(bl.ptr)
        return raw.link_object(bl.ptr)

    def pull(self) -> None:
        """Credit for each queue federation receiver while its local queue has nothing ready and local
        consumers have credit: the queue pulls only what its consumers can take now."""
        if self.engine is None or self.engine.finished:
            return
        woke = False
        for qname, receiver in self.queue_receivers.items():
            q = self.part.broker.addressing.queues.get(qname)
            bl = receiver.link
            if q is None or bl.closed:
                continue
            want = 0 if q.ready_count else min(QUEUE_PULL_BATCH, self.part.local_credit(q))
            have = raw.link_credit(bl.ptr)
            if want > have:
                raw.link_flow(bl.ptr, want - have)
                woke = True
        if woke:
            self.engine.wake()

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
        self._let_go(self.receivers.pop(address).link).detach()
        log.info("federation %s: no demand for %s any more", self.name, address)

    def describe(self) -> dict:
        ctl = self.control
        return {"federation": self.federation.name, "stream": self.stream.name, "kind": "upstream",
                "state": ctl.status if ctl is not None else "stopped", "peer": self.peer_name,
                "reconnectAttempts": ctl.attempts if ctl is not None else 0,
                "remote": ctl.remote or ctl.label if ctl is not None else "",
                "lastError": ctl.last_error if ctl is not None else "", "sharedWith": "",
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
                address_policies, queue_policies = fed.policies_for(stream)
                self.upstreams.append(Upstream(self, fed, stream, address_policies, queue_policies=queue_policies))
        self.federated_queues: dict[str, dict] = {}  # queue here -> the federation link's settings
        self.queue_consumers: dict = {}              # consumer id -> origin: other brokers' queue federation
        self._transformers: dict = {}
        self._checks: list = []                      # heap of (clock ms, queue): auto-delete checks
        self._refreshing = False
        self._listening = False
        self.spawn = None   # (Upstream) -> None: the runtime starts its dial loop (broker.fedruntime)
        self._control_owner = ControlOwner(self)
        self.downstreams = []  # (federation, stream, address policies) this broker commands
        self.controls: list = []  # the dial loops' controls (broker.fedruntime), for management
        for fed in getattr(broker.cfg, "federations", []) or []:
            for stream in getattr(fed, "downstreams", []):
                self.downstreams.append((fed, stream, fed.policies_for(stream)[0]))
        broker.delivery.consumer_listeners.append(self._consumer_changed_upstream_side)
        if self.upstreams:
            self._listen()

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
                        if not any(w in source.split(".") for w in ("#", "*")):  # a wildcard divert names no address
                            self._match(up, source, out, diverts_only=True)
        return out

    def queue_demand(self, up: Upstream) -> dict:
        """Queue -> (policy, priority) for every local anycast queue that a queue policy of ``up`` matches
        and that has a consumer: a client's, or (with include-federated) another broker's federation
        consumer, never one standing for ``up``'s own broker."""
        addressing = self.broker.addressing
        out: dict = {}
        for bl in self.broker.delivery.consumers.values():
            q = bl.queue
            if q is None or bl.demand is not None:
                continue
            info = addressing.queue_info.get(q.name)
            if info is None or info.routing_type == MULTICAST or info.temporary:
                continue
            origin = self.queue_consumers.get(bl.consumer_id)
            if origin is not None and origin == up.peer_id:
                continue
            for policy in up.queue_policies:
                if (origin is None or policy.include_federated) and policy.matches(q.name, info.address):
                    priority = bl.priority + policy.priority_adjustment
                    if q.name not in out or out[q.name][1] < priority:
                        out[q.name] = (policy, priority)
                    break
        return out

    def local_credit(self, q) -> int:
        """What the consumers of ``q`` here (not other brokers' federation consumers) can take now."""
        return sum(q.credit_of(bl.consumer_id) for bl in self.broker.delivery.consumers.values()
                   if bl.queue is q and bl.consumer_id not in self.queue_consumers)

    def after_batch(self) -> None:
        """Queue federation receivers pull for idle local consumers (Broker.on_batch_end)."""
        for up in self.upstreams:
            if up.queue_receivers:
                up.pull()

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
            if info is not None and (info.routing_type == MULTICAST or any(u.queue_policies for u in self.upstreams)):
                self.refresh()

    def queue_removed(self, name: str) -> None:
        self.federated_queues.pop(name, None)
        if self.upstreams:
            self.refresh()

    def connection_closed(self, engine) -> None:
        for up in self.upstreams:
            if up.engine is engine:
                up.closed()

    # -- downstream: the command that makes a remote broker federate from us ---------------------------------
    def control_attach(self, engine, link) -> None:
        """A remote broker's downstream opens the control link: it will send one command."""
        engine.open_link_like_remote(link)
        bl = BrokerLink(link, engine, self._control_owner, None, True, raw.link_object(link).name)
        bl.mode = CONTROL
        engine.app.links[link] = bl
        engine.own_link(link, bl)
        raw.link_flow(link, CONTROL_CREDIT)

    def command(self, engine, body: dict) -> str | None:
        """Apply a downstream's command: make (or replace) the upstream back to it. Returns why it is refused,
        or None."""
        from broker.fedcommand import parse_command
        from broker.netconfig import NetworkTarget

        try:
            fed, stream, policies, host, port = parse_command(body)
        except (ValueError, AttributeError, TypeError) as exc:
            return f"bad federation command: {exc}"
        origin = getattr(engine.app, "network_peer", None) or engine.remote_container or "?"
        name = f"{fed.name}/{stream.name}"
        for old in [u for u in self.upstreams if u.commanded_by == origin and u.name == name]:
            self.upstreams.remove(old)
            if old.control is not None:
                old.control.stop()
                if old.control in self.controls:
                    self.controls.remove(old.control)
        up = Upstream(self, fed, stream, policies, [NetworkTarget("tcp", host, port, None)], commanded_by=origin)
        self.upstreams.append(up)
        if not self._listening:
            self._listen()
        if self.spawn is not None:
            self.spawn(up)
        log.info("federation %s: upstream %s to %s:%d created by a downstream's command", fed.name, stream.name,
                 host, port)
        return None

    def _listen(self) -> None:
        self._listening = True
        self.broker.delivery.consumer_listeners.remove(self._consumer_changed_upstream_side)
        self.broker.delivery.consumer_listeners.append(self._consumer_changed)
        self.broker.addressing.subscribe(lambda _name: self.refresh())

    # -- upstream side: federation queues other brokers keep here ------------------------------------------
    @staticmethod
    def link_settings(lo, key: str = LINK_FEDERATION) -> dict | None:
        """The :data:`LINK_FEDERATION` (or ``key``) property of a receiver's attach, or None."""
        try:
            props = lo.remote_properties
        except Exception:  # noqa: BLE001 - malformed: not a federation link
            return None
        if not isinstance(props, dict):
            return None
        value = next((v for k, v in props.items() if str(k) == key), None)
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

    def queue_consumer(self, settings: dict, queue_name: str) -> tuple[int, object]:
        """A downstream's queue federation receiver attaches to a queue here: its priority (the downstream's
        consumers' plus priority-adjustment) and its outgoing transform (the network id). The consumer id is
        noted by :meth:`note_queue_consumer` once attached."""
        priority = settings.get("priority")
        priority = priority if isinstance(priority, int) and not isinstance(priority, bool) else -1
        network = self.broker.network
        return max(-1000, min(1000, priority)), (lambda msg, n=queue_name: network.stamp_net_id(n, msg))

    def note_queue_consumer(self, bl, settings: dict) -> None:
        origin = settings.get("origin")
        self.queue_consumers[bl.consumer_id] = origin if isinstance(origin, str) else "?"
        if self.upstreams:
            self.refresh()  # it was counted as a client consumer while it attached

    def _consumer_changed_upstream_side(self, bl, added: bool) -> None:
        if not added:
            self.queue_consumers.pop(bl.consumer_id, None)
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
        """A row per stream: upstreams (configured, or made by a downstream's command) and downstreams."""
        rows = []
        for ctl in self.controls:
            rows.extend(ctl.describe())
        shown = {id(getattr(ctl, "upstream", None)) for ctl in self.controls}
        rows.extend(up.describe() for up in self.upstreams if id(up) not in shown)
        return rows


def _int(value, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


__all__ = ["CONTROL", "CONTROL_ADDRESS", "FED_HOPS_ANNOTATION", "FederationPart", "LINK_FEDERATION",
           "LINK_FEDERATION_QUEUE", "Upstream", "hops_allowed"]
