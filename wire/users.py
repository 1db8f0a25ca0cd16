"""The users file: SCRAM salted credentials, one user a line (what a Cyrus-style ``sasldb_path`` names).

Dispatch hands authentication to Cyrus SASL, whose ``sasldb_path`` names a Berkeley DB file. Ours is a
text file written by ``tdpasswd -f FILE USER`` (:mod:`tools.tdpasswd`), and it never holds a password
nor a plain hash of one: only what SCRAM (RFC 5802 §3, §5.1; RFC 7677 for SHA-256) needs on the server
side. Format, one user a line::

    # comment lines and blank lines are ignored
    alice SCRAM-SHA-256$4096:<salt>$<StoredKey>:<ServerKey> SCRAM-SHA-512$4096:<salt>$<StoredKey>:<ServerKey>

- the user name comes first: any characters but whitespace and control characters; it may not start
  with ``#``; a name appears once in a file;
- then one credential per mechanism, separated by whitespace: ``MECH$ITERATIONS:SALT$STOREDKEY:SERVERKEY``
  (the layout PostgreSQL uses for its SCRAM verifiers), salt and keys in standard base64 (RFC 4648 §4).
  ``MECH`` is ``SCRAM-SHA-256`` or ``SCRAM-SHA-512``; at least one is required (``tdpasswd`` writes both).
  ``StoredKey = H(HMAC(SaltedPassword, "Client Key"))`` and ``ServerKey = HMAC(SaltedPassword, "Server
  Key")`` with ``SaltedPassword = PBKDF2-HMAC-H(password, salt, ITERATIONS)`` (RFC 5802 §3: ``Hi`` is
  PBKDF2 with HMAC as its PRF).

Someone who reads the file learns no password and cannot log in with it (a StoredKey is not a ClientKey,
RFC 5802 §9), but can mount an offline guessing attack: ``tdpasswd`` writes it with mode 0600.

PLAIN is checked against the same keys (:meth:`UserRecord.check_password`): the offered password is salted
and iterated with the stored salt and count and the resulting StoredKey compared in constant time.

Iterations: :data:`DEFAULT_ITERATIONS` is 4096, the minimum RFC 7677 §4 recommends for SCRAM-SHA-256.
Measured on this project's test machine (2 cores): one PBKDF2 of 4096 iterations takes 0.9 ms with
SHA-256 and 2.1 ms with SHA-512. A SCRAM login costs the *client* one PBKDF2 and the server only a few
HMACs (it stores the derived keys); a PLAIN login costs the server one PBKDF2 (SHA-256) on its one Trio
thread, so a higher count slows every PLAIN login; :data:`MAX_ITERATIONS` bounds what a file can ask
for. ``tdpasswd -i`` sets another count.

A file that is not text (a real Cyrus sasldb is a Berkeley DB or GDBM file) is refused with a message
naming ``tdpasswd``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import re
import secrets
import tempfile
import unicodedata
from dataclasses import dataclass

# RFC 7677 §4: "the iteration count ... SHOULD be at least 4096".
DEFAULT_ITERATIONS = 4096
# A users file must not be able to make each login cost seconds of the daemon's only thread.
MAX_ITERATIONS = 1_000_000
SALT_BYTES = 16  # RFC 5802 leaves the length open; 128 bits is what common SCRAM servers use
# The hash behind each mechanism (RFC 5802 §4: SCRAM-SHA-1; RFC 7677: SCRAM-SHA-256; SCRAM-SHA-512 is the
# same construction with SHA-512, as Cyrus SASL and Artemis implement it).
SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# The order PLAIN tries stored credentials in.
PLAIN_CHECK_ORDER = ("SCRAM-SHA-256", "SCRAM-SHA-512")
# A users file bigger than this is not one (a config file must not exhaust memory).
MAX_FILE_BYTES = 64 * 1024 * 1024

# Berkeley DB keeps its magic number at byte offset 12 of the first page (hash, btree, queue access
# methods, either byte order); GDBM starts with its own magic. Cyrus sasldb files are one of these.
_BDB_MAGICS = {0x00061561, 0x00053162, 0x00042253}
_GDBM_MAGICS = (b"\x13\x57\x9a\xce", b"\xce\x9a\x57\x13", b"\x13\x57\x9a\xcd", b"\xcd\x9a\x57\x13",
                b"\x13\x57\x9a\xcf", b"\xcf\x9a\x57\x13")


# Lines end at \n, \r\n or \r only, as editors count them for FILE:LINE. str.splitlines() also breaks at
# \v, \f, \x1c-\x1e, \x85, U+2028 and U+2029, which would put every line number after one of those off.
_LINE_END = re.compile(r"\r\n|\r|\n")
_LINE_END_BYTES = re.compile(rb"\r\n|\r|\n")


def editor_lines(text: str) -> list[str]:
    """The lines of ``text`` as an editor numbers them (line N is ``editor_lines(text)[N - 1]``)."""
    return _LINE_END.split(text)


def editor_line_at(data: bytes, offset: int) -> int:
    """The line (from 1, as an editor counts) that byte ``offset`` of ``data`` is on."""
    return len(_LINE_END_BYTES.split(data[:offset]))


class UsersFileError(ValueError):
    """A users file that cannot be used: the message starts with FILE or FILE:LINE."""


def normalize_password(password: str) -> bytes:
    """The bytes a password is hashed as: Unicode NFKC then UTF-8.

    RFC 5802 §2.2 asks for SASLprep (RFC 4013), whose normalisation step is NFKC; its mapping and
    prohibition tables are not applied here, which only matters for passwords with unusual spaces or
    control characters (both sides of this project normalise alike)."""
    return unicodedata.normalize("NFKC", password).encode("utf-8")


def _hmac(key: bytes, msg: bytes, hash_name: str) -> bytes:
    return hmac.new(key, msg, hash_name).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword := Hi(Normalize(password), salt, i) (RFC 5802 §3; Hi is PBKDF2 with HMAC-H)."""
    return hashlib.pbkdf2_hmac(SCRAM_HASHES[mechanism], normalize_password(password), salt, iterations)


