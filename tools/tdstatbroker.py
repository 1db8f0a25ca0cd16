"""``tdstat --broker``: a tdbroker's queues, broker connections, network bridges, federation, mirrors and
acceptors (docs/management.md).

A tdbroker has no qdstat view of its own, so the tables keep qdstat's layout (:class:`tools.tdstat.Table`)
with Artemis' and ActiveMQ's names for what they show:

* **Queues** (dynamic reply queues, tdstat's own included, only with ``-v``) and **Broker Connections**:
  always;
* **Network**, **Network Bridges** and **Network Demand**: only when the broker is part of a network of
  brokers (docs/networks.md) -- it has a ``<networkConnector>``, a peer's duplex bridge, a network peer or
  a dropped duplicate -- so a broker outside any network prints what it always printed;
* **Federation Streams** and **Federated Addresses**: only when the broker has a federation stream (an
  ``<upstream>`` or ``<downstream>``, or an upstream a remote downstream's command made), and **Federation
  Queues (kept for other brokers)**: only when other brokers' federations keep queues here
  (docs/federation-protocol.md);
* **Mirrors** (each ``<mirror>`` this broker sends: its state and lag) and **Mirror Targets** (each mirror
  source this broker is the replica of: what it applied): each only when it has rows (docs/mirror.md);
* **Acceptors**: with ``-v``, and without it only when some acceptor is not listening -- a
  disaster-recovery replica whose client acceptor waits for ``startAcceptor`` shows it, a broker whose
  acceptors all listen prints what it always printed.

Rendering is pure (rows in, tables out) so it is tested from canned rows; :func:`fetch_broker` does the
management QUERYs (broker/management.py's entity types). tools/tdstat.py imports this module when it
shows a broker (it holds the layout this module uses).
"""

from __future__ import annotations

from tools.mgmtclient import ManagementClient
from tools.tdstat import Table, fmt_time

ARTEMIS = "org.apache.activemq.artemis."
QUEUE_ATTRS = ["name", "address", "routingType", "durable", "messageCount", "pagedMessageCount", "consumerCount",
               "deliveredCount", "acknowledgedCount", "deadLetteredCount", "temporary"]
BROKER_CONNECTION_ATTRS = ["name", "uri", "status", "links"]
NETWORK_ATTRS = ["name", "brokerId", "peers", "bridgeCount", "duplicatesDropped"]
NETWORK_BRIDGE_ATTRS = ["name", "identity", "remote", "direction", "state", "reconnectAttempts", "connections",
                        "lastError", "peer", "demand", "forwarded"]
FEDERATION_STREAM_ATTRS = ["identity", "federation", "stream", "kind", "state", "peer", "reconnectAttempts",
                           "copied", "remote", "addresses", "command", "lastError", "sharedWith"]
FEDERATION_QUEUE_ATTRS = ["name", "address", "origin", "originName", "maxHops", "autoDelete", "autoDeleteDelay",
                          "autoDeleteMessageCount", "messageCount", "consumerCount"]
MIRROR_ATTRS = ["name", "remote", "state", "snfQueue", "target", "durable", "queuedEvents", "oldestEventAgeMs",
                "eventsSent", "messageEvents", "ackEvents", "queueEvents", "remoteBrokerId", "lastError"]
MIRROR_TARGET_ATTRS = ["name", "sourceId", "sourceName", "address", "connected", "messagesApplied", "acksApplied",
                       "queueEventsApplied", "duplicatesSkipped", "acksUnmatched", "lastEventAgeMs"]
ACCEPTOR_ATTRS = ["name", "host", "port", "bound", "started", "autoStart", "tls", "connections", "lastError"]
#: Below this an age reads in milliseconds (a mirror's lag is usually a few of them); from it on in
#: tdstat's ddd:hh:mm:ss.
AGE_MS_LIMIT = 10_000
#: What the placeholder cells show: a bridge that is not connected has no peer yet (qdstat's "-").
NONE = "-"


