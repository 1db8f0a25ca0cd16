"""``tddemo``: narrated demonstrations of how the mesh behaves, run against real daemons.

``tddemo brokerless``: a router with no broker. A producer attaches first and is blocked: the router gives
it no credit while no consumer exists anywhere. A consumer attaches; the producer gets credit at once and
every message flows, each settled end to end (the producer learns ``accepted`` only when the consumer
accepted it). ``--router URL`` runs the same producer and consumer against a router that is already
running instead of starting one, with qdstat's ``--ssl-*`` and ``--sasl-*`` options (tools/security.py;
passwords from ``--sasl-password-file`` or ``TD_SASL_PASSWORD`` only) for a secured one: TLS, and a login
with PLAIN, EXTERNAL or ANONYMOUS. SCRAM is refused with a message saying why: the demo's clients are
proton reactor clients, whose SASL (proton's wheel has no Cyrus SASL) cannot do SCRAM, and
tools/engineclient.py, which can, is a blocking request/response client that cannot run the demo's
timers and concurrent producer and consumer; use PLAIN over TLS for the demo.

``tddemo brokered``: the same router with a tdbroker attached as an Artemis-style ``<peer>`` for the
waypoint address ``queue``. The producer gets credit at once (the broker's queue is a destination),
sends everything and stops; a consumer started later drains every message from the broker through the
router.

``tddemo linkroute``: the router connects to the broker (connector ``my-broker``) and link-routes
``test`` in both directions to it: links, not messages, are proxied, and the broker's queue stores the
messages until a consumer's link arrives.

``tddemo network``: two tdbrokers, A with a duplex network connector to B (docs/networks.md); messages sent
on A follow a consumer to B, and back to A when the consumer moves there (tools/demonet.py).

``tddemo federation``: three tdbrokers federate the multicast address ``news`` Artemis-style (brokers 2 and 3
from broker 1, broker 1 from both with max-hops 1); a subscriber on each broker gets every message
published on broker 1 exactly once (tools/demofed.py).

The clients use proton's reactor API (one Container, timers for the narration): a demo is about
behaviour, not speed.

Every demo prints the configurations it ran (``--keep DIR`` writes them, the journals and logs into DIR
and keeps it), so a user can copy them; ``brokered`` and ``linkroute`` say whose credit the producer got,
what each waypoint phase carried and where rejected messages went (docs/demos.md; tools/demoshow.py).

``--records DIR`` makes the demo's clients write flow records (docs/flowrecords.md): the producer
``sent`` and ``settled`` (with the outcome it learned), the consumer ``received`` (with the outcome it
gave); ``tdflow audit DIR`` then checks every message arrived exactly once. ``--reject-every N`` makes
the consumer reject every Nth message instead of accepting it.
"""

from __future__ import annotations

import os
import time
import uuid

import click
from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tools.daemons import BROKER, ROUTER, DaemonProcess
from tools.lazyssl import defer_ssl_domains
from tools.democonf import (BROKER_XML, DEMO_BROKER_XML, LINK_ROUTE_ROUTER_CONF, PEER_CONNECTION, ROUTER_CONF,
                             WAYPOINT_ROUTER_CONF, broker_flow, router_flow)
from tools.demoshow import DEAD_LETTER_QUEUE, BrokerView, RouterView, Workspace
from tools.security import PROTON_DEFAULT_MECHANISMS, Security, SecurityOptionError, click_security_options
from wire.flowrecords import FlowRecorder

# How long the producer is left without a consumer, so the blocked state is visible.
BLOCKED_SECONDS = 2.0
# A demo step that has not finished by then is reported as failed instead of hanging.
STEP_TIMEOUT_SECONDS = 30.0
READY_TIMEOUT_SECONDS = 15.0
_PROGRAMS = {ROUTER.module: ROUTER, BROKER.module: BROKER}
# The configurations live in tools/democonf.py; re-exported here, where the system tests import them from.
__all__ = ["BROKER_XML", "DEMO_BROKER_XML", "LINK_ROUTE_ROUTER_CONF", "PEER_CONNECTION", "ROUTER_CONF",
           "WAYPOINT_ROUTER_CONF", "Daemon", "ReceiveAll", "SendAll", "main", "say"]
def say(who: str, text: str) -> None:
    click.echo(f"{time.strftime('%H:%M:%S')}  {who:<9} {text}")


