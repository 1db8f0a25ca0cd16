"""The per-delivery engine layer: proton's C calls reached through its cffi module.

Why this module exists: proton's Python object API builds about thirteen wrapper objects for every
delivery (Event, Delivery, Link, records...) and costs ~60 µs of CPU per forwarded message on this machine
kind; the same work through the raw ``pn_*`` calls costs ~7.5 µs
(measured for this project before it began: see the README's performance section). Everything that runs once
per message goes through the
functions here; cold paths (open, attach, detach, close) may use the object API.

Written against python-qpid-proton 0.40.0 (pinned in pyproject.toml): an upgrade touches only this file,
and ``tests/unit/wire/test_raw.py`` exercises every function defined here against a real engine pair.

Pointers handed around are cffi ``cdata`` values; they hash and compare by address, so they can key
dicts directly. A pointer must be dropped from every dict before the object it points to is freed
(deliveries are freed by proton once settled on both sides; links when freed after close).
"""

from __future__ import annotations

import array
import sys

import proton
from cproton_ffi import ffi, lib

PROTON_VERSION = "0.40.0"

NULL = ffi.NULL

# Event types used by the connection driver.
PN_CONNECTION_REMOTE_OPEN = lib.PN_CONNECTION_REMOTE_OPEN
PN_CONNECTION_REMOTE_CLOSE = lib.PN_CONNECTION_REMOTE_CLOSE
PN_SESSION_REMOTE_OPEN = lib.PN_SESSION_REMOTE_OPEN
PN_SESSION_REMOTE_CLOSE = lib.PN_SESSION_REMOTE_CLOSE
PN_LINK_REMOTE_OPEN = lib.PN_LINK_REMOTE_OPEN
PN_LINK_REMOTE_CLOSE = lib.PN_LINK_REMOTE_CLOSE
PN_LINK_REMOTE_DETACH = lib.PN_LINK_REMOTE_DETACH
PN_LINK_FLOW = lib.PN_LINK_FLOW
PN_DELIVERY = lib.PN_DELIVERY
PN_TRANSPORT_ERROR = lib.PN_TRANSPORT_ERROR
PN_TRANSPORT_CLOSED = lib.PN_TRANSPORT_CLOSED

# Delivery states (outcomes).
RECEIVED = lib.PN_RECEIVED
ACCEPTED = lib.PN_ACCEPTED
REJECTED = lib.PN_REJECTED
RELEASED = lib.PN_RELEASED
MODIFIED = lib.PN_MODIFIED
TERMINAL_STATES = frozenset((ACCEPTED, REJECTED, RELEASED, MODIFIED))

EOS = lib.PN_EOS

# Endpoint state bits.
LOCAL_UNINIT = lib.PN_LOCAL_UNINIT
LOCAL_ACTIVE = lib.PN_LOCAL_ACTIVE
LOCAL_CLOSED = lib.PN_LOCAL_CLOSED
REMOTE_ACTIVE = lib.PN_REMOTE_ACTIVE
REMOTE_CLOSED = lib.PN_REMOTE_CLOSED

# Bound names: a module-global lookup is cheaper than lib.attribute on every call.
collector_peek = lib.pn_collector_peek
collector_pop = lib.pn_collector_pop
event_type = lib.pn_event_type
event_delivery = lib.pn_event_delivery
event_link = lib.pn_event_link
event_session = lib.pn_event_session
delivery_link = lib.pn_delivery_link
delivery_readable = lib.pn_delivery_readable
delivery_partial = lib.pn_delivery_partial
delivery_pending = lib.pn_delivery_pending
delivery_aborted = lib.pn_delivery_aborted
delivery_settled = lib.pn_delivery_settled  # remote settled
delivery_remote_state = lib.pn_delivery_remote_state
delivery_local_state = lib.pn_delivery_local_state
delivery_update = lib.pn_delivery_update
delivery_settle = lib.pn_delivery_settle
link_current = lib.pn_link_current
link_advance = lib.pn_link_advance
link_credit = lib.pn_link_credit
link_flow = lib.pn_link_flow
link_is_sender = lib.pn_link_is_sender
link_queued = lib.pn_link_queued
link_get_drain = lib.pn_link_get_drain
link_drained = lib.pn_link_drained
link_drain = lib.pn_link_drain  # receiver: add credit and ask the sender to use it all or say it cannot
link_set_drain = lib.pn_link_set_drain
link_state = lib.pn_link_state
link_session = lib.pn_link_session
session_connection = lib.pn_session_connection
_pn_delivery = lib.pn_delivery
_pn_link_recv = lib.pn_link_recv
_pn_link_send = lib.pn_link_send
_from_buffer = ffi.from_buffer
_buffer = ffi.buffer

