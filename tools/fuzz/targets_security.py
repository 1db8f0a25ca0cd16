"""Fuzz targets for the security code of issue 12: the server side of SASL and the files users come from.

``sasl-server``: a mutated client byte stream (SASL header, sasl-init for PLAIN, SCRAM-SHA-256/512,
EXTERNAL, ANONYMOUS, sasl-response, malformed frames) into :class:`wire.saslserver.SaslServer` with a
users file whose passwords are made up at random when the worker starts: the fuzzer never knows one.
Three servers take each input: one that requires authentication (``authenticatePeer: yes``) fed the
whole input, the same fed in small chunks (the socket may cut anywhere), and one that allows anonymous
logins and has a TLS-authenticated name for EXTERNAL. Properties: nothing escapes ``feed`` or
``take_output``; the authenticating server never lets anyone in (``done`` false, ``user`` None) and
writes only its SASL header and whole, well-formed SASL frames, never an ``ok`` outcome nor ANONYMOUS
among its mechanisms; the lenient one lets in only ANONYMOUS (no user) or EXTERNAL (the certificate's
name); chunking changes nothing; a failed exchange carries an AMQP condition (``amqp:...``) as the
connection's error, and once failed the layer takes nothing more; no traceback is logged. The server
nonce is fixed in this process (SCRAM seeds recorded from real exchanges then replay up to the proof
check, which the fuzzer cannot pass without the password).

``sasl-files``: mutated text as a users file (:meth:`wire.users.Users.parse`) and as a Cyrus-style SASL
configuration file (:class:`wire.sasl.SaslConfigFile`, whose ``sasldb_path`` may name the users file or a
Berkeley DB file beside it). Property: a result or the module's error, which begins ``FILE:`` or
``FILE:LINE:`` with LINE a line of the file (as an editor counts them), never another exception.

``broker-properties``: mutated text as ``artemis-users.properties`` and ``artemis-roles.properties``
beside a broker.xml (:func:`broker.security.load_security`). Property: as for ``sasl-files``, with
:class:`broker.security.SecurityFileError`; role warnings also start ``FILE:LINE:``.

``tls-handshake``: a client's first bytes on a TLS listener, seeded with the ClientHello and complete
client flights of Python's ssl (OpenSSL) for TLS 1.3 and 1.2, with a client certificate. An input that
starts with a TLS handshake record (22) is sent as it is; any other is a recipe of byte edits and a cut
applied to one of the recorded flights (:meth:`TlsHandshakeTarget.client_bytes`: OpenSSL is not
instrumented, so coverage alone would not keep the fuzzer on real ClientHellos). What does not start with
a handshake record is plaintext AMQP to the listener (wire/driver.py ``TLS_HANDSHAKE_RECORD``: the frames
targets' ground) and skipped; the rest goes, followed by the client's EOF, through
:func:`wire.driver.tls_handshake` on an in-memory stream with the server contexts
:class:`wire.tls.TlsProfile` makes (client certificate optional, and required). Properties: the
handshake ends, at once, with :class:`wire.driver.TlsHandshakeError` whose text gives a reason (never
another exception, never a completed handshake); no traceback is logged. OpenSSL's record and handshake parsing
is C and not instrumented (OSS-Fuzz fuzzes it): coverage here is the Python around it.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import tempfile

from tools.fuzz.harness import LogWatch, Violation, require

#: The name a TLS client certificate gave the lenient server (what EXTERNAL logs in as).
EXTERNAL_NAME = "CN=fuzz-client"
#: Users of the sasl-server target's file; their passwords are random and never leave this process.
USER_NAMES = ("alice", "bob")
#: The seeds' user names and (wrong) password.
SEED_PASSWORD = "not-the-password"
#: Chunk size for the chunked feed: small enough to cut every frame header, big enough to stay fast.
CHUNK_BYTES = 3
#: The server nonce of this process (see the module docstring); RFC 5802 wants it unpredictable in a
#: real server, which wire.saslserver is; here it must repeat so that recorded seeds stay meaningful.
FIXED_NONCE = "fuzz-server-nonce-AAAAAAAAAAAAAAAAAAA"

_NEWLINE = re.compile(rb"\r\n|\r|\n")
_LOCATED = re.compile(r"^(?P<path>[^:]+)(?::(?P<line>\d+))?: \S")


class _FixedSecrets:
    """Stands in for the ``secrets`` module inside wire.saslserver (this process only)."""

    @staticmethod
    def token_urlsafe(nbytes=None) -> str:
        return FIXED_NONCE

    @staticmethod
    def token_bytes(nbytes=None) -> bytes:
        return secrets.token_bytes(nbytes)


def make_users():
    """The target's users: random passwords nobody outside this function ever sees."""
    from wire.users import Users

    users = Users()
    for name in USER_NAMES:
        users.set_password(name, secrets.token_urlsafe(24))
    return users


