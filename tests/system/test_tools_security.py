"""tdstat, tdmanage and tdbench (real processes) against a TLS + SASL listener that refuses anonymous logins.

The listener is a router (router.core.Router with its management agent) behind wire.driver.serve_listener
with TLS required and our SASL layer (authenticate_peer), run in the test's own Trio loop; the tools run as
subprocesses. Certificates are made at test time by trustme (no private key is committed).
"""

from __future__ import annotations

import functools
import json
import os
import sys

import pytest
import trio
import trustme

from router.core import Router
from router.daemon import attach_agent
from router.management import ManagementAgent
from tests.system.harness import REPO_ROOT, run_tool
from wire.driver import serve_listener
from wire.tls import ServerTls, TlsProfile
from wire.users import Users

HOST = "127.0.0.1"
# proton's peer-name check matches the certificate's DNS names (and common name), not IP addresses: the
# proton-based tools dial the listener by name.
NAME = "localhost"
TIMEOUT = 60
ALL_MECHANISMS = "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"


class Pki:
    def __init__(self, folder):
        self.folder = folder
        self.ca = trustme.CA(organization_name="trio-dispatch tool tests")
        self.ca_file = self.write("ca.pem", self.ca.cert_pem.bytes())
        cert = self.ca.issue_cert(HOST, "localhost", common_name="router-t")
        self.server = TlsProfile(name="server", cert_file=self.write("server-cert.pem", cert.cert_chain_pems[0].bytes()),
                                 private_key_file=self.write("server-key.pem", cert.private_key_pem.bytes()),
                                 ca_cert_file=self.ca_file)
        client = self.ca.issue_cert("admin.example", common_name="admin")
        self.client_cert = self.write("client-cert.pem", client.cert_chain_pems[0].bytes())
        self.client_key = self.write("client-key.pem", client.private_key_pem.bytes())
        other = trustme.CA(organization_name="someone else")
        self.other_ca_file = self.write("other-ca.pem", other.cert_pem.bytes())

    def write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        return str(path)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def users() -> Users:
    u = Users()
    u.set_password("admin", "s3cret-pw")
    return u


async def start_secure_router(nursery, pki: Pki, users: Users | None, *, mechanisms: str = ALL_MECHANISMS,
                              verify_client: bool = False):
    """A router with $management behind a listener that requires TLS and a SASL login; returns (router, port)."""
    router = Router("RT")
    attach_agent(router, ManagementAgent(router, clock=trio.current_time))
    settings = router.connection_settings(sasl_users=users, sasl_mechanisms=mechanisms, authenticate_peer=True)

    def make_engine(remote):
        return router.new_engine(settings, server=True, remote_host=remote)

    tls = ServerTls(pki.server.server_context(verify_client=verify_client), required=True)
    listeners = await nursery.start(functools.partial(serve_listener, HOST, 0, make_engine, tls=tls))
    return router, listeners[0].socket.getsockname()[1]


async def tool(module: str, *args: str, env: dict | None = None):
    """Run ``python -m module args`` without blocking the server's loop; returns the completed process."""
    full_env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    full_env.pop("TD_SASL_PASSWORD", None)
    full_env.update(env or {})
    with trio.fail_after(TIMEOUT):
        return await trio.run_process([sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=full_env,
                                      capture_stdout=True, capture_stderr=True, check=False)


def out(proc) -> str:
    return proc.stdout.decode() + proc.stderr.decode()


@pytest.fixture
def password_file(tmp_path) -> str:
    path = tmp_path / "admin.pw"
    path.write_text("s3cret-pw\n")
    return str(path)


async def test_tdstat_general_over_tls_with_plain_from_a_password_file(pki, users, password_file):
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users)
        proc = await tool("tools.tdstat", "-g", "-b", f"amqps://{NAME}:{port}", "--ssl-trustfile", pki.ca_file,
                          "--sasl-mechanisms", "PLAIN", "--sasl-username", "admin",
                          "--sasl-password-file", password_file)
        assert proc.returncode == 0, out(proc)
        assert "Router Id" in proc.stdout.decode() and "RT" in proc.stdout.decode()
        nursery.cancel_scope.cancel()


