"""Networks of brokers (ActiveMQ Classic network connectors) between tdbrokers, over AMQP: the broker part.

:class:`Network` is a part of :class:`broker.server.Broker` (sans-IO; the Trio tasks that dial and
rediscover are :mod:`broker.netruntime`). It owns:

* the broker's **network identity**: a broker id kept beside the journal (``network-broker-id``), stable
  across restarts so that a broker recognises itself on a message's broker path after a restart, and
  given in every AMQP OPEN it sends (``td.broker-id``, ``td.broker-name``, ``td.acceptors``);
* the **consumer advisories** this broker gives its network peers: a peer that attaches a receiver from
  :data:`ADVISORY_ADDRESS` gets one message for every consumer this broker has, then one for each
  consumer that comes or goes (ActiveMQ's ``ActiveMQ.Advisory.Consumer.>``; docs/network-protocol.md);
* the **bridges** (:class:`broker.netbridge.Bridge`) on network connections: our connectors' (``out``)
  and, for a peer's ``duplex`` connector, the reverse half the peer's configuration describes;
* **duplicate detection** on receive: a message from a network peer whose network id this broker has
  already stored is accepted and dropped (a forwarder resends what it had no confirmation of after a
  crash or a reconnect). The ids of the last :data:`DUPLICATE_CACHE_SIZE` messages are kept, and those of
  the messages still held are read back from the journal at start-up;
* the destination policies' **replay** and **rate limit** decisions and the times they wake a queue;
* the **failover-server-list** clients see in our OPEN: the other brokers of the network (the AMQP
  failover extension Qpid JMS and ActiveMQ/Artemis use).
"""

from __future__ import annotations

import collections
import functools
import heapq
import logging
import os
import socket
import uuid
from typing import TYPE_CHECKING

import proton

from broker.addressing import MULTICAST
from broker.links import BrokerLink
from broker.netbridge import NET_ID_ANNOTATION, TOPIC, QUEUE, Bridge, Demand
from broker.netconfig import NetworkConnector, policy_for
from broker.selector import message_lookup
from broker.selector import parse as parse_selector
from wire import raw
from wire.amqptypes import CodecError
from wire.assembly import KEEP
from wire.msgannotations import read_annotation, set_annotations

if TYPE_CHECKING:
    from broker.server import Broker

log = logging.getLogger("broker.network")

ADVISORY_ADDRESS = "$td.network.consumers"
OPEN_BROKER_ID = "td.broker-id"
OPEN_BROKER_NAME = "td.broker-name"
OPEN_ACCEPTORS = "td.acceptors"
OPEN_NETWORK = "td.network"          # a network connector's configuration (for the duplex peer)
OPEN_CONNECTOR = "td.network-connector"
FAILOVER_SERVER_LIST = "failover-server-list"
BROKER_ID_FILE = "network-broker-id"
ADVISORY = "advisory"                # BrokerLink.mode of advisory links

#: Network ids remembered for duplicate detection: Artemis' id-cache-size default; a forwarder resends
#: at most its prefetch of unconfirmed messages, far fewer.
DUPLICATE_CACHE_SIZE = 20000
#: Advisories queued for a peer that gives no credit: beyond this the peer is too slow and the link is closed
#: (memory bounded by configuration, never by a peer).
MAX_PENDING_ADVISORIES = 100_000
#: Largest prefetchSize a peer's open may set as our credit on its links (a bound a peer cannot raise).
MAX_PREFETCH = 100_000


