"""TLS for listeners and connectors (router and broker): Dispatch's ``sslProfile`` made into SSL contexts.

A :class:`TlsProfile` holds one ``sslProfile``'s attributes (Qpid Dispatch Router's management schema,
``qdrouterd.json``, entity ``sslProfile``): ``certFile``, ``privateKeyFile``, ``caCertFile``, ``password``
(or the older ``passwordFile``), ``ciphers`` and ``protocols``. It makes the two kinds of context:

- :meth:`TlsProfile.server_context` for a listener: presents ``certFile``/``privateKeyFile``; with
  ``verify_client`` it requires a client certificate signed by ``caCertFile`` (Dispatch's listener
  ``authenticatePeer`` with SASL EXTERNAL, Artemis's acceptor ``needClientAuth=true``).
- :meth:`TlsProfile.client_context` for a connector: verifies the server against ``caCertFile`` (the
  system's trust store when none is given) and, unless ``verify_hostname`` is off (Dispatch's connector
  ``verifyHostname``, default true), that the certificate names the host dialled. A client certificate is
  presented when the profile has one (for SASL EXTERNAL at the other end).

For tdbroker, :func:`artemis_tls` reads Artemis's acceptor and connection URI parameters (``sslEnabled``,
``keyStorePath`` as one PEM file holding certificate chain and key, ``keyStorePassword``,
``trustStorePath`` as PEM CA certificates, ``needClientAuth``, ``verifyHost``, ``enabledProtocols``) into
the same profile; other store types and the TLS parameters not implemented are refused by name.

The minimum protocol is TLS 1.2 unless ``protocols`` names older ones (TLS 1.0/1.1 are deprecated by
RFC 8996). ``ciphers`` is an OpenSSL cipher list and applies to TLS 1.2 and below; TLS 1.3 suites are
OpenSSL's defaults (Python's ssl module cannot set them).

``uidFormat`` and ``uidNameMappingFile`` (Dispatch's sslProfile, DISPATCH-200; Dispatch's
``tests/system_tests_user_id.py`` shows the results) choose the user name a client certificate logs in
with through SASL EXTERNAL: without them the certificate's subject; with ``uidFormat`` the fields its
letters name, in that order, joined by ``;`` — ``c`` country, ``s`` state or province, ``l`` locality,
``o`` organization, ``u`` organizational unit, ``n`` common name, ``1``/``2``/``5`` the SHA-1/SHA-256/
SHA-512 fingerprint of the whole certificate (lower-case hex); a field the certificate lacks is left
out. ``uidNameMappingFile`` is a JSON object from such ids to display names, looked up after. See
:class:`CertificateUserIds`. Dispatch logs a ``uidFormat`` with a letter it does not know and falls back
to the subject; here that is a start-up error (a policy written for the ids would silently not match).

``password`` takes Dispatch's forms: ``env:VAR`` (from the environment), ``file:PATH`` (the file's first
line), ``literal:TEXT`` or ``pass:TEXT``, or plain text. It decrypts an encrypted private key.

Every problem a profile can have (a file missing or unreadable, a key that does not match the certificate
or whose password is wrong, an unknown protocol, a cipher list OpenSSL rejects) raises
:class:`TlsConfigError` naming the attribute and the path or value, when the context is made, i.e. at
start-up; the configuration layer adds FILE:LINE. The same errors are found by :meth:`TlsProfile.check`.

Why Trio's :class:`trio.SSLStream` (wire/driver.py; :class:`ServerTls` and :class:`ClientTls` carry a
context to a listener or connector) and not proton's engine TLS: our server-side SASL (wire/saslserver.py)
reads the SASL frames in front of the proton engine, so TLS must be undone before the bytes reach it; with
TLS inside the engine that layer would see ciphertext. Measured (tdbench's direct load, one sender and
one receiver in one process, 100-byte at-least-once messages, 300 000 messages, 3 runs each): plaintext
5.9 us CPU per message, SSLStream 6.6 us (+0.7 us for both ends: +12%), proton engine TLS 6.0 us
(+0.1 us). Through a router (an in-process Router behind serve_listener, one sender and one receiver,
400 000 messages, 4 paired runs): router CPU 6.8-7.4 us per message plaintext, +0.7 to +0.9 us (+10-12%)
with both connections over SSLStream. The difference does not pay for giving up our SASL layer.
:func:`peer_info` reads what the handshake established (protocol, cipher, the peer's certificate subject
in RFC 4514 form) for SASL EXTERNAL and for the management ``connection`` entity's ``isEncrypted``,
``sslProto``, ``sslCipher`` and ``sslSsf``.
"""

