"""Start-up failures of the real daemons (issue 18): one ``FILE:LINE: message`` line on stderr naming the
section and the operating system's error, the documented exit status (1: the OS refused what the
configuration asks for; 2: the configuration is refused as written), no traceback -- for tdrouterd,
tdbroker and ``make run``.

Ports are taken by a socket this test holds (bound and listening), so the daemon's bind fails for real.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import textwrap

import pytest

from tests.system.harness import REPO_ROOT
from tools.daemons import BROKER, ROUTER, free_port, run_expecting_failure

pytestmark = pytest.mark.system

EXIT_STARTUP_FAILED = 1
EXIT_CONFIG_REFUSED = 2
TIMEOUT = 30


@pytest.fixture
def taken_port():
    """A port on 127.0.0.1 held by a listening socket for the test's duration."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _router_conf(tmp_path: pathlib.Path, *ports: int, extra: str = "") -> pathlib.Path:
    conf = tmp_path / "router.conf"
    text = "router {\n    mode: standalone\n    id: R\n}\n"
    for port in ports:
        text += f"listener {{\n    host: 127.0.0.1\n    port: {port}\n}}\n"
    conf.write_text(text + textwrap.dedent(extra).lstrip("\n"))
    return conf


def _broker_xml(tmp_path: pathlib.Path, port: int, journal: str | None = None, uri_extra: str = "") -> pathlib.Path:
    xml = tmp_path / "broker.xml"
    xml.write_text(
        '<configuration xmlns="urn:activemq">\n'
        '  <core xmlns="urn:activemq:core">\n'
        "    <name>b</name>\n"
        "    <security-enabled>false</security-enabled>\n"
        f"    <journal-directory>{journal or tmp_path / 'journal'}</journal-directory>\n"
        "    <acceptors>\n"
        f'      <acceptor name="amqp">tcp://127.0.0.1:{port}?protocols=AMQP{uri_extra}</acceptor>\n'
        "    </acceptors>\n"
        "  </core>\n"
        "</configuration>\n")
    return xml


def _only_line(stderr: str, prefix: str) -> str:
    """The one stderr line starting with prefix (log lines may come before it); no traceback at all."""
    assert "Traceback" not in stderr and "ExceptionGroup" not in stderr, stderr
    lines = [line for line in stderr.splitlines() if line.startswith(prefix)]
    assert len(lines) == 1, stderr
    return lines[0]


