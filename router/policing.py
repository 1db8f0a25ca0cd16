"""Part ``policing`` of the :class:`router.core.Router`: the vhost policy (router/policy.py) applied to
engines -- a connection's OPEN approved or refused, its group's limits put into the OPEN and its sessions,
each attach checked, the owner of its incoming links set to a :class:`router.policygate.PolicyGate`.

The router calls it only while ``policy { enableVhostPolicy: true }``; connections without a policy never
reach it after their OPEN.
"""

from __future__ import annotations

import dataclasses
import logging

from wire import raw
from wire.terminus import FALLBACK_CAPABILITY, capabilities, waypoint_ordinal
from router.policy import (MAX_LINKS_DEFAULT, POLICED_ROLES, RESOURCE_LIMIT_EXCEEDED, SESSION_DISALLOWED,
                           ConnectionPolicy, Denial, Policy)
from router.policygate import PolicyGate

log = logging.getLogger("router.policy")


class Policing:
    """Applies one router's Policy to its engines; ``forwarder`` is what a PolicyGate hands messages on to."""

    def __init__(self, policy: Policy, forwarder):
        self.policy = policy
        self.forwarder = forwarder

    def connection_opened(self, engine) -> bool:
        """The peer's OPEN arrived: False when the connection was refused (and is being closed)."""
        if not engine.server:
            return True   # connections the router makes are not policed
        if engine.settings.role in POLICED_ROLES:
            return self._admit(engine)
        if engine.settings.policy_vhost:
            return self._admit_router(engine)
        return True

    @staticmethod
    def connection_closed(rc) -> None:
        """The connection no longer counts against its vhost."""
        for admitted in (rc.policy, rc.admission):
            if admitted is not None:
                admitted.release()

    def _verdict(self, engine) -> ConnectionPolicy | Denial:
        return self.policy.open_connection(
            hostname=engine.connection.remote_hostname, user=engine.user, remote=engine.remote_host,
            listener_vhost=engine.settings.policy_vhost)

    def _admit(self, engine) -> bool:
        """Approve a normal or route-container connection (and give it its group's limits) or close it
        with the policy's condition."""
        verdict = self._verdict(engine)
        if isinstance(verdict, Denial):
            engine.close(verdict.condition, verdict.description)
            return False
        rc = engine.app
        rc.policy = verdict
        rc.gate = PolicyGate(self.forwarder, verdict)
        group = verdict.group
        # Our OPEN is written when output is next taken, so the group's frame size and channel-max
        # (sessions) still make it into the frame (AMQP 1.0 §2.7.1).
        t = engine.transport
        t.max_frame_size = min(t.max_frame_size or group.maxFrameSize, group.maxFrameSize)
        t.channel_max = min(t.channel_max, group.maxSessions - 1)
        limits = [n for n in (engine.settings.max_message_size, verdict.max_message_size) if n]
        if limits and min(limits) != engine.settings.max_message_size:
            engine.settings = dataclasses.replace(engine.settings, max_message_size=min(limits))
        return True

    def _admit_router(self, engine) -> bool:
        """An inter-router or edge listener with a policyVhost (a tdrouterd extension): only the users,
        remote hosts and connection counts its vhost allows may join the mesh. The links of router
        protocol are not policed."""
        verdict = self._verdict(engine)
        if isinstance(verdict, Denial):
            log.warning("connection %d from %s: %s connection refused: %s (listener %s, policyVhost %s)",
                        engine.id, engine.remote_host, engine.settings.role, verdict.reason,
                        engine.settings.name, engine.settings.policy_vhost)
            engine.close(verdict.condition, verdict.description)
            return False
        engine.app.admission = verdict
        return True

    @staticmethod
    def session_refusal(engine, session) -> tuple[str, str] | None:
        """A session begun on a policed connection: its window, or its end past maxSessions."""
        cp = engine.app.policy if engine.app is not None else None
        if cp is None:
            return None
        if raw.count_sessions(engine.connection) >= cp.group.maxSessions:
            cp.session_refused()
            return RESOURCE_LIMIT_EXCEEDED, f"{SESSION_DISALLOWED}: maxSessions {cp.group.maxSessions} reached"
        raw.session_set_incoming_capacity(session, cp.group.maxSessionWindow)
        return None

    @staticmethod
    def link_refused(engine, link, lo, cp: ConnectionPolicy) -> bool:
        """Refuse (and return True) an attach the connection's vhost policy does not allow."""
        client_sends = not lo.is_sender
        terminus = lo.remote_target if client_sends else lo.remote_source
        limit = cp.group.maxSenders if client_sends else cp.group.maxReceivers
        # Counted only under a limit: walking the connection's links is then worth it.
        open_links = raw.count_links(engine.connection, senders=lo.is_sender) if limit < MAX_LINKS_DEFAULT else 0
        refusal = cp.link_refusal(
            client_sends=client_sends, address=terminus.address or None, dynamic=terminus.dynamic,
            waypoint=waypoint_ordinal(terminus) is not None,
            fallback=FALLBACK_CAPABILITY in capabilities(terminus.capabilities), open_links=open_links)
        if refusal is None:
            return False
        engine.refuse_link(link, *refusal)
        engine.wake()
        return True
