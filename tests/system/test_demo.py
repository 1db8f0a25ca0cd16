"""The narrated demos run end to end against real daemons and tell the truth."""

import subprocess
import sys

from tests.system.harness import REPO_ROOT


def test_brokerless_demo_shows_the_producer_blocked_until_a_consumer_exists():
    out = subprocess.run([sys.executable, "-m", "tools.demo", "brokerless", "--count", "3"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    blocked = [line for line in lines if "blocked, no consumer exists" in line]
    assert blocked and "credit 0, sent 0" in blocked[0]
    assert any("got credit 250" in line for line in lines)
    assert sum("consumer  received 'message" in line for line in lines) == 3
    assert any("all 3 messages accepted" in line for line in lines)


def _run_demo(*args):
    out = subprocess.run([sys.executable, "-m", "tools.demo", *args], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_brokered_demo_stores_then_drains_every_message_in_order():
    lines = _run_demo("brokered", "--count", "50")
    assert any("credit 250 at once" in line for line in lines)
    assert any("sent 50, 50 accepted (stored)" in line for line in lines)
    assert any("drained all 50 messages, in order" in line for line in lines)


def test_linkroute_demo_proxies_links_to_the_broker():
    lines = _run_demo("linkroute", "--count", "50")
    assert any("sent 50, 50 accepted (stored)" in line for line in lines)
    assert any("drained all 50 messages, in order" in line for line in lines)


# -- brokerless against a router that is already running, secured (TLS, authenticatePeer, PLAIN) ------------

def _secured_router(router_factory, tmp_path):
    # the certificates and the tdrouterd configuration of the tools' security tests (sslProfile, requireSsl,
    # authenticatePeer, a users file through saslConfigDir)
    from tests.system.test_tools_security import Pki, secure_tdrouterd
    from wire.users import Users
    pki = Pki(tmp_path)
    users = Users()
    users.set_password("admin", "s3cret-pw")
    router = secure_tdrouterd(router_factory, pki, users, tmp_path, mechanisms="PLAIN")
    password_file = tmp_path / "admin.pw"
    password_file.write_text("s3cret-pw\n")
    # authenticatePeer on a TLS listener also asks for a client certificate (router/security.py)
    tls = ("--ssl-trustfile", pki.ca_file, "--ssl-certificate", pki.client_cert, "--ssl-key", pki.client_key)
    return router, tls, str(password_file)


def _demo(*args):
    return subprocess.run([sys.executable, "-m", "tools.demo", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=90)


def test_brokerless_demo_runs_against_a_secured_router_with_plain_over_tls(router_factory, tmp_path):
    router, tls, password_file = _secured_router(router_factory, tmp_path)
    url = f"amqps://localhost:{router.ports['secure']}"
    out = _demo("brokerless", "--count", "3", "--router", url, *tls, "--sasl-mechanisms", "PLAIN",
                "--sasl-username", "admin", "--sasl-password-file", password_file)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(f"using the router at {url}" in line for line in lines)
    assert any("credit 0, sent 0 - blocked, no consumer exists" in line for line in lines)
    assert sum("consumer  received 'message" in line for line in lines) == 3
    assert any("all 3 messages accepted" in line for line in lines)
    assert "s3cret-pw" not in out.stdout + out.stderr


def test_brokerless_demo_against_a_secured_router_refuses_clearly(router_factory, tmp_path):
    router, tls, password_file = _secured_router(router_factory, tmp_path)
    url = f"amqps://localhost:{router.ports['secure']}"
    wrong = tmp_path / "wrong.pw"
    wrong.write_text("wrong-pw-123\n")
    bad_password = _demo("brokerless", "--count", "1", "--router", url, *tls, "--sasl-username", "admin",
                         "--sasl-password-file", str(wrong))
    assert bad_password.returncode == 1, bad_password.stdout + bad_password.stderr
    assert "connection to the router failed" in bad_password.stderr, bad_password.stderr
    assert "Authentication failed" in bad_password.stderr, bad_password.stderr
    plaintext = _demo("brokerless", "--count", "1", "--router", f"127.0.0.1:{router.ports['secure']}",
                      "--sasl-username", "admin", "--sasl-password-file", password_file)
    assert plaintext.returncode == 1 and "requires TLS" in plaintext.stderr, plaintext.stdout + plaintext.stderr
    scram = _demo("brokerless", "--router", url, *tls, "--sasl-mechanisms", "SCRAM-SHA-256", "--sasl-username",
                  "admin", "--sasl-password-file", password_file)
    assert scram.returncode == 2 and "cannot do SCRAM" in scram.stderr, scram.stderr
    for proc in (bad_password, plaintext, scram):
        assert "s3cret-pw" not in proc.stdout + proc.stderr and "wrong-pw-123" not in proc.stdout + proc.stderr
