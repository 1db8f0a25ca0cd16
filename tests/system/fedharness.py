"""Federations of real tdbroker processes for the address-federation system tests (docs/federation.md).

Built on :mod:`tests.system.netharness` (reserved ports per pytest-xdist worker, brokers started in
parallel, queue counts through management). What federation adds:

* :func:`federation_xml` writes the Artemis ``<connectors>`` + ``<federations>`` blocks of one broker
  (Artemis user manual, ``federation-address.adoc``): one ``<upstream>`` (or ``<downstream>``) per peer,
  one ``<address-policy>``;
* :func:`federation_queue` is the name a downstream's federation queue has on its upstream broker
  (``<downstream broker>.federated.<federation>.<upstream>.<address>.multicast``), and
  :func:`wait_federated` waits until that queue has its consumer -- a message published before that is
  not copied, exactly as in Artemis, so every exactly-once test waits for it first;
* :class:`Subscriber` is a proton receiver on a multicast address that counts what it got by id, so that a
  duplicate shows as a count above one.
"""

from __future__ import annotations

import collections
import pathlib
from xml.sax.saxutils import escape, quoteattr

from proton import Message

from tests.system.brokerharness import TIMEOUT, send_messages
from tests.system.clients import Consumer
from tests.system.netharness import HOST, NetBroker
from tests.system.waiting import wait_for

__all__ = [
    "FED_BLUEPRINTS_DIR",
    "FEDERATION",
    "Subscriber",
    "federation_queue",
    "federation_queues",
    "federation_xml",
    "fed_broker_xml",
    "publish",
    "queue_row",
    "wait_federated",
    "wait_federation_queues",
    "wait_no_queue",
]

FED_BLUEPRINTS_DIR = pathlib.Path(__file__).resolve().parents[2] / "conf" / "federation"
#: The federation name the tests use (Artemis: unique over the brokers that federate together).
FEDERATION = "fed"
#: Reconnect quickly in tests: a restarted peer is found again in a fraction of a second (Artemis'
#: documented default retry-interval is 500 ms, capped at max-retry-interval 2000 ms).
FAST_RETRY = "<retry-interval>100</retry-interval><max-retry-interval>500</max-retry-interval>"


def _policy_xml(name: str, max_hops: int, includes, excludes, attrs: dict) -> str:
    extra = "".join(f" {k}={quoteattr(str(v).lower() if isinstance(v, bool) else str(v))}"
                    for k, v in attrs.items())
    rules = "".join(f"<include address-match={quoteattr(m)}/>" for m in includes) + \
        "".join(f"<exclude address-match={quoteattr(m)}/>" for m in excludes)
    return f'<address-policy name={quoteattr(name)} max-hops="{max_hops}"{extra}>{rules}</address-policy>'


def federation_xml(upstreams: dict | None = None, *, downstreams: dict | None = None, own_port: int | None = None,
                   max_hops: int = 1, includes=(), excludes=(), policy_attrs: dict | None = None,
                   transformer: str | None = None, federation: str = FEDERATION) -> str:
    """``<connectors>`` and ``<federations>`` text: an ``<upstream>`` per ``upstreams`` entry (stream
    name -> port of the upstream broker), a ``<downstream>`` per ``downstreams`` entry (with
    ``upstream-connector-ref`` naming this broker's own connector on ``own_port``), all with one
    ``<address-policy>`` (``policy_attrs``: auto-delete, auto-delete-delay...; ``transformer``: a
    ``package.module:Class`` applied through ``transformer-ref``)."""
    upstreams = upstreams or {}
    downstreams = downstreams or {}
    connectors = {f"{name}-connector": port for name, port in {**upstreams, **downstreams}.items()}
    if downstreams:
        assert own_port is not None, "a <downstream> needs this broker's own connector (upstream-connector-ref)"
        connectors["self-connector"] = own_port
    attrs = dict(policy_attrs or {})
    if transformer:
        attrs["transformer-ref"] = "test-transformer"
    streams = []
    for kind, table in (("upstream", upstreams), ("downstream", downstreams)):
        for name in table:
            back = "<upstream-connector-ref>self-connector</upstream-connector-ref>" if kind == "downstream" else ""
            streams.append(f"<{kind} name={quoteattr(name)}>{FAST_RETRY}<static-connectors><connector-ref>"
                           f"{name}-connector</connector-ref></static-connectors><policy ref=\"policy\"/>"
                           f"{back}</{kind}>")
    transformers = (f'<transformer name="test-transformer"><class-name>{transformer}</class-name>'
                    '<property key="suffix" value="-transformed"/></transformer>') if transformer else ""
    return ("<connectors>" + "".join(f"<connector name={quoteattr(n)}>tcp://{HOST}:{p}</connector>"
                                     for n, p in connectors.items()) + "</connectors>\n"
            f"<federations><federation name={quoteattr(federation)}>" + "".join(streams) +
            _policy_xml("policy", max_hops, includes, excludes, attrs) + transformers +
            "</federation></federations>")


