"""A federation stream's connection checks: Artemis' ``call-timeout``, ``call-failover-timeout``,
``check-period`` and ``ha``, in AMQP terms.

Artemis' federation talks to the upstream with blocking calls (create a queue, create a consumer), each
waiting at most ``call-timeout`` ms (30000) for its answer, or ``call-failover-timeout`` ms (-1: forever)
while the client is failing over; it pings every ``check-period`` ms (30000). Here a stream's "calls" are
what it asked of the remote broker and has had no answer to yet:

* the connection itself: our OPEN (and the SASL exchange before it) until the peer's OPEN arrives;
* each link we attached (a federation queue's receiver, the downstream's command sender) until the
  peer's ATTACH comes back (AMQP 1.0 §2.6.3);
* the downstream's command message until the remote broker settles it (accepted or rejected).

A call unanswered for longer than the limit ends the connection (close with ``amqp:connection:forced``
naming the call) and the stream's dial loop dials again on its retry schedule -- Artemis' caller gets
``ActiveMQConnectionTimedOutException`` and the federation reconnects. ``call-failover-timeout`` is the
limit on a connection made to a broker learned through ``ha`` (below), ``call-timeout`` on every other.

``check-period``: every so many ms the stream sends an empty frame (AMQP 1.0 §2.4.5) when it has sent
nothing else since the last check, so the remote broker (and anything on the path that drops quiet TCP
connections) sees it alive whatever idle time-out the remote asks for. Detecting a silent remote is
``connection-ttl``'s job: the idle time-out we ask for in our OPEN (broker/fedruntime.py).

``ha``: Artemis' HA locator learns the live broker's backups from the cluster topology and fails over to
them. A tdbroker announces the brokers it can be replaced by in its OPEN's ``failover-server-list`` (the
AMQP failover extension; broker/network.py: the other brokers of its network). With ``ha`` true the
stream adds those brokers to the list it dials, after its own connectors; without, it ignores them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import proton
import trio

from broker.netconfig import NetworkTarget

log = logging.getLogger("broker.federation")

#: The longest the supervisor sleeps between two looks at a stream's connection: a call-timeout is
#: noticed at most this late (plus a quarter of the timeout itself).
SUPERVISE_STEP_MAX_MS = 1000
#: Clock readings are floats: a period that ends "now" may read a hair short of it.
CLOCK_SLACK_MS = 0.5
#: How long a timed-out connection waits for the peer's close before its socket is dropped.
CLOSE_GRACE_SECONDS = 1.0
#: The AMQP condition a timed-out call closes the connection with (AMQP 1.0 §2.8.16).
CALL_TIMEOUT_CONDITION = "amqp:connection:forced"
FAILOVER_SERVER_LIST = "failover-server-list"


class CallWatch:
    """Sans-IO: since when each outstanding call has been waiting; the oldest one's name and age."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}

    def observe(self, now_ms: float, pending: Iterable[str]) -> tuple[str, float] | None:
        """Record what is outstanding at ``now_ms``; answered calls are forgotten. Returns the oldest
        outstanding call and how long it has waited, or None."""
        pending = set(pending)
        for name in [n for n in self.since if n not in pending]:
            del self.since[name]
        for name in pending:
            self.since.setdefault(name, now_ms)
        if not self.since:
            return None
        oldest = min(self.since, key=self.since.__getitem__)
        return oldest, now_ms - self.since[oldest]


def pending_calls(engine) -> list[str]:
    """What ``engine``'s peer has not answered: its OPEN, the attaches of links we opened."""
    if not engine.opened_at_remote:
        return ["open"]
    out = []
    mask = proton.Endpoint.LOCAL_ACTIVE | proton.Endpoint.REMOTE_UNINIT
    link = engine.connection.link_head(mask)
    while link is not None:
        out.append(f"attach of link {link.name}")
        link = link.next(mask)
    return out


def learned_targets(props: dict, current: NetworkTarget, own_urls: Iterable[str]) -> list[NetworkTarget]:
    """The brokers of a peer's ``failover-server-list`` (OPEN properties, string keys) as dial targets,
    leaving out ourselves and the broker dialled. An ``amqps`` entry is dialled with the TLS settings of
    the connection it was learned on, and left out when that one was plain (there is nothing to check its
    certificate against)."""
    listed = props.get(FAILOVER_SERVER_LIST)
    if not isinstance(listed, list):
        return []
    own = set()
    for url in own_urls:
        _, _, rest = url.partition("://")
        host, _, port = rest.rpartition(":")
        if port.isdigit():
            own.add((host, int(port)))
    out = []
    for entry in listed:
        if not isinstance(entry, dict):
            continue
        entry = {str(k): v for k, v in entry.items()}
        host = entry.get("network-host") or entry.get("hostname")
        port = entry.get("port")
        if not isinstance(host, str) or not isinstance(port, int) or isinstance(port, bool):
            continue
        if (host, port) in own or (host, port) == (current.host, current.port):
            continue
        if entry.get("scheme") == "amqps":
            if current.tls is None:
                continue
            out.append(NetworkTarget("tcp", host, port, current.tls))
        else:
            out.append(NetworkTarget("tcp", host, port, None))
    return out


class StreamChecks:
    """One stream's call-timeout and check-period, watching the connection its dial loop makes
    (see the module docstring). ``calls`` adds the owner's own outstanding calls (the downstream's
    command); ``limit_ms`` gives the call limit of the connection now dialled (-1: none)."""

    def __init__(self, label: str, stream, *, calls=lambda: (), limit_ms=None):
        self.label = label
        self.stream = stream
        self.calls = calls
        self.limit_ms = limit_ms or (lambda: stream.call_timeout_ms)
        self.heartbeats = 0
        self.timeouts = 0

    def step_ms(self) -> float:
        s = self.stream
        candidates = [SUPERVISE_STEP_MAX_MS]
        if s.check_period_ms > 0:
            candidates.append(s.check_period_ms)
        for limit in (s.call_timeout_ms, s.call_failover_timeout_ms):
            if limit > 0:
                candidates.append(max(1, limit / 4))
        return min(candidates)

    async def run(self, ctl, scope: trio.CancelScope) -> None:
        """Until the attempt ends: ping every check-period, and end the connection when a call has
        waited longer than the limit (``scope`` is the attempt's: cancelling it drops the socket)."""
        watch = CallWatch()
        check = self.stream.check_period_ms
        last_ping = trio.current_time() * 1000.0
        step = self.step_ms() / 1000.0
        while True:
            await trio.sleep(step)
            engine = ctl.dialled
            if engine is None or engine.finished or engine.closing:
                continue
            now = trio.current_time() * 1000.0
            if check > 0 and now - last_ping >= check - CLOCK_SLACK_MS:
                last_ping = now
                engine.send_heartbeat()
                self.heartbeats += 1
            limit = self.limit_ms()
            oldest = watch.observe(now, [*pending_calls(engine), *self.calls()])
            if oldest is None or limit <= 0 or oldest[1] < limit:
                continue
            call, waited = oldest
            self.timeouts += 1
            text = f"call-timeout: {call} unanswered after {waited:.0f} ms (limit {limit} ms)"
            log.warning("federation %s: %s; reconnecting", self.label, text)
            ctl.note_error(text)
            engine.close(CALL_TIMEOUT_CONDITION, text)
            with trio.move_on_after(CLOSE_GRACE_SECONDS):
                while not engine.finished:
                    await trio.sleep(0.02)
            scope.cancel()
            return
