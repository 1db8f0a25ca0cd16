"""Fuzz targets off the wire path: management requests, inter-router control messages, configuration text.

``mgmt-router`` / ``mgmt-broker``: a mutated request message to the ``$management`` agent of a live Router
(with connections, links, configured addresses, link routes and auto-links) or a live Broker. Property: a
request that names a reply address gets a reply with an integer ``statusCode`` (4xx with a
``statusDescription`` saying what is wrong; never 500), at most one log line when refused, never an
exception or a logged traceback.

``mesh``: a mutated control message (HELLO, RA, LSU, LSR, MAU, MAR) from a neighbour into a
:class:`router.mesh.engine.RoutingEngine`. Property: nothing escapes ``receive`` / ``tick``, the engine's
state stays readable (``nodes()``, routes), the core is told only well-typed things, a message costs at most
one warning, never a traceback. (That the warnings for a stream of bad messages are rate-limited is a unit
test: tests/unit/tools/test_fuzz.py.)

``config-router`` / ``config-broker``: mutated qdrouterd.conf / broker.xml text. Property: a parsed
configuration or the module's configuration error whose text begins ``FILE:LINE:`` (what the daemons
print before exiting with status 2), never another exception.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile

from tools.fuzz.harness import Client, LogWatch, Violation, pump, require

ROUTER_CONF = """\
router {
    id: FUZZ
}
address {
    prefix: multi
    distribution: multicast
}
linkRoute {
    prefix: lr
    direction: in
    connection: broker
}
autoLink {
    address: queue.a
    direction: out
    connection: broker
}
log {
    module: ROUTER
    enable: info+
}
"""
#: Management status codes an agent may answer with (wire/management.py); 500 means an agent bug.
ANSWERS = {200, 201, 204, 400, 403, 404, 501}
#: After this many requests the node is built afresh: CREATE piles up entities, and a long run must
#: measure the parser and the agent, not ever longer tables.
REBUILD_EVERY = 2000


def _reply_address(data: bytes):
    """The reply address of a request whose properties section is well-formed up to the correlation-id
    (read with the project's strict codec; a section proton reads leniently past its declared size, or a
    correlation-id cut short, names nothing an answer could be matched by)."""
    from wire.codec import properties_fields

    try:
        reply_to = properties_fields(data, 6)[4]
    except Exception:  # noqa: BLE001 - no readable properties section: nobody can answer
        return None
    return reply_to if isinstance(reply_to, str) else None


class ManagementTarget:
    max_len = 16384

    def __init__(self, kind: str):
        self.kind = kind
        self.instrument = ("wire.management", "wire.codec", "wire.amqptypes",
                           "router.management", "router.config", "router.schema", "router.patterns")
        if kind == "broker":
            self.instrument = ("wire.management", "wire.codec", "wire.amqptypes", "broker.management",
                               "broker.facade", "broker.addressing")
        self.name = f"mgmt-{kind}"
        self.description = f"$management requests to a live {kind.capitalize()}'s agent"
        self.executions = 0

    def setup(self) -> None:
        self.watch = LogWatch.install()
        self._build()

    def _build(self) -> None:
        if self.kind == "router":
            from router.config import parse_config
            from router.core import Router
            from router.management import ManagementAgent

            cfg = parse_config(ROUTER_CONF, "fuzz.conf")
            self.node = Router("FUZZ", address_entities=cfg.addresses, link_route_entities=cfg.link_routes,
                               auto_link_entities=cfg.auto_links)
            self.agent = ManagementAgent(self.node, config=cfg)
        else:
            from broker.management import BrokerManagement
            from tools.fuzz.targets_amqp import World

            self.node = World("broker").node
            self.agent = BrokerManagement(self.node)
        # A client with a link each way, so that connection and link rows exist.
        self.client = Client()
        self.engine = self.node.new_engine(self.node.connection_settings(), server=True, remote_host="mgmt")
        self.client.receiver("fuzz.q", credit=5)
        self.client.sender("fuzz.q")
        pump(self.client, self.engine)

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import management_requests

        return management_requests(self.kind)

    def execute(self, data: bytes) -> None:
        from wire import management as wm

        self.executions += 1
        if self.executions % REBUILD_EVERY == 0:
            self._build()
        self.watch.clear()
        reply = self.agent.handle(data)
        reply_to = _reply_address(data)
        if reply_to:
            require(reply is not None, "a request with a reply address got no answer")
        if reply is not None:
            try:
                resp = wm.parse_response(reply)
            except Exception as exc:  # noqa: BLE001
                raise Violation("the answer is not a management response", repr(exc)) from None
            require(resp.status != wm.INTERNAL_ERROR, "answered 500 (an agent bug)", resp.description)
            require(resp.status in ANSWERS, "answered an unexpected status", f"{resp.status} {resp.description}")
            if resp.status >= 400:
                require(bool(resp.description), "error answer without a statusDescription")
                lines = self.watch.lines(logging.INFO)
                require(len(lines) <= 1, "a refused request logged more than one line",
                        "\n".join(r.getMessage()[:200] for r in lines))
        self.watch.check()


class _Listener:
    """The core's side of the routing engine: checks the types of what it is told."""

    def routes_changed(self, next_hops, costs, valid_origins, radius) -> None:
        require(all(isinstance(k, str) for k in next_hops), "routes_changed: a next hop keyed by a non-string")
        require(all(isinstance(v, int) for v in costs.values()), "routes_changed: a non-integer cost")
        require(isinstance(radius, int), "routes_changed: a non-integer radius")

    def router_lost(self, router_id) -> None:
        require(isinstance(router_id, str), "router_lost: a non-string router id")

    def remote_address_added(self, router_id, key, hint) -> None:
        require(isinstance(router_id, str) and isinstance(key, str) and isinstance(hint, int),
                "remote_address_added: ill-typed arguments", repr((router_id, key, hint)))

    def remote_address_removed(self, router_id, key) -> None:
        require(isinstance(router_id, str) and isinstance(key, str),
                "remote_address_removed: ill-typed arguments", repr((router_id, key)))


