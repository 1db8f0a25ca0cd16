"""What a new user writes wrong in router.conf gets a message that says what to write instead (issue 18):
a section on one line, two attributes on one line, a closing brace after a value, a configuration with
nothing to connect to, a linkRoute/autoLink whose ``connection`` no connector or listener is named."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from router.config import ConfigError, parse_config
from router.daemon import check_reachable, warn_pending_features
from tests.paths import REPO

ROUTER = "router {\n    id: R\n}\n"
LISTENER = "listener {\n    host: 127.0.0.1\n    port: 0\n}\n"


def _refused(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "r.conf")
    return info.value


def test_a_section_on_one_line_is_refused_with_the_lines_to_write():
    err = _refused(ROUTER + "address { prefix: queue  waypoint: yes }\n")
    assert err.line == 4
    assert err.message == ("section 'address' is written on one line, but each attribute needs a line of its own "
                           "(and so do 'address {' and '}'); write:\n"
                           "    address {\n        prefix: queue\n        waypoint: yes\n    }")


def test_a_one_line_section_with_commas_and_no_closing_brace():
    err = _refused(ROUTER + "listener { host: 127.0.0.1, port: 5672\n}\n")
    assert err.line == 4 and "        host: 127.0.0.1\n        port: 5672\n" in err.message


def test_two_attributes_on_one_line_are_refused():
    err = _refused(ROUTER + "listener {\n    host: 127.0.0.1  port: 5672\n}\n")
    assert (err.line, err.message) == (5, "listener: two attributes on one line: write 'host: 127.0.0.1' and "
                                          "'port: 5672' on lines of their own")


def test_a_closing_brace_after_a_value_is_refused():
    err = _refused(ROUTER + "address {\n    prefix: queue\n    waypoint: yes }\n")
    assert (err.line, err.message) == (6, "address: put the closing '}' on a line of its own after 'waypoint: yes'")


@pytest.mark.parametrize("value,read", [("'a }'", "a }"), ("amqp://h:5672", "amqp://h:5672"),
                                        ("c1 # a comment", "c1")])
def test_values_that_only_look_alike_are_kept(value, read):
    cfg = parse_config(ROUTER + f"linkRoute {{\n    prefix: x\n    direction: in\n    containerId: {value}\n}}\n",
                       "r.conf")
    assert cfg.link_routes[0]["containerId"] == read


def test_a_configuration_with_nothing_to_connect_to_is_refused():
    with pytest.raises(ConfigError) as info:
        check_reachable(parse_config("", "empty.conf"))
    assert info.value.line == 1 and info.value.message.startswith("no listener and no connector")
    assert "    listener {\n        host: 127.0.0.1\n        port: amqp\n    }" in info.value.message
    check_reachable(parse_config(ROUTER + LISTENER, "r.conf"))
    check_reachable(parse_config(ROUTER + "connector {\n    host: 127.0.0.1\n    port: 5673\n}\n", "r.conf"))


def test_the_real_daemon_refuses_an_empty_configuration(tmp_path):
    conf = tmp_path / "empty.conf"
    conf.write_text("")
    proc = subprocess.run([sys.executable, "-m", "router.daemon", "-c", str(conf)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"{conf}:1: no listener and no connector") and "ready" not in proc.stdout


def test_a_connection_no_connector_or_listener_is_named_is_warned_with_a_suggestion(caplog):
    cfg = parse_config(ROUTER + LISTENER + "connector {\n    name: broker\n    host: 127.0.0.1\n    port: 5673\n"
                       "    role: route-container\n}\n"
                       "linkRoute {\n    prefix: q\n    direction: in\n    connection: brokr\n}\n"
                       "autoLink {\n    name: feed\n    address: a\n    direction: in\n    connection: elsewhere\n}\n"
                       "autoLink {\n    address: b\n    direction: out\n    connection: broker\n}\n", "r.conf")
    with caplog.at_level(logging.WARNING, logger="router.daemon"):
        warn_pending_features(cfg)
    warnings = [r.getMessage() for r in caplog.records]
    assert warnings == [
        "r.conf:17: linkRoute: connection 'brokr' is not the name of any connector or listener here (did you mean "
        "'broker'?); it acts only once management creates a connector or listener of that name",
        "r.conf:23: autoLink feed: connection 'elsewhere' is not the name of any connector or listener here (name "
        "one of: broker, listener/127.0.0.1:0); it acts only once management creates a connector or listener of "
        "that name"]
