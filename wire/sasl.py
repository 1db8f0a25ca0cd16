"""SASL set-up for listeners and connectors.

Servers offer ANONYMOUS only (PLAIN against a users file would plug in here). Clients log in with
ANONYMOUS, or with PLAIN when their :class:`wire.connection.ConnectionSettings` carry a
``sasl_username``. ``configure_sasl`` is the single place that decides which mechanisms a listener
offers and how a connector authenticates, so adding an authenticator touches this module and the
listener's configuration only.
"""

from __future__ import annotations

import ipaddress
import logging

log = logging.getLogger("wire.sasl")

# Mechanisms this build can verify on the server side. PLAIN needs a credential store (a later issue).
SERVER_MECHANISMS = frozenset({"ANONYMOUS"})
# What a client offers: PLAIN when it has credentials (the password is the only secret it can prove),
# ANONYMOUS otherwise.
CLIENT_PLAIN = "PLAIN"
CLIENT_ANONYMOUS = "ANONYMOUS"


class SaslConfigError(ValueError):
    """A listener asks for a mechanism this build cannot serve."""


def server_mechanisms(configured: str | None) -> list[str]:
    """The mechanisms a listener offers: its ``saslMechanisms`` list, restricted to what we can serve."""
    wanted = (configured or "ANONYMOUS").replace(",", " ").split()
    unknown = [m for m in wanted if m.upper() not in SERVER_MECHANISMS]
    if unknown:
        raise SaslConfigError(
            f"saslMechanisms {' '.join(unknown)} not supported yet (supported: {' '.join(sorted(SERVER_MECHANISMS))})"
        )
    return [m.upper() for m in wanted]


def is_loopback(remote_host: str) -> bool:
    """True when ``remote_host`` (``host``, ``host:port`` or ``[v6]:port``) names this machine."""
    host = remote_host.strip()
    if host.startswith("["):
        host = host[1:].partition("]")[0]
    elif host.count(":") == 1:
        host = host.partition(":")[0]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def configure_sasl(transport, settings, *, server: bool, connection=None, remote_host: str = "") -> None:
    """Attach a SASL layer to a transport according to the listener/connector settings.

    Must run before ``transport.bind(connection)``: proton hands the connection's user and password to
    the SASL layer at bind time, so a client's PLAIN credentials are set on ``connection`` here.
    """
    sasl = transport.sasl()
    if server:
        sasl.allowed_mechs(" ".join(server_mechanisms(settings.sasl_mechanisms)))
        # A client that skips SASL and sends the AMQP header directly is accepted when the listener does
        # not authenticate peers (Dispatch's authenticatePeer: no).
        transport.require_auth(bool(settings.authenticate_peer))
        return
    username = getattr(settings, "sasl_username", None)
    if not username:
        sasl.allowed_mechs(CLIENT_ANONYMOUS)
        return
    if connection is None:
        raise ValueError("SASL PLAIN needs the connection: proton reads the credentials from it at bind")
    connection.user = username
    connection.password = getattr(settings, "sasl_password", None) or ""
    sasl.allowed_mechs(CLIENT_PLAIN)
    # proton refuses PLAIN over a connection without TLS unless told otherwise ("insecure" mechanism),
    # and this build has no TLS: allow it, which is harmless on loopback; elsewhere the password
    # crosses the network in clear text, so say so.
    sasl.allow_insecure_mechs = True
    if remote_host and not is_loopback(remote_host):
        log.warning("SASL PLAIN to %s sends the password unencrypted (no TLS in this build)", remote_host)
