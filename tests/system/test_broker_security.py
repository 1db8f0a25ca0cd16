"""tdbroker security with the real daemon and real proton clients (issue 12): a TLS acceptor
(``sslEnabled=true;keyStorePath=...`` with PEM files made by trustme at test time), ``<security-enabled>``
with the properties login module's ``artemis-users.properties``, and a broker connection that logs in with
SCRAM over TLS to a secured broker."""

from __future__ import annotations

import pathlib
import time

import pytest
import trustme
from proton import Data, Message, SSLDomain
from proton.reactor import Container, Copy, DurableSubscription
from proton.utils import BlockingConnection

from tests.artemisdefaults import ARTEMIS_CREATE_SECURITY_SETTING
from tests.system.brokerharness import TIMEOUT, BrokerProcess

pytestmark = pytest.mark.timeout(180)

BROKER = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq">
<core xmlns="urn:activemq:core">
  <name>{name}</name>
  <persistence-enabled>false</persistence-enabled>
  {security}
  <acceptors>
    <acceptor name="amqps">tcp://127.0.0.1:0?protocols=AMQP;sslEnabled=true;keyStorePath=server.pem;trustStorePath=ca.pem{acceptor_params}</acceptor>
  </acceptors>
  <addresses>
    <address name="q"><anycast><queue name="q"/></anycast></address>
  </addresses>
  {connections}
