"""tdbroker's credentials store: the passwords its own outgoing connections log in with, kept out of
broker.xml.

Broker connections (``<amqp-connection user="U">``, and the network connectors that reuse this module)
authenticate like any client, with a user and a password. Writing the password into broker.xml leaves
it in every copy, backup and review of the configuration; Amazon MQ's practice for network connectors is
to name the user only and take the password from a store the broker keeps. tdbroker's store is a file
beside broker.xml, :data:`STORE_FILE`, one entry a line::

    # the passwords of tdbroker's outgoing connections
    upstream = s3cret

* ``#`` and ``!`` start comment lines; the first ``=`` or ``:`` separates the user name from the
  password; both are stripped of surrounding whitespace. The password is taken literally (no escapes,
  no continuation lines): it is what the connection sends (SASL PLAIN) or proves (SCRAM), so it is kept
  in clear, unlike the hashed ``ENC(...)`` verifiers of the users file (:mod:`broker.security`), which
  only a server can use. An ``ENC(...)`` value is refused rather than sent as written.
* The file must be private, like an ssh private key: a store that group or others may read or write is
  refused at start-up with its path and the ``chmod 600`` that fixes it. ``tdbroker -c broker.xml
  credential add --user U`` (password from standard input, never the command line), ``credential rm``
  and ``credential list`` (names only) edit it atomically with mode 0600.

:class:`Credentials` is what a configuration parser uses: :meth:`Credentials.check` reads the store at
start-up when it exists (so a world-readable store stops the broker even before a connection needs it),
and :meth:`Credentials.resolve` turns an element's ``user``/``password`` attributes into a
:class:`Login`, taking the password from the store when the element names a user only. Errors are
:class:`CredentialsError` (``FILE:LINE: message``), located at the store's line or at the configuration
element; no message, log line or ``repr`` holds a password.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from wire.errors import LocatedError
from wire.users import valid_user_name

from .propfiles import entry_key, read_lines, write_private

#: The store's file name, beside broker.xml.
STORE_FILE = "broker-credentials.properties"
#: Permission bits a store may not have: any access by group or others (ssh's rule for private keys).
NOT_PRIVATE_BITS = 0o077
#: A store bigger than this is not a list of passwords (bounded memory at start-up).
MAX_STORE_BYTES = 1024 * 1024
#: Where a login's password came from (:attr:`Login.source`).
FROM_CONFIG, FROM_STORE = "configuration", "credentials store"
_SEPARATORS = "=:"


class CredentialsError(LocatedError):
    """A store that cannot be used, or a login it cannot complete: ``FILE:LINE: message`` (never a
    password)."""


def store_path(config_path: str) -> str:
    """The store beside the configuration file ``config_path``."""
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), STORE_FILE)


def add_command(config_path: str, user: str) -> str:
    """The command that stores ``user``'s password for the configuration at ``config_path``."""
    return f"tdbroker -c {config_path} credential add --user {user}"


class CredentialStore:
    """The entries of one store file: user name -> password. The passwords stay out of ``repr``."""

    def __init__(self, path: str, passwords: dict, lines: dict):
        self.path = path
        self._passwords = passwords
        self.lines = lines            # user -> line in the file (for messages)

    def __contains__(self, user: str) -> bool:
        return user in self._passwords

    def __repr__(self) -> str:
        return f"CredentialStore({self.path!r}, users={self.names()!r})"

    def password(self, user: str) -> str:
        """``user``'s password (KeyError when the store has none)."""
        return self._passwords[user]

    def names(self) -> list[str]:
        """The user names, sorted."""
        return sorted(self._passwords)


@dataclass(frozen=True)
class Login:
    """What an outgoing connection logs in with: ``user`` None is SASL ANONYMOUS. ``source`` says where
    the password came from (:data:`FROM_CONFIG`, :data:`FROM_STORE`, or None without a user)."""

    user: str | None
    password: str | None = field(repr=False)
    source: str | None = None


# --- reading ----------------------------------------------------------------------------------------------------

def _split(line: str) -> tuple[str, str] | None:
    """``(name, value)`` of an entry line, or None for a blank or comment line; ValueError without a
    separator."""
    stripped = line.strip()
    if not stripped or stripped[0] in "#!":
        return None
    cut = min((i for i in (stripped.find(s) for s in _SEPARATORS) if i >= 0), default=-1)
    if cut <= 0:
        raise ValueError("expected 'user = password'")
    return stripped[:cut].strip(), stripped[cut + 1:].strip()


