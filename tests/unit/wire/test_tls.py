"""wire.tls (sslProfile -> SSL contexts) and TLS listeners/connectors in wire.driver, over loopback TCP.

Certificates are made at test time by trustme (no private key is committed): a CA, a server certificate for
127.0.0.1 and localhost, client certificates, and expired ones (issued with not_after in the past).
"""

from __future__ import annotations

import datetime
import functools
import itertools
import ssl
from pathlib import Path

import pytest
import trio
import trustme
from cryptography.hazmat.primitives import serialization
from proton import Endpoint

from router.core import Router
from wire.connection import ConnectionSettings, EngineConnection
from wire.driver import Backoff, TlsHandshakeError, open_stream, run_connector, serve_listener
from wire.amqptypes import Symbol
from wire.saslserver import (OUTCOME_OK, SASL_HEADER, SASL_INIT, SASL_MECHANISMS, SASL_OUTCOME, FrameReader,
                             encode_frame)
from wire.tls import ClientTls, ServerTls, TlsConfigError, TlsProfile, artemis_tls, subject_string
from wire.users import Users
from tests.unit.enginepair import ACCEPTED, ConsumerHandler, Peer, outcome, settle
from tests.unit.wire.fixtures import TcpPeer

HOST = "127.0.0.1"
PAST = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
LONG_AGO = datetime.datetime(2019, 1, 1, tzinfo=datetime.timezone.utc)