def fix_server_nonce() -> None:
    import wire.saslserver as ss

    ss.secrets = _FixedSecrets()


class SaslServerTarget:
    name = "sasl-server"
    instrument = ("wire.saslserver", "wire.users", "wire.amqptypes")
    description = "client SASL byte streams into the server-side SASL layer with a users file"
    max_len = 4096

    def setup(self) -> None:
        self.watch = LogWatch.install()
        logging.getLogger("wire.saslserver").setLevel(logging.DEBUG)
        fix_server_nonce()
        self.users = make_users()

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import sasl_client_streams

        return sasl_client_streams()

    def _server(self, *, strict: bool):
        from wire.saslserver import SUPPORTED_MECHANISMS, SaslServer

        if strict:
            return SaslServer(self.users, SUPPORTED_MECHANISMS, allow_anonymous=False)
        return SaslServer(self.users, SUPPORTED_MECHANISMS, allow_anonymous=True, external_user=EXTERNAL_NAME)

    def _run(self, server, data: bytes, chunk: int | None) -> bytes:
        """Feed ``data`` (whole or in chunks), draining output after each feed; what the server wrote."""
        written = b""
        pieces = [data] if chunk is None else [data[i:i + chunk] for i in range(0, len(data), chunk)]
        for piece in pieces:
            server.feed(piece)
            written += server.take_output()
        if server.failed:
            require(server.feed(b"AMQP\x00\x01\x00\x00more") == b"", "a failed layer passed bytes on")
            written += server.take_output()
            require(server.take_output() == b"", "a failed layer kept writing")
        return written

    @staticmethod
    def _check_written(written: bytes) -> None:
        """What the authenticating server wrote: its SASL header, well-formed SASL frames, never an ``ok``
        outcome and never ANONYMOUS among the mechanisms (a client must not be told it got in)."""
        from wire.saslserver import (ANONYMOUS, OUTCOME_OK, SASL_HEADER, SASL_MECHANISMS, SASL_OUTCOME,
                                     FrameReader, SaslProtocolError)

        if not written:
            return
        require(written.startswith(SASL_HEADER), "authenticatePeer: the server's first bytes are not the SASL header",
                repr(written[:40]))
        reader = FrameReader()
        reader.feed(written[len(SASL_HEADER):])
        try:
            while (frame := reader.next()) is not None:
                code, fields = frame
                if code == SASL_OUTCOME:
                    require(fields and fields[0] != OUTCOME_OK, "authenticatePeer: the server wrote outcome ok",
                            repr(fields)[:300])
                elif code == SASL_MECHANISMS:
                    offered = fields[0] if fields else []
                    require(ANONYMOUS not in [str(m) for m in (offered or [])],
                            "authenticatePeer: the server offered ANONYMOUS", repr(offered)[:300])
        except SaslProtocolError as exc:
            raise Violation("authenticatePeer: the server wrote a malformed SASL frame", str(exc)) from None
        require(not reader.buffer, "authenticatePeer: the server wrote part of a frame",
                repr(bytes(reader.buffer))[:300])

    @staticmethod
    def _check_failure(server, which: str) -> None:
        if server.failed:
            require(not server.done, f"{which}: failed and done at once")
            require(isinstance(server.error, str) and server.error.startswith("amqp:"),
                    f"{which}: a failed SASL exchange ends without an AMQP condition", repr(server.error)[:300])

    def execute(self, data: bytes) -> None:
        self.watch.clear()
        strict = self._server(strict=True)
        self._check_written(self._run(strict, data, None))
        require(not strict.done and strict.user is None, "authenticatePeer: a login succeeded without a password",
                f"user {strict.user!r} mechanism {strict.mechanism!r}")
        self._check_failure(strict, "authenticatePeer")

        chunked = self._server(strict=True)
        self._run(chunked, data, CHUNK_BYTES)
        require((chunked.done, chunked.failed, chunked.user) == (strict.done, strict.failed, strict.user),
                "the outcome depends on how the stream was cut",
                f"whole: {(strict.done, strict.failed, strict.error)} chunked: "
                f"{(chunked.done, chunked.failed, chunked.error)}")

        lenient = self._server(strict=False)
        self._run(lenient, data, None)
        if lenient.done:
            require(lenient.user is None or (lenient.user == EXTERNAL_NAME and lenient.mechanism == "EXTERNAL"),
                    "anonymous allowed: a login succeeded as a user without a password",
                    f"user {lenient.user!r} mechanism {lenient.mechanism!r}")
        self._check_failure(lenient, "anonymous allowed")
        self.watch.check()


