"""Flow records from the router: ingress, egress and settle events for sampled messages.

Off (no ``flowRecords`` section) the message path pays one ``self.flow is not None`` test per arrival
and one ``ind.flow is not None`` test per departure and per settlement. On, a message is sampled once
at arrival (by its message-id, so every node samples the same messages — see wire/flowrecords.py); the
``InDelivery.flow`` slot then carries the message-id string (``""`` when it has none) so later events
need no parsing.
"""

from __future__ import annotations

import logging

from wire import raw
from wire.codec import CodecError, properties_fields
from wire.flowrecords import message_id_str

log = logging.getLogger("router.flow")

OUTCOME_NAMES = {raw.ACCEPTED: "accepted", raw.REJECTED: "rejected", raw.RELEASED: "released",
                 raw.MODIFIED: "modified"}


class FlowHooks:
    """The flow-record calls the forwarder makes when flow records are configured
    (:class:`router.forwarder.FlowRecords`); ``recorder`` is the :class:`wire.flowrecords.FlowRecorder`."""

    def __init__(self, router_id: str, recorder):
        self.id = router_id
        self.recorder = recorder

    def ingress(self, ind, rl, msg: bytes) -> None:
        try:
            mid = message_id_str(properties_fields(msg, 1)[0])
            if not self.recorder.wants(mid):
                return  # most messages at a low sample rate: only the message-id was decoded
            address = rl.address.name if rl.address is not None else properties_fields(msg, 3)[2]
        except CodecError:
            return
        ind.flow = mid or ""
        self.recorder.record("ingress", conn=rl.conn.engine.id if rl.conn else None, link=rl.id,
                             address=address, phase=rl.address.phase if rl.address is not None else None,
                             mid=mid, size=len(msg))

    def egress(self, ol, ind) -> None:
        addr = ol.address
        trace = None
        if ol.inter_router:
            ra = ind.ra
            trace = list(ra.trace or ()) + [self.id] if ra is not None else [self.id]
        self.recorder.record("egress", conn=ol.conn.engine.id, link=ol.id,
                             address=addr.name if addr is not None else None,
                             phase=addr.phase if addr is not None else None,
                             mid=ind.flow or None, size=len(ind.msg) if ind.msg is not None else None,
                             trace=trace)

    def settle(self, ind, state: int) -> None:
        link = ind.link
        self.recorder.record("settle", conn=link.conn.engine.id if link.conn else None,
                             link=link.id, mid=ind.flow or None,
                             outcome=OUTCOME_NAMES.get(state, str(state)))


def recorder_from_config(cfg, node_id: str):
    """The FlowRecorder a ``flowRecords`` section asks for, or None. Raises FlowRecordError."""
    if not cfg.flow_records:
        return None
    from wire.flowrecords import FlowRecorder

    e = cfg.flow_records[0]
    return FlowRecorder(e["directory"], node_id, sample=float(e.get("sample", 1.0)),
                        rotate_mb=float(e.get("rotateMB", 64.0)))
