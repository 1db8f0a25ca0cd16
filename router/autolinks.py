"""Auto-links: links the router itself attaches to a container (a broker) for an address phase.

As in Qpid Dispatch 1.19 (src/router_core/route_control.c; the autoLink entity of qdrouter.json), an
``autoLink {address, direction, phase, connection | containerId, externalAddress}`` attaches, on every
open connection that matches (by listener/connector ``name`` or by the peer's container id), a link to
``externalAddress`` (or ``address``) on the container:

* ``direction: out`` — the router sends: the link is a destination for ``M<phase><address>``
  (default phase 0), so producers get credit once it is attached;
* ``direction: in`` — the router receives: the link produces into ``M<phase><address>`` (default
  phase 1) and gets credit only while that phase has a consumer, as any producer does.

A link the container refuses or detaches is retried, first after ``RETRY_FIRST_SECONDS`` and then every
``RETRY_SECONDS`` (route_control.c's AUTO_LINK_FIRST_RETRY_INTERVAL and AUTO_LINK_RETRY_INTERVAL: 2 s and
5 s), while its connection stays open. Sans-IO: time comes in through :meth:`AutoLinkManager.tick`.
Management adds and removes auto-links while the router runs (:meth:`AutoLinkManager.add`, ``remove``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

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
class AutoLink:
    """One configured auto-link and its state on the connection it is attached to."""

    name: str
    address: str
    direction: str  # "in" | "out"
    phase: int
    connection: str | None = None
    container_id: str | None = None
    external_address: str | None = None
    oper_status: str = INACTIVE
    last_error: str | None = None
    link: RouterLink | None = None
    rc: RouterConnection | None = None
    retry_at: float | None = None
    failures: int = 0

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


class AutoLinkManager:
    """Keeps every auto-link attached on the connections that match it."""

    def __init__(self, router, entities=()):
        self.router = router
        self.auto_links = [AutoLink.from_entity(e, i) for i, e in enumerate(entities)]
        self._clock = router.clock
        self._sessions: dict = {}  # RouterConnection -> the session auto-links use on it

    def connection_opened(self, rc: RouterConnection) -> None:
        for al in self.auto_links:
            if al.rc is None and al.matches(rc):
                self.attach(al, rc)

    def connection_closed(self, rc: RouterConnection) -> None:
        self._sessions.pop(rc, None)
        for al in self.auto_links:
            if al.rc is rc:
                al.rc = al.link = None
                al.oper_status = INACTIVE
                al.retry_at = None

    def link_opened(self, rl: RouterLink) -> None:
        """The container answered our attach. A null terminus means it refused (a detach follows)."""
        al = self._owner(rl)
        if al is None:
            return
        lo = proton.Link.wrap(rl.ptr)
        terminus = lo.remote_target if al.direction == "out" else lo.remote_source
        if terminus.type == proton.Terminus.UNSPECIFIED:
            return
        al.oper_status = ACTIVE
        al.failures = 0
        al.last_error = None
        self.router.bind_auto_link(rl)

    def link_closed(self, rl: RouterLink, error: str | None, condition: str | None = None) -> None:
        """The container detached the auto-link's link: ``error`` is what lastError shows (the
        description, as Dispatch shows it: "Node not found"), ``condition`` goes in the log line."""
        al = self._owner(rl)
        if al is None:
            return
        al.link = None
        al.failures += 1
        al.oper_status = FAILED
        al.last_error = error or "detached by the container"
        al.retry_at = self._clock() + (RETRY_FIRST_SECONDS if al.failures == 1 else RETRY_SECONDS)
        log.warning("autoLink %s (%s %s): %s%s; retrying in %.0f s", al.name, al.direction, al.address,
                    f"{condition}: " if condition and condition != al.last_error else "", al.last_error,
                    al.retry_at - self._clock())

    def tick(self, now: float) -> None:
        for al in self.auto_links:
            if al.retry_at is not None and now >= al.retry_at and al.rc is not None and al.link is None:
                al.retry_at = None
                self.attach(al, al.rc)

    def _owner(self, rl: RouterLink) -> AutoLink | None:
        for al in self.auto_links:
            if al.link is rl:
                return al
        return None

    # -- management: auto-links added and removed while the router runs ------------------------------
    def add(self, al: AutoLink) -> None:
        """Keep a new auto-link attached from now on: at once on the first open connection that matches
        it. ValueError when the name is taken."""
        if any(other.name == al.name for other in self.auto_links):
            raise ValueError(f"an auto-link named '{al.name}' exists")
        self.auto_links.append(al)
        for rc in sorted(self.router.connections, key=lambda c: c.engine.id):
            if rc.engine.remote_container is not None and al.matches(rc):
                self.attach(al, rc)
                break

    def remove(self, name: str) -> AutoLink:
        """Forget the auto-link ``name`` and detach its link. KeyError when there is none."""
        al = next((a for a in self.auto_links if a.name == name), None)
        if al is None:
            raise KeyError(name)
        self.auto_links.remove(al)  # first, so that the detach below is not retried
        if al.link is not None:
            self.router.close_link(al.link, "amqp:link:detach-forced", "autoLink deleted")
        al.link = al.rc = None
        al.oper_status = INACTIVE
        return al

    def attach(self, al: AutoLink, rc: RouterConnection) -> None:
        """Attach ``al``'s link on ``rc`` (a connection it matches)."""
        al.rc = rc
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
        al.link = self.router.register_auto_link(rc, raw.pointer(lo), al)
        engine.wake()
