"""AMQP management messages (AMQP Management draft 9, as Qpid Dispatch uses it; Qpid Dispatch 1.19
python/qpid_dispatch/management/client.py, src/router_core/management_agent.c).

Shared by the router's agent, the broker's agent and the command-line tools. A request carries its
operation and target in the application-properties (``operation``, ``type``, ``name``, ``identity``,
``entityType``, ``offset``, ``count``...), an optional body (a map) and ``reply_to``; the response goes to
``reply_to`` with the request's ``correlation_id`` (or its message id) and carries ``statusCode`` and
``statusDescription``.

Management is a cold path: proton's ``Message`` codec is used for both directions, except that the reply
address and correlation id of a request are read with the project's own codec (:func:`reply_target`), so
that a request proton cannot decode still gets its 400 answer. Whatever is wrong with a request (types,
encoding, size) is a :class:`ManagementError` answered with a status code; nothing a peer sends raises
out of :func:`answer`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import proton

from wire.amqptypes import CodecError, Symbol, ULong
from wire.codec import properties_fields
from wire.logformat import escape_unprintable

OK = 200
CREATED = 201
NO_CONTENT = 204
BAD_REQUEST = 400
FORBIDDEN = 403
NOT_FOUND = 404
INTERNAL_ERROR = 500
NOT_IMPLEMENTED = 501

STATUS_TEXT = {
    OK: "OK", CREATED: "Created", NO_CONTENT: "No Content", BAD_REQUEST: "Bad Request",
    FORBIDDEN: "Forbidden", NOT_FOUND: "Not Found", INTERNAL_ERROR: "Internal Server Error",
    NOT_IMPLEMENTED: "Not Implemented",
}

#: the management node's own type, used for node-level operations (QUERY, GET-*)
NODE_TYPE = "org.amqp.management"
MANAGEMENT_ADDRESS = "$management"

# qdstat asks for at most this many rows per QUERY; the agents cap `count` at it too, so one reply stays
# a reasonable size however many links or connections exist.
MAX_QUERY_COUNT = 500

# A request is a few hundred bytes; anything far larger is not a management request worth decoding.
MAX_REQUEST_BYTES = 1024 * 1024
# Entity types, names and identities are short; a longer application property is refused rather than
# carried into lookups, log lines and error descriptions.
MAX_PROPERTY_CHARS = 1024
# A statusDescription may quote what the request said; it is cut to this length so that an answer
# stays small whatever the request held.
MAX_DESCRIPTION_CHARS = 1000
# A number sent as a string (offset, count) has at most this many digits: no table is that long, and
# int() of a long digit string costs time quadratic in its length.
MAX_INT_DIGITS = 18


class ManagementError(Exception):
    """A request the agent answers with an error status (4xx/5xx) and a description."""

    def __init__(self, status: int, description: str):
        super().__init__(status, description)
        self.status = status
        self.description = description

    def __str__(self) -> str:
        return f"{self.status} {self.description}"


def bad_request(description: str) -> ManagementError:
    return ManagementError(BAD_REQUEST, description)


def not_found(description: str) -> ManagementError:
    return ManagementError(NOT_FOUND, description)


@dataclass
class Request:
    """One decoded management request."""

    operation: str
    type: str | None = None
    name: str | None = None
    identity: str | None = None
    entity_type: str | None = None
    offset: int = 0
    count: int | None = None
    attribute_names: list[str] = field(default_factory=list)
    body: Any = None
    properties: dict = field(default_factory=dict)
    reply_to: str | None = None
    correlation_id: Any = None

    @property
    def target_type(self) -> str | None:
        """The entity type a QUERY or GET-* is about: ``entityType``, else ``type`` unless it is the
        node's own type (the C agent falls back to ``type`` when ``entityType`` is absent)."""
        if self.entity_type:
            return self.entity_type
        if self.type and self.type != NODE_TYPE:
            return self.type
        return None


# -- request plumbing every agent shares (router/management/agent.py, broker/management.py) -------------
#: the columns of a QUERY over every entity type that names no attributes (Qpid Dispatch 1.19
#: src/router_core/management_agent.c answers these)
BASE_ATTRIBUTES = ("name", "identity", "type")


def query_attribute_names(req: Request, type_name: str | None = None, known=()) -> list[str]:
    """The columns a QUERY answers: its ``attributeNames``, else every attribute of ``type_name``
    (``known``), else :data:`BASE_ATTRIBUTES` when the QUERY is about every type. An attribute the type
    does not have is a 400 naming it."""
    if type_name is None:
        return req.attribute_names or list(BASE_ATTRIBUTES)
    names = req.attribute_names or list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise bad_request(f"Unknown attribute{'s' if len(unknown) > 1 else ''} "
                          f"{', '.join(repr(n) for n in unknown)} for type {type_name}")
    return names


