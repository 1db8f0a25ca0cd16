"""``tdrouterd -c FILE``: load a qdrouterd.conf, listen and connect, route until SIGINT/SIGTERM.

Start-up contract (system tests and operators rely on it): one stdout line per bound listener,
``tdrouterd: listening on HOST:PORT (listener NAME, role ROLE)``, then
``tdrouterd: ready (router id ID)``. Shutdown closes every connection with a close frame before exiting 0.
A failure before ready is one ``FILE:LINE: message`` line on stderr, never a traceback, and the exit status
says which kind it was (docs/configuration.md, "Running tdrouterd"): EXIT_CONFIG_REFUSED (2) for a
configuration refused as written (including files it names that cannot be used: certificates, keys, the
log outputFile), EXIT_STARTUP_FAILED (1) for one the operating system would not carry out (a listener's
port in use or not permitted, a host that does not resolve).

Listeners and connectors run as services (router/services.py) that management can add and remove while
the router runs; the management agent (router/management/) is the router's ``$management`` endpoint.
"""

from __future__ import annotations

import difflib
import logging
import signal
import sys

import click
import proton
import trio

from router import schema
from router.config import ConfigError, RouterConfig, failover_server_list, load_config
from router.budget import (DEFAULT_MAX_BUFFERED_BYTES, DEFAULT_MAX_CONNECTION_BUFFERED_BYTES,
                           DEFAULT_STALLED_DELIVERY_TIMEOUT_SECONDS, BufferBudget)
from router.core import Router
from router.flowhooks import recorder_from_config
from router.logsetup import configure_logging
from router.management import ManagementAgent
from router.policy import Policy
from router.policyfiles import check_listener_vhosts, policy_from_config
from router.services import ServiceManager, role_refusal
from wire.driver import ConnectionLimit, shut_down_on_signal
from wire.errors import LocatedError
from wire.management import MANAGEMENT_ADDRESS
from wire.memory import tune_gc
from router.security import RouterSecurity, resolve_secret

log = logging.getLogger("router.daemon")

#: The OPEN property that lists where a client may reconnect (schema.RESERVED_OPEN_PROPERTIES keeps
#: openProperties from setting it).
FAILOVER_SERVER_LIST = "failover-server-list"
# How long shutdown waits for peers to answer our close frames.
SHUTDOWN_GRACE_SECONDS = 3.0
DEFAULT_CONFIG = "conf/router.conf"
# Exit statuses (see the module docstring); a clean shutdown exits 0.
EXIT_STARTUP_FAILED = 1
EXIT_CONFIG_REFUSED = 2


def _settings(router: Router, entity, *, server: bool, security: RouterSecurity | None = None):
    """ConnectionSettings for a listener (``server``) or connector, and its TLS (None: plaintext).
    Raises router.security.SecurityConfigError (a ValueError) for a setting that cannot be enforced."""
    a = entity.attrs
    sec = (security or RouterSecurity()).connection_kwargs("listener" if server else "connector", entity)
    tls = sec.pop("tls")
    settings = router.connection_settings(
        role=a.get("role") or "normal",
        name=a.get("name") or "",
        max_frame_size=int(a.get("maxFrameSize") or 16384),
        max_sessions=int(a.get("maxSessions") or 32768),
        idle_timeout_seconds=float(a.get("idleTimeoutSeconds") if a.get("idleTimeoutSeconds") is not None else 16),
        link_capacity=int(a.get("linkCapacity") or 250),
        max_message_size=int(a.get("maxMessageSize") or 0),
        cost=int(a.get("cost") or 1),
        strip_annotations=a.get("stripAnnotations") or "both",
        policy_vhost=a.get("policyVhost") if server else None,
        sasl_username=None if server else a.get("saslUsername"),
        sasl_password=None if server else resolve_secret(a.get("saslPassword")),
        **sec,
    )
    if a.get("openProperties"):
        # Dispatch's openProperties: sent in this connection's OPEN (keys the router owns are refused by the
        # configuration loader, router/schema.py RESERVED_OPEN_PROPERTIES).
        settings.properties.update(a["openProperties"])
    if server and a.get("failoverUrls"):
        # Where a client may reconnect (Dispatch's listener failoverUrls, sent as its server.c sends them:
        # OPEN property failover-server-list, a list of maps with symbol keys).
        settings.properties[FAILOVER_SERVER_LIST] = [{proton.symbol(k): v for k, v in entry.items()}
                                                     for entry in failover_server_list(a["failoverUrls"])]
    return settings, tls


