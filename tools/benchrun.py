"""Running one tdbench load: connections, links, the stall watchdog, and the two load shapes.

:func:`run_via_peer` runs S senders and R receivers through a router (or broker); :func:`run_direct` runs
the same load sender-to-receiver with no router. Both drive the per-message machinery of
:mod:`tools.benchclient` on Trio, in this one thread.
"""

from __future__ import annotations

import logging
import os

import proton
import trio

from tools.benchclient import (
    CLIENT_MAX_FRAME, BenchHandler, LoadRun, MessageTemplate, Receiver, Sender,
)
from tools.benchprocs import RssSampler
from wire import raw
from wire.connection import ConnectionSettings, EngineConnection
from wire.driver import open_stream, run_connection, serve_listener
from wire.flowrecords import FlowRecorder

# Receivers' credit window and how much credit they hand back at a time.
RECEIVER_CREDIT = 1000
RECEIVER_CREDIT_BATCH = 250
# A load with no progress for this long is stuck: stop and report it.
STALL_SECONDS = 10.0
# How long the connections get to exchange close frames at the end of a run.
CLOSE_SECONDS = 3.0


def client_settings(name: str, **sasl) -> ConnectionSettings:
    """``sasl``: the SASL login keywords of ConnectionSettings (tools.security.Security.settings_kwargs)."""
    return ConnectionSettings(container_id=name, offered_capabilities=(), max_frame_size=CLIENT_MAX_FRAME, **sasl)


def attach_sender(engine: EngineConnection, name: str, address: str, presettled: bool):
    ssn = engine.connection.session()
    ssn.open()
    snd = ssn.sender(name)
    snd.target.address = address
    snd.snd_settle_mode = proton.Link.SND_SETTLED if presettled else proton.Link.SND_UNSETTLED
    snd.open()
    return snd


def attach_receiver(engine: EngineConnection, name: str, address: str, presettled: bool, credit: int):
    ssn = engine.connection.session()
    ssn.open()
    rcv = ssn.receiver(name)
    rcv.source.address = address
    # The settle mode we ask for is what the router's outgoing link uses.
    rcv.snd_settle_mode = proton.Link.SND_SETTLED if presettled else proton.Link.SND_UNSETTLED
    rcv.open()
    raw.link_flow(raw.pointer(rcv), credit)
    return rcv


def split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


async def _watch(run: LoadRun, deadline: float, stall_seconds: float = STALL_SECONDS) -> None:
    """Stop a run that stalls (no progress for ``stall_seconds``) or reaches the overall deadline."""
    last = run.progress()
    last_change = trio.current_time()
    while not run.done.is_set():
        with trio.move_on_at(min(deadline, trio.current_time() + 0.25)):
            await run.done.wait()
        now = trio.current_time()
        if run.done.is_set():
            return
        if now >= deadline:
            run.errors.append("duration limit reached before the run completed")
            run.done.set()
            return
        p = run.progress()
        if p != last:
            last, last_change = p, now
        elif now - last_change >= stall_seconds:
            run.errors.append(f"no progress for {stall_seconds:.0f} s (sent {run.sent}, received "
                              f"{run.received}, outcomes {run.settled_out})")
            run.done.set()
            return


class ClientConnections:
    """The client connections of one run and how many of their driver tasks are still running.
    ``security`` (tools.security.Security): TLS and SASL login for every connection, or None."""

    def __init__(self, security=None):
        self.engines: list[EngineConnection] = []
        self.running = 0
        self.tls = security.client_tls() if security is not None else None
        self.sasl = security.settings_kwargs() if security is not None else {}

    async def open(self, host: str, port: int, handler: BenchHandler, name: str, nursery) -> EngineConnection:
        stream = await open_stream(host, port, self.tls)
        engine = EngineConnection(handler, client_settings(name, **self.sasl), server=False,
                                  remote_host=f"{host}:{port}")
        self.adopt(stream, engine, nursery)
        return engine

    def adopt(self, stream, engine: EngineConnection, nursery) -> None:
        """Drive ``engine`` over an already connected ``stream`` as one of these connections."""
        self.engines.append(engine)
        self.running += 1
        nursery.start_soon(self._drive, stream, engine)

    async def _drive(self, stream, engine: EngineConnection) -> None:
        try:
            await run_connection(stream, engine)
        finally:
            self.running -= 1

    async def finish(self, nursery) -> None:
        """Close every connection with a close frame, let the close handshakes complete, then stop.

        wire's driver aborts the transport once the close frames are exchanged, which proton reports as a
        "connection aborted" transport error on both ends; at this point that is noise, not news.
        """
        conn_log = logging.getLogger("wire.connection")
        conn_log.addFilter(_quiet_close)
        try:
            for e in self.engines:
                e.close()
            with trio.move_on_after(CLOSE_SECONDS):
                while self.running:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        finally:
            conn_log.removeFilter(_quiet_close)


def _quiet_close(record: logging.LogRecord) -> bool:
    return "transport error" not in record.getMessage()


