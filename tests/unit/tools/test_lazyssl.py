"""tools/lazyssl.py: a proton container makes no SSL domain for plain AMQP, and TLS through the deferred
domains still works (a proton listener and client in one container, certificates from trustme)."""

from __future__ import annotations

import trustme
from proton import SSLDomain
from proton.handlers import MessagingHandler
from proton.reactor import Container

from tools.daemons import free_port
from tools.lazyssl import DeferredSSLConfig, defer_ssl_domains

TIMEOUT_SECONDS = 10


class _OpenOnce(MessagingHandler):
    """Listens, connects to itself, and stops once the client's connection is open."""

    def __init__(self, scheme: str, prepare=None):
        super().__init__()
        port = free_port()
        self.url = f"{scheme}://127.0.0.1:{port}"
        self.client_url = f"{scheme}://localhost:{port}"  # proton checks a peer's name against DNS names only
        self.prepare = prepare
        self.ends_open = 0  # connection-opened events: the client's end and the listener's

    def on_start(self, event):
        container = event.container
        if self.prepare is not None:
            self.prepare(container)
        self.acceptor = container.listen(self.url)
        self.client = container.connect(self.client_url, sasl_enabled=False, reconnect=False)
        self.timer = container.schedule(TIMEOUT_SECONDS, self)

    @property
    def opened(self) -> bool:
        return self.ends_open == 2

    def on_connection_opened(self, event):
        self.ends_open += 1
        if self.opened:
            self.client.close()
            self.acceptor.close()
            self.timer.cancel()

    def on_transport_error(self, event):
        self.acceptor.close()
        self.timer.cancel()

    def on_timer_task(self, event):
        self.client.close()
        self.acceptor.close()


def test_a_plain_connection_creates_no_ssl_domain():
    defer_ssl_domains()
    handler = _OpenOnce("amqp")
    container = Container(handler)
    assert isinstance(container.ssl, DeferredSSLConfig)
    container.run()
    assert handler.opened
    assert not container.ssl.client.created and not container.ssl.server.created


def _tls_prepare(tmp_path, server_ca: trustme.CA, client_trusts: trustme.CA):
    """Server credentials from ``server_ca``; the client trusts ``client_trusts`` and checks the name."""
    cert = server_ca.issue_cert("localhost", "127.0.0.1")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    cert.private_key_pem.write_to_path(str(tmp_path / "server.key"))
    client_trusts.cert_pem.write_to_path(str(tmp_path / "ca.pem"))

    def prepare(container):
        container.ssl.server.set_credentials(str(tmp_path / "server.pem"), str(tmp_path / "server.key"), None)
        container.ssl.server.set_peer_authentication(SSLDomain.ANONYMOUS_PEER)  # no client certificate
        container.ssl.client.set_trusted_ca_db(str(tmp_path / "ca.pem"))
        container.ssl.client.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME)

    return prepare


def test_tls_through_the_deferred_domains_verifies_the_peer(tmp_path):
    defer_ssl_domains()
    ca = trustme.CA()
    handler = _OpenOnce("amqps", _tls_prepare(tmp_path, ca, ca))
    container = Container(handler)
    container.run()
    assert handler.opened
    assert container.ssl.client.created and container.ssl.server.created


def test_tls_fails_against_an_untrusted_certificate(tmp_path):
    """The deferred client domain behaves as proton's own: a certificate from a CA it does not trust fails."""
    defer_ssl_domains()
    handler = _OpenOnce("amqps", _tls_prepare(tmp_path, trustme.CA(), trustme.CA()))
    Container(handler).run()
    assert not handler.opened