# One read buffer for the whole process: the router runs on one thread and copies out of it at once.
RECV_CHUNK = 64 * 1024
_recv_buf = bytearray(RECV_CHUNK)
_recv_ptr = _from_buffer(_recv_buf)
_recv_view = _buffer(_recv_ptr, RECV_CHUNK)  # slicing a cffi buffer yields bytes in one copy


def recv_all(link) -> bytes:
    """Read every byte currently available for the link's current delivery.

    Returns b"" when nothing is pending. Messages larger than RECV_CHUNK are read in several chunks.
    """
    n = _pn_link_recv(link, _recv_ptr, RECV_CHUNK)
    if n <= 0:
        return b""
    if n < RECV_CHUNK:
        return _recv_view[0:n]
    parts = [_recv_view[0:n]]
    while True:
        n = _pn_link_recv(link, _recv_ptr, RECV_CHUNK)
        if n <= 0:
            break
        parts.append(_recv_view[0:n])
    return b"".join(parts)


def send_message(link, tag: bytes, payload: bytes):
    """Create a delivery on a sender link, write the whole message and advance. Returns the delivery."""
    d = _pn_delivery(link, (len(tag), _from_buffer(tag)))
    if type(payload) is not bytes:  # cffi passes only bytes as char*; proton's encode() gives bytearray
        payload = bytes(payload)
    _pn_link_send(link, payload, len(payload))
    link_advance(link)
    return d


# Delivery tags from a ring of pre-built ASCII tags ("0000".."ffff"): passing a ready pn_bytes_t costs
# one index instead of a buffer object and a struct conversion per message. A tag is unique among a
# link's unsettled deliveries while fewer than TAG_RING are outstanding; callers check that.
TAG_RING = 1 << 16
_TAG_WIDTH = 4
_tag_numbers = array.array("H", range(TAG_RING))
if _tag_numbers.itemsize == 2 and sys.byteorder == "little":
    _tag_numbers.byteswap()  # big-endian, so that each number's hex digits come out in reading order
_tag_store = ffi.new("char[]", _tag_numbers.tobytes().hex().encode()
                     if _tag_numbers.itemsize == 2 else b"".join(b"%04x" % i for i in range(TAG_RING)))
del _tag_numbers
_ring_tags = ffi.new("pn_bytes_t[]", TAG_RING)


def _fill_ring_tags() -> None:
    """Point ring entry i at tag i. Every daemon and tool start does this, so the entries are written as
    one block of machine words where pn_bytes_t is two of them (size, then pointer: LP64 Linux), rather
    than by 131,072 cffi attribute stores (about 0.1 s of start-up on a slow core)."""
    word = ffi.sizeof("size_t")
    if (ffi.sizeof("pn_bytes_t"), ffi.offsetof("pn_bytes_t", "size"), ffi.offsetof("pn_bytes_t", "start"),
            ffi.sizeof("char *")) == (2 * word, 0, word, word) and word == array.array("Q").itemsize:
        base = int(ffi.cast("uintptr_t", _tag_store))
        words = array.array("Q", bytes(2 * word * TAG_RING))
        words[0::2] = array.array("Q", [_TAG_WIDTH]) * TAG_RING
        words[1::2] = array.array("Q", range(base, base + _TAG_WIDTH * TAG_RING, _TAG_WIDTH))
        ffi.memmove(_ring_tags, words, len(words) * word)
        return
    for i in range(TAG_RING):  # any other layout: entry by entry
        _ring_tags[i].size = _TAG_WIDTH
        _ring_tags[i].start = _tag_store + _TAG_WIDTH * i