from __future__ import annotations

import hashlib
import json
import os
import ssl
from dataclasses import dataclass, field

# Dispatch's ``protocols`` names (OpenSSL's spelling) and the versions they mean.
PROTOCOL_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
# Without ``protocols``: TLS 1.2 and up (RFC 8996 deprecates 1.0 and 1.1).
DEFAULT_MINIMUM_VERSION = ssl.TLSVersion.TLSv1_2

# Short names OpenSSL uses in subjects, for the RFC 4514 form of a peer's subject (RFC 4514 §3 lists
# CN, L, ST, O, OU, C, STREET, DC, UID); Python's ssl module gives the long names.
_SUBJECT_SHORT_NAMES = {
    "commonName": "CN",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
    "emailAddress": "emailAddress",
}


class TlsConfigError(ValueError):
    """An ``sslProfile`` that cannot be used: names the attribute and the path or value at fault."""

    def __init__(self, attribute: str, message: str):
        super().__init__(f"{attribute}: {message}")
        self.attribute = attribute


@dataclass(frozen=True)
class TlsPeerInfo:
    """What a TLS handshake established about one connection."""

    protocol: str  # e.g. "TLSv1.3" (Dispatch's connection attribute sslProto)
    cipher: str  # OpenSSL's cipher name (sslCipher)
    bits: int  # secret bits of the cipher (sslSsf)
    peer_subject: str | None  # the peer certificate's subject, RFC 4514 (None: no certificate)
    peer_certificate: bytes | None = field(default=None, repr=False)  # DER, for fingerprints
    # The verified certificate's subject as ssl's getpeercert() gives it (RDNs of (long name, value)).
    peer_subject_rdns: tuple = field(default=(), repr=False)


#: uidFormat letters -> the subject attribute (ssl's long name) or the digest over the DER certificate.
UID_SUBJECT_FIELDS = {"c": "countryName", "s": "stateOrProvinceName", "l": "localityName",
                      "o": "organizationName", "u": "organizationalUnitName", "n": "commonName"}
UID_DIGESTS = {"1": "sha1", "2": "sha256", "5": "sha512"}
UID_SEPARATOR = ";"
#: A uidNameMappingFile bigger than this is refused: it is read whole at start-up.
MAX_UID_MAPPING_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class CertificateUserIds:
    """The user name a verified client certificate logs in with (SASL EXTERNAL): the subject, or the
    fields ``uid_format`` names joined by ``;``, then translated by ``names`` (uidNameMappingFile)."""

    uid_format: str | None = None
    names: dict = field(default_factory=dict, repr=False)

    def user_for(self, info: TlsPeerInfo) -> str | None:
        if info.peer_subject is None:
            return None
        uid = info.peer_subject
        if self.uid_format:
            parts = []
            for letter in self.uid_format:
                if letter in UID_DIGESTS:
                    if info.peer_certificate:
                        parts.append(hashlib.new(UID_DIGESTS[letter], info.peer_certificate).hexdigest())
                    continue
                wanted = UID_SUBJECT_FIELDS[letter]
                value = next((v for rdn in info.peer_subject_rdns for k, v in rdn if k == wanted), None)
                if value is not None:
                    parts.append(value)
            if parts:
                uid = UID_SEPARATOR.join(parts)
        return self.names.get(uid, uid)