def render_broker(queues: list[dict], connections: list[dict], verbose: bool = False, *,
                  network: list[dict] | None = None, bridges: list[dict] | None = None,
                  streams: list[dict] | None = None, federation_queues: list[dict] | None = None,
                  mirrors: list[dict] | None = None, mirror_targets: list[dict] | None = None,
                  acceptors: list[dict] | None = None) -> list[Table]:
    """The tables of ``tdstat --broker`` (see the module docstring)."""
    queues = [q for q in queues if verbose or not q.get("temporary")]
    q_rows = [[q.get("name"), q.get("address"), q.get("routingType"), "yes" if q.get("durable") else "no",
               q.get("messageCount"), q.get("pagedMessageCount") or 0, q.get("consumerCount"),
               q.get("deliveredCount"), q.get("acknowledgedCount"), q.get("deadLetteredCount")]
              for q in sorted(queues, key=lambda q: str(q.get("name")))]
    c_rows = [[c.get("name"), c.get("uri"), c.get("status"), c.get("links")]
              for c in sorted(connections, key=lambda c: str(c.get("name")))]
    tables = [Table("Queues", ["name", "address", "routing", "durable", "messages", "paged", "consumers",
                                "delivered", "acked", "dead-lettered"], q_rows),
              Table("\nBroker Connections", ["name", "uri", "status", "links"], c_rows)]
    return (tables + render_network(network or [], bridges or [], verbose)
            + render_federation(streams or [], federation_queues or [], verbose)
            + render_mirror(mirrors or [], mirror_targets or [], verbose)
            + render_acceptors(acceptors or [], verbose))


def in_a_network(network: list[dict], bridges: list[dict]) -> bool:
    """Whether the broker takes part in a network of brokers (the network tables are shown)."""
    return bool(bridges) or any(n.get("peers") or n.get("duplicatesDropped") for n in network)


def render_network(network: list[dict], bridges: list[dict], verbose: bool = False) -> list[Table]:
    """Network (the broker's id, peers, duplicates dropped), Network Bridges (one row per bridge: our
    connectors' targets and peers' duplex halves) and Network Demand (per bridge, each destination the
    peer has consumers for, or that is statically included, and what was forwarded for it)."""
    if not in_a_network(network, bridges):
        return []
    n_rows = [[n.get("name"), n.get("brokerId"), ", ".join(n.get("peers") or []) or NONE, n.get("bridgeCount"),
               n.get("duplicatesDropped")] for n in network]
    bridges = sorted(bridges, key=lambda b: (str(b.get("name")), str(b.get("identity"))))
    b_headers = ["name", "peer", "direction", "state", "reconnect attempts", "forwarded", "remote"]
    if verbose:
        b_headers += ["connections", "last error"]
    b_rows, d_rows = [], []
    for b in bridges:
        peer = b.get("peer") or NONE
        row = [b.get("identity") or b.get("name"), peer, b.get("direction"), b.get("state"),
               b.get("reconnectAttempts"), b.get("forwarded"), b.get("remote")]
        if verbose:
            row += [b.get("connections"), b.get("lastError") or NONE]
        b_rows.append(row)
        for d in sorted(b.get("demand") or [], key=lambda d: (str(d.get("destination")), str(d.get("kind")))):
            d_row = [b.get("identity") or b.get("name"), peer, d.get("destination"), d.get("kind"),
                     d.get("consumers"), d.get("forwarded")]
            if verbose:
                d_row += ["yes" if d.get("static") else "no", d.get("priority"),
                          "/".join(str(p) for p in d.get("path") or []) or NONE]
            d_rows.append(d_row)
    d_headers = ["bridge", "peer", "destination", "kind", "consumers", "forwarded"]
    if verbose:
        d_headers += ["static", "priority", "path"]
    return [Table("\nNetwork", ["broker", "broker id", "peers", "bridges", "duplicates dropped"], n_rows),
            Table("\nNetwork Bridges", b_headers, b_rows),
            Table("\nNetwork Demand", d_headers, d_rows)]


def _stream_name(s: dict) -> str:
    return s.get("identity") or f"{s.get('federation')}/{s.get('stream')}"


