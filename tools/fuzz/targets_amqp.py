"""Fuzz targets on the AMQP wire: client byte streams (frames and SASL) and message sections, each fed to
a live Router and a live Broker through a server-side :class:`wire.connection.EngineConnection`.

Properties checked for every input (issue 10, "One packet must not kill a daemon"):

* nothing escapes ``feed`` / ``take_output`` / ``feed_eof`` / ``abort``, and no handler raised (a handler
  exception closes the connection with ``amqp:internal-error``: that is a bug found, not a pass);
  invalid UTF-8 refused with ``amqp:decode-error`` is the documented answer and passes;
* an open connection that the transport gave up on says why (an AMQP condition; before the peer's OPEN,
  after a bad protocol header or a failed SASL exchange, there is no connection to close and it just ends);
* the connection is forgotten once its socket is gone (no leaked connection record);
* no traceback is logged;
* afterwards a fresh, well-behaved client on the same Router/Broker sends and receives one message;
* for messages: the producer gets an outcome (accepted, rejected with ``amqp:decode-error`` or another
  condition in ALLOWED_REJECTIONS, released, modified); a message accepted on a targeted link reached the
  consumer (nothing silently lost); a link or connection closed over a bad message carries a condition.
"""

from __future__ import annotations

import proton

from tools.fuzz.harness import Client, LogWatch, Violation, close, drain, pump, require

PROBE_ADDRESS = "fuzz.probe"
MESSAGE_ADDRESS = "fuzz.q"
BROKER_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>fuzzbroker</name>
  <persistence-enabled>false</persistence-enabled>
  <addresses>
    <address name="fuzz.q"><anycast><queue name="fuzz.q"/></anycast></address>
    <address name="fuzz.probe"><anycast><queue name="fuzz.probe"/></anycast></address>
    <address name="fuzz.topic"><multicast/></address>
  </addresses>
  <address-settings>
    <address-setting match="#"><max-delivery-attempts>3</max-delivery-attempts></address-setting>
  </address-settings>
</core></configuration>
"""
#: Rejection conditions a malformed or unroutable message may get; anything else is reported.
ALLOWED_REJECTIONS = ("amqp:decode-error", "amqp:link:message-size-exceeded", "amqp:not-found",
                      "amqp:resource-limit-exceeded", "amqp:precondition-failed")
OUTCOMES = {proton.Delivery.ACCEPTED: "accepted", proton.Delivery.REJECTED: "rejected",
            proton.Delivery.RELEASED: "released", proton.Delivery.MODIFIED: "modified"}


class World:
    """A live Router or Broker and the way to open server-side engines on it."""

    def __init__(self, kind: str):
        self.kind = kind
        if kind == "router":
            from router.core import Router
            from router.daemon import attach_agent
            from router.management import ManagementAgent

            self.node = Router("FUZZ")
            attach_agent(self.node, ManagementAgent(self.node))
        else:
            from broker.config import parse_broker_config
            from broker.management import BrokerManagement
            from broker.server import Broker

            self.node = Broker(parse_broker_config(BROKER_XML))
            self.node.open_journal()
            self.node.management = BrokerManagement(self.node)
        self.settings = self.node.connection_settings()

    def engine(self, remote_host: str = "fuzz"):
        return self.node.new_engine(self.settings, server=True, remote_host=remote_host)

    def connection_count(self) -> int:
        return len(self.node.connections)

    def drained(self) -> None:
        """Empty the probe queue of a broker (messages a fuzz input left there)."""
        if self.kind == "broker":
            q = self.node.queues.get(PROBE_ADDRESS)
            if q is not None and q.message_count:
                self.node.purge_queue(PROBE_ADDRESS)

    def probe(self) -> None:
        """A fresh well-behaved client sends one message to itself through the node."""
        self.drained()
        before = self.connection_count()
        client = Client()
        engine = self.engine("probe")
        rcv = client.receiver(PROBE_ADDRESS, credit=1)
        snd = client.sender(PROBE_ADDRESS)
        pump(client, engine)
        require(client.open, "probe: a fresh client cannot open a connection", repr(engine.error))
        d = client.send(snd, proton.Message(body="probe").encode())
        got = []
        for _ in range(4):
            pump(client, engine)
            got += Client.receive(rcv)
        require(len(got) == 1, "probe: a fresh client's message did not come back",
                f"received {len(got)} messages")
        require(d.remote_state == proton.Delivery.ACCEPTED, "probe: a fresh client's message was not accepted",
                f"outcome {OUTCOMES.get(d.remote_state, d.remote_state)}")
        close(client, engine)
        require(self.connection_count() == before, "probe: the probe's connection record leaked")


def _check_engine(engine, watch: LogWatch) -> None:
    """A failed engine (a handler raised) is a bug unless it refused undecodable text (UnicodeError)."""
    watch.check()
    if engine.failed and not watch.handler_exceptions():
        raise Violation("handler raised: connection closed with amqp:internal-error (no traceback logged)",
                        repr(engine.error))


def transport_condition_name(engine) -> str | None:
    """The transport's error condition name, whatever bytes proton put in its description."""
    from wire import raw

    name, description = raw.transport_condition(raw.pointer(engine.transport))
    if name is None and description is None:
        return None
    return name or "?"


