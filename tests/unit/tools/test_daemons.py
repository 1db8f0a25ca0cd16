"""tools/daemons.py: the start-up lines of tdrouterd and tdbroker as the bench, the demos and the system
tests read them, and real daemons started, refused and stopped through it."""

from __future__ import annotations

import os
import socket

import pytest

from tools import daemons
from tools.daemons import BROKER, ROUTER, DaemonError, DaemonProcess, Listener, Ready, parse_startup_line

ROUTER_CONF = """\
router {
    mode: interior
    id: Daemons.Test
}
listener {
    name: clients
    host: 127.0.0.1
    port: 0
    role: normal
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
listener {
    name: mesh
    host: 127.0.0.1
    port: 0
    role: inter-router
    authenticatePeer: no
    saslMechanisms: ANONYMOUS
}
"""

BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>daemons-test</name>
  <journal-directory>{journal}</journal-directory>
  <acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>
</core></configuration>
"""


def test_startup_lines_of_both_daemons():
    assert parse_startup_line("tdrouterd: listening on 127.0.0.1:40123 (listener amqp, role normal)") == \
        Listener("tdrouterd", "amqp", "127.0.0.1", 40123, "normal")
    assert parse_startup_line("tdrouterd: listening on ::1:5672 (listener -, role inter-router)\n") == \
        Listener("tdrouterd", "-", "::1", 5672, "inter-router")
    assert parse_startup_line("tdrouterd: ready (router id Router.A)") == Ready("tdrouterd", "Router.A")
    assert parse_startup_line("tdbroker: listening on 127.0.0.1:5673 (acceptor amqp)") == \
        Listener("tdbroker", "amqp", "127.0.0.1", 5673, None)
    assert parse_startup_line("tdbroker: ready") == Ready("tdbroker", None)
    for other in ("", "tdrouterd: ready", "tdbroker: ready now", "tdrouterd: listening on nowhere",
                  "2026-11-24 INFO tdrouterd: ready (router id X)"):
        assert parse_startup_line(other) is None, other


def test_command_runs_the_module_with_this_interpreter(tmp_path):
    import sys

    assert daemons.daemon_command(ROUTER, tmp_path / "r.conf") == \
        [sys.executable, "-m", "router.daemon", "-c", str(tmp_path / "r.conf")]
    assert daemons.daemon_command("tdbroker", "b.xml")[2] == "broker.daemon"
    assert daemons.daemon_env()["PYTHONPATH"].split(os.pathsep)[0] == str(daemons.PACKAGE_ROOT)


@pytest.mark.system
def test_router_listeners_are_read_back_and_it_stops_cleanly(tmp_path):
    conf = tmp_path / "router.conf"
    conf.write_text(ROUTER_CONF)
    with DaemonProcess(ROUTER, conf) as router:
        assert list(router.listeners) == ["clients", "mesh"]
        assert router.listeners["mesh"].role == "inter-router"
        assert router.port == router.ports["clients"] > 0 and router.ports["mesh"] > 0
        assert router.url_for("mesh") == f"amqp://127.0.0.1:{router.ports['mesh']}"
        assert router.reported_id == "Daemons.Test"
        assert router.stdout_lines[-1] == "tdrouterd: ready (router id Daemons.Test)"
        assert router.stderr_path == tmp_path / "router.stderr"
        assert router.stop() == 0
    assert not router.is_running()


@pytest.mark.system
def test_broker_acceptor_is_read_back(tmp_path):
    conf = tmp_path / "broker.xml"
    conf.write_text(BROKER_XML.format(journal=tmp_path / "journal"))
    broker = DaemonProcess(BROKER, conf).start()
    try:
        assert broker.ports == {"amqp": broker.port} and broker.port > 0
        assert broker.reported_id is None
    finally:
        assert broker.stop() == 0


@pytest.mark.system
def test_a_refused_config_raises_with_the_daemons_file_and_line(tmp_path):
    conf = tmp_path / "bad.conf"
    conf.write_text("router {\n    mode: nonsense\n}\n")
    d = DaemonProcess(ROUTER, conf, label="Bad")
    with pytest.raises(DaemonError, match=r"(?s)tdrouterd Bad exited with status 2 before it was ready.*"
                                          + str(conf) + ":2:"):
        d.start()
    assert d.start_failed and not d.is_running()
    code, stderr = daemons.run_expecting_failure(ROUTER, conf)
    assert code == 2 and f"{conf}:2:" in stderr


@pytest.mark.system
def test_a_daemon_without_a_listener_is_refused_and_a_tool_gets_its_own_error(tmp_path):
    class ToolError(Exception):
        pass

    class ToolDaemon(DaemonProcess):
        failure = ToolError

    conf = tmp_path / "quiet.conf"
    # a connector only (a router with neither listener nor connector is refused at start-up): ready, but
    # with no listener to report
    conf.write_text("router {\n    mode: standalone\n    id: Quiet\n}\nconnector {\n    host: 127.0.0.1\n"
                    "    port: 1\n}\n")
    d = ToolDaemon(ROUTER, conf)
    with pytest.raises(ToolError, match="was ready without reporting a listener"):
        d.start()
    assert not d.is_running()


def test_free_ports_come_from_below_the_ephemeral_range_and_are_distinct():
    """A port the kernel picks for bind(0) is one any outgoing connection may take as its source port before
    the daemon binds it ("Address already in use" under load): free_port takes them from below that range,
    and never the same one twice in a row of tests."""
    low = daemons._ephemeral_low()
    if low is None or low - daemons.FREE_PORT_FLOOR <= 2 * daemons.FREE_PORTS_REMEMBERED:
        pytest.skip(f"no room below the ephemeral range here ({low})")
    ports = [daemons.free_port() for _ in range(300)]
    assert len(set(ports)) == len(ports)
    assert all(daemons.FREE_PORT_FLOOR <= p < low for p in ports)
    with socket.socket() as s:  # free a moment ago, so bindable now
        s.bind(("127.0.0.1", ports[-1]))


def test_a_port_in_use_is_not_handed_out(monkeypatch):
    with socket.socket() as taken, socket.socket() as spare:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        spare.bind(("127.0.0.1", 0))
        free = spare.getsockname()[1]
        spare.close()
        monkeypatch.setattr(daemons, "FREE_PORT_FLOOR", 1024)
        monkeypatch.setattr(daemons, "_ephemeral_low", lambda: 65536)
        monkeypatch.setattr(daemons, "_handed_out", {})
        picks = iter([busy, busy, free])  # what the random choice comes up with
        monkeypatch.setattr(daemons._port_picker, "randrange", lambda a, b: next(picks))
        assert daemons.free_port() == free
