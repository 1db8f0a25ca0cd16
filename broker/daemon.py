"""``tdbroker -c broker.xml``: a store-and-forward AMQP broker speaking the Artemis configuration.

Start-up contract: one stdout line per bound acceptor, ``tdbroker: listening on HOST:PORT (acceptor
NAME)``, then ``tdbroker: ready``. A bad configuration exits with status 2 and ``FILE:LINE: message`` on
stderr. SIGINT/SIGTERM close every connection with a close frame, sync the journal and exit 0.
"""

from __future__ import annotations

import logging
import signal
import sys

import click
import trio

from broker.config import BrokerConfig, BrokerConfigError, load_broker_config
from broker.connections import run_broker_connection
from broker.server import Broker
from wire.driver import serve_listener, shut_down_on_signal

log = logging.getLogger("broker.daemon")

SHUTDOWN_GRACE_SECONDS = 3.0
DEFAULT_CONFIG = "broker.xml"


async def run_broker(cfg: BrokerConfig, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    broker = Broker(cfg)
    broker.open_journal()
    try:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            await _serve(broker, cfg, signals, task_status)
    finally:
        broker.close_journal()


async def _serve(broker: Broker, cfg: BrokerConfig, signals, task_status) -> None:
    async with trio.open_nursery() as nursery:
        if broker.committer is not None:
            await nursery.start(broker.committer.run)
            nursery.start_soon(broker.durability_loop)
        nursery.start_soon(broker.expiry_loop)
        for acc in cfg.acceptors:
            settings = broker.connection_settings(name=acc.name)
            try:
                listeners = await nursery.start(
                    serve_listener, acc.host, acc.port,
                    lambda remote, s=settings: broker.new_engine(s, server=True, remote_host=remote),
                )
            except OSError as exc:
                raise SystemExit(f"{cfg.path}:{acc.line}: acceptor {acc.name}: cannot listen on "
                                 f"{acc.host}:{acc.port}: {exc}")
            for lst in listeners:
                h, p = lst.socket.getsockname()[:2]
                print(f"tdbroker: listening on {h}:{p} (acceptor {acc.name})", flush=True)
        for conn in cfg.broker_connections:
            if conn.auto_start:
                nursery.start_soon(run_broker_connection, broker, conn)
        print("tdbroker: ready", flush=True)
        task_status.started(broker)
        await shut_down_on_signal(signals, broker.close_all, lambda: bool(broker.connections),
                                  SHUTDOWN_GRACE_SECONDS)
        # Acknowledgements of the last moments ride one final sync (Journal.close syncs the buffer).
        nursery.cancel_scope.cancel()


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-c", "--config", "config_path", default=DEFAULT_CONFIG, show_default=True,
              help="Artemis-style broker.xml.")
@click.option("-v", "--verbose", is_flag=True, help="Log debug messages.")
def main(config_path: str, verbose: bool) -> None:
    """tdbroker: a store-and-forward AMQP 1.0 broker that peers with trio-dispatch routers."""
    try:
        cfg = load_broker_config(config_path)
    except BrokerConfigError as exc:
        click.echo(str(exc), err=True)
        sys.exit(2)
    except OSError as exc:
        click.echo(f"{config_path}: {exc.strerror or exc}", err=True)
        sys.exit(2)
    logging.basicConfig(stream=sys.stderr, level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for w in cfg.warnings:
        click.echo(w, err=True)
    try:
        trio.run(run_broker, cfg)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
