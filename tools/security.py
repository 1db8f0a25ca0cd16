"""Security options shared by the tools (tdstat, tdmanage, tdbench, ``tddemo brokerless --router``): TLS and
SASL in qdstat/qdmanage's names.

    --ssl-certificate FILE --ssl-key FILE   a client certificate (for SASL EXTERNAL or client-verifying listeners)
    --ssl-trustfile FILE                    CA certificates the server's certificate must chain to
    --ssl-password-file FILE                the password of an encrypted --ssl-key (or TD_SSL_PASSWORD)
    --ssl-disable-peer-name-verify          accept a trusted certificate that does not name the host
    --sasl-mechanisms "M1 M2"               what the tool may log in with, first the server offers wins
    --sasl-username USER                    log in as USER
    --sasl-password-file FILE               USER's password: the file's first line (or TD_SASL_PASSWORD)

TLS is used for an ``amqps://`` URL, or for ``-b host:port`` when any ``--ssl-*`` option is given (the
default port is then 5671). The server is always verified: against ``--ssl-trustfile`` or, without it, the
system's CA certificates.

Passwords never go on the command line: a command line is visible to every user of the machine (``ps``,
``/proc/PID/cmdline``) and stays in shell history. qdstat's ``--sasl-password`` and ``--ssl-password``
are therefore refused with a message naming the two ways that are accepted: a file (``--sasl-password-file``,
``--ssl-password-file``; the first line, without its line ending) or an environment variable
(``TD_SASL_PASSWORD``, ``TD_SSL_PASSWORD``). A file wins over the variable. Passwords are kept out of
``repr`` and error messages.

Proton's check of the server's name (tdstat, tdmanage) compares the host with the certificate's DNS names and
common name only, not with IP addresses: dial such a listener by name (``amqps://localhost:5671``) or add
``--ssl-disable-peer-name-verify``; the tools say so when a certificate check fails for an IP address.
tdbench (Python's ssl) also matches IP addresses.

Which client logs in how: tdbench logs in through wire's SASL client (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512).
tdstat and tdmanage use proton's blocking client, whose bundled SASL (no Cyrus SASL in proton's wheel) does
ANONYMOUS, PLAIN and EXTERNAL but not SCRAM; when ``--sasl-mechanisms`` names a SCRAM mechanism they connect
with :mod:`tools.engineclient` instead, which logs in through wire's SASL client (SCRAM, and PLAIN as a
fallback in the same list) over the stdlib's ``ssl`` with the same verification rules
(:meth:`Security.client_ssl_context`). Such a list cannot mix in EXTERNAL or ANONYMOUS. Python's ``ssl``
matches IP addresses too, so the name-check hint above concerns proton's connections only. tddemo's clients
are proton reactor clients: TLS, PLAIN, EXTERNAL and ANONYMOUS, and SCRAM refused with the reason.
"""

from __future__ import annotations

import argparse
import os
import ssl
from dataclasses import dataclass, field

SASL_PASSWORD_ENV = "TD_SASL_PASSWORD"
SSL_PASSWORD_ENV = "TD_SSL_PASSWORD"
AMQP_PORT = 5672
AMQPS_PORT = 5671

# What each kind of client can log in with.
PROTON_CLIENT_MECHANISMS = ("ANONYMOUS", "PLAIN", "EXTERNAL")
WIRE_CLIENT_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
# With a user name and no --sasl-mechanisms: the strongest each client can do.
WIRE_DEFAULT_MECHANISMS = "SCRAM-SHA-512 SCRAM-SHA-256 PLAIN"
PROTON_DEFAULT_MECHANISMS = "PLAIN"


class SecurityOptionError(ValueError):
    """A security option that cannot be used as given; the message says what to do instead."""


class _RefusePassword(argparse.Action):
    """qdstat's --sasl-password/--ssl-password: refused, never echoed (the value is not in the message)."""

    def __init__(self, option_strings, dest, file_option: str, env: str, **kw):
        self.file_option = file_option
        self.env = env
        super().__init__(option_strings, dest, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string} is refused: a password on the command line is visible to other users "
                     f"(ps) and stays in shell history; use {self.file_option} FILE or set {self.env}")


