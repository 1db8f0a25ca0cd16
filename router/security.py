"""TLS and SASL for listeners and connectors, from Dispatch's configuration vocabulary.

Qpid Dispatch 1.19 (``qdrouter.json``; ``src/connection_manager.c`` and ``src/server.c``):

* ``sslProfile { name certFile privateKeyFile caCertFile password passwordFile ciphers protocols }`` sections
  are named by a listener's or connector's ``sslProfile``; each becomes a :class:`wire.tls.TlsProfile` that is
  checked at start-up (a missing, unreadable or mismatched file is an error at the section's FILE:LINE).
  Paths are used as Dispatch uses them: handed to OpenSSL as written, so a relative path is relative to the
  daemon's working directory.
* listener: ``requireSsl`` (default false, ``connection_manager.c`` reads it with ``qd_entity_opt_bool(...,
  false)``) refuses plaintext; without it a listener with an sslProfile takes TLS and plaintext alike.
  ``requireEncryption`` means the same here (tdrouterd has no SASL security layers, so TLS is the only
  encryption). ``authenticatePeer: yes`` means no anonymous login and, on a TLS listener, a client
  certificate signed by the profile's caCertFile is required (``server.c``: "do we force the peer to send a
  cert?" when authentication is required).
* connector: ``sslProfile`` -> TLS client, the server verified against caCertFile and, with
  ``verifyHostname`` (default true), its certificate checked against ``host``.
* ``router { saslConfigDir, saslConfigName }`` name the Cyrus-style file ``<dir>/<name>.conf`` whose
  ``mech_list`` and ``sasldb_path`` (our users file, made with tdpasswd) give the users listeners check
  (:class:`wire.sasl.SaslConfigFile`). A listener's ``saslMechanisms`` narrows what it offers.

:class:`RouterSecurity` turns one listener or connector entity into ConnectionSettings arguments and a
ServerTls/ClientTls; anything it cannot enforce raises :class:`SecurityConfigError` naming the attribute,
which the daemon reports at FILE:LINE and management CREATE answers with 400.
"""

from __future__ import annotations

import os
from typing import Any

from wire.sasl import CLIENT_MECHANISMS, SaslConfigError, SaslConfigFile, server_mechanisms
from wire.tls import ClientTls, ServerTls, TlsConfigError, TlsProfile


class SecurityConfigError(ValueError):
    """A listener/connector security setting that cannot be enforced; ``attribute`` says which one."""

    def __init__(self, attribute: str | None, message: str):
        super().__init__(message)
        self.attribute = attribute


def resolve_secret(value: str | None) -> str | None:
    """Dispatch's password forms: ``env:VAR``, ``file:PATH`` (first line), ``pass:TEXT``, or the text.
    SecurityConfigError (never naming the value) when the variable is not set or the file cannot be read."""
    if value is None:
        return None
    if value.startswith("env:"):
        name = value[4:].strip()
        if name not in os.environ:
            raise SecurityConfigError("saslPassword", f"saslPassword: environment variable {name} is not set")
        return os.environ[name]
    if value.startswith("file:"):
        path = value[5:].strip()
        try:
            with open(path, encoding="utf-8") as f:
                return f.readline().rstrip("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise SecurityConfigError("saslPassword", f"saslPassword: cannot read {path}: "
                                      f"{getattr(exc, 'strerror', None) or exc}") from None
    if value.startswith("pass:"):
        return value[5:]
    return value


def _profile_attributes(entity) -> dict:
    """The sslProfile attributes TlsProfile knows, as given (absent ones left out)."""
    return {k: entity.get(k) for k in TlsProfile.ATTRIBUTES if entity.get(k) is not None}


def _mechanism_list(value: str | None) -> list[str]:
    return (value or "").replace(",", " ").upper().split()


