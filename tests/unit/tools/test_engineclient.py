"""tools/engineclient.py: the blocking client on wire's engine, against a real tdrouterd (one per module) with
a plaintext anonymous listener, a TLS-only listener that authenticates peers (SCRAM-SHA-256, SCRAM-SHA-512,
PLAIN; a client certificate is asked for too) and a plaintext one offering SCRAM-SHA-256 and PLAIN.

The router runs as a subprocess rather than in this process: the client blocks, and running it in a thread
beside an in-process router would share wire's process-wide engine buffers (wire/raw.py, wire/connection.py)
between two threads. Certificates are made by trustme at test time.
"""

from __future__ import annotations

import pytest
import trustme

from tests.system.harness import RouterProcess
from tools.engineclient import (DeliveryRefused, EngineClient, EngineClientError, LinkRefused, LoginRefused,
                                Timeout)
from wire import management as wm
from wire.tls import TlsProfile
from wire.users import Users

HOST = "127.0.0.1"
PASSWORD = "s3cret-pw"
ROUTER_ID = "EC"


class Setup:
    def __init__(self, folder):
        ca = trustme.CA(organization_name="engineclient tests")
        server = ca.issue_cert(HOST, "localhost")
        client = ca.issue_cert("admin.example", common_name="admin")
        other = trustme.CA(organization_name="someone else")

        def write(name, data):
            (folder / name).write_bytes(data)
            return str(folder / name)

        self.ca_file = write("ca.pem", ca.cert_pem.bytes())
        self.server_cert = write("cert.pem", server.cert_chain_pems[0].bytes())
        self.server_key = write("key.pem", server.private_key_pem.bytes())
        self.client = TlsProfile(name="client", ca_cert_file=self.ca_file,
                                 cert_file=write("client-cert.pem", client.cert_chain_pems[0].bytes()),
                                 private_key_file=write("client-key.pem", client.private_key_pem.bytes()))
        self.stranger = TlsProfile(name="stranger", ca_cert_file=write("other-ca.pem", other.cert_pem.bytes()),
                                   cert_file=self.client.cert_file, private_key_file=self.client.private_key_file)
        users = Users()
        users.set_password("admin", PASSWORD)
        users.save(str(folder / "users.db"))
        (folder / "qdrouterd.conf").write_text("mech_list: ANONYMOUS PLAIN SCRAM-SHA-256 SCRAM-SHA-512\n"
                                               "sasldb_path: users.db\n")
        sections = (f"sslProfile {{\n    name: tls\n    certFile: {self.server_cert}\n"
                    f"    privateKeyFile: {self.server_key}\n    caCertFile: {self.ca_file}\n}}\n"
                    "listener {\n    name: secure\n    host: 127.0.0.1\n    port: 0\n    sslProfile: tls\n"
                    "    requireSsl: yes\n    authenticatePeer: yes\n"
                    "    saslMechanisms: SCRAM-SHA-256 SCRAM-SHA-512 PLAIN\n}\n"
                    "listener {\n    name: scram256\n    host: 127.0.0.1\n    port: 0\n    authenticatePeer: yes\n"
                    "    saslMechanisms: SCRAM-SHA-256 PLAIN\n}\n")
        self.router = RouterProcess(folder, sections, router_id=ROUTER_ID, router_extra=f"saslConfigDir: {folder}")

    def url(self, listener: str, scheme: str = "amqp", host: str = HOST) -> str:
        return f"{scheme}://{host}:{self.router.ports[listener]}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    s = Setup(tmp_path_factory.mktemp("engineclient"))
    s.router.start()
    yield s
    assert s.router.stop() == 0, s.router.stderr_text()


