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


STREAMS = [
    {"identity": "f/b3", "federation": "f", "stream": "b3", "kind": "upstream", "state": "connecting", "peer": "",
     "reconnectAttempts": 2, "copied": 0, "remote": "127.0.0.1:61618", "addresses": [], "command": None,
     "lastError": "connection refused"},
    {"identity": "f/b2", "federation": "f", "stream": "b2", "kind": "upstream", "state": "connected",
     "peer": "broker-2", "reconnectAttempts": 0, "copied": 7, "remote": "127.0.0.1:61617",
     "addresses": [{"address": "news", "policy": "p", "copied": 5}, {"address": "alerts", "policy": "p",
                                                                     "copied": 2}]},
    {"identity": "f/to-b2", "federation": "f", "stream": "to-b2", "kind": "downstream", "state": "connected",
     "peer": "", "reconnectAttempts": 0, "copied": 0, "remote": "127.0.0.1:61617", "addresses": [],
     "command": "accepted", "lastError": ""},
]
FED_QUEUES = [
    {"name": "broker-3.federated.f.b1.news.multicast", "address": "news", "origin": "broker-3-77aa",
     "originName": "", "maxHops": 1, "autoDelete": False, "autoDeleteDelay": 1000, "autoDeleteMessageCount": 10,
     "messageCount": 4, "consumerCount": 0},
    {"name": "broker-2.federated.f.b1.news.multicast", "address": "news", "origin": "broker-2-1234",
     "originName": "broker-2", "maxHops": 1, "autoDelete": True, "autoDeleteDelay": 3600000,
     "autoDeleteMessageCount": -1, "messageCount": 0, "consumerCount": 1},
]


def federation_lines(verbose=False, streams=STREAMS, queues=FED_QUEUES):
    out = render_lines(render_broker([], [], verbose, streams=streams, federation_queues=queues))
    first = next((i for i, line in enumerate(out) if line.startswith("Federation")), None)
    return [] if first is None else out[first - 1:]


def test_federation_tables_streams_sorted_addresses_per_stream_and_queues_kept_for_others():
    assert federation_lines() == [
        "",
        "Federation Streams",
        "  federation  stream  kind        state       peer      reconnect attempts  copied  remote",
        "  " + "=" * 99,
        "  f           b2      upstream    connected   broker-2  0                   7       127.0.0.1:61617",
        "  f           b3      upstream    connecting  -         2                   0       127.0.0.1:61618",
        "  f           to-b2   downstream  connected   -         0                   0       127.0.0.1:61617",
        "",
        "Federated Addresses",
        "  stream  address  policy  copied",
        "  " + "=" * 33,
        "  f/b2    alerts   p       2",
        "  f/b2    news     p       5",
        "",
        "Federation Queues (kept for other brokers)",
        "  queue                                   address  origin         max hops  auto-delete  delay ms  "
        "message limit  messages  consumers",
        "  " + "=" * 133,
        "  broker-2.federated.f.b1.news.multicast  news     broker-2       1         yes          3600000   "
        "any            0         1",
        "  broker-3.federated.f.b1.news.multicast  news     broker-3-77aa  1         no           1000      "
        "10             4         0",
    ]


def test_verbose_adds_the_command_errors_and_the_origin_id():
    lines = federation_lines(verbose=True)
    assert lines[2].split()[-5:] == ["command", "last", "error", "shared", "with"]
    assert lines[5].split()[-4:] == ["-", "connection", "refused", "-"]
    assert lines[6].split()[-3:] == ["accepted", "-", "-"]
    assert lines[17].split()[-1] == "broker-2-1234"


def test_only_the_federation_tables_with_rows_are_shown():
    assert federation_lines(streams=[], queues=[]) == []
    only_queues = federation_lines(streams=[])
    assert only_queues[1] == "Federation Queues (kept for other brokers)" and len(only_queues) == 6
    assert "Federation Queues (kept for other brokers)" not in federation_lines(queues=[])


def test_the_federation_example_in_docs_management_md_is_what_tdstat_prints():
    from tests.paths import REPO
    from tools.tdstatbroker import render_federation

    doc = (REPO / "docs" / "management.md").read_text()
    example = doc.split("federate it from `broker-1`):\n\n```text\n", 1)[1].split("```", 1)[0].splitlines()
    streams = [{"federation": "f", "stream": s, "kind": "upstream", "state": "connected", "peer": f"broker-{n}",
                "reconnectAttempts": 0, "copied": 0, "remote": f"127.0.0.1:6161{n + 5}",
                "addresses": [{"address": "news", "policy": "p", "copied": 0}]} for n, s in ((2, "b2"), (3, "b3"))]
    queues = [{"name": f"broker-{n}.federated.f.b1.news.multicast", "address": "news", "origin": f"broker-{n}-ab",
               "originName": f"broker-{n}", "maxHops": 1, "autoDelete": True, "autoDeleteDelay": 3600000,
               "autoDeleteMessageCount": -1, "messageCount": 0, "consumerCount": 1} for n in (2, 3)]
    assert render_lines(render_federation(streams, queues))[1:] == example
