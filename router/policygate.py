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

from wire.codec import CodecError, message_user_and_to
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
        # What needs no check goes straight to the forwarder (bound methods: no extra call per event).
        self.on_partial = forwarder.on_partial
        self.on_chunk = forwarder.on_chunk  # a streamed message's head is checked by router/streams.py
        self.on_delivery_update = forwarder.on_delivery_update
        self.on_link_flow = forwarder.on_link_flow

    def refusal(self, msg: bytes, anonymous: bool) -> str | None:
        """Why this message may not go on (the description), or None. ``anonymous``: it came on an
        anonymous sender's link, so its ``to`` must be one of the targets."""
        try:
            user_id, to = message_user_and_to(msg, anonymous)
        except CodecError:
            return None  # malformed: the forwarder answers it with amqp:decode-error
        if user_id is not None and self.check_user_id and user_id != self.user_id:
            return f"{MESSAGE_DISALLOWED}: user-id is not the connection's user (allowUserIdProxy)"
        if anonymous:
            allowed = self._targets.get(to) if to is not None else False
            if allowed is None:
                if len(self._targets) >= TARGET_MEMO_MAX:
                    self._targets.clear()
                allowed = self._targets[to] = self.policy.targets.allows(to)
            if not allowed:
                return f"{MESSAGE_DISALLOWED}: target {to!r} is not allowed"
        return None

    # -- wire.assembly.LinkOwner (on_partial, on_delivery_update, on_link_flow: the forwarder's) --------
    def on_message(self, engine, rl, d, msg: bytes | None) -> None:
        anonymous = rl.address is None
        if msg is not None and (self.check_user_id or anonymous):
            why = self.refusal(msg, anonymous)
            if why is not None:
                self.policy.message_denied()
                self.forwarder.refuse_arrival(rl, d, msg, UNAUTHORIZED_ACCESS, why)
                return
        self.forwarder.on_message(engine, rl, d, msg)

    def on_oversized(self, engine, rl, d, limit: int) -> None:
        self.policy.oversized()
        self.forwarder.on_oversized(engine, rl, d, limit)