</core>
</configuration>
"""


@pytest.fixture(scope="module")
def ca():
    return trustme.CA()


def start_broker(workdir: pathlib.Path, ca, *, name="broker-1", security="", users=None, connections="",
                 acceptor_params=""):
    """A tdbroker with a TLS acceptor in ``workdir``; ``users`` is written as artemis-users.properties."""
    workdir.mkdir(parents=True, exist_ok=True)
    ca.issue_cert("127.0.0.1", "localhost", common_name=name).private_key_and_cert_chain_pem.write_to_path(str(workdir / "server.pem"))
    ca.cert_pem.write_to_path(str(workdir / "ca.pem"))
    if users is not None:
        (workdir / "artemis-users.properties").write_text(users)
    conf = workdir / "broker.xml"
    conf.write_text(BROKER.format(name=name, security=security, connections=connections,
                                  acceptor_params=acceptor_params))
    broker = BrokerProcess(conf, workdir)
    broker.start()
    return broker


def trusting(ca_file) -> SSLDomain:
    domain = SSLDomain(SSLDomain.MODE_CLIENT)
    domain.set_trusted_ca_db(str(ca_file))
    domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
    return domain


def connect(port: int, ssl_domain: SSLDomain | None, **login) -> BlockingConnection:
    # "localhost": proton's name check matches a DNS name in the certificate (not an IP address SAN).
    scheme = "amqps" if ssl_domain is not None else "amqp"
    return BlockingConnection(f"{scheme}://localhost:{port}", timeout=TIMEOUT, ssl_domain=ssl_domain, **login)


def round_trip(conn: BlockingConnection, body: str) -> str:
    sender = conn.create_sender("q")
    sender.send(Message(body=body))
    receiver = conn.create_receiver("q")
    msg = receiver.receive(timeout=TIMEOUT)
    receiver.accept()
    return msg.body


def refused(port: int, ssl_domain, **login) -> str:
    """The error a connection attempt ends with (it must not open)."""
    try:
        conn = connect(port, ssl_domain, **login)
    except Exception as exc:  # proton raises ConnectionException / Timeout / LinkDetached subclasses
        return f"{type(exc).__name__}: {exc}"
    conn.close()
    pytest.fail("the connection was accepted")


def test_tls_acceptor_serves_a_trusting_client_and_refuses_untrusting_and_plaintext_ones(tmp_path, ca):
    broker = start_broker(tmp_path / "b", ca, security="<security-enabled>false</security-enabled>")
    try:
        port = broker.ports["amqps"]
        conn = connect(port, trusting(tmp_path / "b" / "ca.pem"), sasl_enabled=False)
        try:
            assert round_trip(conn, "over tls") == "over tls"
        finally:
            conn.close()
        # A client that trusts only the system CAs does not accept the broker's certificate.
        untrusting = SSLDomain(SSLDomain.MODE_CLIENT)
        untrusting.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)
        assert "certificate" in refused(port, untrusting, sasl_enabled=False).lower()
        # Plaintext to an sslEnabled acceptor: TLS is required.
        refused(port, None, sasl_enabled=False)
    finally:
        assert broker.stop() == 0


USERS = "# the properties login module's users\nalice = s3cret\n"


@pytest.fixture(scope="module")
def secured(tmp_path_factory, ca):
    workdir = tmp_path_factory.mktemp("secured")
    broker = start_broker(workdir, ca, users=USERS, security="<security-enabled>true</security-enabled>")
    yield broker, workdir / "ca.pem"
    broker.stop()


def test_right_password_over_tls_with_plain_works(secured):
    broker, ca_file = secured
    conn = connect(broker.ports["amqps"], trusting(ca_file), user="alice", password="s3cret",
                   allowed_mechs="PLAIN")
    try:
        assert round_trip(conn, "logged in") == "logged in"
    finally:
        conn.close()


@pytest.mark.parametrize("login,condition", [
    ({"user": "alice", "password": "wrong", "allowed_mechs": "PLAIN"}, "amqp:unauthorized-access"),
    ({"user": "mallory", "password": "s3cret", "allowed_mechs": "PLAIN"}, "amqp:unauthorized-access"),
    ({"allowed_mechs": "ANONYMOUS"}, "amqp:unauthorized-access"),
    ({"sasl_enabled": False}, "framing-error"),   # an AMQP header where the SASL header is required
], ids=["wrong-password", "unknown-user", "anonymous", "no-sasl"])
def test_bad_logins_are_refused(secured, login, condition):
    broker, ca_file = secured
    error = refused(broker.ports["amqps"], trusting(ca_file), **login)
    assert condition in error and "s3cret" not in error
    assert broker.proc.poll() is None   # one refused client closes its own connection only


def test_broker_connection_logs_in_with_scram_over_tls(tmp_path, secured):
    """A second tdbroker forwards its queue to the secured one through <amqp-connection uri=...sslEnabled=true>
    with user/password: the secured broker offers SCRAM, so the password never crosses the wire."""
    target, ca_file = secured
    connections = (
        "<broker-connections>\n"
        f'<amqp-connection uri="tcp://127.0.0.1:{target.ports["amqps"]}?sslEnabled=true;trustStorePath={ca_file}"'
        ' name="to-secured" user="alice" password="s3cret" retry-interval="200"><sender address-match="q"/>'
        "</amqp-connection>\n</broker-connections>")
    ca = trustme.CA()
    source = start_broker(tmp_path / "src", ca, name="broker-src",
                          security="<security-enabled>false</security-enabled>", connections=connections)
    try:
        conn = connect(source.ports["amqps"], trusting(tmp_path / "src" / "ca.pem"), sasl_enabled=False)
        try:
            conn.create_sender("q").send(Message(body="forwarded"))
        finally:
            conn.close()
        conn = connect(target.ports["amqps"], trusting(ca_file), user="alice", password="s3cret",
                       allowed_mechs="PLAIN")
        try:
            receiver = conn.create_receiver("q")
            assert receiver.receive(timeout=TIMEOUT).body == "forwarded"
            receiver.accept()
        finally:
            conn.close()
        log = (tmp_path / "src" / "broker.stderr").read_text()
        assert "s3cret" not in log
        # The secured broker offered SCRAM first, so the password did not cross the wire.
        target_log = (target.conf.parent / "broker.stderr").read_text()
        assert "container broker-src, user 'alice' (SCRAM-SHA-512)" in target_log, target_log[-2000:]
    finally:
        assert source.stop() == 0


PERMISSIONS = """<security-enabled>true</security-enabled>
  <security-settings>
    <security-setting match="q">
      <permission type="send" roles="producer"/>
      <permission type="consume" roles="consumer"/>
    </security-setting>
    <security-setting match="#">
      <permission type="manage" roles="admin"/>
    </security-setting>
  </security-settings>"""


@pytest.fixture(scope="module")
def with_roles(tmp_path_factory, ca):
    workdir = tmp_path_factory.mktemp("roles")
    (workdir / "artemis-roles.properties").write_text("producer = pete\nconsumer = cora\nadmin = ann\n")
    broker = start_broker(workdir, ca, users="pete = p1\ncora = c1\nann = a1\n", security=PERMISSIONS)
    yield broker, workdir / "ca.pem"
    broker.stop()


def login(with_roles, user: str, password: str) -> BlockingConnection:
    broker, ca_file = with_roles
    return connect(broker.ports["amqps"], trusting(ca_file), user=user, password=password, allowed_mechs="PLAIN")


def attach_error(make) -> str:
    try:
        make()
    except Exception as exc:   # proton.utils.LinkDetached
        return str(exc)
    pytest.fail("the link was attached")


def test_permissions_per_role(with_roles):
    pete, cora, ann = login(with_roles, "pete", "p1"), login(with_roles, "cora", "c1"), login(with_roles, "ann", "a1")
    try:
        pete.create_sender("q").send(Message(body="for cora"))          # producer: send
        error = attach_error(lambda: pete.create_receiver("q"))
        assert "amqp:unauthorized-access" in error and "consume" in error
        receiver = cora.create_receiver("q")                            # consumer: consume
        assert receiver.receive(timeout=TIMEOUT).body == "for cora"
        receiver.accept()
        error = attach_error(lambda: cora.create_sender("q"))
        assert "amqp:unauthorized-access" in error and "send" in error
        error = attach_error(lambda: cora.create_sender("$management"))
        assert "amqp:unauthorized-access" in error and "manage" in error
        ann.create_sender("$management").close()                        # admin: manage
        error = attach_error(lambda: ann.create_sender("elsewhere"))    # would auto-create: not granted
        assert "amqp:unauthorized-access" in error and "createAddress" in error
    finally:
        for conn in (pete, cora, ann):
            conn.close()


def test_need_client_auth_requires_a_certificate_signed_by_the_trust_store(tmp_path, ca):
    workdir = tmp_path / "mtls"
    workdir.mkdir()
    client = ca.issue_cert("client.example", common_name="client")
    client.cert_chain_pems[0].write_to_path(str(workdir / "client-cert.pem"))
    client.private_key_pem.write_to_path(str(workdir / "client-key.pem"))
    stranger = trustme.CA().issue_cert("client.example")
    stranger.cert_chain_pems[0].write_to_path(str(workdir / "stranger-cert.pem"))
    stranger.private_key_pem.write_to_path(str(workdir / "stranger-key.pem"))
    broker = start_broker(workdir, ca, security="<security-enabled>false</security-enabled>",
                          acceptor_params=";needClientAuth=true")
    try:
        port = broker.ports["amqps"]

        def presenting(name):
            domain = trusting(workdir / "ca.pem")
            domain.set_credentials(str(workdir / f"{name}-cert.pem"), str(workdir / f"{name}-key.pem"), None)
            return domain

        conn = connect(port, presenting("client"), sasl_enabled=False)
        try:
            assert round_trip(conn, "mutual tls") == "mutual tls"
        finally:
            conn.close()
        refused(port, trusting(workdir / "ca.pem"), sasl_enabled=False)        # no certificate
        refused(port, presenting("stranger"), sasl_enabled=False)              # signed by another CA
    finally:
        assert broker.stop() == 0


# --- the security block `artemis create` writes: browse and the delete permissions ------------------------------

#: Artemis' default block (role amq: all ten types, as `artemis create` writes it) plus, for limited.#, a role
#: app that may send, consume and create but neither delete queues nor browse.
ARTEMIS_DEFAULT = f"""<security-enabled>true</security-enabled>
  <security-settings>
    {ARTEMIS_CREATE_SECURITY_SETTING}
    <security-setting match="limited.#">
      <permission type="createNonDurableQueue" roles="amq, app"/>
      <permission type="createDurableQueue" roles="amq, app"/>
      <permission type="createAddress" roles="amq, app"/>
      <permission type="consume" roles="amq, app"/>
      <permission type="send" roles="amq, app"/>
      <permission type="deleteNonDurableQueue" roles="amq"/>
      <permission type="deleteDurableQueue" roles="amq"/>
      <permission type="deleteAddress" roles="amq"/>
      <permission type="browse" roles="amq"/>
    </security-setting>
  </security-settings>"""


class Topic:
    """Link option: the source asks for a topic (an auto-created address is then multicast)."""

    def apply(self, link) -> None:
        caps = link.source.capabilities
        caps.put_array(False, Data.SYMBOL)
        caps.enter()
        caps.put_symbol("topic")
        caps.exit()

    def test(self, link) -> bool:
        return link.is_receiver


@pytest.fixture(scope="module")
def artemis_default(tmp_path_factory, ca):
    workdir = tmp_path_factory.mktemp("artemis-default")
    (workdir / "artemis-roles.properties").write_text("amq = ann\napp = pete\n")
    broker = start_broker(workdir, ca, users="ann = a1\npete = p1\n", security=ARTEMIS_DEFAULT)
    yield broker, workdir / "ca.pem"
    broker.stop()


def wait_for_log(broker, text: str, timeout: float = TIMEOUT) -> str:
    """The broker's log once it holds ``text`` (log lines are written as the broker acts)."""
    path = broker.conf.parent / "broker.stderr"
    deadline = time.monotonic() + timeout
    while True:
        log = path.read_text()
        if text in log:
            return log
        if time.monotonic() > deadline:
            raise AssertionError(f"{text!r} not in the broker log: {log[-3000:]}")
        time.sleep(0.05)