def query_page(req: Request, names: list[str], rows: list[dict]) -> dict:
    """The QUERY answer body for ``rows``: the page from the request's ``offset``, at most ``count``
    rows (capped at MAX_QUERY_COUNT), each a list of the values of ``names``."""
    count = MAX_QUERY_COUNT if req.count is None else min(req.count, MAX_QUERY_COUNT)
    page = rows[req.offset:req.offset + count]
    return {"attributeNames": names, "results": [[row.get(n) for n in names] for row in page]}


def entity_key(req: Request) -> tuple[str, str]:
    """(attribute, value) a READ, UPDATE or DELETE names its entity by: ``identity`` when given, else
    ``name``; 400 when it has neither."""
    if req.identity:
        return "identity", req.identity
    if req.name:
        return "name", req.name
    raise bad_request(f"{req.operation} needs application property 'name' or 'identity'")


def body_attributes(req: Request) -> dict:
    """The body of a CREATE or UPDATE as a map of attribute name -> value (empty when there is none);
    400 when the body is not a map."""
    body = req.body if req.body is not None else {}
    if not isinstance(body, dict):
        raise bad_request(f"{req.operation} body must be a map of attributes")
    return {str(k): v for k, v in body.items()}


def require_operation(operation: str, type_name: str, allowed) -> None:
    """400 unless ``operation`` is one of the type's ``allowed`` operations (compared in upper case,
    as request operations are)."""
    if operation not in (a.upper() for a in allowed):
        raise bad_request(f"operation {operation} is not allowed on type {type_name} "
                          f"(allowed: {', '.join(allowed)})")


def _optional_str(props: dict, key: str) -> str | None:
    value = props.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise bad_request(f"application property '{key}' must be a string, not {type(value).__name__}")
    if len(value) > MAX_PROPERTY_CHARS:
        raise bad_request(f"application property '{key}' is {len(value)} characters long "
                          f"(at most {MAX_PROPERTY_CHARS})")
    return value


def _optional_int(props: dict, key: str) -> int | None:
    value = props.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        # Some clients send numbers as strings; only plain ASCII digits are numbers here ("²" is not).
        text = value.strip() if isinstance(value, str) else ""
        if text.lstrip("-").isascii() and text.lstrip("-").isdigit() and len(text) <= MAX_INT_DIGITS:
            value = int(text)
        else:
            raise bad_request(f"application property '{key}' must be an integer, not {type(value).__name__}")
    if value < 0:
        raise bad_request(f"application property '{key}' must not be negative")
    return int(value)


def decode_message(data: bytes) -> proton.Message:
    """A proton Message for ``data``, or ManagementError 400 naming what is wrong with it."""
    if len(data) > MAX_REQUEST_BYTES:
        raise bad_request(f"request of {len(data)} bytes exceeds the {MAX_REQUEST_BYTES}-byte limit")
    msg = proton.Message()
    try:
        msg.decode(data)
    except Exception as exc:  # proton raises several types for malformed input
        raise bad_request(f"malformed message: {_describe(exc)}") from None
    return msg


def _describe(exc: Exception) -> str:
    """A short description of a decoding failure (no peer bytes beyond a few, for the log line)."""
    if isinstance(exc, UnicodeDecodeError):
        return "a string is not valid UTF-8"
    return f"{type(exc).__name__}: {str(exc)[:100]}"


def parse_request(data: bytes | proton.Message) -> Request:
    """Decode a request; raises ManagementError (400) naming what is wrong.

    proton decodes some fields only when they are read (the string ones), so every read of the message
    is inside the error handling: a request whose subject or body holds invalid UTF-8 is a bad request
    like any other, not an agent failure.
    """
    msg = data if isinstance(data, proton.Message) else decode_message(data)
    try:
        return _parse(msg, data)
    except UnicodeDecodeError as exc:
        raise bad_request(f"malformed message: {_describe(exc)}") from None


def _parse(msg: proton.Message, data) -> Request:
    if isinstance(data, proton.Message):
        reply_to, correlation_id = msg.reply_to, msg.correlation_id if msg.correlation_id is not None else msg.id
    else:
        reply_to, correlation_id = reply_target(data)
    req = Request(operation="", reply_to=reply_to, correlation_id=correlation_id)
    props = msg.properties
    if props is None:
        props = {}
    if not isinstance(props, dict):
        raise bad_request("application-properties must be a map")
    req.properties = {str(k): v for k, v in props.items()}
    op = _optional_str(req.properties, "operation")
    if not op:
        raise bad_request("missing application property 'operation'")
    req.operation = op.upper()
    req.type = _optional_str(req.properties, "type")
    req.name = _optional_str(req.properties, "name")
    req.identity = _optional_str(req.properties, "identity")
    req.entity_type = _optional_str(req.properties, "entityType")
    req.offset = _optional_int(req.properties, "offset") or 0
    req.count = _optional_int(req.properties, "count")
    req.body = msg.body
    if req.operation == "QUERY" and isinstance(msg.body, dict):
        names = msg.body.get("attributeNames")
        if names is not None:
            if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
                raise bad_request("body 'attributeNames' must be a list of strings")
            req.attribute_names = [str(n) for n in names]
    return req