def check_config(cfg: RouterConfig) -> RouterSecurity:
    """Checks that need this build's capabilities and the files on disk, reported like parse errors
    (FILE:LINE): the sslProfiles' certificates and keys, the SASL configuration and users file, and each
    listener's and connector's TLS and SASL settings. Returns the loaded security settings."""
    def error(entity, attribute, message):
        line = entity.attr_lines.get(attribute, entity.line) if attribute else entity.line
        return ConfigError(entity.path, line, message)

    mode = cfg.router.get("mode") or "standalone"
    for kind, entities in (("listener", cfg.listeners), ("connector", cfg.connectors)):
        for entity in entities:
            refusal = role_refusal(mode, kind, entity.get("role"))
            if refusal is not None:
                raise error(entity, "role", f"{kind}: {refusal}")
    security = RouterSecurity.from_config(cfg, error)
    for entity in cfg.flow_records:
        from wire.flowrecords import FlowRecordError

        try:
            recorder_from_config(cfg, cfg.router["id"] or "check")
        except FlowRecordError as exc:
            raise ConfigError(entity.path, entity.line, f"flowRecords: {exc}") from None
    return security


# How often time-driven router work (auto-link retries) is looked at; the retries are seconds apart.
TICK_SECONDS = 0.5


# A failing tick is logged with its traceback at most this often (seconds); the router carries on.
TICK_ERROR_LOG_INTERVAL = 60.0


async def _ticker(router: Router) -> None:
    """Time-driven work. An exception in it (state a peer managed to corrupt, a bug) is logged and the
    next tick runs: it must never end the daemon and with it every connection."""
    last_logged = -TICK_ERROR_LOG_INTERVAL
    while True:
        await trio.sleep(TICK_SECONDS)
        try:
            router.tick(trio.current_time())
        except Exception:  # noqa: BLE001 - see the docstring
            now = trio.current_time()
            if now - last_logged >= TICK_ERROR_LOG_INTERVAL:
                last_logged = now
                log.exception("router tick failed; carrying on")


def check_reachable(cfg: RouterConfig) -> None:
    """A router with neither a listener nor a connector could never carry a message (nothing connects to
    it, not even management to add a listener): refused, saying what to add."""
    if cfg.listeners or cfg.connectors:
        return
    raise ConfigError(cfg.path, cfg.router.line or 1,
                      "no listener and no connector: nothing could connect to this router, nor it to anything; "
                      "add a listener (conf/router.conf has a commented one), for example:\n"
                      "    listener {\n        host: 127.0.0.1\n        port: amqp\n    }")


def warn_pending_features(cfg: RouterConfig) -> None:
    """Say at start-up what the configuration asks for that will not act as written, so an operator is
    not left guessing why a link route or an auto-link does nothing: a role treated as normal, an
    auto-link with nothing to attach on, a ``connection`` that no listener or connector of this file is
    named (it acts once management creates one of that name)."""
    for entity in (*cfg.listeners, *cfg.connectors):
        role = entity.get("role") or "normal"
        if role not in ("normal", "inter-router", "route-container", "edge"):
            log.warning("%s:%d: %s role %s is accepted and treated as normal in this release",
                        entity.path, entity.line, entity.type, role)
    for entity in cfg.auto_links:
        if entity.get("connection") is None and entity.get("containerId") is None:
            log.warning("%s:%d: autoLink %s names neither connection nor containerId: it never attaches",
                        entity.path, entity.line, entity.get("name"))
    names = [e["name"] for e in (*cfg.connectors, *cfg.listeners) if e.get("name")]
    for entity in (*cfg.link_routes, *cfg.auto_links):
        wanted = entity.get("connection")
        if wanted is None or wanted in names:
            continue
        close = difflib.get_close_matches(wanted, names, n=1, cutoff=0.6)
        hint = (f"did you mean '{close[0]}'?" if close
                else f"name one of: {', '.join(names)}" if names else "no connector or listener is named")
        label = f"{entity.type} {entity['name']}" if "name" in entity.attr_lines else entity.type
        log.warning("%s:%d: %s: connection '%s' is not the name of any connector or listener here (%s); "
                    "it acts only once management creates a connector or listener of that name",
                    entity.path, entity.attr_lines.get("connection", entity.line), label, wanted, hint)


