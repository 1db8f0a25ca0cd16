"""tools/security.py: the tools' --ssl-*/--sasl-* options, where passwords come from, and what is refused."""

from __future__ import annotations

import argparse

import pytest
from click.testing import CliRunner

from tools import bench, tdmanage, tdstat
from tools.security import SASL_PASSWORD_ENV, SSL_PASSWORD_ENV, Security, SecurityOptionError, add_security_options

SECRET = "pa55-w0rd"


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("-b", "--bus", default="127.0.0.1:5672")
    add_security_options(p)
    return p.parse_args(argv)


def resolve(*argv: str, environ=None) -> Security:
    opts = parse(*argv)
    return Security.from_options(opts, url=opts.bus, environ=environ or {})


@pytest.fixture
def pw_file(tmp_path):
    path = tmp_path / "pw"
    path.write_text(SECRET + "\nsecond line is ignored\n")
    return str(path)


@pytest.fixture
def readable(tmp_path):
    path = tmp_path / "ca.pem"
    path.write_text("not parsed here")
    return str(path)


# -- password sources -----------------------------------------------------------------------------------

def test_password_from_file_first_line_without_line_ending(pw_file):
    sec = resolve("--sasl-username", "admin", "--sasl-password-file", pw_file)
    assert sec.username == "admin" and sec.password == SECRET


def test_password_from_environment():
    sec = resolve("--sasl-username", "admin", environ={SASL_PASSWORD_ENV: SECRET})
    assert sec.password == SECRET


def test_file_wins_over_environment(pw_file):
    sec = resolve("--sasl-username", "admin", "--sasl-password-file", pw_file, environ={SASL_PASSWORD_ENV: "env"})
    assert sec.password == SECRET


def test_user_without_a_password_source_is_an_error_naming_both_ways():
    with pytest.raises(SecurityOptionError) as e:
        resolve("--sasl-username", "admin")
    assert "--sasl-password-file" in str(e.value) and SASL_PASSWORD_ENV in str(e.value)


def test_unreadable_password_file_names_the_file(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(SecurityOptionError) as e:
        resolve("--sasl-username", "admin", "--sasl-password-file", missing)
    assert missing in str(e.value)


def test_key_password_from_file_or_environment(pw_file):
    assert resolve("--ssl-password-file", pw_file).key_password == SECRET
    assert resolve("--ssl-trustfile", pw_file, environ={SSL_PASSWORD_ENV: "k"}).key_password == "k"


@pytest.mark.parametrize("option", ["--sasl-password", "--ssl-password"])
def test_a_password_on_the_command_line_is_refused_without_echoing_it(option, capsys):
    with pytest.raises(SystemExit) as e:
        parse(option, SECRET)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "refused" in err and f"{option}-file" in err and SECRET not in err


def test_passwords_are_not_in_repr(pw_file):
    sec = resolve("--sasl-username", "admin", "--sasl-password-file", pw_file, "--ssl-password-file", pw_file)
    assert SECRET not in repr(sec)


# -- consistency -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (("--ssl-certificate", "x.pem"), "go together"),
    (("--sasl-password-file", "x"), "needs --sasl-username"),
    (("--sasl-mechanisms", "PLAIN"), "needs --sasl-username"),
    (("--sasl-mechanisms", "EXTERNAL"), "client certificate"),
    (("--ssl-trustfile", "/nonexistent/ca.pem"), "cannot read"),
])
def test_inconsistent_options_are_refused(argv, message):
    with pytest.raises(SecurityOptionError) as e:
        resolve(*argv)
    assert message in str(e.value)


def test_tls_from_amqps_url_or_any_ssl_option(readable):
    assert resolve("-b", "amqps://h:1").tls
    assert not resolve("-b", "h:1").tls
    assert resolve("-b", "h:1", "--ssl-trustfile", readable).tls
    assert resolve("--ssl-disable-peer-name-verify").tls


def test_proton_urls(readable):
    assert resolve("-b", "h").proton_url("h") == "amqp://h:5672"
    sec = resolve("-b", "h", "--ssl-trustfile", readable)
    assert sec.proton_url("h") == "amqps://h:5671"
    assert sec.proton_url("h:7") == "amqps://h:7"
    assert sec.proton_url("amqps://h:7") == "amqps://h:7"
    with pytest.raises(SecurityOptionError):
        sec.proton_url("amqp://h:7")  # TLS asked for, plaintext URL given


def test_scram_goes_to_the_engine_client_and_everything_else_to_proton():
    def sec(mechs):
        return resolve("--sasl-mechanisms", mechs, "--sasl-username", "a", environ={SASL_PASSWORD_ENV: SECRET})
    assert sec("SCRAM-SHA-256 PLAIN").wants_engine_client
    assert sec("scram-sha-512").wants_engine_client
    assert not sec("PLAIN").wants_engine_client
    assert not resolve("--sasl-username", "a", environ={SASL_PASSWORD_ENV: SECRET}).wants_engine_client
    assert sec("SCRAM-SHA-256 PLAIN").settings_kwargs()["sasl_client_mechanisms"] == "SCRAM-SHA-256 PLAIN"


