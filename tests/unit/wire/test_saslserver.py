"""wire/saslserver.py (and its client half, wire/sasl.py SaslClient) over the in-memory engine pair:
PLAIN and SCRAM logins against a users file, refusals, and malformed SASL input."""

from __future__ import annotations

import struct

import proton
import pytest
import trio

from tests.unit.enginepair import Peer, Pipe, pump
from wire.amqptypes import Described, Symbol, ULong, decode_value
from wire.connection import ConnectionHandler, ConnectionSettings, EngineConnection
from wire.sasl import SaslClient
from wire.saslserver import (AMQP_HEADER, OUTCOME_AUTH, OUTCOME_OK, SASL_CHALLENGE, SASL_HEADER, SASL_INIT,
                             SASL_MECHANISMS, SASL_OUTCOME, SASL_RESPONSE, FrameReader, SaslServer,
                             encode_frame)
from wire.users import ScramCredential, UserRecord, Users

ALL = "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN ANONYMOUS"


@pytest.fixture(scope="module")
def users() -> Users:
    u = Users()
    u.set_password("alice", "wonderland")
    u.set_password("bob", "builder")
    return u


class Recorder(ConnectionHandler):
    def __init__(self):
        self.opens = 0
        self.closes = 0
        self.errors_at_close = []

    def on_connection_open(self, conn):
        self.opens += 1

    def on_connection_close(self, conn):
        self.closes += 1
        self.errors_at_close.append(conn.error)


def server(users, *, authenticate_peer=True, mechanisms=ALL):
    h = Recorder()
    settings = ConnectionSettings(sasl_users=users, sasl_mechanisms=mechanisms, authenticate_peer=authenticate_peer)
    return EngineConnection(h, settings, server=True), h


def login(users, *, authenticate_peer=True, mechanisms=ALL, **client_kw):
    """Server and client engines pumped until nothing moves: (server, server handler, client, client handler)."""
    srv, hs = server(users, authenticate_peer=authenticate_peer, mechanisms=mechanisms)
    hc = Recorder()
    cli = EngineConnection(hc, ConnectionSettings(**client_kw), server=False)
    pump(Pipe(cli, srv))
    return srv, hs, cli, hc


def assert_open(srv, hs, cli, hc, user, mechanism):
    assert (hs.opens, hs.closes, hc.opens, hc.closes) == (1, 0, 1, 0)
    assert srv.user == user and srv.sasl_mechanism == mechanism
    assert srv.error is None and cli.error is None


def assert_refused(srv, hs, cli, hc):
    assert (hs.opens, hc.opens) == (0, 0)
    assert (hs.closes, hc.closes) == (1, 1)  # the application hears about it exactly once
    assert srv.finished and cli.finished
    assert srv.user is None
    assert srv.error.startswith("amqp:unauthorized-access: ")
    assert hs.errors_at_close == [srv.error]  # the handler already knew why when it heard of the close


# -- PLAIN (proton's own client side) ---------------------------------------------------------------------

def test_plain_good_password_logs_in_and_exposes_the_user(users):
    assert_open(*login(users, sasl_username="alice", sasl_password="wonderland"), "alice", "PLAIN")


@pytest.mark.parametrize("user, password", [("alice", "wrong"), ("mallory", "wonderland"), ("alice", "")])
def test_plain_bad_password_or_unknown_user_is_refused(users, user, password):
    srv, hs, cli, hc = login(users, sasl_username=user, sasl_password=password)
    assert_refused(srv, hs, cli, hc)
    assert "PLAIN authentication failed" in srv.error
    assert "Authentication failed" in cli.error  # proton's client saw outcome code 1 (auth)