def connection_limit(cfg: RouterConfig) -> ConnectionLimit:
    """The router-wide limit on accepted connections: the policy section's maxConnections."""
    maximum = schema.DEFAULT_MAX_CONNECTIONS
    if cfg.policies and cfg.policies[0].get("maxConnections") is not None:
        maximum = int(cfg.policies[0]["maxConnections"])
    return ConnectionLimit(maximum, "connections (policy maxConnections)")


def mesh_timers(router_entity) -> dict:
    """The routing protocol's timers from the router entity (seconds)."""
    names = {"helloIntervalSeconds": "hello_interval", "helloMaxAgeSeconds": "hello_max_age",
             "raIntervalSeconds": "ra_interval", "raIntervalFluxSeconds": "ra_interval_flux",
             "remoteLsMaxAgeSeconds": "remote_ls_max_age"}
    return {kw: float(router_entity.get(attr)) for attr, kw in names.items() if router_entity.get(attr) is not None}


def buffer_budget(router_entity) -> BufferBudget:
    """The memory limits from the router entity (router/budget.py)."""
    def get(attr: str, default):
        value = router_entity.get(attr)
        return default if value is None else value

    return BufferBudget(
        max_bytes=int(get("maxBufferedBytes", DEFAULT_MAX_BUFFERED_BYTES)),
        max_connection_bytes=int(get("maxConnectionBufferedBytes", DEFAULT_MAX_CONNECTION_BUFFERED_BYTES)),
        stalled_delivery_timeout=float(get("stalledDeliveryTimeoutSeconds", DEFAULT_STALLED_DELIVERY_TIMEOUT_SECONDS)))