class MeshTarget:
    name = "mesh"
    instrument = ("router.mesh", "wire.codec", "wire.amqptypes", "wire.annotations")
    description = "inter-router control messages into a RoutingEngine with one neighbour"
    max_len = 8192

    def setup(self) -> None:
        self.watch = LogWatch.install()
        self._build()

    def _build(self) -> None:
        from router.mesh import messages as M
        from router.mesh.engine import RoutingEngine

        self.now = 1000.0
        self.engine = RoutingEngine("FUZZ", _Listener(), instance=1)
        self.engine.link_up("conn-A", 1, self.now)
        self.engine.receive("conn-A", M.encode(M.Hello("A", 11, ["FUZZ"]), "amqp:/_local/qdhello"), self.now)
        self.engine.tick(self.now)
        self.engine.take_output()
        self.executions = 0

    def seeds(self) -> list[bytes]:
        from tools.fuzz.seeds import control_messages

        return control_messages()

    def execute(self, data: bytes) -> None:
        self.executions += 1
        if self.executions % REBUILD_EVERY == 0:
            self._build()
        self.watch.clear()
        self.now += 0.25
        self.engine.receive("conn-A", data, self.now)
        lines = self.watch.lines(logging.WARNING)  # INFO lines report topology changes, not bad input
        self.engine.tick(self.now)
        self.engine.take_output()
        self.engine.nodes()
        self.engine.routes
        require(len(lines) <= 1, "one control message logged more than one warning",
                "\n".join(r.getMessage()[:200] for r in lines))
        self.watch.check()


_NEWLINE = re.compile(rb"\r\n|\r|\n")
_LOCATED = re.compile(r"^(?P<path>.+?):(?P<line>\d+): \S")


class ConfigTarget:
    max_len = 8192

    def __init__(self, kind: str):
        self.kind = kind
        self.instrument = (("router.config", "router.schema", "router.patterns", "wire.sasl") if kind == "router"
                           else ("broker.config", "broker.xmlschema", "broker.configmodel", "broker.limits"))
        self.name = f"config-{kind}"
        self.description = ("qdrouterd.conf text into router.config" if kind == "router"
                            else "broker.xml text into broker.config")

    def setup(self) -> None:
        self.watch = LogWatch.install()
        if self.kind == "router":  # imported here, inside the worker's instrumentation
            import router.config
            import router.daemon  # noqa: F401 - check_config
        else:
            import broker.config  # noqa: F401
        fd, self.path = tempfile.mkstemp(prefix="fuzz-", suffix=".conf" if self.kind == "router" else ".xml")
        os.close(fd)

    def seeds(self) -> list[bytes]:
        from tools.fuzz import seeds

        return seeds.router_configs() if self.kind == "router" else seeds.broker_configs()

    def execute(self, data: bytes) -> None:
        self.watch.clear()
        with open(self.path, "wb") as f:
            f.write(data)
        if self.kind == "router":
            from router.config import ConfigError, load_config
            from router.daemon import check_config

            error_type = ConfigError
            try:
                cfg = load_config(self.path)
                if not cfg.flow_records:  # flow records open files: not the parser's business
                    check_config(cfg)
                error = None
            except ConfigError as exc:
                error = exc
        else:
            from broker.config import BrokerConfigError, load_broker_config

            error_type = BrokerConfigError
            try:
                load_broker_config(self.path)
                error = None
            except BrokerConfigError as exc:
                error = exc
        if error is not None:
            text = str(error)
            m = _LOCATED.match(text)
            require(m is not None and m["path"] == self.path, f"{error_type.__name__} without FILE:LINE",
                    text[:300])
            lines = len(_NEWLINE.split(data))  # what an editor counts (XML and open() read \r as one too)
            require(0 <= int(m["line"]) <= lines, f"{error_type.__name__} names a line past the end", text[:300])
        self.watch.check()


MGMT_ROUTER = ManagementTarget("router")
MGMT_BROKER = ManagementTarget("broker")
MESH = MeshTarget()
CONFIG_ROUTER = ConfigTarget("router")
CONFIG_BROKER = ConfigTarget("broker")
