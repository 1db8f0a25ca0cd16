"""Server-side SASL, sans-IO: we run the SASL frames ourselves, then hand the stream to the proton engine.

python-qpid-proton's bundled engine has no Cyrus SASL and its own server side cannot check a password
(it answers PLAIN with outcome ``perm``), so a listener with a users file (:mod:`wire.users`) puts a
:class:`SaslServer` in front of its engine. The layer reads the client's protocol header and SASL frames,
writes ours, and once the outcome is ``ok`` passes every further byte through; the engine, configured
without SASL, then sees a plain AMQP header (AMQP 1.0 §5.3.1: after a successful SASL exchange the
peers start again with the AMQP protocol header).

The exchange (AMQP 1.0 §5.3.2, performatives in §5.3.3, encoded with :mod:`wire.amqptypes`)::

    client: "AMQP" 3 1 0 0                server: "AMQP" 3 1 0 0, sasl-mechanisms
    client: sasl-init(mechanism, initial-response)
                                          server: sasl-challenge(challenge)   (SCRAM only)
    client: sasl-response(response)       (SCRAM only)
                                          server: sasl-outcome(code, additional-data)

Mechanisms: ANONYMOUS (only when the listener allows anonymous logins), PLAIN (RFC 4616; the authzid must
be empty or equal the authcid), SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677; no channel binding:
gs2 header ``n,,`` or ``y,,``; the server signature travels in the outcome's additional-data as
``v=...``). EXTERNAL (a TLS client certificate) plugs in through :attr:`SaslServer.external_user`: when
TLS has authenticated the peer, :mod:`wire.driver` sets it to the verified certificate's subject before
the first byte is fed; EXTERNAL is then offered when the listener's list names it.

A wrong password, an unknown user (SCRAM answers an unknown user with a made-up salt so that the
exchange does not tell which names exist) or a mechanism not offered gets outcome code 1 (``auth``) and
the connection ends. A malformed frame ends it at once; the reason is in :attr:`SaslLayer.error` and
nothing is raised. A client that sends the AMQP header to a listener that requires authentication is
answered with the SASL header and the connection closed, as proton does.

:class:`SaslLayer` is the interface the engine drives; the client half (SCRAM login for connectors) is
:class:`wire.sasl.SaslClient`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import secrets
import struct

from wire.amqptypes import (Array, CodecError, Described, Symbol, UByte, ULong, decode_value,
                            encode_value)
from wire.users import DEFAULT_ITERATIONS, SCRAM_HASHES, ScramCredential, Users

log = logging.getLogger("wire.saslserver")

SASL_HEADER = b"AMQP\x03\x01\x00\x00"  # AMQP 1.0 §5.3.1
AMQP_HEADER = b"AMQP\x00\x01\x00\x00"  # AMQP 1.0 §2.2
FRAME_TYPE_SASL = 1  # §2.3.2
FRAME_HEADER_BYTES = 8
# §5.3.1: SASL frames are sent before max-frame-size is negotiated; 512 bytes is the least every peer
# accepts, but SCRAM-SHA-512 messages with long names exceed it and peers send larger ones. A frame
# larger than this is not SASL: the bound keeps a client from making us buffer without limit.
MAX_SASL_FRAME_BYTES = 64 * 1024

# Performative descriptors (§5.3.3).
SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME = 0x40, 0x41, 0x42, 0x43, 0x44
_DESCRIPTOR_NAMES = {
    "amqp:sasl-mechanisms:list": SASL_MECHANISMS, "amqp:sasl-init:list": SASL_INIT,
    "amqp:sasl-challenge:list": SASL_CHALLENGE, "amqp:sasl-response:list": SASL_RESPONSE,
    "amqp:sasl-outcome:list": SASL_OUTCOME,
}
# sasl-code (§5.3.3.6).
OUTCOME_OK, OUTCOME_AUTH, OUTCOME_SYS, OUTCOME_SYS_PERM, OUTCOME_SYS_TEMP = 0, 1, 2, 3, 4

ANONYMOUS, PLAIN, EXTERNAL = "ANONYMOUS", "PLAIN", "EXTERNAL"
SCRAM_MECHANISMS = tuple(SCRAM_HASHES)  # SCRAM-SHA-256, SCRAM-SHA-512
# What a SaslServer can serve, in the order offered when a listener lists none.
SUPPORTED_MECHANISMS = SCRAM_MECHANISMS + (PLAIN, ANONYMOUS, EXTERNAL)
NONCE_BYTES = 18  # 144 bits of server nonce (RFC 5802 §5.1 asks for a fresh, unpredictable one)

# Conditions recorded in SaslLayer.error (the connection has no AMQP close frame to carry them yet).
AUTH_FAILED = "amqp:unauthorized-access"
FRAMING_ERROR = "amqp:connection:framing-error"
DECODE_ERROR = "amqp:decode-error"


class SaslProtocolError(Exception):
    """The peer broke the SASL exchange (malformed frame, wrong performative, bad SCRAM message).

    Its text becomes :attr:`SaslLayer.error`, so it starts with the AMQP condition (``amqp:...: why``),
    the form every connection error takes."""


def scram_error(why: str) -> SaslProtocolError:
    """A SCRAM message that breaks RFC 5802 §7 (syntax) or §5 (nonce, channel binding): a decode error
    of the SASL payload, as for a malformed PLAIN response."""
    return SaslProtocolError(f"{DECODE_ERROR}: SCRAM: {why}")


# -- frames --------------------------------------------------------------------------------------------

def encode_frame(descriptor: int, fields: list) -> bytes:
    """One SASL frame (§2.3.2) carrying performative ``descriptor`` with list ``fields``."""
    while fields and fields[-1] is None:
        fields = fields[:-1]  # trailing nulls are omitted (§1.4 list encoding of composite types)
    body = encode_value(Described(ULong(descriptor), list(fields)))
    return struct.pack(">IBBH", FRAME_HEADER_BYTES + len(body), 2, FRAME_TYPE_SASL, 0) + body


def mechanisms_frame(mechanisms) -> bytes:
    return encode_frame(SASL_MECHANISMS, [Array("symbol", [Symbol(m) for m in mechanisms])])


def outcome_frame(code: int, additional_data: bytes | None = None) -> bytes:
    return encode_frame(SASL_OUTCOME, [UByte(code), additional_data])


class FrameReader:
    """Splits a byte stream into SASL performatives: ``feed`` bytes, ``next()`` -> (code, fields) or None."""

    def __init__(self):
        self.buffer = bytearray()

    def feed(self, data) -> None:
        self.buffer += data

    def next(self):
        buf = self.buffer
        while True:
            if len(buf) < FRAME_HEADER_BYTES:
                return None
            size, doff, ftype = struct.unpack_from(">IBB", buf)
            if size < FRAME_HEADER_BYTES or size > MAX_SASL_FRAME_BYTES:
                raise SaslProtocolError(f"{FRAMING_ERROR}: SASL frame size {size} outside 8..{MAX_SASL_FRAME_BYTES}")
            if doff < 2 or doff * 4 > size:
                raise SaslProtocolError(f"{FRAMING_ERROR}: SASL frame data offset {doff} invalid")
            if ftype != FRAME_TYPE_SASL:
                raise SaslProtocolError(f"{FRAMING_ERROR}: frame type {ftype} during SASL (expected 1)")
            if len(buf) < size:
                return None
            body = bytes(buf[doff * 4:size])
            del buf[:size]
            if body:  # an empty frame is a heartbeat (§2.3.2)
                return decode_performative(body)

    def take_rest(self) -> bytes:
        rest = bytes(self.buffer)
        self.buffer.clear()
        return rest


def decode_performative(body: bytes):
    """(descriptor code, fields list) of one SASL frame body; SaslProtocolError when it is not one."""
    try:
        value, end = decode_value(body)
    except CodecError as exc:
        raise SaslProtocolError(f"{DECODE_ERROR}: undecodable SASL frame: {exc}") from None
    if end != len(body) or not isinstance(value, Described) or not isinstance(value.value, list):
        raise SaslProtocolError(f"{DECODE_ERROR}: SASL frame body is not one described list")
    code = value.descriptor
    code = _DESCRIPTOR_NAMES.get(code) if isinstance(code, str) else code
    if code not in (SASL_MECHANISMS, SASL_INIT, SASL_CHALLENGE, SASL_RESPONSE, SASL_OUTCOME):
        raise SaslProtocolError(f"{DECODE_ERROR}: descriptor {value.descriptor!r} is not a SASL performative")
    return int(code), value.value


def field(fields: list, index: int, types, name: str, *, required: bool = False):
    """Field ``index`` of a performative, checked against ``types``."""
    value = fields[index] if index < len(fields) else None
    if value is None:
        if required:
            raise SaslProtocolError(f"{DECODE_ERROR}: mandatory SASL field {name} missing")
        return None
    if not isinstance(value, types):
        raise SaslProtocolError(f"{DECODE_ERROR}: SASL field {name} has the wrong type")
    return value


# -- SCRAM messages (RFC 5802 §5, §7) ---------------------------------------------------------------------

def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise scram_error(f"{what} is not base64") from None


def scram_attributes(message: str, expected: str) -> dict:
    """``a=v,b=w`` -> {"a": "v", ...}; the attributes must start with the letters in ``expected``."""
    attrs = {}
    for i, part in enumerate(message.split(",")):
        key, eq, value = part.partition("=")
        if len(key) != 1 or not eq:
            raise scram_error(f"malformed attribute {part[:20]!r}")
        if i < len(expected) and key != expected[i]:
            raise scram_error(f"expected attribute {expected[i]!r}, got {key!r}")
        if key == "m":
            raise scram_error("mandatory extension not supported")  # RFC 5802 §5.1
        attrs.setdefault(key, value)
    if len(attrs) < len(expected):
        raise scram_error(f"message lacks attributes {expected!r}")
    return attrs


def saslname_decode(text: str) -> str:
    """RFC 5802 §5.1: "," is sent as "=2C" and "=" as "=3D"; any other "=" is an error."""
    if "=" in text.replace("=2C", "").replace("=3D", ""):
        raise scram_error("invalid '=' escape in user name")
    return text.replace("=2C", ",").replace("=3D", "=")


def saslname_encode(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def valid_nonce(nonce: str) -> bool:
    """RFC 5802 §7: printable ASCII except ','."""
    return bool(nonce) and all(0x21 <= ord(c) <= 0x7E and c != "," for c in nonce)


def auth_signatures(cred: ScramCredential, auth_message: bytes) -> tuple[bytes, bytes]:
    """(ClientSignature, ServerSignature) for ``auth_message`` (RFC 5802 §3)."""
    h = cred.hash_name
    return (hmac.new(cred.stored_key, auth_message, h).digest(),
            hmac.new(cred.server_key, auth_message, h).digest())


def xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b))


# -- the layer -------------------------------------------------------------------------------------------

class SaslLayer:
    """What :class:`wire.connection.EngineConnection` drives in front of its engine.

    ``feed(data)`` returns the bytes that belong to the engine (b"" until the exchange succeeded);
    ``take_output()`` the bytes to send; ``hold(bytes)`` keeps the engine's output until success. ``done``: the exchange succeeded (pass-through from now on);
    ``failed``: the connection must end once the output is written (``error`` says why);
    ``user``: the authenticated name (None for anonymous); ``mechanism``: the one used."""

    def __init__(self):
        self.done = False
        self.failed = False
        self.error: str | None = None
        self.user: str | None = None
        self.mechanism: str | None = None
        self._out = bytearray()
        self._held = bytearray()
        self._frames = FrameReader()
        self._header_seen = False

    def hold(self, engine_output: bytes) -> None:
        """Keep the engine's own output back until the exchange succeeded (a client engine has its
        AMQP header and open to say at once; they must follow our outcome, not precede our header)."""
        if engine_output and not self.failed:
            self._held += engine_output

    def take_output(self) -> bytes:
        """Our SASL bytes, then (once the exchange succeeded) the engine output held back."""
        out = bytes(self._out)
        self._out.clear()
        if self.done and self._held:
            out += bytes(self._held)
            self._held.clear()
        return out

    def feed(self, data) -> bytes:
        if self.done:
            return bytes(data)
        if self.failed:
            return b""
        self._frames.feed(data)
        try:
            if not self._header_seen:
                buf = self._frames.buffer
                if len(buf) < len(SASL_HEADER):
                    return b""
                header = bytes(buf[:8])
                del buf[:8]
                self._header_seen = True
                if not self.on_header(header):
                    return self._passthrough()
            while not self.done and not self.failed:
                frame = self._frames.next()
                if frame is None:
                    break
                self.on_frame(*frame)
        except SaslProtocolError as exc:
            self.fail(str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug here must end this connection only
            log.exception("SASL exchange failed")
            self.fail(f"amqp:internal-error: SASL exchange failed ({type(exc).__name__})")
        if self.done:
            return self._frames.take_rest()
        return b""

    def _passthrough(self) -> bytes:
        """No SASL on this connection: everything, the header included, goes to the engine."""
        self.done = True
        return AMQP_HEADER + self._frames.take_rest()

    def fail(self, error: str) -> None:
        if not self.failed:
            self.failed = True
            self.error = error
            self._frames.buffer.clear()
            self._held.clear()

    # subclasses
    def on_header(self, header: bytes) -> bool:
        """The peer's protocol header: True to run SASL, False to pass through (plain AMQP)."""
        raise NotImplementedError

    def on_frame(self, code: int, fields: list) -> None:
        raise NotImplementedError


