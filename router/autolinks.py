"""Auto-links: links the router itself attaches to a container (a broker) for an address phase.

As in Qpid Dispatch 1.19 (src/router_core/route_control.c; the autoLink entity of qdrouter.json), an
``autoLink {address, direction, phase, connection | containerId, externalAddress}`` attaches, on every
open connection that matches (by listener/connector ``name`` or by the peer's container id: every
connection a named listener accepts), a link to ``externalAddress`` (or ``address``) on the container:

* ``direction: out`` — the router sends: the link is a destination for ``M<phase><address>``
  (default phase 0), so producers get credit once it is attached;
* ``direction: in`` — the router receives: the link produces into ``M<phase><address>`` (default
  phase 1) and gets credit only while that phase has a consumer, as any producer does.

A link the container refuses or detaches is retried, first after ``RETRY_FIRST_SECONDS`` and then every
``RETRY_SECONDS`` (route_control.c's AUTO_LINK_FIRST_RETRY_INTERVAL and AUTO_LINK_RETRY_INTERVAL: 2 s and
5 s), while its connection stays open; each connection's link on its own. Sans-IO: time comes in
through :meth:`AutoLinkManager.tick`. Management adds and removes auto-links while the router runs
(:meth:`AutoLinkManager.add`, ``remove``); a removed auto-link's links are detached with no error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import proton

from wire import raw
from router.links import RouterConnection, RouterLink

log = logging.getLogger("router.autolinks")

RETRY_FIRST_SECONDS = 2.0
RETRY_SECONDS = 5.0

INACTIVE = "inactive"
ATTACHING = "attaching"
FAILED = "failed"
ACTIVE = "active"


@dataclass(eq=False)
class Attachment:
    """An auto-link's link on one connection it matches, and that link's retry schedule."""

    rc: RouterConnection
    link: RouterLink | None = None
    retry_at: float | None = None
    failures: int = 0


@dataclass(eq=False)
class AutoLink:
    """One configured auto-link and its links: one on every open connection it matches (a listener
    accepts many; Qpid Dispatch 1.19 route_control.c activates an auto-link on each connection of its
    connection identifier). ``oper_status`` and ``last_error`` tell what happened last on any of them,
    and :attr:`link` is the link attached last, as Dispatch's autoLink entity shows one ``linkRef``."""

    name: str
    address: str
    direction: str  # "in" | "out"
    phase: int
    connection: str | None = None
    container_id: str | None = None
    external_address: str | None = None
    oper_status: str = INACTIVE
    last_error: str | None = None
    attachments: dict = field(default_factory=dict)  # RouterConnection -> Attachment

    @classmethod
    def from_entity(cls, entity, index: int) -> "AutoLink":
        direction = entity["direction"]
        phase = entity.get("phase")
        return cls(
            name=entity.get("name") or f"autoLink/{index}",
            address=entity["address"],
            direction=direction,
            phase=(0 if direction == "out" else 1) if phase is None else int(phase),
            connection=entity.get("connection"),
            container_id=entity.get("containerId"),
            external_address=entity.get("externalAddress"),
        )

    def matches(self, rc: RouterConnection) -> bool:
        """A connection of the named listener/connector, or one whose peer has the container id (either,
        when both are given, as Dispatch's route_control.c matches them)."""
        return (self.connection is not None and rc.name == self.connection) or \
            (self.container_id is not None and rc.engine.remote_container == self.container_id)

    @property
    def link(self) -> RouterLink | None:
        """The link attached last (management's ``linkRef``), None while none is attached."""
        links = [a.link for a in self.attachments.values() if a.link is not None]
        return links[-1] if links else None

    def attachment_of(self, rl: RouterLink) -> Attachment | None:
        """The attachment whose link ``rl`` is (None for a link this auto-link no longer keeps)."""
        att = self.attachments.get(rl.conn)
        return att if att is not None and att.link is rl else None