def management_round_trip(url: str, **connect) -> dict:
    """Open, attach a dynamic receiver and a sender to $management, ask QUERY connection, close; the row of
    this client's own connection."""
    with EngineClient.connect(url, timeout=10, **connect) as client:
        receiver = client.dynamic_receiver()
        sender = client.sender(wm.MANAGEMENT_ADDRESS)
        request = wm.build_request("QUERY", name="self", entityType="connection", reply_to=receiver.address,
                                   correlation_id="c1",
                                   body={"attributeNames": ["container", "sasl", "user", "isEncrypted"]})
        assert sender.send(request) == "accepted"
        response = wm.parse_response(receiver.receive())
        assert response.ok and response.correlation_id == "c1", response
        rows = [dict(zip(response.body["attributeNames"], row)) for row in response.body["results"]]
        mine = [r for r in rows if r.pop("container") == client.container_id]
        assert len(mine) == 1, rows
        return mine[0]


def test_anonymous_request_and_reply_over_plaintext(setup):
    row = management_round_trip(setup.url("amqp"))
    assert row == {"sasl": "ANONYMOUS", "user": "anonymous", "isEncrypted": False}, row


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
def test_login_over_tls_with_each_mechanism(setup, mechanism):
    row = management_round_trip(setup.url("secure", "amqps", "localhost"), username="admin", password=PASSWORD,
                                mechanisms=mechanism, ssl_context=setup.client.client_context())
    assert row == {"sasl": mechanism, "user": "admin", "isEncrypted": True}, row


def test_the_first_mechanism_the_server_offers_wins(setup):
    row = management_round_trip(setup.url("scram256"), username="admin", password=PASSWORD)  # 512 first
    assert row["sasl"] == "SCRAM-SHA-256" and row["user"] == "admin", row


def test_a_wrong_password_is_a_refused_login_without_the_password(setup):
    with pytest.raises(LoginRefused) as e:
        EngineClient.connect(setup.url("scram256"), username="admin", password="wrong-pw-42",
                             mechanisms="SCRAM-SHA-256", timeout=10)
    text = str(e.value)
    assert text.startswith(f"SASL login to {HOST}:{setup.router.ports['scram256']} refused: "
                           "amqp:unauthorized-access"), text
    assert "SCRAM-SHA-256 login as 'admin'" in text, text
    assert "wrong-pw-42" not in text and PASSWORD not in text


def test_no_common_mechanism_names_both_lists(setup):
    with pytest.raises(LoginRefused) as e:
        EngineClient.connect(setup.url("scram256"), username="admin", password=PASSWORD, mechanisms="SCRAM-SHA-512",
                             timeout=10)
    assert "offers SASL SCRAM-SHA-256 PLAIN; we allow SCRAM-SHA-512" in str(e.value), str(e.value)


def test_anonymous_on_a_listener_that_authenticates_peers_is_refused(setup):
    with pytest.raises(EngineClientError) as e:
        EngineClient.connect(setup.url("scram256"), timeout=10)
    assert isinstance(e.value, LoginRefused), e.value
    assert f"SASL login to {HOST}:{setup.router.ports['scram256']} refused: amqp:unauthorized-access" in str(e.value)
    assert "anonymous login: the server asks for a user name and password" in str(e.value), e.value


def test_an_untrusted_server_certificate_is_refused(setup):
    with pytest.raises(EngineClientError) as e:
        EngineClient.connect(setup.url("secure", "amqps", "localhost"), ssl_context=setup.stranger.client_context(),
                             timeout=10)
    assert "certificate verify failed" in str(e.value), e.value


def test_the_host_name_is_checked_unless_told_not_to(setup):
    url = setup.url("secure", "amqps")
    with pytest.raises(EngineClientError) as e:  # the certificate names localhost and 127.0.0.1 only
        EngineClient.connect(url, ssl_context=setup.client.client_context(), server_hostname="elsewhere.example",
                             timeout=10)
    assert "certificate verify failed" in str(e.value), e.value
    row = management_round_trip(url, username="admin", password=PASSWORD,
                                ssl_context=setup.client.client_context(verify_hostname=False),
                                server_hostname="elsewhere.example")
    assert row["isEncrypted"] is True
    # Python's ssl matches IP addresses (proton's check does not)
    assert management_round_trip(url, username="admin", password=PASSWORD,
                                 ssl_context=setup.client.client_context())["isEncrypted"] is True


