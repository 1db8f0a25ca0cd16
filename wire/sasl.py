"""SASL set-up for listeners and connectors.

Two ways a connection does SASL, chosen by :func:`sasl_layer` from its
:class:`wire.connection.ConnectionSettings`:

- proton's own SASL (the behaviour when no users are configured): servers offer ANONYMOUS only; clients
  log in with ANONYMOUS, or with PLAIN when the settings carry a ``sasl_username``.
- our SASL layer (:mod:`wire.saslserver`), in front of an engine configured without SASL: servers whose
  settings carry ``sasl_users`` (a :class:`wire.users.Users`) offer ANONYMOUS (unless
  ``authenticate_peer``), PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and check passwords; clients whose
  settings name ``sasl_client_mechanisms`` log in with :class:`SaslClient` (SCRAM, which proton's
  bundled client side lacks, or PLAIN).

``configure_sasl`` and ``sasl_layer`` are the one place that decides which mechanisms a listener offers
and how a connector authenticates.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets

from wire.amqptypes import Symbol
from wire.saslserver import (AUTH_FAILED, FRAMING_ERROR, OUTCOME_OK, PLAIN as _PLAIN, SASL_CHALLENGE,
                             SASL_HEADER, SASL_INIT, SASL_MECHANISMS, SASL_OUTCOME, SASL_RESPONSE,
                             SCRAM_MECHANISMS, SUPPORTED_MECHANISMS, SaslLayer, SaslServer, SaslProtocolError,
                             auth_signatures, b64, encode_frame, field, saslname_encode, scram_attributes,
                             scram_error, unb64, valid_nonce, xor)
from wire.users import (MAX_ITERATIONS, ScramCredential, Users, UsersFileError, client_key, editor_lines,
                        salted_password)

log = logging.getLogger("wire.sasl")

# Mechanisms a listener can offer without a users file (proton's SASL), and with one (wire.saslserver;
# EXTERNAL needs TLS client certificates, which come later).
SERVER_MECHANISMS = frozenset({"ANONYMOUS"})
SERVER_MECHANISMS_WITH_USERS = frozenset(m for m in SUPPORTED_MECHANISMS if m != "EXTERNAL")
# What a client offers: PLAIN when it has credentials (the password is the only secret it can prove),
# ANONYMOUS otherwise.
CLIENT_PLAIN = "PLAIN"
CLIENT_ANONYMOUS = "ANONYMOUS"


class SaslConfigError(ValueError):
    """A listener asks for a mechanism this build cannot serve."""


def server_mechanisms(configured: str | None, *, with_users: bool = False, with_external: bool = False) -> list[str]:
    """The mechanisms a listener offers: its ``saslMechanisms`` list, restricted to what we can serve
    (PLAIN and SCRAM only with a users file; EXTERNAL only on a listener that verifies TLS client
    certificates: ``with_external``). SaslConfigError names what cannot be served."""
    supported = set(SERVER_MECHANISMS_WITH_USERS if with_users else SERVER_MECHANISMS)
    if with_external:
        supported.add("EXTERNAL")
    wanted = (configured or "ANONYMOUS").replace(",", " ").split()
    unknown = [m for m in wanted if m.upper() not in supported]
    if unknown:
        hint = "" if with_users else " without a users file (sasldb_path)"
        if "EXTERNAL" in (m.upper() for m in unknown) and not with_external:
            hint += "; EXTERNAL needs TLS with client certificates verified"
        raise SaslConfigError(
            f"saslMechanisms {' '.join(unknown)} not supported{hint} (supported: {' '.join(sorted(supported))})"
        )
    return [m.upper() for m in wanted]


def sasl_layer(settings, *, server: bool) -> SaslLayer | None:
    """Our SASL layer for a connection with these settings, or None when proton's SASL does the job."""
    if server:
        users = getattr(settings, "sasl_users", None)
        wanted = (settings.sasl_mechanisms or "").upper().replace(",", " ").split()
        if users is None and "EXTERNAL" not in wanted:
            return None
        # The listener's configuration has checked that EXTERNAL goes with verified client certificates;
        # the layer offers it only once the driver has set the certificate's name (external_user).
        return SaslServer(users or Users(), server_mechanisms(settings.sasl_mechanisms, with_users=True,
                                                              with_external=True),
                          allow_anonymous=not settings.authenticate_peer)
    mechanisms = getattr(settings, "sasl_client_mechanisms", None)
    if not mechanisms:
        return None
    only_external = mechanisms.replace(",", " ").upper().split() == [_EXTERNAL]
    if not getattr(settings, "sasl_username", None) and not only_external:
        raise SaslConfigError(f"client SASL mechanisms {mechanisms} need a user name")
    return SaslClient(settings.sasl_username or "", settings.sasl_password or "",
                      mechanisms.replace(",", " ").split())


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
    # proton refuses PLAIN over a connection without TLS unless told otherwise ("insecure" mechanism):
    # TLS, when there is any, runs outside the engine (wire/driver.py), so proton cannot tell. The driver
    # warns when the password really crosses the network in clear (warn_plaintext_password).
    sasl.allow_insecure_mechs = True


