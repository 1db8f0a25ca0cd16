"""Sans-IO reconnect schedule with the semantics of ActiveMQ Classic's static discovery agent.

A network connector (``static:(uri,...)?initialReconnectDelay=...``) keeps one bridge per URI and, when
the bridge's connection fails, waits and tries again. ActiveMQ does this in
``org.apache.activemq.transport.discovery.simple.SimpleDiscoveryAgent`` (activemq-client), method
``serviceFailed``; this class reproduces its arithmetic, fed with times instead of sleeping:

* A failure counts as a *connect failure* when it comes within ``minConnectTime`` of the connection
  (a connection attempt that fails, or a connection lost soon after it was made). Then the failure count
  goes up; when ``maxReconnectAttempts > 0`` and the count reaches it, reconnecting stops (the code's
  ``connectFailures >= maxReconnectAttempts``: the value counts every failed attempt, the first
  included). Otherwise the delay is ``initialReconnectDelay`` for the first connect failure (and for every
  one when ``useExponentialBackOff`` is false), else the previous delay times ``backOffMultiplier``,
  capped at ``maxReconnectDelay``.
* A connection lost *later* than ``minConnectTime`` after it was made is not a connect failure: the count
  goes back to 0 and the delay to ``initialReconnectDelay``, which is the delay before the next attempt.
  As in the code, the delay is *reset to the initial value*, not forgotten, so a connect failure right
  after that waits initial × multiplier (ActiveMQ only starts from scratch for a new discovery event;
  here :meth:`ReconnectSchedule.reset` does that).

Code defaults (SimpleDiscoveryAgent fields), which this project follows where the web pages differ: the
ActiveMQ "Static Transport Reference" page gives ``initialReconnectDelay`` 10 ms and ``minConnectTime``
500 ms; the code has 1000 ms and 5000 ms (the "Networks of Brokers" page also says 1000 ms).
``maxReconnectDelay`` 30000 ms, ``useExponentialBackOff`` true, ``backOffMultiplier`` 2,
``maxReconnectAttempts`` 0 (unlimited). With the defaults a peer that stays down is retried after
1, 2, 4, 8, 16, 30, 30, ... seconds.

One difference, on purpose: ActiveMQ measures ``minConnectTime`` from the moment it *starts* an attempt
(it cannot tell when the bridge is up); this schedule measures it from :meth:`ReconnectSchedule.connected`,
called when the connection is actually established, and treats any failure with no ``connected`` since
the last failure as a failed attempt. So a connect attempt that takes longer than ``minConnectTime`` to
time out still backs off, where ActiveMQ would retry it after the initial delay.
"""

from __future__ import annotations

__all__ = ["ReconnectSchedule"]

# SimpleDiscoveryAgent's code defaults (see the module docstring).
DEFAULT_INITIAL_RECONNECT_DELAY_MS = 1000
DEFAULT_MAX_RECONNECT_DELAY_MS = 30000
DEFAULT_BACKOFF_MULTIPLIER = 2.0
DEFAULT_MIN_CONNECT_TIME_MS = 5000


class ReconnectSchedule:
    """When to try a connection again after it failed (times and delays in milliseconds; no clock of its
    own: the caller passes ``now_ms``). Call :meth:`connected` when a connection is established and
    :meth:`failed` when an attempt fails or a connection is lost; ``failed`` answers the delay before the
    next attempt, or None when the attempts are used up."""

    __slots__ = ("initial_ms", "max_ms", "exponential", "multiplier", "max_attempts", "min_connect_time_ms",
                 "_failures", "_delay", "_connected_at", "_given_up")

    def __init__(self, initial_ms: float = DEFAULT_INITIAL_RECONNECT_DELAY_MS,
                 max_ms: float = DEFAULT_MAX_RECONNECT_DELAY_MS, exponential: bool = True,
                 multiplier: float = DEFAULT_BACKOFF_MULTIPLIER, max_attempts: int = 0,
                 min_connect_time_ms: float = DEFAULT_MIN_CONNECT_TIME_MS):
        if initial_ms < 0 or max_ms < 0 or min_connect_time_ms < 0:
            raise ValueError("reconnect delays and minConnectTime must not be negative")
        if multiplier <= 0:
            raise ValueError(f"backOffMultiplier must be positive, not {multiplier}")
        if max_attempts < 0:
            raise ValueError(f"maxReconnectAttempts must be 0 (unlimited) or more, not {max_attempts}")
        self.initial_ms = initial_ms
        self.max_ms = max_ms
        self.exponential = bool(exponential)
        self.multiplier = multiplier
        self.max_attempts = int(max_attempts)
        self.min_connect_time_ms = min_connect_time_ms
        self.reset()

    @classmethod
    def from_settings(cls, s) -> ReconnectSchedule:
        """A schedule from an object with the attributes ``initial_reconnect_delay_ms``,
        ``max_reconnect_delay_ms``, ``use_exponential_backoff``, ``backoff_multiplier``,
        ``max_reconnect_attempts`` and ``min_connect_time_ms`` (a network connector's parsed URI options)."""
        return cls(initial_ms=s.initial_reconnect_delay_ms, max_ms=s.max_reconnect_delay_ms,
                   exponential=s.use_exponential_backoff, multiplier=s.backoff_multiplier,
                   max_attempts=s.max_reconnect_attempts, min_connect_time_ms=s.min_connect_time_ms)

    def reset(self) -> None:
        """Forget all history: the next failure is a first failure (a peer discovered anew)."""
        self._failures = 0
        self._delay = None          # ActiveMQ's reconnectDelay == -1: no delay used yet
        self._connected_at = None
        self._given_up = False

    @property
    def attempts(self) -> int:
        """Connect failures in a row (0 after a connection that lasted, or after :meth:`reset`)."""
        return self._failures

    @property
    def given_up(self) -> bool:
        """True once :meth:`failed` has answered None (until :meth:`reset`)."""
        return self._given_up

    def connected(self, now_ms: float) -> None:
        """A connection was established at ``now_ms``."""
        self._connected_at = now_ms

    def failed(self, now_ms: float) -> int | None:
        """An attempt failed, or the connection was lost, at ``now_ms``: the delay in ms before the next
        attempt, or None to give up (``max_attempts`` connect failures in a row)."""
        if self._given_up:
            return None
        connected_at = self._connected_at
        self._connected_at = None
        if connected_at is not None and now_ms - connected_at >= self.min_connect_time_ms:
            # The connection lasted: not a connect failure (SimpleDiscoveryAgent's "failure occurred too
            # long after the discovery event" branch).
            self._failures = 0
            self._delay = self.initial_ms
            return self._as_ms(self._delay)
        self._failures += 1
        if self.max_attempts > 0 and self._failures >= self.max_attempts:
            self._given_up = True
            return None
        if not self.exponential or self._delay is None:
            self._delay = self.initial_ms
        else:
            self._delay = min(self._delay * self.multiplier, self.max_ms)
        return self._as_ms(self._delay)

    @staticmethod
    def _as_ms(delay: float) -> int:
        return int(round(delay))

    def __repr__(self):
        return (f"ReconnectSchedule(initial_ms={self.initial_ms}, max_ms={self.max_ms}, "
                f"exponential={self.exponential}, multiplier={self.multiplier}, "
                f"max_attempts={self.max_attempts}, min_connect_time_ms={self.min_connect_time_ms}; "
                f"attempts={self._failures}, delay={self._delay})")