class Pki:
    """A trustme CA and certificates written as PEM files in a temporary folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ca = trustme.CA(organization_name="trio-dispatch tests")
        self.other_ca = trustme.CA(organization_name="someone else")
        self.ca_file = self._write("ca.pem", self.ca.cert_pem.bytes())
        self.other_ca_file = self._write("other-ca.pem", self.other_ca.cert_pem.bytes())

    def _write(self, name: str, data: bytes) -> str:
        path = self.folder / name
        path.write_bytes(data)
        return str(path)

    def leaf(self, name: str, *identities: str, ca: trustme.CA | None = None, **kw) -> TlsProfile:
        """A profile presenting a new certificate for ``identities`` (signed by ``ca``), trusting our CA."""
        cert = (ca or self.ca).issue_cert(*identities, **kw)
        return TlsProfile(name=name, cert_file=self._write(f"{name}-cert.pem", cert.cert_chain_pems[0].bytes()),
                          private_key_file=self._write(f"{name}-key.pem", cert.private_key_pem.bytes()),
                          ca_cert_file=self.ca_file)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server_profile(pki) -> TlsProfile:
    return pki.leaf("server", HOST, "localhost", common_name="router-a")


def client_tls(pki: Pki, *, ca_file: str | None = None, verify_hostname: bool = True,
               profile: TlsProfile | None = None, server_hostname: str | None = None) -> ClientTls:
    base = profile or TlsProfile(name="client")
    prof = TlsProfile(name=base.name, cert_file=base.cert_file, private_key_file=base.private_key_file,
                      ca_cert_file=ca_file or pki.ca_file)
    return ClientTls(prof.client_context(verify_hostname=verify_hostname), server_hostname)


# -- TlsProfile: contexts and configuration errors ------------------------------------------------------------

def test_from_attributes_uses_dispatch_names(pki, server_profile):
    prof = TlsProfile.from_attributes({"name": "p", "certFile": server_profile.cert_file,
                                       "privateKeyFile": server_profile.private_key_file,
                                       "caCertFile": pki.ca_file, "protocols": "TLSv1.2 TLSv1.3",
                                       "ciphers": "ECDHE+AESGCM"})
    ctx = prof.server_context(verify_client=True)
    assert ctx.verify_mode == ssl.CERT_REQUIRED
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.maximum_version == ssl.TLSVersion.TLSv1_3


def test_unknown_attribute_is_refused():
    with pytest.raises(TlsConfigError, match="keyStorePassword: not an sslProfile attribute"):
        TlsProfile.from_attributes({"keyStorePassword": "x"})


def test_default_minimum_is_tls_1_2(server_profile):
    assert server_profile.server_context().minimum_version == ssl.TLSVersion.TLSv1_2
    assert TlsProfile().client_context().minimum_version == ssl.TLSVersion.TLSv1_2


def test_client_context_verifies_hostname_unless_told_not_to(pki):
    prof = TlsProfile(ca_cert_file=pki.ca_file)
    assert prof.client_context().check_hostname is True
    assert prof.client_context(verify_hostname=False).check_hostname is False
    assert prof.client_context(verify_hostname=False).verify_mode == ssl.CERT_REQUIRED


@pytest.mark.parametrize("attribute", ["certFile", "privateKeyFile", "caCertFile"])
def test_missing_file_names_attribute_and_path(server_profile, tmp_path, attribute):
    missing = str(tmp_path / "nowhere.pem")
    field = {"certFile": "cert_file", "privateKeyFile": "private_key_file", "caCertFile": "ca_cert_file"}[attribute]
    prof = TlsProfile(**{**server_profile.__dict__, field: missing})
    with pytest.raises(TlsConfigError) as err:
        prof.server_context()
    assert err.value.attribute == attribute
    assert str(err.value) == f"{attribute}: {missing}: No such file or directory"


def test_unreadable_file_names_attribute(server_profile, tmp_path):
    folder = tmp_path / "dir.pem"
    folder.mkdir()
    prof = TlsProfile(**{**server_profile.__dict__, "cert_file": str(folder)})
    with pytest.raises(TlsConfigError, match=f"certFile: {folder}: Is a directory"):
        prof.server_context()


def test_listener_needs_a_certificate_and_client_verification_a_ca(server_profile):
    with pytest.raises(TlsConfigError, match="certFile: sslProfile 'x' has no certFile"):
        TlsProfile(name="x").server_context()
    no_ca = TlsProfile(**{**server_profile.__dict__, "ca_cert_file": None})
    no_ca.server_context()  # fine without verifying clients
    with pytest.raises(TlsConfigError, match="caCertFile: .* needed to verify client certificates"):
        no_ca.server_context(verify_client=True)


def test_garbage_ca_file(tmp_path):
    bad = tmp_path / "ca.pem"
    bad.write_text("not a certificate\n")
    with pytest.raises(TlsConfigError, match=f"caCertFile: {bad}: not PEM certificates"):
        TlsProfile(ca_cert_file=str(bad)).client_context()


def test_key_not_matching_certificate(pki, server_profile):
    other = pki.leaf("other", "other.example")
    prof = TlsProfile(**{**server_profile.__dict__, "private_key_file": other.private_key_file})
    with pytest.raises(TlsConfigError, match="privateKeyFile: .*other-key.pem: the key does not match certFile"):
        prof.server_context()


@pytest.fixture(scope="module")
def encrypted_profile(pki, server_profile) -> TlsProfile:
    """The server certificate with its key encrypted under the password 'sekrit'."""
    key = serialization.load_pem_private_key(Path(server_profile.private_key_file).read_bytes(), password=None)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.BestAvailableEncryption(b"sekrit"))
    return TlsProfile(**{**server_profile.__dict__, "private_key_file": pki._write("enc-key.pem", pem)})


@pytest.mark.parametrize("password", [None, "wrong", "env:TD_TEST_WRONG_PASSWORD", "literal:nope"])
def test_wrong_key_password_is_a_clear_error(encrypted_profile, monkeypatch, password):
    monkeypatch.setenv("TD_TEST_WRONG_PASSWORD", "nope")
    prof = TlsProfile(**{**encrypted_profile.__dict__, "password": password})
    with pytest.raises(TlsConfigError) as err:
        prof.server_context()
    assert err.value.attribute == "password"
    assert "enc-key.pem: " in str(err.value)
    assert ("wrong password for the private key" if password else "encrypted and the profile has no password") in str(err.value)


def test_key_password_forms(encrypted_profile, tmp_path, monkeypatch):
    monkeypatch.setenv("TD_TEST_KEY_PASSWORD", "sekrit")
    pw_file = tmp_path / "pw"
    pw_file.write_text("sekrit\n")
    for attrs in ({"password": "sekrit"}, {"password": "literal:sekrit"}, {"password": "pass:sekrit"},
                  {"password": "env:TD_TEST_KEY_PASSWORD"}, {"password": f"file:{pw_file}"},
                  {"password_file": str(pw_file)}):
        TlsProfile(**{**encrypted_profile.__dict__, **attrs}).server_context()


def test_password_sources_that_fail(encrypted_profile, tmp_path):
    with pytest.raises(TlsConfigError, match="password: env:TD_NO_SUCH_VARIABLE: no such environment variable"):
        TlsProfile(**{**encrypted_profile.__dict__, "password": "env:TD_NO_SUCH_VARIABLE"}).server_context()
    missing = tmp_path / "no-pw"
    with pytest.raises(TlsConfigError, match=f"passwordFile: {missing}: No such file or directory"):
        TlsProfile(**{**encrypted_profile.__dict__, "password_file": str(missing)}).server_context()


def test_bad_protocols_and_ciphers(server_profile):
    with pytest.raises(TlsConfigError, match="protocols: 'TLSv1.2 SSLv3': unknown protocol SSLv3"):
        TlsProfile(**{**server_profile.__dict__, "protocols": "TLSv1.2 SSLv3"}).server_context()
    with pytest.raises(TlsConfigError, match="ciphers: 'NO-SUCH-CIPHER': OpenSSL accepts none"):
        TlsProfile(**{**server_profile.__dict__, "ciphers": "NO-SUCH-CIPHER"}).server_context()


def test_subject_string_is_rfc4514():
    cert = {"subject": ((("countryName", "GB"),), (("organizationName", "Acme, Inc."),),
                        (("commonName", "router-a"),))}
    assert subject_string(cert) == "CN=router-a,O=Acme\\, Inc.,C=GB"
    assert subject_string({}) is None


# -- Artemis URI parameters (sslEnabled, keyStorePath as PEM, trustStorePath, needClientAuth, verifyHost) -------

@pytest.fixture(scope="module")
def pem_key_store(pki) -> str:
    """Artemis's keyStorePath as PEM: the certificate and its private key in one file."""
    cert = pki.ca.issue_cert(HOST, "localhost", common_name="broker-a")
    return pki._write("keystore.pem", cert.private_key_and_cert_chain_pem.bytes())