def reply_target(data: bytes) -> tuple[str | None, Any]:
    """(reply_to, correlation id) of a message that may not even be a valid request.

    Read with the project's own codec (:func:`wire.codec.properties_fields`), which stops after the
    properties section: a request that proton cannot decode as a whole (a binary map key, invalid UTF-8
    in the body, more than MAX_REQUEST_BYTES) still names where its 400 answer goes. The correlation id
    is the request's correlation-id, else its message-id, as the proton type that encodes the same way.
    """
    try:
        fields = properties_fields(data, 6)
    except CodecError:
        return None, None
    reply_to = fields[4]
    if not isinstance(reply_to, str) or not reply_to:
        return None, None
    correlation = fields[5] if fields[5] is not None else fields[0]
    return str(reply_to), _message_id(correlation)


def _message_id(value: Any) -> Any:
    """A message-id (AMQP 1.0 §3.2.11: ulong, uuid, binary or string) from wire.codec as proton will
    encode it again; any other type (not a valid message-id) is dropped rather than echoed."""
    if isinstance(value, ULong):
        return proton.ulong(value)
    if isinstance(value, Symbol):
        return proton.symbol(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, uuid.UUID)):
        return value
    return None


def _amqp_value(value: Any) -> Any:
    """Python values as the AMQP types Dispatch uses: tuples become lists, dict keys strings."""
    if isinstance(value, dict):
        return {str(k): _amqp_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_amqp_value(v) for v in value]
    return value


def build_response(reply_to: str | None, correlation_id: Any, status: int, description: str | None = None,
                   body: Any = None) -> bytes:
    """A response message for ``reply_to`` (its ``to``), with ``statusCode`` as an int32 (as Dispatch)."""
    msg = proton.Message(
        address=reply_to,
        correlation_id=correlation_id,
        properties={"statusCode": proton.int32(status),
                    "statusDescription": description or STATUS_TEXT.get(status, "")},
        body=_amqp_value(body if body is not None else {}),
    )
    return bytes(msg.encode())


def answer(data: bytes, dispatch, log, translate=None) -> bytes | None:
    """The common body of an agent: parse a request, ``dispatch(req) -> (status, body)``, turn errors into
    status codes (ManagementError as given; ``translate(exc) -> (status, description)`` for others it
    knows; anything else 500, logged with its traceback: an agent bug), and build the response. A
    refused request costs one log line (INFO) with the description, escaped and cut to a line's length.
    None when the request names no reply address."""
    reply_to, correlation_id = reply_target(data)
    try:
        req = parse_request(data)
        status, body = dispatch(req)
        description = STATUS_TEXT[status]
    except ManagementError as exc:
        status, description, body = exc.status, exc.description, {}
    except Exception as exc:  # an agent bug must not take the daemon down
        known = translate(exc) if translate is not None else None
        if known is None:
            log.exception("management request failed")
            known = (INTERNAL_ERROR, f"internal error: {exc}")
        (status, description), body = known, {}
    description = _cut(str(description), MAX_DESCRIPTION_CHARS)
    if status >= 400:
        log.info("management request answered %d: %s", status, escape_unprintable(_cut(description, 300)))
    if not reply_to:
        return None
    try:
        return build_response(reply_to, correlation_id, status, description, body)
    except Exception as exc:  # a value the AMQP encoder refuses: say so rather than stay silent
        log.exception("management response could not be encoded")
        return build_response(reply_to, correlation_id, INTERNAL_ERROR,
                              f"internal error: response not encodable: {exc}", {})


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def build_request(operation: str, *, type: str = NODE_TYPE, name: str | None = None,
                  identity: str | None = None, body: Any = None, reply_to: str | None = None,
                  correlation_id: Any = None, to: str | None = MANAGEMENT_ADDRESS, **props) -> bytes:
    """A request message (tools and tests). Extra keyword properties go into application-properties."""
    ap: dict = {"operation": operation, "type": type}
    if name is not None:
        ap["name"] = name
    if identity is not None:
        ap["identity"] = identity
    for k, v in props.items():
        if v is not None:
            ap[k] = v
    msg = proton.Message(address=to, reply_to=reply_to, correlation_id=correlation_id, properties=ap,
                         body=_amqp_value(body if body is not None else {}))
    return bytes(msg.encode())


@dataclass
class Response:
    """One decoded management response."""

    status: int
    description: str
    body: Any
    correlation_id: Any = None
    to: str | None = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def parse_response(data: bytes | proton.Message) -> Response:
    msg = data if isinstance(data, proton.Message) else decode_message(data)
    props = msg.properties or {}
    status = props.get("statusCode")
    if not isinstance(status, int):
        raise ValueError("response without an integer statusCode")
    return Response(int(status), str(props.get("statusDescription") or ""), msg.body, msg.correlation_id,
                    msg.address)