def test_a_browser_needs_browse_and_leaves_the_messages_to_consumers(artemis_default):
    ann, pete = login(artemis_default, "ann", "a1"), login(artemis_default, "pete", "p1")
    try:
        sender = pete.create_sender("limited.q")
        for body in ("first", "second"):
            sender.send(Message(body=body))
        browser = ann.create_receiver("limited.q", credit=10, options=Copy())   # a JMS QueueBrowser's attach
        seen = [browser.receive(timeout=TIMEOUT) for _ in range(2)]
        browser.accept()
        browser.accept()
        assert [m.body for m in seen] == ["first", "second"]
        error = attach_error(lambda: pete.create_receiver("limited.q", options=Copy()))
        assert "amqp:unauthorized-access" in error and "browse" in error
        consumer = pete.create_receiver("limited.q", name="consumer", credit=10)   # it still gets both
        got = [consumer.receive(timeout=TIMEOUT) for _ in range(2)]
        consumer.accept()
        consumer.accept()
        assert [m.body for m in got] == ["first", "second"]
    finally:
        ann.close()
        pete.close()


def test_topic_subscribers_closing_need_the_delete_queue_permissions(artemis_default):
    broker, _ca_file = artemis_default
    ann, pete = login(artemis_default, "ann", "a1"), login(artemis_default, "pete", "p1")
    try:
        # amq may delete its non-durable subscription queue: it goes with the link.
        ann.create_receiver("limited.news", name="ann-sub", options=Topic()).close()
        wait_for_log(broker, "closed with its link")
        # app may not (Artemis' AMQ229213 ... DELETE_NON_DURABLE_QUEUE): kept until its connection closes.
        pete.create_receiver("limited.news", name="pete-sub", options=Topic()).close()
        wait_for_log(broker, "user 'pete' refused deleteNonDurableQueue on limited.news")
        wait_for_log(broker, "kept until connection")
        pete.close()
        wait_for_log(broker, "removed with its connection")
    finally:
        ann.close()
        pete.close()


def test_closing_a_durable_subscription_without_delete_durable_queue_keeps_it(artemis_default):
    def durable_subscriber():
        container = Container()
        container.container_id = "pete-app"
        conn = connect(artemis_default[0].ports["amqps"], trusting(artemis_default[1]), container=container,
                       user="pete", password="p1", allowed_mechs="PLAIN")
        return conn, conn.create_receiver("limited.events", name="audit", credit=10,
                                          options=[Topic(), DurableSubscription()])

    conn, receiver = durable_subscriber()
    try:
        receiver.close()
        cond = receiver.link.remote_condition
        assert cond is not None and cond.name == "amqp:unauthorized-access", cond
        assert "deleteDurableQueue" in cond.description and "pete-app.audit" in cond.description
    finally:
        conn.close()
    producer = login(artemis_default, "pete", "p1")
    try:
        producer.create_sender("limited.events").send(Message(body="kept for the subscription"))
    finally:
        producer.close()
    conn, receiver = durable_subscriber()                  # the subscription is still there, with the message
    try:
        assert receiver.receive(timeout=TIMEOUT).body == "kept for the subscription"
        receiver.accept()
    finally:
        conn.close()