class RouterSecurity:
    """The router's TLS profiles (by name) and SASL users, and how each listener/connector uses them."""

    def __init__(self, profiles: dict[str, TlsProfile] | None = None, sasl: SaslConfigFile | None = None):
        self.profiles = profiles or {}
        self.sasl = sasl

    @property
    def users(self):
        return self.sasl.users if self.sasl is not None else None

    @classmethod
    def from_config(cls, cfg, error) -> "RouterSecurity":
        """Load and check every sslProfile and the SASL configuration; ``error(entity, attribute, message)``
        makes the exception raised (the daemon's FILE:LINE ConfigError)."""
        profiles: dict[str, TlsProfile] = {}
        for entity in cfg.ssl_profiles:
            try:
                profile = TlsProfile.from_attributes(_profile_attributes(entity))
                profile.check()
            except TlsConfigError as exc:
                raise error(entity, exc.attribute, f"sslProfile {entity['name']}: {exc}") from None
            profiles[entity["name"]] = profile
        sasl = None
        router = cfg.router
        if router.get("saslConfigDir") is not None:
            try:
                sasl = SaslConfigFile.load(router["saslConfigDir"], router.get("saslConfigName") or "qdrouterd")
            except SaslConfigError as exc:
                raise error(router, "saslConfigDir", f"router: {exc}") from None
        elif "saslConfigName" in getattr(router, "attr_lines", {}):
            raise error(router, "saslConfigName", "router: saslConfigName needs saslConfigDir (the directory "
                        "of <saslConfigName>.conf)")
        security = cls(profiles, sasl)
        for entity in (*cfg.listeners, *cfg.connectors):
            try:
                security.connection_kwargs(entity.type, entity)
            except SecurityConfigError as exc:
                raise error(entity, exc.attribute, f"{entity.type}: {exc}") from None
        return security

    # -- per listener/connector -------------------------------------------------------------------------

    def _profile(self, entity) -> TlsProfile | None:
        name = entity.get("sslProfile")
        if name is None:
            return None
        profile = self.profiles.get(name)
        if profile is None:
            known = ", ".join(sorted(self.profiles)) or "none"
            raise SecurityConfigError("sslProfile", f"sslProfile '{name}' is not defined (sslProfile sections: "
                                      f"{known})")
        return profile

    def connection_kwargs(self, kind: str, entity) -> dict[str, Any]:
        """ConnectionSettings arguments for the entity's SASL, plus ``tls`` (ServerTls/ClientTls or None).
        Raises SecurityConfigError for a setting that cannot be enforced."""
        if kind == "listener":
            return self._listener(entity)
        return self._connector(entity)

    def _listener(self, entity) -> dict[str, Any]:
        profile = self._profile(entity)
        authenticate = bool(entity.get("authenticatePeer"))
        required = bool(entity.get("requireSsl")) or bool(entity.get("requireEncryption"))
        if required and profile is None:
            which = "requireSsl" if entity.get("requireSsl") else "requireEncryption"
            raise SecurityConfigError(which, f"{which}: yes needs an sslProfile (with certFile) on the listener")
        verify_client = profile is not None and authenticate
        tls = None
        if profile is not None:
            try:
                tls = ServerTls(profile.server_context(verify_client=verify_client), required=required,
                                user_ids=profile.user_ids())
            except TlsConfigError as exc:
                raise SecurityConfigError("sslProfile", f"sslProfile {profile.name}: {exc}") from None
        users = self.users
        configured = entity.get("saslMechanisms")
        if configured is None and self.sasl is not None and self.sasl.mechanisms:
            configured = " ".join(self.sasl.mechanisms)
        if configured is None:
            configured = "ANONYMOUS PLAIN SCRAM-SHA-256 SCRAM-SHA-512" if users is not None else "ANONYMOUS"
        try:
            offered = server_mechanisms(configured, with_users=users is not None, with_external=verify_client)
        except SaslConfigError as exc:
            raise SecurityConfigError("saslMechanisms", str(exc)) from None
        if self.sasl is not None and self.sasl.mechanisms and entity.get("saslMechanisms") is not None:
            outside = [m for m in offered if m not in self.sasl.mechanisms and m != "EXTERNAL"]
            if outside:
                raise SecurityConfigError("saslMechanisms", f"saslMechanisms {' '.join(outside)} not in the "
                                          f"mech_list of {self.sasl.path} ({' '.join(self.sasl.mechanisms)})")
        if authenticate:
            offered = [m for m in offered if m != "ANONYMOUS"]
            if not offered:
                raise SecurityConfigError("authenticatePeer", "authenticatePeer: yes leaves no mechanism to "
                                          "log in with: give users (router saslConfigDir naming a file with "
                                          "sasldb_path) or EXTERNAL with an sslProfile")
        return {"sasl_mechanisms": " ".join(offered), "authenticate_peer": authenticate,
                "sasl_users": users if any(m not in ("ANONYMOUS", "EXTERNAL") for m in offered) else None,
                "tls": tls}

    def _connector(self, entity) -> dict[str, Any]:
        profile = self._profile(entity)
        tls = None
        if profile is not None:
            verify = entity.get("verifyHostname")
            try:
                context = profile.client_context(verify_hostname=True if verify is None else bool(verify))
            except TlsConfigError as exc:
                raise SecurityConfigError("sslProfile", f"sslProfile {profile.name}: {exc}") from None
            tls = ClientTls(context, server_hostname=entity.get("host") or "127.0.0.1")
        given = _mechanism_list(entity.get("saslMechanisms"))
        username = entity.get("saslUsername")
        resolve_secret(entity.get("saslPassword"))  # an unset variable or unreadable file: refused now
        client_mechanisms = None
        if "EXTERNAL" in given:
            # Dispatch's usual inter-router set-up: the connector's sslProfile presents a client
            # certificate and SASL EXTERNAL names it as the user (wire/sasl.py SaslClient).
            if profile is None or not profile.cert_file:
                raise SecurityConfigError("saslMechanisms", "saslMechanisms EXTERNAL needs an sslProfile with a "
                                          "certFile (the client certificate EXTERNAL logs in with)")
            if username:
                raise SecurityConfigError("saslUsername", "saslUsername with saslMechanisms EXTERNAL: the "
                                          "certificate names the user; remove one of them")
            if given != ["EXTERNAL"]:
                raise SecurityConfigError("saslMechanisms", f"saslMechanisms {' '.join(given)}: EXTERNAL is "
                                          "given alone (the others need saslUsername)")
            return {"sasl_client_mechanisms": "EXTERNAL", "tls": tls}
        if username:
            unsupported = [m for m in given if m not in CLIENT_MECHANISMS]
            if unsupported:
                raise SecurityConfigError("saslMechanisms", f"saslMechanisms {' '.join(unsupported)}: a connector "
                                          f"with saslUsername logs in with {' '.join(CLIENT_MECHANISMS)}")
            if given and given != ["PLAIN"]:
                client_mechanisms = " ".join(given)  # SCRAM: our SaslClient (proton's client lacks it)
        elif given and given != ["ANONYMOUS"]:
            raise SecurityConfigError("saslMechanisms", f"saslMechanisms {' '.join(given)} needs saslUsername "
                                      "(without one the connector logs in with ANONYMOUS)")
        return {"sasl_client_mechanisms": client_mechanisms, "tls": tls}
