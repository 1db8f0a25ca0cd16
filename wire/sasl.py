"""SASL set-up for listeners and connectors.

Only ANONYMOUS is served now. PLAIN against a users file plugs in here: ``configure_sasl`` is the single
place that decides which mechanisms a listener offers and how a connector authenticates, so adding an
authenticator touches this module and the listener's configuration only.
"""

from __future__ import annotations


# Mechanisms this build can verify on the server side. PLAIN needs a credential store (a later issue).
SERVER_MECHANISMS = frozenset({"ANONYMOUS"})


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


def configure_sasl(transport, settings, *, server: bool) -> None:
    """Attach a SASL layer to a transport according to the listener/connector settings."""
    sasl = transport.sasl()
    if server:
        sasl.allowed_mechs(" ".join(server_mechanisms(settings.sasl_mechanisms)))
        # A client that skips SASL and sends the AMQP header directly is accepted when the listener does
        # not authenticate peers (Dispatch's authenticatePeer: no).
        transport.require_auth(bool(settings.authenticate_peer))
    else:
        sasl.allowed_mechs("ANONYMOUS")
