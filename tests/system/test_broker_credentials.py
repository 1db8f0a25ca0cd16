"""A broker connection logging in with a stored credential (issue 12), with two real tdbroker processes:
broker B requires logins (<security-enabled>true, artemis-users.properties); broker A's
<amqp-connection> to B names its user only, and its password is in A's credentials store
(broker-credentials.properties, written by `tdbroker credential add` from standard input). A message sent
on A reaches B's queue through the connection's <sender>; with a wrong stored password B refuses the
login, and neither A's log, its management answers nor the command's output ever hold the password."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from proton import Message
from proton.utils import BlockingConnection

from tests.system.brokerharness import TIMEOUT, BrokerProcess
from tests.system.harness import REPO_ROOT
from tests.system.waiting import wait_for
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.timeout(180)

PASSWORD = "Cr3dential-in-the-store"
WRONG = "Wr0ng-stored-password"
BROKER_CONNECTION = "org.apache.activemq.artemis.brokerConnection"

BROKER = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>{name}</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>{security}</security-enabled>
  <acceptors>
    <acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor>
  </acceptors>
  <addresses>
    <address name="q"><anycast><queue name="q"/></anycast></address>
  </addresses>
  {connections}
</core>
</configuration>
"""


def write_broker(workdir: pathlib.Path, *, name: str, security: bool, connections: str = "") -> pathlib.Path:
    workdir.mkdir(parents=True, exist_ok=True)
    conf = workdir / "broker.xml"
    conf.write_text(BROKER.format(name=name, security=str(security).lower(), connections=connections))
    return conf


def start(conf: pathlib.Path) -> BrokerProcess:
    broker = BrokerProcess(conf, conf.parent)
    broker.start()
    return broker


def store_credential(conf: pathlib.Path, user: str, password: str) -> str:
    """`tdbroker -c broker.xml credential add --user USER`, the password on standard input."""
    proc = subprocess.run([sys.executable, "-m", "broker.daemon", "-c", str(conf), "credential", "add",
                           "--user", user], input=password + "\n", cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def broker_b(tmp_path_factory):
    """The secured broker: alice may log in with PASSWORD."""
    workdir = tmp_path_factory.mktemp("b")
    (workdir / "artemis-users.properties").write_text(f"alice = {PASSWORD}\n")
    broker = start(write_broker(workdir, name="broker-b", security=True))
    yield broker
    broker.stop()


def broker_a(workdir: pathlib.Path, broker_b: BrokerProcess, stored_password: str):
    """Broker A, open, forwarding its queue q to B as alice with the password from its store only."""
    connections = (
        "<broker-connections>\n"
        f'  <amqp-connection uri="tcp://127.0.0.1:{broker_b.ports["amqp"]}" name="to-b" user="alice" '
        'retry-interval="200"><sender address-match="q"/></amqp-connection>\n'
        "</broker-connections>")
    conf = write_broker(workdir, name="broker-a", security=False, connections=connections)
    output = store_credential(conf, "alice", stored_password)
    assert stored_password not in output and stored_password not in conf.read_text()
    return start(conf), output


def connection_row(broker: BrokerProcess) -> dict:
    with ManagementClient(f"127.0.0.1:{broker.ports['amqp']}", timeout=TIMEOUT) as mc:
        (row,) = [r for r in mc.query(BROKER_CONNECTION) if r["name"] == "to-b"]
        read = mc.call("READ", type=BROKER_CONNECTION, name="to-b")
    return {"query": row, "read": read}


def test_a_broker_connection_logs_in_with_its_stored_credential(tmp_path, broker_b):
    a, cli_output = broker_a(tmp_path / "a", broker_b, PASSWORD)
    try:
        conn = BlockingConnection(f"amqp://127.0.0.1:{a.ports['amqp']}", timeout=TIMEOUT)
        try:
            conn.create_sender("q").send(Message(body="through the stored credential"))
        finally:
            conn.close()
        conn = BlockingConnection(f"amqp://127.0.0.1:{broker_b.ports['amqp']}", timeout=TIMEOUT,
                                  user="alice", password=PASSWORD, allowed_mechs="PLAIN")
        try:
            receiver = conn.create_receiver("q")
            assert receiver.receive(timeout=TIMEOUT).body == "through the stored credential"
            receiver.accept()
        finally:
            conn.close()
        rows = connection_row(a)
        assert rows["query"]["status"] == "connected" and PASSWORD not in repr(rows)
        # B saw alice log in over the connection from A (SCRAM: the password did not cross the wire).
        b_log = (broker_b.conf.parent / "broker.stderr").read_text()
        assert "container broker-a, user 'alice' (SCRAM-SHA-512)" in b_log, b_log[-2000:]
    finally:
        assert a.stop() == 0
    a_log = (tmp_path / "a" / "broker.stderr").read_text()
    assert "logs in as 'alice' with the password from the credentials store" in a_log, a_log[-2000:]
    assert PASSWORD not in a_log + cli_output


def test_a_wrong_stored_password_is_refused_by_the_peer_and_never_logged(tmp_path, broker_b):
    b_log_path = broker_b.conf.parent / "broker.stderr"
    b_log_before = len(b_log_path.read_text())
    a, cli_output = broker_a(tmp_path / "a", broker_b, WRONG)
    a_log_path = tmp_path / "a" / "broker.stderr"
    try:
        # A keeps trying (retry-interval 200 ms) and says why each attempt failed, naming the user only.
        wait_for(lambda: a_log_path.read_text().count("amqp:unauthorized-access") >= 2, "A to log the refusals")
        rows = connection_row(a)
        assert rows["query"]["status"] != "connected" and WRONG not in repr(rows)
        conn = BlockingConnection(f"amqp://127.0.0.1:{a.ports['amqp']}", timeout=TIMEOUT)
        try:
            conn.create_sender("q").send(Message(body="stays on A"))
        finally:
            conn.close()
        with ManagementClient(f"127.0.0.1:{a.ports['amqp']}", timeout=TIMEOUT) as mc:
            (queue,) = [r for r in mc.query("org.apache.activemq.artemis.queue", ["name", "messageCount"])
                        if r["name"] == "q"]
        assert queue["messageCount"] == 1   # not forwarded: B never let the connection in
        b_log = b_log_path.read_text()[b_log_before:]
        assert "authentication failed" in b_log and "container broker-a, user 'alice'" not in b_log, b_log
    finally:
        assert a.stop() == 0
    a_log = a_log_path.read_text()
    assert "logs in as 'alice' with the password from the credentials store" in a_log, a_log[-2000:]
    assert WRONG not in a_log + cli_output and PASSWORD not in a_log
