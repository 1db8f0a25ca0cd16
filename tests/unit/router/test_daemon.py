"""conf/mesh/: every topology parses, and its connectors point at inter-router / edge listeners of the
routers they name, with unique ids and ports."""

from __future__ import annotations

import pytest

from router.config import load_config
from router.daemon import check_config
from tests.paths import REPO

MESH = REPO / "conf" / "mesh"
TOPOLOGIES = {
    "line": ["line-A", "line-B", "line-C"],
    "triangle": ["triangle-A", "triangle-B", "triangle-C"],
    "hub": ["hub", "spoke-1", "spoke-2", "spoke-3"],
    "edges": ["edges-interior-A", "edges-interior-B", "edges-edge-A", "edges-edge-B"],
}
EDGES = {"line": {("Line.B", "Line.A"), ("Line.C", "Line.B")},
         "triangle": {("Tri.B", "Tri.A"), ("Tri.C", "Tri.A"), ("Tri.C", "Tri.B")},
         "hub": {("Spoke.1", "Hub"), ("Spoke.2", "Hub"), ("Spoke.3", "Hub")},
         "edges": {("Int.B", "Int.A"), ("Edge.A", "Int.A"), ("Edge.B", "Int.B")}}


def test_every_file_belongs_to_a_topology_and_the_readme_names_it():
    files = {p.stem for p in MESH.glob("*.conf")}
    assert files == {f for names in TOPOLOGIES.values() for f in names}
    readme = (MESH / "README.md").read_text()
    for name in files:
        assert f"{name}.conf" in readme


@pytest.mark.parametrize("topology", sorted(TOPOLOGIES))
def test_topology_is_consistent(topology):
    cfgs = {}
    for name in TOPOLOGIES[topology]:
        cfg = load_config(str(MESH / f"{name}.conf"))
        check_config(cfg)
        cfgs[cfg.router["id"]] = cfg
    assert len(cfgs) == len(TOPOLOGIES[topology]), "router ids must be unique"
    ports = [int(l["port"]) for c in cfgs.values() for l in c.listeners]
    assert len(ports) == len(set(ports)), "listener ports must not clash"
    by_port = {int(l["port"]): (rid, l["role"]) for rid, c in cfgs.items() for l in c.listeners}
    edges = set()
    for rid, cfg in cfgs.items():
        mode = cfg.router["mode"]
        assert mode in ("interior", "edge")
        assert any(l["role"] == "normal" for l in cfg.listeners), f"{rid}: no client listener"
        for conn in cfg.connectors:
            peer, role = by_port[int(conn["port"])]
            assert role == conn["role"] == ("edge" if mode == "edge" else "inter-router")
            assert cfgs[peer].router["mode"] == "interior"
            edges.add((rid, peer))
        if mode == "interior":
            # timers are the production defaults: short ones are for tests only
            assert cfg.router.get("helloIntervalSeconds") in (None, 1)
            assert cfg.router.get("raIntervalSeconds") in (None, 30)
    assert edges == EDGES[topology]
    # the same address treatment everywhere (Dispatch requires it)
    treatments = {rid: sorted((a.get("prefix"), a.get("distribution"), a.get("waypoint"))
                              for a in c.addresses) for rid, c in cfgs.items()}
    assert len({repr(t) for t in treatments.values()}) == 1


def test_default_config_listens_on_loopback_only():
    """conf/router.conf is what `make run` starts: its listeners must not face the network while anyone
    who connects is anonymous and may use $management (issue 12)."""
    cfg = load_config(str(REPO / "conf" / "router.conf"))
    check_config(cfg)
    assert cfg.listeners and all(e["host"] in ("127.0.0.1", "::1", "localhost") for e in cfg.listeners)


def test_daemon_exits_2_with_file_and_line_for_an_unenforced_security_setting(tmp_path):
    """The real tdrouterd refuses `requireSsl: yes` without an sslProfile (nothing to encrypt with) before it
    listens."""
    import subprocess
    import sys

    conf = tmp_path / "secure.conf"
    conf.write_text("router {\n    id: R\n}\nlistener {\n    host: 127.0.0.1\n    port: 0\n"
                    "    requireSsl: yes\n}\n")
    proc = subprocess.run([sys.executable, "-m", "router.daemon", "-c", str(conf)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"{conf}:7: listener: requireSsl: yes needs an sslProfile"), proc.stderr
    assert "listening" not in proc.stdout


def test_open_properties_go_into_the_connections_open():
    from router.config import parse_config
    from router.core import Router
    from router.daemon import _settings

    cfg = parse_config('router {\n    id: R\n}\nconnector {\n    name: c\n    port: 5672\n'
                       '    openProperties: {"site": "east", "rack": 4}\n}\n', "r.conf")
    settings, _ = _settings(Router("R"), cfg.connectors[0], server=False)
    assert settings.properties["site"] == "east" and settings.properties["rack"] == 4