def test_plain_authzid_must_be_empty_or_the_user(users):
    for authzid, ok in ((b"alice", True), (b"bob", False)):
        out = exchange(users, SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN"), authzid + b"\0alice\0wonderland"]))
        assert outcome_code(out) == (OUTCOME_OK if ok else OUTCOME_AUTH)


def test_plain_without_initial_response_gets_an_empty_challenge(users):
    srv, _ = server(users)
    srv.feed(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN")]))
    assert [c for c, _ in frames(srv.take_output())] == [SASL_MECHANISMS, SASL_CHALLENGE]
    srv.feed(encode_frame(SASL_RESPONSE, [b"\0bob\0builder"]))
    assert outcome_code(srv.take_output()) == OUTCOME_OK
    assert srv.sasl.user == "bob"


# -- SCRAM (our client half) -----------------------------------------------------------------------------

@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_good_password_logs_in(users, mech):
    result = login(users, sasl_username="bob", sasl_password="builder", sasl_client_mechanisms=mech)
    assert_open(*result, "bob", mech)
    assert result[2].sasl_mechanism == mech


@pytest.mark.parametrize("mech", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user, password", [("bob", "wrong"), ("nobody", "builder")])
def test_scram_bad_password_or_unknown_user_is_refused(users, mech, user, password):
    srv, hs, cli, hc = login(users, sasl_username=user, sasl_password=password, sasl_client_mechanisms=mech)
    assert_refused(srv, hs, cli, hc)
    assert f"{mech} authentication failed" in srv.error
    assert "outcome code 1" in cli.error


def test_client_takes_the_first_of_its_mechanisms_the_server_offers(users):
    result = login(users, mechanisms="SCRAM-SHA-256 PLAIN", sasl_username="bob", sasl_password="builder",
                   sasl_client_mechanisms="SCRAM-SHA-512 SCRAM-SHA-256")
    assert_open(*result, "bob", "SCRAM-SHA-256")
    srv, hs, cli, hc = login(users, mechanisms="PLAIN", sasl_username="bob", sasl_password="builder",
                             sasl_client_mechanisms="SCRAM-SHA-512")
    assert cli.error.startswith("amqp:unauthorized-access: server offers SASL PLAIN; we allow SCRAM-SHA-512")
    assert (hs.opens, hc.opens, hc.closes) == (0, 0, 1)


def test_scram_wrong_client_proof_is_refused(users):
    """A proof that is not ClientKey XOR ClientSignature fails (RFC 5802 §5.1 "p=")."""
    srv, _ = server(users)
    srv.feed(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,n=alice,r=abcdefgh"]))
    challenge = frames(srv.take_output())[1][1][0].decode()
    nonce = challenge.split(",")[0][2:]
    srv.feed(encode_frame(SASL_RESPONSE, [f"c=biws,r={nonce},p={'A' * 43}=".encode()]))
    assert outcome_code(srv.take_output()) == OUTCOME_AUTH
    assert srv.take_output() is None and srv.finished


def test_client_rejects_a_server_that_does_not_know_the_password(users):
    """The server's signature (additional-data "v=") proves it holds ServerKey: a server that accepts the
    proof but signs with another key (an impostor with a stolen StoredKey) is refused by the client."""
    real = users.get("alice").credentials["SCRAM-SHA-256"]
    forged = ScramCredential(real.mechanism, real.iterations, real.salt, real.stored_key, b"\x01" * 32)
    impostor = Users([UserRecord("alice", {"SCRAM-SHA-256": forged})])
    srv, hs, cli, hc = login(impostor, sasl_username="alice", sasl_password="wonderland",
                             sasl_client_mechanisms="SCRAM-SHA-256")
    assert srv.user == "alice"  # the server believed the client ...
    assert cli.error.startswith("amqp:unauthorized-access: SCRAM server signature missing or wrong")
    assert (hc.opens, hc.closes) == (0, 1)  # ... but the client never opened


def test_scram_unknown_user_gets_the_same_salt_each_time(users):
    """An unknown name is not told apart by the challenge: a stable made-up salt, the usual count."""
    salts = []
    for _ in range(2):
        srv, _ = server(users)
        srv.feed(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-512"), b"n,,n=nobody,r=xyz"]))
        challenge = frames(srv.take_output())[1][1][0].decode()
        salts.append(challenge.split(",")[1])
        assert challenge.endswith(",i=4096")
    assert salts[0] == salts[1]


# -- ANONYMOUS and skipping SASL ---------------------------------------------------------------------------

def test_anonymous_not_offered_when_authenticate_peer(users):
    srv, _ = server(users, authenticate_peer=True)
    srv.feed(SASL_HEADER)
    (code, fields), = frames(srv.take_output())
    assert code == SASL_MECHANISMS and "ANONYMOUS" not in fields[0]
    out = exchange(users, SASL_HEADER + encode_frame(SASL_INIT, [Symbol("ANONYMOUS"), b""]))
    assert outcome_code(out) == OUTCOME_AUTH
    srv, hs, cli, hc = login(users)  # proton's client asks for ANONYMOUS and gives up
    assert (hs.opens, hc.opens, hs.closes) == (0, 0, 1)


def test_anonymous_allowed_without_authenticate_peer(users):
    assert_open(*login(users, authenticate_peer=False), None, "ANONYMOUS")
    # and PLAIN still works on the same listener
    assert_open(*login(users, authenticate_peer=False, sasl_username="alice", sasl_password="wonderland"),
                "alice", "PLAIN")


def test_plain_amqp_header_refused_when_auth_required(users):
    """As proton does: the SASL header back, then the connection is closed."""
    srv, hs = server(users)
    srv.feed(AMQP_HEADER + b"\0\0\0\x08\x02\0\0\0")
    assert srv.take_output() == SASL_HEADER
    assert srv.take_output() is None
    assert srv.finished and hs.closes == 1 and hs.opens == 0
    assert "client skipped SASL" in srv.error


def test_plain_amqp_header_accepted_when_anonymous_allowed(users):
    srv, hs = server(users, authenticate_peer=False)
    peer = Peer(sasl=False)
    pump(Pipe(peer, srv))
    assert hs.opens == 1 and srv.user is None
    assert peer.connection.state & proton.Endpoint.REMOTE_ACTIVE


def test_default_settings_keep_protons_sasl():
    """No users configured: nothing changes (proton's ANONYMOUS, no layer in front)."""
    h = Recorder()
    srv = EngineConnection(h, ConnectionSettings(), server=True)
    assert srv.sasl is None
    peer = Peer()
    pump(Pipe(peer, srv))
    assert h.opens == 1


# -- malformed input: the connection ends with a reason, nothing raises ------------------------------------

@pytest.mark.parametrize("data, reason", [
    (b"HTTP/1.1", "amqp:connection:framing-error: unsupported protocol header"),
    (SASL_HEADER + struct.pack(">IBBH", 4, 2, 1, 0), "SASL frame size 4"),
    (SASL_HEADER + struct.pack(">IBBH", 1 << 30, 2, 1, 0), "SASL frame size 1073741824"),
    (SASL_HEADER + struct.pack(">IBBH", 12, 2, 0, 0) + b"\0\0\0\0", "frame type 0 during SASL"),
    (SASL_HEADER + struct.pack(">IBBH", 12, 1, 1, 0) + b"\0\0\0\0", "data offset 1"),
    (SASL_HEADER + struct.pack(">IBBH", 10, 2, 1, 0) + b"\x00\x53", "amqp:decode-error: undecodable"),
    (SASL_HEADER + encode_frame(0x10, [Symbol("x")]), "not a SASL performative"),
    (SASL_HEADER + encode_frame(SASL_RESPONSE, [b"x"]), "unexpected SASL performative 0x43"),
    (SASL_HEADER + encode_frame(SASL_INIT, []), "mandatory SASL field mechanism missing"),
    (SASL_HEADER + encode_frame(SASL_INIT, [b"PLAIN"]), "field mechanism has the wrong type"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN"), b"no-nuls"]), "PLAIN response is not"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN"), b"\0\xff\0x"]), "not UTF-8"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"p=tls-unique,,n=a,r=b"]), "channel binding"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,r=b,n=a"]), "expected attribute 'n'"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,n=a=41,r=b"]), "invalid '=' escape"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,n=a,r=b,c"]), "malformed attribute"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,n=a"]), "lacks attributes"),
    (SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,m=x,n=a,r=b"]), "expected attribute"),
])
def test_malformed_sasl_input_ends_the_connection_with_a_reason(users, data, reason):
    srv, hs = server(users)
    srv.feed(data)
    while (out := srv.take_output()) is not None:
        assert out, "the server must end the connection, not wait"
    assert srv.finished and hs.closes == 1 and hs.opens == 0
    assert reason in srv.error


