"""A synchronous AMQP client on a plain socket, for tests that need exact control of the wire.

The reactor clients (tests/system/clients.py) always read their socket and settle as the handler says;
memory and back-pressure tests need a peer that misbehaves precisely: one that opens hundreds of sender
links, never grants credit, never settles, stops reading its socket, or leaves a delivery half sent.
:class:`WireClient` drives proton's engine by hand: every byte moves only inside :meth:`pump`, so
"stop reading" is simply not calling it with ``read=True``.
"""

from __future__ import annotations

import select
import socket
import time

import proton
from proton import Delivery

__all__ = ["WireClient"]


class WireClient:
    """One AMQP connection, driven step by step (no threads, no reactor)."""

    def __init__(self, host: str, port: int, *, container: str = "wire-client", max_frame: int = 16384,
                 recv_buffer: int | None = None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer is not None:  # a small receive window makes "stops reading" bite at once
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        self.sock.connect((host, port))
        self.sock.setblocking(False)
        self.transport = proton.Transport()
        self.transport.max_frame_size = max_frame
        self.conn = proton.Connection()
        self.conn.container = container
        self.conn.hostname = host
        self.transport.bind(self.conn)
        self.collector = proton.Collector()
        self.conn.collect(self.collector)
        self.conn.open()
        self.session = self.conn.session()
        self.session.open()
        self.closed = False
        self._seq = 0
        self._inbuf = bytearray()  # read from the socket, not yet taken by the engine

    def backlog(self, links) -> int:
        """Bytes this client has written but its engine has not yet put on the wire (queued deliveries,
        pending frames): what a real client would block on."""
        return self.transport.pending() + sum(link.queued for link in links) * 16384

    # -- links -----------------------------------------------------------------------------------
    def sender(self, address: str, name: str | None = None, session=None) -> proton.Sender:
        self._seq += 1
        snd = (session or self.session).sender(name or f"snd-{self._seq}")
        snd.target.address = address
        snd.source.address = address
        snd.open()
        return snd

    def receiver(self, address: str, credit: int = 0, name: str | None = None) -> proton.Receiver:
        self._seq += 1
        rcv = self.session.receiver(name or f"rcv-{self._seq}")
        rcv.source.address = address
        rcv.target.address = address
        rcv.open()
        if credit:
            rcv.flow(credit)
        return rcv

    def send(self, snd: proton.Sender, body: bytes, *, settled: bool = False, partial: bool = False):
        """Send ``body`` as one message's bytes (already AMQP-encoded sections); ``partial`` leaves
        the delivery open (more bytes may follow with :meth:`send_more`)."""
        self._seq += 1
        dlv = snd.delivery(b"t%d" % self._seq)
        snd.send(body)
        if not partial:
            snd.advance()
            if settled:
                dlv.settle()
        return dlv

    @staticmethod
    def send_more(snd: proton.Sender, data: bytes, *, last: bool = False) -> None:
        snd.send(data)
        if last:
            snd.advance()

    # -- moving bytes ------------------------------------------------------------------------------
    def pump(self, seconds: float = 0.0, *, read: bool = True, write: bool = True, until=None) -> None:
        """Exchange bytes with the router for up to ``seconds`` (or until ``until()`` is true)."""
        deadline = time.monotonic() + seconds
        while True:
            self._io(read, write, max(0.0, min(0.05, deadline - time.monotonic())))
            if until is not None and until():
                return
            if time.monotonic() >= deadline:
                return

    def _io(self, read: bool, write: bool, wait: float) -> None:
        t = self.transport
        pending = t.pending() if write else 0
        rlist = [self.sock] if read else []
        wlist = [self.sock] if write and pending > 0 else []
        if not rlist and not wlist:
            time.sleep(wait)
            return
        r, w, _ = select.select(rlist, wlist, [], wait)
        if w:
            try:
                n = self.sock.send(t.peek(min(pending, 1 << 20)))
                t.pop(n)
            except BlockingIOError:
                pass
        if r:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                data = None
            if data == b"":
                self.closed = True
                t.close_tail()
            elif data:
                self._inbuf += data
        while self._inbuf and not self.closed:
            cap = t.capacity()
            if cap <= 0:
                break  # the engine is full: the rest waits for the next pump
            t.push(self._inbuf[:cap])
            del self._inbuf[:cap]

    def events(self):
        """Drain and return the engine events collected so far."""
        out = []
        while True:
            ev = self.collector.peek()
            if ev is None:
                return out
            out.append(ev)
            self.collector.pop()

    def take_messages(self, rcv: proton.Receiver, *, settle: str | None = "accept",
                      keep: list | None = None) -> list[bytes]:
        """Read every complete delivery waiting on ``rcv``; accept+settle them unless ``settle`` is None
        (then the deliveries are appended to ``keep``, if given, for the test to settle later)."""
        out = []
        while True:
            d = rcv.current
            if d is None or d.partial or not d.readable:
                return out
            out.append(rcv.recv(d.pending))
            rcv.advance()
            if settle == "accept":
                d.update(Delivery.ACCEPTED)
                d.settle()
            elif keep is not None:
                keep.append(d)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
