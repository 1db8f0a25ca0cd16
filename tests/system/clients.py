"""Threaded python-qpid-proton clients for system tests, plus a raw-socket helper.

proton's ``BlockingConnection`` cannot be shared between threads, and
``BlockingSender.send`` waits for the consumer to settle (the router settles
end to end), so a producer and a consumer in one thread deadlock.  Each client
here owns one proton ``Container`` running in its own thread:

* everything proton is touched only from that thread;
* the test thread talks to it through :meth:`_Client.call`, which queues a
  function and wakes the container with an ``EventInjector``;
* results are kept under a lock and every wait has a timeout, so a broken
  router fails the test instead of hanging it.

Clients: :class:`Consumer`, :class:`Producer`, :class:`Responder` (a request /
reply service) and :class:`Requester`.  :class:`RawSocket` is a plain TCP
socket for feeding the router garbage.

``python -m tests.system.clients hold-consumer URL ADDRESS --credit N
[--accept K]`` runs a consumer in a separate process (used to make a client
vanish with SIGKILL): it accepts the first K messages, leaves the rest
unsettled, and prints ``received ID`` for each message.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import itertools
import os
import queue
import socket
import sys
import threading
import time
from typing import Any, Callable, Iterable

from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.reactor import ApplicationEvent, AtMostOnce, Container, EventInjector

__all__ = [
    "ClientError",
    "Consumer",
    "DEFAULT_TIMEOUT",
    "Producer",
    "RawSocket",
    "Requester",
    "Responder",
    "close_all",
    "router_crash_fails_test",
    "outcome_name",
]

DEFAULT_TIMEOUT = 10.0

_client_ids = itertools.count(1)

_OUTCOME_NAMES = {
    Delivery.ACCEPTED: "accepted",
    Delivery.REJECTED: "rejected",
    Delivery.RELEASED: "released",
    Delivery.MODIFIED: "modified",
}


def outcome_name(state) -> str:
    """'accepted', 'rejected', 'released', 'modified', or 'none' (settled without an outcome)."""
    return _OUTCOME_NAMES.get(state, "none" if not state else f"state-{int(state)}")


class ClientError(AssertionError):
    """A client did not reach the awaited state in time (or crashed)."""


class _Call:
    """Handler for container.schedule(): runs a function on the container thread."""

    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn

    def on_timer_task(self, event) -> None:
        self.fn()


class _Client(MessagingHandler):
    """One connection in one thread.  Subclasses add links in :meth:`_open_links`."""

    #: after close(): if the router does not answer our close frame in this
    #: many seconds, stop the container anyway.
    CLOSE_GRACE = 3.0

    def __init__(self, url: str, *, name: str | None = None, container_id: str | None = None):
        super().__init__(prefetch=0, auto_accept=False, auto_settle=True)
        self.url = url
        self.name = name or f"{type(self).__name__.lower()}-{next(_client_ids)}"
        self.container_id = container_id or self.name
        self._cond = threading.Condition(threading.RLock())
        self._commands: queue.Queue[Callable[[], Any]] = queue.Queue()
        self._injector = EventInjector()
        self._thread: threading.Thread | None = None
        self._closing = False
        self.conn = None  # proton Connection (client thread only)
        # -- observable state (read from the test thread) --
        self.connected = threading.Event()  # the router's open frame arrived
        self.remote_closed = threading.Event()  # the router sent a close frame
        self.remote_close_condition: tuple[str, str | None] | None = None
        self.transport_closed = threading.Event()  # the socket is gone (either way)
        self.disconnected = threading.Event()  # socket gone while our side was still open
        self.transport_errors: list[str] = []
        self.link_errors: list[tuple[str, str | None]] = []  # (condition, description)
        self.link_refused = threading.Event()  # a link was detached by the router with an error
        self.link_detached = threading.Event()  # a link was detached by the router (any reason)
        self.finished = threading.Event()  # the container thread ended
        self.errors: list[str] = []  # exceptions raised in handler code

    # -- life cycle (test thread) ------------------------------------------------------------------
    def start(self, *, wait: bool = True, timeout: float = DEFAULT_TIMEOUT) -> "_Client":
        """Start the thread; by default wait until the links are attached (see :meth:`wait_ready`)."""
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        _live.add(self)
        if wait:
            self.wait_ready(timeout)
        return self

    def _run(self) -> None:
        container = Container(self)
        container.container_id = self.container_id
        container.selectable(self._injector)
        try:
            container.run()
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            with self._cond:
                self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            with self._cond:
                self.finished.set()
                self._cond.notify_all()

    def call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn()`` on the client's container thread (soon, asynchronously)."""
        if self.finished.is_set():
            raise ClientError(f"{self.name}: client thread already ended ({self.errors})")
        self._commands.put(fn)
        self._injector.trigger(ApplicationEvent("client_command"))

    def on_client_command(self, event) -> None:
        while True:
            try:
                fn = self._commands.get_nowait()
            except queue.Empty:
                return
            fn()

    def close(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Close the connection (gracefully) and end the thread."""
        if self._thread is None:
            return
        if not self.finished.is_set():
            try:
                self.call(self._do_close)
            except ClientError:
                pass
        self._thread.join(timeout)
        _live.discard(self)
        if self._thread.is_alive():
            raise ClientError(f"{self.name}: client thread did not end within {timeout}s")
        for fd in self._injector.pipe:
            try:
                os.close(fd)
            except OSError:
                pass
        self._injector.pipe = (-1, -1)

    def _do_close(self) -> None:
        self._closing = True
        container = self.container
        if self.conn is not None and not self.conn.state & self.conn.LOCAL_CLOSED:
            self.conn.close()
        self._injector.close()
        if self.conn is None or self.transport_closed.is_set():
            container.stop()
        else:
            container.schedule(self.CLOSE_GRACE, _Call(container.stop))

    def __enter__(self):
        if self._thread is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- waiting (test thread) ---------------------------------------------------------------------
    def wait_for(self, predicate: Callable[[], bool], timeout: float = DEFAULT_TIMEOUT,
                 what: str = "condition") -> None:
        """Wait until ``predicate()`` (evaluated under the client's lock) is true."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                if self.errors:
                    raise ClientError(f"{self.name}: handler error while waiting for {what}: {self.errors}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ClientError(f"{self.name}: timed out after {timeout}s waiting for {what}; "
                                      f"{self.describe()}")
                if self.finished.is_set():
                    raise ClientError(f"{self.name}: client ended while waiting for {what}; {self.describe()}")
                if self.transport_closed.is_set():
                    # Nothing more can arrive on a closed connection: fail now, not at the timeout.
                    raise ClientError(f"{self.name}: connection closed while waiting for {what}; "
                                      f"{self.describe()}")
                self._cond.wait(min(remaining, 0.1))

    def wait_ready(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Links attached (or refused: see ``link_errors``)."""
        self.wait_for(self._ready, timeout, "links to attach")

    def _ready(self) -> bool:
        return bool(self.link_errors)

    def describe(self) -> str:
        return (f"connected={self.connected.is_set()} remote_closed={self.remote_closed.is_set()} "
                f"link_errors={self.link_errors} transport_errors={self.transport_errors} "
                f"errors={self.errors}")

    def _changed(self) -> None:
        with self._cond:
            self._cond.notify_all()

    # -- proton events (client thread) -------------------------------------------------------------
    @property
    def container(self) -> Container:
        return self._container_ref

    def on_start(self, event) -> None:
        self._container_ref = event.container
        self.conn = event.container.connect(self.url, reconnect=False)
        self._open_links(event.container, self.conn)

    def _open_links(self, container: Container, conn) -> None:
        raise NotImplementedError

    def on_connection_opened(self, event) -> None:
        with self._cond:
            self.connected.set()
            self._cond.notify_all()

    def on_connection_remote_close(self, event) -> None:
        cond = event.connection.remote_condition
        with self._cond:
            self.remote_close_condition = (cond.name, cond.description) if cond else None
            self.remote_closed.set()
            self._cond.notify_all()

    def on_connection_error(self, event) -> None:
        pass  # recorded by on_connection_remote_close; don't log to stderr

    def on_transport_error(self, event) -> None:
        cond = event.transport.condition
        with self._cond:
            self.transport_errors.append(f"{cond.name}: {cond.description}" if cond else "unknown")
            self._cond.notify_all()

    def on_transport_closed(self, event) -> None:
        with self._cond:
            self.transport_closed.set()
            self._cond.notify_all()
        if self._closing:
            event.container.stop()

    def on_disconnected(self, event) -> None:
        with self._cond:
            self.disconnected.set()
            self._cond.notify_all()

    def on_link_remote_close(self, event) -> None:
        cond = event.link.remote_condition
        with self._cond:
            self.link_detached.set()
            if cond is not None:
                self.link_errors.append((cond.name, cond.description))
                self.link_refused.set()
            self._cond.notify_all()

    def on_link_error(self, event) -> None:
        pass  # recorded above; the default would close the whole connection

    def on_session_error(self, event) -> None:
        with self._cond:
            cond = event.session.remote_condition
            self.errors.append(f"session ended by peer: {cond}")
            self._cond.notify_all()


# The base of the clients below, for test modules that need a peer of their own (one connection in one
# thread, with its waiting and commands): subclass it and attach links in ``_open_links``.
Client = _Client


# Clients started and not closed yet; close_all() cleans up after a failed test.
_live: set = set()


def close_all(timeout: float = 5.0) -> None:
    """Close every client still running (best effort)."""
    for c in list(_live):
        try:
            c.close(timeout)
        except Exception:  # noqa: BLE001
            pass


@contextlib.contextmanager
def router_crash_fails_test(router):
    """If the router process dies inside this block, fail the test with its stderr tail (and let the
    fixture's teardown skip the exit-status check, so a strict xfail on a router bug stays an xfail
    instead of a teardown error)."""
    def died() -> bool:
        return router.proc is not None and router.proc.poll() is not None

    def report() -> str:
        tail = "\n".join(router.stderr_text().splitlines()[-40:])
        return f"router {router.router_id} died with status {router.returncode}:\n{tail}"

    try:
        yield
    except BaseException as exc:
        time.sleep(0.2)  # a crash may be what made the clients time out: let the exit land
        if died():
            router.expected_exit_code = None
            raise AssertionError(report()) from exc
        raise
    if died():
        router.expected_exit_code = None
        raise AssertionError(report())


# -- consumer ---------------------------------------------------------------------------------------

OUTCOMES = ("accept", "reject", "release", "modify", "hold")


class Consumer(_Client):
    """A receiver on ``address`` (or a dynamic source).

    ``credit``: credit granted when the link opens.  With ``replenish=True``
    (default) one credit is given back for each message received, so the
    window stays at ``credit``; with ``replenish=False`` the consumer takes at
    most ``credit`` messages until :meth:`add_credit`.

    ``outcome``: what to do with each message: ``"accept"`` (default),
    ``"reject"``, ``"release"``, ``"modify"`` (modified, delivery-failed) or
    ``"hold"`` (leave it unsettled); or a function ``(message, index) ->
    outcome`` where index counts messages received from 0.

    ``count`` is what :meth:`wait` waits for; the consumer keeps receiving
    after that until closed.
    """

    def __init__(self, url: str, address: str | None = None, *, count: int | None = None,
                 credit: int = 10, replenish: bool = True,
                 outcome: str | Callable[[Message, int], str] = "accept",
                 dynamic: bool = False, presettled: bool = False, name: str | None = None,
                 options: list | None = None):
        super().__init__(url, name=name)
        self.options = list(options or ())  # extra proton link options (a Selector, ...)
        if address is None and not dynamic:
            raise ValueError("a consumer needs an address unless dynamic=True")
        if isinstance(outcome, str) and outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES} or a function")
        self.address = address
        self.count = count
        self.credit = credit
        self.replenish = replenish
        self.outcome = outcome
        self.dynamic = dynamic
        self.presettled = presettled
        self.receiver = None  # client thread only
        self._held: list = []  # unsettled deliveries (client thread only)
        # -- observable --
        self.attached = threading.Event()  # the router answered our attach
        self.source_address: str | None = None  # the source address the router attached with
        self.messages: list[Message] = []
        self.settled_by_us: collections.Counter = collections.Counter()  # outcome -> count
        self.presettled_received = 0  # deliveries that arrived already settled
        self.link_credit = 0  # our receiver's credit after the last event

    def _open_links(self, container, conn) -> None:
        opts = ([AtMostOnce()] if self.presettled else []) + self.options or None
        if self.dynamic:
            self.receiver = container.create_receiver(conn, None, dynamic=True, name=f"{self.name}-rx",
                                                      options=opts)
        else:
            self.receiver = container.create_receiver(conn, self.address, name=f"{self.name}-rx",
                                                      options=opts)
        if self.credit:
            self.receiver.flow(self.credit)

    def on_link_opened(self, event) -> None:
        if event.link != self.receiver:
            return
        with self._cond:
            src = event.link.remote_source
            self.source_address = src.address if src is not None else None
            self.link_credit = event.link.credit
            self.attached.set()
            self._cond.notify_all()

    def _ready(self) -> bool:
        # A refused attach is answered by an attach (null source) then a detach with an error.
        return bool(self.link_errors) or (self.attached.is_set() and self.source_address is not None)

    def wait_ready(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.wait_for(self._ready, timeout, "the receiver to attach")

    @property
    def dynamic_address(self) -> str | None:
        return self.source_address if self.dynamic else None

    def on_message(self, event) -> None:
        dlv = event.delivery
        msg = event.message
        with self._cond:
            index = len(self.messages)
            self.messages.append(msg)
        if dlv.settled:
            with self._cond:
                self.presettled_received += 1
        else:
            what = self.outcome(msg, index) if callable(self.outcome) else self.outcome
            self._settle(dlv, what)
        if self.replenish and not event.link.state & event.link.LOCAL_CLOSED:
            event.link.flow(1)
        with self._cond:
            self.link_credit = event.link.credit
            self._cond.notify_all()

    def _settle(self, dlv, what: str) -> None:
        if what == "hold":
            self._held.append(dlv)
        elif what == "accept":
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
        elif what == "reject":
            dlv.update(Delivery.REJECTED)
            dlv.settle()
        elif what == "release":
            dlv.update(Delivery.RELEASED)
            dlv.settle()
        elif what == "modify":
            dlv.local.failed = True
            dlv.update(Delivery.MODIFIED)
            dlv.settle()
        else:
            raise ValueError(f"unknown outcome {what!r}")
        with self._cond:
            self.settled_by_us["held" if what == "hold" else what] += 1

    def on_link_flow(self, event) -> None:
        if event.link == self.receiver:
            with self._cond:
                self.link_credit = event.link.credit
                self._cond.notify_all()

    # -- commands (test thread) --
    def set_outcome(self, outcome: str | Callable[[Message, int], str]) -> None:
        """Change what is done with messages received from now on."""
        self.call(lambda: setattr(self, "outcome", outcome))

    def add_credit(self, n: int) -> None:
        def do():
            self.receiver.flow(n)
            with self._cond:
                self.link_credit = self.receiver.credit
        self.call(do)

    def drain(self) -> None:
        """Ask the router to use up or give back all our credit (drain mode)."""
        def do():
            self.receiver.drain(0)
            with self._cond:
                self.link_credit = self.receiver.credit
        self.call(do)

    def settle_held(self, what: str = "accept") -> None:
        """Settle every held delivery with ``what``."""
        def do():
            held, self._held = self._held, []
            for dlv in held:
                self._settle(dlv, what)
                with self._cond:
                    self.settled_by_us["held"] -= 1
        self.call(do)

    def close_link(self) -> None:
        """Detach (close) the receiving link, leaving held deliveries unsettled; keep the connection."""
        self.call(lambda: self.receiver.close())

    # -- results (test thread) --
    def wait(self, timeout: float = DEFAULT_TIMEOUT, count: int | None = None) -> "Consumer":
        n = self.count if count is None else count
        if n is None:
            raise ValueError("no count to wait for")
        self.wait_for(lambda: len(self.messages) >= n, timeout, f"{n} messages")
        return self

    def received(self) -> int:
        with self._cond:
            return len(self.messages)

    @property
    def ids(self) -> list:
        with self._cond:
            return [m.id for m in self.messages]

    @property
    def bodies(self) -> list:
        with self._cond:
            return [m.body for m in self.messages]

    def describe(self) -> str:
        return (f"received={len(self.messages)} attached={self.attached.is_set()} "
                f"source={self.source_address!r} " + super().describe())


# -- producer ---------------------------------------------------------------------------------------


class Producer(_Client):
    """A sender on ``address``, or an anonymous sender (``address=None``: set ``to`` / ``to_fn``).

    Message ``i`` has ``id=i`` and body ``body_fn(i)`` (default ``"m<i>"``); or
    ``message_fn(i)`` builds the whole message.  The first ``count`` ids are
    queued at start; :meth:`send` queues more (e.g. to resend released ones).
    With ``interval`` > 0 at most one message is sent per interval.

    Results: ``sent``, ``outcomes`` (Counter of accepted / rejected / released /
    modified / none), ``outcome_of`` (id -> list of outcomes, one per send),
    ``rejections`` (id, condition, description), ``credit`` (the sender's
    credit after the last event), ``max_credit`` and ``credit_history``.
    """

    def __init__(self, url: str, address: str | None = None, *, count: int = 0,
                 presettled: bool = False, to: str | None = None,
                 to_fn: Callable[[int], str] | None = None,
                 body_fn: Callable[[int], Any] | None = None,
                 message_fn: Callable[[int], Message] | None = None,
                 interval: float = 0.0, name: str | None = None):
        super().__init__(url, name=name)
        self.address = address
        self.anonymous = address is None
        self.presettled = presettled
        self.to = to
        self.to_fn = to_fn
        self.body_fn = body_fn or (lambda i: f"m{i}")
        self.message_fn = message_fn
        self.interval = interval
        self.sender = None  # client thread only
        self._queue: collections.deque = collections.deque(range(count))
        self._tag_seq = itertools.count(1)
        self._pending: dict = {}  # delivery tag -> id (client thread)
        self._ticking = False
        # -- observable --
        self.attached = threading.Event()
        self.target_address: str | None = None
        self.queued = count  # total ids ever queued
        self.sent = 0
        self.sent_ids: list = []
        self.outcomes: collections.Counter = collections.Counter()
        self.outcome_of: dict = collections.defaultdict(list)
        self.rejections: list[tuple[Any, str | None, str | None]] = []
        self.modified_info: list[tuple[Any, bool, bool]] = []  # (id, delivery_failed, undeliverable_here)
        self.credit = 0
        self.max_credit = 0
        self.credit_history: list[tuple[float, int]] = []

    def _open_links(self, container, conn) -> None:
        opts = [AtMostOnce()] if self.presettled else None
        self.sender = container.create_sender(conn, self.address, name=f"{self.name}-tx", options=opts)

    def on_link_opened(self, event) -> None:
        if event.link != self.sender:
            return
        with self._cond:
            tgt = event.link.remote_target
            self.target_address = tgt.address if tgt is not None else None
            self.attached.set()
            self._cond.notify_all()

    def _ready(self) -> bool:
        if self.link_errors:
            return True
        return self.attached.is_set() and (self.anonymous or self.target_address is not None)

    def wait_ready(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.wait_for(self._ready, timeout, "the sender to attach")

    def _note_credit(self, link) -> None:
        c = link.credit
        with self._cond:
            self.credit = c
            if c > self.max_credit:
                self.max_credit = c
            self.credit_history.append((time.monotonic(), c))
            self._cond.notify_all()

    def on_link_flow(self, event) -> None:
        if event.link == self.sender:
            self._note_credit(event.link)

    def on_sendable(self, event) -> None:
        self._pump()

    def _make(self, i) -> Message:
        if self.message_fn is not None:
            return self.message_fn(i)
        msg = Message(id=i, body=self.body_fn(i))
        if self.anonymous:
            msg.address = self.to_fn(i) if self.to_fn is not None else self.to
        return msg

    def _pump(self) -> None:
        s = self.sender
        if s is None or not (s.state & s.LOCAL_ACTIVE) or not (s.state & s.REMOTE_ACTIVE):
            return
        if self.interval > 0:
            if not self._ticking and self._queue:
                self._ticking = True
                self._tick()
            return
        while s.credit > 0 and self._queue:
            self._send_one(s)
        self._note_credit(s)

    def _tick(self) -> None:
        s = self.sender
        if not self._queue or s.state & s.LOCAL_CLOSED:
            self._ticking = False
            return
        if s.credit > 0:
            self._send_one(s)
            self._note_credit(s)
        self.container.schedule(self.interval, _Call(self._tick))

    def _send_one(self, s) -> None:
        i = self._queue.popleft()
        tag = str(next(self._tag_seq))
        dlv = s.send(self._make(i), tag=tag)
        if not self.presettled:
            self._pending[tag] = i
        with self._cond:
            self.sent += 1
            self.sent_ids.append(i)
            self._cond.notify_all()

    def on_settled(self, event) -> None:
        dlv = event.delivery
        if not dlv.link.is_sender:
            return
        i = self._pending.pop(dlv.tag, None)
        name = outcome_name(dlv.remote_state)
        with self._cond:
            self.outcomes[name] += 1
            self.outcome_of[i].append(name)
            if name == "rejected":
                cond = dlv.remote.condition
                self.rejections.append((i, cond.name if cond else None, cond.description if cond else None))
            elif name == "modified":
                self.modified_info.append((i, bool(dlv.remote.failed), bool(dlv.remote.undeliverable)))
            self._cond.notify_all()

    # -- commands (test thread) --
    def send(self, ids: Iterable) -> None:
        """Queue more message ids to send (sent as credit allows)."""
        ids = list(ids)
        with self._cond:
            self.queued += len(ids)

        def do():
            self._queue.extend(ids)
            self._pump()
        self.call(do)

    def close_link(self) -> None:
        self.call(lambda: self.sender.close())

    # -- results (test thread) --
    def settled_count(self) -> int:
        with self._cond:
            return sum(self.outcomes.values())

    def wait_sent(self, n: int | None = None, timeout: float = DEFAULT_TIMEOUT) -> "Producer":
        n = self.queued if n is None else n
        self.wait_for(lambda: self.sent >= n, timeout, f"{n} messages sent")
        return self

    def wait_settled(self, n: int | None = None, timeout: float = DEFAULT_TIMEOUT) -> "Producer":
        n = self.queued if n is None else n
        self.wait_for(lambda: sum(self.outcomes.values()) >= n, timeout,
                      f"{n} outcomes")
        return self

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> "Producer":
        """Everything queued was sent and (unless pre-settled) settled by the router."""
        self.wait_sent(timeout=timeout)
        if not self.presettled:
            self.wait_settled(timeout=timeout)
        return self

    def ids_with(self, *outcomes: str) -> list:
        """Ids whose latest outcome is one of ``outcomes``."""
        with self._cond:
            return sorted(i for i, lst in self.outcome_of.items() if lst and lst[-1] in outcomes)

    def describe(self) -> str:
        return (f"sent={self.sent}/{self.queued} outcomes={dict(self.outcomes)} credit={self.credit} "
                f"max_credit={self.max_credit} attached={self.attached.is_set()} " + super().describe())


# -- request / reply --------------------------------------------------------------------------------


class Responder(_Client):
    """A service: receives requests on ``address``, accepts them, and answers each to its
    ``reply_to`` through an anonymous sender (``correlation_id`` = request id, body = reply_fn(body))."""

    def __init__(self, url: str, address: str, *, credit: int = 50,
                 reply_fn: Callable[[Any], Any] | None = None, name: str | None = None):
        super().__init__(url, name=name)
        self.address = address
        self.credit = credit
        self.reply_fn = reply_fn or (lambda body: f"reply to {body}")
        self.receiver = None
        self.sender = None
        self._out: collections.deque = collections.deque()
        self.attached_count = 0
        self.requests: list[Message] = []
        self.replies_sent = 0
        self.reply_outcomes: collections.Counter = collections.Counter()

    def describe(self) -> str:
        return (f"requests={len(self.requests)} replies_sent={self.replies_sent} "
                f"reply_outcomes={dict(self.reply_outcomes)} " + super().describe())

    def _open_links(self, container, conn) -> None:
        self.receiver = container.create_receiver(conn, self.address, name=f"{self.name}-rx")
        self.receiver.flow(self.credit)
        self.sender = container.create_sender(conn, None, name=f"{self.name}-tx")

    def on_link_opened(self, event) -> None:
        with self._cond:
            self.attached_count += 1
            self._cond.notify_all()

    def _ready(self) -> bool:
        return bool(self.link_errors) or self.attached_count >= 2

    def on_message(self, event) -> None:
        msg = event.message
        dlv = event.delivery
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        event.link.flow(1)
        with self._cond:
            self.requests.append(msg)
            self._cond.notify_all()
        if msg.reply_to:
            self._out.append(Message(address=msg.reply_to, correlation_id=msg.id,
                                     body=self.reply_fn(msg.body)))
            self._pump()

    def on_sendable(self, event) -> None:
        self._pump()

    def _pump(self) -> None:
        s = self.sender
        while self._out and s.credit > 0:
            s.send(self._out.popleft())
            with self._cond:
                self.replies_sent += 1
                self._cond.notify_all()

    def on_settled(self, event) -> None:
        if event.delivery.link.is_sender:
            with self._cond:
                self.reply_outcomes[outcome_name(event.delivery.remote_state)] += 1
                self._cond.notify_all()


class Requester(_Client):
    """Attaches a dynamic receiver, then sends ``count`` requests (id i, body "<name>:req<i>") through an
    anonymous sender to ``service`` with ``reply_to`` = the dynamic address, and collects replies."""

    def __init__(self, url: str, service: str, *, count: int, name: str | None = None):
        super().__init__(url, name=name)
        self.service = service
        self.count = count
        self.receiver = None
        self.sender = None
        self._next = 0
        self.reply_address: str | None = None
        self.sender_attached = threading.Event()
        self.replies: list[Message] = []
        self.request_outcomes: collections.Counter = collections.Counter()
        self.sent = 0

    def _open_links(self, container, conn) -> None:
        self.receiver = container.create_receiver(conn, None, dynamic=True, name=f"{self.name}-rx")
        self.receiver.flow(self.count)

    def on_link_opened(self, event) -> None:
        link = event.link
        if link == self.receiver:
            with self._cond:
                self.reply_address = link.remote_source.address
                self._cond.notify_all()
            # Only now do we know where replies go: open the request sender.
            self.sender = event.container.create_sender(event.connection, None, name=f"{self.name}-tx")
        elif link == self.sender:
            with self._cond:
                self.sender_attached.set()
                self._cond.notify_all()

    def _ready(self) -> bool:
        return bool(self.link_errors) or self.sender_attached.is_set()

    def on_sendable(self, event) -> None:
        s = self.sender
        if event.link != s:
            return
        while s.credit > 0 and self._next < self.count:
            i = self._next
            self._next += 1
            s.send(Message(id=i, address=self.service, reply_to=self.reply_address,
                           body=f"{self.name}:req{i}"))
            with self._cond:
                self.sent += 1
                self._cond.notify_all()

    def on_message(self, event) -> None:
        dlv = event.delivery
        dlv.update(Delivery.ACCEPTED)
        dlv.settle()
        with self._cond:
            self.replies.append(event.message)
            self._cond.notify_all()

    def on_settled(self, event) -> None:
        if event.delivery.link.is_sender:
            with self._cond:
                self.request_outcomes[outcome_name(event.delivery.remote_state)] += 1
                self._cond.notify_all()

    def describe(self) -> str:
        return (f"sent={self.sent}/{self.count} replies={len(self.replies)} "
                f"request_outcomes={dict(self.request_outcomes)} reply_address={self.reply_address!r} "
                + super().describe())

    def wait(self, timeout: float = DEFAULT_TIMEOUT) -> "Requester":
        self.wait_for(lambda: len(self.replies) >= self.count
                      and sum(self.request_outcomes.values()) >= self.count,
                      timeout, f"{self.count} replies and request outcomes")
        return self


# -- raw sockets ------------------------------------------------------------------------------------


class RawSocket:
    """A plain TCP connection to the router, for sending it bytes no AMQP client would."""

    def __init__(self, url_or_host: str, port: int | None = None, *, timeout: float = 5.0):
        if port is None:
            hostport = url_or_host.split("://", 1)[-1].split("/", 1)[0]
            host, _, p = hostport.rpartition(":")
            url_or_host, port = host, int(p)
        self.sock = socket.create_connection((url_or_host, port), timeout=timeout)
        self.received = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exactly(self, n: int, timeout: float = 5.0) -> bytes:
        """Read until at least ``n`` bytes arrived in total (returns all received so far)."""
        deadline = time.monotonic() + timeout
        while len(self.received) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            self.received += chunk
        return self.received

    def read_until_closed(self, timeout: float = 5.0) -> str:
        """Read (keeping the bytes in ``received``) until the router closes the connection.

        Returns ``"eof"`` (orderly close), ``"reset"`` (RST) or ``"timeout"`` (still open)."""
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return "timeout"
            except ConnectionResetError:
                return "reset"
            if not chunk:
                return "eof"
            self.received += chunk

    def close(self) -> None:
        self.sock.close()

    def abort(self) -> None:
        """Close with an RST (SO_LINGER 0) instead of a FIN."""
        import struct
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "RawSocket":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- a consumer in its own process ------------------------------------------------------------------


def _hold_consumer_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="clients hold-consumer")
    ap.add_argument("url")
    ap.add_argument("address")
    ap.add_argument("--credit", type=int, required=True)
    ap.add_argument("--accept", type=int, default=0, help="accept the first K messages, hold the rest")
    args = ap.parse_args(argv)
    k = args.accept
    c = Consumer(args.url, args.address, credit=args.credit, replenish=False,
                 outcome=lambda m, i: "accept" if i < k else "hold")
    c.start()
    print("attached", flush=True)
    seen = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the test kills us
        c.wait_for(lambda: len(c.messages) > seen, 60, "a message")
        new = c.messages[seen:]  # the client thread may append meanwhile: count what was printed
        for m in new:
            print(f"received {m.id}", flush=True)
        seen += len(new)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "hold-consumer":
        return _hold_consumer_main(argv[1:])
    print("usage: python -m tests.system.clients hold-consumer URL ADDRESS --credit N [--accept K]",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