def test_malformed_scram_final_messages(users):
    for final in (b"c=biws,r=WRONG,p=AAAA", b"c=eSws,r={n},p=AAAA", b"c=biws,r={n}", b"c=biws,r={n},p=!!",
                  b"\xff"):
        srv, hs = server(users)
        srv.feed(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,,n=alice,r=abc"]))
        nonce = frames(srv.take_output())[1][1][0].decode().split(",")[0][2:]
        srv.feed(encode_frame(SASL_RESPONSE, [final.replace(b"{n}", nonce.encode())]))
        while srv.take_output() is not None:
            pass
        assert srv.finished and srv.user is None and srv.error.startswith("amqp:"), srv.error


@pytest.mark.parametrize("first", [b"n,,n=alice,r=a\x01b", b"\xff", b"n,,n=a=41,r=b", b"n,,r=b,n=a", b"n,,m=x,n=a,r=b"])
def test_fuzz_finding_malformed_scram_first_message_error_starts_with_an_amqp_condition(users, first):
    """Found by the fuzz campaign (sasl-server): a malformed SCRAM message failed the layer with an error
    starting "SCRAM: ...", not "amqp:condition: ...", the form every connection error takes."""
    srv, hs = server(users)
    srv.feed(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), first]))
    while srv.take_output() is not None:
        pass
    assert srv.finished and hs.errors_at_close == [srv.error]
    assert srv.error.startswith("amqp:decode-error: SCRAM: "), srv.error


