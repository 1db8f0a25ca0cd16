"""rhea (Node) logs in with SCRAM-SHA-256 and SCRAM-SHA-512 over TLS to a real tdrouterd and tdbroker (issue 12).

rhea 3 has no SCRAM client; tests/clients/rhea/scram.js is ours (RFC 5802, RFC 7677), plugged in through
rhea's ``sasl_mechanisms`` connection option. Each test runs rhea in a ``node`` process against a daemon
configured as its users configure it: tdrouterd with an ``sslProfile``, a listener with ``requireSsl`` and
``authenticatePeer``, and ``router { saslConfigDir, saslConfigName }`` naming a Cyrus-style file whose
``sasldb_path`` is a users file written by ``python -m tools.tdpasswd``; tdbroker with an ``sslEnabled``
acceptor and ``<security-enabled>`` users in ``artemis-users.properties``. Certificates are made at test
time by trustme: no key or password is committed.

The client checks the server's signature too (RFC 5802 §9): a router whose users file has the right
StoredKey but a wrong ServerKey -- a server that could check the client's proof but not prove itself, as
one that stole the StoredKeys could -- accepts the login and the client must still refuse it.
"""

from __future__ import annotations

import base64
import json
import pathlib
import re
import secrets
import subprocess
import sys

import pytest
import trustme

from tests.system.brokerharness import BrokerProcess
from tests.system.harness import REPO_ROOT
from tests.system.pki import write_pki
from tests.system.rhea import RHEA_DIR, require_rhea
from tools.mgmtclient import ManagementClient

pytestmark = pytest.mark.timeout(180)

TIMEOUT = 20.0          # one rhea run, seconds (its own give-up time; the process gets more)
USER, PASSWORD = "alice", "wonderland"
MECHANISMS = ["SCRAM-SHA-256", "SCRAM-SHA-512"]
SASL_CONF = "trio"      # saslConfigName: the router reads <saslConfigDir>/trio.conf
# rhea's SaslClient reports a sasl-outcome code 1 (auth, AMQP 1.0 §5.3.3.6) like this.
REFUSED = {"condition": "amqp:unauthorized-access", "description": "Failed to authenticate: 1"}

# One rhea connection over TLS logging in with the SCRAM mechanisms named (and nothing else: no PLAIN to fall
# back to), a receiver and a sender on one address, one message sent to itself. Prints one JSON line: the
# body received, or the error rhea reported; and the mechanism rhea chose. With "hold" the connection stays
# open after the message until standard input closes (so the server's management can be asked about it).
RHEA_SCRAM = r"""
const fs = require('fs');
const rhea = require('rhea');
const scram = require('./scram.js');
const o = JSON.parse(process.argv[1]);
const container = rhea.create_container({id: o.container});
let conn, finished = false;
const giveUp = setTimeout(() => report({error: {condition: 'timeout', description: 'no outcome in time'}}),
                          o.timeout * 1000);
function report(result) {
    if (finished) return;
    finished = true;
    clearTimeout(giveUp);
    result.mechanism = conn.sasl_transport ? conn.sasl_transport.mechanism_name : null;
    console.log(JSON.stringify(result));
    if (result.error) process.exit(0);
    const close = () => { conn.close(); setTimeout(() => process.exit(0), 5000).unref(); };
    if (o.hold) { process.stdin.on('end', close); process.stdin.resume(); } else close();
}
container.on('message', (ctx) => report({body: ctx.message.body}));
container.on('sendable', (ctx) => {
    if (!ctx.sender.sent) { ctx.sender.sent = true; ctx.sender.send({body: o.body}); }
});
container.on('connection_error', (ctx) => report({error: {condition: ctx.error.condition,
                                                        description: ctx.error.description}}));
container.on('connection_close', () => { if (finished) process.exit(0); });
container.on('disconnected', (ctx) => {
    if (finished) process.exit(0);
    report({error: {condition: 'disconnected', description: String(ctx.error || ctx.connection.error)}});
});
const tls = {ca: fs.readFileSync(o.ca)};
if (o.cert) { tls.cert = fs.readFileSync(o.cert); tls.key = fs.readFileSync(o.key); }
conn = container.connect(Object.assign({host: '127.0.0.1', port: o.port, transport: 'tls', servername: 'localhost',
    sasl_mechanisms: scram.mechanisms(rhea, o.user, o.password, o.mechanisms), reconnect: false}, tls));
conn.open_receiver(o.address);
conn.open_sender(o.address);
"""