_fill_ring_tags()


def send_ring_tagged(link, seq: int, payload: bytes):
    """Like send_message, with the ring tag for ``seq`` (unique while < TAG_RING are unsettled)."""
    d = _pn_delivery(link, _ring_tags[seq & 0xFFFF])
    if type(payload) is not bytes:
        payload = bytes(payload)
    _pn_link_send(link, payload, len(payload))
    link_advance(link)
    return d


def send_unique_tagged(link, seq: int, payload: bytes, unsettled: int):
    """Send with a ring tag while the link has fewer than TAG_RING unsettled deliveries, else with a
    longer tag that cannot collide with any ring tag."""
    if unsettled < TAG_RING - 1:
        return send_ring_tagged(link, seq, payload)
    return send_message(link, b"x%x" % seq, payload)


# -- streamed deliveries (a message sent frame by frame as its bytes arrive) --------------------------
_pn_delivery_abort = lib.pn_delivery_abort
_pn_session_set_incoming_capacity = lib.pn_session_set_incoming_capacity
_pn_session_connection = lib.pn_session_connection
_pn_connection_transport = lib.pn_connection_transport
_pn_transport_get_max_frame = lib.pn_transport_get_max_frame


def begin_ring_tagged(link, seq: int, payload: bytes):
    """Start a delivery with the ring tag for ``seq`` and write its first bytes without ending it: proton
    sends what it has in transfer frames with ``more`` set (AMQP 1.0 §2.7.5); :func:`send_more` adds
    bytes and :func:`link_advance` ends it. Returns the delivery."""
    d = _pn_delivery(link, _ring_tags[seq & 0xFFFF])
    if payload:
        _pn_link_send(link, payload, len(payload))
    return d


def begin_tagged(link, tag: bytes, payload: bytes):
    """:func:`begin_ring_tagged` with an explicit tag (more unsettled deliveries than the ring holds)."""
    d = _pn_delivery(link, (len(tag), _from_buffer(tag)))
    if payload:
        _pn_link_send(link, payload, len(payload))
    return d


def send_more(link, payload: bytes) -> None:
    """More bytes of the link's current (unfinished) delivery."""
    _pn_link_send(link, payload, len(payload))


def delivery_abort(d) -> None:
    """Abort an unfinished outgoing delivery: proton sends a transfer with ``aborted`` set and settles it
    (AMQP 1.0 §2.7.5); the receiver discards what it got."""
    _pn_delivery_abort(d)


def session_set_incoming_capacity(session, nbytes: int) -> None:
    """Bound the bytes proton buffers for a session's incoming deliveries that the application has not read:
    the session's incoming-window (AMQP 1.0 §2.5.6) closes when they reach ``nbytes``, so a sender stops
    sending on that session alone while its other sessions keep flowing.

    At least one frame of the connection's max-frame-size: proton closes the whole connection with
    ``amqp:internal-error`` ("session capacity ... is less than frame size") when the capacity is smaller,
    which a large configured ``maxFrameSize`` would otherwise cause."""
    frame = _pn_transport_get_max_frame(_pn_connection_transport(_pn_session_connection(session)))
    _pn_session_set_incoming_capacity(session, nbytes if nbytes >= frame else frame)