def test_fuzz_finding_malformed_scram_server_first_message_error_starts_with_an_amqp_condition():
    """The client half meets the same SCRAM checks: a server nonce that does not extend ours."""
    from wire.saslserver import mechanisms_frame

    cli = SaslClient("alice", "wonderland", ["SCRAM-SHA-256"])
    cli.feed(SASL_HEADER + mechanisms_frame(["SCRAM-SHA-256"]))
    cli.feed(encode_frame(SASL_CHALLENGE, [b"r=not-ours,s=AAAA,i=4096"]))
    assert cli.failed and cli.error.startswith("amqp:decode-error: SCRAM: server nonce"), cli.error


def test_peer_closing_mid_sasl_ends_the_connection(users):
    srv, hs = server(users)
    srv.feed(SASL_HEADER)
    srv.feed_eof()
    assert srv.finished and hs.closes == 1
    assert "peer closed the connection during SASL" in srv.error


def test_sasl_frames_split_across_reads(users):
    data = SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN"), b"\0alice\0wonderland"]) + AMQP_HEADER
    srv, hs = server(users)
    for i in range(len(data)):
        srv.feed(data[i:i + 1])
    out = srv.take_output()
    assert outcome_code(out) == OUTCOME_OK
    assert out.endswith(AMQP_HEADER)  # the engine answered the AMQP header that followed the outcome
    assert srv.user == "alice"


def test_a_bug_in_the_layer_ends_only_that_connection(users, monkeypatch):
    srv, hs = server(users)
    monkeypatch.setattr(SaslServer, "_plain", lambda self, r: 1 / 0)
    srv.feed(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN"), b"\0a\0b"]))
    while srv.take_output() is not None:
        pass
    assert srv.finished and "amqp:internal-error" in srv.error


# -- a real client: proton's python client over TCP against a driven server engine --------------------------

async def test_proton_blocking_client_logs_in_with_plain_over_tcp(users):
    from proton.utils import BlockingConnection
    from wire.driver import serve_listener

    engines = []

    def make_engine(remote):
        engine, _ = server(users)
        engines.append(engine)
        return engine

    def client(password):
        try:
            conn = BlockingConnection(f"amqp://127.0.0.1:{port}", timeout=10, allowed_mechs="PLAIN",
                                      user="alice", password=password)
        except proton.ConnectionException as exc:
            return f"refused: {exc}"
        conn.close()
        return "ok"

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_listener, "127.0.0.1", 0, make_engine)
        port = listeners[0].socket.getsockname()[1]
        assert await trio.to_thread.run_sync(client, "wonderland") == "ok"
        assert engines[0].user == "alice"
        refused = await trio.to_thread.run_sync(client, "bad")
        assert refused.startswith("refused") and "Authentication failed" in refused
        nursery.cancel_scope.cancel()
    assert engines[1].user is None and "PLAIN authentication failed" in engines[1].error


# -- helpers ---------------------------------------------------------------------------------------------

def frames(data: bytes) -> list:
    """The SASL performatives in ``data`` (a leading SASL header is skipped): [(code, fields)]."""
    if data.startswith(SASL_HEADER):
        data = data[8:]
    data = data.partition(AMQP_HEADER)[0]  # after a successful outcome the engine's own output follows
    reader = FrameReader()
    reader.feed(data)
    out = []
    while (f := reader.next()) is not None:
        out.append(f)
    return out


def outcome_code(data: bytes) -> int:
    (code, fields), = [f for f in frames(data) if f[0] == SASL_OUTCOME]
    return fields[0]


def exchange(users, data: bytes) -> bytes:
    srv, _ = server(users)
    srv.feed(data)
    out = b""
    while chunk := srv.take_output():
        out += chunk
    return out


def test_frame_encoding_round_trips():
    frame = encode_frame(SASL_INIT, [Symbol("PLAIN"), b"\0a\0b", None])
    size, doff, ftype, _ = struct.unpack(">IBBH", frame[:8])
    assert (size, doff, ftype) == (len(frame), 2, 1)
    value, _ = decode_value(frame[8:])
    assert value == Described(ULong(SASL_INIT), [Symbol("PLAIN"), b"\0a\0b"])


def test_sasl_client_refuses_unknown_mechanisms():
    from wire.sasl import SaslConfigError

    with pytest.raises(SaslConfigError, match="DIGEST-MD5"):
        SaslClient("u", "p", ["DIGEST-MD5"])


def test_external_logs_in_as_the_tls_authenticated_name(users):
    srv, hs = server(users, mechanisms="PLAIN")
    # Listener configuration refuses EXTERNAL until TLS is wired (wire.sasl.server_mechanisms); the hook:
    srv.sasl.configured = ["EXTERNAL", "PLAIN"]
    srv.sasl.external_user = "CN=client.example"  # what the TLS layer will set from the client certificate
    out = exchange_on(srv, SASL_HEADER + encode_frame(SASL_INIT, [Symbol("EXTERNAL"), b""]))
    assert outcome_code(out) == OUTCOME_OK and srv.sasl.user == "CN=client.example"


def exchange_on(srv, data: bytes) -> bytes:
    srv.feed(data)
    out = b""
    while chunk := srv.take_output():
        out += chunk
    return out


async def test_scram_client_engine_over_tcp_through_the_driver(users):
    """Both halves of our layer under wire/driver.py: the client's engine output (AMQP header, open) is
    held back until the outcome without the driver spinning, and both sides open."""
    from wire.driver import run_connection, serve_listener

    server_engines = []
    opened = trio.Event()

    class OpenSignal(Recorder):
        def on_connection_open(self, conn):
            super().on_connection_open(conn)
            opened.set()

    def make_engine(remote):
        engine, _ = server(users)
        server_engines.append(engine)
        return engine

    client = EngineConnection(OpenSignal(), ConnectionSettings(
        sasl_username="bob", sasl_password="builder", sasl_client_mechanisms="SCRAM-SHA-512"), server=False)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_listener, "127.0.0.1", 0, make_engine)
        stream = await trio.open_tcp_stream("127.0.0.1", listeners[0].socket.getsockname()[1])
        nursery.start_soon(run_connection, stream, client)
        with trio.fail_after(10):
            await opened.wait()
        assert server_engines[0].user == "bob" and server_engines[0].sasl_mechanism == "SCRAM-SHA-512"
        nursery.cancel_scope.cancel()


def test_protons_own_client_cannot_do_scram(users):
    """Why wire/sasl.py has a SCRAM client: proton's bundled client (no Cyrus SASL) finds no mechanism
    in common with a server that offers SCRAM only."""
    srv, hs = server(users, mechanisms="SCRAM-SHA-256")
    peer_conn = proton.Connection()
    transport = proton.Transport(proton.Transport.CLIENT)
    sasl = transport.sasl()
    sasl.allowed_mechs("SCRAM-SHA-256")
    peer_conn.user, peer_conn.password = "bob", "builder"
    transport.bind(peer_conn)
    peer_conn.open()
    for _ in range(20):
        out = transport.peek(transport.pending()) if transport.pending() > 0 else b""
        if out:
            transport.pop(len(out))
            srv.feed(out)
        back = srv.take_output()
        if back:
            transport.push(back)
        if back is None or transport.closed:
            break
    assert hs.opens == 0 and sasl.outcome != proton.SASL.OK
