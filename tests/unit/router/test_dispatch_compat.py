"""Dispatch compatibility of the management agent and the configuration (issue 13): operations and entity
types Qpid Dispatch 1.19's tools use, mode and role checks."""

from __future__ import annotations

import json
import logging

import pytest

from router.config import ConfigError, parse_config
from router.core import Router
from router.daemon import check_config
from router.management import ManagementAgent
from router.services import role_refusal
from wire import management as wm


def _req(op, type=None, *, name=None, body=None, entity_type=None, **props):
    return wm.Request(operation=op, type=type, name=name, entity_type=entity_type,
                      body=body if body is not None else {}, properties=props)


def test_get_json_schema_is_the_schema_as_json_text():
    agent = ManagementAgent(Router("R"))
    status, text = agent.dispatch(_req("GET-JSON-SCHEMA", wm.NODE_TYPE))
    assert status == wm.OK and json.loads(text) == agent.dispatch(_req("GET-SCHEMA", wm.NODE_TYPE))[1]


def test_get_log_returns_recent_records_as_dispatch_lists_them():
    from router.logsetup import RECENT

    logging.getLogger().addHandler(RECENT)
    try:
        logging.getLogger("router.policy").warning("a policy line %d", 7)
        logging.getLogger("router.agent").warning("an agent line")
    finally:
        logging.getLogger().removeHandler(RECENT)
    agent = ManagementAgent(Router("R"))
    status, entries = agent.dispatch(_req("GET-LOG", wm.NODE_TYPE, module="POLICY"))
    assert status == wm.OK
    module, level, text, _file, line, when = entries[-1]
    assert (module, level, text) == ("POLICY", "warning", "a policy line 7") and line > 0 and when > 0
    assert all(e[0] == "POLICY" for e in entries)
    _, everything = agent.dispatch(_req("GET-LOG", wm.NODE_TYPE))
    assert ["AGENT", "warning", "an agent line"] in [e[:3] for e in everything]


def test_create_with_a_name_in_use_fails_with_dispatchs_wording():
    agent = ManagementAgent(Router("R"))
    body = {"prefix": "a", "distribution": "closest"}
    agent.dispatch(_req("CREATE", "org.apache.qpid.dispatch.router.config.address", name="x", body=body))
    with pytest.raises(wm.ManagementError, match="Name conflicts with an existing entity"):
        agent.dispatch(_req("CREATE", "org.apache.qpid.dispatch.router.config.address", name="x",
                            body={"prefix": "b"}))


def test_connection_link_route_type_exists_and_refuses_create():
    agent = ManagementAgent(Router("R"))
    status, page = agent.dispatch(_req("QUERY", entity_type="org.apache.qpid.dispatch.router.connection.linkRoute"))
    assert status == wm.OK and page["results"] == []
    with pytest.raises(wm.ManagementError, match="not supported"):
        agent.dispatch(_req("CREATE", "org.apache.qpid.dispatch.router.connection.linkRoute", name="c",
                            body={"pattern": "a.#", "direction": "in"}))


def test_router_entity_carries_metadata():
    cfg = parse_config("router {\n id: R\n metadata: rack 7\n}\n", "m.conf")
    agent = ManagementAgent(Router("R"), config=cfg)
    _, page = agent.dispatch(_req("QUERY", entity_type="org.apache.qpid.dispatch.router"))
    [row] = [dict(zip(page["attributeNames"], r)) for r in page["results"]]
    assert row["metadata"] == "rack 7"


@pytest.mark.parametrize("mode,section,role,words", [
    ("standalone", "listener", "inter-router", "standalone router cannot have an inter-router listener"),
    ("standalone", "connector", "inter-router", "standalone router cannot have an inter-router connector"),
    ("edge", "listener", "inter-router", "edge router cannot have an inter-router listener"),
    ("edge", "listener", "edge", "edge router cannot have an edge listener"),
    ("edge", "connector", "inter-router", "edge router cannot have an inter-router connector"),
])
def test_mode_and_role_are_checked_at_start_up_with_file_and_line(mode, section, role, words):
    cfg = parse_config(f"router {{\n id: R\n mode: {mode}\n}}\n{section} {{\n port: 1\n role: {role}\n}}\n", "r.conf")
    with pytest.raises(ConfigError) as info:
        check_config(cfg)
    assert info.value.line == 7 and words in info.value.message