_OUTCOME_NAMES = {Delivery.ACCEPTED: "accepted", Delivery.REJECTED: "rejected",
                  Delivery.RELEASED: "released", Delivery.MODIFIED: "modified"}


class Records:
    """The demo clients' flow records (no-ops without ``--records``): one recorder per client role."""

    def __init__(self, directory: str | None, role: str):
        self.rec = FlowRecorder(directory, f"demo.{role}") if directory else None
        self.run = uuid.uuid4().hex[:8]  # message-ids unique across demo runs writing the same directory
        self._mids: dict = {}

    def message(self, i: int, body: str, durable: bool = False) -> Message:
        return Message(id=f"{self.run}-{i}", body=body, durable=durable)

    def sent(self, delivery, msg: Message, address: str) -> None:
        if self.rec is not None:
            self._mids[delivery.tag] = msg.id
            self.rec.record("sent", conn=1, link=delivery.link.name, address=address, mid=msg.id,
                            size=len(msg.encode()))

    def settled(self, delivery, address: str) -> None:
        if self.rec is not None:
            self.rec.record("settled", conn=1, link=delivery.link.name, address=address,
                            mid=self._mids.pop(delivery.tag, None),
                            outcome=_OUTCOME_NAMES.get(delivery.remote_state))

    def received(self, event, address: str, outcome: str) -> None:
        if self.rec is not None:
            msg = event.message
            self.rec.record("received", conn=1, link=event.link.name, address=address, mid=msg.id,
                            size=len(msg.encode()), outcome=outcome)

    def close(self) -> None:
        if self.rec is not None:
            self.rec.close()


def _rejects(i: int, reject_every: int) -> bool:
    """Whether the consumer rejects its i-th message (0-based): every Nth one."""
    return reject_every > 0 and i % reject_every == reject_every - 1


class Daemon(DaemonProcess):
    """A tdrouterd (``router.daemon``) or tdbroker (``broker.daemon``) subprocess with its config (and
    stderr) in ``workdir``: started on entering the ``with`` block (``port`` is its first listener's),
    SIGTERM on leaving it."""

    failure = click.ClickException

    def __init__(self, module: str, conf_name: str, conf_text: str, workdir: str, on_ready=None):
        """``on_ready(module, conf_path, port)``: called once the daemon is ready (the demo's
        :class:`tools.demoshow.Workspace` prints the configuration it ran then)."""
        self.module = module
        self.conf = os.path.join(workdir, conf_name)
        self.on_ready = on_ready
        with open(self.conf, "w") as f:
            f.write(conf_text)
        super().__init__(_PROGRAMS[module], self.conf, start_timeout=READY_TIMEOUT_SECONDS)

    def start(self) -> "Daemon":
        super().start()
        if self.on_ready is not None:
            self.on_ready(self.module, self.conf, self.port)
        return self


