"""What every fuzz target shares: the property violation, the log watch, and in-memory AMQP plumbing.

A target runs one input against live objects in this process (a Router, a Broker, a RoutingEngine, the
config parsers) and raises :class:`Violation` when a property fails. Exceptions that escape the code
under test are violations too; the worker (:mod:`tools.fuzz.worker`) turns them into one with
:meth:`Violation.from_exception`. A violation's ``signature`` (exception type and the innermost frame in
project code) groups inputs that fail the same way, so a long run keeps one input per distinct bug.

The plumbing (:class:`Client`, :func:`pump`) connects a proton object-API client to a server-side
:class:`wire.connection.EngineConnection` in memory, the way the Trio driver would over a socket: bytes
out of one side are fed into the other until neither has anything to say.
"""

from __future__ import annotations

import itertools
import logging
import os
import traceback

import proton
from proton import Endpoint

#: Top-level packages whose frames name a violation (the code under test, not the harness).
PROJECT_PACKAGES = ("wire", "router", "broker")

_ids = itertools.count(1)

#: Violations already found, pinned by a regression test and waiting for a fix in a module this campaign
#: does not own: signature -> the test that pins it. A run counts them apart (``known`` in its summary)
#: instead of failing on them again; once the fix lands the strict xfail test fails, and the entry goes.
KNOWN: dict[str, str] = {}


class Violation(Exception):
    """A property of the target failed for one input. ``signature`` identifies the failure mode."""

    def __init__(self, signature: str, detail: str = ""):
        super().__init__(signature, detail)
        self.signature = signature
        self.detail = detail

    def __str__(self) -> str:
        return f"{self.signature}: {self.detail}" if self.detail else self.signature

    @classmethod
    def from_exception(cls, exc: BaseException, what: str = "exception escaped") -> "Violation":
        return cls(f"{what}: {type(exc).__name__} at {project_frame(exc.__traceback__)}",
                   "".join(traceback.format_exception(exc)))


def project_frame(tb) -> str:
    """``path:function`` of the innermost traceback frame in project code (else the innermost frame).

    Line numbers are left out so that a signature survives unrelated edits of the same function."""
    frames = traceback.extract_tb(tb) if tb is not None else []
    chosen = None
    for fs in frames:
        rel = _project_path(fs.filename)
        if rel is not None:
            chosen = (rel, fs.name)
    if chosen is None and frames:
        chosen = (os.path.basename(frames[-1].filename), frames[-1].name)
    return f"{chosen[0]}:{chosen[1]}" if chosen else "?"


def _project_path(filename: str) -> str | None:
    parts = filename.replace("\\", "/").split("/")
    for i in range(len(parts) - 1, -1, -1):
        if parts[i] in PROJECT_PACKAGES and i + 1 < len(parts):
            return "/".join(parts[i:])
    return None


class LogWatch(logging.Handler):
    """Collects the log records of one execution (installed on the root logger by :meth:`install`).

    A record carrying a traceback is what the fuzz campaign hunts: the code under test caught an
    exception it did not expect. ``check`` raises a Violation for the first such record, except the one
    the connection layer writes (at DEBUG) when it refuses a peer's undecodable string, which is the
    documented answer to invalid UTF-8 (a decode error), not a bug.
    """

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @classmethod
    def install(cls) -> "LogWatch":
        watch = cls()
        root = logging.getLogger()
        for h in list(root.handlers):  # nothing is printed: thousands of refusals would drown the report
            root.removeHandler(h)
        root.addHandler(watch)
        root.setLevel(logging.INFO)
        # The connection layer logs a handler's traceback at DEBUG only: that is where handler bugs show.
        logging.getLogger("wire.connection").setLevel(logging.DEBUG)
        return watch

    def clear(self) -> None:
        self.records.clear()

    def lines(self, min_level: int = logging.INFO) -> list[logging.LogRecord]:
        return [r for r in self.records if r.levelno >= min_level]

    def handler_exceptions(self) -> list[BaseException]:
        """Exceptions the connection layer caught from a handler (logged with their traceback)."""
        return [r.exc_info[1] for r in self.records
                if r.name == "wire.connection" and r.exc_info and r.exc_info[1] is not None]

    def check(self) -> None:
        for r in self.records:
            if not r.exc_info or r.exc_info[1] is None:
                continue
            exc = r.exc_info[1]
            if (r.name == "wire.connection" and isinstance(exc, UnicodeError)
                    and not _in_frames(exc.__traceback__, "cond2obj")):
                continue  # refused with amqp:decode-error (wire/connection.py _handler_failed)
            raise Violation(f"traceback logged by {r.name}: {type(exc).__name__} at "
                            f"{project_frame(exc.__traceback__)}",
                            f"{r.getMessage()}\n" + "".join(traceback.format_exception(exc)))