@dataclass(frozen=True)
class TlsProfile:
    """One ``sslProfile``: certificate, key, trusted CAs, key password, ciphers and protocols.

    Paths are used as given (the configuration layer resolves them against the config file's folder).
    """

    name: str = ""
    cert_file: str | None = None
    private_key_file: str | None = None
    ca_cert_file: str | None = None
    password: str | None = field(default=None, repr=False)
    password_file: str | None = None
    ciphers: str | None = None
    protocols: str | None = None
    uid_format: str | None = None
    uid_name_mapping_file: str | None = None

    # Dispatch's attribute names, in the order they are checked.
    ATTRIBUTES = ("name", "certFile", "privateKeyFile", "caCertFile", "password", "passwordFile",
                  "ciphers", "protocols", "uidFormat", "uidNameMappingFile")

    @classmethod
    def from_attributes(cls, attrs: dict) -> "TlsProfile":
        """A profile from Dispatch's attribute names (``certFile`` ...); an unknown name is an error."""
        unknown = sorted(set(attrs) - set(cls.ATTRIBUTES))
        if unknown:
            raise TlsConfigError(unknown[0], f"not an sslProfile attribute (known: {', '.join(cls.ATTRIBUTES)})")
        return cls(name=attrs.get("name", ""), cert_file=attrs.get("certFile"),
                   private_key_file=attrs.get("privateKeyFile"), ca_cert_file=attrs.get("caCertFile"),
                   password=attrs.get("password"), password_file=attrs.get("passwordFile"),
                   ciphers=attrs.get("ciphers"), protocols=attrs.get("protocols"),
                   uid_format=attrs.get("uidFormat"), uid_name_mapping_file=attrs.get("uidNameMappingFile"))

    def user_ids(self) -> CertificateUserIds:
        """How a client certificate becomes a user name on a listener with this profile; raises
        :class:`TlsConfigError` for a uidFormat letter Dispatch does not define or a mapping file that is
        not a JSON object of strings."""
        fmt = self.uid_format
        if fmt is not None:
            unknown = sorted(set(fmt) - set(UID_SUBJECT_FIELDS) - set(UID_DIGESTS))
            if unknown or not fmt:
                raise TlsConfigError("uidFormat", f"{fmt!r}: {', '.join(map(repr, unknown)) or 'empty'} is not a "
                                     "field (c s l o u n, or 1 2 5 for the SHA-1/256/512 fingerprint)")
        names: dict = {}
        path = self.uid_name_mapping_file
        if path:
            _readable("uidNameMappingFile", path)
            try:
                if os.path.getsize(path) > MAX_UID_MAPPING_BYTES:
                    raise TlsConfigError("uidNameMappingFile", f"{path}: over {MAX_UID_MAPPING_BYTES} bytes")
                with open(path, encoding="utf-8") as f:
                    names = json.load(f)
            except (OSError, UnicodeDecodeError, ValueError) as exc:
                raise TlsConfigError("uidNameMappingFile", f"{path}: not a JSON object ({exc})") from None
            if not isinstance(names, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in names.items()):
                raise TlsConfigError("uidNameMappingFile", f"{path}: must be a JSON object of user id -> name "
                                     "strings")
        return CertificateUserIds(fmt or None, names)

    # -- contexts -------------------------------------------------------------------------------------

    def server_context(self, *, verify_client: bool = False) -> ssl.SSLContext:
        """A listener's context: presents certFile; with ``verify_client`` a client certificate signed by
        caCertFile is required (a handshake without one fails)."""
        if not self.cert_file:
            raise TlsConfigError("certFile", f"sslProfile {self.name!r} has no certFile: a TLS listener "
                                 "must present a certificate")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._common(ctx)
        if verify_client:
            if not self.ca_cert_file:
                raise TlsConfigError("caCertFile", f"sslProfile {self.name!r} has no caCertFile: needed to "
                                     "verify client certificates")
            ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self, *, verify_hostname: bool = True) -> ssl.SSLContext:
        """A connector's context: verifies the server against caCertFile (the system's CAs when the
        profile has none) and, with ``verify_hostname``, that its certificate names the host."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = verify_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED
        if not self.ca_cert_file:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        self._common(ctx)
        return ctx

    def check(self) -> None:
        """Raise :class:`TlsConfigError` for anything that would make a context fail (for start-up)."""
        if self.cert_file:
            self.server_context()
        else:
            self.client_context()
        self.user_ids()

    def _common(self, ctx: ssl.SSLContext) -> None:
        self._set_protocols(ctx)
        if self.ciphers:
            try:
                ctx.set_ciphers(self.ciphers)
            except ssl.SSLError as exc:
                raise TlsConfigError("ciphers", f"{self.ciphers!r}: OpenSSL accepts none of these ({exc})") from None
        if self.ca_cert_file:
            _readable("caCertFile", self.ca_cert_file)
            try:
                ctx.load_verify_locations(cafile=self.ca_cert_file)
            except ssl.SSLError as exc:
                raise TlsConfigError("caCertFile", f"{self.ca_cert_file}: not PEM certificates ({exc})") from None
        if self.cert_file:
            self._load_chain(ctx)
        elif self.private_key_file:
            raise TlsConfigError("privateKeyFile", f"{self.private_key_file}: given without a certFile")

    def _load_chain(self, ctx: ssl.SSLContext) -> None:
        _readable("certFile", self.cert_file)
        if self.private_key_file:
            _readable("privateKeyFile", self.private_key_file)
        password = self.key_password()
        try:
            # A callable: without a password, an encrypted key fails instead of prompting on the terminal.
            ctx.load_cert_chain(self.cert_file, self.private_key_file, password=lambda: password or "")
        except ssl.SSLError as exc:
            raise self._chain_error(exc) from None

    def _chain_error(self, exc: ssl.SSLError) -> TlsConfigError:
        key = self.private_key_file or self.cert_file
        reason = (exc.reason or "").upper()
        if "KEY_VALUES_MISMATCH" in reason:
            return TlsConfigError("privateKeyFile", f"{key}: the key does not match certFile {self.cert_file}")
        # OpenSSL says only "PEM lib" for a wrong password: an encrypted key tells the two apart.
        if _is_encrypted_key(key):
            if self.password is None and self.password_file is None:
                return TlsConfigError("password", f"{key}: the private key is encrypted and the profile has "
                                      "no password (or passwordFile)")
            which = "password" if self.password is not None else "passwordFile"
            return TlsConfigError(which, f"{key}: wrong password for the private key")
        which = "privateKeyFile" if self.private_key_file else "certFile"
        return TlsConfigError(which, f"{key}: not a PEM private key matching certFile {self.cert_file} ({exc})")

    def _set_protocols(self, ctx: ssl.SSLContext) -> None:
        if not self.protocols:
            ctx.minimum_version = DEFAULT_MINIMUM_VERSION
            return
        names = self.protocols.replace(",", " ").split()
        unknown = [n for n in names if n not in PROTOCOL_VERSIONS]
        if unknown or not names:
            raise TlsConfigError("protocols", f"{self.protocols!r}: unknown protocol {' '.join(unknown)} "
                                 f"(known: {' '.join(PROTOCOL_VERSIONS)})")
        versions = sorted(PROTOCOL_VERSIONS[n] for n in names)
        # OpenSSL allows a range: the versions listed are its ends (a gap inside cannot be expressed).
        ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]

    def key_password(self) -> str | None:
        """The private key's password from ``password`` (env:/file:/literal:/pass: or plain) or
        ``passwordFile``; None when the profile has neither."""
        if self.password is not None:
            scheme, sep, rest = self.password.partition(":")
            if sep and scheme == "env":
                value = os.environ.get(rest)
                if value is None:
                    raise TlsConfigError("password", f"env:{rest}: no such environment variable")
                return value
            if sep and scheme == "file":
                return _first_line("password", rest)
            if sep and scheme in ("literal", "pass"):
                return rest
            return self.password
        if self.password_file:
            return _first_line("passwordFile", self.password_file)
        return None


@dataclass(frozen=True)
class ServerTls:
    """A listener's TLS: its context, and whether plaintext is refused (Dispatch's listener
    ``requireSsl``) or accepted beside TLS (a listener with an sslProfile and ``requireSsl: no``). The
    default here is the safe one; the configuration layer sets it from ``requireSsl``."""

    context: ssl.SSLContext
    required: bool = True
    user_ids: CertificateUserIds = field(default_factory=CertificateUserIds)


@dataclass(frozen=True)
class ClientTls:
    """A connector's TLS: its context and the name the server's certificate must carry (and that SNI
    sends); None means the host dialled."""

    context: ssl.SSLContext
    server_hostname: str | None = None


# Artemis's TLS URI parameters on acceptors and connection URIs (Artemis docs, "Configuring the Transport",
# TLS/SSL parameters) that tdbroker understands. Key and trust stores must be PEM: keyStorePath one file
# with the certificate chain and the private key, trustStorePath the CA certificates.
ARTEMIS_TLS_PARAMETERS = ("sslEnabled", "keyStorePath", "keyStorePassword", "keyStoreType", "trustStorePath",
                          "trustStoreType", "needClientAuth", "verifyHost", "enabledProtocols")
# Parameters of Artemis's TLS family that are refused: their meaning (Java cipher names, JSSE/OpenSSL
# provider choice, CRLs, SNI, optional client certificates) is not implemented here.
ARTEMIS_TLS_UNSUPPORTED = ("trustStorePassword", "enabledCipherSuites", "sslProvider", "wantClientAuth",
                           "crlPath", "sniHost", "trustAll", "keyStoreProvider", "trustStoreProvider",
                           "keyStoreAlias", "forceSSLParameters", "sslAutoReload")
_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


@dataclass(frozen=True)
class ArtemisTls:
    """TLS read from an Artemis acceptor or connection URI's parameters."""

    profile: TlsProfile
    need_client_auth: bool  # acceptor: clients must present a certificate signed by trustStorePath
    verify_host: bool  # connection: the server's certificate must name the host dialled

    # The profile's errors name Dispatch's attributes; an Artemis user reads their own.
    ARTEMIS_NAMES = {"certFile": "keyStorePath", "privateKeyFile": "keyStorePath", "caCertFile": "trustStorePath",
                     "password": "keyStorePassword", "protocols": "enabledProtocols"}

    def server_tls(self) -> ServerTls:
        """An acceptor's TLS (TLS required: Artemis's sslEnabled acceptors take no plaintext)."""
        return ServerTls(self._translated(lambda: self.profile.server_context(verify_client=self.need_client_auth)))

    def client_tls(self) -> ClientTls:
        """A connection URI's TLS (broker connections, network connectors)."""
        return ClientTls(self._translated(lambda: self.profile.client_context(verify_hostname=self.verify_host)))

    def _translated(self, make):
        try:
            return make()
        except TlsConfigError as exc:
            name = self.ARTEMIS_NAMES.get(exc.attribute, exc.attribute)
            text = str(exc).partition(": ")[2]
            for dispatch, artemis in self.ARTEMIS_NAMES.items():
                text = text.replace(dispatch, artemis)
            raise TlsConfigError(name, text.replace("sslProfile 'artemis-uri'", "the URI")) from None