class Brokerless(MessagingHandler):
    """Producer first, blocked without credit; the consumer arrives later; everything flows."""

    def __init__(self, url: str, address: str, count: int, records: str | None = None, reject_every: int = 0,
                 connect_options: dict | None = None):
        """``connect_options``: proton Container.connect keywords (TLS, SASL) for a secured router."""
        super().__init__(auto_accept=False)
        self.url, self.address, self.count = url, address, count
        self.connect_options = connect_options or {}
        self.sent = self.accepted = self.rejected = self.received = 0
        self.conn = self.sender = None
        self.blocked_reported = False
        self.reject_every = reject_every
        self.error: str | None = None  # why the connection failed (login refused, TLS, socket)
        self.producer_records = Records(records, "producer")
        self.consumer_records = Records(records, "consumer")

    def on_start(self, event):
        # No reconnect: a refused login or an untrusted certificate ends the demo with the reason.
        self.conn = event.container.connect(self.url, reconnect=False, **self.connect_options)
        self.sender = event.container.create_sender(self.conn, self.address)
        say("producer", f"attached to '{self.address}' and wants to send {self.count} messages")
        self.timer = event.container.schedule(BLOCKED_SECONDS, self)

    def on_transport_error(self, event):  # refused login, TLS failure, socket error
        self._failed(event, event.transport.condition, "connection failed")

    def on_connection_error(self, event):  # the router closed the connection with an error (e.g. requireSsl)
        self._failed(event, event.connection.remote_condition, "connection closed by the router")

    def on_link_error(self, event):  # the router refused or detached a link (e.g. a policy)
        self._failed(event, event.link.remote_condition, f"link {event.link.name} closed by the router")

    def _failed(self, event, cond, default: str) -> None:
        if self.error is None:
            self.error = f"{cond.name}: {cond.description}" if cond is not None else default
        self.timer.cancel()
        event.container.stop()

    def on_timer_task(self, event):
        if self.sender.credit:
            say("producer", f"after {BLOCKED_SECONDS:.0f} s: credit {self.sender.credit} already - a consumer "
                            "of the address exists elsewhere on this router network")
        else:
            say("producer", f"after {BLOCKED_SECONDS:.0f} s: credit {self.sender.credit}, sent {self.sent} "
                            "- blocked, no consumer exists")
        self.blocked_reported = True
        say("consumer", f"attaching to '{self.address}'")
        event.container.create_receiver(self.conn, self.address)

    def on_sendable(self, event):
        if event.link.name != self.sender.name or not self.blocked_reported:
            return
        if self.sent == 0:
            say("producer", f"got credit {self.sender.credit}: a destination exists now")
        while self.sender.credit and self.sent < self.count:
            msg = self.producer_records.message(self.sent, f"message {self.sent}")
            self.producer_records.sent(self.sender.send(msg), msg, self.address)
            self.sent += 1

    def on_message(self, event):
        reject = _rejects(self.received, self.reject_every)
        self.received += 1
        self.consumer_records.received(event, self.address, "rejected" if reject else "accepted")
        if reject:
            self.reject(event.delivery)
        else:
            self.accept(event.delivery)
        say("consumer", f"received '{event.message.body}'" + (" and rejected it" if reject else ""))

    def on_accepted(self, event):
        self.accepted += 1
        self._settled(event)

    def on_rejected(self, event):
        self.rejected += 1
        self._settled(event)

    def _settled(self, event):
        self.producer_records.settled(event.delivery, self.address)
        if self.accepted + self.rejected == self.count:
            extra = f" ({self.rejected} rejected)" if self.rejected else ""
            say("producer", f"all {self.count} messages accepted by the consumer (settled end to end){extra}"
                if not self.rejected else f"all {self.count} messages settled end to end{extra}")
            self.conn.close()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """tddemo: narrated demonstrations against real tdrouterd processes."""
    defer_ssl_domains()  # the demos' proton clients speak plain AMQP: no OpenSSL contexts (tools/lazyssl.py)


def _records_options(f):
    f = click.option("--reject-every", type=click.IntRange(0), default=0, show_default=True,
                     help="The consumer rejects every Nth message (0: accepts all).")(f)
    return click.option("--records", type=click.Path(file_okay=False), default=None,
                        help="Write client flow records (sent/settled/received) into this directory.")(f)


def _keep_option(f):
    return click.option("--keep", metavar="DIR", type=click.Path(file_okay=False), default=None,
                        help="Run in DIR and keep it: the configurations (named instead of printed), the broker "
                             "journal and the daemons' logs. DIR must be new or empty.")(f)


def _workspace(keep: str | None) -> Workspace:
    why = Workspace.check_keep(keep)
    if why is not None:
        raise click.UsageError(why)
    return Workspace(keep, say, click.echo)


def _run_brokerless(demo: Brokerless) -> None:
    try:
        Container(demo).run()
    finally:
        demo.producer_records.close()
        demo.consumer_records.close()


def _secured_connection(router_url: str, security_opts) -> tuple[str, dict]:
    """The URL to dial and proton's connect keywords for --router with the --ssl-*/--sasl-* options."""
    try:
        security = Security.from_options(security_opts, url=router_url)
        if security.wants_engine_client:
            raise SecurityOptionError(
                f"--sasl-mechanisms {' '.join(security.mechanisms)}: tddemo's clients are proton reactor "
                "clients, whose SASL (no Cyrus SASL in proton's wheel) cannot do SCRAM; log in with PLAIN over "
                "TLS (--sasl-mechanisms PLAIN) for the demo (tdstat, tdmanage and tdbench do SCRAM)")
        return security.proton_url(router_url), security.proton_connect_kwargs()
    except SecurityOptionError as exc:
        raise click.UsageError(str(exc)) from None


@main.command()
@click.option("--count", default=5, show_default=True, help="Messages to send.")
@click.option("--address", default="demo/brokerless", show_default=True)
@click.option("--router", "router_url", metavar="URL", default=None,
              help="Run against this already running router (host:port or amqp[s]://host:port) instead of "
                   "starting one; the --ssl-*/--sasl-* options apply to it.")