def client_key(salted: bytes, hash_name: str) -> bytes:
    """ClientKey := HMAC(SaltedPassword, "Client Key") (RFC 5802 §3)."""
    return _hmac(salted, b"Client Key", hash_name)


@dataclass(frozen=True)
class ScramCredential:
    """What the server keeps for one SCRAM mechanism (RFC 5802 §5.1 "server ... stores")."""

    mechanism: str
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes

    @property
    def hash_name(self) -> str:
        return SCRAM_HASHES[self.mechanism]

    @classmethod
    def derive(cls, mechanism: str, password: str, *, salt: bytes | None = None,
               iterations: int = DEFAULT_ITERATIONS) -> "ScramCredential":
        """Salt and iterate ``password`` (RFC 5802 §3) into a credential for ``mechanism``."""
        salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
        return cls.from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)

    @classmethod
    def from_salted(cls, mechanism: str, salted: bytes, salt: bytes, iterations: int) -> "ScramCredential":
        """StoredKey and ServerKey from SaltedPassword (RFC 5802 §3)."""
        hash_name = SCRAM_HASHES[mechanism]
        return cls(mechanism, iterations, salt, hashlib.new(hash_name, client_key(salted, hash_name)).digest(),
                   _hmac(salted, b"Server Key", hash_name))

    def check_password(self, password: str) -> bool:
        """True when ``password`` yields this StoredKey (constant-time comparison)."""
        other = ScramCredential.derive(self.mechanism, password, salt=self.salt, iterations=self.iterations)
        return hmac.compare_digest(other.stored_key, self.stored_key)

    def encode(self) -> str:
        b64 = lambda b: base64.b64encode(b).decode("ascii")  # noqa: E731
        return f"{self.mechanism}${self.iterations}:{b64(self.salt)}${b64(self.stored_key)}:{b64(self.server_key)}"

    @classmethod
    def parse(cls, text: str) -> "ScramCredential":
        """Parse ``MECH$ITERATIONS:SALT$STOREDKEY:SERVERKEY``; ValueError says what is wrong."""
        parts = text.split("$")
        if len(parts) != 3:
            raise ValueError(f"credential {text[:40]!r} is not MECH$ITERATIONS:SALT$STOREDKEY:SERVERKEY")
        mechanism, params, keys = parts
        if mechanism not in SCRAM_HASHES:
            raise ValueError(f"unknown mechanism {mechanism[:40]!r} (known: {', '.join(SCRAM_HASHES)})")
        iterations_text, _, salt_text = params.partition(":")
        stored_text, _, server_text = keys.partition(":")
        if not iterations_text.isdigit() or not 1 <= int(iterations_text) <= MAX_ITERATIONS:
            raise ValueError(f"{mechanism}: iteration count {iterations_text[:20]!r} is not 1..{MAX_ITERATIONS}")
        try:
            salt, stored, server = (base64.b64decode(t, validate=True) for t in (salt_text, stored_text, server_text))
        except (binascii.Error, ValueError):
            raise ValueError(f"{mechanism}: salt or key is not base64") from None
        size = hashlib.new(SCRAM_HASHES[mechanism]).digest_size
        if not salt or len(stored) != size or len(server) != size:
            raise ValueError(f"{mechanism}: empty salt or keys not {size} bytes")
        return cls(mechanism, int(iterations_text), salt, stored, server)