async def test_tdmanage_query_over_tls_with_the_password_from_the_environment(pki, users):
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users)
        # -b host:port with an --ssl-* option means TLS
        proc = await tool("tools.tdmanage", "query", "--type", "connection", "sasl", "user", "-b", f"{NAME}:{port}",
                          "--ssl-trustfile", pki.ca_file, "--sasl-username", "admin", "--json",
                          env={"TD_SASL_PASSWORD": "s3cret-pw"})
        assert proc.returncode == 0, out(proc)
        rows = json.loads(proc.stdout)
        assert rows == [{"sasl": "PLAIN", "user": "admin"}], rows
        assert "s3cret-pw" not in out(proc)
        nursery.cancel_scope.cancel()


async def test_refusals_wrong_password_anonymous_plaintext_untrusted(pki, users, tmp_path):
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("not-the-password\n")
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users)
        url = f"amqps://{NAME}:{port}"
        bad_pw = await tool("tools.tdstat", "-g", "-b", url, "--ssl-trustfile", pki.ca_file,
                            "--sasl-username", "admin", "--sasl-password-file", str(wrong), "-t", "10")
        assert bad_pw.returncode == 1 and "not-the-password" not in out(bad_pw), out(bad_pw)
        anonymous = await tool("tools.tdstat", "-g", "-b", url, "--ssl-trustfile", pki.ca_file, "-t", "10")
        assert anonymous.returncode == 1, out(anonymous)
        plaintext = await tool("tools.tdstat", "-g", "-b", f"{HOST}:{port}", "--sasl-username", "admin",
                               "-t", "10", env={"TD_SASL_PASSWORD": "s3cret-pw"})
        assert plaintext.returncode == 1, out(plaintext)
        untrusted = await tool("tools.tdmanage", "query", "--type", "connection", "-b", url,
                               "--ssl-trustfile", pki.other_ca_file, "--sasl-username", "admin", "-t", "10",
                               env={"TD_SASL_PASSWORD": "s3cret-pw"})
        assert untrusted.returncode == 1, out(untrusted)
        assert "Authentication failed [mech=PLAIN]" in out(bad_pw)
        assert "Authentication failed" in out(anonymous)
        assert "requires TLS" in out(plaintext)
        assert "certificate verify failed" in out(untrusted)
        assert not any("s3cret-pw" in out(p) for p in (bad_pw, anonymous, plaintext, untrusted))
        nursery.cancel_scope.cancel()


async def test_tdmanage_logs_in_with_external_from_its_client_certificate(pki):
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, None, mechanisms="EXTERNAL", verify_client=True)
        args = ("query", "--type", "connection", "-b", f"amqps://{NAME}:{port}", "--ssl-trustfile", pki.ca_file,
                "--json", "-t", "10")
        without_cert = await tool("tools.tdmanage", *args)
        assert without_cert.returncode == 1, out(without_cert)
        proc = await tool("tools.tdmanage", *args, "sasl", "user", "--ssl-certificate", pki.client_cert,
                          "--ssl-key", pki.client_key, "--sasl-mechanisms", "EXTERNAL")
        assert proc.returncode == 0, out(proc)
        rows = json.loads(proc.stdout)
        assert [r["sasl"] for r in rows] == ["EXTERNAL"] and "admin" in rows[0]["user"], rows
        nursery.cancel_scope.cancel()


async def test_an_ip_address_gets_a_hint_about_proton_name_check(pki, users, password_file):
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users)
        args = ("-g", "-b", f"amqps://{HOST}:{port}", "--ssl-trustfile", pki.ca_file, "--sasl-username", "admin",
                "--sasl-password-file", password_file)
        by_ip = await tool("tools.tdstat", *args)
        assert by_ip.returncode == 1 and "dial the listener by a name" in out(by_ip), out(by_ip)
        unchecked = await tool("tools.tdstat", *args, "--ssl-disable-peer-name-verify")
        assert unchecked.returncode == 0, out(unchecked)
        nursery.cancel_scope.cancel()


