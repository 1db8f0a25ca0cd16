"""``tdstat --broker``'s network tables (tools/tdstatbroker.py) from canned management rows."""

from __future__ import annotations

from tools.tdstat import render_broker, render_lines

BRIDGES = [
    {"name": "a-to-c", "identity": "a-to-c", "remote": "127.0.0.1:61617", "direction": "duplex",
     "state": "connecting", "reconnectAttempts": 3, "connections": 0, "lastError": "connection refused",
     "peer": "", "demand": [], "forwarded": 0},
    {"name": "a-to-b", "identity": "a-to-b", "remote": "127.0.0.1:61616", "direction": "out", "state": "connected",
     "reconnectAttempts": 0, "connections": 1, "lastError": "", "peer": "broker-b", "forwarded": 6,
     "demand": [{"kind": "queue", "destination": "orders", "consumers": 2, "static": False, "forwarded": 5,
                 "priority": -5, "path": ["b-1"]},
                {"kind": "topic", "destination": "news", "consumers": 1, "static": False, "forwarded": 1,
                 "priority": -6, "path": ["c-1", "b-1"]}]},
]
NETWORK = [{"name": "broker-a", "brokerId": "broker-a-1", "peers": ["broker-b"], "bridgeCount": 2,
            "duplicatesDropped": 1}]


def network_lines(verbose=False, network=NETWORK, bridges=BRIDGES):
    out = render_lines(render_broker([], [], verbose, network=network, bridges=bridges))
    return out[out.index("Network") - 1:] if "Network" in out else []


def test_network_tables_bridges_sorted_with_demand_per_destination():
    assert network_lines() == [
        "",
        "Network",
        "  broker    broker id   peers     bridges  duplicates dropped",
        "  " + "=" * 61,
        "  broker-a  broker-a-1  broker-b  2        1",
        "",
        "Network Bridges",
        "  name    peer      direction  state       reconnect attempts  forwarded  remote",
        "  " + "=" * 89,
        "  a-to-b  broker-b  out        connected   0                   6          127.0.0.1:61616",
        "  a-to-c  -         duplex     connecting  3                   0          127.0.0.1:61617",
        "",
        "Network Demand",
        "  bridge  peer      destination  kind   consumers  forwarded",
        "  " + "=" * 60,
        "  a-to-b  broker-b  news         topic  1          1",
        "  a-to-b  broker-b  orders       queue  2          5",
    ]


def test_verbose_adds_connections_errors_and_the_demand_path():
    lines = network_lines(verbose=True)
    assert lines[7].split() == ["name", "peer", "direction", "state", "reconnect", "attempts", "forwarded",
                                "remote", "connections", "last", "error"]
    assert lines[10].split()[-3:] == ["0", "connection", "refused"]
    assert lines[15].split()[-3:] == ["no", "-6", "c-1/b-1"]


def test_a_broker_outside_any_network_prints_no_network_tables():
    idle = [{"name": "broker-a", "brokerId": "broker-a-1", "peers": [], "bridgeCount": 0, "duplicatesDropped": 0}]
    assert network_lines(network=idle, bridges=[]) == []
    # a broker that only receives (a peer's one-way connector) still shows who it is connected to
    receiving = [dict(idle[0], peers=["broker-b"])]
    assert network_lines(network=receiving, bridges=[])[1:5] == [
        "Network", "  broker    broker id   peers     bridges  duplicates dropped", "  " + "=" * 61,
        "  broker-a  broker-a-1  broker-b  0        0"]


def test_csv_keeps_the_columns():
    out = render_lines(render_broker([], [], network=NETWORK, bridges=BRIDGES), csv=True)
    assert '"name","peer","direction","state","reconnect attempts","forwarded","remote"' in out
    assert '"a-to-b","broker-b","orders","queue","2","5"' in out


def test_the_example_in_docs_management_md_is_what_tdstat_prints():
    from tests.paths import REPO
    from tools.tdstatbroker import render_network

    doc = (REPO / "docs" / "management.md").read_text()
    example = doc.split("three more tables:\n\n```text\n", 1)[1].split("```", 1)[0].splitlines()
    network = [{"name": "broker-a", "brokerId": "broker-a-a61b83b6f1e2", "peers": ["broker-b"], "bridgeCount": 1,
                "duplicatesDropped": 0}]
    bridges = [{"name": "a-to-b", "identity": "a-to-b", "remote": "127.0.0.1:61616", "direction": "out",
                "state": "connected", "reconnectAttempts": 0, "peer": "broker-b", "forwarded": 5,
                "demand": [{"kind": "queue", "destination": "orders", "consumers": 1, "forwarded": 5}]}]
    assert render_lines(render_network(network, bridges))[1:] == example
