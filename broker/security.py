"""tdbroker security: the users and roles of Artemis' properties login module, ``<security-settings>``
permissions (:func:`permitted`), TLS from acceptor and connection URIs (:func:`uri_tls`), and the file
edits behind ``tdbroker user add|rm|list``.

Artemis' default JAAS realm (``PropertiesLogin`` in ``login.config``) reads two files beside broker.xml
(Artemis docs, "Security", "PropertiesLoginModule"): ``artemis-users.properties`` with one
``user = password`` line per user, and ``artemis-roles.properties`` with ``role = user1,user2``. tdbroker
reads the same two files from broker.xml's folder; there is no ``login.config``.

Users file, one user a line (``#`` and ``!`` start comment lines; the first ``=`` or ``:`` separates):

- ``alice = secret`` — the password in clear, as Artemis accepts it. tdbroker derives SCRAM keys from it
  at start-up (:class:`wire.users.UserRecord`) and keeps no copy of the password.
- ``alice = ENC(SCRAM-SHA-256$4096:SALT$STOREDKEY:SERVERKEY SCRAM-SHA-512$...)`` — tdbroker's own hashed
  form: the SCRAM verifiers of :mod:`wire.users` (the fields ``tdpasswd`` writes after the name), so the
  file holds no password. Artemis' own ``ENC(...)`` hashes (written by ``artemis user add``, a codec of
  its own) cannot be read and are refused with the line: set that user's password again.

Java properties escapes and continuation lines (a line ending in ``\\``) are refused rather than guessed.

With security on, every acceptor requires a SASL login (SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN, checked
by :mod:`wire.saslserver`); ANONYMOUS is not offered. Roles are read and checked, and used by
``<security-settings>`` (:func:`permitted`); without any, every user who logs in may send, consume and manage.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from wire.errors import LocatedError
from wire.tls import ARTEMIS_TLS_PARAMETERS, TlsConfigError, artemis_tls
from wire.users import ScramCredential, UserRecord, Users, editor_line_at, editor_lines, valid_user_name

from . import xmlschema as xs
from .propfiles import entry_key, read_lines, write_private
from .xmlschema import Ctx

USERS_FILE = "artemis-users.properties"
ROLES_FILE = "artemis-roles.properties"
#: What a secured acceptor offers, strongest first (no ANONYMOUS, no EXTERNAL).
ACCEPTOR_MECHANISMS = "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"
#: A properties file bigger than this is not a users list (bounded memory at start-up).
MAX_PROPERTIES_BYTES = 16 * 1024 * 1024


class SecurityFileError(LocatedError):
    """A users or roles file that cannot be used: ``FILE:LINE: message``."""


@dataclass
class BrokerSecurity:
    """The users (SCRAM verifiers) and roles tdbroker authenticates against."""

    users: Users
    roles: dict = field(default_factory=dict)  # role -> tuple of user names
    warnings: list = field(default_factory=list)
    settings: list = field(default_factory=list)  # SecuritySetting (empty: every user may do everything)


def users_path(config_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), USERS_FILE)


def roles_path(config_path: str) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(config_path)), ROLES_FILE)


def _properties(path: str):
    """``(line, key, value)`` of a properties file, keys and values stripped."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_PROPERTIES_BYTES + 1)
    except OSError as exc:
        raise SecurityFileError(path, 0, f"cannot read: {exc.strerror or exc}") from None
    if len(data) > MAX_PROPERTIES_BYTES:
        raise SecurityFileError(path, 0, f"larger than {MAX_PROPERTIES_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SecurityFileError(path, editor_line_at(data, exc.start), "not UTF-8 text") from None
    for lineno, raw in enumerate(editor_lines(text), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            raise SecurityFileError(path, lineno, "continuation lines (ending in '\\') are not supported: "
                                                  "write the entry on one line")
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise SecurityFileError(path, lineno, "expected 'name = value'")
        key, value = line[:cut].strip(), line[cut + 1:].strip()
        if "\\" in key:
            raise SecurityFileError(path, lineno, "escapes ('\\') in names are not supported")
        yield lineno, key, value


def load_users(path: str) -> Users:
    """Read ``artemis-users.properties``; :class:`SecurityFileError` with the line otherwise."""
    users = Users(path=path)
    for lineno, name, value in _properties(path):
        if not valid_user_name(name):
            raise SecurityFileError(path, lineno, f"user name {name[:40]!r} has spaces or control characters")
        if name in users:
            raise SecurityFileError(path, lineno, f"user {name!r} appears twice")
        if value.upper().startswith("ENC(") and value.endswith(")"):
            users.records[name] = UserRecord(name, _encoded(path, lineno, name, value[4:-1]))
        elif not value:
            raise SecurityFileError(path, lineno, f"user {name!r} has an empty password")
        else:
            users.records[name] = UserRecord.from_password(name, value)
    return users


def _encoded(path: str, lineno: int, name: str, inner: str) -> dict:
    creds = {}
    for text in inner.split():
        try:
            cred = ScramCredential.parse(text)
        except ValueError:
            raise SecurityFileError(
                path, lineno, f"user {name!r}: ENC(...) is not tdbroker's hashed form "
                "(ENC(SCRAM-SHA-256$ITERATIONS:SALT$STOREDKEY:SERVERKEY ...), see docs/broker-configuration.md); "
                "Artemis' own ENC hashes cannot be read: write the password again, in clear or in that form "
                "(the credentials `tdpasswd` writes after the user name)") from None
        creds[cred.mechanism] = cred
    if not creds:
        raise SecurityFileError(path, lineno, f"user {name!r}: ENC() is empty")
    return creds


def load_roles(path: str, users: Users) -> tuple[dict, list]:
    """Read ``artemis-roles.properties``: role -> user names; a warning per member who is not a user."""
    roles: dict[str, tuple] = {}
    warnings: list[str] = []
    for lineno, role, value in _properties(path):
        if role in roles:
            raise SecurityFileError(path, lineno, f"role {role!r} appears twice")
        members = tuple(m.strip() for m in value.split(",") if m.strip())
        for member in members:
            if member not in users:
                warnings.append(f"{path}:{lineno}: warning: role {role!r} names {member!r}, who is not in "
                                f"{USERS_FILE}")
        roles[role] = members
    return roles, warnings


def load_security(config_path: str) -> BrokerSecurity | None:
    """The users and roles beside ``config_path``, or None when there is no users file."""
    upath = users_path(config_path)
    if not os.path.exists(upath):
        return None
    users = load_users(upath)
    rpath = roles_path(config_path)
    roles, warnings = load_roles(rpath, users) if os.path.exists(rpath) else ({}, [])
    return BrokerSecurity(users, roles, warnings)


# --- TLS from acceptor and connection URIs ------------------------------------------------------------------

#: URI parameters whose value is a secret: replaced in the ``uri`` that management and logs show.
_SECRET_URI_PARAMS = re.compile(r"((?:keyStorePassword|trustStorePassword)=)[^;&#,]*")


def redacted_uri(uri: str) -> str:
    """``uri`` with the value of every password parameter replaced by ``***``."""
    return _SECRET_URI_PARAMS.sub(r"\1***", uri)


def uri_tls(ctx: Ctx, el, what: str, params: dict, *, server: bool):
    """The TLS an acceptor or connection URI asks for (Artemis' TLS parameters, read by
    :func:`wire.tls.artemis_tls`): a :class:`wire.tls.ServerTls` / :class:`wire.tls.ClientTls`, or None
    for plaintext. The TLS parameters are taken out of ``params``. Parameters of the family that are not
    implemented are refused unless "off" (xmlschema.TLS_URI_PARAMS_OFF set to false); key and trust
    stores must be PEM files, checked now (a missing or unreadable file is a FILE:LINE error). Relative
    store paths are read from broker.xml's folder. Passwords are never echoed."""
    for key in [k for k in params if k in xs.TLS_URI_PARAMS and k not in ARTEMIS_TLS_PARAMETERS]:
        value = params.pop(key)
        if key in xs.TLS_URI_PARAMS_OFF and value.strip().lower() == "false":
            continue
        shown = f"{key}={value}" if key in xs.TLS_URI_PARAMS_OFF else key   # never echo a password
        raise ctx.error(el, f"{what}: {shown} is not supported by tdbroker (supported TLS parameters: "
                            f"{', '.join(ARTEMIS_TLS_PARAMETERS)})")
    given = {k: params.pop(k) for k in ARTEMIS_TLS_PARAMETERS if k in params}
    if given.get("sslEnabled", "false").strip().lower() == "false":
        # Plaintext: an "off" value (needClientAuth=false ...) says nothing and is accepted.
        given = {k: v for k, v in given.items()
                 if not (k in xs.TLS_URI_PARAMS_OFF and v.strip().lower() == "false")}
    base = os.path.dirname(os.path.abspath(ctx.path))
    for key in ("keyStorePath", "trustStorePath"):
        if key in given and not os.path.isabs(given[key]):
            given[key] = os.path.join(base, given[key])
    try:
        tls = artemis_tls(given)
        if tls is None:
            return None
        if server and given.get("verifyHost", "false").strip().lower() != "false":
            # Host verification checks the certificate of the server dialled; an acceptor dials nobody.
            raise TlsConfigError("verifyHost", "an acceptor does not dial a host, so there is none to verify: "
                                 "remove it (it applies to connection URIs)")
        if server and not tls.profile.cert_file:
            raise TlsConfigError("keyStorePath", "an sslEnabled acceptor needs keyStorePath (a PEM file with "
                                 "the certificate chain and the private key)")
        return tls.server_tls() if server else tls.client_tls()
    except TlsConfigError as exc:
        raise ctx.error(el, f"{what}: {exc}") from None


# --- authorization: <security-settings> -----------------------------------------------------------------------

#: Artemis' permission types (Artemis docs, "Security", "Role based security for addresses") that tdbroker
#: checks, and where (broker/server.py): send (a client attaching a link to send to the address), consume
#: (a link to consume from it), manage (sending to $management), createAddress + createDurableQueue (a
#: link whose attach auto-creates an anycast queue), createDurableQueue / createNonDurableQueue (a durable
#: or non-durable multicast subscription, a dynamic temporary queue), browse (a receiver with
#: distribution-mode copy on a queue: a queue browser, broker/browse.py), deleteNonDurableQueue (a link
#: close that would delete its dynamic temporary queue or non-durable subscription queue; denied, the
#: queue stays until the connection closes), deleteDurableQueue (closing, not detaching, a durable
#: subscription link; denied, the subscription stays), deleteAddress (accepted; no client operation of
#: tdbroker deletes an address: auto-delete is the broker's own, management deletion needs manage, as in
#: Artemis).
ENFORCED_PERMISSIONS = ("send", "consume", "manage", "createAddress", "createDurableQueue",
                        "createNonDurableQueue", "deleteAddress", "deleteDurableQueue", "deleteNonDurableQueue",
                        "browse")
#: Artemis' types tdbroker does not check: refused when a <permission> grants one, so a rule is never
#: accepted and ignored. type -> why. (Every Artemis type is checked now.)
UNENFORCED_PERMISSIONS: dict[str, str] = {}


@dataclass(frozen=True)
class SecuritySetting:
    """One ``<security-setting match>``: permission type -> the roles granted it."""

    match: str
    permissions: dict
    line: int


def user_roles(security: BrokerSecurity, user: str | None) -> frozenset:
    """The roles ``user`` has in artemis-roles.properties."""
    if user is None:
        return frozenset()
    return frozenset(role for role, members in security.roles.items() if user in members)


def permitted(settings: list, roles: frozenset, permission: str, address: str) -> bool:
    """Artemis' rule: the most specific matching ``<security-setting>`` decides (it is not merged with
    less specific ones); no match, or the type not listed there, denies."""
    import functools

    from .configmodel import artemis_match, match_specificity_cmp

    matching = [s for s in settings if artemis_match(s.match, address)]
    if not matching:
        return False
    best = min(matching, key=functools.cmp_to_key(lambda a, b: match_specificity_cmp(a.match, b.match)))
    return bool(roles & best.permissions.get(permission, frozenset()))


# --- `tdbroker user add|rm|list` (Artemis' `artemis user ...`): edit the two files in place ----------------------

def encoded_password(name: str, password: str) -> str:
    """``ENC(...)``: the SCRAM verifiers of ``password`` (tdbroker's hashed form; no password stored)."""
    return "ENC(" + " ".join(UserRecord.from_password(name, password).line().split()[1:]) + ")"


def add_user(config_path: str, name: str, password: str, roles=()) -> None:
    """Set ``name``'s password (hashed) in the users file and add them to ``roles``."""
    if not valid_user_name(name) or "=" in name or ":" in name:
        raise ValueError(f"user name {name!r} must be non-empty, without spaces, '=', ':' or control characters")
    if not password:
        raise ValueError("the password is empty")
    upath = users_path(config_path)
    lines = [line for line in read_lines(upath) if entry_key(line) != name]
    write_private(upath, lines + [f"{name} = {encoded_password(name, password)}"])
    if roles:
        rpath = roles_path(config_path)
        lines = read_lines(rpath)
        wanted = list(dict.fromkeys(roles))
        for i, line in enumerate(lines):
            role = entry_key(line)
            if role in wanted:
                members = [m.strip() for m in line.split("=", 1)[1].split(",") if m.strip()] if "=" in line else []
                lines[i] = f"{role} = {','.join(dict.fromkeys(members + [name]))}"
                wanted.remove(role)
        write_private(rpath, lines + [f"{role} = {name}" for role in wanted])


def remove_user(config_path: str, name: str) -> bool:
    """Remove ``name`` from the users file and every role; False when there was no such user."""
    upath = users_path(config_path)
    lines = read_lines(upath)
    kept = [line for line in lines if entry_key(line) != name]
    if len(kept) == len(lines):
        return False
    write_private(upath, kept)
    rpath = roles_path(config_path)
    if os.path.exists(rpath):
        out = []
        for line in read_lines(rpath):
            role = entry_key(line)
            if role is not None and "=" in line:
                members = [m.strip() for m in line.split("=", 1)[1].split(",") if m.strip() and m.strip() != name]
                line = f"{role} = {','.join(members)}"
            out.append(line)
        write_private(rpath, out)
    return True


def list_users(config_path: str) -> list[tuple[str, tuple]]:
    """``(user, roles)`` for every user of the users file, sorted."""
    security = load_security(config_path)
    if security is None:
        return []
    return [(name, tuple(sorted(user_roles(security, name)))) for name in security.users.names()]