async def test_tdbench_with_a_wrong_password_fails_without_printing_it(pki, users):
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users, mechanisms="SCRAM-SHA-256")
        proc = await tool("tools.bench", "--router", f"amqps://{HOST}:{port}", "--ssl-trustfile", pki.ca_file,
                          "--sasl-username", "admin", "--messages", "100", "--no-direct", "--json",
                          env={"TD_SASL_PASSWORD": "wrong-pw-123"})
        assert proc.returncode == 1, out(proc)
        rep = json.loads(proc.stdout)
        assert not rep["ok"] and "wrong-pw-123" not in out(proc)
        assert "SASL login failed" in rep["router"]["errors"][0], rep["router"]["errors"]
        nursery.cancel_scope.cancel()


async def test_tdstat_and_tdmanage_log_in_with_scram(pki, users, password_file):
    """proton's SASL cannot do SCRAM: with --sasl-mechanisms SCRAM-* the tools use tools/engineclient.py."""
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users, mechanisms="SCRAM-SHA-512")
        login = ("--ssl-trustfile", pki.ca_file, "--sasl-mechanisms", "SCRAM-SHA-512", "--sasl-username", "admin",
                 "--sasl-password-file", password_file)
        stat = await tool("tools.tdstat", "-c", "-b", f"amqps://{HOST}:{port}", *login)  # Python's ssl matches IPs
        assert stat.returncode == 0, out(stat)
        assert "admin(SCRAM-SHA-512)" in stat.stdout.decode(), out(stat)
        manage = await tool("tools.tdmanage", "query", "--type", "connection", "sasl", "user", "-b",
                            f"{NAME}:{port}", *login, "--json")
        assert manage.returncode == 0, out(manage)
        assert json.loads(manage.stdout) == [{"sasl": "SCRAM-SHA-512", "user": "admin"}]
        assert not any("s3cret-pw" in out(p) for p in (stat, manage))
        nursery.cancel_scope.cancel()


async def test_tdbench_over_tls_with_scram(pki, users):
    async with trio.open_nursery() as nursery:
        router, port = await start_secure_router(nursery, pki, users, mechanisms="SCRAM-SHA-256")
        proc = await tool("tools.bench", "--router", f"amqps://{HOST}:{port}", "--ssl-trustfile", pki.ca_file,
                          "--sasl-username", "admin", "--messages", "2000", "--no-direct", "--json",
                          env={"TD_SASL_PASSWORD": "s3cret-pw"})
        assert proc.returncode == 0, out(proc)
        rep = json.loads(proc.stdout)
        assert rep["ok"] and rep["router"]["received"] == 2000, rep
        assert rep.get("tls") is True
        nursery.cancel_scope.cancel()


# -- the real tdrouterd, configured as a Qpid Dispatch user would (sslProfile, authenticatePeer, saslConfigDir) --

def secure_tdrouterd(router_factory, pki: Pki, users: Users, folder, mechanisms: str = "PLAIN SCRAM-SHA-256"):
    users.save(str(folder / "users.db"))
    # ANONYMOUS: the harness's own plaintext listener (the one it manages the router through) offers it
    (folder / "qdrouterd.conf").write_text("mech_list: ANONYMOUS PLAIN SCRAM-SHA-256 SCRAM-SHA-512\nsasldb_path: users.db\n")
    sections = (f"sslProfile {{\n    name: tls\n    certFile: {pki.server.cert_file}\n"
                f"    privateKeyFile: {pki.server.private_key_file}\n    caCertFile: {pki.ca_file}\n}}\n"
                "listener {\n    name: secure\n    host: 127.0.0.1\n    port: 0\n    sslProfile: tls\n"
                f"    requireSsl: yes\n    authenticatePeer: yes\n    saslMechanisms: {mechanisms}\n}}\n")
    return router_factory(sections, router_extra=f"saslConfigDir: {folder}")


