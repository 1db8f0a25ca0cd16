"""The edge side of Dispatch's edge address tracking: an edge router's receiver on ``_$qd.edge_addr_tracking``.

Qpid Dispatch 1.19 src/router_core/modules/edge_router/addr_proxy.c attaches, on its active edge connection,
an incoming link whose source is ``_$qd.edge_addr_tracking``; the interior (router/edgetracking.py here,
edge_addr_tracking.c in Dispatch) sends on it, for each mobile address the edge produces to, whether a
destination exists anywhere but on that edge. The edge binds its outgoing link for the address (its
sender to the interior) as a destination while the answer is true and unbinds it when it is false. So a
producer on the edge is given credit only while a consumer exists somewhere in the mesh (or on the edge
itself), and nothing waits at the edge after the last remote consumer has gone.

This module is the receiving end and nothing more: it gives the link credit (32 at first, one more per
update, as addr_proxy.c), reads each update and hands ``(key, can_send)`` to the uplink
(router/edge.py), which acts on it. An update it cannot read is rejected (addr_proxy.c does the same);
pre-settled updates, the form the interior sends, are only read. Nothing here is on the per-message path
of application traffic.
"""

from __future__ import annotations

import logging
from typing import Protocol

from wire import raw
from wire.amqptypes import CodecError, Described, decode_value
from wire.assembly import DISCARD, KEEP
from wire.codec import AMQP_VALUE, scan
from router.edgetracking import TRACKING_ADDRESS

log = logging.getLogger("router.edge")

#: Credit on the tracking link: Dispatch's addr_proxy.c INITIAL_CREDIT, replenished one per update read.
#: The interior keeps only the latest value per address while it has no credit, so this bounds nothing
#: but how many updates can be in flight at once.
TRACKING_CREDIT = 32

#: An update is a short list; anything longer is not one (a bound on what a bad peer can make us decode).
MAX_UPDATE_SIZE = 4096

_AMQP_VALUE_SYMBOL = "amqp:amqp-value:*"


def parse_update(msg: bytes) -> tuple[str, bool]:
    """``(key, can_send)`` from an update's bytes: the body is one amqp-value, a list of two scalars, the
    address's routing key (``M0queue``) and a boolean. CodecError for anything else."""
    if len(msg) > MAX_UPDATE_SIZE:
        raise CodecError(f"edge address tracking update of {len(msg)} bytes (at most {MAX_UPDATE_SIZE})")
    start = scan(msg).body_start
    if start is None:
        raise CodecError("edge address tracking update without a body")
    section, _ = decode_value(msg, start)
    if not isinstance(section, Described) or section.descriptor not in (AMQP_VALUE, _AMQP_VALUE_SYMBOL):
        raise CodecError("edge address tracking update whose body is not an amqp-value")
    body = section.value
    if not isinstance(body, list) or len(body) != 2:
        raise CodecError("edge address tracking update that is not a list of two")
    key, can_send = body
    if not isinstance(key, str) or not isinstance(can_send, bool):
        raise CodecError("edge address tracking update that is not [address key, boolean]")
    return key, can_send


class TrackingListener(Protocol):
    """What the tracking receiver tells (router/edge.py's EdgeUplink)."""

    def tracking_update(self, key: str, can_send: bool) -> None: ...


class TrackingReceiver:
    """The :class:`wire.assembly.LinkOwner` of an edge's tracking link (a RouterLink without an address on
    the uplink connection, so management lists it and the router detaches it like any other link).
    ``updates`` and ``rejected`` count what arrived, for tests and logs."""

    def __init__(self, listener: TrackingListener):
        self.listener = listener
        self.updates = 0
        self.rejected = 0

    @staticmethod
    def attach(session, name: str):
        """Open the receiver on ``session`` (a proton session of the uplink connection): source
        ``_$qd.edge_addr_tracking``, no target (addr_proxy.c's terminus)."""
        lo = session.receiver(name)
        lo.source.address = TRACKING_ADDRESS
        lo.open()
        return lo

    @staticmethod
    def grant_initial_credit(rl) -> None:
        raw.link_flow(rl.ptr, TRACKING_CREDIT)

    # -- LinkOwner (wire/assembly.py) ----------------------------------------------------------------
    def on_message(self, engine, rl, d, msg: bytes | None) -> None:
        presettled = raw.delivery_settled(d)
        rl.delivery_count += 1
        try:
            if msg is None:
                raise CodecError("edge address tracking update too large")
            key, can_send = parse_update(msg)
        except CodecError as exc:
            self.rejected += 1
            log.error("edge router: %s; rejected", exc)
            if not presettled:
                raw.set_rejected(d, "amqp:decode-error", str(exc))
        else:
            self.updates += 1
            if presettled:
                rl.presettled += 1
            else:
                raw.delivery_update(d, raw.ACCEPTED)
            self.listener.tracking_update(key, can_send)
        raw.delivery_settle(d)
        if not rl.closed:
            raw.link_flow(rl.ptr, 1)
        engine.wake()

    def on_partial(self, engine, rl, d, held: int) -> int:
        return DISCARD if held > MAX_UPDATE_SIZE else KEEP

    def on_delivery_update(self, engine, rl, d) -> None:
        """Nothing to do: updates are answered when they arrive."""

    def on_link_flow(self, engine, rl) -> None:
        """Nothing to do: the link is incoming."""

    def on_oversized(self, engine, rl, d, limit: int) -> None:
        """The engine closes the link; the router hears of it as a lost uplink link."""
        self.rejected += 1
