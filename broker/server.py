"""The tdbroker AMQP endpoint, sans-IO: a broker made of named parts, fed events and time.

A little over ~600 lines: each part's logic is in its own module; what stays here is the one place where
a link's attach is decided (queue, subscription, browser, management, network advisory, federation
control) and where connections and links end, which reads as one sequence.

``Broker`` implements :class:`wire.connection.ConnectionHandler` for the cold events (connections and
links coming and going) and owns its parts, each with its own module:

===============  ===========================================  =============================================
part             class (module)                               what it owns
===============  ===========================================  =============================================
``addressing``   :class:`broker.addressing.AddressModel`      queues, addresses, routing types, bindings
``storage``      :class:`broker.storage.Storage`              journal, page files, disk limits
``admission``    :class:`broker.admission.Admission`          size bounds, refusal while a message arrives
``delivery``     :class:`broker.delivery.DeliveryPath`        the data path: the wire ``LinkOwner`` of links
``browsing``     :class:`broker.browse.Browsing`              queue browsers (distribution-mode copy)
``mover``        :class:`broker.moves.Mover`                  dead letters and expiry moves
``timers``       :class:`broker.timers.Timers`                expiry and redelivery-delay deadlines
``facade``       :class:`broker.facade.ManagementFacade`      what management reads and changes
``bridges``      :class:`broker.connections.BridgeControl`    broker connections (it dials out)
===============  ===========================================  =============================================

Links the peer attaches are bound to a queue by the terminus that names the node (target of a link the
peer sends on, source of one it receives on); links the broker attaches itself (broker connections) are
bound with :meth:`Broker.attach_local`. Every bound link is owned in wire by ``delivery``.

Time and I/O come from outside (:mod:`broker.runtime` in the daemon, the test itself in unit tests):
:meth:`Broker.tick` does what is due at ``now`` and :meth:`Broker.next_deadline` says when that is next;
:meth:`Broker.durable_up_to` is the group committer's report of what the journal has on disk (the
deliveries waiting for it are settled). The core tells its runtime (``runtime``, a :class:`RuntimeHooks`)
when an earlier deadline appears or the bindings file is behind. The clock is injectable
(``Broker(cfg, clock=...)``, milliseconds since the epoch).

Dead letters and expiry follow Artemis (:mod:`broker.moves`). The names management and the tools read
(``queues``, ``journal``, ``mgmt_queues`` ...) are kept on the broker as delegations to its parts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import Protocol

import proton

from broker.addressing import MULTICAST, AddressModel
from broker.admission import Admission
from broker.browse import Browsing
from broker.config import BrokerConfig
from broker.connections import BridgeControl
from broker.delivery import DeliveryPath
from broker.facade import ManagementFacade
from broker.limits import AddressLimits, SizeMeter
from broker.links import BrokerConnection, BrokerLink
from broker.federation import CONTROL_ADDRESS, LINK_FEDERATION_QUEUE, FederationPart
from broker.mirror import MirrorPart
from broker.mirrorcodec import MIRROR_CAPABILITY
from broker.moves import Mover
from broker.network import ADVISORY, ADVISORY_ADDRESS, FAILOVER_SERVER_LIST, Network
from broker.queue import Queue
from broker.security import permitted, user_roles
from broker.selector import Selector, selector_accepts
from broker.selector import parse as parse_selector
from broker.storage import Storage
from broker.timers import Timers
from wire import raw
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from wire.terminus import capabilities, put_source_selector, source_selector

log = logging.getLogger("broker.server")

PRODUCT = "tdbroker"
VERSION = "0.1.0"
# The node a management client sends requests to (Artemis' and Dispatch's name).
MANAGEMENT_ADDRESS = "$management"
# Terminus durability values (AMQP 1.0 §3.5.5) and expiry policy that make a subscription durable.
_TERMINUS_DURABLE = (proton.Terminus.CONFIGURATION, proton.Terminus.DELIVERIES)


def _now_ms() -> int:
    return int(time.time() * 1000)


class RuntimeHooks(Protocol):
    """What the sans-IO core tells the runtime that drives it (:class:`broker.runtime.BrokerRuntime`)."""

    def deadline_changed(self) -> None:
        """:meth:`Broker.next_deadline` is now earlier than the one the runtime sleeps until."""

    def bindings_changed(self) -> None:
        """The queue table changed: write the bindings file (:meth:`AddressModel.take_bindings`)."""


class Broker(ConnectionHandler):
    """The broker: queues and journal behind AMQP links (see the module docstring).

    ``clock``: () -> milliseconds since the epoch; ``disk_usage``: path -> (total, available) bytes of
    its file system (see :mod:`broker.disk`); ``journal_write``: the journal's ``write(fd, data)``. All
    are injectable for tests (a full disk, without filling one)."""

    def __init__(self, cfg: BrokerConfig, *, clock=None, disk_usage=None, journal_write=None):
        self.cfg = cfg
        self.clock = clock or _now_ms  # () -> milliseconds since the epoch
        self.name = cfg.name or "tdbroker"
        self.runtime: RuntimeHooks | None = None
        self.bridges: dict = {}  # broker connection name -> broker.connections.BridgeControl
        self.connections: set[BrokerConnection] = set()
        self.meter = SizeMeter()  # bytes held by every queue (global-max-size); queues update it
        self.limits = AddressLimits(cfg, self.meter)
        self.addressing = AddressModel(cfg, self.clock, self.meter)
        self.storage = Storage(cfg, self.addressing, self.limits, self.clock, self,
                               disk_usage=disk_usage, journal_write=journal_write)
        self.admission = Admission(self.addressing, self.storage, self.limits)
        self.delivery = DeliveryPath(self.addressing, self.storage, self.admission, self.limits, self.clock,
                                     self._forget_link)
        self.browsing = Browsing(self.clock, whole=self.storage.whole_message)
        self.mover = Mover(self.addressing, self.storage, self.limits, self.clock, self.queue_changed)
        self.addressing.exits = self.mover
        self.timers = Timers(self.addressing, self.queue_changed)
        self.facade = ManagementFacade(self)
        self.network = Network(self)
        self.federation = FederationPart(self)
        self.acceptors: dict = {}  # acceptor name -> broker.acceptors.AcceptorControl (set by the daemon)
        self.mirror = MirrorPart(self)
        self.mover.mirror = self.delivery.mirror
        self._deadline: int | None = None  # the deadline the runtime was last given
        for conn in cfg.broker_connections:
            BridgeControl(self, conn)

    # -- engines ----------------------------------------------------------------------------------
    def connection_settings(self, **kw) -> ConnectionSettings:
        kw.setdefault("container_id", self.name)
        kw["properties"] = {"product": PRODUCT, "version": VERSION, **kw.get("properties", {})}
        kw.setdefault("offered_capabilities", ())
        return ConnectionSettings(**kw)

    def new_engine(self, settings: ConnectionSettings, *, server: bool, remote_host: str = "",
                   min_large_message_size: int | None = None) -> EngineConnection:
        """An engine for one connection; ``min_large_message_size``: its acceptor's amqpMinLargeMessageSize
        (None: the default, broker.largemessage)."""
        if server:
            # Who we are to a network peer, and the other brokers of the network to a client that can fail
            # over (the AMQP failover extension's failover-server-list), as of this connection's start.
            props = {**settings.properties, **self.network.open_properties()}
            failover = self.network.failover_list()
            if failover:
                props[FAILOVER_SERVER_LIST] = failover
            settings = dataclasses.replace(settings, properties=props)
        engine = EngineConnection(self, settings, server=server, remote_host=remote_host)
        bc = BrokerConnection(engine)
        if min_large_message_size is not None:
            bc.min_large_message_size = min_large_message_size
        engine.app = bc
        self.connections.add(bc)
        return engine

    def close_all(self) -> None:
        for bc in list(self.connections):
            bc.engine.close()

    # -- time and durability: the inputs of the sans-IO core ------------------------------------------
    def next_deadline(self) -> int | None:
        """The earliest time (clock ms) :meth:`tick` has work, or None; the runtime sleeps until it."""
        self._deadline = nxt = self._next_timer()
        return nxt

    def _next_timer(self) -> int | None:
        times = [t for t in (self.timers.next_timer(), self.network.next_deadline(),
                             self.federation.next_deadline()) if t is not None]
        return min(times) if times else None

    def tick(self, now: int) -> int:
        """Do what is due at ``now``: expire messages, end redelivery delays; returns how many expired."""
        n, ended = self.timers.run_due(now)
        woken = self.network.tick(now) + self.federation.tick(now)
        if n or ended or woken:
            self.on_batch_end()
        return n

    def durable_up_to(self, record_id: int) -> None:
        """The journal has every record up to ``record_id`` on disk: settle what waited for it."""
        held = self.storage.take_durable(record_id)
        if held:
            self.delivery.accept_durable(held)
        if self.delivery.mirror is not None:
            self.delivery.mirror.durable_up_to(record_id)
            self.on_batch_end()  # hand the events now on disk to the mirror link

    def _stores_large(self, engine) -> bool:
        """Messages on ``engine``'s links may be stored as large messages (broker.largemessage)."""
        return self.storage.large is not None and engine.app.min_large_message_size >= 0

    def on_output_drained(self, engine) -> None:
        """wire: output queued for ``engine`` fell low (a large message being sent goes on)."""
        self.delivery.output_drained(engine)

    def messages_arriving(self) -> int:
        """Multi-frame messages wire still assembles for this broker's connections."""
        return sum(len(bc.engine.assembler) for bc in self.connections)

    def queue_changed(self, q: Queue) -> None:
        """``q`` has messages to hand out (dispatched at the end of the batch)."""
        self.delivery.dirty.add(q)

    def on_batch_end(self) -> None:
        storage = self.storage
        if storage.pager is not None and storage.pager.spools:
            storage.depage()
        delivery = self.delivery
        delivery.release_blocked()
        browsing = self.browsing
        if browsing.cursors:  # browsers first: they see what consumers are about to take
            browsing.dispatch()
        rounds = 0
        while delivery.dirty and rounds < 4:  # a dispatch may move messages to dead-letter/expiry queues
            delivery.dispatch()
            rounds += 1
        if browsing.cursors:  # and what those moves, or returns, put in their queues
            browsing.dispatch()
        if self.network.closing:
            self.network.after_batch()
        if self.federation.upstreams:
            self.federation.after_batch()
        self._arm_timer()
        delivery.wake_engines()
        storage.kick()
        if self.addressing.bindings_dirty and self.runtime is not None:
            self.runtime.bindings_changed()

    def _arm_timer(self) -> None:
        """Tell the runtime when a message now expires before the time it sleeps until."""
        nxt = self._next_timer()
        if nxt is not None and (self._deadline is None or nxt < self._deadline):
            self._deadline = nxt
            if self.runtime is not None:
                self.runtime.deadline_changed()

    # -- cold events ------------------------------------------------------------------------------
    def on_connection_open(self, engine) -> None:
        if engine.user is not None:
            log.info("connection %d (%s) opened, container %s, user %r (%s)", engine.id, engine.remote_host,
                     engine.remote_container, engine.user, engine.sasl_mechanism)
        else:
            log.info("connection %d (%s) opened, container %s", engine.id, engine.remote_host,
                     engine.remote_container)
        bc = engine.app
        self.network.connection_opened(engine)
        if bc.on_open is not None:
            bc.on_open(engine)

    def on_link_open(self, engine, link) -> None:
        applied = None
        try:
            applied = self._link_open(engine, link)
        except ValueError as exc:
            engine.refuse_link(link, "amqp:invalid-field", str(exc)[:200])
        lo = raw.link_object(link)
        if lo.is_sender:
            # The answered source's filter set is the filters in force (AMQP 1.0 §3.5.8): the selector
            # when one was applied, nothing else, so a client that asked for a filter we do not apply
            # learns it (Qpid JMS then fails the consumer) instead of getting every message unfiltered.
            if applied is not None:
                put_source_selector(lo.source.filter, *applied)
            else:
                lo.source.filter.clear()
        engine.wake()

    @staticmethod
    def _consumer_selector(lo) -> tuple[str, str, Selector] | None:
        """A consumer's ``apache.org:selector-filter:string`` source filter, parsed: ``(key, text,
        selector)``; ValueError (amqp:invalid-field) for a malformed filter or selector."""
        found = source_selector(lo.remote_source.filter)
        if found is None:
            return None
        key, text = found
        return key, text, parse_selector(text)

    def _link_open(self, engine, link) -> None:
        lo = raw.link_object(link)
        terminus = lo.remote_source if lo.is_sender else lo.remote_target
        address = terminus.address
        addressing = self.addressing
        wanted = self._consumer_selector(lo) if lo.is_sender else None
        if lo.is_sender and terminus.dynamic:
            q = addressing.temporary_queue()
            if self._denied(engine, link, "createNonDurableQueue", q.name):
                self.remove_queue(q.name, "refused (createNonDurableQueue)")
                return
            engine.open_link_like_remote(link, source_address=q.name, dynamic_source=True)
            bl = self.attach_local(engine, link, q, incoming=False, name=lo.name,
                                   presettled=lo.remote_snd_settle_mode == proton.Link.SND_SETTLED)
            bl.owned_queue = True
            return
        if not lo.is_sender and MIRROR_CAPABILITY in capabilities(lo.remote_target.capabilities):
            # a mirror source's events (broker.mirrortarget): they change anything, as management does
            if not self._denied(engine, link, "manage", address or ""):
                self.mirror.target.attach(engine, link)
            return None
        if not address:
            engine.refuse_link(link, "amqp:not-implemented", "tdbroker needs a named node (no anonymous relay)")
            return
        if address == CONTROL_ADDRESS and not lo.is_sender:
            # a downstream's command makes this broker dial out: the manage permission, as Artemis asks
            if not self._denied(engine, link, "manage", address):
                self.federation.control_attach(engine, link)
            return None
        if address == ADVISORY_ADDRESS and lo.is_sender:
            self.network.advisory_attach(engine, link)
            return None
        if address == MANAGEMENT_ADDRESS and not lo.is_sender:
            if self._denied(engine, link, "manage", address):
                return
            if self.management is None:
                engine.refuse_link(link, "amqp:not-found", "management is not available on this broker")
                return
            engine.open_link_like_remote(link)
            self.delivery.receiving(engine, link, lo.name, BrokerLink.MANAGEMENT)
            return
        caps = capabilities(terminus.capabilities)
        if "::" not in address and address not in addressing.queues and \
                addressing.routing_type_for(address, caps) == MULTICAST:
            return self._multicast_link(engine, link, lo, address, wanted)
        if "::" not in address and address not in addressing.queues and not addressing.queues_of(address) and (
                self._denied(engine, link, "createAddress", address)
                or self._denied(engine, link, "createDurableQueue", address)):
            return  # the attach would auto-create the address and its anycast queue
        q = addressing.lookup_queue(address)
        if q is None:
            engine.refuse_link(link, "amqp:not-found", f"queue {address} does not exist")
            return
        # A browser (AMQP 1.0 3.5.3 distribution-mode copy; qpid-jms QueueBrowser) sees the queue's
        # messages without taking them (broker.browse). On a multicast address (above) a copy-mode
        # receiver gets a subscription, which is already a copy.
        browser = lo.is_sender and terminus.distribution_mode == proton.Terminus.DIST_MODE_COPY
        permission = "browse" if browser else "consume" if lo.is_sender else "send"
        if self._denied(engine, link, permission, addressing.address_of(q.name)):
            return
        if not lo.is_sender:
            self.admission.advertise(lo, addressing.address_of(q.name), large=self._stores_large(engine))
        engine.open_link_like_remote(link)
        if browser:
            self.browsing.attach(engine, link, q, name=lo.name,
                                 presettled=lo.remote_snd_settle_mode == proton.Link.SND_SETTLED)
            log.debug("link %s browses queue %s", lo.name, q.name)
            return
        accepts = selector_accepts(wanted[2]) if wanted else None
        consumer: dict = {}
        queue_federation = FederationPart.link_settings(lo, LINK_FEDERATION_QUEUE) if lo.is_sender else None
        if queue_federation is not None:
            consumer["priority"], consumer["transform"] = self.federation.queue_consumer(queue_federation, q.name)
        bl = self.attach_local(engine, link, q, incoming=not lo.is_sender, name=lo.name,
                               presettled=lo.is_sender and lo.remote_snd_settle_mode == proton.Link.SND_SETTLED,
                               accepts=accepts, selector=wanted[1] if wanted else None, **consumer)
        if queue_federation is not None:
            self.federation.note_queue_consumer(bl, queue_federation)
        log.debug("link %s attached to queue %s (%s)", lo.name, q.name, "in" if bl.incoming else "out")
        return wanted[:2] if wanted else None

    def _multicast_link(self, engine, link, lo, address: str, wanted=None) -> tuple[str, str] | None:
        """A producer fans out to every multicast queue of the address; a consumer gets a subscription."""
        src = lo.remote_source
        durable = src.durability in _TERMINUS_DURABLE or src.expiry_policy == proton.Terminus.EXPIRE_NEVER
        if self._denied(engine, link, "consume" if lo.is_sender else "send", address) or (
                lo.is_sender and self._denied(engine, link, "createDurableQueue" if durable
                                              else "createNonDurableQueue", address)):
            return
        self.addressing.addresses.setdefault(address, set()).add(MULTICAST)
        if not lo.is_sender:
            self.admission.advertise(lo, address, large=self._stores_large(engine))
            engine.open_link_like_remote(link)
            self.delivery.receiving(engine, link, lo.name, BrokerLink.FANOUT, address)
            return
        sub_name = f"{engine.remote_container or 'client'}.{lo.name}" if durable else None
        # A subscription's selector filters what enters its queue (as Artemis' subscription queue
        # filter does): a message the subscriber does not want is never stored for it.
        q = self.addressing.subscription_queue(address, durable_name=sub_name,
                                               selector=wanted[2] if wanted else None)
        federation = FederationPart.link_settings(lo)
        transform = self.federation.federation_consumer(q, federation) if federation is not None else None
        engine.open_link_like_remote(link)
        bl = self.attach_local(engine, link, q, incoming=False, name=lo.name,
                               presettled=lo.remote_snd_settle_mode == proton.Link.SND_SETTLED,
                               selector=wanted[1] if wanted else None, transform=transform)
        bl.durable_sub = durable
        bl.owned_queue = not durable
        log.debug("link %s subscribed to %s with queue %s", lo.name, address, q.name)
        return wanted[:2] if wanted else None

    def _denied(self, engine, link, permission: str, address: str) -> bool:
        """With <security-settings>, refuse a client's attach its user's roles do not permit (Artemis'
        rule, broker.security.permitted) with amqp:unauthorized-access naming the permission. Links on
        the broker's own <amqp-connection>s are not checked: the configuration opened them."""
        if self._permits(engine, permission, address):
            return False
        engine.refuse_link(link, "amqp:unauthorized-access",
                           f"user {engine.user!r} lacks the {permission} permission on {address}"[:200])
        return True

    def _permits(self, engine, permission: str, address: str) -> bool:
        """Whether ``engine``'s user may do ``permission`` on ``address`` (always, without
        <security-settings> or on the broker's own connections); a refusal is logged (INFO)."""
        security = self.cfg.security
        if security is None or not security.settings or not engine.server:
            return True
        if permitted(security.settings, user_roles(security, engine.user), permission, address):
            return True
        log.info("connection %d: user %r refused %s on %s", engine.id, engine.user, permission, address)
        return False

    def attach_local(self, engine, link, q: Queue, *, incoming: bool, name: str = "",
                     presettled: bool = False, **consumer) -> BrokerLink:
        """Bind a link to a queue: credit for a receiving link, a consumer for a sending one (``consumer``:
        see :meth:`broker.delivery.DeliveryPath.attach`)."""
        return self.delivery.attach(engine, link, q, incoming=incoming, name=name, presettled=presettled,
                                    **consumer)

    def on_delivery(self, engine, d) -> None:
        """A delivery on a link nobody owns in wire. The broker's own among them are links it detached
        when their queue was deleted (still in ``engine.app.links`` until the peer's detach): what was
        in flight on them is released, so that the sender may try elsewhere."""
        bc = engine.app
        bl = bc.links.get(raw.delivery_link(d)) if bc is not None else None
        if bl is None or not bl.closed:
            return
        if not bl.incoming:
            if raw.delivery_settled(d):
                raw.delivery_settle(d)
            return
        if not raw.delivery_readable(d):
            return
        raw.recv_all(bl.ptr)  # its bytes are not kept
        aborted = raw.delivery_aborted(d)
        if raw.delivery_partial(d) and not aborted:
            return
        raw.link_advance(bl.ptr)
        if not aborted:
            raw.delivery_update(d, raw.RELEASED)
        raw.delivery_settle(d)
        engine.wake()

    def on_link_opened(self, engine, link) -> None:
        bl = engine.app.links.get(link)
        if bl is not None and bl.queue is not None:
            log.info("link %s to queue %s attached by the peer", bl.name, bl.queue.name)
            if bl.queue.name in self.mirror.snf_names and not bl.incoming:
                self.mirror.source_link_opened(bl)

    def _forget_link(self, bl: BrokerLink) -> None:
        """A link the data path detached itself leaves the connection's table."""
        bl.engine.app.links.pop(bl.ptr, None)

    def _unbind(self, bl: BrokerLink, *, failed: bool) -> None:
        if bl.mode == ADVISORY:
            self.network.unbind(bl)
        elif bl.mode == BrokerLink.BROWSE:
            self.browsing.unbind(bl)
        else:
            self.delivery.unbind(bl, failed=failed)

    def _drop_owned(self, bl: BrokerLink, closed: bool, *, connection_gone: bool = False) -> str | None:
        """A temporary queue (dynamic source, non-durable subscription) goes with its link; a durable
        subscription only when the link is closed (not detached). With <security-settings> the user needs
        deleteNonDurableQueue / deleteDurableQueue on the queue's address (Artemis' destroyQueue checks):
        without it a temporary queue stays until its connection closes (then it goes without a check, as
        Artemis removes a closed session's temporary queues), a durable subscription stays and the
        permission lacked is returned (the close is answered with it)."""
        if bl.incoming or bl.mode == BrokerLink.BROWSE or bl.queue is None or \
                bl.queue.name not in self.addressing.queues:
            return None
        name = bl.queue.name
        address = self.addressing.address_of(name)
        if bl.owned_queue:
            if not connection_gone and not self._permits(bl.engine, "deleteNonDurableQueue", address):
                log.info("queue %s kept until connection %d closes", name, bl.engine.id)
                bl.engine.app.kept_queues.append(name)
                return None
            self.remove_queue(name, "closed with its link")
        elif bl.durable_sub and closed:
            if not self._permits(bl.engine, "deleteDurableQueue", address):
                return "deleteDurableQueue"
            self.remove_queue(name, "closed with its link")
        return None

    def detach_local(self, bl: BrokerLink, condition: str, description: str) -> None:
        """Detach a link the broker attached itself (a network consumer whose demand went): its consumer
        leaves the queue (what it had unsettled goes back) and the peer gets a detach with ``condition``."""
        links = bl.engine.app.links
        if links.get(bl.ptr) is bl:
            # Wire frees a link we closed once the peer's detach comes, without telling us: forget it now,
            # so nothing touches its pointer later (an outgoing link has no stray deliveries to answer).
            del links[bl.ptr]
        if bl.closed:
            return  # closed already (its queue was removed): the link may be freed by now
        self._unbind(bl, failed=False)
        if not bl.engine.finished:
            bl.engine.close_link(bl.ptr, condition, description)
            bl.engine.wake()

    def remove_queue(self, name: str, reason: str) -> int:
        """Forget a queue: detach the links bound to it, journal the removal of its durable messages.
        Returns how many messages it held."""
        q, info = self.addressing.forget_queue(name)
        self.mirror.queue_removed(name, info)
        self.network.queue_removed(name)
        self.federation.queue_removed(name)
        unbind = self._unbind
        for bc in list(self.connections):
            for lp, bl in list(bc.links.items()):
                # a closed link may be freed already (wire frees what we closed when the peer detaches)
                if bl.queue is q and not bl.closed:
                    unbind(bl, failed=False)
                    if not bl.engine.finished:
                        bl.engine.close_link(lp, "amqp:resource-deleted", f"queue {name} {reason}")
        gone = q.drop_all()
        self.storage.acknowledge(gone)
        paged = self.storage.forget_paged(name)  # after the acks above: every record of the queue left is paged
        self.delivery.dirty.discard(q)
        log.info("queue %s %s (%d messages dropped)", name, reason, len(gone) + paged)
        return len(gone) + paged

    def on_link_close(self, engine, link, closed: bool) -> None:
        bl = engine.app.links.pop(link, None)
        if bl is not None:
            self._unbind(bl, failed=False)
            name = bl.queue.name if bl.queue is not None else None
            lacking = self._drop_owned(bl, closed)
            cond = raw.link_object(link).remote_condition
            if cond is not None:
                log.info("link %s closed by peer: %s %s", bl.name, cond.name, cond.description or "")
                if name in self.mirror.snf_names and not bl.incoming:
                    self.mirror.source_link_refused(name, cond.name, cond.description or "")
            if lacking is not None:  # our end of the close says why the subscription stays
                engine.close_link(link, "amqp:unauthorized-access",
                                  f"user {engine.user!r} lacks the {lacking} permission on "
                                  f"{self.addressing.address_of(name)}: subscription {name} kept"[:200])
        engine.wake()

    def on_connection_close(self, engine) -> None:
        bc = engine.app
        self.connections.discard(bc)  # first: a queue removed below must not try to detach links here
        for bl in list(bc.links.values()):
            # A network consumer's unconfirmed forwards are not failed attempts: the remote broker either
            # has them (a resend is dropped as a duplicate) or never got them; counting them would
            # dead-letter messages after enough reconnects of a bridge.
            self._unbind(bl, failed=bl.demand is None)
            self._drop_owned(bl, False, connection_gone=True)
        bc.links.clear()
        # after the links: a bridge's temporary queues go once no network consumer is on them
        self.network.connection_closed(engine)
        self.federation.connection_closed(engine)
        for name in bc.kept_queues:  # their links closed without deleteNonDurableQueue
            if name in self.addressing.queues:
                self.remove_queue(name, "removed with its connection")
        bc.kept_queues.clear()
        self.connections.discard(bc)
        self.on_batch_end()  # hand back what the connection's consumers held to other consumers
        log.info("connection %d (%s) closed%s", engine.id, engine.remote_host,
                 f" ({engine.error})" if engine.error else "")

    # -- the names management, the daemon and the tools read (delegations to the parts) -----------------
    management = property(lambda self: self.delivery.management,
                          lambda self, agent: setattr(self.delivery, "management", agent),
                          doc="An object with handle(request bytes) -> reply bytes | None, or None.")
    recorder = property(lambda self: self.delivery.recorder,
                        lambda self, rec: setattr(self.delivery, "recorder", rec),
                        doc="A wire.flowrecords.FlowRecorder when <flow-records> is configured, or None.")
    queues = property(lambda self: self.addressing.queues)
    queue_info = property(lambda self: self.addressing.queue_info)
    addresses = property(lambda self: self.addressing.addresses)
    queue_address = property(lambda self: self.addressing.queue_address)
    journal = property(lambda self: self.storage.journal)
    committer = property(lambda self: self.storage.committer)
    pager = property(lambda self: self.storage.pager)
    disk = property(lambda self: self.storage.disk)
    consumers = property(lambda self: self.delivery.consumers)
    messages_refused_disk = property(lambda self: self.storage.messages_refused_disk)
    messages_dead_lettered = property(lambda self: self.mover.dead_lettered)
    messages_moved_expired = property(lambda self: self.mover.moved_expired)
    messages_dropped = property(lambda self: self.mover.dropped)

    def open_journal(self) -> int:
        """Open the pager and the journal and recover what it holds (see Storage.open)."""
        n = self.storage.open()
        self.network.rebuild_duplicates()
        self.mirror.recovered()
        return n

    def close_journal(self) -> None:
        self.storage.close()

    def check_disk(self) -> bool:
        return self.storage.check_disk()

    def expire_due(self, now: int | None = None) -> int:
        """:meth:`tick` at ``now`` (default: the clock's now)."""
        return self.tick(self.clock() if now is None else now)

    def next_expiry(self) -> int | None:
        return self.timers.next_expiry()

    def next_timer(self) -> int | None:
        return self.timers.next_timer()

    def routing_type_for(self, address: str, capabilities=()) -> str:
        return self.addressing.routing_type_for(address, capabilities)

    def multicast_queues(self, address: str) -> list[Queue]:
        return self.addressing.multicast_queues(address)

    def lookup_queue(self, address: str) -> Queue | None:
        return self.addressing.lookup_queue(address)

    def bindings_path(self) -> str | None:
        return self.addressing.bindings_path()

    def take_bindings(self) -> list[dict] | None:
        return self.addressing.take_bindings()

    def mgmt_queues(self) -> list[dict]:
        return self.facade.mgmt_queues()

    def mgmt_addresses(self) -> list[dict]:
        return self.facade.mgmt_addresses()

    def mgmt_connections(self) -> list[dict]:
        return self.facade.mgmt_connections()

    def create_queue(self, name: str, address: str | None = None, routing_type: str = "anycast",
                     durable: bool = True) -> dict:
        return self.facade.create_queue(name, address, routing_type, durable)

    def delete_queue(self, name: str) -> int:
        return self.facade.delete_queue(name)

    def purge_queue(self, name: str) -> int:
        return self.facade.purge_queue(name)

    def start_broker_connection(self, name: str) -> None:
        self.facade.start_broker_connection(name)

    def stop_broker_connection(self, name: str) -> None:
        self.facade.stop_broker_connection(name)
