"""tdbroker's HTTP acceptors: ``<acceptor>tcp://HOST:PORT?protocols=HTTP</acceptor>`` serves the web console,
``/metrics``, ``/healthz`` and management as JSON (wire/httpmgmt.py, shared with tdrouterd) instead of AMQP.

Artemis serves its console from a separate embedded web server (``bootstrap.xml``'s ``<web>`` element,
port 8161 by default); tdbroker has no second configuration file, so an acceptor whose ``protocols`` is
``HTTP`` alone is that server (docs/console.md). ``httpRootDir=DIR`` on the URI serves the console's files
from DIR instead of the package. With Artemis's TLS parameters (``sslEnabled=true;keyStorePath=...``, as
on an AMQP acceptor: broker/security.py ``uri_tls``) the acceptor serves HTTPS and WSS only, with the
key store's certificate and the enabled protocols; ``needClientAuth=true`` requires a client certificate
signed by ``trustStorePath`` (as Artemis's web server's ``clientAuth``), besides the login below.

* login: with security enabled (users in artemis-users.properties) a request needs Basic credentials of
  one of those users, as every AMQP acceptor then requires a SASL login; management and ``/metrics`` need
  the ``manage`` permission on ``$management`` when ``<security-settings>`` are configured, as attaching
  to ``$management`` does (broker/server.py).
* ``/metrics``: per queue depth, messages added (enqueued), delivered, acknowledged, expired and
  dead-lettered; the journal's syncs, records synced and bytes on disk; per acceptor connections; per
  network bridge messages forwarded; per mirror the events waiting and the age of the oldest (its lag);
  per federation stream messages copied; memory (resident set size). Queues are read through the
  broker's management facade (``mgmt_queues``, which also has the expired and added counts), the rest
  through the management agent's QUERY, as tdstat reads them.
* ``/healthz``: ready when every acceptor that starts with the broker is listening and the journal is open.
"""

from __future__ import annotations

import logging
from functools import partial
from pathlib import Path

import trio

from broker.security import permitted, user_roles
from wire import management as wm
from wire.http import HttpRequest, HttpResponse, serve_http_listeners, unauthorized
from wire.httpmgmt import ConsoleApp, Principal, _CredentialMemo, check_password
from wire.memory import resident_bytes
from wire.prometheus import MetricsText, management_rows

log = logging.getLogger("broker.httpserve")

ARTEMIS = "org.apache.activemq.artemis."
#: The protocols= value that makes an acceptor an HTTP one.
HTTP_PROTOCOL = "HTTP"


class BrokerSite:
    """wire.httpmgmt.Site for one HTTP acceptor of the broker."""

    realm = "tdbroker"
    kind = "broker"

    def __init__(self, broker, cfg):
        self.broker = broker
        self.cfg = cfg
        self.security = cfg.security if cfg.security_enabled else None
        self._memo = _CredentialMemo()

    def node_id(self) -> str:
        return self.broker.name

    def authenticate(self, request: HttpRequest, credentials) -> Principal | HttpResponse:
        security = self.security
        if security is None:
            if credentials is not None:
                return unauthorized(self.realm)   # nobody to check them against: refused, not ignored
            return Principal(None, True)
        if credentials is None or not check_password(security.users, self._memo, *credentials):
            if credentials is not None:
                log.info("HTTP login refused for %r from %s", credentials[0], request.remote)
            return unauthorized(self.realm)
        user = credentials[0]
        may = not security.settings or permitted(security.settings, user_roles(security, user), "manage",
                                                 wm.MANAGEMENT_ADDRESS)
        return Principal(user, may)

    async def management(self, message: bytes, node: str | None) -> bytes | None:
        if node is not None and node != self.broker.name:
            raise wm.not_found(f"{node!r} is not this broker ({self.broker.name}); a broker answers for itself")
        management = getattr(self.broker, "management", None)
        if management is None:
            raise wm.ManagementError(wm.NOT_IMPLEMENTED, "management is not available on this broker")
        return management.handle(message)

    def metrics(self) -> str:
        return broker_metrics(self.broker)

    def health(self) -> tuple[bool, dict]:
        return broker_health(self.broker)


def broker_health(broker) -> tuple[bool, dict]:
    reasons = []
    acceptors = getattr(broker, "acceptors", {}) or {}
    down = [a.name for a in acceptors.values() if a.auto_start and not a.started]
    if down:
        reasons.append(f"acceptors not listening: {', '.join(down)}")
    if broker.cfg.persistence_enabled and broker.journal is None:
        reasons.append("journal not open")
    detail = {"broker": broker.name, "acceptors": len(acceptors), "queues": len(broker.mgmt_queues())}
    if reasons:
        detail["reasons"] = reasons
    return not reasons, detail