def add_security_options(parser: argparse.ArgumentParser) -> None:
    """Add the --ssl-* and --sasl-* options (qdstat's names; passwords only from a file or the environment)."""
    g = parser.add_argument_group("security", "TLS and SASL (an amqps:// URL or any --ssl-* option means TLS)")
    g.add_argument("--ssl-certificate", metavar="FILE", help="client certificate (PEM)")
    g.add_argument("--ssl-key", metavar="FILE", help="private key of --ssl-certificate (PEM)")
    g.add_argument("--ssl-trustfile", metavar="FILE",
                   help="CA certificates to verify the server with (default: the system's)")
    g.add_argument("--ssl-password-file", metavar="FILE",
                   help=f"password of an encrypted --ssl-key: the file's first line (or set {SSL_PASSWORD_ENV})")
    g.add_argument("--ssl-password", action=_RefusePassword, file_option="--ssl-password-file",
                   env=SSL_PASSWORD_ENV, metavar="PASSWORD",
                   help=f"refused: use --ssl-password-file or {SSL_PASSWORD_ENV}")
    g.add_argument("--ssl-disable-peer-name-verify", action="store_true",
                   help="do not check that the server's certificate names the host (it is still verified)")
    g.add_argument("--sasl-mechanisms", metavar="MECHS",
                   help="SASL mechanisms to log in with, space separated, first one the server offers wins")
    g.add_argument("--sasl-username", metavar="USER", help="SASL user name")
    g.add_argument("--sasl-password-file", metavar="FILE",
                   help=f"the user's password: the file's first line (or set {SASL_PASSWORD_ENV})")
    g.add_argument("--sasl-password", action=_RefusePassword, file_option="--sasl-password-file",
                   env=SASL_PASSWORD_ENV, metavar="PASSWORD",
                   help=f"refused: use --sasl-password-file or {SASL_PASSWORD_ENV}")