@_records_options
@_keep_option
@click_security_options(default_mechanisms=PROTON_DEFAULT_MECHANISMS)
def brokerless(count: int, address: str, router_url: str | None, records: str | None, reject_every: int,
               keep: str | None, security_opts) -> None:
    """No broker: the producer is blocked until a consumer exists, then messages flow."""
    if router_url is not None:
        if keep is not None:
            raise click.UsageError("--keep is for the router tddemo starts itself, not for --router")
        url, connect_options = _secured_connection(router_url, security_opts)
        say("router", f"using the router at {url}")
        demo = Brokerless(url, address, count, records, reject_every, connect_options)
        _run_brokerless(demo)
    else:
        if any(vars(security_opts).values()):
            raise click.UsageError("the --ssl-*/--sasl-* options are for --router: the router tddemo starts "
                                   "itself listens without TLS or logins")
        workspace = _workspace(keep)
        with workspace as tmp, workspace.daemon_factory(Daemon)(
                "router.daemon", "router.conf", ROUTER_CONF + router_flow(records), tmp) as router:
            say("router", f"tdrouterd started on 127.0.0.1:{router.port} (no broker)")
            demo = Brokerless(f"amqp://127.0.0.1:{router.port}", address, count, records, reject_every)
            _run_brokerless(demo)
    if demo.error is not None:
        raise click.ClickException(f"connection to the router failed: {demo.error}")
    if demo.received != count or demo.accepted + demo.rejected != count:
        raise click.ClickException(f"expected {count} received and settled, got "
                                   f"{demo.received} / {demo.accepted + demo.rejected}")
    say("done", "brokerless: no credit without a consumer; credit and flow as soon as one exists")


class _Bounded(MessagingHandler):
    """A demo client that gives up (and stops its container) after ``STEP_TIMEOUT_SECONDS``.

    It ends by closing its connection (:meth:`finish`) and stops only once the router has answered the
    close: stopping the container at once would drop the dispositions proton had not written yet (the
    consumer's last outcomes never reached the router, which returned those messages to the broker as
    ``modified``: 9 of 100 in a run of ``brokered --records``)."""

    def __init__(self, **handler_options):
        super().__init__(**handler_options)
        self.timed_out = False
        self.conn = None
        self.timer = None

    def start_timer(self, event) -> None:
        self.timer = event.container.schedule(STEP_TIMEOUT_SECONDS, self)

    def on_timer_task(self, event):
        self.timed_out = True
        say("", f"gave up after {STEP_TIMEOUT_SECONDS:.0f} s")
        event.container.stop()

    def finish(self) -> None:
        """Close the connection; the outcomes still unwritten go out before the close frame."""
        self.conn.close()

    def on_connection_closed(self, event):
        if self.timer is not None:
            self.timer.cancel()
        event.container.stop()


class SendAll(_Bounded):
    """Send ``count`` messages as fast as credit allows; stop when all have an outcome."""

    def __init__(self, url: str, address: str, count: int, durable: bool = True, records: str | None = None,
                 credit_from: str = "the broker's queue takes the messages"):
        """``credit_from``: the narration's account of whose credit the producer got."""
        super().__init__()
        self.url, self.address, self.count, self.durable = url, address, count, durable
        self.credit_from = credit_from
        self.sent = self.accepted = self.other = 0
        self.first_credit = None
        self.records = Records(records, "producer")

    def on_start(self, event):
        self.start_timer(event)
        self.conn = event.container.connect(self.url)
        event.container.create_sender(self.conn, self.address)
        say("producer", f"attached to '{self.address}'")

    def on_sendable(self, event):
        if self.first_credit is None:
            self.first_credit = event.sender.credit
            say("producer", f"credit {self.first_credit} at once, {self.credit_from}")
        while event.sender.credit and self.sent < self.count:
            msg = self.records.message(self.sent, f"message {self.sent}", self.durable)
            self.records.sent(event.sender.send(msg), msg, self.address)
            self.sent += 1

    def on_accepted(self, event):
        self.accepted += 1
        self.records.settled(event.delivery, self.address)
        self._maybe_done(event)

    def on_rejected(self, event):
        self.other += 1
        self.records.settled(event.delivery, self.address)
        self._maybe_done(event)

    on_released = on_rejected

    def _maybe_done(self, event):
        if self.accepted + self.other == self.count:
            say("producer", f"sent {self.sent}, {self.accepted} accepted (stored), and stops")
            self.finish()


