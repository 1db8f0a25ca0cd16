"""Proton containers that build their TLS contexts only for a TLS connection.

Every ``proton.reactor.Container`` (and so every ``proton.utils.BlockingConnection``) makes a client and a
server ``SSLDomain`` as it is created, whether or not it ever speaks TLS. Each one is an OpenSSL context that
loads the system's CA bundle: about 50 ms of CPU apiece on a slow core (measured with python-qpid-proton
0.40.0 and Debian's ca-certificates; 0.3 ms with an empty bundle). For ``tdstat`` that was a third of its
run; the test suite makes thousands of containers.

:func:`defer_ssl_domains` makes containers created afterwards in this process hold stand-ins that create
the same default domain the first time anything is asked of it: a TLS connect or listen (proton reads the
domain's ``_domain`` then), or a caller's ``container.ssl.client.set_trusted_ca_db(...)``. A plain
``amqp://`` connection never asks, so it never pays. What a TLS connection gets is unchanged.

It replaces ``SSLConfig`` in ``proton._reactor``, the module ``Container.__init__`` looks it up in: written
against python-qpid-proton 0.40.0 (pinned in pyproject.toml, like wire/raw.py), and checked by
tests/unit/tools/test_lazyssl.py.
"""

from __future__ import annotations

from proton import SSLDomain
from proton import _reactor


class _DeferredDomain:
    """Stands in for ``SSLDomain(mode)`` and creates it on first use; every attribute is the real one's."""

    def __init__(self, mode: int) -> None:
        self._mode = mode
        self._real: SSLDomain | None = None

    @property
    def created(self) -> bool:
        """Whether the real domain exists yet."""
        return self._real is not None

    def __getattr__(self, name: str):
        # Only reached for names this object does not have: the real domain's methods and ``_domain``.
        if self._real is None:
            self._real = SSLDomain(self._mode)
        return getattr(self._real, name)


class DeferredSSLConfig(_reactor.SSLConfig):
    """proton's per-container ``ssl`` (``.client``, ``.server``, ``set_credentials``, ``set_trusted_ca_db``),
    with both domains created when first used."""

    def __init__(self) -> None:  # noqa: D107 - deliberately not calling the eager parent constructor
        self.client = _DeferredDomain(SSLDomain.MODE_CLIENT)
        self.server = _DeferredDomain(SSLDomain.MODE_SERVER)


def defer_ssl_domains() -> None:
    """Containers created from now on in this process make their SSL domains only when they use them."""
    _reactor.SSLConfig = DeferredSSLConfig
