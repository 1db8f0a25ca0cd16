"""One direction of a network bridge (ActiveMQ Classic's ``DemandForwardingBridge``), sans-IO.

A :class:`Bridge` forwards this broker's messages to one remote broker over one AMQP connection, on demand:

* it attaches a receiver from the remote's consumer-advisory node (:data:`broker.network.ADVISORY_ADDRESS`)
  and learns of every consumer the remote has (docs/network-protocol.md), unless ``staticBridge``;
* for each advised consumer that passes ActiveMQ's checks (``DemandForwardingBridgeSupport``
  ``serviceRemoteConsumerAdvisory``: its broker path within ``consumerTTL``, not through this broker, a
  permissible destination) it opens a :class:`Demand`: a local *network consumer* -- a sender link to the
  same destination on the remote, bound to the local queue (a queue) or to a temporary subscription of the
  local address (a topic) -- with lower priority than local consumers when
  ``decreaseNetworkConsumerPriority``;
* with ``conduitSubscriptions`` every remote consumer of a destination shares one demand (and its
  selectors are left to the remote broker); without, each remote consumer has its own, with its selector;
* ``staticallyIncludedDestinations`` have a demand for as long as the bridge is up, "as if there were an
  extra consumer".

A message leaves through a demand only when ``NetworkBridgeFilter`` would let it: the remote broker is not
on its broker path, and the path is shorter than ``messageTTL`` -- except that a destination policy with
``replayWhenNoConsumers`` sends a message back to a broker it came from when this broker has no local
consumer for it any more and it has been here ``replayDelay`` ms (ActiveMQ's
``ConditionalNetworkBridgeFilter``: the "stuck messages" case); ``rateLimit`` per ``rateDuration`` throttles
a demand. On its way out a message gets this broker appended to its path and, the first time it crosses
a bridge, a network id (``x-opt-td.net-id``) by which the receiving broker drops a duplicate.

Every forward is unsettled: the local message is acknowledged only when the remote broker accepts it,
which for a persistent message means it is on the remote's disk (store and forward).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import proton

from broker.addressing import ANYCAST, MULTICAST
from broker.netconfig import NetworkConnector
from broker.selector import SelectorError, message_lookup
from broker.selector import parse as parse_selector
from wire import raw
from wire.amqptypes import CodecError
from wire.msgannotations import read_annotation, read_annotations, set_annotations

if TYPE_CHECKING:
    from broker.network import Network

log = logging.getLogger("broker.network")

PATH_ANNOTATION = "x-opt-td.broker-path"
NET_ID_ANNOTATION = "x-opt-td.net-id"
QUEUE, TOPIC = "queue", "topic"

#: Credit on the advisory receiver: advisories are small and the remote sends one per consumer change.
ADVISORY_CREDIT = 1000


def message_path(payload: bytes) -> list:
    """The broker ids a message has crossed (its ``x-opt-td.broker-path``), [] when none."""
    path = read_annotation(payload, PATH_ANNOTATION)
    return list(path) if isinstance(path, list) else []


def _capability(terminus, kind: str) -> None:
    caps = terminus.capabilities
    caps.put_array(False, proton.Data.SYMBOL)
    caps.enter()
    caps.put_symbol(kind)
    caps.exit()


class Demand:
    """A DemandSubscription: why this broker forwards one destination to the remote broker, and the
    network consumer that does it."""

    __slots__ = ("bridge", "key", "kind", "destination", "consumers", "path", "priority", "link", "queue",
                 "static", "forwarded", "window_start", "window_count", "selectors", "temporary", "origins",
                 "async_send", "withdrawn")

    def __init__(self, bridge: Bridge, kind: str, destination: str, path: list, priority: int, static: bool):
        self.bridge = bridge
        self.key: tuple = (kind, destination)   # its key in Bridge.demands
        self.kind = kind
        self.destination = destination
        self.consumers: dict[str, object] = {}  # advised consumer id -> its parsed selector (or None)
        self.path = path                        # broker ids the demand travelled, nearest last
        self.priority = priority
        self.link = None                        # the BrokerLink of the network consumer
        self.queue = None                       # the local queue it consumes
        self.static = static
        self.forwarded = 0
        self.window_start = 0                   # rateLimit window (ms) and messages sent in it
        self.window_count = 0
        self.selectors = None                   # selectors the demand applies here (None: everything)
        self.async_send = not bridge.connector.always_sync_send  # non-persistent ones go pre-settled
        self.withdrawn = False                  # its last consumer went: it waits for its forwards to settle
        self.temporary = False                  # it stands for a remote temporary queue
        self.origins: dict[str, set] = {}       # advised consumer id -> the original consumers it stands for

    def all_origins(self) -> set:
        out = set()
        for o in self.origins.values():
            out |= o
        return out

    def describe(self) -> dict:
        return {"kind": self.kind, "destination": self.destination, "consumers": len(self.consumers),
                "static": self.static, "forwarded": self.forwarded, "priority": self.priority,
                "path": list(self.path)}


class Bridge:
    """Forwarding from this broker to the broker at the other end of ``engine`` (see the module docstring).

    ``direction``: ``"out"`` (our connector dialled it) or ``"duplex"`` (the remote's duplex connector
    dialled us and this is its reverse half, with the remote's configuration)."""

    def __init__(self, network: Network, engine, connector: NetworkConnector, remote_id: str,
                 remote_name: str, direction: str):
        self.network = network
        self.broker = network.broker
        self.engine = engine
        self.connector = connector
        self.remote_id = remote_id
        self.remote_name = remote_name
        self.direction = direction
        self.demands: dict[tuple, Demand] = {}
        self.by_consumer: dict[str, tuple] = {}   # advised consumer id -> demand key
        self.session = None
        self.advisory = None
        self.forwarded = 0
        self.closed = False
        self._links = 0

    # -- life ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.session = self.engine.connection.session()
        self.session.open()
        c = self.connector
        if not c.static_bridge:
            rx = self.session.receiver(f"td-net.{c.name}.advisory")
            rx.source.address = self.network.advisory_address
            rx.target.address = None
            rx.open()
            self.advisory = self.network.own_advisory_receiver(self, self.engine, raw.pointer(rx), rx.name)
            raw.link_flow(self.advisory.ptr, ADVISORY_CREDIT)
        for f in c.static_destinations():
            self._open(f.kind, f.pattern, None, [self.remote_id], self._priority([]), static=True, selector=None)
        self.broker.on_batch_end()
        self.engine.wake()
        log.info("network bridge %s: %s -> %s (%s) started", c.name, self.network.name, self.remote_name,
                 self.direction)

    def close(self) -> None:
        """The connection is gone: forget the demands (their links went with it) and their subscriptions."""
        if self.closed:
            return
        self.closed = True
        for d in list(self.demands.values()):
            self._drop(d)
        self.demands.clear()
        self.by_consumer.clear()

    # -- advisories ------------------------------------------------------------------------------------------
    def on_advisory(self, advice: dict) -> None:
        op = advice.get("op")
        if op == "add":
            self._advised(advice)
        elif op == "remove":
            self._withdrawn(str(advice.get("id")))
        self.broker.on_batch_end()
        self.engine.wake()

    def _priority(self, advised_path: list) -> int:
        """ActiveMQ's network consumer priority: consumerPriorityBase lowered by the hops beyond the
        neighbour, so local consumers win, then nearer brokers' (decreaseNetworkConsumerPriority)."""
        if not self.connector.decrease_network_consumer_priority:
            return 0
        return self.connector.consumer_priority_base - len(advised_path)

    def _advised(self, a: dict) -> None:
        c = self.connector
        cid = str(a.get("id"))
        kind = a.get("kind")
        dest = a.get("destination")
        path = a.get("path") or []
        if kind not in (QUEUE, TOPIC) or not isinstance(dest, str) or not isinstance(path, list):
            log.warning("network bridge %s: malformed advisory ignored: %r", c.name, a)
            return
        if cid in self.by_consumer:
            return
        if c.consumer_ttl > -1 and len(path) >= c.consumer_ttl:
            return  # beyond consumerTTL hops
        if self.network.broker_id in path:
            return  # demand that went through us: a loop
        if not c.permissible(kind, dest, temporary=bool(a.get("temporary"))):
            return
        if a.get("offline") and c.dynamic_only:
            return  # an inactive durable subscription creates demand only when not dynamicOnly
        origins = {str(o) for o in a.get("origins") or () if isinstance(o, str)} or {f"{self.remote_id}/{cid}"}
        suppress = (c.suppress_duplicate_queue_subscriptions if kind == QUEUE
                    else c.suppress_duplicate_topic_subscriptions)
        if suppress and path and self.network.served(kind, dest, origins, len(path) + 1):
            # ActiveMQ's suppressDuplicate*Subscriptions: in a cyclic network the same consumer is advised
            # again through an intermediary; a demand no shorter than one we have already is not made.
            return
        selector = None
        text = a.get("selector")
        if isinstance(text, str) and text:
            try:
                selector = parse_selector(text)
            except SelectorError:
                selector = None  # the remote accepted it; we cannot evaluate it: forward everything
        key = (kind, dest) if c.conduit_subscriptions else (kind, dest, cid)
        demand = self.demands.get(key)
        if demand is None:
            demand = self._open(kind, dest, key, path + [self.remote_id], self._priority(path), static=False,
                                selector=None if c.conduit_subscriptions else selector,
                                temporary=bool(a.get("temporary")))
            if demand is None:
                return
        demand.consumers[cid] = selector
        demand.origins[cid] = origins
        self.by_consumer[cid] = demand.key
        self._refresh_selectors(demand)

    def _withdrawn(self, cid: str) -> None:
        key = self.by_consumer.pop(cid, None)
        demand = self.demands.get(key) if key is not None else None
        if demand is None:
            return
        demand.consumers.pop(cid, None)
        demand.origins.pop(cid, None)
        if demand.consumers or demand.static:
            self._refresh_selectors(demand)
            return
        self.demands.pop(key, None)
        demand.withdrawn = True  # hands out nothing more (_passes, _rate_ok)
        if demand.link is not None and demand.link.unsettled:
            # Forwards in flight are not abandoned: the remote may have stored them already, and a detach
            # would put them back here to be taken twice. The link goes once the remote has settled them.
            self.network.closing.append(demand)
            return
        self.finish(demand)

    def finish(self, demand: Demand) -> None:
        """Detach a withdrawn demand's network consumer and forget what it kept here."""
        if demand.link is not None:
            self.broker.detach_local(demand.link, "amqp:resource-deleted", "no more demand")
        self._drop(demand)

    def _refresh_selectors(self, demand: Demand) -> None:
        """Which selectors this side evaluates: without conduit, the one consumer's; with conduit none (the
        remote broker evaluates, as ActiveMQ's ConduitBridge clears them)."""
        if not self.connector.conduit_subscriptions:
            sels = list(demand.consumers.values())
            demand.selectors = None if not sels or any(s is None for s in sels) else sels
        else:
            demand.selectors = None

    # -- demands -----------------------------------------------------------------------------------------
    def _open(self, kind: str, dest: str, key, path: list, priority: int, *, static: bool, selector,
              temporary: bool = False) -> Demand | None:
        broker = self.broker
        addressing = broker.addressing
        key = key or (kind, dest)
        demand = Demand(self, kind, dest, path, priority, static)
        demand.key = key
        demand.temporary = temporary
        if kind == QUEUE and temporary and dest not in addressing.queues:
            # bridgeTempDestinations: a reply sent here to the remote's temporary queue is forwarded to it;
            # the queue lives here only while demands for it do (see _drop)
            q = addressing.add_queue(dest, dest, durable=False, temporary=True)
        elif kind == QUEUE:
            q = addressing.lookup_queue(dest)
            if q is None:
                log.warning("network bridge %s: no queue %s here (auto-create is off); demand from %s ignored",
                            self.connector.name, dest, self.remote_name)
                return None
        else:
            addressing.addresses.setdefault(dest, set()).add(MULTICAST)
            q = addressing.subscription_queue(dest, durable_name=None)
            addressing.set_admit(q.name, lambda payload, d=demand: self._admits_topic(d, payload))
        demand.queue = q
        self._links += 1
        tx = self.session.sender(f"td-net.{self.connector.name}.{kind}.{dest}.{self._links}")
        tx.source.address = q.name
        tx.target.address = dest
        _capability(tx.target, kind)
        tx.open()
        demand.link = broker.attach_local(
            self.engine, raw.pointer(tx), q, incoming=False, name=tx.name, priority=priority,
            accepts=(lambda msg, d=demand: self._accepts_queue(d, msg)) if kind == QUEUE else
            (lambda msg, d=demand: self._rate_ok(d)),
            transform=lambda msg, d=demand: self._outgoing(d, msg), demand=demand)
        self.demands[key] = demand
        if selector is not None:
            demand.selectors = [selector]
        log.info("network bridge %s: demand for %s %s from %s (path %s, priority %d)", self.connector.name,
                 kind, dest, self.remote_name, "/".join(path), priority)
        return demand

    def _drop(self, demand: Demand) -> None:
        q = demand.queue
        addressing = self.broker.addressing
        if q is not None and q.name in addressing.queues and addressing.queues[q.name] is q:
            # A topic demand's subscription is its own. A temporary queue made for remote temporary queues
            # may serve several bridges' demands (bridgeTempDestinations ignores their destination lists):
            # it goes with the last of them.
            if demand.kind == TOPIC or (demand.temporary and addressing.queue_info[q.name].temporary
                                        and q.consumer_count == 0):
                self.broker.remove_queue(q.name, "network demand gone")
        log.info("network bridge %s: no demand for %s %s from %s any more", self.connector.name, demand.kind,
                 demand.destination, self.remote_name)

    # -- the filter and the rewrite of each forwarded message --------------------------------------------------
    def _passes(self, demand: Demand, payload: bytes, msg=None) -> bool:
        """ActiveMQ's NetworkBridgeFilter (+ the conditional replay and rate limit) for one message."""
        if demand.withdrawn:
            return False
        try:
            path = message_path(payload)
        except CodecError:
            return False
        if self.remote_id in path:
            if msg is None or not self.network.replay_allowed(demand, msg):
                return False
        elif self.connector.message_ttl > -1 and len(path) >= self.connector.message_ttl:
            return False
        sels = demand.selectors
        if sels is not None:
            try:
                lookup = message_lookup(payload)
            except CodecError:
                return False
            if not any(s.matches(lookup) for s in sels):
                return False
        return self._rate_ok(demand)

    def _accepts_queue(self, demand: Demand, msg) -> bool:
        return self._passes(demand, msg.payload, msg)

    def _admits_topic(self, demand: Demand, payload: bytes) -> bool:
        # the rate limit of a topic demand applies when its subscription hands messages out (_rate_ok)
        sels = demand.selectors
        try:
            path = message_path(payload)
        except CodecError:
            return False
        if self.remote_id in path:
            return False
        if self.connector.message_ttl > -1 and len(path) >= self.connector.message_ttl:
            return False
        if sels is not None:
            try:
                lookup = message_lookup(payload)
            except CodecError:
                return False
            return any(s.matches(lookup) for s in sels)
        return True

    def _rate_ok(self, demand: Demand) -> bool:
        return not demand.withdrawn and self.network.rate_ok(demand)

    def _outgoing(self, demand: Demand, msg) -> bytes:
        payload = msg.outgoing()
        try:
            have = read_annotations(payload, (PATH_ANNOTATION, NET_ID_ANNOTATION))
        except CodecError:
            have = {}
        path = have.get(PATH_ANNOTATION)
        entries = {PATH_ANNOTATION: (list(path) if isinstance(path, list) else []) + [self.network.broker_id]}
        if NET_ID_ANNOTATION not in have:
            entries[NET_ID_ANNOTATION] = self.network.net_id(demand.queue.name, msg)
        demand.forwarded += 1
        self.forwarded += 1
        return set_annotations(payload, entries)

    # -- management -------------------------------------------------------------------------------------------
    def describe(self) -> dict:
        return {"demand": [d.describe() for d in self.demands.values()], "forwarded": self.forwarded,
                "peer": self.remote_name, "peerId": self.remote_id, "direction": self.direction}


__all__ = ["ANYCAST", "Bridge", "Demand", "NET_ID_ANNOTATION", "PATH_ANNOTATION", "QUEUE", "TOPIC",
           "message_path"]