def warn_plaintext_password(settings, remote_host: str) -> None:
    """Log a WARNING when a client connection without TLS to another machine would send its password in
    clear text (SASL PLAIN; SCRAM never sends it). The driver calls this for connections without TLS."""
    if not getattr(settings, "sasl_username", None) or not remote_host or is_loopback(remote_host):
        return
    mechanisms = getattr(settings, "sasl_client_mechanisms", None)
    if mechanisms is None or "PLAIN" in mechanisms.split():
        log.warning("SASL PLAIN to %s would send the password unencrypted: configure TLS (sslProfile) or SCRAM",
                    remote_host)


# -- our own client half: SCRAM (and PLAIN) without proton's SASL ------------------------------------------

# proton's bundled client side knows ANONYMOUS, PLAIN and EXTERNAL only (no Cyrus SASL in the wheel), so
# a connector that lists a SCRAM mechanism in ``sasl_client_mechanisms`` logs in through SaslClient.
# EXTERNAL (RFC 4422 appendix A) is ours too: our transports do TLS outside the engine (wire/tls.py), so
# proton cannot see the certificate that EXTERNAL rests on.
_EXTERNAL = "EXTERNAL"
CLIENT_MECHANISMS = SCRAM_MECHANISMS + (_PLAIN,)
CLIENT_MECHANISMS_WITH_CERTIFICATE = CLIENT_MECHANISMS + (_EXTERNAL,)
CLIENT_NONCE_BYTES = 18