def _in_frames(tb, function: str) -> bool:
    """True when ``function`` is on the traceback: an error condition proton made up itself (with raw
    peer bytes in its description) is not a peer string the connection layer refused."""
    return any(fs.name == function for fs in traceback.extract_tb(tb))


# -- in-memory AMQP ---------------------------------------------------------------------------------

class Client:
    """A well-behaved proton client (object API, SASL ANONYMOUS) talking to a server engine in memory."""

    def __init__(self, *, sasl: bool = True, container: str | None = None):
        self.connection = proton.Connection()
        self.connection.container = container or f"fuzz-client-{next(_ids)}"
        self.transport = proton.Transport(proton.Transport.CLIENT)
        if sasl:
            self.transport.sasl().allowed_mechs("ANONYMOUS")
        self.collector = proton.Collector()
        self.connection.collect(self.collector)
        self.transport.bind(self.connection)
        self.connection.open()
        self.session = self.connection.session()
        self.session.open()
        self.sent = b""  # every byte this client wrote (a real client stream, for seeds)

    def take_output(self) -> bytes | None:
        while self.collector.peek() is not None:
            self.collector.pop()
        p = self.transport.pending()
        if p < 0:
            return None
        if p == 0:
            return b""
        data = bytes(self.transport.peek(p))
        self.transport.pop(p)
        self.sent += data
        return data

    def feed(self, data: bytes) -> None:
        while data:
            cap = self.transport.capacity()
            if cap <= 0:
                return  # tail closed: the rest goes nowhere, as on a dead socket
            self.transport.push(data[:cap])
            data = data[cap:]

    def sender(self, address: str | None, name: str | None = None) -> proton.Sender:
        snd = self.session.sender(name or f"snd-{next(_ids)}")
        snd.target.address = address
        snd.source.address = snd.name
        snd.open()
        return snd

    def receiver(self, address: str, credit: int = 10, name: str | None = None) -> proton.Receiver:
        rcv = self.session.receiver(name or f"rcv-{next(_ids)}")
        rcv.source.address = address
        rcv.target.address = rcv.name
        rcv.open()
        rcv.flow(credit)
        return rcv

    def send(self, snd: proton.Sender, payload: bytes, tag: bytes | None = None) -> proton.Delivery:
        d = snd.delivery(tag or b"t%d" % next(_ids))
        snd.send(payload)
        snd.advance()
        return d

    @staticmethod
    def receive(rcv: proton.Receiver) -> list[bytes]:
        """Complete deliveries waiting on ``rcv``, accepted and settled."""
        got = []
        while True:
            d = rcv.current
            if d is None or not d.readable or d.partial:
                return got
            got.append(bytes(rcv.recv(d.pending) or b""))
            rcv.advance()
            d.update(proton.Delivery.ACCEPTED)
            d.settle()

    @property
    def open(self) -> bool:
        return bool(self.connection.state & Endpoint.REMOTE_ACTIVE)


def drain(engine) -> bytes:
    """Everything a server engine has to write (b"" when nothing; stops when its output is closed)."""
    out = b""
    while True:
        chunk = engine.take_output()
        if not chunk:
            return out
        out += chunk


def pump(client: Client, engine, rounds: int = 200) -> None:
    """Move bytes both ways between ``client`` and ``engine`` until nothing moves."""
    for _ in range(rounds):
        moved = False
        out = client.take_output()
        if out:
            engine.feed(out)
            moved = True
        back = drain(engine)
        if back:
            client.feed(back)
            moved = True
        if not moved:
            return
    raise Violation("engine never went quiet", f"still exchanging bytes after {rounds} rounds")


def close(client: Client, engine) -> None:
    """Close the client's connection the polite way, then drop the socket (the driver's clean-up)."""
    client.connection.close()
    pump(client, engine)
    engine.abort()


def require(condition: bool, signature: str, detail: str = "") -> None:
    if not condition:
        raise Violation(signature, detail)