def test_artemis_without_ssl_enabled():
    assert artemis_tls({}) is None
    assert artemis_tls({"sslEnabled": "false"}) is None
    with pytest.raises(TlsConfigError, match="keyStorePath: given without sslEnabled=true"):
        artemis_tls({"keyStorePath": "/x.pem"})


@pytest.mark.parametrize("params,message", [
    ({"sslEnabled": "true", "keyStorePassword": "pw", "trustStorePath": "/ca.pem"},
     "keyStorePassword: given without keyStorePath"),
    ({"sslEnabled": "true", "keyStoreType": "JKS"}, "keyStoreType: 'JKS': only PEM stores are supported"),
    ({"sslEnabled": "true", "trustStoreType": "PKCS12"}, "trustStoreType: 'PKCS12': only PEM"),
    ({"sslEnabled": "true", "trustStorePassword": "x"}, "trustStorePassword: not supported by tdbroker"),
    ({"sslEnabled": "true", "enabledCipherSuites": "TLS_AES_128_GCM_SHA256"}, "enabledCipherSuites: not supported"),
    ({"sslEnabled": "maybe"}, "sslEnabled: 'maybe' is not true or false"),
    ({"sslEnabled": "true", "needClientAuth": "sure"}, "needClientAuth: 'sure' is not true or false"),
])
def test_artemis_parameters_refused(params, message):
    with pytest.raises(TlsConfigError, match=message):
        artemis_tls(params)