@dataclass(frozen=True)
class UserRecord:
    """One user: their name and a SCRAM credential per mechanism."""

    name: str
    credentials: dict  # mechanism -> ScramCredential

    @classmethod
    def from_password(cls, name: str, password: str, *, iterations: int = DEFAULT_ITERATIONS) -> "UserRecord":
        return cls(name, {m: ScramCredential.derive(m, password, iterations=iterations) for m in SCRAM_HASHES})

    def check_password(self, password: str) -> bool:
        """PLAIN: derive from ``password`` with the first stored credential's salt and count, compare."""
        for mechanism in PLAIN_CHECK_ORDER:
            cred = self.credentials.get(mechanism)
            if cred is not None:
                return cred.check_password(password)
        return False

    def line(self) -> str:
        return " ".join([self.name] + [self.credentials[m].encode() for m in SCRAM_HASHES if m in self.credentials])


def valid_user_name(name: str) -> bool:
    """A name the file can hold: non-empty, no whitespace or control characters, not starting with '#'."""
    return bool(name) and not name.startswith("#") and all(c.isprintable() and not c.isspace() for c in name)


class Users:
    """The users of one file, by name. ``Users.load(path)``; :meth:`save` writes atomically, mode 0600."""

    def __init__(self, records=(), path: str | None = None):
        self.path = path
        self.records: dict[str, UserRecord] = {r.name: r for r in records}

    def __contains__(self, name: str) -> bool:
        return name in self.records

    def __len__(self) -> int:
        return len(self.records)

    def get(self, name: str) -> UserRecord | None:
        return self.records.get(name)

    def names(self) -> list[str]:
        return sorted(self.records)

    def set_password(self, name: str, password: str, *, iterations: int = DEFAULT_ITERATIONS) -> None:
        if not valid_user_name(name):
            raise ValueError(f"user name {name!r} must be non-empty, without spaces or control characters, "
                             "and not start with '#'")
        self.records[name] = UserRecord.from_password(name, password, iterations=iterations)

    def delete(self, name: str) -> bool:
        return self.records.pop(name, None) is not None

    def check_plain(self, name: str, password: str) -> bool:
        record = self.records.get(name)
        if record is None:
            # As much work as for a known user, so that the time taken does not tell which names exist.
            _UNKNOWN_USER.check_password(password)
            return False
        return record.check_password(password)

    # -- file ---------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str) -> "Users":
        """Read a users file; :class:`UsersFileError` (FILE or FILE:LINE: what is wrong) otherwise."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise UsersFileError(f"{path}: cannot read users file: {exc.strerror or exc}") from None
        except ValueError:  # open() refuses a path with a NUL character (a configuration file may hold one)
            raise UsersFileError(f"{path!r}: cannot read users file: the name has a NUL character") from None
        if len(data) > MAX_FILE_BYTES:
            raise UsersFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes: not a users file")
        return cls.parse(data, path)

    @classmethod
    def parse(cls, data: bytes, path: str = "<users>") -> "Users":
        kind = _binary_kind(data)
        if kind is not None:
            raise UsersFileError(
                f"{path}: this is {kind}, not a trio-dispatch users file (one user a line of SCRAM "
                f"credentials). Cyrus sasldb files cannot be read: create the users again with "
                f"`tdpasswd -f {path}.users USER` and point sasldb_path at that file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = editor_line_at(data, exc.start)
            raise UsersFileError(f"{path}:{line}: not UTF-8 text: not a users file (make one with `tdpasswd`)") from None
        users = cls(path=path)
        for lineno, raw_line in enumerate(editor_lines(text), 1):
            line = raw_line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            name = fields[0]
            where = f"{path}:{lineno}"
            if not valid_user_name(name):
                raise UsersFileError(f"{where}: user name {name[:40]!r} has control characters")
            if len(fields) < 2:
                raise UsersFileError(f"{where}: user {name!r} has no credentials "
                                     "(expected NAME SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY ...)")
            if name in users.records:
                raise UsersFileError(f"{where}: user {name!r} appears twice")
            creds = {}
            for field in fields[1:]:
                try:
                    cred = ScramCredential.parse(field)
                except ValueError as exc:
                    raise UsersFileError(f"{where}: user {name!r}: {exc}") from None
                if cred.mechanism in creds:
                    raise UsersFileError(f"{where}: user {name!r}: {cred.mechanism} given twice")
                creds[cred.mechanism] = cred
            users.records[name] = UserRecord(name, creds)
        return users

    def dumps(self) -> str:
        head = ("# trio-dispatch users file, written by tdpasswd: one user a line,\n"
                "# NAME MECH$ITERATIONS:SALT$STOREDKEY:SERVERKEY ... (SCRAM, RFC 5802; no passwords)\n")
        return head + "".join(self.records[n].line() + "\n" for n in self.names())

    def save(self, path: str | None = None) -> None:
        """Write the file atomically (a temporary file in the same directory, renamed) with mode 0600."""
        path = path or self.path
        if path is None:
            raise ValueError("no path to save the users file to")
        directory = os.path.dirname(os.path.abspath(path))
        fd, tmp = tempfile.mkstemp(prefix=".tdpasswd-", dir=directory)  # mkstemp creates it 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(self.dumps())
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        self.path = path


def _binary_kind(data: bytes) -> str | None:
    """What a binary file looks like ("a Berkeley DB file", ...), None for text."""
    if len(data) >= 16:
        for order in ("little", "big"):
            if int.from_bytes(data[12:16], order) in _BDB_MAGICS:
                return "a Berkeley DB file (a Cyrus sasldb?)"
    if data[:4] in _GDBM_MAGICS:
        return "a GDBM file (a Cyrus sasldb?)"
    if b"\x00" in data[:65536]:
        return "a binary file"
    return None


# Stands in for an unknown user in PLAIN checks (see Users.check_plain); its password is never guessed.
_UNKNOWN_USER = UserRecord("", {"SCRAM-SHA-256": ScramCredential("SCRAM-SHA-256", DEFAULT_ITERATIONS,
                                                                  b"\0" * SALT_BYTES, b"\0" * 32, b"\0" * 32)})
