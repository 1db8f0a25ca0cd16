"""tools/engineclient.py: the blocking client on wire's engine, against a real Router with its management
agent on a Trio listener (TLS, our SASL server). The client blocks, so it runs in a worker thread
(trio.to_thread) while the listener runs in the test's loop; certificates are made by trustme."""

from __future__ import annotations

import functools

import pytest
import trio
import trustme

from router.core import Router
from router.daemon import attach_agent
from router.management import ManagementAgent
from tools.engineclient import (DeliveryRefused, EngineClient, EngineClientError, LinkRefused, LoginRefused,
                                Timeout)
from wire import management as wm
from wire.driver import serve_listener
from wire.tls import ServerTls, TlsProfile
from wire.users import Users

HOST = "127.0.0.1"
PASSWORD = "s3cret-pw"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA(organization_name="engineclient tests")
    cert = ca.issue_cert(HOST, "localhost")

    def write(name, data):
        (folder / name).write_bytes(data)
        return str(folder / name)

    ca_file = write("ca.pem", ca.cert_pem.bytes())
    server = TlsProfile(name="server", cert_file=write("cert.pem", cert.cert_chain_pems[0].bytes()),
                        private_key_file=write("key.pem", cert.private_key_pem.bytes()), ca_cert_file=ca_file)
    client = TlsProfile(name="client", ca_cert_file=ca_file)
    return server, client


@pytest.fixture(scope="module")
def users():
    u = Users()
    u.set_password("admin", PASSWORD)
    return u


async def start_router(nursery, *, users=None, mechanisms="ANONYMOUS", tls_profile=None) -> tuple[Router, int]:
    router = Router("EC")
    attach_agent(router, ManagementAgent(router, clock=trio.current_time))
    settings = router.connection_settings(sasl_users=users, sasl_mechanisms=mechanisms,
                                          authenticate_peer=users is not None)

    def make_engine(remote):
        return router.new_engine(settings, server=True, remote_host=remote)

    tls = ServerTls(tls_profile.server_context(), required=True) if tls_profile is not None else None
    listeners = await nursery.start(functools.partial(serve_listener, HOST, 0, make_engine, tls=tls))
    return router, listeners[0].socket.getsockname()[1]


def in_thread(fn, *args, **kw):
    return trio.to_thread.run_sync(functools.partial(fn, *args, **kw))


def management_round_trip(url: str, **connect) -> dict:
    """Open, attach a dynamic receiver and a sender to $management, ask QUERY connection, close."""
    with EngineClient.connect(url, timeout=10, **connect) as client:
        receiver = client.dynamic_receiver()
        sender = client.sender(wm.MANAGEMENT_ADDRESS)
        request = wm.build_request("QUERY", name="self", entityType="connection", reply_to=receiver.address,
                                   correlation_id="c1", body={"attributeNames": ["sasl", "user", "isEncrypted"]})
        assert sender.send(request) == "accepted"
        response = wm.parse_response(receiver.receive())
        assert response.ok and response.correlation_id == "c1", response
        body = response.body
        return [dict(zip(body["attributeNames"], row)) for row in body["results"]]


async def test_anonymous_request_and_reply_over_plaintext():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        rows = await in_thread(management_round_trip, f"amqp://{HOST}:{port}")
        assert rows == [{"sasl": "ANONYMOUS", "user": "anonymous", "isEncrypted": False}], rows
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"])
async def test_login_over_tls_with_each_mechanism(pki, users, mechanism):
    server, client = pki
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, users=users, mechanisms=mechanism, tls_profile=server)
        rows = await in_thread(management_round_trip, f"amqps://localhost:{port}", username="admin",
                               password=PASSWORD, mechanisms=mechanism, ssl_context=client.client_context())
        assert rows == [{"sasl": mechanism, "user": "admin", "isEncrypted": True}], rows
        nursery.cancel_scope.cancel()


async def test_the_first_mechanism_the_server_offers_wins(users):
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, users=users, mechanisms="SCRAM-SHA-256 PLAIN")
        rows = await in_thread(management_round_trip, f"{HOST}:{port}", username="admin", password=PASSWORD)
        assert rows[0]["sasl"] == "SCRAM-SHA-256" and rows[0]["user"] == "admin", rows
        nursery.cancel_scope.cancel()


async def test_a_wrong_password_is_a_refused_login_without_the_password(users):
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, users=users, mechanisms="SCRAM-SHA-256")
        with pytest.raises(LoginRefused) as e:
            await in_thread(EngineClient.connect, f"{HOST}:{port}", username="admin", password="wrong-pw-42",
                            mechanisms="SCRAM-SHA-256", timeout=10)
        text = str(e.value)
        assert "SASL login" in text and "refused" in text and "amqp:unauthorized-access" in text, text
        assert "wrong-pw-42" not in text and PASSWORD not in text
        nursery.cancel_scope.cancel()


async def test_no_common_mechanism_names_both_lists(users):
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, users=users, mechanisms="PLAIN")
        with pytest.raises(LoginRefused) as e:
            await in_thread(EngineClient.connect, f"{HOST}:{port}", username="admin", password=PASSWORD,
                            mechanisms="SCRAM-SHA-512", timeout=10)
        assert "offers SASL PLAIN" in str(e.value) and "SCRAM-SHA-512" in str(e.value), str(e.value)
        nursery.cancel_scope.cancel()