class SaslServer(SaslLayer):
    """The server half: offers ``mechanisms`` and checks credentials against ``users``.

    ``allow_anonymous`` false (a listener with ``authenticatePeer``) means ANONYMOUS is never offered and
    a client that skips SASL is refused. ``external_user``: the TLS-authenticated peer's name, which
    makes EXTERNAL available (the hook for client-certificate authentication)."""

    def __init__(self, users: Users | None, mechanisms=None, *, allow_anonymous: bool = False,
                 external_user: str | None = None):
        super().__init__()
        self.users = users if users is not None else Users()
        self.allow_anonymous = allow_anonymous
        self.external_user = external_user
        self.configured = [m.upper() for m in (mechanisms or SUPPORTED_MECHANISMS)]
        self.offered: list[str] = []
        # SCRAM between its two messages: (credential, user known, client-first-bare, server-first,
        # nonce, gs2 header, user)
        self._scram = None
        self._state = "init"
        # Made-up credentials for unknown users come from this per-process secret: the same name gets
        # the same salt on every attempt, so the answer does not tell that the name is unknown.
        self._fake_secret = _FAKE_SALT_SECRET

    @property
    def mechanisms(self) -> list[str]:
        """What is offered: the configured list less ANONYMOUS (when not allowed) and EXTERNAL (without a
        TLS-authenticated name). Read when the client's header arrives, so TLS may set
        ``external_user`` after this layer was made and before the first byte is fed."""
        return [m for m in self.configured if m in SUPPORTED_MECHANISMS
                and (m != ANONYMOUS or self.allow_anonymous)
                and (m != EXTERNAL or self.external_user is not None)]

    def on_header(self, header: bytes) -> bool:
        if header == SASL_HEADER:
            self.offered = self.mechanisms
            self._out += SASL_HEADER + mechanisms_frame(self.offered)
            return True
        if header == AMQP_HEADER and self.allow_anonymous:
            return False
        # Proton's answer: our header, then close. The client learns this listener speaks SASL.
        self._out += SASL_HEADER
        if header == AMQP_HEADER:
            self.fail(f"{AUTH_FAILED}: client skipped SASL; this listener requires authentication")
        else:
            self.fail(f"{FRAMING_ERROR}: unsupported protocol header {header!r}")
        return True

    def on_frame(self, code: int, fields: list) -> None:
        if self._state == "init" and code == SASL_INIT:
            mechanism = field(fields, 0, str, "mechanism", required=True)
            response = field(fields, 1, bytes, "initial-response")
            self.mechanism = str(mechanism)
            self._init(self.mechanism, response)
        elif self._state in ("plain", "scram") and code == SASL_RESPONSE:
            response = field(fields, 0, bytes, "response", required=True)
            if self._state == "plain":
                self._plain(response)
            else:
                self._scram_final(response)
        else:
            raise SaslProtocolError(f"{FRAMING_ERROR}: unexpected SASL performative 0x{code:02x}")

    def _init(self, mechanism: str, response: bytes | None) -> None:
        if mechanism not in self.offered:
            self._refuse(f"mechanism {mechanism[:40]!r} not offered (offered: {' '.join(self.offered)})")
        elif mechanism == ANONYMOUS:
            self._succeed(None)
        elif mechanism == EXTERNAL:
            self._succeed(self.external_user)
        elif mechanism == PLAIN:
            if response is None:  # RFC 4422 §5: the server sends an empty challenge and waits
                self._state = "plain"
                self._out += encode_frame(SASL_CHALLENGE, [b""])
            else:
                self._plain(response)
        else:
            self._scram_first(mechanism, response or b"")

    def _succeed(self, user: str | None, additional_data: bytes | None = None) -> None:
        self._out += outcome_frame(OUTCOME_OK, additional_data)
        self.user = user
        self.done = True
        log.debug("SASL %s login succeeded for %r", self.mechanism, user)

    def _refuse(self, why: str) -> None:
        self._out += outcome_frame(OUTCOME_AUTH)
        self.fail(f"{AUTH_FAILED}: SASL {self.mechanism} authentication failed: {why}")

    # PLAIN (RFC 4616 §2): [authzid] NUL authcid NUL passwd
    def _plain(self, response: bytes) -> None:
        parts = response.split(b"\x00")
        if len(parts) != 3:
            raise SaslProtocolError(f"{DECODE_ERROR}: PLAIN response is not authzid NUL authcid NUL password")
        try:
            authzid, authcid, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise SaslProtocolError(f"{DECODE_ERROR}: PLAIN response is not UTF-8") from None
        if authzid and authzid != authcid:
            self._refuse(f"user {authcid!r} may not act as {authzid!r}")
        elif self.users.check_plain(authcid, password):
            self._succeed(authcid)
        else:
            self._refuse(f"wrong password or unknown user {authcid!r}")

    # SCRAM (RFC 5802 §5)
    def _scram_first(self, mechanism: str, response: bytes) -> None:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise scram_error("client-first-message is not UTF-8") from None
        cbind, _, rest = text.partition(",")
        authz, _, bare = rest.partition(",")
        if cbind not in ("n", "y"):
            # "p=..." asks for channel binding, which only the -PLUS mechanisms (not offered) have.
            raise scram_error(f"channel binding flag {cbind[:10]!r} not supported (gs2 header n,,)")
        attrs = scram_attributes(bare, "nr")
        user = saslname_decode(attrs["n"])
        if authz:
            if not authz.startswith("a=") or saslname_decode(authz[2:]) != user:
                self.mechanism = mechanism
                self._refuse(f"user {user!r} may not act as {authz[2:]!r}")
                return
        client_nonce = attrs["r"]
        if not valid_nonce(client_nonce):
            raise scram_error("client nonce is not printable ASCII without ','")
        record = self.users.get(user)
        cred = record.credentials.get(mechanism) if record is not None else None
        known = cred is not None
        if not known:
            cred = self._fake_credential(mechanism, user)
        nonce = client_nonce + secrets.token_urlsafe(NONCE_BYTES)
        server_first = f"r={nonce},s={b64(cred.salt)},i={cred.iterations}"
        self._scram = (cred, known, bare, server_first, nonce, f"{cbind},{authz},", user)
        self._state = "scram"
        self._out += encode_frame(SASL_CHALLENGE, [server_first.encode("ascii")])

    def _fake_credential(self, mechanism: str, user: str) -> ScramCredential:
        h = SCRAM_HASHES[mechanism]
        salt = hmac.new(self._fake_secret, user.encode("utf-8"), "sha256").digest()[:16]
        size = hashlib.new(h).digest_size
        return ScramCredential(mechanism, DEFAULT_ITERATIONS, salt, secrets.token_bytes(size), secrets.token_bytes(size))

    def _scram_final(self, response: bytes) -> None:
        cred, known, client_first_bare, server_first, nonce, gs2_header, user = self._scram
        self._scram = None
        self._state = "over"
        try:
            text = response.decode("ascii")
        except UnicodeDecodeError:
            raise scram_error("client-final-message is not ASCII") from None
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise scram_error("client-final-message has no proof")
        attrs = scram_attributes(without_proof, "cr")
        if unb64(attrs["c"], "channel binding") != gs2_header.encode("utf-8"):
            raise scram_error("channel-binding attribute does not repeat the gs2 header")
        if attrs["r"] != nonce:
            raise scram_error("nonce in client-final-message is not the one agreed")
        proof = unb64(proof_text, "proof")
        auth_message = f"{client_first_bare},{server_first},{without_proof}".encode("utf-8")
        client_signature, server_signature = auth_signatures(cred, auth_message)
        client_key = xor(proof, client_signature)
        ok = len(proof) == len(client_signature) and hmac.compare_digest(
            hashlib.new(cred.hash_name, client_key).digest(), cred.stored_key)
        if ok and known:
            self._succeed(user, f"v={b64(server_signature)}".encode("ascii"))
        else:
            self._refuse(f"wrong password or unknown user {user!r}")


_FAKE_SALT_SECRET = secrets.token_bytes(32)
