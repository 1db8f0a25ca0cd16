"""Reads and writes on a plain TCP connection for the connection driver, one system call each.

Why this module exists: :class:`trio.SocketStream` wraps every ``recv``/``send`` in a conflict detector,
a cancellation check, a schedule point and an ``outcome`` object, and ``receive_some`` returns a new
bytes object for every read. The driver (:mod:`wire.driver`) already owns the only reader and the only
writer of each connection and places its own schedule points, so for a plain (non-TLS) socket it makes
the non-blocking system call directly, into one buffer shared by every connection and out of the
engine's shared output buffer, and waits for readiness (``trio.lowlevel.wait_readable``/
``wait_writable``) only when the call would block. TLS connections keep Trio's streams.

Bytes read into :data:`READ_BUFFER` are valid until the next read of any connection: the caller hands
them to the engine (which copies them) before it awaits anything.
"""

from __future__ import annotations

import os

import trio

# The most one read takes (the driver asks for less when small messages arrive).
READ_SIZE = 256 * 1024
READ_BUFFER = bytearray(READ_SIZE)
READ_VIEW = memoryview(READ_BUFFER)

_readv = os.readv
_write = os.write


class PlainSocket:
    """The socket of a :class:`trio.SocketStream`, read and written with one system call per operation.

    Every call checks the socket is still open (its descriptor is -1 once Trio closed it), so a number
    the kernel gave to another file is never used. Errors are those of the system calls (``OSError``)
    and :class:`trio.ClosedResourceError`, as from the stream.
    """

    __slots__ = ("sock",)

    def __init__(self, stream: trio.SocketStream) -> None:
        self.sock = stream.socket

    def _fd(self) -> int:
        fd = self.sock.fileno()
        if fd < 0:
            raise trio.ClosedResourceError("socket was closed")
        return fd

    async def read(self, size: int) -> int:
        """Read up to ``size`` (at most READ_SIZE) bytes into :data:`READ_BUFFER`; the count read, 0 at
        end of stream. Waits only when nothing is there to read (no schedule point otherwise: the caller
        places one)."""
        buf = READ_VIEW[:size]
        while True:
            try:
                return _readv(self._fd(), (buf,))
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self.sock)

    def try_send(self, data) -> int:
        """Write what the socket takes now without waiting; the count written (0: it would block)."""
        try:
            return _write(self._fd(), data)
        except BlockingIOError:
            return 0

    async def send_all(self, data) -> None:
        """Write all of ``data`` (which must stay unchanged while this waits), waiting for room."""
        view = memoryview(data)
        while view:
            n = self.try_send(view)
            if n:
                view = view[n:]
            else:
                await trio.lowlevel.wait_writable(self.sock)


def plain_socket(stream: trio.abc.Stream) -> PlainSocket | None:
    """The direct path for a plain TCP stream; None for anything else (TLS, test streams)."""
    return PlainSocket(stream) if type(stream) is trio.SocketStream else None