def test_artemis_errors_name_artemis_parameters(tmp_path, pki):
    missing = tmp_path / "missing.pem"
    acceptor = artemis_tls({"sslEnabled": "true", "keyStorePath": str(missing)})
    with pytest.raises(TlsConfigError, match=f"^keyStorePath: {missing}: No such file or directory$"):
        acceptor.server_tls()
    with pytest.raises(TlsConfigError, match="^keyStorePath: the URI has no keyStorePath"):
        artemis_tls({"sslEnabled": "true"}).server_tls()
    with pytest.raises(TlsConfigError, match=f"^trustStorePath: {missing}:"):
        artemis_tls({"sslEnabled": "true", "trustStorePath": str(missing)}).client_tls()
    with pytest.raises(TlsConfigError, match="^enabledProtocols: 'TLSv1.2 SSLv3': unknown protocol SSLv3"):
        artemis_tls({"sslEnabled": "true", "enabledProtocols": "TLSv1.2,SSLv3"}).client_tls()


async def test_artemis_acceptor_with_pem_key_store_and_client_auth(pki, pem_key_store):
    client = pki.leaf("artemis-client", "client.example", common_name="client-1")
    acceptor = artemis_tls({"sslEnabled": "true", "keyStorePath": pem_key_store, "trustStorePath": pki.ca_file,
                            "needClientAuth": "true", "enabledProtocols": "TLSv1.2,TLSv1.3"})
    assert acceptor.need_client_auth and acceptor.server_tls().required
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(nursery, acceptor.server_tls())
        # keyStorePath for a client: certificate and key in one file
        both = pki._write("client-both.pem", Path(client.cert_file).read_bytes() +
                          Path(client.private_key_file).read_bytes())
        connection = artemis_tls({"sslEnabled": "true", "trustStorePath": pki.ca_file, "keyStorePath": both})
        assert connection.verify_host
        tls = connection.client_tls()
        await exchange_one(nursery, await open_stream(HOST, port, tls))
        assert engines[0].tls_peer_subject.startswith("CN=client-1,")
        # without a client certificate: refused
        try:
            result = await open_stream(HOST, port, artemis_tls({"sslEnabled": "true",
                                                               "trustStorePath": pki.ca_file}).client_tls())
        except TlsHandshakeError as exc:
            result = exc
        await refused_at_tls(result)
        assert len(engines) == 1
        nursery.cancel_scope.cancel()


# -- TLS listeners and connectors (wire.driver) -----------------------------------------------------------------

async def start_tls_router(nursery, tls: ServerTls, *, settings_kw: dict | None = None,
                           sasl_configured: list[str] | None = None, **listen_kw):
    """A router behind a TLS listener on 127.0.0.1; returns the router, the port and the engines it made.
    ``sasl_configured``: the mechanisms the server SASL layer offers (set on the layer directly)."""
    router = Router("RT")
    settings = router.connection_settings(**(settings_kw or {}))
    engines: list[EngineConnection] = []

    def make_engine(remote):
        engine = router.new_engine(settings, server=True, remote_host=remote)
        if sasl_configured is not None:
            engine.sasl.configured = sasl_configured
        engines.append(engine)
        return engine

    listeners = await nursery.start(functools.partial(serve_listener, HOST, 0, make_engine, tls=tls, **listen_kw))
    return router, listeners[0].socket.getsockname()[1], engines


async def open_peer(nursery, stream, peer: Peer | None = None) -> TcpPeer:
    tp = TcpPeer(stream, peer)
    nursery.start_soon(tp.reader)
    await tp.until(lambda: tp.peer.connection.state & (Endpoint.REMOTE_ACTIVE | Endpoint.REMOTE_CLOSED))
    return tp


_addresses = itertools.count(1)