class ReceiveAll(_Bounded):
    """Receive ``count`` messages (accepting them) and stop."""

    def __init__(self, url: str, address: str, count: int, records: str | None = None, reject_every: int = 0):
        super().__init__(auto_accept=False)  # the outcome is chosen per message (--reject-every)
        self.url, self.address, self.count = url, address, count
        self.bodies: list = []
        self.reject_every = reject_every
        self.rejected = 0
        self.records = Records(records, "consumer")

    def on_start(self, event):
        self.start_timer(event)
        self.conn = event.container.connect(self.url)
        event.container.create_receiver(self.conn, self.address)
        say("consumer", f"attached to '{self.address}'")

    def on_message(self, event):
        reject = _rejects(len(self.bodies), self.reject_every)
        self.bodies.append(event.message.body)
        self.records.received(event, self.address, "rejected" if reject else "accepted")
        if reject:
            self.rejected += 1
            self.reject(event.delivery)
        else:
            self.accept(event.delivery)
        if len(self.bodies) in (1, self.count):
            say("consumer", f"received '{event.message.body}' ({len(self.bodies)} of {self.count})")
        if len(self.bodies) == self.count:
            if self.rejected:
                say("consumer", f"rejected {self.rejected} of them")
            self.finish()


# Whose credit the producer gets, as the narration says it (docs/demos.md).
WAYPOINT_CREDIT = ("from the router (its linkCapacity): phase 0 of 'queue' has a destination, the broker's "
                   "receiving link, so the router lends credit and forwards each message to the broker")
LINK_ROUTE_CREDIT = ("from the broker (its credit window): the router proxies the routed link and passes the "
                     "broker's flow frames on unchanged, adding no credit of its own")


def _store_then_drain(url: str, address: str, count: int, records: str | None = None,
                      reject_every: int = 0, credit_from: str = "") -> "ReceiveAll":
    sender = SendAll(url, address, count, records=records, credit_from=credit_from)
    try:
        Container(sender).run()
    finally:
        sender.records.close()
    if sender.accepted != count:
        raise click.ClickException(f"only {sender.accepted} of {count} messages were accepted")
    say("", "no consumer exists anywhere; the messages wait in the broker")
    time.sleep(1.0)
    receiver = ReceiveAll(url, address, count, records, reject_every)
    try:
        Container(receiver).run()
    finally:
        receiver.records.close()
    if receiver.bodies != [f"message {i}" for i in range(count)]:
        raise click.ClickException(f"expected {count} messages in order, got {len(receiver.bodies)}")
    say("consumer", f"drained all {count} messages, in order")
    return receiver


def _broker_outcomes(broker_port: int, queue: str, count: int, rejected: int) -> None:
    """Wait until the broker has every consumer outcome (so it is stopped only then, and its flow records
    hold a ``settle`` for each message), then say where rejected messages went."""
    with BrokerView(broker_port) as view:
        try:
            row = view.wait_settled(queue, count)
        except TimeoutError as exc:
            raise click.ClickException(f"the broker did not hear every consumer outcome: {exc}") from None
        say("broker", f"has every outcome: {row['acknowledgedCount']} acknowledged, {row['deadLetteredCount']} "
                      "dead-lettered")
        if not rejected:
            return
        held = int(view.queues().get(DEAD_LETTER_QUEUE, {}).get("messageCount") or 0)
    say("broker", f"moved the {rejected} rejected messages to its dead-letter queue '{DEAD_LETTER_QUEUE}' "
                  f"(<dead-letter-address> in broker.xml), which holds {held}: a consumer of "
                  f"'{DEAD_LETTER_QUEUE}' reads them")
    say("producer", f"had already seen 'accepted' for all {count}, the {rejected} rejected ones included: the "
                    "broker accepted each message when it stored it, before any consumer existed; the "
                    "consumer's 'rejected' settles the broker's copy and never reaches the producer")


def _waypoint_phases(router_port: int, address: str) -> None:
    """The two routing-table entries of the waypoint address and what each carried (tdstat -a)."""
    with RouterView(router_port) as view:
        rows = view.addresses()
    m0, m1 = rows.get(f"M0{address}", {}), rows.get(f"M1{address}", {})
    say("router", f"phase 0 (M0{address}): {m0.get('deliveriesIngress', 0)} in from the producer, "
                  f"{m0.get('deliveriesEgress', 0)} out to the broker; phase 1 (M1{address}): "
                  f"{m1.get('deliveriesIngress', 0)} in from the broker, {m1.get('deliveriesEgress', 0)} out "
                  "to the consumer (tdstat -a)")


