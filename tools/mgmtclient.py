"""A small blocking AMQP management client for tdstat and tdmanage (and tests).

It opens one connection, one dynamic receiver for replies and one sender per management node it talks
to (``$management`` on the router it is connected to, ``_topo/0/<router-id>/$management`` for any other
router of the mesh), and matches replies to requests by correlation id.
"""

from __future__ import annotations

import itertools
from typing import Any

from proton import ConnectionException, Message, Timeout
from proton.utils import BlockingConnection

from wire import management as wm

DEFAULT_TIMEOUT = 10.0
DEFAULT_URL = "127.0.0.1:5672"


class ManagementFailed(Exception):
    """A management request answered with an error status."""

    def __init__(self, status: int, description: str):
        super().__init__(status, description)
        self.status = status
        self.description = description

    def __str__(self) -> str:
        return f"{self.status} {wm.STATUS_TEXT.get(self.status, '')}: {self.description}".replace(":  ", ": ")


def normalise_url(bus: str) -> str:
    """`host:port`, `host` or an `amqp://` URL -> an amqp:// URL."""
    if "://" in bus:
        return bus
    if ":" not in bus:
        bus += ":5672"
    return "amqp://" + bus


def node_address(router_id: str | None) -> str:
    """The management node of a router: the local one, or any router through the mesh."""
    return wm.MANAGEMENT_ADDRESS if not router_id else f"_topo/0/{router_id}/{wm.MANAGEMENT_ADDRESS}"


class ManagementClient:
    """Blocking request/response over one connection; use as a context manager."""

    def __init__(self, bus: str = DEFAULT_URL, *, timeout: float = DEFAULT_TIMEOUT, router_id: str | None = None,
                 security=None):
        """``security``: a :class:`tools.security.Security` (TLS, SASL login), or None for plain anonymous."""
        self.timeout = timeout
        self.router_id = router_id
        if security is None:
            url, kw = normalise_url(bus), {}
        else:
            url, kw = security.proton_url(bus), security.proton_connect_kwargs()
        try:
            self.connection = BlockingConnection(url, timeout=timeout, **kw)
        except ConnectionException as exc:
            if security is None:
                raise
            raise ConnectionException(security.explain_failure(url, str(exc))) from None
        self.receiver = self.connection.create_receiver(None, dynamic=True)
        self.reply_to = self.receiver.remote_source.address
        self._senders: dict[str, Any] = {}
        self._ids = itertools.count(1)

    def close(self) -> None:
        try:
            self.connection.close()
        except Exception:  # closing a broken connection has nothing left to report
            pass

    def __enter__(self) -> "ManagementClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _sender(self, address: str):
        snd = self._senders.get(address)
        if snd is None:
            snd = self._senders[address] = self.connection.create_sender(address)
        return snd

    def request(self, operation: str, *, type: str = wm.NODE_TYPE, name: str | None = None,
                identity: str | None = None, body: Any = None, router_id: str | None = None, **props) -> wm.Response:
        """Send one request and wait for its response (any status)."""
        address = node_address(router_id if router_id is not None else self.router_id)
        cid = str(next(self._ids))
        data = wm.build_request(operation, type=type, name=name, identity=identity, body=body,
                                reply_to=self.reply_to, correlation_id=cid, to=address, **props)
        msg = Message()
        msg.decode(data)
        try:
            self._sender(address).send(msg, timeout=self.timeout)
        except Timeout:
            # never settled: no credit, i.e. no route to that management node
            raise TimeoutError(f"no answer from {address} within {self.timeout:g} s") from None
        try:
            while True:
                reply = self.receiver.receive(timeout=self.timeout)
                if self.receiver.fetcher.unsettled:  # routers send replies pre-settled; brokers may not
                    self.receiver.accept()
                if str(reply.correlation_id) == cid:
                    return wm.parse_response(reply)
        except Timeout:
            # The node took the request but its reply never came: a reply with no route back to
            # reply_to is dropped (pre-settled), e.g. while the mesh does not know this client's router yet.
            raise TimeoutError(f"no answer from {address} within {self.timeout:g} s: the request was "
                               f"delivered, the reply to {self.reply_to} did not come back") from None

    def call(self, operation: str, **kw) -> Any:
        """A request that must succeed: its body, or ManagementFailed."""
        resp = self.request(operation, **kw)
        if not resp.ok:
            raise ManagementFailed(resp.status, resp.description)
        return resp.body

    def query(self, entity_type: str, attribute_names=(), *, limit: int | None = None,
              router_id: str | None = None) -> list[dict]:
        """Every row of a type (paged by MAX_QUERY_COUNT, as qdstat), as dicts of the named attributes."""
        rows: list[dict] = []
        offset = 0
        while True:
            count = wm.MAX_QUERY_COUNT if limit is None else min(wm.MAX_QUERY_COUNT, limit - len(rows))
            body = self.call("QUERY", name="self", entityType=entity_type, offset=offset, count=count,
                             body={"attributeNames": list(attribute_names)}, router_id=router_id)
            names = body.get("attributeNames") or []
            results = body.get("results") or []
            rows.extend(dict(zip(names, r)) for r in results)
            offset += len(results)
            if len(results) < count or (limit is not None and len(rows) >= limit) or not results:
                return rows