def tdpasswd(users_file: pathlib.Path, user: str, password: str) -> None:
    """Add ``user`` to ``users_file`` as an operator would: ``echo PASSWORD | tdpasswd -f FILE USER``."""
    subprocess.run([sys.executable, "-m", "tools.tdpasswd", "-f", str(users_file), user], input=password + "\n",
                   cwd=REPO_ROOT, text=True, capture_output=True, check=True, timeout=60)


def with_wrong_server_keys(users_line: str) -> str:
    """A users-file line whose credentials keep the salt, iterations and StoredKey but carry a random ServerKey
    (the format of wire/users.py: ``NAME MECH$ITERATIONS:SALT$STOREDKEY:SERVERKEY ...``)."""
    def swap(match: re.Match) -> str:
        size = len(base64.b64decode(match.group(2)))
        return match.group(1) + base64.b64encode(secrets.token_bytes(size)).decode("ascii")
    changed = re.sub(r"(SCRAM-SHA-\d+\$\d+:[^$\s]+\$[^:\s]+:)(\S+)", swap, users_line)
    assert changed.count("SCRAM-SHA-") == 2 and changed != users_line, users_line
    return changed


@pytest.fixture
def pki(tmp_path):
    """CA, the server's certificate for localhost, a client certificate it signed, and in ``sasl/`` the users
    file (alice) with the SASL configuration naming it."""
    files = write_pki(tmp_path)
    sasl_dir = tmp_path / "sasl"
    sasl_dir.mkdir()
    tdpasswd(sasl_dir / "users.db", USER, PASSWORD)
    # ANONYMOUS: the harness's own listener (management, no login) uses it.
    (sasl_dir / f"{SASL_CONF}.conf").write_text("mech_list: ANONYMOUS SCRAM-SHA-256 SCRAM-SHA-512\n"
                                                "sasldb_path: users.db\n")
    files["sasl_dir"] = str(sasl_dir)
    return files


def secure_router(router_factory, pki):
    """A tdrouterd with listener ``secure``: TLS required (client certificate too) and a SCRAM login."""
    return router_factory(
        f"sslProfile {{\n    name: tls\n    certFile: {pki['server.pem']}\n    privateKeyFile: {pki['server.key']}\n"
        f"    caCertFile: {pki['ca.pem']}\n}}\n"
        "listener {\n    name: secure\n    host: 127.0.0.1\n    port: 0\n    sslProfile: tls\n    requireSsl: yes\n"
        "    authenticatePeer: yes\n    saslMechanisms: SCRAM-SHA-512 SCRAM-SHA-256\n}\n",
        router_extra=f"saslConfigDir: {pki['sasl_dir']}\nsaslConfigName: {SASL_CONF}")


def rhea_scram_args(port: int, ca: str, *, user=USER, password=PASSWORD, mechanisms=MECHANISMS,
                    address="rhea-scram/q", cert: str | None = None, key: str | None = None,
                    container="rhea-scram", hold=False) -> list[str]:
    node = require_rhea()
    options = {"port": port, "ca": ca, "cert": cert, "key": key, "user": user, "password": password,
               "mechanisms": mechanisms, "address": address, "container": container, "hold": hold,
               "body": "scram over tls", "timeout": TIMEOUT}
    return [node, "-e", RHEA_SCRAM, json.dumps(options)]


