"""Smoke tests: a real tdrouterd moves messages for proton and rhea clients,
and rejects a bad config file with a FILE:LINE: diagnostic."""

from __future__ import annotations

import re

import pytest
from proton import Delivery, Message
from proton.utils import BlockingConnection

from tests.system.harness import run_daemon_expecting_failure
from tests.system.rhea import rhea_recv_start, rhea_send

pytestmark = pytest.mark.system

COUNT = 10


def test_router_reports_its_listener(router):
    assert set(router.ports) >= {"amqp"}
    assert router.url == f"amqp://127.0.0.1:{router.ports['amqp']}"
    assert router.ports["amqp"] > 0
    assert router.is_running()


def test_proton_blocking_send_receive(router):
    conn = BlockingConnection(router.url, timeout=15)
    try:
        receiver = conn.create_receiver("smoke", credit=COUNT)
        sender = conn.create_sender("smoke")
        # The router settles end to end: a sender's delivery is settled only
        # once the consumer settled its copy.  BlockingSender.send() would wait
        # for that (and deadlock here), so queue the transfers on the link and
        # let receive() drive the connection.
        deliveries = [sender.link.send(Message(id=i, body=f"m{i}")) for i in range(COUNT)]
        got = []
        for _ in range(COUNT):
            msg = receiver.receive(timeout=15)
            got.append((msg.id, msg.body))
            receiver.accept()
        assert got == [(i, f"m{i}") for i in range(COUNT)]
        # The consumer's accepts flow back to the sender.
        conn.wait(lambda: all(d.settled for d in deliveries), timeout=15,
                  msg="waiting for the router to settle the sent deliveries")
        assert [d.remote_state for d in deliveries] == [Delivery.ACCEPTED] * COUNT
    finally:
        conn.close()


@pytest.mark.rhea
def test_rhea_send_receive(router):
    rx = rhea_recv_start(router.url, "smoke", COUNT)
    sent = rhea_send(router.url, "smoke", COUNT)
    got = rx.result()
    assert sent.exit_code == 0, sent
    assert sent == {"sent": COUNT, "accepted": COUNT, "rejected": 0,
                    "released": 0, "modified": 0, "errors": []}
    assert got.exit_code == 0, got.stderr
    assert got["received"] == COUNT
    assert got["ids"] == list(range(COUNT))
    assert got["bodies_ok"] is True


BAD_CONF = """\
router {
    mode: standalone
    id: Router.Bad
}

noSuchSection {
    foo: bar
}
"""
BAD_LINE = 6  # the line of "noSuchSection {"


def test_bad_config_unknown_section(tmp_path):
    code, stderr = run_daemon_expecting_failure(BAD_CONF, tmp_path)
    assert code == 2, stderr
    m = re.search(r"bad\.conf:(\d+):", stderr)
    assert m, f"no FILE:LINE: diagnostic in stderr:\n{stderr}"
    assert int(m.group(1)) == BAD_LINE, stderr