def _check_located(error: Exception, data: bytes, paths: tuple, what: str) -> None:
    text = str(error)
    m = _LOCATED.match(text)
    require(m is not None and m["path"] in paths, f"{what} without FILE or FILE:LINE", text[:300])
    if m["line"] is not None:
        lines = len(_NEWLINE.split(data))  # what an editor counts
        require(int(m["line"]) <= lines, f"{what} names a line past the end", text[:300])


class SaslFilesTarget:
    name = "sasl-files"
    instrument = ("wire.users", "wire.sasl")
    description = "users-file and Cyrus SASL configuration-file text into their parsers"
    max_len = 4096

    def setup(self) -> None:
        self.watch = LogWatch.install()
        import wire.sasl  # noqa: F401 - imported inside the worker's instrumentation
        import wire.users  # noqa: F401

        self.dir = tempfile.mkdtemp(prefix="fuzz-sasl-")
        self.config_name = "tdrouterd"
        self.config_path = os.path.join(self.dir, f"{self.config_name}.conf")
        self.users_path = os.path.join(self.dir, "fuzz.users")
        with open(self.users_path, "w", encoding="utf-8") as f:
            f.write(_seed_users_text())
        with open(os.path.join(self.dir, "sasldb2"), "wb") as f:
            f.write(b"\0" * 12 + (0x00061561).to_bytes(4, "little") + b"\0" * 48)  # a Berkeley DB hash file

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import sasl_files

        return sasl_files()

    def execute(self, data: bytes) -> None:
        from wire.sasl import SaslConfigError, SaslConfigFile
        from wire.users import Users, UsersFileError

        self.watch.clear()
        try:
            Users.parse(data, self.users_path)
        except UsersFileError as exc:
            _check_located(exc, data, (self.users_path,), "UsersFileError")
        with open(self.config_path, "wb") as f:
            f.write(data)
        try:
            SaslConfigFile.load(self.dir, self.config_name)
        except SaslConfigError as exc:
            _check_located(exc, data, (self.config_path,), "SaslConfigError")
        self.watch.check()


class BrokerPropertiesTarget:
    name = "broker-properties"
    instrument = ("broker.security", "wire.users")
    description = "artemis-users.properties / artemis-roles.properties text into broker.security"
    # Plain passwords cost two PBKDF2 derivations each (a few ms): a short file keeps executions fast.
    max_len = 1024

    def setup(self) -> None:
        self.watch = LogWatch.install()
        import broker.security  # noqa: F401 - imported inside the worker's instrumentation

        self.dir = tempfile.mkdtemp(prefix="fuzz-props-")
        self.config_path = os.path.join(self.dir, "broker.xml")

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import broker_properties

        return broker_properties()

    def execute(self, data: bytes) -> None:
        from broker.security import SecurityFileError, load_security, roles_path, users_path

        self.watch.clear()
        # One input, two files: before the first NUL line separator the users, after it the roles.
        users_text, _, roles_text = data.partition(b"\n\0\n")
        upath, rpath = users_path(self.config_path), roles_path(self.config_path)
        for path, text in ((upath, users_text), (rpath, roles_text)):
            with open(path, "wb") as f:
                f.write(text)
        try:
            security = load_security(self.config_path)
        except SecurityFileError as exc:
            which = users_text if exc.path == upath else roles_text
            _check_located(exc, which, (upath, rpath), "SecurityFileError")
        else:
            require(security is not None, "a users file that exists was not read")
            for warning in security.warnings:
                require(warning.startswith(f"{rpath}:"), "a roles warning without FILE:LINE", warning[:300])
        self.watch.check()