def artemis_tls(params: dict[str, str], *, default_verify_host: bool = True) -> ArtemisTls | None:
    """The TLS an Artemis URI's parameters ask for, or None without ``sslEnabled=true``.

    Raises :class:`TlsConfigError` naming the parameter: a TLS parameter without sslEnabled, one that is
    not supported (:data:`ARTEMIS_TLS_UNSUPPORTED`), a key or trust store type other than PEM, or a
    value that is not a boolean where one is expected. Files are checked when the context is made.
    """
    def flag(name: str, default: bool) -> bool:
        value = params.get(name)
        if value is None:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        raise TlsConfigError(name, f"{value!r} is not true or false")

    for name in ARTEMIS_TLS_UNSUPPORTED:
        if name in params:
            raise TlsConfigError(name, "not supported by tdbroker (supported TLS parameters: "
                                 f"{', '.join(ARTEMIS_TLS_PARAMETERS)})")
    if not flag("sslEnabled", False):
        stray = [n for n in ARTEMIS_TLS_PARAMETERS if n != "sslEnabled" and n in params]
        if stray:
            raise TlsConfigError(stray[0], "given without sslEnabled=true: TLS is off, so it would be ignored")
        return None
    for name in ("keyStoreType", "trustStoreType"):
        kind = params.get(name)
        if kind is not None and kind.upper() != "PEM":
            raise TlsConfigError(name, f"{kind!r}: only PEM stores are supported (convert a PKCS12 store with "
                                 "`openssl pkcs12 -in STORE -out STORE.pem`)")
    if "keyStorePassword" in params and "keyStorePath" not in params:
        raise TlsConfigError("keyStorePassword", "given without keyStorePath: there is no key store it could "
                             "unlock, so it would be ignored")
    protocols = params.get("enabledProtocols")
    profile = TlsProfile(name="artemis-uri", cert_file=params.get("keyStorePath"),
                         private_key_file=None, ca_cert_file=params.get("trustStorePath"),
                         password=_literal(params.get("keyStorePassword")),
                         protocols=protocols.replace(",", " ") if protocols else None)
    return ArtemisTls(profile, need_client_auth=flag("needClientAuth", False),
                      verify_host=flag("verifyHost", default_verify_host))