def read_password_file(path: str, option: str) -> str:
    """The first line of ``path`` without its line ending; errors name the file, never its content."""
    try:
        with open(path, encoding="utf-8") as f:
            line = f.readline()
    except OSError as exc:
        raise SecurityOptionError(f"{option} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SecurityOptionError(f"{option} {path}: not UTF-8 text") from None
    return line.rstrip("\r\n")


def password_from(file_path: str | None, option: str, env_name: str, environ=None) -> str | None:
    """A password from ``file_path`` (``option``'s value) or else the environment variable; None if neither."""
    if file_path:
        return read_password_file(file_path, option)
    value = (os.environ if environ is None else environ).get(env_name)
    return value if value else None


def mechanism_list(text: str | None) -> list[str]:
    return (text or "").upper().replace(",", " ").split()


def is_scram(mechanism: str) -> bool:
    return mechanism.upper().startswith("SCRAM-")


@dataclass
class Security:
    """The security settings of one tool run, resolved from its options."""

    tls: bool = False
    certificate: str | None = None
    key: str | None = None
    trustfile: str | None = None
    key_password: str | None = field(default=None, repr=False)
    verify_peer_name: bool = True
    mechanisms: list[str] = field(default_factory=list)
    username: str | None = None
    password: str | None = field(default=None, repr=False)

    @classmethod
    def from_options(cls, opts, *, url: str = "", environ=None) -> "Security":
        """Resolve the parsed options (and ``url``'s scheme) into settings; SecurityOptionError if unusable."""
        ssl_given = any(getattr(opts, n, None) for n in ("ssl_certificate", "ssl_key", "ssl_trustfile",
                                                         "ssl_password_file", "ssl_disable_peer_name_verify"))
        sec = cls(tls=url.lower().startswith("amqps://") or ssl_given,
                  certificate=getattr(opts, "ssl_certificate", None), key=getattr(opts, "ssl_key", None),
                  trustfile=getattr(opts, "ssl_trustfile", None),
                  verify_peer_name=not getattr(opts, "ssl_disable_peer_name_verify", False),
                  mechanisms=mechanism_list(getattr(opts, "sasl_mechanisms", None)),
                  username=getattr(opts, "sasl_username", None))
        if bool(sec.certificate) != bool(sec.key):
            raise SecurityOptionError("--ssl-certificate and --ssl-key go together")
        for option, path in (("--ssl-certificate", sec.certificate), ("--ssl-key", sec.key),
                             ("--ssl-trustfile", sec.trustfile)):
            if path and not os.access(path, os.R_OK):
                raise SecurityOptionError(f"{option} {path}: cannot read it")
        sec.key_password = password_from(getattr(opts, "ssl_password_file", None), "--ssl-password-file",
                                         SSL_PASSWORD_ENV, environ)
        if "EXTERNAL" in sec.mechanisms and not sec.certificate:
            raise SecurityOptionError("--sasl-mechanisms EXTERNAL logs in with a client certificate: "
                                      "give --ssl-certificate and --ssl-key")
        needs_password = sec.username and any(m not in ("ANONYMOUS", "EXTERNAL") for m in sec.mechanisms or ["PLAIN"])
        if needs_password:
            sec.password = password_from(getattr(opts, "sasl_password_file", None), "--sasl-password-file",
                                         SASL_PASSWORD_ENV, environ)
            if sec.password is None:
                raise SecurityOptionError(f"--sasl-username {sec.username} needs a password: give "
                                          f"--sasl-password-file FILE or set {SASL_PASSWORD_ENV}")
        elif getattr(opts, "sasl_password_file", None) and not sec.username:
            raise SecurityOptionError("--sasl-password-file needs --sasl-username")
        if not sec.username and any(m in ("PLAIN",) or m.startswith("SCRAM-") for m in sec.mechanisms):
            raise SecurityOptionError(f"--sasl-mechanisms {' '.join(sec.mechanisms)} needs --sasl-username")
        return sec

    @property
    def wants_engine_client(self) -> bool:
        """True when a SCRAM mechanism is asked for: proton's SASL cannot do it, tools.engineclient can."""
        return any(is_scram(m) for m in self.mechanisms)

    # -- proton's blocking client (tdstat, tdmanage) -------------------------------------------------------
    def proton_url(self, bus: str) -> str:
        """``host[:port]`` or a URL -> the URL proton should dial (amqps:// when TLS is on)."""
        if "://" in bus:
            scheme, _, rest = bus.partition("://")
            if self.tls and scheme.lower() == "amqp":
                raise SecurityOptionError(f"{bus}: --ssl-* options ask for TLS; use amqps:// (or host:port)")
            return bus
        if ":" not in bus:
            bus += f":{AMQPS_PORT if self.tls else AMQP_PORT}"
        return ("amqps://" if self.tls else "amqp://") + bus

    def proton_connect_kwargs(self) -> dict:
        """Keyword arguments for proton.utils.BlockingConnection: ssl_domain, allowed_mechs, user, password."""
        bad = [m for m in self.mechanisms if m not in PROTON_CLIENT_MECHANISMS]
        if bad:
            raise SecurityOptionError(
                f"--sasl-mechanisms {' '.join(bad)}: not supported; this tool logs in with "
                f"{', '.join(PROTON_CLIENT_MECHANISMS + WIRE_CLIENT_MECHANISMS[:2])}")
        kw: dict = {}
        if self.tls:
            from proton import SSLDomain
            domain = SSLDomain(SSLDomain.MODE_CLIENT)
            trust = self.trustfile or ssl.get_default_verify_paths().cafile
            if not trust:
                raise SecurityOptionError("TLS needs --ssl-trustfile: no system CA file was found to verify "
                                          "the server with")
            domain.set_trusted_ca_db(trust)
            domain.set_peer_authentication(SSLDomain.VERIFY_PEER_NAME if self.verify_peer_name
                                           else SSLDomain.VERIFY_PEER, trust)
            if self.certificate:
                domain.set_credentials(self.certificate, self.key, self.key_password)
            kw["ssl_domain"] = domain
        if self.mechanisms:
            kw["allowed_mechs"] = " ".join(self.mechanisms)
        elif self.username:
            kw["allowed_mechs"] = PROTON_DEFAULT_MECHANISMS
        if self.username:
            kw["user"] = self.username
            if self.password is not None:
                kw["password"] = self.password
        return kw

    def explain_failure(self, url: str, error: str) -> str:
        """``error`` (a failed connection to ``url``), with a hint when proton's name check cannot match an IP."""
        import ipaddress
        from urllib.parse import urlparse
        host = urlparse(url).hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return error
        if self.tls and self.verify_peer_name and "certificate verify failed" in error:
            return (f"{error} (this tool checks the certificate's DNS names, not IP addresses: dial the "
                    f"listener by a name its certificate carries, or add --ssl-disable-peer-name-verify)")
        return error

    # -- wire's engine clients (tdbench; tdstat and tdmanage with SCRAM) ---------------------------------------
    def client_ssl_context(self) -> ssl.SSLContext | None:
        """The stdlib client context for these options (None without TLS): the server verified against
        --ssl-trustfile or the system's CAs, its name checked unless --ssl-disable-peer-name-verify, and
        the client certificate when given."""
        if not self.tls:
            return None
        from wire.tls import TlsConfigError, TlsProfile
        profile = TlsProfile(name="client", cert_file=self.certificate, private_key_file=self.key,
                             ca_cert_file=self.trustfile, password=self.key_password)
        try:
            return profile.client_context(verify_hostname=self.verify_peer_name)
        except (TlsConfigError, OSError, ssl.SSLError) as exc:
            raise SecurityOptionError(f"TLS: {exc}") from None

    def client_tls(self):
        """A wire.tls.ClientTls for wire.driver.open_stream, or None without TLS."""
        context = self.client_ssl_context()
        if context is None:
            return None
        from wire.tls import ClientTls
        return ClientTls(context)

    def settings_kwargs(self) -> dict:
        """wire.connection.ConnectionSettings keywords: our SASL client with a user name, else ANONYMOUS."""
        if not self.username:
            return {}
        mechs = self.mechanisms or mechanism_list(WIRE_DEFAULT_MECHANISMS)
        bad = [m for m in mechs if m not in WIRE_CLIENT_MECHANISMS]
        if bad:
            raise SecurityOptionError(f"--sasl-mechanisms {' '.join(bad)}: not possible here: wire's SASL client "
                                      f"logs in with {', '.join(WIRE_CLIENT_MECHANISMS)}")
        return {"sasl_username": self.username, "sasl_password": self.password,
                "sasl_client_mechanisms": " ".join(mechs)}


def click_security_options(f=None, *, default_mechanisms: str = WIRE_DEFAULT_MECHANISMS):
    """The same options for a click command (tdbench, tddemo): adds ``security_opts`` (an argparse-like
    namespace). ``default_mechanisms``: what --help says a user name logs in with by default (tdbench's wire
    client: SCRAM then PLAIN; tddemo's proton clients: PLAIN)."""
    import functools

    if f is None:
        return functools.partial(click_security_options, default_mechanisms=default_mechanisms)

    import click

    def refuse(file_option: str, env: str):
        def callback(ctx, param, value):
            if value is not None:
                raise click.BadParameter(f"refused: a password on the command line is visible to other users "
                                         f"(ps) and stays in shell history; use {file_option} FILE or set {env}")
        return callback

    options = [
        click.option("--ssl-certificate", metavar="FILE", help="Client certificate (PEM)."),
        click.option("--ssl-key", metavar="FILE", help="Private key of --ssl-certificate (PEM)."),
        click.option("--ssl-trustfile", metavar="FILE",
                     help="CA certificates to verify the router with (default: the system's)."),
        click.option("--ssl-password-file", metavar="FILE",
                     help=f"Password of an encrypted --ssl-key: the file's first line (or set {SSL_PASSWORD_ENV})."),
        click.option("--ssl-password", metavar="PASSWORD", expose_value=False,
                     callback=refuse("--ssl-password-file", SSL_PASSWORD_ENV),
                     help=f"Refused: use --ssl-password-file or {SSL_PASSWORD_ENV}."),
        click.option("--ssl-disable-peer-name-verify", is_flag=True,
                     help="Do not check that the router's certificate names the host (it is still verified)."),
        click.option("--sasl-mechanisms", metavar="MECHS",
                     help=f"SASL mechanisms, first the router offers wins (default with a user: "
                          f"{default_mechanisms})."),
        click.option("--sasl-username", metavar="USER", help="SASL user name."),
        click.option("--sasl-password-file", metavar="FILE",
                     help=f"The user's password: the file's first line (or set {SASL_PASSWORD_ENV})."),
        click.option("--sasl-password", metavar="PASSWORD", expose_value=False,
                     callback=refuse("--sasl-password-file", SASL_PASSWORD_ENV),
                     help=f"Refused: use --sasl-password-file or {SASL_PASSWORD_ENV}."),
    ]
    names = ("ssl_certificate", "ssl_key", "ssl_trustfile", "ssl_password_file", "ssl_disable_peer_name_verify",
             "sasl_mechanisms", "sasl_username", "sasl_password_file")

    @functools.wraps(f)
    def wrapper(*args, **kw):
        kw["security_opts"] = argparse.Namespace(**{n: kw.pop(n) for n in names})
        return f(*args, **kw)

    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper
