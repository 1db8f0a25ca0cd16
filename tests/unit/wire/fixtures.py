"""Shared helpers for the wire unit tests (and the management fuzz test): a proton Peer over real loopback
TCP, and a router and a broker management agent built from small configurations.

The driver and connection tests both talk to real listeners, and the malformed-request tests and
tests/fuzz/test_management_structured.py both drive the two agents; the helpers live here so no test module
imports another.
"""

from __future__ import annotations

import trio
from proton import Endpoint

from broker.config import parse_broker_config
from broker.management import BrokerManagement
from broker.server import Broker
from router.config import parse_config
from router.core import Router
from router.management import ManagementAgent
from tests.unit.enginepair import Peer

# -- real loopback TCP: a Peer client driven over a trio socket ---------------------------------------------

class TcpPeer:
    """A proton object-API Peer (tests/unit/enginepair.py) attached to a trio socket stream."""

    def __init__(self, stream: trio.SocketStream, peer: Peer | None = None):
        self.stream = stream
        self.peer = peer or Peer()
        self.eof = trio.Event()
        self.changed = trio.Event()

    async def reader(self) -> None:
        try:
            while True:
                data = await self.stream.receive_some(65536)
                if not data:
                    break
                self.peer.feed(data)
                self._poke()
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self.peer.feed_eof()
        self.eof.set()
        self._poke()

    def _poke(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    async def flush(self) -> None:
        while True:
            out = self.peer.take_output()
            if not out:
                return
            try:
                await self.stream.send_all(out)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return

    async def until(self, cond, timeout: float = 10.0) -> None:
        """Flush our output and wait for incoming bytes until cond() holds."""
        with trio.fail_after(timeout):
            while True:
                await self.flush()
                if cond():
                    return
                with trio.move_on_after(0.05):
                    await self.changed.wait()


async def tcp_peer(nursery, port: int, peer: Peer | None = None) -> TcpPeer:
    """Connect a Peer to 127.0.0.1:port, read for it in ``nursery`` and wait until its OPEN is answered."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    tp = TcpPeer(stream, peer)
    nursery.start_soon(tp.reader)
    await tp.until(lambda: tp.peer.connection.state & Endpoint.REMOTE_ACTIVE)
    return tp


# -- management agents ----------------------------------------------------------------------------------------

ROUTER_CONF = """
router {
    id: R1
}
address {
    prefix: multi
    distribution: multicast
}
"""
BROKER_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>b1</name>
  <persistence-enabled>false</persistence-enabled>
  <addresses><address name="orders"><anycast><queue name="orders"/></anycast></address></addresses>
</core></configuration>
"""
REPLY_TO = "reply-here"
"""The reply-to address of the management requests the tests build."""


def router_agent() -> ManagementAgent:
    """A router management agent on ROUTER_CONF (router R1 with a multicast address prefix)."""
    cfg = parse_config(ROUTER_CONF)
    return ManagementAgent(Router("R1", address_entities=cfg.addresses), config=cfg)


def broker_agent() -> BrokerManagement:
    """A broker management agent on BROKER_XML (broker b1 with an anycast queue ``orders``)."""
    broker = Broker(parse_broker_config(BROKER_XML))
    broker.open_journal()
    return BrokerManagement(broker)