async def test_anonymous_on_a_listener_that_authenticates_peers_is_refused(users):
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, users=users, mechanisms="SCRAM-SHA-256")
        with pytest.raises(EngineClientError) as e:
            await in_thread(EngineClient.connect, f"{HOST}:{port}", timeout=10)
        assert str(e.value), e.value
        nursery.cancel_scope.cancel()


async def test_an_untrusted_server_certificate_is_refused(pki, tmp_path):
    server, _ = pki
    other = trustme.CA(organization_name="someone else")
    (tmp_path / "other.pem").write_bytes(other.cert_pem.bytes())
    stranger = TlsProfile(name="c", ca_cert_file=str(tmp_path / "other.pem"))
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, tls_profile=server)
        with pytest.raises(EngineClientError) as e:
            await in_thread(EngineClient.connect, f"amqps://localhost:{port}",
                            ssl_context=stranger.client_context(), timeout=10)
        assert "certificate verify failed" in str(e.value), e.value
        nursery.cancel_scope.cancel()


async def test_the_host_name_is_checked_unless_told_not_to(pki, tmp_path):
    server, client = pki
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, tls_profile=server)
        with pytest.raises(EngineClientError) as e:  # the certificate names localhost and 127.0.0.1 only
            await in_thread(EngineClient.connect, f"amqps://{HOST}:{port}", ssl_context=client.client_context(),
                            server_hostname="elsewhere.example", timeout=10)
        assert "certificate verify failed" in str(e.value), e.value
        rows = await in_thread(management_round_trip, f"amqps://{HOST}:{port}",
                               ssl_context=client.client_context(verify_hostname=False),
                               server_hostname="elsewhere.example")
        assert rows[0]["isEncrypted"] is True
        nursery.cancel_scope.cancel()


async def test_plaintext_to_a_tls_only_listener_says_tls_is_required(pki):
    server, _ = pki
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery, tls_profile=server)
        with pytest.raises(EngineClientError) as e:
            await in_thread(EngineClient.connect, f"amqp://{HOST}:{port}", timeout=10)
        assert "requires TLS" in str(e.value), e.value
        nursery.cancel_scope.cancel()


async def test_nobody_listening_is_a_clear_error():
    with trio.socket.socket() as s:
        await s.bind((HOST, 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with pytest.raises(EngineClientError) as e:
            await in_thread(EngineClient.connect, f"{HOST}:{port}", timeout=5)
    assert f"cannot connect to {HOST}:{port}" in str(e.value)


def _sender_without_consumer(url: str):
    with EngineClient.connect(url, timeout=10) as client:
        sender = client.sender("nobody.listens.here")
        with pytest.raises(Timeout) as e:
            sender.send(b"\x00Sw\xa1\x02hi", timeout=0.5)
        return str(e.value)


async def test_send_without_credit_times_out_naming_the_address():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        text = await in_thread(_sender_without_consumer, f"{HOST}:{port}")
        assert text == "no credit to send to nobody.listens.here within 0.5 s", text
        nursery.cancel_scope.cancel()


def _receive_times_out(url: str):
    with EngineClient.connect(url, timeout=10) as client:
        receiver = client.dynamic_receiver()
        with pytest.raises(Timeout):
            receiver.receive(timeout=0.3)
        return receiver.address


async def test_receive_times_out_and_the_dynamic_address_is_the_routers():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        address = await in_thread(_receive_times_out, f"{HOST}:{port}")
        assert address and "temp." in address, address
        nursery.cancel_scope.cancel()


def _rejected_request(url: str):
    with EngineClient.connect(url, timeout=10) as client:
        sender = client.sender(wm.MANAGEMENT_ADDRESS)
        # message annotations naming a router annotation, cut short: the router rejects the message
        with pytest.raises(DeliveryRefused) as e:
            sender.send(b"\x00\x53\x72\xc1\xff\x02\xa3\x0cx-opt-qd.to")
        return str(e.value)


async def test_a_rejected_message_says_rejected():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        text = await in_thread(_rejected_request, f"{HOST}:{port}")
        assert text.startswith("message to $management rejected: amqp:decode-error"), text
        nursery.cancel_scope.cancel()


def _create_unavailable_then_attach(url: str):
    with EngineClient.connect(url, timeout=10) as client:
        receiver = client.dynamic_receiver()
        create = wm.build_request("CREATE", type="org.apache.qpid.dispatch.router.config.address", name="closed",
                                  reply_to=receiver.address, correlation_id="c2",
                                  body={"prefix": "closed", "distribution": "unavailable"})
        client.sender(wm.MANAGEMENT_ADDRESS).send(create)
        assert wm.parse_response(receiver.receive()).status == 201
        with pytest.raises(LinkRefused) as e:
            client.sender("closed.orders")
        return str(e.value)


async def test_a_refused_link_says_why():
    async with trio.open_nursery() as nursery:
        router, port = await start_router(nursery)
        text = await in_thread(_create_unavailable_then_attach, f"{HOST}:{port}")
        assert text == "link to closed.orders closed by the peer: amqp:not-found: Node not found", text
        nursery.cancel_scope.cancel()


def test_urls_are_checked():
    with pytest.raises(EngineClientError):
        EngineClient.connect("http://h:1")
    with pytest.raises(EngineClientError):
        EngineClient.connect("amqps://h:1")  # TLS without a context