def last_json(stdout: str, stderr: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"rhea printed no result\nstdout: {stdout}\nstderr: {stderr}"
    return json.loads(lines[-1])


def run_rhea_scram(port: int, ca: str, **kw) -> dict:
    """Run the rhea client to its end and return its JSON result."""
    proc = subprocess.run(rhea_scram_args(port, ca, **kw), cwd=RHEA_DIR, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT + 30)
    return last_json(proc.stdout, proc.stderr)


def to_router(router, pki, **kw) -> dict:
    return run_rhea_scram(router.ports["secure"], pki["ca.pem"], cert=pki["client.pem"], key=pki["client.key"], **kw)


def connection_rows(router) -> list[dict]:
    with ManagementClient(f"127.0.0.1:{router.ports['amqp']}", timeout=TIMEOUT) as client:
        return client.query("org.apache.qpid.dispatch.connection", ["user", "sasl", "isEncrypted", "container"])


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_rhea_logs_in_to_the_router_with_scram_over_tls_and_routes_to_itself(router_factory, pki, mechanism):
    router = secure_router(router_factory, pki)
    args = rhea_scram_args(router.ports["secure"], pki["ca.pem"], cert=pki["client.pem"], key=pki["client.key"],
                           mechanisms=[mechanism], hold=True)
    proc = subprocess.Popen(args, cwd=RHEA_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()   # the client gives up after TIMEOUT, so this line comes
        result = last_json(first, "")
        assert result == {"body": "scram over tls", "mechanism": mechanism}, result
        # The router's own view of the connection, while rhea holds it open.
        [row] = [r for r in connection_rows(router) if r["container"] == "rhea-scram"]
        assert (row["user"], row["sasl"], row["isEncrypted"]) == (USER, mechanism, True), row
    finally:
        proc.stdin.close()   # rhea closes its connection and exits
        try:
            assert proc.wait(timeout=TIMEOUT) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()
            proc.stderr.close()


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("user,password", [(USER, "wrong"), ("mallory", PASSWORD)],
                         ids=["wrong-password", "unknown-user"])
def test_rhea_scram_with_a_wrong_password_or_an_unknown_user_is_refused(router_factory, pki, mechanism, user,
                                                                         password):
    router = secure_router(router_factory, pki)
    result = to_router(router, pki, user=user, password=password, mechanisms=[mechanism])
    assert result == {"error": REFUSED, "mechanism": mechanism}, result
    assert "authentication failed: wrong password or unknown user" in router.stderr_text()


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_rhea_refuses_a_router_that_cannot_prove_it_knows_the_server_key(router_factory, pki, mechanism):
    """The router checks the proof against the right StoredKey and says ok, but signs with a wrong ServerKey:
    the client must not trust it (the login fails on the client's side, before any link)."""
    users_file = pathlib.Path(pki["sasl_dir"]) / "users.db"
    text = users_file.read_text()
    users_file.write_text("\n".join(with_wrong_server_keys(line) if line.startswith(USER + " ") else line
                                    for line in text.splitlines()) + "\n")
    router = secure_router(router_factory, pki)
    result = to_router(router, pki, mechanisms=[mechanism])
    assert result["mechanism"] == mechanism and "body" not in result, result
    assert result["error"]["condition"] == "amqp:unauthorized-access", result
    assert "wrong server signature" in result["error"]["description"], result
    assert "authentication failed" not in router.stderr_text()   # the router accepted the proof


BROKER_XML = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>scram-broker</name>
  <persistence-enabled>false</persistence-enabled>
  <security-enabled>true</security-enabled>
  <acceptors>
    <acceptor name="amqps">tcp://127.0.0.1:0?protocols=AMQP;sslEnabled=true;keyStorePath=server.pem;trustStorePath=ca.pem</acceptor>
  </acceptors>
  <addresses>
    <address name="q"><anycast><queue name="q"/></anycast></address>
  </addresses>
</core>
</configuration>
"""


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory):
    """A tdbroker with a TLS acceptor and security on; alice's password in artemis-users.properties."""
    workdir = tmp_path_factory.mktemp("scram-broker")
    ca = trustme.CA()
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(str(workdir / "server.pem"))
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    (workdir / "artemis-users.properties").write_text(f"{USER} = {PASSWORD}\n")
    (workdir / "broker.xml").write_text(BROKER_XML)
    broker = BrokerProcess(workdir / "broker.xml", workdir)
    broker.start()
    yield broker, workdir
    assert broker.stop() == 0


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_rhea_logs_in_to_the_broker_with_scram_over_tls_and_uses_a_queue(secured_broker, mechanism):
    broker, workdir = secured_broker
    container = f"rhea-{mechanism.lower()}"
    result = run_rhea_scram(broker.ports["amqps"], str(workdir / "ca.pem"), mechanisms=[mechanism], address="q",
                            container=container)
    assert result == {"body": "scram over tls", "mechanism": mechanism}, result
    log = (workdir / "broker.stderr").read_text()
    assert f"container {container}, user '{USER}' ({mechanism})" in log, log[-2000:]


@pytest.mark.parametrize("user,password", [(USER, "wrong"), ("mallory", PASSWORD)],
                         ids=["wrong-password", "unknown-user"])
def test_rhea_scram_to_the_broker_with_a_wrong_password_or_an_unknown_user_is_refused(secured_broker, user,
                                                                                       password):
    broker, workdir = secured_broker
    result = run_rhea_scram(broker.ports["amqps"], str(workdir / "ca.pem"), user=user, password=password,
                            address="q")
    assert result == {"error": REFUSED, "mechanism": "SCRAM-SHA-512"}, result   # the broker offers 512 first
    assert broker.proc.poll() is None


# scram.js against the SCRAM-SHA-256 example of RFC 7677 §3 (user "user", password "pencil"), and the checks
# a client makes on what the server sends.
SCRAM_UNIT = r"""
const {ScramClient} = require('./scram.js');
const out = {};
const client = (nonce) => new ScramClient('SCRAM-SHA-256', 'user', 'pencil', {nonce: nonce || 'rOprNGfwEbeRWgbNEkqO'});
const first = (m) => { let r; m.start((e, x) => { r = e || x.toString(); }); return r; };
const step = (m, text) => { let r; m.step(Buffer.from(text), (e, x) => { r = e ? {error: e} : x.toString(); }); return r; };
const serverFirst = 'r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096';
let m = client();
out.clientFirst = first(m);
out.clientFinal = step(m, serverFirst);
out.rightSignature = m.outcome(Buffer.from('v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=')) || 'ok';
m = client(); first(m); step(m, serverFirst);
out.wrongSignature = m.outcome(Buffer.from('v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4='));
m = client(); first(m); step(m, serverFirst);
out.noSignature = m.outcome(undefined);
m = client(); first(m); step(m, serverFirst);
out.serverError = m.outcome(Buffer.from('e=invalid-proof'));
m = client(); first(m);
out.earlySuccess = m.outcome(undefined);
m = client(); first(m);
out.fewIterations = step(m, serverFirst.replace('i=4096', 'i=1'));
m = client(); first(m);
out.foreignNonce = step(m, serverFirst.replace('r=rOprNGfwEbeRWgbNEkqO', 'r=somethingElse'));
m = client(); first(m);
out.extension = step(m, 'm=x,' + serverFirst);
m = new ScramClient('SCRAM-SHA-512', 'a=b,c', 'x'); out.escapedName = first(m).replace(/r=.*/, '');
console.log(JSON.stringify(out));
"""


def test_scram_js_matches_rfc_7677_and_refuses_a_server_that_does_not_prove_itself():
    node = require_rhea()
    proc = subprocess.run([node, "-e", SCRAM_UNIT], cwd=RHEA_DIR, capture_output=True, text=True, timeout=60)
    out = last_json(proc.stdout, proc.stderr)
    assert out["clientFirst"] == "n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert out["clientFinal"] == ("c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                  "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert out["rightSignature"] == "ok"
    assert "wrong server signature" in out["wrongSignature"]
    assert "without its signature" in out["noSignature"]
    assert "the server refused: invalid-proof" in out["serverError"]
    assert "before the exchange ended" in out["earlySuccess"]
    assert "iteration count 1 is outside 4096..1000000" in out["fewIterations"]["error"]
    assert "does not extend the client nonce" in out["foreignNonce"]["error"]
    assert "extension" in out["extension"]["error"]
    assert out["escapedName"] == "n,,n=a=3Db=2Cc,"
