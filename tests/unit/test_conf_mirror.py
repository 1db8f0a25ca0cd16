"""conf/mirror/: every blueprint parses with the broker's own parser, without a warning, and says what
conf/mirror/README.md says of it: the ports of its table, one started client acceptor on the active site
and ``autoStart=false`` on the standby's, a separate started acceptor for the mirror, and a ``<mirror>``
broker connection aimed at the other site's mirror acceptor. (tests/system/test_mirror.py runs the files.)"""

from __future__ import annotations

import re

import pytest

from broker.config import parse_broker_config
from tests.paths import REPO

MIRROR_DIR = REPO / "conf" / "mirror"

#: file stem -> (client acceptor port, client acceptor started, mirror acceptor port or None,
#:               mirror connection name or None, port that connection dials or None)
BLUEPRINTS = {
    "source": (61731, True, None, "dr", 61733),
    "replica": (61732, False, 61733, None, None),
    "dual-a": (61734, True, 61735, "to-b", 61737),
    "dual-b": (61736, False, 61737, "to-a", 61735),
}
#: The range the README documents: clear of conf/federation (61701-61720) and conf/networks (61601-61634).
PORT_RANGE = range(61731, 61738)


def _load(stem: str):
    path = MIRROR_DIR / f"{stem}.xml"
    return parse_broker_config(path.read_text(), str(path))


def test_every_file_is_listed_and_started_by_the_readme():
    assert sorted(p.stem for p in MIRROR_DIR.glob("*.xml")) == sorted(BLUEPRINTS)
    readme = (MIRROR_DIR / "README.md").read_text()
    for stem in BLUEPRINTS:
        assert f"tdbroker -c conf/mirror/{stem}.xml" in readme, f"README.md does not show how to start {stem}"


@pytest.mark.parametrize("stem", sorted(BLUEPRINTS))
def test_blueprint_parses_as_documented(stem):
    client_port, started, mirror_port, conn_name, dials = BLUEPRINTS[stem]
    cfg = _load(stem)
    assert cfg.warnings == [], cfg.warnings
    assert cfg.persistence_enabled and cfg.journal_directory == f"data/mirror/{stem}/journal"
    acceptors = {a.name: a for a in cfg.acceptors}
    assert set(acceptors) == ({"amqp", "mirror"} if mirror_port else {"amqp"})
    client = acceptors["amqp"]
    assert (client.host, client.port, client.auto_start) == ("127.0.0.1", client_port, started)
    if mirror_port:
        mirror = acceptors["mirror"]
        assert (mirror.host, mirror.port, mirror.auto_start) == ("127.0.0.1", mirror_port, True)
    for acceptor in cfg.acceptors:
        assert acceptor.port in PORT_RANGE
    mirrors = [(c, e) for c in cfg.broker_connections for e in c.elements if e.kind == "mirror"]
    if conn_name is None:
        assert mirrors == []
        return
    [(conn, element)] = mirrors
    assert (conn.name, conn.host, conn.port, conn.auto_start) == (conn_name, "127.0.0.1", dials, True)
    assert conn.reconnect_attempts == -1 and conn.retry_interval_ms == 500
    # the defaults of Artemis' amqp-mirror-type, written out in the files
    attrs = element.attrs
    assert (attrs["message-acknowledgements"], attrs["queue-creation"], attrs["queue-removal"],
            attrs["durable"], attrs["sync"]) == (True, True, True, True, False)
    assert attrs.get("address-filter") is None and attrs.get("source-mirror-address") is None


def test_pairs_dial_each_other_and_share_their_addresses():
    cfgs = {stem: _load(stem) for stem in BLUEPRINTS}
    names = [c.name for c in cfgs.values()]
    assert len(set(names)) == len(names)
    # a replica is a copy of its source's addresses (the runbook's "copy the configuration")
    for a, b in (("source", "replica"), ("dual-a", "dual-b")):
        assert [(x.name, sorted(x.routing_types), [q.name for q in x.queues]) for x in cfgs[a].addresses] == \
            [(x.name, sorted(x.routing_types), [q.name for q in x.queues]) for x in cfgs[b].addresses]


def test_readme_ports_table_matches_the_files():
    readme = (MIRROR_DIR / "README.md").read_text()
    for stem, (client_port, started, mirror_port, _, dials) in BLUEPRINTS.items():
        row = next(line for line in readme.splitlines() if f"`{stem}.xml`" in line and line.startswith("|"))
        ports = [int(p) for p in re.findall(r"\b(617\d\d)\b", row)]
        assert ports == [p for p in (client_port, mirror_port, dials) if p], (stem, row)
        assert ("autoStart=false" in row) == (not started), row