async def run_via_peer(host: str, port: int, *, senders: int, receivers: int, messages: int, size: int,
                       presettled: bool, window: int, address: str, warmup: int, deadline: float,
                       router_pid: int | None = None, durable: bool = False,
                       source_address: str | None = None, rx_host: str | None = None,
                       rx_port: int | None = None, records: str | None = None, security=None,
                       stall_seconds: float = STALL_SECONDS) -> dict:
    """S senders and R receivers on separate connections to a router (or broker) at host:port, one
    address (``source_address``, when given, is the receivers' address: RabbitMQ names one queue
    differently for its senders and receivers). ``rx_host``/``rx_port``: the receivers attach to another
    router of a mesh (the inter-router hops bench); ``router_pid`` may then be a list of pids.
    ``records``: write client flow records (sent, received, settled) into this directory; every message
    then gets its own message-id (slower: a comparison run, not a throughput figure). ``security``: a
    tools.security.Security for TLS and SASL on every connection. ``stall_seconds``: how long the run may
    show no progress before it is stopped (a huge message may sit in a router for a while)."""
    run = LoadRun(messages, warmup, size, presettled, router_pid)
    sampler = RssSampler(router_pid) if router_pid else None
    pid = os.getpid()
    if records:
        run.recorder = FlowRecorder(records, f"tdbench-{pid}")
    handler = BenchHandler(run)
    conns = ClientConnections(security)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, run, deadline, stall_seconds)
        if sampler is not None:
            nursery.start_soon(sampler.run)
        if run.recorder is not None:
            nursery.start_soon(run.recorder.run)
        try:
            # Receivers first, so the address has a destination when the senders attach.
            for i in range(receivers):
                e = await conns.open(rx_host or host, rx_port or port, handler, f"tdbench-{pid}-rx{i}", nursery)
                rcv = attach_receiver(e, f"tdbench-rx{i}", source_address or address, presettled, RECEIVER_CREDIT)
                handler.rx[raw.pointer(rcv)] = Receiver(raw.pointer(rcv), rcv, RECEIVER_CREDIT_BATCH, address)
                e.wake()
            if not run.warmup:  # a run too short for a warm-up (one message) is measured from here
                run.mark_start()
            for i, count in enumerate(split(messages, senders)):
                e = await conns.open(host, port, handler, f"tdbench-{pid}-tx{i}", nursery)
                snd = attach_sender(e, f"tdbench-tx{i}", address, presettled)
                template = MessageTemplate(size, durable=durable,
                                           id_prefix=f"tdbench-{pid}-{i}-" if records else None)
                sender = handler.tx[raw.pointer(snd)] = Sender(snd, e, run, count, window, template)
                sender.address = address
                e.wake()
        except OSError as exc:
            run.errors.append(f"cannot connect to {host}:{port}: {exc}")
            run.done.set()
        await run.done.wait()
        await conns.finish(nursery)
        nursery.cancel_scope.cancel()  # the recorder's task: it writes what is left as it stops
    if run.recorder is not None:
        run.recorder.close()
    result = run.result()
    if sampler is not None:
        result.update(sampler.result())
    return result


async def run_direct(*, senders: int, messages: int, size: int, presettled: bool, window: int, address: str,
                     warmup: int, deadline: float) -> dict:
    """The same load with no router: the receiving end listens on 127.0.0.1 and the senders connect to it.

    Each sender's link gets its own receiving end (so the receiver count is the sender count here).
    """
    run = LoadRun(messages, warmup, size, presettled)
    template = MessageTemplate(size)
    server_handler = BenchHandler(run, accept_links=True)
    client_handler = BenchHandler(run)
    server_settings = ConnectionSettings(container_id=f"tdbench-{os.getpid()}-direct", offered_capabilities=(),
                                         max_frame_size=CLIENT_MAX_FRAME)
    server_engines: list[EngineConnection] = []

    def make_engine(remote: str) -> EngineConnection:
        e = EngineConnection(server_handler, server_settings, server=True, remote_host=remote)
        server_engines.append(e)
        return e

    conns = ClientConnections()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(serve_listener, "127.0.0.1", 0, make_engine)
        port = listeners[0].socket.getsockname()[1]
        nursery.start_soon(_watch, run, deadline)
        try:
            if not run.warmup:
                run.mark_start()
            for i, count in enumerate(split(messages, senders)):
                e = await conns.open("127.0.0.1", port, client_handler, f"tdbench-{os.getpid()}-dtx{i}", nursery)
                snd = attach_sender(e, f"tdbench-tx{i}", address, presettled)
                client_handler.tx[raw.pointer(snd)] = Sender(snd, e, run, count, window, template)
                e.wake()
        except OSError as exc:
            run.errors.append(f"cannot connect to the receiving end on 127.0.0.1:{port}: {exc}")
            run.done.set()
        await run.done.wait()
        await conns.finish(nursery)
    return run.result()
