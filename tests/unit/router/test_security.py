"""router/security.py: sslProfile sections, router saslConfigDir/saslConfigName and the listener/connector
TLS and SASL attributes become TLS contexts and SASL settings, or a FILE:LINE refusal (issue 12).

Certificates are made at test time by trustme and the users file by wire.users: nothing secret is committed.
"""

from __future__ import annotations

import ssl

import pytest
import trustme

from router.config import ConfigError, parse_config
from router.daemon import _settings, check_config
from router.core import Router
from wire.users import Users


@pytest.fixture
def files(tmp_path):
    """PEM files (CA, server cert+key) and a SASL configuration naming a users file with user 'alice'."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    paths = {"ca": tmp_path / "ca.pem", "cert": tmp_path / "server.pem", "key": tmp_path / "server.key"}
    ca.cert_pem.write_to_path(str(paths["ca"]))
    server.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    server.private_key_pem.write_to_path(str(paths["key"]))
    users = Users()
    users.set_password("alice", "wonderland", iterations=4096)
    users.save(str(tmp_path / "users.db"))
    (tmp_path / "qdrouterd.conf").write_text("mech_list: PLAIN SCRAM-SHA-256\nsasldb_path: users.db\n")
    paths["dir"] = tmp_path
    return paths


def _profile(files, name="tls"):
    return (f"sslProfile {{\n    name: {name}\n    certFile: {files['cert']}\n    privateKeyFile: {files['key']}\n"
            f"    caCertFile: {files['ca']}\n}}\n")


def _check(text):
    cfg = parse_config(text, "sec.conf")
    return cfg, check_config(cfg)


def _refused(text) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        _check(text)
    return info.value


def _listener_settings(cfg, security, index=0):
    return _settings(Router("R"), cfg.listeners[index], server=True, security=security)


def test_tls_listener_with_users_offers_passwords_and_no_anonymous(files):
    cfg, security = _check(f"router {{\n id: R\n saslConfigDir: {files['dir']}\n}}\n" + _profile(files)
                           + "listener {\n port: 0\n sslProfile: tls\n requireSsl: yes\n authenticatePeer: yes\n}\n")
    settings, tls = _listener_settings(cfg, security)
    assert settings.sasl_mechanisms == "PLAIN SCRAM-SHA-256"      # the mech_list, ANONYMOUS never offered
    assert settings.authenticate_peer and "alice" in settings.sasl_users
    assert tls.required and tls.context.verify_mode == ssl.CERT_REQUIRED   # authenticatePeer on TLS: client certs


def test_tls_listener_without_require_ssl_takes_plaintext_too_and_no_client_certs(files):
    cfg, security = _check("router {\n id: R\n}\n" + _profile(files) + "listener {\n port: 0\n sslProfile: tls\n}\n")
    settings, tls = _listener_settings(cfg, security)
    assert not tls.required and tls.context.verify_mode == ssl.CERT_NONE
    assert settings.sasl_mechanisms == "ANONYMOUS" and settings.sasl_users is None


def test_require_encryption_means_tls_required(files):
    cfg, security = _check("router {\n id: R\n}\n" + _profile(files)
                           + "listener {\n port: 0\n sslProfile: tls\n requireEncryption: yes\n}\n")
    assert _listener_settings(cfg, security)[1].required


def test_listener_sasl_mechanisms_narrow_what_is_offered(files):
    cfg, security = _check(f"router {{\n id: R\n saslConfigDir: {files['dir']}\n}}\n"
                           "listener {\n port: 0\n saslMechanisms: SCRAM-SHA-256\n}\n")
    settings, tls = _listener_settings(cfg, security)
    assert settings.sasl_mechanisms == "SCRAM-SHA-256" and tls is None


def test_connector_tls_and_scram(files):
    cfg, security = _check("router {\n id: R\n}\n" + _profile(files) + "connector {\n host: localhost\n port: 5\n"
                           " sslProfile: tls\n saslMechanisms: SCRAM-SHA-256\n saslUsername: alice\n"
                           " saslPassword: pass:wonderland\n}\n")
    settings, tls = _settings(Router("R"), cfg.connectors[0], server=False, security=security)
    assert tls.server_hostname == "localhost" and tls.context.check_hostname
    assert settings.sasl_client_mechanisms == "SCRAM-SHA-256" and settings.sasl_password == "wonderland"


def test_connector_verify_hostname_no(files):
    cfg, security = _check("router {\n id: R\n}\n" + _profile(files)
                           + "connector {\n port: 5\n sslProfile: tls\n verifyHostname: no\n}\n")
    _, tls = _settings(Router("R"), cfg.connectors[0], server=False, security=security)
    assert not tls.context.check_hostname and tls.context.verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("tail,line,words", [
    ("listener {\n port: 0\n sslProfile: nope\n}\n", 12, "sslProfile 'nope' is not defined"),
    ("connector {\n port: 1\n sslProfile: nope\n}\n", 12, "sslProfile 'nope' is not defined"),
    ("listener {\n port: 0\n requireSsl: yes\n}\n", 12, "requireSsl: yes needs an sslProfile"),
    ("listener {\n port: 0\n authenticatePeer: yes\n}\n", 12, "authenticatePeer: yes leaves no mechanism"),
    ("listener {\n port: 0\n saslMechanisms: PLAIN\n}\n", 12, "without a users file"),
    ("listener {\n port: 0\n saslMechanisms: EXTERNAL\n}\n", 12, "EXTERNAL needs TLS with client certificates"),
    ("connector {\n port: 1\n saslMechanisms: SCRAM-SHA-256\n}\n", 12, "needs saslUsername"),
    ("connector {\n port: 1\n saslUsername: u\n saslMechanisms: GSSAPI\n}\n", 13, "GSSAPI"),
])
def test_refusals_name_file_and_line(files, tail, line, words):
    err = _refused("router {\n id: R\n}\n" + _profile(files) + tail)
    assert (err.path, err.line) == ("sec.conf", line) and words in err.message, str(err)


def test_missing_certificate_file_is_refused_at_the_profile_line(files, tmp_path):
    err = _refused("router {\n id: R\n}\n\nsslProfile {\n name: tls\n certFile: "
                   f"{tmp_path / 'missing.pem'}\n}}\n")
    assert (err.line, "certFile" in err.message, "missing.pem" in err.message) == (7, True, True), str(err)


def test_key_not_matching_certificate_is_refused(files):
    other = trustme.CA().issue_cert("x")
    other.private_key_pem.write_to_path(str(files["dir"] / "other.key"))
    err = _refused(f"router {{\n id: R\n}}\nsslProfile {{\n name: tls\n certFile: {files['cert']}\n"
                   f" privateKeyFile: {files['dir'] / 'other.key'}\n}}\n")
    assert err.line == 7 and "privateKeyFile" in err.message, str(err)


def test_sasl_config_errors_are_refused_at_the_router_line(files):
    (files["dir"] / "bad.conf").write_text("pwcheck_method: saslauthd\n")
    err = _refused(f"router {{\n id: R\n saslConfigDir: {files['dir']}\n saslConfigName: bad\n}}\n")
    assert err.line == 3 and "pwcheck_method" in err.message, str(err)
    err = _refused(f"router {{\n id: R\n saslConfigDir: {files['dir']}\n saslConfigName: absent\n}}\n")
    assert err.line == 3 and "absent.conf" in err.message, str(err)


def test_listener_mechanisms_outside_the_mech_list_are_refused(files):
    err = _refused(f"router {{\n id: R\n saslConfigDir: {files['dir']}\n}}\n"
                   "listener {\n port: 0\n saslMechanisms: SCRAM-SHA-512\n}\n")
    assert err.line == 7 and "not in the mech_list" in err.message, str(err)


def test_conf_secure_example_loads_once_its_certificates_and_users_are_made(tmp_path, monkeypatch):
    """conf/secure/router.conf (not used by `make run`) is valid once the README's steps made the
    certificates and users file; its only anonymous listener is on the loopback interface."""
    import shutil

    from router.config import load_config
    from tests.paths import REPO

    secure = tmp_path / "conf" / "secure"
    shutil.copytree(REPO / "conf" / "secure", secure)
    certs = secure / "certs"
    certs.mkdir()
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(certs / "ca.pem"))
    server = ca.issue_cert("localhost")
    server.cert_chain_pems[0].write_to_path(str(certs / "server.pem"))
    server.private_key_pem.write_to_path(str(certs / "server.key"))
    users = Users()
    users.set_password("alice", "wonderland")
    users.save(str(secure / "users.db"))
    monkeypatch.chdir(tmp_path)   # relative paths are relative to the working directory, as in Dispatch
    cfg = load_config("conf/secure/router.conf")
    security = check_config(cfg)
    from router.policyfiles import check_listener_vhosts, policy_from_config

    policy = policy_from_config(cfg)
    check_listener_vhosts(cfg, policy)
    assert policy.enabled and set(policy.vhosts) == {"$default", "local-admin"}
    apps = policy.vhosts["$default"].groups["apps"]
    assert apps.targets and "$management" not in apps.targets and "*" not in apps.targets
    for listener in cfg.listeners:
        settings, tls = _settings(Router("R"), listener, server=True, security=security)
        if "ANONYMOUS" in settings.sasl_mechanisms.split():
            assert listener["host"] == "127.0.0.1"
        else:
            assert tls.required and settings.authenticate_peer and "alice" in settings.sasl_users


def test_connector_password_from_environment_or_file(files, monkeypatch):
    monkeypatch.setenv("TD_TEST_PW", "from-env")
    (files["dir"] / "pw.txt").write_text("from-file\nignored\n")
    cfg, security = _check("router {\n id: R\n}\nconnector {\n name: e\n port: 5\n saslUsername: u\n"
                           " saslPassword: env:TD_TEST_PW\n}\n"
                           f"connector {{\n name: f\n port: 5\n saslUsername: u\n saslPassword: file:{files['dir'] / 'pw.txt'}\n}}\n")
    passwords = [_settings(Router("R"), c, server=False, security=security)[0].sasl_password for c in cfg.connectors]
    assert passwords == ["from-env", "from-file"]


@pytest.mark.parametrize("value,words", [("env:TD_TEST_UNSET_PW", "TD_TEST_UNSET_PW is not set"),
                                         ("file:/nonexistent/pw", "cannot read /nonexistent/pw")])
def test_connector_password_that_cannot_be_resolved_is_refused_at_its_line(value, words, monkeypatch):
    monkeypatch.delenv("TD_TEST_UNSET_PW", raising=False)
    err = _refused(f"router {{\n id: R\n}}\nconnector {{\n port: 5\n saslUsername: u\n saslPassword: {value}\n}}\n")
    assert err.line == 7 and words in err.message, str(err)
