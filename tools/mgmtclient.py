"""A small blocking AMQP management client for tdstat and tdmanage (and tests).

It opens one connection, one dynamic receiver for replies and one sender per management node it talks
to (``$management`` on the router it is connected to, ``_topo/0/<router-id>/$management`` for any other
router of the mesh), and matches replies to requests by correlation id.

Two AMQP clients carry it. Proton's ``BlockingConnection`` is the default; its SASL (proton's wheel has
no Cyrus SASL) cannot do SCRAM, so when the security options ask for a SCRAM mechanism the connection is
made with :class:`tools.engineclient.EngineClient` instead, which logs in through wire's SASL client as
connectors and tdbench do. Proton stays for the rest: its EXTERNAL login and its TLS messages are what
the tools' existing behaviour and tests rely on.
"""

from __future__ import annotations

import itertools
from typing import Any

from proton import ConnectionException, Message, Timeout
from proton.utils import BlockingConnection

from tools import engineclient
from tools.lazyssl import defer_ssl_domains
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
        self._senders: dict[str, Any] = {}
        self._ids = itertools.count(1)
        if security is not None and security.wants_engine_client:
            self.connection = _EngineConnection(bus, security, timeout)
        else:
            self.connection = _ProtonConnection(bus, security, timeout)
        self.receiver = self.connection.dynamic_receiver()
        self.reply_to = self.receiver.address

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
            snd = self._senders[address] = self.connection.sender(address)
        return snd

    def request(self, operation: str, *, type: str = wm.NODE_TYPE, name: str | None = None,
                identity: str | None = None, body: Any = None, router_id: str | None = None, **props) -> wm.Response:
        """Send one request and wait for its response (any status)."""
        address = node_address(router_id if router_id is not None else self.router_id)
        cid = str(next(self._ids))
        data = wm.build_request(operation, type=type, name=name, identity=identity, body=body,
                                reply_to=self.reply_to, correlation_id=cid, to=address, **props)
        try:
            self._sender(address).send(data, timeout=self.timeout)
        except (Timeout, TimeoutError):
            # never settled: no credit, i.e. no route to that management node
            raise TimeoutError(f"no answer from {address} within {self.timeout:g} s") from None
        try:
            while True:
                reply = self.receiver.receive(timeout=self.timeout)
                if not isinstance(reply, Message):
                    reply = wm.decode_message(reply)
                if str(reply.correlation_id) == cid:
                    return wm.parse_response(reply)
        except (Timeout, TimeoutError):
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


class _ProtonConnection:
    """proton's BlockingConnection behind the two calls ManagementClient makes (ANONYMOUS, PLAIN, EXTERNAL)."""

    def __init__(self, bus: str, security, timeout: float):
        if security is None:
            url, kw = normalise_url(bus), {}
        else:
            url, kw = security.proton_url(bus), security.proton_connect_kwargs()
        defer_ssl_domains()  # no OpenSSL contexts (~100 ms of CPU) unless this connection is TLS
        try:
            self.blocking = BlockingConnection(url, timeout=timeout, **kw)
        except ConnectionException as exc:
            if security is None:
                raise
            raise ConnectionException(security.explain_failure(url, str(exc))) from None

    def dynamic_receiver(self) -> "_ProtonReceiver":
        return _ProtonReceiver(self.blocking.create_receiver(None, dynamic=True))

    def sender(self, address: str) -> "_ProtonSender":
        return _ProtonSender(self.blocking.create_sender(address))

    def close(self) -> None:
        self.blocking.close()


class _ProtonSender:
    def __init__(self, sender):
        self.sender = sender

    def send(self, data: bytes, timeout: float) -> None:
        msg = Message()
        msg.decode(data)
        self.sender.send(msg, timeout=timeout)


class _ProtonReceiver:
    def __init__(self, receiver):
        self.receiver = receiver
        self.address = receiver.remote_source.address

    def receive(self, timeout: float) -> Message:
        reply = self.receiver.receive(timeout=timeout)
        if self.receiver.fetcher.unsettled:  # routers send replies pre-settled; brokers may not
            self.receiver.accept()
        return reply


class _EngineConnection:
    """tools.engineclient's client: SCRAM (which proton's SASL lacks), PLAIN or ANONYMOUS through wire's SASL."""

    def __init__(self, bus: str, security, timeout: float):
        sasl = security.settings_kwargs()  # refuses a mechanism wire's SASL client cannot do
        self.client = engineclient.EngineClient.connect(
            security.proton_url(bus), username=sasl.get("sasl_username"), password=sasl.get("sasl_password"),
            mechanisms=sasl.get("sasl_client_mechanisms"), ssl_context=security.client_ssl_context(),
            timeout=timeout)

    def dynamic_receiver(self):
        return self.client.dynamic_receiver()

    def sender(self, address: str):
        return self.client.sender(address)

    def close(self) -> None:
        self.client.close()