def test_mechanisms_no_client_can_do_are_refused_with_a_clear_message():
    sec = resolve("--sasl-mechanisms", "DIGEST-MD5", "--sasl-username", "a", environ={SASL_PASSWORD_ENV: SECRET})
    with pytest.raises(SecurityOptionError) as e:
        sec.proton_connect_kwargs()
    assert "DIGEST-MD5: not supported" in str(e.value) and "SCRAM-SHA-256" in str(e.value)
    assert SECRET not in str(e.value)


def test_scram_cannot_be_mixed_with_anonymous():
    sec = resolve("--sasl-mechanisms", "SCRAM-SHA-256 ANONYMOUS", "--sasl-username", "a",
                  environ={SASL_PASSWORD_ENV: SECRET})
    assert sec.wants_engine_client
    with pytest.raises(SecurityOptionError) as e:
        sec.settings_kwargs()
    assert "ANONYMOUS: not possible here" in str(e.value) and SECRET not in str(e.value)


def test_the_engine_clients_tls_context_verifies_as_proton_does(readable, tmp_path):
    import ssl

    import trustme
    ca = tmp_path / "real-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    checked = resolve("--ssl-trustfile", str(ca)).client_ssl_context()
    assert checked.verify_mode == ssl.CERT_REQUIRED and checked.check_hostname
    unchecked = resolve("--ssl-trustfile", str(ca), "--ssl-disable-peer-name-verify").client_ssl_context()
    assert unchecked.verify_mode == ssl.CERT_REQUIRED and not unchecked.check_hostname
    assert resolve().client_ssl_context() is None  # no TLS asked for
    with pytest.raises(SecurityOptionError):
        resolve("--ssl-trustfile", readable).client_ssl_context()  # not PEM: said at once


def test_proton_kwargs_plain_by_default_with_a_user():
    kw = resolve("--sasl-username", "a", environ={SASL_PASSWORD_ENV: SECRET}).proton_connect_kwargs()
    assert kw == {"allowed_mechs": "PLAIN", "user": "a", "password": SECRET}
    assert resolve().proton_connect_kwargs() == {}


def test_wire_settings_default_to_scram_then_plain():
    kw = resolve("--sasl-username", "a", environ={SASL_PASSWORD_ENV: SECRET}).settings_kwargs()
    assert kw == {"sasl_username": "a", "sasl_password": SECRET,
                  "sasl_client_mechanisms": "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"}
    with pytest.raises(SecurityOptionError):
        resolve("--sasl-mechanisms", "EXTERNAL", "--sasl-username", "a", "--ssl-certificate", "c",
                "--ssl-key", "k").settings_kwargs()


# -- the tools carry the options ------------------------------------------------------------------------------

@pytest.mark.parametrize("make_parser", [tdstat.parser, tdmanage.parser])
def test_tdstat_and_tdmanage_have_qdstats_option_names(make_parser):
    text = make_parser().format_help()
    for name in ("--ssl-certificate", "--ssl-key", "--ssl-trustfile", "--ssl-password-file",
                 "--ssl-disable-peer-name-verify", "--sasl-mechanisms", "--sasl-username", "--sasl-password-file"):
        assert name in text


def test_tdstat_exits_2_on_mechanisms_it_cannot_use(capsys, monkeypatch):
    monkeypatch.setenv(SASL_PASSWORD_ENV, SECRET)
    for mechs, expected in (("DIGEST-MD5", "DIGEST-MD5: not supported"),
                            ("SCRAM-SHA-512 ANONYMOUS", "ANONYMOUS: not possible here")):
        with pytest.raises(SystemExit) as e:
            tdstat.main(["-b", "amqps://h:1", "--ssl-disable-peer-name-verify", "--sasl-mechanisms", mechs,
                         "--sasl-username", "a"])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert expected in err and SECRET not in err, err


def test_tdbench_refuses_a_password_on_the_command_line():
    res = CliRunner().invoke(bench.main, ["--router", "127.0.0.1:1", "--sasl-password", SECRET])
    assert res.exit_code == 2 and "refused" in res.output and "--sasl-password-file" in res.output
    assert SECRET not in res.output


def test_tdbench_security_needs_a_router_that_serves_it():
    res = CliRunner().invoke(bench.main, ["--sasl-username", "a"], env={SASL_PASSWORD_ENV: SECRET})
    assert res.exit_code == 2 and "need --router or --router-config" in res.output


def test_tdbench_help_shows_the_options_and_no_default_password():
    res = CliRunner().invoke(bench.main, ["--help"], env={SASL_PASSWORD_ENV: SECRET})
    assert "--sasl-password-file" in res.output and "--ssl-trustfile" in res.output and SECRET not in res.output