def _literal(password: str | None) -> str | None:
    # Artemis's keyStorePassword is the password itself, never a Dispatch-style env:/file: reference.
    return None if password is None else "literal:" + password


def _readable(attribute: str, path: str) -> None:
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise TlsConfigError(attribute, f"{path}: {exc.strerror or exc}") from None


def _is_encrypted_key(path: str) -> bool:
    """True when the PEM file holds an encrypted private key (PKCS#8 or OpenSSL's legacy header)."""
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError:
        return False
    return b"-----BEGIN ENCRYPTED PRIVATE KEY-----" in text or b"Proc-Type: 4,ENCRYPTED" in text


def _first_line(attribute: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise TlsConfigError(attribute, f"{path}: {getattr(exc, 'strerror', None) or exc}") from None


def subject_string(cert: dict | None) -> str | None:
    """A certificate's subject (as ``SSLSocket.getpeercert()`` gives it) in RFC 4514 form: the most
    specific part first, e.g. ``CN=router1,O=Example``; None without a certificate."""
    if not cert or "subject" not in cert:
        return None
    parts = []
    for rdn in reversed(cert["subject"]):
        parts.append("+".join(f"{_SUBJECT_SHORT_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return ",".join(parts)


def _escape(value: str) -> str:
    # RFC 4514 §2.4: these characters are escaped with a backslash; so are a leading space or '#'
    # and a trailing space.
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


def peer_info(ssl_object: ssl.SSLObject) -> TlsPeerInfo:
    """What ``ssl_object``'s completed handshake established (trio.SSLStream exposes it by attribute:
    ``stream.version()``, ``stream.cipher()``, ``stream.getpeercert()``; any of them works here)."""
    name, _proto, bits = ssl_object.cipher() or ("", "", 0)
    der = ssl_object.getpeercert(binary_form=True)
    # getpeercert() decodes only a verified certificate; an unverified one gives {} (no subject known).
    decoded = ssl_object.getpeercert() if der else None
    return TlsPeerInfo(protocol=ssl_object.version() or "", cipher=name, bits=bits or 0,
                       peer_subject=subject_string(decoded), peer_certificate=der,
                       peer_subject_rdns=tuple((decoded or {}).get("subject", ())))

