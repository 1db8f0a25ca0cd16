"""A client engine with ``sasl_username`` logs in with SASL PLAIN; without it, with ANONYMOUS.

proton's built-in SASL server cannot verify PLAIN, so the server side here is hand-written SASL
frames: it offers mechanisms, decodes the client's sasl-init and answers with an outcome.
"""

from __future__ import annotations

import logging
import struct

import proton
import pytest

from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from wire.sasl import configure_sasl, is_loopback

SASL_HEADER = b"AMQP\x03\x01\x00\x00"
SASL_MECHANISMS, SASL_INIT, SASL_OUTCOME = 0x40, 0x41, 0x44
FRAME_SASL = 1


def _frame(descriptor: int, fields) -> bytes:
    """One SASL frame holding the performative ``descriptor`` with list ``fields`` (callables on Data)."""
    d = proton.Data()
    d.put_described()
    d.enter()
    d.put_ulong(descriptor)
    d.put_list()
    d.enter()
    for put in fields:
        put(d)
    d.exit()
    d.exit()
    body = d.encode()
    return struct.pack(">IBBH", 8 + len(body), 2, FRAME_SASL, 0) + body


def _mechanisms(*names: str) -> bytes:
    def put(d):
        d.put_array(False, proton.Data.SYMBOL)
        d.enter()
        for n in names:
            d.put_symbol(n)
        d.exit()
    return _frame(SASL_MECHANISMS, [put])


def _outcome(code: int) -> bytes:
    return _frame(SASL_OUTCOME, [lambda d: d.put_ubyte(code)])


def _decode_init(data: bytes) -> tuple[str, bytes | None]:
    """(mechanism, initial-response) of the first frame in ``data``."""
    size = struct.unpack(">I", data[:4])[0]
    doff = data[4] * 4
    d = proton.Data()
    d.decode(data[doff:size])
    described = d.get_object()
    assert described.descriptor == SASL_INIT
    fields = described.value
    response = fields[1] if len(fields) > 1 else None
    return str(fields[0]), (bytes(response) if response is not None else None)


def _client(**settings) -> EngineConnection:
    return EngineConnection(ConnectionHandler(), ConnectionSettings(**settings), server=False,
                            remote_host="127.0.0.1:5672")


def _handshake(engine: EngineConnection, offered: tuple[str, ...]) -> tuple[str, bytes | None]:
    """Offer ``offered`` to ``engine`` and return what its sasl-init chose."""
    out = engine.take_output()
    assert out.startswith(SASL_HEADER)
    engine.feed(SASL_HEADER + _mechanisms(*offered))
    out = engine.take_output()
    return _decode_init(out)


def test_username_logs_in_with_plain():
    engine = _client(sasl_username="alice", sasl_password="s3cret")
    mech, response = _handshake(engine, ("ANONYMOUS", "PLAIN"))
    assert mech == "PLAIN"
    assert response == b"\x00alice\x00s3cret"
    engine.feed(_outcome(0))
    assert engine.transport.sasl().outcome == proton.SASL.OK


def test_missing_password_sends_an_empty_one():
    engine = _client(sasl_username="bob")
    mech, response = _handshake(engine, ("PLAIN",))
    assert (mech, response) == ("PLAIN", b"\x00bob\x00")


def test_refused_login_is_reported():
    engine = _client(sasl_username="alice", sasl_password="wrong")
    _handshake(engine, ("PLAIN",))
    engine.feed(_outcome(1))  # auth
    assert engine.transport.sasl().outcome == proton.SASL.AUTH


def test_without_username_the_client_stays_anonymous():
    engine = _client()
    mech, _ = _handshake(engine, ("PLAIN", "ANONYMOUS"))
    assert mech == "ANONYMOUS"


def test_password_is_not_in_the_settings_repr():
    assert "s3cret" not in repr(ConnectionSettings(sasl_username="alice", sasl_password="s3cret"))


def test_plain_needs_the_connection():
    t = proton.Transport(proton.Transport.CLIENT)
    with pytest.raises(ValueError):
        configure_sasl(t, ConnectionSettings(sasl_username="alice"), server=False)


@pytest.mark.parametrize("host, expected", [
    ("127.0.0.1:5672", True), ("localhost:5672", True), ("[::1]:5672", True), ("::1", True),
    ("127.0.0.2", True), ("10.0.0.1:5672", False), ("broker.example:5672", False), ("", False),
])
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


# -- choosing between proton's SASL and our layer (wire/saslserver.py) ---------------------------------------

