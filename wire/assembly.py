"""Multi-frame message assembly, sans-IO: the bytes of deliveries that are still arriving.

A message larger than the connection's max-frame-size arrives as several transfer frames (AMQP 1.0
§2.7.5, ``more``). Until its last frame the receiver must keep what arrived; this class keeps it, counts
it (so a daemon's memory budget sees it), enforces a size limit as the bytes arrive (a message over the
limit is refused before it is complete, not after), and notices deliveries that stop making progress, so
that a peer cannot pin memory by starting a large message and never finishing it.

Keys are whatever identifies a delivery to the caller (the router uses raw proton delivery pointers);
``owner`` is whatever the caller wants to find the delivery by when a link goes away.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Partial:
    """What arrived so far of one delivery."""

    owner: object
    chunks: list = field(default_factory=list)
    size: int = 0
    last_progress: float = 0.0


class MessageAssembler:
    """Deliveries in progress, with their total size and the time each last grew.

    ``feed`` appends a chunk and says whether the delivery is now over ``max_size``; ``finish`` returns
    the whole message; ``drop``/``drop_owner`` forget deliveries. ``stalled(now, timeout)`` lists the
    deliveries that have not grown for ``timeout`` seconds.
    """

    __slots__ = ("partials", "total")

    def __init__(self) -> None:
        self.partials: dict = {}
        self.total = 0  # bytes held over every delivery in progress

    def __bool__(self) -> bool:
        return bool(self.partials)

    def feed(self, key, owner, chunk: bytes, now: float, max_size: int = 0) -> bool:
        """Keep ``chunk`` of delivery ``key``. True when the delivery is now larger than ``max_size``
        (0 = no limit): the caller refuses it and calls :meth:`drop`."""
        p = self.partials.get(key)
        if p is None:
            p = self.partials[key] = Partial(owner)
        p.chunks.append(chunk)
        p.size += len(chunk)
        p.last_progress = now
        self.total += len(chunk)
        return bool(max_size) and p.size > max_size

    def size_of(self, key) -> int:
        p = self.partials.get(key)
        return p.size if p is not None else 0

    def finish(self, key, last: bytes) -> bytes:
        """The delivery's last bytes arrived: the whole message (``last`` alone if nothing was kept)."""
        p = self.partials.pop(key, None)
        if p is None:
            return last
        self.total -= p.size
        p.chunks.append(last)
        return b"".join(p.chunks)

    def drop(self, key) -> int:
        """Forget a delivery (refused, aborted, or its link went); the bytes it held."""
        p = self.partials.pop(key, None)
        if p is None:
            return 0
        self.total -= p.size
        return p.size

    def drop_owner(self, owner) -> int:
        """Forget every delivery of ``owner``; the bytes they held."""
        keys = [k for k, p in self.partials.items() if p.owner is owner]
        return sum(self.drop(k) for k in keys)

    def touch(self, key, now: float) -> None:
        """Count the delivery as progressing now (e.g. the caller is not reading from its peer, so the
        lack of progress is the caller's, not the peer's)."""
        p = self.partials.get(key)
        if p is not None:
            p.last_progress = now

    def stalled(self, now: float, timeout: float) -> list:
        """Keys of the deliveries that have not grown for ``timeout`` seconds."""
        limit = now - timeout
        return [k for k, p in self.partials.items() if p.last_progress <= limit]

    def owner_of(self, key):
        p = self.partials.get(key)
        return p.owner if p is not None else None