_QUEUE_FAMILIES = (
    ("queue_messages", "gauge", "messageCount", "Messages in the queue (its depth; paged ones included)."),
    ("queue_consumers", "gauge", "consumerCount", "Consumers of the queue."),
    ("queue_messages_added_total", "counter", "messagesAdded", "Messages enqueued."),
    ("queue_messages_delivered_total", "counter", "deliveredCount", "Deliveries to consumers."),
    ("queue_messages_acknowledged_total", "counter", "acknowledgedCount", "Messages acknowledged."),
    ("queue_messages_expired_total", "counter", "expiredCount", "Messages expired."),
    ("queue_messages_dead_lettered_total", "counter", "deadLetteredCount", "Messages sent to the dead-letter address."),
    ("queue_paged_messages", "gauge", "pagedMessageCount", "Messages in page files."),
    ("queue_paged_bytes", "gauge", "pagedSize", "Bytes in page files."),
)
_JOURNAL_FAMILIES = (
    ("journal_syncs_total", "counter", "syncs", "Journal writes synced to disk (fsync)."),
    ("journal_records_synced_total", "counter", "records_synced", "Journal records synced to disk."),
    ("journal_bytes_on_disk", "gauge", "bytes_on_disk", "Bytes of journal files."),
    ("journal_dead_bytes", "gauge", "dead_bytes", "Bytes of journal records no longer needed (compaction frees them)."),
    ("journal_live_messages", "gauge", "live_messages", "Durable messages the journal holds."),
    ("journal_compactions_total", "counter", "compactions", "Journal compactions."),
    ("journal_last_sync_seconds", "gauge", "last_sync_seconds", "How long the last sync took."),
)


def broker_metrics(broker) -> str:
    """The Prometheus text for one broker."""
    m = MetricsText("tdbroker")
    base = {"broker": broker.name}
    m.add("info", "gauge", "The broker (value 1).", 1, base)
    m.add("memory_resident_bytes", "gauge", "Resident set size of the process.", resident_bytes(), base)
    for row in broker.mgmt_queues():
        labels = dict(base, queue=row.get("name"), address=row.get("address"), routing_type=row.get("routingType"))
        for name, kind, attr, help_text in _QUEUE_FAMILIES:
            m.add(name, kind, help_text, row.get(attr), labels)
    journal = broker.journal
    if journal is not None:
        stats = journal.stats
        for name, kind, attr, help_text in _JOURNAL_FAMILIES:
            m.add(name, kind, help_text, getattr(stats, attr), base)
    management = getattr(broker, "management", None)
    if management is None:
        return m.render()
    rows = lambda short: management_rows(management.dispatch, ARTEMIS + short)  # noqa: E731
    for row in rows("acceptor"):
        m.add("acceptor_connections", "gauge", "Connections open through the acceptor.", row.get("connections"),
              dict(base, acceptor=row.get("name")))
        m.add("acceptor_started", "gauge", "1 while the acceptor listens.", bool(row.get("started")),
              dict(base, acceptor=row.get("name")))
    for row in rows("networkBridge"):
        labels = dict(base, bridge=row.get("identity"), remote=row.get("remote"), direction=row.get("direction"))
        m.add("bridge_forwarded_total", "counter", "Messages forwarded over the network bridge's current connection.",
              row.get("forwarded"), labels)
        m.add("bridge_connected", "gauge", "1 while the bridge is connected.", row.get("state") == "connected", labels)
    for row in rows("mirror"):
        labels = dict(base, mirror=row.get("name"), remote=row.get("remote"))
        m.add("mirror_queued_events", "gauge", "Events captured and not yet confirmed by the replica (mirror lag).",
              row.get("queuedEvents"), labels)
        age = row.get("oldestEventAgeMs")
        m.add("mirror_oldest_event_age_seconds", "gauge", "Age of the oldest unconfirmed event (mirror lag).",
              age / 1000.0 if isinstance(age, (int, float)) else None, labels)
        m.add("mirror_events_sent_total", "counter", "Events the replica confirmed.", row.get("eventsSent"), labels)
        m.add("mirror_connected", "gauge", "1 while the mirror's connection is up.", row.get("state") == "connected",
              labels)
    for row in rows("mirrorTarget"):
        labels = dict(base, source=row.get("sourceName") or row.get("sourceId"))
        m.add("mirror_target_messages_applied_total", "counter", "Message events applied from the source.",
              row.get("messagesApplied"), labels)
        age = row.get("lastEventAgeMs")
        m.add("mirror_target_last_event_age_seconds", "gauge", "Time since the source's last event.",
              age / 1000.0 if isinstance(age, (int, float)) else None, labels)
    for row in rows("federationStream"):
        labels = dict(base, stream=row.get("identity"), kind=row.get("kind"))
        m.add("federation_copied_total", "counter", "Messages copied over the stream's current connection.",
              row.get("copied"), labels)
        m.add("federation_connected", "gauge", "1 while the stream is connected.", row.get("state") == "connected",
              labels)
    return m.render()


async def bind_http_acceptor(acceptor, announce=print) -> list:
    """Bind an HTTP acceptor now (OSError when the port is taken); announced like every acceptor."""
    listeners = await trio.open_tcp_listeners(acceptor.port, host=acceptor.host or None)
    for lst in listeners:
        h, p = lst.socket.getsockname()[:2]
        announce(f"tdbroker: listening on {h}:{p} (acceptor {acceptor.name})", flush=True)
    return listeners


def serve_http_acceptor(nursery: trio.Nursery, listeners: list, broker, cfg, acceptor) -> None:
    """Serve a bound HTTP acceptor in ``nursery``."""
    root = acceptor.params.get("httpRootDir")
    app = ConsoleApp(BrokerSite(broker, cfg), Path(root) if root else None)
    nursery.start_soon(partial(serve_http_listeners, app, listeners, nursery, tls=acceptor.tls))