class SaslClient(SaslLayer):
    """The client half of our SASL layer: picks the first of ``mechanisms`` the server offers and logs in.

    SCRAM (RFC 5802 §5, RFC 7677): client-first ``n,,n=USER,r=NONCE`` in sasl-init, client-final in
    sasl-response, and the server's signature (``v=``, in the outcome's additional-data) is verified:
    a server that does not know the password cannot pass. PLAIN: ``NUL user NUL password``.
    """

    def __init__(self, username: str, password: str, mechanisms=CLIENT_MECHANISMS, *, hostname: str | None = None):
        super().__init__()
        self.username = username
        self.password = password
        self.allowed = [m.upper() for m in mechanisms]
        unknown = [m for m in self.allowed if m not in CLIENT_MECHANISMS_WITH_CERTIFICATE]
        if unknown:
            raise SaslConfigError(f"client SASL mechanisms {' '.join(unknown)} not supported "
                                  f"(supported: {' '.join(CLIENT_MECHANISMS_WITH_CERTIFICATE)})")
        self.hostname = hostname
        self._state = "mechanisms"
        self._scram = None
        self._out += SASL_HEADER  # the client speaks first (AMQP 1.0 §5.3.1)

    def on_header(self, header: bytes) -> bool:
        if header != SASL_HEADER:
            raise SaslProtocolError(f"{FRAMING_ERROR}: server answered with protocol header {header!r}, not SASL")
        return True

    def on_frame(self, code: int, fields: list) -> None:
        if self._state == "mechanisms" and code == SASL_MECHANISMS:
            offered = field(fields, 0, list, "sasl-server-mechanisms", required=True)
            offered = [str(m) for m in offered]
            chosen = next((m for m in self.allowed if m in offered), None)
            if chosen is None:
                self.fail(f"{AUTH_FAILED}: server offers SASL {' '.join(offered)}; we allow {' '.join(self.allowed)}")
                return
            self.mechanism = chosen
            self._out += encode_frame(SASL_INIT, [Symbol(chosen), self._initial_response(chosen), self.hostname])
            self._state = "outcome" if chosen in (_PLAIN, _EXTERNAL) else "challenge"
        elif self._state == "challenge" and code == SASL_CHALLENGE:
            challenge = field(fields, 0, bytes, "challenge", required=True)
            self._out += encode_frame(SASL_RESPONSE, [self._client_final(challenge)])
            self._state = "outcome"
        elif self._state in ("outcome", "challenge") and code == SASL_OUTCOME:
            self._outcome(int(field(fields, 0, int, "code", required=True)), field(fields, 1, bytes, "additional-data"))
        else:
            raise SaslProtocolError(f"{FRAMING_ERROR}: unexpected SASL performative 0x{code:02x}")

    def _initial_response(self, mechanism: str) -> bytes:
        if mechanism == _EXTERNAL:
            return b""  # no authorization identity: the server takes the certificate's (RFC 4422 A.1)
        if mechanism == _PLAIN:
            return b"\x00" + self.username.encode("utf-8") + b"\x00" + self.password.encode("utf-8")
        nonce = secrets.token_urlsafe(CLIENT_NONCE_BYTES)
        bare = f"n={saslname_encode(self.username)},r={nonce}"
        self._scram = [nonce, bare, None]
        return ("n,," + bare).encode("utf-8")

    def _client_final(self, challenge: bytes) -> bytes:
        nonce, bare, _ = self._scram
        try:
            server_first = challenge.decode("ascii")
        except UnicodeDecodeError:
            raise scram_error("server-first-message is not ASCII") from None
        attrs = scram_attributes(server_first, "rsi")
        if not attrs["r"].startswith(nonce) or len(attrs["r"]) == len(nonce) or not valid_nonce(attrs["r"]):
            raise scram_error("server nonce does not extend ours")
        if not attrs["i"].isdigit() or not 1 <= int(attrs["i"]) <= MAX_ITERATIONS:
            raise scram_error(f"iteration count {attrs['i'][:20]!r} outside 1..{MAX_ITERATIONS}")
        salt, iterations = unb64(attrs["s"], "salt"), int(attrs["i"])
        salted = salted_password(self.mechanism, self.password, salt, iterations)
        cred = ScramCredential.from_salted(self.mechanism, salted, salt, iterations)
        without_proof = f"c={b64(b'n,,')},r={attrs['r']}"
        auth_message = f"{bare},{server_first},{without_proof}".encode("utf-8")
        client_signature, server_signature = auth_signatures(cred, auth_message)
        self._scram[2] = server_signature
        proof = xor(client_key(salted, cred.hash_name), client_signature)
        return f"{without_proof},p={b64(proof)}".encode("ascii")

    def _outcome(self, code: int, additional: bytes | None) -> None:
        if code != OUTCOME_OK:
            self.fail(f"{AUTH_FAILED}: SASL {self.mechanism} login as {self.username!r} refused (outcome code {code})")
            return
        if self.mechanism in SCRAM_MECHANISMS:
            expected = self._scram[2] if self._scram else None
            got = additional.decode("ascii", "replace") if additional else ""
            if expected is None or not hmac.compare_digest(got.encode("ascii", "replace"),
                                                           f"v={b64(expected)}".encode("ascii")):
                self.fail(f"{AUTH_FAILED}: SCRAM server signature missing or wrong: the server does not know "
                          f"{self.username!r}'s password")
                return
        self.user = self.username
        self.done = True