class FramesTarget:
    """(a) A mutated client byte stream (header, SASL, OPEN, BEGIN, ATTACH, TRANSFER ...) on one engine."""

    max_len = 8192

    def __init__(self, kind: str):
        self.kind = kind
        self.instrument = ("wire", kind)  # packages whose coverage guides the fuzzer
        self.name = f"frames-{kind}"
        self.description = f"client byte streams (frames and SASL) into a live {kind.capitalize()}"

    def setup(self) -> None:
        self.world = World(self.kind)
        self.watch = LogWatch.install()

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import client_streams

        return client_streams(self.kind)

    def execute(self, data: bytes) -> None:
        world, watch = self.world, self.watch
        watch.clear()
        before = world.connection_count()
        engine = world.engine()
        engine.feed(data)
        drain(engine)
        if engine.finished and engine.opened_at_remote and not engine.remote_closed:
            # The transport gave up on an open connection by itself: it must have said why. (Before the
            # peer's OPEN there is no AMQP connection to close: a bad header or SASL failure just ends.)
            require(transport_condition_name(engine) is not None or engine.connection.condition is not None,
                    "an open connection ended without a condition")
        engine.feed_eof()
        drain(engine)
        engine.abort()
        _check_engine(engine, watch)
        require(world.connection_count() == before, "connection record leaked after the socket went",
                f"{world.connection_count()} connections, {before} before")
        world.probe()
        watch.check()


class MessagesTarget:
    """(b) Mutated message bytes sent as one delivery to a consumer through the node."""

    max_len = 16384

    def __init__(self, kind: str):
        self.kind = kind
        self.instrument = ("wire", kind)
        self.name = f"messages-{kind}"
        self.description = f"message sections sent through a live {kind.capitalize()} to a consumer"
        self.executions = 0

    def setup(self) -> None:
        self.world = World(self.kind)
        self.watch = LogWatch.install()
        self._connect()

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import messages

        return messages(MESSAGE_ADDRESS)

    def _connect(self) -> None:
        self.producer, self.pengine = Client(), self.world.engine("producer")
        self.consumer, self.cengine = Client(), self.world.engine("consumer")
        self.rcv = self.consumer.receiver(MESSAGE_ADDRESS, credit=1000)
        self.targeted = self.producer.sender(MESSAGE_ADDRESS)
        self.anonymous = self.producer.sender(None) if self.kind == "router" else None
        self._pump()

    def _pump(self) -> list[bytes]:
        got = []
        for _ in range(8):
            pump(self.producer, self.pengine)
            pump(self.consumer, self.cengine)
            got += Client.receive(self.rcv)
        return got

    def _healthy(self) -> bool:
        links = [self.rcv, self.targeted] + ([self.anonymous] if self.anonymous is not None else [])
        return (self.producer.open and self.consumer.open
                and all(lk.state & proton.Endpoint.REMOTE_ACTIVE and not lk.state & proton.Endpoint.REMOTE_CLOSED
                        for lk in links))

    def _check_closed_with_condition(self) -> None:
        """A node may detach a link or close a connection over a bad message, but must say why."""
        ends = [self.rcv, self.targeted, self.producer.connection, self.consumer.connection]
        if self.anonymous is not None:
            ends.append(self.anonymous)
        closed = [e for e in ends if e.state & proton.Endpoint.REMOTE_CLOSED]
        require(all(e.remote_condition is not None for e in closed), "link or connection closed without a condition")

    def _reconnect(self) -> None:
        for client, engine in ((self.producer, self.pengine), (self.consumer, self.cengine)):
            client.connection.close()
            pump(client, engine)
            engine.abort()
        self._connect()

    def execute(self, data: bytes) -> None:
        self.watch.clear()
        self.executions += 1
        if self.rcv.credit < 100:
            self.rcv.flow(1000 - self.rcv.credit)
        # The first byte picks the path: odd = anonymous relay (the router routes by properties.to).
        snd = self.anonymous if (data[:1] and data[0] & 1 and self.anonymous is not None) else self.targeted
        payload = data[1:]
        require(snd.credit > 0 or snd is self.targeted, "anonymous sender without credit")
        d = self.producer.send(snd, payload)
        got = self._pump()
        state = d.remote_state
        require(state in OUTCOMES, "the producer got no outcome (message silently lost)",
                f"state {state}, settled {d.settled}, consumer got {len(got)}")
        if state == proton.Delivery.REJECTED:
            cond = d.remote.condition
            require(cond is not None and cond.name in ALLOWED_REJECTIONS, "rejected with an unexpected condition",
                    repr(cond))
        if state == proton.Delivery.ACCEPTED and snd is self.targeted:
            require(len(got) == 1, "accepted but never reached the consumer", f"consumer got {len(got)}")
        d.settle()
        _check_engine(self.pengine, self.watch)
        _check_engine(self.cengine, self.watch)
        if not self._healthy():
            self._check_closed_with_condition()
            self._reconnect()
        if self.executions % 64 == 0:
            self.world.probe()
        self.watch.check()


FRAMES_ROUTER = FramesTarget("router")
FRAMES_BROKER = FramesTarget("broker")
MESSAGES_ROUTER = MessagesTarget("router")
MESSAGES_BROKER = MessagesTarget("broker")