def render_federation(streams: list[dict], queues: list[dict], verbose: bool = False) -> list[Table]:
    """Federation Streams (each upstream and downstream: its state, peer and the messages it copied over its
    connection), Federated Addresses (per upstream, each address it federates now: a federation queue on the
    upstream broker) and Federation Queues (kept for other brokers): the federation queues other brokers'
    upstreams consume here, with their link's max-hops and auto-delete settings. Each only when it has rows."""
    tables = []
    if streams:
        streams = sorted(streams, key=lambda s: (str(s.get("federation")), str(s.get("stream")),
                                                 str(s.get("kind"))))
        s_headers = ["federation", "stream", "kind", "state", "peer", "reconnect attempts", "copied", "remote"]
        if verbose:
            s_headers += ["command", "last error", "shared with"]
        s_rows, a_rows = [], []
        for s in streams:
            row = [s.get("federation"), s.get("stream"), s.get("kind"), s.get("state"), s.get("peer") or NONE,
                   s.get("reconnectAttempts"), s.get("copied"), s.get("remote")]
            if verbose:
                row += [s.get("command") or NONE, s.get("lastError") or NONE, s.get("sharedWith") or NONE]
            s_rows.append(row)
            for a in sorted(s.get("addresses") or [], key=lambda a: str(a.get("address"))):
                a_rows.append([_stream_name(s), a.get("address"), a.get("policy"), a.get("copied")])
        tables += [Table("\nFederation Streams", s_headers, s_rows),
                   Table("\nFederated Addresses", ["stream", "address", "policy", "copied"], a_rows)]
    if queues:
        q_headers = ["queue", "address", "origin", "max hops", "auto-delete", "delay ms", "message limit",
                     "messages", "consumers"]
        if verbose:
            q_headers += ["origin id"]
        q_rows = []
        for q in sorted(queues, key=lambda q: str(q.get("name"))):
            limit = q.get("autoDeleteMessageCount")
            row = [q.get("name"), q.get("address"), q.get("originName") or q.get("origin") or NONE,
                   q.get("maxHops"), "yes" if q.get("autoDelete") else "no", q.get("autoDeleteDelay"),
                   "any" if limit == -1 else limit, q.get("messageCount"), q.get("consumerCount")]
            if verbose:
                row += [q.get("origin") or NONE]
            q_rows.append(row)
        tables.append(Table("\nFederation Queues (kept for other brokers)", q_headers, q_rows))
    return tables


def fmt_age(ms) -> str:
    """An age in milliseconds: ``340ms`` below :data:`AGE_MS_LIMIT`, tdstat's ddd:hh:mm:ss from there."""
    if ms is None:
        return NONE
    return f"{int(ms)}ms" if ms < AGE_MS_LIMIT else fmt_time(ms / 1000)


def _yes(value) -> str:
    return "yes" if value else "no"