class AutoLinkManager:
    """Keeps every auto-link attached on every connection that matches it."""

    def __init__(self, router, entities=()):
        self.router = router
        self.auto_links = [AutoLink.from_entity(e, i) for i, e in enumerate(entities)]
        self._clock = router.clock
        self._sessions: dict = {}  # RouterConnection -> the session auto-links use on it

    def connection_opened(self, rc: RouterConnection) -> None:
        for al in self.auto_links:
            if rc not in al.attachments and al.matches(rc):
                self.attach(al, rc)

    def connection_closed(self, rc: RouterConnection) -> None:
        self._sessions.pop(rc, None)
        for al in self.auto_links:
            if al.attachments.pop(rc, None) is not None:
                if not any(a.link is not None for a in al.attachments.values()):
                    al.oper_status = INACTIVE

    def link_opened(self, rl: RouterLink) -> None:
        """The container answered our attach. A null terminus means it refused (a detach follows)."""
        al = rl.auto_link
        if al is None or al.attachment_of(rl) is None:
            return
        lo = proton.Link.wrap(rl.ptr)
        terminus = lo.remote_target if al.direction == "out" else lo.remote_source
        if terminus.type == proton.Terminus.UNSPECIFIED:
            return
        al.attachments[rl.conn].failures = 0
        al.oper_status = ACTIVE
        al.last_error = None
        self.router.bind_auto_link(rl)

    def link_closed(self, rl: RouterLink, error: str | None, condition: str | None = None) -> None:
        """The container detached the auto-link's link: ``error`` is what lastError shows (the
        description, as Dispatch shows it: "Node not found"), ``condition`` goes in the log line."""
        al = rl.auto_link
        att = al.attachment_of(rl) if al is not None else None
        if att is None:
            return
        att.link = None
        att.failures += 1
        al.oper_status = FAILED
        al.last_error = error or "detached by the container"
        att.retry_at = self._clock() + (RETRY_FIRST_SECONDS if att.failures == 1 else RETRY_SECONDS)
        log.warning("autoLink %s (%s %s) on connection %d: %s%s; retrying in %.0f s", al.name, al.direction,
                    al.address, att.rc.engine.id,
                    f"{condition}: " if condition and condition != al.last_error else "", al.last_error,
                    att.retry_at - self._clock())

    def tick(self, now: float) -> None:
        for al in self.auto_links:
            for att in list(al.attachments.values()):
                if att.retry_at is not None and now >= att.retry_at and att.link is None:
                    att.retry_at = None
                    self.attach(al, att.rc)

    # -- management: auto-links added and removed while the router runs ------------------------------
    def add(self, al: AutoLink) -> None:
        """Keep a new auto-link attached from now on: at once on every open connection that matches it.
        ValueError when the name is taken."""
        if any(other.name == al.name for other in self.auto_links):
            raise ValueError(f"an auto-link named '{al.name}' exists")
        self.auto_links.append(al)
        for rc in sorted(self.router.connections, key=lambda c: c.engine.id):
            if rc.engine.remote_container is not None and al.matches(rc):
                self.attach(al, rc)

    def remove(self, name: str) -> AutoLink:
        """Forget the auto-link ``name`` and detach its links. KeyError when there is none.

        The detach carries no error, as Dispatch's (route_control.c deactivates a deleted auto-link with
        no condition): the auto-link was taken away, nothing failed. What the container had not settled
        of an ``out`` link goes back to its producers."""
        al = next((a for a in self.auto_links if a.name == name), None)
        if al is None:
            raise KeyError(name)
        self.auto_links.remove(al)  # first, so that the detaches below are not retried
        for att in al.attachments.values():
            if att.link is not None:
                self._detach(att.link)
        al.attachments.clear()
        al.oper_status = INACTIVE
        return al

    def _detach(self, rl: RouterLink) -> None:
        """Take ``rl`` out of routing and detach it with no error."""
        rl.conn.links.pop(rl.ptr, None)
        self.router.unbind_link(rl)
        lo = raw.link_object(rl.ptr)
        if not lo.state & proton.Endpoint.LOCAL_CLOSED:
            lo.close()
        rl.engine.wake()

    def attach(self, al: AutoLink, rc: RouterConnection) -> None:
        """Attach ``al``'s link on ``rc`` (a connection it matches)."""
        att = al.attachments.get(rc)
        if att is None:
            att = al.attachments[rc] = Attachment(rc)
        al.oper_status = ATTACHING
        engine = rc.engine
        session = self._sessions.get(rc)
        if session is None:
            session = self._sessions[rc] = engine.connection.session()
            session.open()
        remote = al.external_address or al.address
        name = f"{self.router.id}.{al.name}"
        if al.direction == "out":
            lo = session.sender(name)
            lo.target.address = remote
            lo.source.address = al.address
        else:
            lo = session.receiver(name)
            lo.source.address = remote
            lo.target.address = al.address
        lo.open()
        att.link = self.router.register_auto_link(rc, raw.pointer(lo), al)
        engine.wake()