def copy_outcome(src, dst) -> int:
    """Copy the remote outcome of delivery ``src`` (with its details) to the local state of ``dst``.

    Details carried: the error condition of rejected, the delivery-failed / undeliverable-here flags and
    message annotations of modified. Returns the outcome type. Cold-ish: runs once per settled delivery,
    but only rejected and modified need more than one call.
    """
    state = delivery_remote_state(src)
    if state == REJECTED:
        copy_condition(lib.pn_disposition_condition(lib.pn_delivery_remote(src)),
                       lib.pn_disposition_condition(lib.pn_delivery_local(dst)))
    elif state == MODIFIED:
        remote = lib.pn_delivery_remote(src)
        local = lib.pn_delivery_local(dst)
        lib.pn_disposition_set_failed(local, lib.pn_disposition_is_failed(remote))
        lib.pn_disposition_set_undeliverable(local, lib.pn_disposition_is_undeliverable(remote))
        lib.pn_data_copy(lib.pn_disposition_annotations(local), lib.pn_disposition_annotations(remote))
    delivery_update(dst, state)
    return state


def copy_condition(src, dst) -> None:
    """Copy an error condition (name, description, info map); the cffi module has no pn_condition_copy."""
    name = lib.pn_condition_get_name(src)
    if name:
        lib.pn_condition_set_name(dst, name)
    desc = lib.pn_condition_get_description(src)
    if desc:
        lib.pn_condition_set_description(dst, desc)
    lib.pn_data_copy(lib.pn_condition_info(dst), lib.pn_condition_info(src))


def set_modified(delivery, failed: bool = True, undeliverable: bool = False) -> None:
    """Set a local modified outcome (delivery-failed, undeliverable-here) on a delivery."""
    local = lib.pn_delivery_local(delivery)
    lib.pn_disposition_set_failed(local, failed)
    lib.pn_disposition_set_undeliverable(local, undeliverable)
    delivery_update(delivery, MODIFIED)


def set_rejected(delivery, condition: str, description: str | None = None) -> None:
    """Set a local rejected outcome carrying an AMQP error condition."""
    cond = lib.pn_disposition_condition(lib.pn_delivery_local(delivery))
    lib.pn_condition_set_name(cond, condition.encode())
    if description:
        lib.pn_condition_set_description(cond, description.encode())
    delivery_update(delivery, REJECTED)


def condition_text(cond) -> tuple[str | None, str | None]:
    """Name and description of an error condition, or (None, None) when none is set. A peer wrote these
    bytes, so they are decoded leniently: invalid UTF-8 is escaped, never an exception (AMQP 1.0 §2.8.14
    makes them a symbol and a string, but a hostile peer sends what it likes)."""
    if not cond or not lib.pn_condition_is_set(cond):
        return None, None
    name = lib.pn_condition_get_name(cond)
    desc = lib.pn_condition_get_description(cond)
    return (
        ffi.string(name).decode("utf-8", "backslashreplace") if name else None,
        ffi.string(desc).decode("utf-8", "backslashreplace") if desc else None,
    )


def remote_condition(delivery) -> tuple[str | None, str | None]:
    """Name and description of a remote rejected outcome's error condition (cold path, tests)."""
    return condition_text(lib.pn_disposition_condition(lib.pn_delivery_remote(delivery)))


def connection_remote_condition(conn) -> tuple[str | None, str | None]:
    """The condition of the peer's CLOSE (cold path)."""
    return condition_text(lib.pn_connection_remote_condition(conn))


def transport_condition(transport) -> tuple[str | None, str | None]:
    """Why the transport failed (a framing or SASL error, possibly quoting the peer's bytes)."""
    return condition_text(lib.pn_transport_condition(transport))


def link_remote_condition(link) -> tuple[str | None, str | None]:
    """The condition of the peer's DETACH (cold path)."""
    return condition_text(lib.pn_link_remote_condition(link))


def remote_modified_flags(delivery) -> tuple[bool, bool]:
    """(delivery-failed, undeliverable-here) of the peer's ``modified`` outcome (AMQP 1.0 §3.4.5)."""
    remote = lib.pn_delivery_remote(delivery)
    return bool(lib.pn_disposition_is_failed(remote)), bool(lib.pn_disposition_is_undeliverable(remote))