# -- Cyrus-style SASL configuration file ---------------------------------------------------------------------

# The Cyrus SASL options a <saslConfigDir>/<saslConfigName>.conf may hold, and the only values we act on:
# users come from our users file (wire/users.py) through sasldb_path, checked in-process ("auxprop" with
# the "sasldb" plugin is the Cyrus set-up that file replaces). Anything else would be a setting we do
# not enforce, so it is refused.
CYRUS_FIXED_OPTIONS = {"pwcheck_method": "auxprop", "auxprop_plugin": "sasldb"}
CYRUS_OPTIONS = ("mech_list", "sasldb_path") + tuple(CYRUS_FIXED_OPTIONS)


class SaslConfigFile:
    """What a Cyrus-style SASL configuration file says (Dispatch's ``router { saslConfigDir,
    saslConfigName }`` name ``<dir>/<name>.conf``): ``mechanisms`` from ``mech_list:`` (None when absent)
    and ``users`` loaded from ``sasldb_path:`` (None when absent).

    ``sasldb_path`` relative to the file is resolved against the file's directory (Cyrus would use the
    daemon's working directory, which makes the same file mean different things). Errors are
    :class:`SaslConfigError` starting with FILE:LINE."""

    def __init__(self, path: str, mechanisms: list[str] | None, sasldb_path: str | None, users):
        self.path = path
        self.mechanisms = mechanisms
        self.sasldb_path = sasldb_path
        self.users = users

    @classmethod
    def load(cls, config_dir: str, config_name: str) -> "SaslConfigFile":
        path = os.path.join(config_dir, f"{config_name}.conf")
        try:
            with open(path, encoding="utf-8") as f:
                lines = editor_lines(f.read())
        except (OSError, UnicodeDecodeError) as exc:
            raise SaslConfigError(f"{path}: cannot read the SASL configuration: "
                                  f"{getattr(exc, 'strerror', None) or exc}") from None
        mechanisms = sasldb_path = users = None
        for lineno, raw_line in enumerate(lines, 1):
            line = raw_line.strip()
            if not line or line.startswith("#"):
                continue
            where = f"{path}:{lineno}"
            key, colon, value = line.partition(":")
            key, value = key.strip(), value.strip()
            if not colon or key not in CYRUS_OPTIONS:
                raise SaslConfigError(f"{where}: unsupported SASL option {key[:40]!r} "
                                      f"(supported: {', '.join(CYRUS_OPTIONS)})")
            if key in CYRUS_FIXED_OPTIONS:
                if value != CYRUS_FIXED_OPTIONS[key]:
                    raise SaslConfigError(f"{where}: {key}: {value[:40]!r} not supported (only "
                                          f"{CYRUS_FIXED_OPTIONS[key]!r}: users come from sasldb_path)")
            elif key == "mech_list":
                try:
                    mechanisms = server_mechanisms(value, with_users=True)
                except SaslConfigError as exc:
                    raise SaslConfigError(f"{where}: mech_list: {exc}") from None
            else:
                sasldb_path = os.path.join(os.path.dirname(path), value)
                try:
                    users = Users.load(sasldb_path)
                except UsersFileError as exc:
                    raise SaslConfigError(f"{where}: sasldb_path: {exc}") from None
        if mechanisms and users is None and any(m != "ANONYMOUS" for m in mechanisms):
            raise SaslConfigError(f"{path}: mech_list {' '.join(mechanisms)} needs users: add sasldb_path "
                                  "naming a users file (made with tdpasswd)")
        return cls(path, mechanisms, sasldb_path, users)
