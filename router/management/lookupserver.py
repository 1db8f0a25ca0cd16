"""Dispatch's address lookup server on an interior router (``_$qd.addr_lookup``, mobile, balanced): an edge
router asks whether an address it is about to attach is link-routed, and whether that route has a
destination, before deciding where the attach goes (Qpid Dispatch 1.19
src/router_core/modules/address_lookup_server/address_lookup_server.c, include/qpid/dispatch/
address_lookup_server.h).

It lives beside the management agent because it is the same kind of thing: a router-internal node that
answers request messages (``reply_to`` / ``correlation_id``) from the router itself, off the message path.

Protocol (version 1):

* request: application-properties ``version`` = 1, ``opcode`` = 1 (link route lookup); body (amqp-value) a
  list ``[address, receiving]`` where ``receiving`` is true when the router's side of the link would receive
  (the client sends: an ``in`` link route);
* reply, to the request's ``reply_to`` with its ``correlation_id``: application-properties ``version``,
  ``opcode`` and ``status`` (0 found, 3 not found); body ``[is_link_route, has_destinations]``.

Dispatch rejects a malformed request; this router's internal endpoints accept every message
(router/meshforward.py), so a malformed request is logged as a warning with its reason and gets no reply.
"""

from __future__ import annotations

import logging

import proton

log = logging.getLogger("router.lookup")

LOOKUP_ADDRESS = "_$qd.addr_lookup"
PROTOCOL_VERSION = 1
OPCODE_LINK_ROUTE_LOOKUP = 1
STATUS_OK = 0
STATUS_NOT_FOUND = 3


class LookupRequestError(ValueError):
    """A request the server cannot answer (the reason is logged)."""


class AddressLookupServer:
    """Answers link route lookups against the router's link routes (router/linkroutes.py)."""

    def __init__(self, router):
        self.router = router

    def lookup(self, address: str, receiving: bool) -> tuple[bool, bool]:
        """(is_link_route, has_destinations) for an attach to ``address``: a route of direction ``in`` when
        the router's side receives, ``out`` otherwise; it has destinations when a container for it is
        connected here or another router advertised one."""
        link_router = self.router.link_router
        direction = "in" if receiving else "out"
        route = link_router.tables[direction].lookup(self.router.parser.parse(address)[1])
        if route is None:
            return False, False
        return True, bool(link_router.containers(route) or link_router.remote.get(route.key))

    def answer(self, data: bytes) -> bytes:
        """The reply to one request; LookupRequestError when it is not a valid version 1 lookup."""
        msg = proton.Message()
        try:
            msg.decode(data)
        except Exception as exc:  # proton raises several types for malformed input
            raise LookupRequestError(f"undecodable message ({type(exc).__name__})") from None
        props = msg.properties or {}
        if props.get("version") != PROTOCOL_VERSION:
            raise LookupRequestError(f"unknown version {props.get('version')!r}")
        if props.get("opcode") != OPCODE_LINK_ROUTE_LOOKUP:
            raise LookupRequestError(f"invalid opcode {props.get('opcode')!r}")
        body = msg.body
        if not isinstance(body, (list, tuple)) or len(body) < 2 or not isinstance(body[0], str):
            raise LookupRequestError("the body is not [address, direction]")
        if not msg.reply_to or msg.correlation_id is None:
            raise LookupRequestError("no reply_to or correlation_id")
        found, has_destinations = self.lookup(body[0], bool(body[1]))
        reply = proton.Message(
            address=msg.reply_to, correlation_id=msg.correlation_id, durable=False,
            properties={"version": proton.uint(PROTOCOL_VERSION), "opcode": proton.uint(OPCODE_LINK_ROUTE_LOOKUP),
                        "status": proton.uint(STATUS_OK if found else STATUS_NOT_FOUND)},
            body=[found, has_destinations])
        return bytes(reply.encode())

    def on_request(self, data: bytes) -> None:
        """The internal endpoint's handler: answer through the router, or log why not."""
        try:
            reply = self.answer(data)
        except LookupRequestError as exc:
            log.warning("invalid address lookup request: %s", exc)
            return
        self.router.send_local(reply)