def delivery_tag(delivery) -> bytes:
    t = lib.pn_delivery_tag(delivery)
    return bytes(_buffer(t.start, t.size))


# ---- transport byte movement -------------------------------------------------------------------

_pn_transport_push = lib.pn_transport_push
_pn_transport_pending = lib.pn_transport_pending
_pn_transport_peek = lib.pn_transport_peek
_pn_transport_pop = lib.pn_transport_pop
transport_tick = lib.pn_transport_tick
transport_close_tail = lib.pn_transport_close_tail
transport_close_head = lib.pn_transport_close_head
transport_closed = lib.pn_transport_closed
transport_frames_input = lib.pn_transport_get_frames_input  # frames read so far (all kinds)


def transport_push(transport, data: bytes) -> int:
    """Feed received bytes to the engine. Returns the count taken or a negative error."""
    if type(data) is bytes:
        return _pn_transport_push(transport, data, len(data))
    return _pn_transport_push(transport, _from_buffer(data), len(data))  # memoryview/bytearray, no copy


class OutputBuffer:
    """A per-connection buffer the engine's pending output is copied into before a socket write."""

    __slots__ = ("buf", "ptr", "size", "_cview")

    def __init__(self, size: int = 256 * 1024):
        self.size = size
        self.buf = bytearray(size)
        self.ptr = _from_buffer(self.buf)
        self._cview = _buffer(self.ptr, size)

    def take_bytes(self, transport) -> bytes | None:
        """Like take(), but returns an independent bytes copy, so one buffer can serve every connection."""
        pending = _pn_transport_pending(transport)
        if pending <= 0:
            return None if pending < 0 else b""
        if pending > self.size:
            pending = self.size
        n = _pn_transport_peek(transport, self.ptr, pending)
        if n < 0:
            return None
        _pn_transport_pop(transport, pending)
        return self._cview[0:pending]

    def take(self, transport) -> memoryview | None:
        """Copy out and pop everything pending (up to the buffer size). None once the head is closed.

        The returned view is valid until the next call.
        """
        pending = _pn_transport_pending(transport)
        if pending < 0:
            return None
        if pending == 0:
            return memoryview(self.buf)[:0]
        if pending > self.size:
            pending = self.size
        n = _pn_transport_peek(transport, self.ptr, pending)
        if n < 0:
            return None
        _pn_transport_pop(transport, pending)
        return memoryview(self.buf)[:pending]


# ---- cold path: object-API views of raw pointers --------------------------------------------------


def pointer(obj):
    """The raw engine pointer behind an object-API view (a ``proton.Link``, ``Connection``,
    ``Transport`` ...): the one place that knows where proton keeps it."""
    return obj._impl


def link_object(link) -> proton.Link:
    """The object-API view of a raw link pointer (for attach/detach handling only)."""
    return proton.Link.wrap(link)


def connection_object(conn) -> proton.Connection:
    return proton.Connection.wrap(conn)


def count_sessions(connection) -> int:
    """Sessions of a proton Connection that we have begun and not ended (cold path: a policy check)."""
    c = pointer(connection)
    n = 0
    s = lib.pn_session_head(c, LOCAL_ACTIVE)
    while s:
        n += 1
        s = lib.pn_session_next(s, LOCAL_ACTIVE)
    return n


def count_links(connection, *, senders: bool) -> int:
    """Links of a proton Connection that we have attached and not detached, senders or receivers (cold
    path: a policy check)."""
    c = pointer(connection)
    n = 0
    link = lib.pn_link_head(c, LOCAL_ACTIVE)
    while link:
        if bool(lib.pn_link_is_sender(link)) == senders:
            n += 1
        link = lib.pn_link_next(link, LOCAL_ACTIVE)
    return n


def set_session_error(session, condition: str, description: str) -> None:
    """The error condition a session's END will carry."""
    cond = lib.pn_session_condition(session)
    lib.pn_condition_set_name(cond, condition.encode())
    lib.pn_condition_set_description(cond, description.encode())