async def run_router(cfg: RouterConfig, security: RouterSecurity | None = None, policy: Policy | None = None,
                     *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    if policy is None:
        policy = policy_from_config(cfg)
    router = Router(
        cfg.router["id"],
        default_distribution=cfg.router.get("defaultDistribution") or "balanced",
        address_entities=cfg.addresses,
        auto_link_entities=cfg.auto_links,
        link_route_entities=cfg.link_routes,
        clock=trio.current_time,
        mode=cfg.router.get("mode") or "standalone",
        mesh_timers=mesh_timers(cfg.router),
        flow_recorder=recorder_from_config(cfg, cfg.router["id"]),
        budget=buffer_budget(cfg.router),
        policy=policy,
    )
    # Dispatch's allowResumableLinkRoute (default yes): no refuses durable or expiring termini on link routes.
    router.link_router.allow_resumable = cfg.router.get("allowResumableLinkRoute") is not False
    # The signal handler is installed before anything is announced, so a SIGTERM that follows the
    # ready line always means a graceful shutdown.
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            await _serve(router, cfg, security or RouterSecurity(), signals, task_status)
    finally:
        if router.flow is not None:
            router.flow.close()  # the last file gets its final name


def attach_agent(router: Router, agent: ManagementAgent) -> None:
    """Serve ``$management`` (also ``_local/$management`` and ``_topo/0/<id>/$management``) from the
    router's own local endpoint: requests arrive as message bytes, replies leave through the router."""
    send = router.send_local

    def on_request(msg: bytes) -> None:
        reply = agent.handle(msg)
        if reply is not None:
            send(reply)

    router.add_local_endpoint(MANAGEMENT_ADDRESS, on_request)


def _start_listeners(services: ServiceManager, cfg: RouterConfig) -> None:
    """Bind every configured listener; a socket the OS refuses is a LocatedError at the listener's section."""
    for entity in cfg.listeners:
        if entity.get("http"):
            continue   # an HTTP listener: _bind_http_listeners
        try:
            services.add("listener", entity)
        except OSError as exc:
            named = f" {entity['name']}" if "name" in entity.attr_lines else ""   # else FILE:LINE names it
            raise LocatedError(entity.path, entity.line, f"listener{named}: cannot listen on "
                                                         f"{entity.get('host') or '*'}:{entity['port']}: "
                                                         f"{exc.strerror or exc}") from None


def _bind_http_listeners(cfg: RouterConfig) -> list:
    """Bind the ``http: yes`` listeners (router/httpserve.py): [(entity, trio listeners)]; a socket the OS
    refuses is a LocatedError at the listener's section, as for AMQP listeners."""
    entities = cfg.http_listeners()
    if not entities:
        return []
    # Imported only where HTTP is served: wire.http's h11 and wsproto cost every other start ~50 ms of CPU.
    from router import httpserve

    bound = []
    for entity in entities:
        try:
            bound.append((entity, httpserve.bind_http_listener(entity)))
        except OSError as exc:
            raise LocatedError(entity.path, entity.line, f"listener {entity['name']}: cannot listen on "
                               f"{entity.get('host') or '*'}:{entity['port']}: {exc.strerror or exc}") from None
    return bound


async def _serve(router: Router, cfg: RouterConfig, security: RouterSecurity, signals, task_status) -> None:
    def settings_for(router_, entity, *, server: bool):
        return _settings(router_, entity, server=server, security=security)

    # A start-up failure leaves the nursery cancelled and is raised after it, so that it reaches main()
    # as itself, not wrapped in the nursery's exception group.
    failure: LocatedError | None = None
    async with trio.open_nursery() as nursery:
        services = ServiceManager(router, nursery, settings_for, connection_limit=connection_limit(cfg))
        try:
            _start_listeners(services, cfg)
            http_listeners = _bind_http_listeners(cfg)
        except LocatedError as exc:
            failure = exc
            nursery.cancel_scope.cancel()
        else:
            for entity in cfg.connectors:
                services.add("connector", entity)
            agent = ManagementAgent(router, config=cfg, services=services, clock=trio.current_time)
            attach_agent(router, agent)
            if http_listeners:
                from router.httpserve import serve_http_listener  # imported by _bind_http_listeners already
            for entity, listeners in http_listeners:
                serve_http_listener(nursery, listeners, router, agent, entity, security=security,
                                    services=services, config=cfg)
            nursery.start_soon(_ticker, router)
            if router.flow is not None:
                nursery.start_soon(router.flow.run)
            print(f"tdrouterd: ready (router id {router.id})", flush=True)
            task_status.started(router)
            await shut_down_on_signal(signals, router.close_all, lambda: bool(router.connections),
                                      SHUTDOWN_GRACE_SECONDS)
            nursery.cancel_scope.cancel()
    if failure is not None:
        raise failure


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="trio-dispatch", prog_name="tdrouterd", message="%(prog)s %(version)s")
@click.option("-c", "--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              help="qdrouterd.conf-style configuration file.")
def main(config_path: str) -> None:
    """tdrouterd: an AMQP 1.0 message router in the style of Qpid Dispatch Router."""
    try:
        cfg = load_config(config_path)
        security = check_config(cfg)
        check_reachable(cfg)
        policy = policy_from_config(cfg)
        check_listener_vhosts(cfg, policy)
        configure_logging(cfg.logs, cfg.router)
    except LocatedError as exc:   # ConfigError is one
        click.echo(str(exc), err=True)
        sys.exit(EXIT_CONFIG_REFUSED)
    warn_pending_features(cfg)
    tune_gc()
    try:
        trio.run(run_router, cfg, security, policy)
    except LocatedError as exc:
        click.echo(str(exc), err=True)
        sys.exit(EXIT_STARTUP_FAILED)
    except KeyboardInterrupt:
        pass
    sys.exit(0)

if __name__ == "__main__":
    main()
