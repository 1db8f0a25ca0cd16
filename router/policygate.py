"""The owner of a policed connection's incoming links: checks each message against the connection's vhost
policy (router/policy.py), then hands it to the forwarder.

Links of connections without a policy are owned by the forwarder directly, so policy costs nothing where it
is not configured. Two checks, as Dispatch makes them (``src/router_node.c`` AMQP_rx_handler,
``src/policy.c`` qd_policy_approve_message_target):

* a message on an anonymous sender's link goes only to a ``to`` the group's targets allow;
* unless the group has ``allowUserIdProxy``, a message whose ``user-id`` (AMQP 1.0 §3.2.4) is not the
  connection's user is refused: a client must not send in another user's name.

A refused message is rejected with ``amqp:unauthorized-access`` and counted (vhostStats); the link stays.
Link-routed links of a policed connection are checked the same way by the link router (router/linkroutes.py
asks :meth:`PolicyGate.refusal`).
"""

from __future__ import annotations

from wire.codec import CodecError, message_to, properties_fields
from router.policy import MESSAGE_DISALLOWED, UNAUTHORIZED_ACCESS, ConnectionPolicy

#: Distinct ``to`` addresses whose verdict is remembered per connection (anonymous senders repeat a
#: handful); past this the memo starts again, so a client cycling addresses cannot grow it.
TARGET_MEMO_MAX = 1024


class PolicyGate:
    """wire.assembly.LinkOwner for the incoming links of one policed connection."""

    def __init__(self, forwarder, policy: ConnectionPolicy):
        self.forwarder = forwarder
        self.policy = policy
        self.check_user_id = not policy.group.allowUserIdProxy
        self.user_id = policy.user.encode()
        self._targets: dict[str, bool] = {}

    def refusal(self, msg: bytes, anonymous: bool) -> str | None:
        """Why this message may not go on (the description), or None. ``anonymous``: it came on an
        anonymous sender's link, so its ``to`` must be one of the targets."""
        try:
            if self.check_user_id:
                user_id = properties_fields(msg, 2)[1]
                if user_id is not None and bytes(user_id) != self.user_id:
                    return f"{MESSAGE_DISALLOWED}: user-id is not the connection's user (allowUserIdProxy)"
            if anonymous:
                to = message_to(msg)
                allowed = self._targets.get(to) if to is not None else False
                if allowed is None:
                    if len(self._targets) >= TARGET_MEMO_MAX:
                        self._targets.clear()
                    allowed = self._targets[to] = self.policy.targets.allows(to)
                if not allowed:
                    return f"{MESSAGE_DISALLOWED}: target {to!r} is not allowed"
        except (CodecError, TypeError, ValueError):
            return None  # malformed: the forwarder answers it with amqp:decode-error
        return None

    # -- wire.assembly.LinkOwner -----------------------------------------------------------------
    def on_message(self, engine, rl, d, msg: bytes | None) -> None:
        if msg is not None:
            why = self.refusal(msg, rl.address is None)
            if why is not None:
                self.policy.message_denied()
                self.forwarder.refuse_arrival(rl, d, msg, UNAUTHORIZED_ACCESS, why)
                return
        self.forwarder.on_message(engine, rl, d, msg)

    def on_partial(self, engine, rl, d, held: int) -> int:
        return self.forwarder.on_partial(engine, rl, d, held)

    def on_delivery_update(self, engine, rl, d) -> None:
        self.forwarder.on_delivery_update(engine, rl, d)

    def on_link_flow(self, engine, rl) -> None:
        self.forwarder.on_link_flow(engine, rl)

    def on_oversized(self, engine, rl, d, limit: int) -> None:
        self.policy.oversized()
        self.forwarder.on_oversized(engine, rl, d, limit)
