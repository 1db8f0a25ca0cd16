"""Shared helpers for the router unit tests: configuration entities and a broker-like container's answers.

Several test modules (auto-links, link routes, inter-router, management) build link-route and auto-link
entities and let a proton peer play the broker the router attaches to; the helpers live here so no test
module imports another.
"""

from __future__ import annotations

import proton
from proton import Endpoint


class AutoLinkEntity(dict):
    """A parsed ``autoLink`` / ``linkRoute`` configuration entity: a dict whose ``get`` defaults like the
    config loader's entities do."""

    def get(self, key, default=None):
        return dict.get(self, key, default)


def open_sessions(peer) -> None:
    """The container begins the sessions the router began (the router's auto-links share one)."""
    ssn = peer.connection.session_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
    while ssn:
        ssn.open()
        ssn = ssn.next(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)


def broker_answers(broker, *, refuse: str | None = None) -> list:
    """The container opens (or refuses) the links the router attached, mirroring the termini."""
    open_sessions(broker)
    links = []
    link = broker.connection.link_head(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
    while link:
        nxt = link.next(Endpoint.LOCAL_UNINIT | Endpoint.REMOTE_ACTIVE)
        if refuse:
            link.condition = proton.Condition(refuse, "refused by the broker")
            link.open()
            link.close()
        else:
            link.source.copy(link.remote_source)
            link.target.copy(link.remote_target)
            link.open()
            broker.links[link.name] = link
            if link.is_receiver:
                broker._track(link)
        links.append(link)
        link = nxt
    return links