class TlsHandshakeTarget:
    name = "tls-handshake"
    instrument = ("wire.driver", "wire.tls")
    description = "a client's first bytes (ClientHello and what follows) into a TLS listener's handshake"
    max_len = 4096

    def setup(self) -> None:
        self.watch = LogWatch.install()
        import wire.driver  # noqa: F401 - imported inside the worker's instrumentation
        import wire.tls  # noqa: F401

        from tools.fuzz.seeds import tls_client_flights

        self.dir = tempfile.mkdtemp(prefix="fuzz-tls-")
        self.contexts = _tls_contexts(self.dir)
        self.flights = tls_client_flights(self.dir)

    def seeds(self) -> list[bytes]:
        # The flights as they are, and one edit recipe per flight (see client_bytes).
        return self.flights + [bytes((i, 0, 0)) for i in range(len(self.flights))]

    def client_bytes(self, data: bytes) -> bytes:
        """What the client sends for input ``data``: ``data`` itself when it starts with a TLS handshake
        record; otherwise an edit recipe for a recorded flight (libFuzzer sees no coverage inside
        OpenSSL, so without this it would mutate only the few bytes that reach the Python around it):
        byte 0 picks the flight, bytes 1-2 (big-endian, 0 for none) where to cut it, then each 3 bytes
        an offset (2 bytes) and the byte to write there."""
        from wire.driver import TLS_HANDSHAKE_RECORD

        if not data or data[0] == TLS_HANDSHAKE_RECORD:
            return data
        flight = bytearray(self.flights[data[0] % len(self.flights)])
        cut = int.from_bytes(data[1:3], "big")
        if cut:
            del flight[cut % len(flight):]
        for i in range(3, len(data) - 2, 3):
            if flight:
                flight[int.from_bytes(data[i:i + 2], "big") % len(flight)] = data[i + 2]
        return bytes(flight)

    def execute(self, data: bytes) -> None:
        import trio

        from wire.driver import TLS_HANDSHAKE_RECORD

        self.watch.clear()
        sent = self.client_bytes(data)
        if not sent or sent[0] != TLS_HANDSHAKE_RECORD:
            return  # the listener takes it for plaintext AMQP: the frames targets' ground
        for context in self.contexts:
            outcome = trio.run(self._handshake, context, sent)
            require(isinstance(outcome, str), "a TLS handshake completed with bytes from no real client",
                    repr(sent[:300]))
            require(outcome.startswith("TLS handshake failed: ") and len(outcome) > len("TLS handshake failed: "),
                    "a failed TLS handshake without a reason", f"{outcome!r} for {sent[:300]!r}")
        self.watch.check()

    @staticmethod
    async def _handshake(context, data: bytes):
        """Run the listener's handshake (wire.driver.tls_handshake) on an in-memory stream that carries
        ``data`` and then the client's EOF; the error text, or the stream when it succeeded."""
        import trio
        import trio.testing

        from wire.driver import TlsHandshakeError, tls_handshake

        client, server = trio.testing.memory_stream_pair()
        await client.send_all(data)
        await client.send_eof()
        with trio.move_on_after(TLS_HANDSHAKE_BOUND_SECONDS) as bound:
            try:
                return await tls_handshake(server, context, server_side=True)
            except TlsHandshakeError as exc:
                return str(exc)
        if bound.cancelled_caught:
            raise Violation("a TLS handshake on a closed stream did not end",
                            f"still running after {TLS_HANDSHAKE_BOUND_SECONDS} s")


#: A handshake whose client has closed ends at once; this bound only catches one that does not.
TLS_HANDSHAKE_BOUND_SECONDS = 10


def _tls_contexts(directory: str) -> list:
    """A TLS listener's contexts made by wire.tls from a throw-away CA (trustme, as the tests do): one
    that takes any client, one that requires a client certificate (Dispatch's requireSsl with
    authenticatePeer and a caCertFile)."""
    from wire.tls import TlsProfile

    paths = _tls_files(directory)
    profile = TlsProfile(name="fuzz", cert_file=paths["server"], private_key_file=paths["server"],
                         ca_cert_file=paths["ca"])
    return [profile.server_context(), profile.server_context(verify_client=True)]


def _tls_files(directory: str) -> dict:
    """PEM files in ``directory`` (made once per process): ca, server (chain and key), client (chain and key)."""
    paths = {k: os.path.join(directory, f"{k}.pem") for k in ("ca", "server", "client")}
    if not os.path.exists(paths["client"]):
        import trustme

        ca = trustme.CA()
        ca.cert_pem.write_to_path(paths["ca"])
        ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(paths["server"])
        ca.issue_cert("fuzz-client").private_key_and_cert_chain_pem.write_to_path(paths["client"])
    return paths


def _seed_users_text() -> str:
    from wire.users import Users

    users = Users()
    for name in USER_NAMES:
        users.set_password(name, SEED_PASSWORD, iterations=16)
    return users.dumps()


SASL_SERVER = SaslServerTarget()
SASL_FILES = SaslFilesTarget()
BROKER_PROPERTIES = BrokerPropertiesTarget()
TLS_HANDSHAKE = TlsHandshakeTarget()

__all__ = ["SASL_SERVER", "SASL_FILES", "BROKER_PROPERTIES", "TLS_HANDSHAKE", "Violation"]
