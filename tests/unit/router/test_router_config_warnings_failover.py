"""A listener's failoverUrls (issue 18): checked at FILE:LINE, and sent to each client in the OPEN property
failover-server-list as Dispatch sends it (src/server.c: a list of maps, network-host / port / scheme)."""

from __future__ import annotations

import pytest

from router.config import ConfigError, failover_server_list, parse_config
from tests.system.harness import RouterProcess

ROUTER = "router {\n    id: R\n}\n"


def test_urls_become_the_failover_server_list():
    assert failover_server_list("amqps://backup.example:5671, other.example,[::1]:5673, ws://w") == [
        {"network-host": "backup.example", "port": "5671", "scheme": "amqps"},
        {"network-host": "other.example", "port": "5672"},
        {"network-host": "::1", "port": "5673"},
        {"network-host": "w", "port": "80", "scheme": "ws"}]


@pytest.mark.parametrize("urls,words", [("ftp://x", "scheme 'ftp' is none of"), ("a,,b", "empty URL"),
                                        ("host:99999", "is not [amqp|amqps|ws|wss://]host[:port]"),
                                        ("amqp://user@h", "is not [amqp|amqps|ws|wss://]host[:port]")])
def test_a_bad_url_is_refused_at_its_line(urls, words):
    with pytest.raises(ConfigError) as info:
        parse_config(ROUTER + f"listener {{\n    port: 0\n    failoverUrls: {urls}\n}}\n", "r.conf")
    assert info.value.line == 6 and info.value.message.startswith("listener: failoverUrls: ") and \
        words in info.value.message


@pytest.mark.system
def test_a_client_gets_the_list_in_the_routers_open(tmp_path):
    from proton.utils import BlockingConnection

    router = RouterProcess(tmp_path, listener_extra="failoverUrls: amqps://backup.example:5671, other.example")
    router.start()
    try:
        conn = BlockingConnection(f"127.0.0.1:{router.ports['amqp']}", timeout=30)
        try:
            props = {str(k): v for k, v in conn.conn.remote_properties.items()}
        finally:
            conn.close()
    finally:
        assert router.stop() == 0
    assert [{str(k): v for k, v in entry.items()} for entry in props["failover-server-list"]] == [
        {"network-host": "backup.example", "port": "5671", "scheme": "amqps"},
        {"network-host": "other.example", "port": "5672"}]
    assert all(type(k).__name__ == "symbol" for entry in props["failover-server-list"] for k in entry)