def load_broker_id(cfg, name: str) -> str:
    """This broker's network id: kept in the journal directory when the broker persists (stable across
    restarts, like the messages whose broker paths name it), else new for this process."""
    directory = getattr(cfg, "journal_directory", None) if getattr(cfg, "persistence_enabled", True) else None
    path = os.path.join(directory, BROKER_ID_FILE) if directory else None
    if path and os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            value = f.read().strip()
        if value:
            return value
    value = f"{name}-{uuid.uuid4().hex[:12]}"
    if path:
        try:
            os.makedirs(directory, exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(value + "\n")
        except OSError as exc:
            log.warning("%s: cannot keep the network broker id (%s); it changes with each start", path, exc)
    return value


class _Advertiser:
    """The advisory stream to one peer: what waits for its credit."""

    __slots__ = ("link", "pending")

    def __init__(self, link: BrokerLink):
        self.link = link
        self.pending: collections.deque = collections.deque()


class Network:
    """The broker's part in a network of brokers (see the module docstring)."""

    def __init__(self, broker: Broker):
        self.broker = broker
        cfg = broker.cfg
        self.name = broker.name
        self.broker_id = load_broker_id(cfg, broker.name)
        self.connectors: list[NetworkConnector] = list(getattr(cfg, "network_connectors", []) or [])
        self.policies = list(getattr(cfg, "bridge_policies", []) or [])
        self.advisory_address = ADVISORY_ADDRESS
        self.bridges: list[Bridge] = []
        self._receivers: dict = {}          # advisory receiver pointer -> Bridge
        self._advertisers: dict = {}        # advisory sender pointer -> _Advertiser
        self._seen: collections.OrderedDict = collections.OrderedDict()
        self.duplicates_dropped = 0
        self.local_consumers: collections.Counter = collections.Counter()  # queue -> client consumers
        self.peers: dict[str, dict] = {}    # broker id -> {"name", "acceptors", "connections"}
        self.local_urls: list[str] = []     # our acceptors, once bound (the daemon sets them)
        self.controls: dict = {}            # connector name -> broker.netruntime.ConnectorControl
        self._boot = uuid.uuid4().hex[:8]
        self._wakes: list = []              # heap of (clock ms, queue name)
        self._policy_cache: dict = {}
        self.closing: list[Demand] = []      # withdrawn demands waiting for their forwards to settle
        broker.delivery.consumer_listeners.append(self.consumer_changed)
        broker.delivery.duplicates = self

    # -- identity and the OPEN ---------------------------------------------------------------------------
    def open_properties(self) -> dict:
        return {OPEN_BROKER_ID: self.broker_id, OPEN_BROKER_NAME: self.name, OPEN_ACCEPTORS: list(self.local_urls)}

    def failover_list(self) -> list[dict]:
        """The other brokers of the network, as the AMQP failover extension lists them."""
        out = []
        for peer in self.peers.values():
            if not peer["connections"]:
                continue
            for url in peer["acceptors"]:
                scheme, _, rest = url.partition("://")
                host, _, port = rest.rpartition(":")
                if host and port.isdigit():
                    # symbol keys, as Qpid JMS reads them (its AmqpSupport constants)
                    out.append({proton.symbol("hostname"): host, proton.symbol("network-host"): host,
                                proton.symbol("port"): int(port),
                                proton.symbol("scheme"): "amqps" if scheme in ("amqps", "ssl") else "amqp"})
        return out

    def set_local_acceptors(self, bound: list[tuple[str, int, bool]]) -> None:
        """The daemon's acceptors once bound: ``(host, port, tls)``; a wildcard host is named by this host's name."""
        urls = []
        for host, port, tls in bound:
            if host in ("0.0.0.0", "::", ""):
                host = socket.gethostname()
            urls.append(f"{'amqps' if tls else 'amqp'}://{host}:{port}")
        self.local_urls = urls

    def client_settings(self, connector: NetworkConnector):
        """The settings of a connection our connector dials."""
        props = self.open_properties()
        props[OPEN_NETWORK] = connector.to_properties()
        props[OPEN_CONNECTOR] = connector.name
        return self.broker.connection_settings(
            name=f"network:{connector.name}", sasl_username=connector.user_name or None,
            sasl_password=connector.password,
            sasl_client_mechanisms="SCRAM-SHA-512 SCRAM-SHA-256 PLAIN" if connector.user_name else None,
            properties=props, link_capacity=connector.prefetch_size)

    @staticmethod
    def remote_properties(engine) -> dict:
        """The connection properties of the peer's OPEN, with string keys ({} when none or malformed)."""
        try:
            props = engine.connection.remote_properties
        except Exception:  # noqa: BLE001 - a malformed map is "no properties"
            return {}
        return {str(k): v for k, v in props.items()} if isinstance(props, dict) else {}

    def _note_peer(self, engine, props: dict) -> str | None:
        remote_id = props.get(OPEN_BROKER_ID)
        if not isinstance(remote_id, str) or not remote_id:
            return None
        peer = self.peers.setdefault(remote_id, {"name": str(props.get(OPEN_BROKER_NAME) or remote_id),
                                                 "acceptors": [], "connections": 0})
        acceptors = props.get(OPEN_ACCEPTORS)
        if isinstance(acceptors, list):
            peer["acceptors"] = [a for a in acceptors if isinstance(a, str)][:16]
        peer["connections"] += 1
        engine.app.network_peer = remote_id
        net = props.get(OPEN_NETWORK)
        prefetch = net.get("prefetchSize") if isinstance(net, dict) else None
        if isinstance(prefetch, int) and not isinstance(prefetch, bool) and 0 < prefetch <= MAX_PREFETCH:
            engine.app.link_capacity = prefetch   # the forwarder's prefetchSize: our credit on its links
        return remote_id

    def outbound_opened(self, engine, connector: NetworkConnector, control) -> None:
        """Our connector's connection is open (the peer answered): start its bridge."""
        props = self.remote_properties(engine)
        remote_id = props.get(OPEN_BROKER_ID)
        if not isinstance(remote_id, str) or not remote_id:
            engine.close("amqp:precondition-failed", "not a tdbroker: no network broker id in its open")
            log.warning("network connector %s: the peer is not a tdbroker (no %s); closing", connector.name,
                        OPEN_BROKER_ID)
            control.note_error("the peer is not a tdbroker")
            return
        if remote_id == self.broker_id:
            engine.close("amqp:precondition-failed", "a network connector reached its own broker")
            log.warning("network connector %s reached a broker with this broker's network id %s: itself, or a "
                        "broker sharing its journal directory; closing", connector.name, self.broker_id)
            control.note_error("connected to itself")
            return
        self._note_peer(engine, props)
        engine.app.link_capacity = connector.prefetch_size  # what the duplex peer may have in flight to us
        bridge = Bridge(self, engine, connector, remote_id, str(props.get(OPEN_BROKER_NAME) or remote_id), "out")
        self.bridges.append(bridge)
        control.bridge = bridge
        control.opened(engine)
        bridge.start()

    def connection_opened(self, engine) -> None:
        """Any connection's remote open: a network peer is noted; a peer's duplex connector gets its reverse
        bridge here, with the peer's configuration."""
        if not engine.server:
            return  # our own connectors' connections: outbound_opened
        props = self.remote_properties(engine)
        remote_id = self._note_peer(engine, props)
        if remote_id is None:
            return
        net = props.get(OPEN_NETWORK)
        if not isinstance(net, dict) or not net.get("duplex"):
            return
        name = str(props.get(OPEN_CONNECTOR) or "NC")
        try:
            connector = NetworkConnector.from_properties({str(k): v for k, v in net.items()}, name=name)
        except ValueError as exc:
            log.warning("connection %d: duplex network connector %s refused: %s", engine.id, name, exc)
            engine.close("amqp:invalid-field", f"duplex network connector refused: {exc}"[:200])
            return
        if remote_id == self.broker_id:
            engine.close("amqp:precondition-failed", "a network connector reached its own broker")
            return
        bridge = Bridge(self, engine, connector, remote_id, str(props.get(OPEN_BROKER_NAME) or remote_id),
                        "duplex")
        self.bridges.append(bridge)
        bridge.start()

    def connection_closed(self, engine) -> None:
        remote_id = getattr(engine.app, "network_peer", None)
        if remote_id is not None and remote_id in self.peers:
            self.peers[remote_id]["connections"] = max(0, self.peers[remote_id]["connections"] - 1)
        for bridge in [b for b in self.bridges if b.engine is engine]:
            bridge.close()
            self.bridges.remove(bridge)
        for ptr in [p for p, b in self._receivers.items() if b.engine is engine]:
            del self._receivers[ptr]
        for ptr in [p for p, a in self._advertisers.items() if a.link.engine is engine]:
            del self._advertisers[ptr]

    # -- advisory links: wire's LinkOwner ------------------------------------------------------------------
    def own_advisory_receiver(self, bridge: Bridge, engine, ptr, name: str) -> BrokerLink:
        bl = BrokerLink(ptr, engine, self, None, True, name)
        bl.mode = ADVISORY
        engine.app.links[ptr] = bl
        engine.own_link(ptr, bl)
        self._receivers[ptr] = bridge
        return bl

    def advisory_attach(self, engine, link) -> None:
        """A peer subscribes to our consumer advisories."""
        if getattr(engine.app, "network_peer", None) is None:
            engine.refuse_link(link, "amqp:unauthorized-access",
                               f"{ADVISORY_ADDRESS} is for tdbroker network connections only")
            return
        lo = raw.link_object(link)
        engine.open_link_like_remote(link)
        lo.snd_settle_mode = proton.Link.SND_SETTLED
        bl = BrokerLink(link, engine, self, None, False, lo.name)
        bl.mode = ADVISORY
        engine.app.links[link] = bl
        engine.own_link(link, bl)
        adv = self._advertisers[link] = _Advertiser(bl)
        for consumer in list(self.broker.delivery.consumers.values()):
            advice = self._advice(consumer)
            if advice is not None:
                adv.pending.append(_encode(advice))
        for name in self._offline_subscriptions():
            advice = self._offline_advice(name)
            if advice is not None:
                adv.pending.append(_encode(advice))
        self._flush(adv)

    def unbind(self, bl: BrokerLink) -> None:
        bl.closed = True
        self._receivers.pop(bl.ptr, None)
        self._advertisers.pop(bl.ptr, None)

    def consumer_changed(self, bl: BrokerLink, added: bool) -> None:
        q = bl.queue
        if q is None:
            return
        if bl.demand is None:
            self.local_consumers[q.name] += 1 if added else -1
            if self.local_consumers[q.name] <= 0:
                del self.local_consumers[q.name]
        if not self._advertisers:
            return
        durable_sub = bl.durable_sub and bl.demand is None
        if added:
            if durable_sub:
                self._broadcast({"op": "remove", "id": f"durable:{q.name}"})
            self._broadcast(self._advice(bl))
        else:
            self._broadcast({"op": "remove", "id": str(bl.consumer_id)})
            if durable_sub:
                self._broadcast(self._offline_advice(q.name))

    def _advice(self, bl: BrokerLink) -> dict | None:
        info = self.broker.addressing.queue_info.get(bl.queue.name)
        if info is None or bl.consumer_id is None:
            return None
        kind = TOPIC if info.routing_type == MULTICAST else QUEUE
        demand = bl.demand
        origins = sorted(demand.all_origins()) if demand is not None else [f"{self.broker_id}/{bl.consumer_id}"]
        return {"op": "add", "id": str(bl.consumer_id), "kind": kind,
                "destination": info.address if kind == TOPIC else bl.queue.name,
                "selector": bl.selector or "", "path": list(demand.path) if demand is not None else [],
                "priority": bl.priority, "temporary": bool(info.temporary and kind == QUEUE),
                "origins": origins, "broker": self.name}

    def _offline_advice(self, qname: str) -> dict | None:
        """A durable subscription with no subscriber attached: demand for its topic unless the bridge is
        dynamicOnly (ActiveMQ forwards to inactive durable subscriptions by default)."""
        info = self.broker.addressing.queue_info.get(qname)
        if info is None or info.routing_type != MULTICAST or info.temporary or not info.durable:
            return None
        return {"op": "add", "id": f"durable:{qname}", "kind": TOPIC, "destination": info.address,
                "selector": info.selector.text if info.selector is not None else "", "path": [], "priority": 0,
                "temporary": False, "offline": True, "origins": [f"{self.broker_id}/durable:{qname}"],
                "broker": self.name}

    def _offline_subscriptions(self) -> list[str]:
        busy = {bl.queue.name for bl in self.broker.delivery.consumers.values() if bl.queue is not None}
        return [name for name, info in self.broker.addressing.queue_info.items()
                if info.routing_type == MULTICAST and not info.temporary and info.durable and name not in busy]

    def _broadcast(self, advice: dict | None) -> None:
        if advice is None or not self._advertisers:
            return
        payload = _encode(advice)
        for adv in list(self._advertisers.values()):
            if len(adv.pending) >= MAX_PENDING_ADVISORIES:
                log.warning("network peer on connection %d takes no advisories; closing its link", adv.link.engine.id)
                adv.link.engine.close_link(adv.link.ptr, "amqp:resource-limit-exceeded", "advisories not taken")
                self._advertisers.pop(adv.link.ptr, None)
                continue
            adv.pending.append(payload)
            self._flush(adv)

    def queue_removed(self, name: str) -> None:
        """A queue went (Broker.remove_queue): an inactive durable subscription's demand goes with it."""
        self._broadcast({"op": "remove", "id": f"durable:{name}"})

    def _flush(self, adv: _Advertiser) -> None:
        bl = adv.link
        if bl.closed or bl.engine.finished:
            return
        sent = False
        while adv.pending and raw.link_credit(bl.ptr) > 0:
            d = raw.send_unique_tagged(bl.ptr, bl.seq, adv.pending.popleft(), 0)
            bl.seq += 1
            raw.delivery_settle(d)
            sent = True
        if sent:
            self.broker.delivery.wake.add(bl.engine)
            bl.engine.wake()

    def on_message(self, engine, bl: BrokerLink, d, payload: bytes | None) -> None:
        raw.delivery_settle(d)
        raw.link_flow(bl.ptr, 1)
        bridge = self._receivers.get(bl.ptr)
        if bridge is None or payload is None or bridge.closed:
            return
        try:
            m = proton.Message()
            m.decode(payload)
            advice = m.body
            if not isinstance(advice, dict):
                raise ValueError("advisory body is not a map")
            bridge.on_advisory({str(k): v for k, v in advice.items()})
        except Exception as exc:  # noqa: BLE001 - a bad advisory is ignored, never the bridge's end
            log.warning("network bridge %s: bad advisory ignored: %s", bridge.connector.name, exc)

    def on_partial(self, engine, bl: BrokerLink, d, held: int) -> int:
        return KEEP

    def on_delivery_update(self, engine, bl: BrokerLink, d) -> None:
        if raw.delivery_settled(d):
            raw.delivery_settle(d)

    def on_link_flow(self, engine, bl: BrokerLink) -> None:
        adv = self._advertisers.get(bl.ptr)
        if adv is not None:
            self._flush(adv)

    def on_oversized(self, engine, bl: BrokerLink, d, limit: int) -> None:
        self.unbind(bl)

    # -- duplicate detection -------------------------------------------------------------------------------
    @staticmethod
    def duplicate_key(payload: bytes) -> str | None:
        try:
            value = read_annotation(payload, NET_ID_ANNOTATION)
        except CodecError:
            return None
        return value if isinstance(value, str) else None

    def is_duplicate(self, key: str) -> bool:
        if key in self._seen:
            self._seen.move_to_end(key)
            self.duplicates_dropped += 1
            return True
        return False

    def remember(self, key: str) -> None:
        self._seen[key] = None
        if len(self._seen) > DUPLICATE_CACHE_SIZE:
            self._seen.popitem(last=False)

    def rebuild_duplicates(self) -> int:
        """After journal recovery: the network ids of the messages held (they may be sent again)."""
        n = 0
        for q in self.broker.addressing.queues.values():
            for msg in q.ready():
                key = self.duplicate_key(msg.payload)
                if key is not None:
                    self.remember(key)
                    n += 1
        return n

    def net_id(self, queue_name: str, msg) -> str:
        """A forwarded message's network id: its journal record when durable (the same after a restart,
        so a resend after a crash is recognised), else its place in this process's queue."""
        if msg.record_id is not None:
            return f"{self.broker_id}:{msg.record_id}"
        return f"{self.broker_id}:{self._boot}:{queue_name}:{msg.seq}"

    def stamp_net_id(self, queue_name: str, msg) -> bytes:
        """A message as it leaves on a federation consumer link: with a network id unless it has one, so the
        downstream drops a copy it already stored (the network bridges' duplicate detection)."""
        payload = msg.outgoing()
        try:
            if read_annotation(payload, NET_ID_ANNOTATION) is not None:
                return payload
            return set_annotations(payload, {NET_ID_ANNOTATION: self.net_id(queue_name, msg)})
        except CodecError:
            return payload

    # -- policies: replay and rate limits --------------------------------------------------------------------
    def _policy(self, demand: Demand):
        key = (demand.kind, demand.destination)
        if key not in self._policy_cache:
            self._policy_cache[key] = policy_for(self.policies, demand.kind, demand.destination)
        return self._policy_cache[key]

    def replay_allowed(self, demand: Demand, msg) -> bool:
        """ConditionalNetworkBridgeFilter: a queue message back to a broker it came from only with
        replayWhenNoConsumers, no local consumer here, and replayDelay ms since it arrived."""
        policy = self._policy(demand)
        if policy is None or not policy.replay_when_no_consumers or demand.queue is None:
            return False
        if self.local_consumers.get(demand.queue.name, 0) > 0 and self._local_consumer_wants(demand, msg, policy):
            return False
        due = msg.enqueued_at + policy.replay_delay_ms
        if self.broker.clock() < due:
            self._wake(due, demand.queue.name)
            return False
        return True

    def _local_consumer_wants(self, demand: Demand, msg, policy) -> bool:
        """Whether a client consumer here blocks the replay: any does, or with selectorAware only one whose
        selector selects the message."""
        if not policy.selector_aware:
            return True
        lookup = None
        for bl in self.broker.delivery.consumers.values():
            if bl.queue is not demand.queue or bl.demand is not None:
                continue
            if not bl.selector:
                return True
            try:
                if lookup is None:
                    lookup = message_lookup(msg.payload)
                if _parsed_selector(bl.selector).matches(lookup):
                    return True
            except (CodecError, ValueError):
                continue
        return False

    def rate_ok(self, demand: Demand) -> bool:
        policy = self._policy(demand)
        if policy is None or policy.rate_limit <= 0:
            return True
        now = self.broker.clock()
        if now - demand.window_start >= policy.rate_duration_ms:
            demand.window_start, demand.window_count = now, 0
        if demand.window_count >= policy.rate_limit:
            self._wake(demand.window_start + policy.rate_duration_ms, demand.queue.name)
            return False
        demand.window_count += 1  # a yes hands the message to this demand (Queue._pick)
        return True

    def _wake(self, at: int, queue_name: str) -> None:
        if self._wakes and self._wakes[0] == (at, queue_name):
            return
        heapq.heappush(self._wakes, (at, queue_name))
        if len(self._wakes) > 10_000:  # one per queue and time is plenty: keep the earliest
            self._wakes = heapq.nsmallest(1000, set(self._wakes))
            heapq.heapify(self._wakes)

    def after_batch(self) -> None:
        """Withdrawn demands whose forwards are all settled now detach (Broker.on_batch_end)."""
        done = [d for d in self.closing if d.link is None or d.link.closed or not d.link.unsettled]
        if done:
            self.closing = [d for d in self.closing if d not in done]
            for d in done:
                if d.link is not None and d.link.closed:
                    d.bridge._drop(d)  # the connection went meanwhile: the link is gone already
                else:
                    d.bridge.finish(d)

    def next_deadline(self) -> int | None:
        return self._wakes[0][0] if self._wakes else None

    def tick(self, now: int) -> int:
        """Queues whose replay delay or rate window ended are dispatched again; returns how many."""
        n = 0
        queues = self.broker.addressing.queues
        seen = set()
        while self._wakes and self._wakes[0][0] <= now:
            _, name = heapq.heappop(self._wakes)
            if name in queues and name not in seen:
                seen.add(name)
                self.broker.queue_changed(queues[name])
                n += 1
        return n

    def served(self, kind: str, dest: str, origins: set, hops: int) -> bool:
        """Whether a demand of any bridge already stands for all of ``origins`` on ``dest`` at no more
        than ``hops`` brokers away (suppressDuplicate*Subscriptions)."""
        for bridge in self.bridges:
            for d in bridge.demands.values():
                if d.kind == kind and d.destination == dest and len(d.path) <= hops and origins <= d.all_origins():
                    return True
        return False

    # -- management ----------------------------------------------------------------------------------------
    def mgmt_bridges(self) -> list[dict]:
        """Every bridge, ours (one row per connector target, connected or not) and duplex halves."""
        rows = []
        for control in self.controls.values():
            rows.extend(control.describe())
        for bridge in self.bridges:
            if bridge.direction == "duplex":
                rows.append({"name": bridge.connector.name, "remote": bridge.engine.remote_host,
                             "duplex": True, "state": "connected", "reconnectAttempts": 0,
                             **bridge.describe(), "direction": "duplex (remote's)"})
        return rows


#: Parsed local selectors for selectorAware replays (a consumer's selector text is fixed for its life).
_parsed_selector = functools.lru_cache(maxsize=1024)(parse_selector)


def _encode(advice: dict) -> bytes:
    return proton.Message(body=advice).encode()


__all__ = ["ADVISORY", "ADVISORY_ADDRESS", "Network", "OPEN_BROKER_ID", "load_broker_id"]