async def exchange_one(nursery, stream) -> None:
    """Open a consumer and a producer on one connection and pass one message through the router (on an
    address of its own: an earlier exchange's consumer stays attached)."""
    tp = await open_peer(nursery, stream)
    assert tp.peer.connection.state & Endpoint.REMOTE_ACTIVE
    address = f"q{next(_addresses)}"
    rcv = tp.peer.receiver(address, credit=10)
    snd = tp.peer.sender(address)
    await tp.until(lambda: snd.credit > 0 and rcv.state & Endpoint.REMOTE_ACTIVE)
    d = tp.peer.send(snd, body="over tls")
    await tp.until(lambda: len(tp.peer.received(rcv)) == 1)
    assert tp.peer.bodies(rcv) == ["over tls"]
    settle(tp.peer.received(rcv)[0], ACCEPTED)
    await tp.until(lambda: d.settled)
    assert outcome(d)["state"] == "accepted"


async def refused_at_tls(stream_or_error) -> None:
    """The server ended the connection during or right after the handshake: nothing AMQP came back."""
    if isinstance(stream_or_error, Exception):
        return
    stream = stream_or_error
    with trio.fail_after(10):
        try:
            await stream.send_all(b"AMQP\x00\x01\x00\x00")
            data = await stream.receive_some(1024)
        except trio.BrokenResourceError:
            return
    assert data == b""


async def test_tls_listener_exchanges_a_message_and_reports_tls(pki, server_profile):
    async with trio.open_nursery() as nursery:
        router, port, engines = await start_tls_router(nursery, ServerTls(server_profile.server_context()))
        stream = await open_stream(HOST, port, client_tls(pki))
        assert stream.version() in ("TLSv1.2", "TLSv1.3")
        await exchange_one(nursery, stream)
        assert len(engines) == 1
        assert engines[0].tls.protocol == stream.version()
        assert engines[0].tls.cipher and engines[0].tls.bits >= 128
        assert engines[0].tls_peer_subject is None  # no client certificate
        nursery.cancel_scope.cancel()