@main.command()
@click.option("--count", default=100, show_default=True, help="Messages to send.")
@_records_options
@_keep_option
def brokered(count: int, records: str | None, reject_every: int, keep: str | None) -> None:
    """A broker attached as a peer: send now, consume later."""
    workspace = _workspace(keep)
    daemon = workspace.daemon_factory(Daemon)
    with workspace as tmp, \
            daemon("router.daemon", "router.conf", WAYPOINT_ROUTER_CONF + router_flow(records), tmp) as router:
        say("router", f"tdrouterd on 127.0.0.1:{router.port}; address 'queue' is a waypoint: producers send into "
                      "phase 0, consumers receive phase 1, and the broker's queue sits between the two")
        xml = DEMO_BROKER_XML.format(journal=os.path.join(tmp, "journal"), queue="queue",
                                connections=broker_flow(records) + PEER_CONNECTION.format(port=router.port))
        with daemon("broker.daemon", "broker.xml", xml, tmp) as broker:
            say("broker", "tdbroker attached to the router as a peer for 'queue': its receiving link consumes "
                          "phase 0 into the queue, its sending link produces phase 1 from it")
            time.sleep(0.5)  # the peer links attach
            receiver = _store_then_drain(f"amqp://127.0.0.1:{router.port}", "queue", count, records, reject_every,
                                         WAYPOINT_CREDIT)
            _broker_outcomes(broker.port, "queue", count, receiver.rejected)
            _waypoint_phases(router.port, "queue")
    say("done", "brokered: the producer never waited for a consumer; the broker stored and forwarded")


@main.command()
@click.option("--count", default=100, show_default=True, help="Messages to send.")
@_records_options
@_keep_option
def linkroute(count: int, records: str | None, reject_every: int, keep: str | None) -> None:
    """The same flow through link routes to the broker (prefix 'test', both directions)."""
    workspace = _workspace(keep)
    daemon = workspace.daemon_factory(Daemon)
    with workspace as tmp:
        xml = DEMO_BROKER_XML.format(journal=os.path.join(tmp, "journal"), queue="test.queue",
                                connections=broker_flow(records))
        with daemon("broker.daemon", "broker.xml", xml, tmp) as broker:
            say("broker", f"tdbroker on 127.0.0.1:{broker.port}")
            with daemon("router.daemon", "router.conf",
                        LINK_ROUTE_ROUTER_CONF.replace("BROKER_PORT", str(broker.port)) + router_flow(records),
                        tmp) as router:
                say("router", f"tdrouterd on 127.0.0.1:{router.port}, connector 'my-broker', "
                              "link routes for 'test' in and out")
                time.sleep(0.5)  # the router's connector reaches the broker
                receiver = _store_then_drain(f"amqp://127.0.0.1:{router.port}", "test.queue", count, records,
                                             reject_every, LINK_ROUTE_CREDIT)
                _broker_outcomes(broker.port, "test.queue", count, receiver.rejected)
    say("done", "linkroute: the clients' links were proxied to the broker's queue")


@main.command()
@click.option("--count", default=20, show_default=True, help="Messages to send (half are consumed on each broker).")
@_keep_option
def network(count: int, keep: str | None) -> None:
    """Two brokers in a network: messages follow a consumer from one broker to the other and back."""
    from tools.demonet import DemoFailed, NetworkDemo

    workspace = _workspace(keep)
    with workspace as tmp:
        try:
            NetworkDemo(tmp, count, say=say, daemon=workspace.daemon_factory(Daemon)).run()
        except DemoFailed as exc:
            raise click.ClickException(f"network: {exc}") from None
    say("done", "network: the messages went where the consumer was, each exactly once")


@main.command()
@click.option("--count", default=20, show_default=True, help="Messages to publish on broker 1.")
@_keep_option
def federation(count: int, keep: str | None) -> None:
    """Three federated brokers: every subscriber on every broker gets each message exactly once."""
    from tools.demofed import DemoFailed, FederationDemo

    workspace = _workspace(keep)
    with workspace as tmp:
        try:
            FederationDemo(tmp, count, say=say, daemon=workspace.daemon_factory(Daemon)).run()
        except DemoFailed as exc:
            raise click.ClickException(f"federation: {exc}") from None
    say("done", "federation: every subscriber on every broker got each message exactly once")


if __name__ == "__main__":
    main()
