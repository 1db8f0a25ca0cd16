"""``tdbroker -c broker.xml``: a store-and-forward AMQP broker speaking the Artemis configuration.

Start-up contract: one stdout line per bound acceptor address, ``tdbroker: listening on HOST:PORT
(acceptor NAME)`` (``tdbroker: acceptor NAME not started (autoStart=false)`` for one that waits for the
management operation startAcceptor), then ``tdbroker: ready``. SIGINT/SIGTERM close every connection with a
close frame, sync the journal and exit 0. A failure before ready is one ``FILE:LINE: message`` line on stderr,
never a traceback, and the exit status says which kind it was (docs/broker-configuration.md, "Running
tdbroker"): EXIT_CONFIG_REFUSED (2) for a broker.xml refused as written (including the files it names:
key and trust stores, users files), EXIT_STARTUP_FAILED (1) for one the operating system would not carry
out (an acceptor's port in use, a journal or paging directory that cannot be created or written).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys

import click
import trio

from broker.acceptors import AcceptorControl, listening
from broker.addressing import write_bindings
from broker.config import BrokerConfig, BrokerConfigError, load_broker_config
from broker.credentials import FROM_STORE, store_path
from broker.fedruntime import run_federation
from broker.netruntime import NetworkConnectorTask
from broker.runtime import BridgeTask, BrokerRuntime
from broker.security import ACCEPTOR_MECHANISMS
from broker.journal_io import JournalError
from broker.server import Broker
from broker.xmlschema import HTTP_PROTOCOL, load_tree, split_tag
from wire.driver import shut_down_on_signal
from wire.errors import LocatedError
from wire.logformat import OneLineFormatter
from wire.memory import tune_gc

log = logging.getLogger("broker.daemon")

SHUTDOWN_GRACE_SECONDS = 3.0
DEFAULT_CONFIG = "broker.xml"
# tdrouterd's line layout (router/logsetup.py log_format, with its default timestamp and no source), so the
# router's and the broker's logs read, grep and merge alike; tests/unit/test_log_entity.py keeps them equal.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Exit statuses (see the module docstring); a clean shutdown exits 0.
EXIT_STARTUP_FAILED = 1
EXIT_CONFIG_REFUSED = 2


def element_line(cfg: BrokerConfig, name: str) -> int:
    """The line of broker.xml's first ``<name>`` element, else of ``<core>`` (an element left at its
    default): where a start-up failure points. Read again only on that path; the parse is the one
    broker.config uses."""
    try:
        with open(cfg.path, "rb") as f:
            root = load_tree(f.read(), cfg.path)
    except (OSError, LocatedError):
        return 0
    core = 0
    for elem in root.iter():
        if isinstance(elem.tag, str):
            tag = split_tag(elem.tag)[1]
            if tag == name:
                return elem.line
            if tag == "core" and not core:
                core = elem.line
    return core


def storage_failure(cfg: BrokerConfig, exc: OSError) -> LocatedError:
    """A journal, bindings, page or large message file the OS refused, at the directory element it lives
    under (an absent element: its <core>)."""
    culprit = exc.filename or cfg.journal_directory

    def under(path: str) -> bool:
        top = os.path.abspath(path)
        return os.path.commonpath([os.path.abspath(culprit), top]) == top

    if under(cfg.paging_path):
        element, directory = "paging-directory", cfg.paging_path
    elif cfg.persistence_enabled and under(cfg.large_messages_path):
        element, directory = "large-messages-directory", cfg.large_messages_path
    else:
        element, directory = "journal-directory", cfg.journal_directory
    what = directory if os.path.abspath(culprit) == os.path.abspath(directory) else f"{directory}: {culprit}"
    return LocatedError(cfg.path, element_line(cfg, element), f"<{element}> {what}: {exc.strerror or exc}")


def attach_management(broker: Broker) -> None:
    """Install the management agent when its module is present (it is written separately)."""
    try:
        from broker.management import BrokerManagement
    except ImportError as exc:
        log.info("management agent not available (%s); $management is refused", exc)
        return
    broker.management = BrokerManagement(broker)


def make_recorder(broker: Broker, cfg: BrokerConfig):
    """A wire.flowrecords.FlowRecorder when <flow-records> is configured, else None (costs nothing)."""
    fr = cfg.flow_records
    if fr is None:
        return None
    from wire.flowrecords import FlowRecorder, FlowRecordError

    try:
        return FlowRecorder(fr.directory, broker.name, sample=fr.sample, rotate_mb=fr.rotate_mb)
    except FlowRecordError as exc:   # the directory cannot be made or written
        raise LocatedError(cfg.path, fr.line, f"<flow-records>: {exc}") from None
    except OSError as exc:
        raise LocatedError(cfg.path, fr.line, f"<flow-records> {fr.directory}: {exc.strerror or exc}") from None


def _final_bindings(broker: Broker) -> None:
    """Write a queue-table change the bindings task had no time for (shutdown; blocking is fine here)."""
    snapshot = broker.take_bindings()
    if snapshot is None:
        return
    try:
        write_bindings(broker.bindings_path(), snapshot)
    except OSError as exc:
        log.error("cannot write bindings at shutdown: %s", exc)


def acceptor_security(cfg: BrokerConfig) -> dict:
    """ConnectionSettings for an acceptor: with security on, a SASL login against the users file is
    required (SCRAM or PLAIN, checked by wire/saslserver.py; no ANONYMOUS)."""
    if not cfg.security_enabled:
        return {}
    return {"sasl_users": cfg.security.users, "authenticate_peer": True, "sasl_mechanisms": ACCEPTOR_MECHANISMS}


async def run_broker(cfg: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    try:
        if cfg.persistence_enabled:
            # Made here, before the broker's parts look into it, so that an unusable directory is this one
            # line rather than their warnings first (the journal would make it too).
            os.makedirs(cfg.journal_directory, exist_ok=True)
        broker = Broker(cfg)
        broker.open_journal()
    except OSError as exc:
        raise storage_failure(cfg, exc) from None
    except JournalError as exc:   # another broker holds it, or recovery found what it may not truncate
        raise LocatedError(cfg.path, element_line(cfg, "journal-directory"), f"<journal-directory>: {exc}") from None
    attach_management(broker)
    broker.recorder = make_recorder(broker, cfg)
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            await _serve(broker, cfg, signals, task_status)
    finally:
        _final_bindings(broker)
        broker.close_journal()
        if broker.recorder is not None:
            broker.recorder.close()


async def _start_http_acceptor(broker: Broker, cfg: BrokerConfig, acc, nursery: trio.Nursery) -> None:
    """An acceptor with protocols=HTTP: the console, /metrics, /healthz (broker/httpserve.py)."""
    # Imported only where HTTP is served: wire.http's h11 and wsproto cost every other start ~50 ms of CPU.
    from broker import httpserve

    try:
        listeners = await httpserve.bind_http_acceptor(acc)
    except OSError as exc:
        raise LocatedError(cfg.path, acc.line, f"acceptor {acc.name}: cannot listen on {acc.host}:{acc.port}: "
                                               f"{exc.strerror or exc}") from None
    httpserve.serve_http_acceptor(nursery, listeners, broker, cfg, acc)


async def _start_acceptors(broker: Broker, cfg: BrokerConfig, nursery: trio.Nursery) -> None:
    """One AcceptorControl per <acceptor> in ``broker.acceptors``, each listening unless autoStart=false;
    a port that cannot be bound at start-up raises a LocatedError at the acceptor."""
    if not hasattr(broker, "acceptors"):
        broker.acceptors = {}   # management (broker/management.py) reads them there

    def announce() -> None:
        broker.network.set_local_acceptors(listening(broker.acceptors.values()))

    for acc in cfg.acceptors:
        if HTTP_PROTOCOL in acc.protocols:
            await _start_http_acceptor(broker, cfg, acc, nursery)
            continue
        settings = broker.connection_settings(name=acc.name, **acceptor_security(cfg))
        ctl = AcceptorControl(acc, lambda remote, s=settings, a=acc: broker.new_engine(
                                  s, server=True, remote_host=remote, min_large_message_size=a.min_large_message_size),
                              on_change=announce)
        broker.acceptors[acc.name] = ctl
        try:
            await nursery.start(ctl.run)
        except OSError as exc:
            raise LocatedError(cfg.path, acc.line, f"acceptor {acc.name}: cannot listen on {acc.host}:{acc.port}: "
                                                   f"{exc.strerror or exc}") from None
        if not ctl.started:
            print(f"tdbroker: acceptor {acc.name} not started (autoStart=false)", flush=True)
        for h, p in ctl.bound:
            print(f"tdbroker: listening on {h}:{p} (acceptor {acc.name})", flush=True)
    announce()


async def _serve(broker: Broker, cfg: BrokerConfig, signals, task_status) -> None:
    # A start-up failure leaves the nursery cancelled and is raised after it, so that it reaches run()
    # as itself, not wrapped in the nursery's exception group.
    failure: LocatedError | None = None
    async with trio.open_nursery() as nursery:
        try:
            await nursery.start(BrokerRuntime(broker).run)
            if broker.recorder is not None:
                nursery.start_soon(broker.recorder.run)
            await _start_acceptors(broker, cfg, nursery)
        except LocatedError as exc:
            failure = exc
            nursery.cancel_scope.cancel()
        except OSError as exc:   # the journal's committer or the pager could not start
            failure = storage_failure(cfg, exc)
            nursery.cancel_scope.cancel()
        else:
            for ctl in broker.bridges.values():
                nursery.start_soon(BridgeTask(ctl).run)  # auto-start="false" ones wait for start_broker_connection
            # Network connectors: one after another (ActiveMQ's default), each given its first attempt, unless
            # networkConnectorStartAsync.
            await nursery.start(run_federation, broker)  # also for the upstreams a downstream's command makes
            serial = not cfg.network_connector_start_async
            for connector in cfg.network_connectors:
                await nursery.start(functools.partial(NetworkConnectorTask(broker.network, connector).run,
                                                      serial=serial))
            print("tdbroker: ready", flush=True)
            task_status.started(broker)
            await shut_down_on_signal(signals, broker.close_all, lambda: bool(broker.connections),
                                      SHUTDOWN_GRACE_SECONDS)
            # Acknowledgements of the last moments ride one final sync (Journal.close syncs the buffer).
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


@click.group(context_settings={"help_option_names": ["-h", "--help"]}, invoke_without_command=True)
@click.version_option(package_name="trio-dispatch", prog_name="tdbroker", message="%(prog)s %(version)s")
@click.option("-c", "--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              help="Artemis-style broker.xml.")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
@click.pass_context
def main(ctx: click.Context, config_path: str, verbose: bool) -> None:
    """tdbroker: a store-and-forward AMQP 1.0 broker that peers with trio-dispatch routers.

    Without a command it runs the broker; `tdbroker -c broker.xml user ...` manages the users beside it,
    `tdbroker -c broker.xml credential ...` the passwords its own connections log in with."""
    ctx.obj = config_path
    if ctx.invoked_subcommand is None:
        run(config_path, verbose)


def run(config_path: str, verbose: bool) -> None:
    try:
        cfg = load_broker_config(config_path)
    except BrokerConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG_REFUSED)
    except OSError as exc:
        click.echo(f"{config_path}: {exc.strerror or exc}", err=True)
        sys.exit(EXIT_CONFIG_REFUSED)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    for w in cfg.warnings:
        click.echo(w, err=True)
    if cfg.security_enabled is None:
        # Artemis' default is security-enabled true; with no users to check, say plainly what that means
        # instead of leaving the operator to assume Artemis' default (issue 12).
        log.warning("%s: no <security-enabled> and no artemis-users.properties beside it: anyone who can reach an "
                    "acceptor may connect, send, consume and manage; keep the acceptors on 127.0.0.1 or behind "
                    "a firewall, or add users (<security-enabled>false</security-enabled> says it is meant and "
                    "silences this)", cfg.path)
    elif cfg.security_enabled:
        log.info("%s: security enabled: %d users; every acceptor requires a SASL login (%s)", cfg.path,
                 len(cfg.security.users), ACCEPTOR_MECHANISMS)
    for conn in cfg.broker_connections:
        if conn.password_source == FROM_STORE:
            log.info("broker connection %s logs in as %r with the password from the credentials store %s",
                     conn.name, conn.user, store_path(cfg.path))
    tune_gc()
    try:
        trio.run(run_broker, cfg)
    except LocatedError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_STARTUP_FAILED)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


def _read_password() -> str:
    """One line of standard input; on a terminal, asked for twice without echo. Never from the command line
    (argv is visible to every user of the machine)."""
    if sys.stdin.isatty():
        return click.prompt("Password", hide_input=True, confirmation_prompt=True, err=True)
    return sys.stdin.readline().rstrip("\r\n")


@main.group()
def user() -> None:
    """Users of the properties login module (artemis-users.properties, artemis-roles.properties beside
    broker.xml), like `artemis user`. Restart the broker to apply a change."""


@user.command("add")
@click.option("--user", "name", required=True, help="User name.")
@click.option("--role", "roles", multiple=True, help="A role to add the user to (repeatable, or comma-separated).")
@click.pass_obj
def user_add(config_path: str, name: str, roles: tuple) -> None:
    """Add a user, or set their password: read from standard input (one line; on a terminal asked twice
    without echo), stored hashed (ENC(...))."""
    from broker.security import add_user

    password = _read_password()
    try:
        add_user(config_path, name, password, [r.strip() for rs in roles for r in rs.split(",") if r.strip()])
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"user {name} set")


@user.command("rm")
@click.option("--user", "name", required=True, help="User name.")
@click.pass_obj
def user_rm(config_path: str, name: str) -> None:
    """Remove a user from the users file and from every role."""
    from broker.security import remove_user

    if not remove_user(config_path, name):
        raise click.ClickException(f"no user {name}")
    click.echo(f"user {name} removed")


@user.command("list")
@click.pass_obj
def user_list(config_path: str) -> None:
    """List the users and their roles."""
    from broker.security import SecurityFileError, list_users

    try:
        rows = list_users(config_path)
    except SecurityFileError as exc:
        raise click.ClickException(str(exc)) from None
    for name, roles in rows:
        click.echo(f"{name} roles: {','.join(roles)}")


@main.group()
def credential() -> None:
    """The credentials store (broker-credentials.properties beside broker.xml, mode 0600): the passwords the
    broker's own connections log in with when broker.xml gives their user only. Restart to apply."""


@credential.command("add")
@click.option("--user", "name", required=True, help="User name the connection logs in as.")
@click.pass_obj
def credential_add(config_path: str, name: str) -> None:
    """Store a user's password (read from standard input), or replace it."""
    from broker.credentials import add_credential

    try:
        add_credential(config_path, name, _read_password())
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"credential for {name} stored in {store_path(config_path)}")


@credential.command("rm")
@click.option("--user", "name", required=True, help="User name.")
@click.pass_obj
def credential_rm(config_path: str, name: str) -> None:
    """Remove a user's stored password."""
    from broker.credentials import remove_credential

    try:
        removed = remove_credential(config_path, name)
    except OSError as exc:
        raise click.ClickException(str(exc)) from None
    if not removed:
        raise click.ClickException(f"no credential for {name} in {store_path(config_path)}")
    click.echo(f"credential for {name} removed")


@credential.command("list")
@click.pass_obj
def credential_list(config_path: str) -> None:
    """List the users with a stored password (never the passwords)."""
    from broker.credentials import CredentialsError, list_credentials

    try:
        names = list_credentials(config_path)
    except CredentialsError as exc:
        raise click.ClickException(str(exc)) from None
    for name in names:
        click.echo(name)


if __name__ == "__main__":
    main()