def test_router_listener_port_in_use(tmp_path, taken_port):
    conf = _router_conf(tmp_path, taken_port)
    status, stderr = run_expecting_failure(ROUTER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_STARTUP_FAILED, stderr
    assert _only_line(stderr, str(conf)) == (f"{conf}:5: listener: cannot listen on 127.0.0.1:{taken_port}: "
                                             "Address already in use")


def test_router_second_listener_port_in_use_names_that_listener(tmp_path, taken_port):
    """The first listener was bound; the second one's section is named, and the daemon still exits."""
    conf = _router_conf(tmp_path, free_port(), taken_port)
    status, stderr = run_expecting_failure(ROUTER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_STARTUP_FAILED, stderr
    assert _only_line(stderr, str(conf)).startswith(f"{conf}:9: listener: cannot listen on 127.0.0.1:{taken_port}: ")


def test_router_named_listener_is_named(tmp_path, taken_port):
    conf = tmp_path / "router.conf"
    conf.write_text(f"router {{\n    id: R\n}}\nlistener {{\n    name: clients\n    host: 127.0.0.1\n"
                    f"    port: {taken_port}\n}}\n")
    status, stderr = run_expecting_failure(ROUTER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_STARTUP_FAILED, stderr
    assert _only_line(stderr, str(conf)).startswith(f"{conf}:4: listener clients: cannot listen on ")


def test_router_bad_certificate_is_a_refused_configuration(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate\n")
    conf = _router_conf(tmp_path, free_port(), extra=f"""
        sslProfile {{
            name: tls
            certFile: {bad}
            privateKeyFile: {bad}
        }}
        """)
    status, stderr = run_expecting_failure(ROUTER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_CONFIG_REFUSED, stderr
    assert _only_line(stderr, str(conf)).startswith(f"{conf}:12: sslProfile tls: privateKeyFile: {bad}: ")


def test_router_unwritable_log_file_is_a_refused_configuration(tmp_path):
    conf = _router_conf(tmp_path, free_port(), extra=f"""
        log {{
            module: DEFAULT
            outputFile: {tmp_path / 'no-such-dir' / 'router.log'}
        }}
        """)
    status, stderr = run_expecting_failure(ROUTER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_CONFIG_REFUSED, stderr
    assert "No such file or directory" in _only_line(stderr, f"{conf}:9: log: cannot open outputFile ")


def test_broker_acceptor_port_in_use(tmp_path, taken_port):
    xml = _broker_xml(tmp_path, taken_port)
    status, stderr = run_expecting_failure(BROKER, xml, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_STARTUP_FAILED, stderr
    assert _only_line(stderr, str(xml)) == (f"{xml}:7: acceptor amqp: cannot listen on 127.0.0.1:{taken_port}: "
                                            "Address already in use")


def test_broker_journal_directory_that_cannot_be_made(tmp_path):
    """A journal directory under a plain file (ENOTDIR holds for root too, unlike a chmod)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    xml = _broker_xml(tmp_path, free_port(), journal=str(blocker / "journal"))
    status, stderr = run_expecting_failure(BROKER, xml, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_STARTUP_FAILED, stderr
    assert _only_line(stderr, str(xml)) == f"{xml}:5: <journal-directory> {blocker / 'journal'}: Not a directory"
    assert stderr.strip().splitlines() == [f"{xml}:5: <journal-directory> {blocker / 'journal'}: Not a directory"]


def test_broker_bad_key_store_is_a_refused_configuration(tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key\n")
    xml = _broker_xml(tmp_path, free_port(), uri_extra=f";sslEnabled=true;keyStorePath={bad}")
    status, stderr = run_expecting_failure(BROKER, xml, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_CONFIG_REFUSED, stderr
    assert _only_line(stderr, str(xml)).startswith(f"{xml}:7: acceptor 'amqp': keyStorePath: {bad}: ")


def _venv_with_daemons() -> pathlib.Path | None:
    venv = pathlib.Path(sys.executable).parent.parent
    ok = all((venv / "bin" / name).exists() for name in ("tdrouterd", "tdbroker"))
    return venv if ok else None


@pytest.mark.parametrize("failing", ["tdrouterd", "tdbroker"])
def test_make_run_stops_both_and_exits_with_the_failing_daemons_status(tmp_path, taken_port, failing):
    """`make run` with one daemon's port taken: that daemon's one line, the other daemon stopped, make fails
    with the status. ``-o`` keeps make from (re)installing the venv: this test must not reach the network."""
    venv = _venv_with_daemons()
    if venv is None:
        pytest.skip(f"{sys.executable} is not in a venv with tdrouterd and tdbroker installed")
    router_port, broker_port = (taken_port, free_port()) if failing == "tdrouterd" else (free_port(), taken_port)
    conf = _router_conf(tmp_path, router_port)
    xml = _broker_xml(tmp_path, broker_port)
    proc = subprocess.run(["make", "-s", "-o", f"{venv}/.installed-run", "run", f"VENV={venv}",
                           f"ROUTER_CONF={conf}", f"BROKER_CONF={xml}"], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
    where = conf if failing == "tdrouterd" else xml
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert _only_line(proc.stderr, str(where)).endswith(f"127.0.0.1:{taken_port}: Address already in use")
    assert f"make run: {failing} exited with status {EXIT_STARTUP_FAILED}; stopped the other" in proc.stderr


def test_broker_flow_records_directory_that_cannot_be_made(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    xml = _broker_xml(tmp_path, free_port())
    xml.write_text(xml.read_text().replace("</acceptors>", f'</acceptors>\n<flow-records directory="{blocker}/flows"/>'))
    status, stderr = run_expecting_failure(BROKER, xml, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_STARTUP_FAILED, stderr
    line = _only_line(stderr, str(xml))
    assert line.startswith(f"{xml}:9: <flow-records>: ") and "Not a directory" in line, line


def test_router_flow_records_directory_that_cannot_be_made_is_a_refused_configuration(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    conf = _router_conf(tmp_path, free_port(), extra=f"flowRecords {{\n    directory: {blocker}/flows\n}}\n")
    status, stderr = run_expecting_failure(ROUTER, conf, timeout=TIMEOUT, cwd=REPO_ROOT)
    assert status == EXIT_CONFIG_REFUSED, stderr
    assert "Not a directory" in _only_line(stderr, f"{conf}:9: flowRecords: ")


def test_broker_journal_held_by_another_broker(tmp_path):
    from tests.system.brokerharness import BrokerProcess

    first = BrokerProcess(_broker_xml(tmp_path, 0), tmp_path).start()
    try:
        second = tmp_path / "second"
        second.mkdir()
        xml = _broker_xml(second, 0, journal=str(tmp_path / "journal"))
        status, stderr = run_expecting_failure(BROKER, xml, timeout=TIMEOUT, cwd=REPO_ROOT)
    finally:
        assert first.stop() == 0
    assert status == EXIT_STARTUP_FAILED, stderr
    assert _only_line(stderr, str(xml)) == (f"{xml}:5: <journal-directory>: {tmp_path / 'journal'}: journal is in "
                                            "use by another process")