def _read_private(path: str) -> bytes:
    """The store's bytes, refusing a file group or others may access. The mode is read from the open
    descriptor, so the file checked is the file read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise CredentialsError(path, 0, f"cannot read the credentials store: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise CredentialsError(path, 0, "the credentials store is not a regular file")
        if st.st_mode & NOT_PRIVATE_BITS:
            raise CredentialsError(
                path, 0, f"the credentials store holds passwords but has mode {stat.S_IMODE(st.st_mode):04o}, "
                "which lets group or others read or change it; refused (as ssh refuses such a private key). "
                f"Run: chmod 600 {path}")
        data = f.read(MAX_STORE_BYTES + 1)
    if len(data) > MAX_STORE_BYTES:
        raise CredentialsError(path, 0, f"the credentials store is larger than {MAX_STORE_BYTES} bytes")
    return data


def load_store(path: str) -> CredentialStore:
    """Read and check the store at ``path`` (:class:`CredentialsError` with the line otherwise)."""
    data = _read_private(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CredentialsError(path, data[:exc.start].count(b"\n") + 1, "not UTF-8 text") from None
    passwords: dict[str, str] = {}
    lines: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        try:
            entry = _split(raw)
        except ValueError as exc:
            raise CredentialsError(path, lineno, str(exc)) from None
        if entry is None:
            continue
        name, password = entry
        if not valid_user_name(name):
            raise CredentialsError(path, lineno, f"user name {name[:40]!r} has spaces or control characters")
        if name in passwords:
            raise CredentialsError(path, lineno, f"user {name!r} appears twice (first at line {lines[name]})")
        if not password:
            raise CredentialsError(path, lineno, f"user {name!r} has an empty password")
        if password.upper().startswith("ENC("):
            raise CredentialsError(path, lineno, f"user {name!r}: ENC(...) is not decoded: the store holds the "
                                                 "password a connection sends, in clear (the file is private); "
                                                 f"set it with `tdbroker credential add --user {name}`")
        passwords[name] = password
        lines[name] = lineno
    return CredentialStore(path, passwords, lines)


class Credentials:
    """The logins of one configuration file's outgoing connections (see the module docstring).

    The store beside ``config_path`` is read at most once, by :meth:`check` or by the first
    :meth:`resolve` that needs it."""

    def __init__(self, config_path: str, path: str | None = None):
        self.config_path = config_path
        self.path = path or store_path(config_path)
        self._store: CredentialStore | None = None
        self._loaded = False

    def store(self) -> CredentialStore | None:
        """The store, or None when there is no store file."""
        if not self._loaded:
            self._store = load_store(self.path) if os.path.lexists(self.path) else None
            self._loaded = True
        return self._store

    def check(self) -> None:
        """Read the store now when it exists: a store others may read is refused at start-up whether or
        not a connection uses it (its passwords are exposed either way)."""
        self.store()

    def resolve(self, user: str | None, password: str | None, *, line: int, what: str, warn=None) -> Login:
        """The login of the configuration element at ``line`` (``what`` names it in messages, e.g.
        ``"amqp-connection 'to-b'"``) from its user and password attributes (None when absent):

        * user and password: the password as written (``warn(message)`` is told that the password sits in
          the configuration in clear and the store is the alternative);
        * user only: the password from the store, a :class:`CredentialsError` at ``line`` naming the
          store and the command that fills it when the store has no entry for the user;
        * neither: ANONYMOUS. A password without a user, and Artemis' masked ``ENC(...)``, would be
          ignored or sent as written: both are refused."""
        if password is not None:
            if not user:
                raise CredentialsError(self.config_path, line, f"{what}: password without user is not enforced: "
                                       "the connection would log in ANONYMOUS; add user=\"...\" or remove the "
                                       "password")
            if password.strip().upper().startswith("ENC("):
                raise CredentialsError(self.config_path, line, f"{what}: masked passwords (ENC(...)) are not "
                                       "enforced yet: tdbroker does not decode them; store the password with "
                                       f"`{add_command(self.config_path, user)}` and remove the attribute")
            if warn is not None:
                warn(f"{what}: the password of user {user!r} is written in the configuration, in clear; keep "
                     f"it in the credentials store instead ({STORE_FILE}: "
                     f"`{add_command(self.config_path, user)}`, then remove the password attribute)")
            return Login(user, password, FROM_CONFIG)
        if not user:
            return Login(None, None, None)
        store = self.store()
        if store is None or user not in store:
            where = (f"there is no credentials store {self.path}" if store is None
                     else f"the credentials store {self.path} has no entry for {user!r}")
            raise CredentialsError(self.config_path, line, f"{what} logs in as {user!r} without a password in "
                                   f"the configuration, and {where}. Store it with "
                                   f"`{add_command(self.config_path, user)}` (the password is read from "
                                   "standard input)")
        return Login(user, store.password(user), FROM_STORE)


# --- `tdbroker credential add|rm|list`: edit the store in place ----------------------------------------------------

def check_new_entry(user: str, password: str) -> None:
    """ValueError when ``user`` or ``password`` cannot be written to, and read back from, the store (the
    message never holds the password)."""
    if not valid_user_name(user) or any(s in user for s in _SEPARATORS) or user.startswith("!"):
        raise ValueError(f"user name {user!r} must be non-empty, without spaces, '=', ':' or control "
                         "characters, and not start with '#' or '!'")
    if not password:
        raise ValueError("the password is empty")
    if password != password.strip() or not all(c.isprintable() for c in password):
        raise ValueError("the password starts or ends with whitespace or holds control characters, which the "
                         "store cannot keep")
    if password.upper().startswith("ENC("):
        raise ValueError("a password starting with ENC( would be refused when the store is read")


def add_credential(config_path: str, user: str, password: str) -> None:
    """Set ``user``'s password in the store beside ``config_path`` (created, mode 0600)."""
    check_new_entry(user, password)
    path = store_path(config_path)
    lines = [line for line in read_lines(path) if entry_key(line) != user]
    if not lines:
        lines = ["# tdbroker credentials store: the passwords of the broker's outgoing connections",
                 "# (user = password). Keep this file private (mode 0600); edit it with `tdbroker credential`."]
    write_private(path, lines + [f"{user} = {password}"])


def remove_credential(config_path: str, user: str) -> bool:
    """Remove ``user``'s entry; False when there was none."""
    path = store_path(config_path)
    lines = read_lines(path)
    kept = [line for line in lines if entry_key(line) != user]
    if len(kept) == len(lines):
        return False
    write_private(path, kept)
    return True


def list_credentials(config_path: str) -> list[str]:
    """The user names in the store (never the passwords); the store is checked as at start-up."""
    path = store_path(config_path)
    if not os.path.lexists(path):
        return []
    return load_store(path).names()