@pytest.mark.parametrize("mode,kind,role", [("interior", "listener", "inter-router"),
                                            ("interior", "listener", "edge"), ("edge", "connector", "edge"),
                                            ("standalone", "listener", "route-container")])
def test_allowed_roles(mode, kind, role):
    assert role_refusal(mode, kind, role) is None


@pytest.mark.parametrize("targets", ["", " containerId: broker-c\n connection: broker\n"])
def test_link_route_and_auto_link_may_name_neither_or_both(targets):
    cfg = parse_config(f"linkRoute {{\n prefix: q\n direction: in\n{targets}}}\n"
                       f"autoLink {{\n address: a\n direction: out\n{targets}}}\n", "l.conf")
    assert len(cfg.link_routes) == 1 and len(cfg.auto_links) == 1


def test_with_both_a_connection_matching_either_is_the_container():
    from router.autolinks import AutoLink
    from tests.unit.router.fixtures import AutoLinkEntity

    al = AutoLink.from_entity(AutoLinkEntity(address="a", direction="out", containerId="C", connection="L",
                                             phase=0), 0)

    class Engine:
        def __init__(self, container):
            self.remote_container = container

    class Conn:
        def __init__(self, name, container):
            self.name, self.engine = name, Engine(container)

    assert al.matches(Conn("L", "other")) and al.matches(Conn("x", "C")) and not al.matches(Conn("x", "y"))


def test_a_link_route_naming_no_container_routes_through_the_mesh():
    """Such a route is the transit half of a mesh link route: this router has no container for it, so an
    attach is forwarded towards the router that has one, or refused with no-route when none has."""
    from router.linkroutes import NO_ROUTE
    from tests.unit.enginepair import RouterHarness
    from tests.unit.router.fixtures import AutoLinkEntity

    routes = [AutoLinkEntity(prefix="q", direction=d) for d in ("in", "out")]
    h = RouterHarness(link_route_entities=routes)
    client = h.connect()
    snd = client.sender("q.1")
    h.pump()
    assert snd.remote_condition is not None and snd.remote_condition.name == NO_ROUTE


def test_log_entities_show_what_applies_and_output_files_are_honoured(tmp_path):
    import logging as pylogging

    from router.logsetup import configure_logging

    out = tmp_path / "policy.log"
    cfg = parse_config(f"log {{\n module: DEFAULT\n enable: info+\n}}\nlog {{\n module: POLICY\n enable: debug+\n"
                       f" outputFile: {out}\n includeSource: yes\n includeTimestamp: no\n}}\n", "g.conf")
    root = pylogging.getLogger()
    saved = (list(root.handlers), root.level)
    policy_logger = pylogging.getLogger("router.policy")
    try:
        configure_logging(cfg.logs)
        policy_logger.debug("to the file")
        for h in policy_logger.handlers:
            h.flush()
        text = out.read_text()
        assert "DEBUG router.policy: to the file (" in text and not text[0].isdigit()   # no timestamp, a source
    finally:
        for h in policy_logger.handlers:
            h.close()
        policy_logger.handlers[:] = []
        policy_logger.propagate = True
        policy_logger.setLevel(pylogging.NOTSET)
        root.handlers[:], root.level = saved
    agent = ManagementAgent(Router("R"), config=cfg)
    _, page = agent.dispatch(_req("QUERY", entity_type="org.apache.qpid.dispatch.log"))
    rows = {r["module"]: r for r in (dict(zip(page["attributeNames"], r)) for r in page["results"])}
    assert rows["DEFAULT"]["includeTimestamp"] is True and rows["DEFAULT"]["includeSource"] is False
    assert rows["POLICY"]["includeTimestamp"] is False and rows["POLICY"]["outputFile"] == str(out)
    assert rows["ROUTER"]["includeTimestamp"] is True