def test_plaintext_to_a_tls_only_listener_says_tls_is_required(setup):
    with pytest.raises(EngineClientError) as e:
        EngineClient.connect(setup.url("secure"), username="admin", password=PASSWORD, timeout=10)
    assert "requires TLS" in str(e.value), e.value


def test_nobody_listening_is_a_clear_error():
    import socket
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(EngineClientError) as e:
            EngineClient.connect(f"{HOST}:{port}", timeout=5)
    assert f"cannot connect to {HOST}:{port}" in str(e.value)


def test_send_without_credit_times_out_naming_the_address(setup):
    with EngineClient.connect(setup.url("amqp"), timeout=10) as client:
        sender = client.sender("nobody.listens.here")
        with pytest.raises(Timeout) as e:
            sender.send(b"\x00Sw\xa1\x02hi", timeout=0.5)
    assert str(e.value) == "no credit to send to nobody.listens.here within 0.5 s", e.value


def test_receive_times_out_and_the_dynamic_address_is_the_routers(setup):
    with EngineClient.connect(setup.url("amqp"), timeout=10) as client:
        receiver = client.dynamic_receiver()
        with pytest.raises(Timeout):
            receiver.receive(timeout=0.3)
    assert receiver.address.startswith(f"amqp:/_topo/0/{ROUTER_ID}/temp."), receiver.address


def test_a_large_message_to_our_own_reply_address_arrives_whole_and_is_accepted(setup):
    body = bytes(range(256)) * 1024  # 256 KiB: many transfer frames each way
    with EngineClient.connect(setup.url("amqp"), timeout=10) as client:
        lazy = client.dynamic_receiver()  # credit only while receive() waits: a send to it cannot go yet
        with pytest.raises(Timeout):
            client.sender(lazy.address).send(wm.build_request("ECHO", to=lazy.address), timeout=0.3)
        receiver = client.dynamic_receiver(credit=1)
        sender = client.sender(receiver.address)
        # the outcome is our receiver's accept, carried back through the router
        assert sender.send(wm.build_request("ECHO", to=receiver.address, body=body)) == "accepted"
        assert wm.decode_message(receiver.receive()).body == body


def test_a_rejected_message_says_rejected(setup):
    with EngineClient.connect(setup.url("amqp"), timeout=10) as client:
        sender = client.sender(wm.MANAGEMENT_ADDRESS)
        # message annotations naming a router annotation, cut short: the router rejects the message
        with pytest.raises(DeliveryRefused) as e:
            sender.send(b"\x00\x53\x72\xc1\xff\x02\xa3\x0cx-opt-qd.to")
    assert str(e.value).startswith("message to $management rejected: amqp:decode-error"), e.value


def test_a_refused_link_says_why(setup):
    with EngineClient.connect(setup.url("amqp"), timeout=10) as client:
        receiver = client.dynamic_receiver()
        create = wm.build_request("CREATE", type="org.apache.qpid.dispatch.router.config.address", name="closed",
                                  reply_to=receiver.address, correlation_id="c2",
                                  body={"prefix": "closed", "distribution": "unavailable"})
        client.sender(wm.MANAGEMENT_ADDRESS).send(create)
        assert wm.parse_response(receiver.receive()).status == 201
        with pytest.raises(LinkRefused) as e:
            client.sender("closed.orders")
    assert str(e.value) == "link to closed.orders closed by the peer: amqp:not-found: Node not found", e.value


def test_urls_are_checked():
    with pytest.raises(EngineClientError):
        EngineClient.connect("http://h:1")
    with pytest.raises(EngineClientError):
        EngineClient.connect("amqps://h:1")  # TLS without a context