def render_mirror(mirrors: list[dict], targets: list[dict], verbose: bool = False) -> list[Table]:
    """Mirrors (each ``<mirror>`` this broker sends: the broker connection's state, its lag -- events
    captured and not yet confirmed by the replica, and the age of the oldest, ``-`` when none is queued --
    and the events the replica confirmed) and Mirror Targets (each source this broker is the replica of:
    connected or not, the messages and acknowledgements applied and the re-sent events skipped). Each only
    when it has rows."""
    tables = []
    if mirrors:
        headers = ["name", "state", "remote", "queued events", "oldest age", "sent"]
        if verbose:
            headers += ["message events", "ack events", "queue events", "snf queue", "target", "durable",
                        "remote broker id", "last error"]
        rows = []
        for m in sorted(mirrors, key=lambda m: str(m.get("name"))):
            queued = m.get("queuedEvents")
            row = [m.get("name"), m.get("state"), m.get("remote"), queued,
                   fmt_age(m.get("oldestEventAgeMs")) if queued else NONE, m.get("eventsSent")]
            if verbose:
                row += [m.get("messageEvents"), m.get("ackEvents"), m.get("queueEvents"), m.get("snfQueue"),
                        m.get("target"), _yes(m.get("durable")), m.get("remoteBrokerId") or NONE,
                        m.get("lastError") or NONE]
            rows.append(row)
        tables.append(Table("\nMirrors", headers, rows))
    if targets:
        headers = ["source", "connected", "messages applied", "acks applied", "duplicates skipped"]
        if verbose:
            headers += ["queue events applied", "acks unmatched", "last event age", "source id", "address"]
        rows = []
        for t in sorted(targets, key=lambda t: (str(t.get("sourceName") or t.get("sourceId")))):
            row = [t.get("sourceName") or t.get("sourceId") or NONE, _yes(t.get("connected")),
                   t.get("messagesApplied"), t.get("acksApplied"), t.get("duplicatesSkipped")]
            if verbose:
                row += [t.get("queueEventsApplied"), t.get("acksUnmatched"), fmt_age(t.get("lastEventAgeMs")),
                        t.get("sourceId") or NONE, t.get("address") or NONE]
            rows.append(row)
        tables.append(Table("\nMirror Targets", headers, rows))
    return tables


def _listening(a: dict) -> str:
    """Where an acceptor listens now, or (not started) where it is configured to."""
    bound = a.get("bound") or []
    return ", ".join(bound) if bound else f"{a.get('host')}:{a.get('port')}"


def render_acceptors(acceptors: list[dict], verbose: bool = False) -> list[Table]:
    """Acceptors (where each listens, whether it is started): with ``-v``, or when one is not started."""
    if not acceptors or not (verbose or any(not a.get("started") for a in acceptors)):
        return []
    headers = ["name", "host:port", "started", "auto-start", "connections"] + (["tls", "last error"] if verbose
                                                                                else [])
    rows = []
    for a in sorted(acceptors, key=lambda a: str(a.get("name"))):
        row = [a.get("name"), _listening(a), _yes(a.get("started")), _yes(a.get("autoStart")),
               a.get("connections")]
        if verbose:
            row += [_yes(a.get("tls")), a.get("lastError") or NONE]
        rows.append(row)
    return [Table("\nAcceptors", headers, rows)]


def fetch_broker(client: ManagementClient, limit: int | None = None) -> dict:
    """The rows ``tdstat --broker`` shows, keyed as its ``--json`` prints them."""
    return {
        "queues": client.query(ARTEMIS + "queue", QUEUE_ATTRS, limit=limit),
        "brokerConnections": client.query(ARTEMIS + "brokerConnection", BROKER_CONNECTION_ATTRS, limit=limit),
        "network": client.query(ARTEMIS + "network", NETWORK_ATTRS),
        "networkBridges": client.query(ARTEMIS + "networkBridge", NETWORK_BRIDGE_ATTRS, limit=limit),
        "federationStreams": client.query(ARTEMIS + "federationStream", FEDERATION_STREAM_ATTRS, limit=limit),
        "federationQueues": client.query(ARTEMIS + "federationQueue", FEDERATION_QUEUE_ATTRS, limit=limit),
        "mirrors": client.query(ARTEMIS + "mirror", MIRROR_ATTRS, limit=limit),
        "mirrorTargets": client.query(ARTEMIS + "mirrorTarget", MIRROR_TARGET_ATTRS, limit=limit),
        "acceptors": client.query(ARTEMIS + "acceptor", ACCEPTOR_ATTRS, limit=limit),
    }


__all__ = ["ACCEPTOR_ATTRS", "BROKER_CONNECTION_ATTRS", "FEDERATION_QUEUE_ATTRS", "FEDERATION_STREAM_ATTRS",
           "MIRROR_ATTRS", "MIRROR_TARGET_ATTRS", "NETWORK_ATTRS", "NETWORK_BRIDGE_ATTRS", "QUEUE_ATTRS",
           "fetch_broker", "fmt_age", "in_a_network", "render_acceptors", "render_broker", "render_federation",
           "render_mirror", "render_network"]
