"""``tdstat --broker``: a tdbroker's queues, broker connections and network bridges (docs/management.md).

A tdbroker has no qdstat view of its own, so the tables keep qdstat's layout (:class:`tools.tdstat.Table`)
with Artemis' and ActiveMQ's names for what they show:

* **Queues** (dynamic reply queues, tdstat's own included, only with ``-v``) and **Broker Connections**:
  always;
* **Network**, **Network Bridges** and **Network Demand**: only when the broker is part of a network of
  brokers (docs/networks.md) -- it has a ``<networkConnector>``, a peer's duplex bridge, a network peer or
  a dropped duplicate -- so a broker outside any network prints what it always printed.

Rendering is pure (rows in, tables out) so it is tested from canned rows; :func:`fetch_broker` does the
management QUERYs (broker/management.py's entity types). tools/tdstat.py imports this module when it
shows a broker (it holds the layout this module uses).
"""

from __future__ import annotations

from tools.mgmtclient import ManagementClient
from tools.tdstat import Table

ARTEMIS = "org.apache.activemq.artemis."
QUEUE_ATTRS = ["name", "address", "routingType", "durable", "messageCount", "pagedMessageCount", "consumerCount",
               "deliveredCount", "acknowledgedCount", "deadLetteredCount", "temporary"]
BROKER_CONNECTION_ATTRS = ["name", "uri", "status", "links"]
NETWORK_ATTRS = ["name", "brokerId", "peers", "bridgeCount", "duplicatesDropped"]
NETWORK_BRIDGE_ATTRS = ["name", "identity", "remote", "direction", "state", "reconnectAttempts", "connections",
                        "lastError", "peer", "demand", "forwarded"]
#: What the placeholder cells show: a bridge that is not connected has no peer yet (qdstat's "-").
NONE = "-"


def render_broker(queues: list[dict], connections: list[dict], verbose: bool = False, *,
                  network: list[dict] | None = None, bridges: list[dict] | None = None) -> list[Table]:
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
    return tables + render_network(network or [], bridges or [], verbose)


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


def fetch_broker(client: ManagementClient, limit: int | None = None) -> dict:
    """The rows ``tdstat --broker`` shows, keyed as its ``--json`` prints them."""
    return {
        "queues": client.query(ARTEMIS + "queue", QUEUE_ATTRS, limit=limit),
        "brokerConnections": client.query(ARTEMIS + "brokerConnection", BROKER_CONNECTION_ATTRS, limit=limit),
        "network": client.query(ARTEMIS + "network", NETWORK_ATTRS),
        "networkBridges": client.query(ARTEMIS + "networkBridge", NETWORK_BRIDGE_ATTRS, limit=limit),
    }


__all__ = ["BROKER_CONNECTION_ATTRS", "NETWORK_ATTRS", "NETWORK_BRIDGE_ATTRS", "QUEUE_ATTRS", "fetch_broker",
           "in_a_network", "render_broker", "render_network"]