def test_server_mechanisms_with_a_users_file():
    from wire.sasl import SaslConfigError, server_mechanisms

    assert server_mechanisms("PLAIN SCRAM-SHA-256,scram-sha-512", with_users=True) == [
        "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    with pytest.raises(SaslConfigError, match="PLAIN not supported without a users file"):
        server_mechanisms("PLAIN")
    with pytest.raises(SaslConfigError, match="GSSAPI not supported"):
        server_mechanisms("GSSAPI", with_users=True)


def test_sasl_layer_only_when_settings_ask_for_it():
    from wire.sasl import SaslClient, SaslConfigError, sasl_layer
    from wire.saslserver import SaslServer
    from wire.users import Users

    assert sasl_layer(ConnectionSettings(), server=True) is None
    assert sasl_layer(ConnectionSettings(sasl_username="u", sasl_password="p"), server=False) is None
    layer = sasl_layer(ConnectionSettings(sasl_users=Users(), sasl_mechanisms="ANONYMOUS PLAIN",
                                          authenticate_peer=True), server=True)
    assert isinstance(layer, SaslServer) and layer.mechanisms == ["PLAIN"]  # no ANONYMOUS with authenticatePeer
    client = sasl_layer(ConnectionSettings(sasl_username="u", sasl_password="p",
                                           sasl_client_mechanisms="SCRAM-SHA-512 PLAIN"), server=False)
    assert isinstance(client, SaslClient) and client.allowed == ["SCRAM-SHA-512", "PLAIN"]
    with pytest.raises(SaslConfigError, match="need a user name"):
        sasl_layer(ConnectionSettings(sasl_client_mechanisms="SCRAM-SHA-256"), server=False)


def test_external_is_offered_only_with_a_tls_authenticated_name():
    """The hook for TLS client certificates: EXTERNAL appears once external_user is set."""
    from wire.saslserver import SASL_HEADER, SaslServer

    layer = SaslServer(None, ["EXTERNAL", "PLAIN"])
    assert layer.mechanisms == ["PLAIN"]
    layer.external_user = "CN=client"
    assert layer.mechanisms == ["EXTERNAL", "PLAIN"]
    layer.feed(SASL_HEADER)
    assert b"EXTERNAL" in layer.take_output()


# -- the Cyrus-style <saslConfigDir>/<saslConfigName>.conf ---------------------------------------------------

def _conf(tmp_path, text, users=("alice",)):
    from wire.users import Users

    u = Users()
    for name in users:
        u.set_password(name, "pw")
    u.save(str(tmp_path / "users.db"))
    (tmp_path / "qdrouterd.conf").write_text(text)
    return str(tmp_path)


def test_cyrus_conf_names_mechanisms_and_users_file(tmp_path):
    from wire.sasl import SaslConfigFile

    d = _conf(tmp_path, "# Dispatch's example layout\npwcheck_method: auxprop\nauxprop_plugin: sasldb\n"
                        "sasldb_path: users.db\nmech_list: SCRAM-SHA-256 PLAIN\n")
    conf = SaslConfigFile.load(d, "qdrouterd")
    assert conf.mechanisms == ["SCRAM-SHA-256", "PLAIN"]
    assert conf.sasldb_path == str(tmp_path / "users.db")  # relative to the conf file's directory
    assert conf.users.check_plain("alice", "pw")


@pytest.mark.parametrize("text, message", [
    ("mech_list: DIGEST-MD5\nsasldb_path: users.db\n", ":1: mech_list: saslMechanisms DIGEST-MD5 not supported"),
    ("\npwcheck_method: saslauthd\n", ":2: pwcheck_method: 'saslauthd' not supported"),
    ("sql_engine: mysql\n", ":1: unsupported SASL option 'sql_engine'"),
    ("sasldb_path: missing.db\n", ":1: sasldb_path: "),
    ("mech_list: PLAIN\n", "needs users: add sasldb_path"),
])
def test_cyrus_conf_errors_name_file_and_line(tmp_path, text, message):
    from wire.sasl import SaslConfigError, SaslConfigFile

    d = _conf(tmp_path, text)
    with pytest.raises(SaslConfigError) as err:
        SaslConfigFile.load(d, "qdrouterd")
    assert str(err.value).startswith(str(tmp_path / "qdrouterd.conf")) and message in str(err.value)


def test_cyrus_conf_pointing_at_a_berkeley_db_sasldb(tmp_path):
    from wire.sasl import SaslConfigError, SaslConfigFile

    (tmp_path / "qdrouterd.sasldb").write_bytes(b"\0" * 12 + (0x00061561).to_bytes(4, "little") + b"\0" * 64)
    (tmp_path / "qdrouterd.conf").write_text("sasldb_path: qdrouterd.sasldb\nmech_list: PLAIN\n")
    with pytest.raises(SaslConfigError) as err:
        SaslConfigFile.load(str(tmp_path), "qdrouterd")
    assert "qdrouterd.conf:1: sasldb_path: " in str(err.value) and "tdpasswd -f" in str(err.value)


def test_fuzz_finding_cyrus_conf_line_numbers_count_only_real_line_ends(tmp_path):
    """sasl-files: "SaslConfigError names a line past the end" (str.splitlines() broke lines at \f)."""
    from wire.sasl import SaslConfigError, SaslConfigFile

    # The fuzzer's input: one comment line, which was read as 16 (the last one an unknown option).
    (tmp_path / "qdrouterd.conf").write_bytes(b"# trio" + b"\x0c" * 15 + b"-dispa# C\x00\x00\x00\x00")
    conf = SaslConfigFile.load(str(tmp_path), "qdrouterd")
    assert conf.mechanisms is None and conf.users is None
    (tmp_path / "qdrouterd.conf").write_text("# \x0b \u2028 \x1c\nmech_list: PLAIN\n\x1c\nbogus: x\n")
    with pytest.raises(SaslConfigError) as err:
        SaslConfigFile.load(str(tmp_path), "qdrouterd")
    assert "qdrouterd.conf:4: unsupported SASL option 'bogus'" in str(err.value), err.value


def test_fuzz_finding_sasldb_path_with_a_nul_is_a_config_error(tmp_path):
    """sasl-files: ``sasldb_path: sa<NUL>2`` made open() raise ValueError out of SaslConfigFile.load."""
    from wire.sasl import SaslConfigError, SaslConfigFile

    (tmp_path / "qdrouterd.conf").write_bytes(b"mech_list: PLAIN\nsasldb_path: sa\x00\x00\x00\x002\n")
    with pytest.raises(SaslConfigError, match="qdrouterd.conf:2: sasldb_path: .*NUL character"):
        SaslConfigFile.load(str(tmp_path), "qdrouterd")


def test_missing_cyrus_conf(tmp_path):
    from wire.sasl import SaslConfigError, SaslConfigFile

    with pytest.raises(SaslConfigError, match="cannot read the SASL configuration"):
        SaslConfigFile.load(str(tmp_path), "nope")


def test_external_needs_verified_client_certificates():
    from wire.sasl import SaslConfigError, sasl_layer, server_mechanisms
    from wire.saslserver import SaslServer

    with pytest.raises(SaslConfigError, match="EXTERNAL needs TLS with client certificates verified"):
        server_mechanisms("EXTERNAL PLAIN", with_users=True)
    assert server_mechanisms("EXTERNAL PLAIN", with_users=True, with_external=True) == ["EXTERNAL", "PLAIN"]
    # An EXTERNAL-only listener needs no users file, but does need our layer (proton's cannot do it here).
    layer = sasl_layer(ConnectionSettings(sasl_mechanisms="EXTERNAL", authenticate_peer=True), server=True)
    assert isinstance(layer, SaslServer) and layer.mechanisms == []  # until TLS names the peer
    layer.external_user = "CN=peer"
    assert layer.mechanisms == ["EXTERNAL"]


@pytest.mark.parametrize("settings_kw, host, warned", [
    ({"sasl_username": "alice"}, "broker.example:5672", True),                      # proton's PLAIN
    ({"sasl_username": "alice", "sasl_client_mechanisms": "SCRAM-SHA-512 PLAIN"}, "10.0.0.7:5672", True),
    ({"sasl_username": "alice", "sasl_client_mechanisms": "SCRAM-SHA-256"}, "10.0.0.7:5672", False),
    ({"sasl_username": "alice"}, "127.0.0.1:5672", False),                           # never leaves the host
    ({}, "broker.example:5672", False),                                              # anonymous: no password
])
def test_plaintext_password_warning(caplog, settings_kw, host, warned):
    from wire.sasl import warn_plaintext_password

    with caplog.at_level(logging.WARNING, logger="wire.sasl"):
        warn_plaintext_password(ConnectionSettings(**settings_kw), host)
    assert bool([r for r in caplog.records if "unencrypted" in r.getMessage()]) is warned
