"""tools/mgmtclient.py tells a request nobody took (no route to the node) from one whose reply never came
back (e.g. the node cannot route to the client's reply address yet), without a router."""

from __future__ import annotations

import pytest
from proton import Timeout

from tools.mgmtclient import ManagementClient


class _Sender:
    def __init__(self, settles: bool):
        self.settles = settles

    def send(self, msg, timeout=None):
        if not self.settles:
            raise Timeout("Sending on sender")


class _Receiver:
    def receive(self, timeout=None):
        raise Timeout("Receiving on receiver")


def _client(settles: bool) -> ManagementClient:
    c = object.__new__(ManagementClient)            # no connection: only request() is exercised
    c.timeout = 2.0
    c.router_id = "IB"
    c.reply_to = "amqp:/_edge/EA/temp.x"
    c.receiver = _Receiver()
    c._senders = {"_topo/0/IB/$management": _Sender(settles)}
    c._ids = iter(range(1, 10))
    return c


def test_a_request_that_is_never_taken_says_no_answer():
    with pytest.raises(TimeoutError) as e:
        _client(settles=False).request("QUERY", name="self")
    assert str(e.value) == "no answer from _topo/0/IB/$management within 2 s"


def test_a_delivered_request_whose_reply_is_lost_names_the_reply_address():
    with pytest.raises(TimeoutError) as e:
        _client(settles=True).request("QUERY", name="self")
    assert str(e.value) == ("no answer from _topo/0/IB/$management within 2 s: the request was delivered, "
                            "the reply to amqp:/_edge/EA/temp.x did not come back")