async def test_client_refuses_server_signed_by_another_ca(pki, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(nursery, ServerTls(server_profile.server_context()))
        with pytest.raises(TlsHandshakeError, match="certificate verify failed: self-signed certificate in certificate chain"):
            await open_stream(HOST, port, client_tls(pki, ca_file=pki.other_ca_file))
        assert engines == []
        nursery.cancel_scope.cancel()


async def test_hostname_mismatch_fails_unless_verify_hostname_is_off(pki):
    elsewhere = pki.leaf("elsewhere", "broker.example.org")
    async with trio.open_nursery() as nursery:
        _router, port, _engines = await start_tls_router(nursery, ServerTls(elsewhere.server_context()))
        with pytest.raises(TlsHandshakeError, match="(?i)hostname mismatch|IP address mismatch"):
            await open_stream(HOST, port, client_tls(pki))
        # the name the certificate carries passes; so does any name when verifyHostname is off
        await exchange_one(nursery, await open_stream(HOST, port, client_tls(pki, server_hostname="broker.example.org")))
        await exchange_one(nursery, await open_stream(HOST, port, client_tls(pki, verify_hostname=False)))
        nursery.cancel_scope.cancel()


async def test_client_certificate_required(pki, server_profile):
    client = pki.leaf("client", "router-b.example", common_name="router-b")
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(
            nursery, ServerTls(server_profile.server_context(verify_client=True)))
        # no certificate: TLS 1.3 finishes the client's handshake before the server checks, so the refusal
        # may come as the handshake's failure or as the end of the stream
        try:
            result = await open_stream(HOST, port, client_tls(pki))
        except TlsHandshakeError as exc:
            result = exc
        await refused_at_tls(result)
        # a certificate from an untrusted CA: refused too
        stranger = pki.leaf("stranger", "router-c.example", ca=pki.other_ca, common_name="router-c")
        try:
            result = await open_stream(HOST, port, client_tls(pki, profile=stranger))
        except TlsHandshakeError as exc:
            result = exc
        await refused_at_tls(result)
        assert engines == []
        # with our CA's certificate: in, and the application sees who it is (for SASL EXTERNAL)
        await exchange_one(nursery, await open_stream(HOST, port, client_tls(pki, profile=client)))
        assert len(engines) == 1
        subject = engines[0].tls_peer_subject
        assert subject.startswith("CN=router-b,")
        assert ",O=" in subject
        assert engines[0].tls.peer_certificate
        nursery.cancel_scope.cancel()


async def sasl_exchange(stream, mechanism: str) -> dict:
    """Send the SASL header and a sasl-init for ``mechanism``; the server's frames by descriptor code."""
    await stream.send_all(SASL_HEADER + encode_frame(SASL_INIT, [Symbol(mechanism), b""]))
    reader, got, header = FrameReader(), {}, b""
    with trio.fail_after(10):
        while SASL_OUTCOME not in got:
            data = await stream.receive_some(4096)
            assert data, f"connection closed; frames so far {got}"
            if len(header) < 8:
                need = 8 - len(header)
                header, data = header + data[:need], data[need:]
            reader.feed(data)
            while (frame := reader.next()) is not None:
                got[frame[0]] = frame[1]
    assert header == SASL_HEADER
    return got


async def test_sasl_external_logs_in_as_the_client_certificate(pki, server_profile):
    client = pki.leaf("external-client", "router-b.example", common_name="router-b")
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(
            nursery, ServerTls(server_profile.server_context(verify_client=True)),
            settings_kw={"sasl_users": Users(), "authenticate_peer": True}, sasl_configured=["EXTERNAL", "PLAIN"])
        stream = await open_stream(HOST, port, client_tls(pki, profile=client))
        got = await sasl_exchange(stream, "EXTERNAL")
        assert [str(m) for m in got[SASL_MECHANISMS][0]] == ["EXTERNAL", "PLAIN"]
        assert got[SASL_OUTCOME][0] == OUTCOME_OK
        assert engines[0].user == engines[0].tls_peer_subject
        assert engines[0].user.startswith("CN=router-b,")
        nursery.cancel_scope.cancel()


async def test_sasl_external_not_offered_without_a_verified_certificate(pki, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(
            nursery, ServerTls(server_profile.server_context()),
            settings_kw={"sasl_users": Users(), "authenticate_peer": True}, sasl_configured=["EXTERNAL", "PLAIN"])
        stream = await open_stream(HOST, port, client_tls(pki))
        got = await sasl_exchange(stream, "EXTERNAL")
        mechs = got[SASL_MECHANISMS][0]
        assert [str(m) for m in (mechs if isinstance(mechs, list) else [mechs])] == ["PLAIN"]
        assert got[SASL_OUTCOME][0] != OUTCOME_OK
        assert engines[0].user is None
        nursery.cancel_scope.cancel()


async def test_expired_server_certificate_is_refused(pki):
    expired = pki.leaf("expired-server", HOST, not_before=LONG_AGO, not_after=PAST)
    async with trio.open_nursery() as nursery:
        _router, port, _engines = await start_tls_router(nursery, ServerTls(expired.server_context()))
        with pytest.raises(TlsHandshakeError, match="certificate has expired"):
            await open_stream(HOST, port, client_tls(pki))
        nursery.cancel_scope.cancel()


async def test_expired_client_certificate_is_refused(pki, server_profile):
    expired = pki.leaf("expired-client", "router-b.example", not_before=LONG_AGO, not_after=PAST)
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(
            nursery, ServerTls(server_profile.server_context(verify_client=True)))
        try:
            result = await open_stream(HOST, port, client_tls(pki, profile=expired))
        except TlsHandshakeError as exc:
            result = exc
        await refused_at_tls(result)
        assert engines == []
        nursery.cancel_scope.cancel()


async def test_plaintext_to_required_tls_listener_is_refused(pki, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(nursery, ServerTls(server_profile.server_context()))
        for sasl in (True, False):
            tp = await open_peer(nursery, await trio.open_tcp_stream(HOST, port), Peer(sasl=sasl))
            await tp.until(lambda: tp.peer.connection.state & Endpoint.REMOTE_CLOSED)
            cond = tp.peer.connection.remote_condition
            assert cond.name == "amqp:unauthorized-access"
            assert "requires TLS" in cond.description
            with trio.fail_after(10):
                await tp.eof.wait()
        # and nothing of it reached the application: every link refused with the connection
        assert all(e.tls is None for e in engines)
        nursery.cancel_scope.cancel()


async def test_optional_tls_listener_accepts_both(pki, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(
            nursery, ServerTls(server_profile.server_context(), required=False))
        await exchange_one(nursery, await trio.open_tcp_stream(HOST, port))
        await exchange_one(nursery, await open_stream(HOST, port, client_tls(pki)))
        assert [e.tls is not None for e in engines] == [False, True]
        nursery.cancel_scope.cancel()


async def test_silent_client_is_disconnected_at_the_handshake_timeout(autojump_clock, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(
            nursery, ServerTls(server_profile.server_context()), handshake_timeout=5)
        stream = await trio.open_tcp_stream(HOST, port)
        t0 = trio.current_time()
        with trio.fail_after(60):
            assert await stream.receive_some(10) == b""
        assert 5 <= trio.current_time() - t0 < 6
        assert engines == []
        nursery.cancel_scope.cancel()


async def test_connector_over_tls_and_wrong_ca_is_a_failed_attempt(pki, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(nursery, ServerTls(server_profile.server_context()))
        handler = ConsumerHandler("q")
        made: list[EngineConnection] = []

        def make_engine(remote):
            made.append(EngineConnection(handler, ConnectionSettings(container_id="tls-connector"),
                                         server=False, remote_host=remote))
            return made[-1]

        states: list[str] = []
        with trio.fail_after(20):
            await run_connector(HOST, port, make_engine, Backoff(initial=0.01, max_attempts=2),
                                on_state=states.append, tls=client_tls(pki, ca_file=pki.other_ca_file))
        assert states[-1] == "FAILED" and "SUCCESS" not in states and made == []

        nursery.start_soon(functools.partial(run_connector, HOST, port, make_engine, Backoff(max_attempts=1),
                                             tls=client_tls(pki)))
        with trio.fail_after(10):
            while not (handler.opens and engines and engines[0].opened_at_remote):
                await trio.sleep(0.01)
        assert made[0].tls.protocol.startswith("TLSv1.")
        nursery.cancel_scope.cancel()


# -- a real proton client (its own OpenSSL) against the TLS listener -----------------------------------------

PROTON_TIMEOUT_SECONDS = 20.0


def proton_round_trip(url: str, ca_file: str) -> list:
    """A proton Container client (its own OpenSSL, verifying the server's name against the trustme CA)
    sends one message to itself through the router and returns what it received."""
    from proton import Message, SSLDomain
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class RoundTrip(MessagingHandler):
        def __init__(self):
            super().__init__()
            self.received: list = []
            self.sent = False

        def on_start(self, event):
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            domain.set_trusted_ca_db(ca_file)
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
            conn = event.container.connect(url, ssl_domain=domain, sasl_enabled=False, reconnect=False)
            event.container.create_receiver(conn, "proton-q")
            event.container.create_sender(conn, "proton-q")
            self.timer = event.container.schedule(PROTON_TIMEOUT_SECONDS, self)

        def on_sendable(self, event):
            if not self.sent:
                event.sender.send(Message(body="from proton over tls"))
                self.sent = True

        def on_message(self, event):
            self.received.append(event.message.body)

        def on_accepted(self, event):
            event.connection.close()
            self.timer.cancel()

        def on_transport_error(self, event):
            self.received.append(f"transport error: {event.transport.condition}")
            self.timer.cancel()

        def on_timer_task(self, event):
            self.received.append("timed out")
            event.container.stop()

    handler = RoundTrip()
    Container(handler).run()
    return handler.received


async def test_proton_client_over_tls(pki, server_profile):
    async with trio.open_nursery() as nursery:
        _router, port, engines = await start_tls_router(nursery, ServerTls(server_profile.server_context()))
        received = await trio.to_thread.run_sync(proton_round_trip, f"amqps://localhost:{port}", pki.ca_file)
        assert received == ["from proton over tls"]
        assert engines[0].tls is not None
        nursery.cancel_scope.cancel()