def test_tools_against_a_secured_tdrouterd(router_factory, pki, users, password_file, tmp_path):
    router = secure_tdrouterd(router_factory, pki, users, tmp_path)
    port = router.ports["secure"]
    # authenticatePeer on a TLS listener also asks for a client certificate (router/security.py)
    cert = ("--ssl-trustfile", pki.ca_file, "--ssl-certificate", pki.client_cert, "--ssl-key", pki.client_key)
    secure = (*cert, "--sasl-username", "admin", "--sasl-password-file", password_file)
    stat = run_tool("tools.tdstat", "-g", "-b", f"amqps://{NAME}:{port}", *secure, check=False)
    assert stat.returncode == 0 and router.router_id in stat.stdout, stat.stdout + stat.stderr
    manage = run_tool("tools.tdmanage", "query", "--type", "connection", "sasl", "user", "-b", f"{NAME}:{port}",
                      *secure, "--json", check=False)
    assert manage.returncode == 0, manage.stderr
    assert {"sasl": "PLAIN", "user": "admin"} in json.loads(manage.stdout)
    bench = run_tool("tools.bench", "--router", f"amqps://{HOST}:{port}", *secure, "--sasl-mechanisms",
                     "SCRAM-SHA-256", "--router-pid", str(router.pid), "--messages", "2000", "--no-direct", "--json",
                     check=False, timeout=TIMEOUT)
    assert bench.returncode == 0, bench.stdout + bench.stderr
    rep = json.loads(bench.stdout)
    assert rep["ok"] and rep["tls"] and rep["router"]["received"] == 2000, rep
    anonymous = run_tool("tools.tdstat", "-g", "-b", f"amqps://{NAME}:{port}", *cert, "-t", "10", check=False)
    assert anonymous.returncode == 1 and "Authentication failed" in anonymous.stderr, anonymous.stderr
    for proc in (stat, manage, bench, anonymous):
        assert "s3cret-pw" not in proc.stdout + proc.stderr


def test_tdstat_and_tdmanage_with_scram_against_a_scram_only_tdrouterd(router_factory, pki, users, password_file,
                                                                        tmp_path):
    router = secure_tdrouterd(router_factory, pki, users, tmp_path, mechanisms="SCRAM-SHA-256")
    port = router.ports["secure"]
    cert = ("--ssl-trustfile", pki.ca_file, "--ssl-certificate", pki.client_cert, "--ssl-key", pki.client_key)
    scram = (*cert, "--sasl-mechanisms", "SCRAM-SHA-256", "--sasl-username", "admin")
    secure = (*scram, "--sasl-password-file", password_file)
    stat = run_tool("tools.tdstat", "-c", "-b", f"amqps://{NAME}:{port}", *secure, check=False)
    assert stat.returncode == 0, stat.stdout + stat.stderr
    assert "admin(SCRAM-SHA-256)" in stat.stdout, stat.stdout
    created = run_tool("tools.tdmanage", "create", "--type", "address", "--name", "scrammed", "prefix=scrammed",
                       "distribution=multicast", "-b", f"{NAME}:{port}", *secure, "--json", check=False)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["distribution"] == "multicast"
    query = run_tool("tools.tdmanage", "query", "--type", "address", "name", "prefix", "-b", f"{NAME}:{port}",
                     *secure, "--json", check=False)
    assert query.returncode == 0, query.stderr
    assert {"name": "scrammed", "prefix": "scrammed"} in json.loads(query.stdout)
    # PLAIN (proton's client) is not offered on this listener
    plain_login = run_tool("tools.tdstat", "-g", "-b", f"amqps://{NAME}:{port}", *cert, "--sasl-username", "admin",
                           "--sasl-password-file", password_file, "-t", "10", check=False)
    assert plain_login.returncode == 1, plain_login.stdout + plain_login.stderr
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("wrong-pw-123\n")
    refused = run_tool("tools.tdstat", "-c", "-b", f"amqps://{NAME}:{port}", *scram, "--sasl-password-file",
                       str(wrong), "-t", "10", check=False)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "SASL login to" in refused.stderr and "refused" in refused.stderr, refused.stderr
    assert "SCRAM-SHA-256 login as 'admin'" in refused.stderr, refused.stderr
    refused_manage = run_tool("tools.tdmanage", "query", "--type", "connection", "-b", f"{NAME}:{port}", *scram,
                              "--sasl-password-file", str(wrong), "-t", "10", check=False)
    assert refused_manage.returncode == 1 and "refused" in refused_manage.stderr, refused_manage.stderr
    for proc in (stat, created, query, plain_login, refused, refused_manage):
        assert "s3cret-pw" not in proc.stdout + proc.stderr and "wrong-pw-123" not in proc.stdout + proc.stderr