def fed_broker_xml(b: NetBroker, topics, federation: str = "", *, persistence: bool = False,
                   subscriptions: dict | None = None) -> str:
    """A broker.xml for ``b``: multicast ``topics``, the configured durable subscription queues
    ``subscriptions`` (queue -> multicast address, Artemis' ``<multicast><queue name>``: demand that
    outlives any consumer and a restart) and a :func:`federation_xml` text."""
    subscriptions = subscriptions or {}
    addresses = []
    for t in dict.fromkeys([*topics, *subscriptions.values()]):
        queues = "".join(f"<queue name={quoteattr(q)}/>" for q, a in subscriptions.items() if a == t)
        addresses.append(f"<address name={quoteattr(t)}><multicast>{queues}</multicast></address>")
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>{escape(b.name)}</name>
  <persistence-enabled>{'true' if persistence else 'false'}</persistence-enabled>
  <journal-directory>{escape(str(b.journal))}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://{HOST}:{b.port}?protocols=AMQP</acceptor></acceptors>
  <addresses>{''.join(addresses)}</addresses>
  {federation}
</core></configuration>
"""


def federation_queue(downstream: str, upstream_stream: str, address: str, federation: str = FEDERATION) -> str:
    """The federation queue broker ``downstream`` keeps on its upstream for ``address``."""
    return f"{downstream}.federated.{federation}.{upstream_stream}.{address}.multicast"


def queue_row(broker: NetBroker, name: str) -> dict | None:
    return next((r for r in broker.queues() if r["name"] == name), None)


def wait_federated(upstream: NetBroker, queue: str, consumers: int = 1, timeout: float = TIMEOUT) -> None:
    """Until federation queue ``queue`` exists on ``upstream`` with ``consumers`` consumers."""
    seen = []

    def done() -> bool:
        seen[:] = [queue_row(upstream, queue)]
        return seen[0] is not None and seen[0]["consumerCount"] == consumers
    try:
        wait_for(done, f"{queue} with {consumers} consumer(s) on {upstream.name}", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}; {upstream.describe()}") from None


def wait_no_queue(broker: NetBroker, queue: str, timeout: float = TIMEOUT) -> None:
    wait_for(lambda: queue_row(broker, queue) is None, f"{queue} to go from {broker.name}", timeout)


def publish(broker: NetBroker, address: str, ids, *, durable: bool = False, body: str | None = None) -> None:
    """Send a message per id (body ``m-<id>`` unless ``body``) and require each accepted."""
    send_messages(broker.url, address, [Message(id=i, body=f"m-{i}" if body is None else body, durable=durable)
                                        for i in ids])


class Subscriber(Consumer):
    """A subscriber on a multicast address of a broker, counting each id it receives."""

    def __init__(self, broker: NetBroker, address: str, **kw):
        super().__init__(broker.url, address, credit=kw.pop("credit", 200), **kw)
        self.broker_name = broker.name

    def counts(self) -> collections.Counter:
        with self._cond:
            return collections.Counter(m.id for m in self.messages)

    def wait_ids(self, ids, timeout: float = TIMEOUT) -> None:
        """Until every id of ``ids`` arrived at least once."""
        wanted = set(ids)
        wait_for(lambda: wanted <= set(self.counts()), f"{len(wanted)} ids at the subscriber on "
                 f"{self.broker_name} (has {len(self.counts())})", timeout)

    def assert_exactly_once(self, ids) -> None:
        got = self.counts()
        duplicates = {i: n for i, n in got.items() if n > 1}
        missing = set(ids) - set(got)
        unexpected = set(got) - set(ids)
        assert not (duplicates or missing or unexpected), (
            f"subscriber on {self.broker_name}: duplicates {dict(list(duplicates.items())[:10])} "
            f"({len(duplicates)}), missing {sorted(missing, key=str)[:10]}, unexpected {sorted(unexpected, key=str)[:10]}")


def federation_queues(broker: NetBroker, address: str) -> list:
    """The rows of the federation queues other brokers keep on ``broker`` for ``address``."""
    return [r for r in broker.queues() if r["address"] == address and ".federated." in r["name"]]


def wait_federation_queues(broker: NetBroker, address: str, n: int, timeout: float = TIMEOUT) -> None:
    """Until ``broker`` holds exactly ``n`` federation queues for ``address``, each with its consumer."""
    seen = []

    def done() -> bool:
        seen[:] = federation_queues(broker, address)
        return len(seen) == n and all(r["consumerCount"] == 1 for r in seen)
    try:
        wait_for(done, f"{n} federation queues of {address} on {broker.name}", timeout)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last seen {seen}") from None
