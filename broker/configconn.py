"""``<broker-connections>``: Artemis' AMQP broker connections (``<amqp-connection>`` and its ``<peer>``,
``<sender>``, ``<receiver>``, ``<mirror>`` and ``<federation>`` children), parsed and validated for
:mod:`broker.config`.

Facts: Artemis user manual, "AMQP Broker Connections" (amqp-broker-connections.adoc) and
``artemis-configuration.xsd`` (``amqp-connectionUriType``, ``amqp-mirror-type``); the reference for users
is ``docs/broker-configuration.md``.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from wire.sasl import is_loopback

from . import xmlschema as xs
from .configmodel import BrokerConnection, BrokerConnectionElement, check_wildcard_words
from .credentials import Credentials, CredentialsError
from .security import redacted_uri, uri_tls
from .xmlschema import BrokerConfigError, Ctx, children, unknown_element

__all__ = ["parse_broker_connections"]

def parse_broker_connections(ctx: Ctx, parent, credentials: Credentials) -> list[BrokerConnection]:
    out: list[BrokerConnection] = []
    names: dict[str, int] = {}
    for name, el in children(ctx, parent):
        if name != "amqp-connection":
            raise unknown_element(ctx, el, "broker-connections", ["amqp-connection"])
        ctx.check_attrs(el, xs.AMQP_CONNECTION_ATTRS)
        uri = ctx.attr(el, "uri", required=True)
        cname = ctx.attr(el, "name", required=True)
        if cname in names:
            raise ctx.error(el, f"duplicate amqp-connection name {cname!r} (first at line {names[cname]})")
        names[cname] = el.line
        first, _, rest = uri.partition("#")
        host, port, params = xs.parse_tcp_uri(ctx, el, first, "amqp-connection uri")
        tls = [uri_tls(ctx, el, f"amqp-connection {cname!r}", params, server=False)]
        alternates = [u.strip() for u in rest.split(",") if u.strip()]
        for alt in alternates:
            tls.append(uri_tls(ctx, el, f"amqp-connection {cname!r} alternate uri",
                                xs.parse_tcp_uri(ctx, el, alt, "amqp-connection alternate uri")[2], server=False))
        login = _login(ctx, el, credentials, f"amqp-connection {cname!r}")
        if el.attrib.get("user") and tls[0] is None and not is_loopback(host):
            ctx.warn(el, f"amqp-connection {cname!r} logs in as {el.attrib['user']!r} without TLS to {host}: a peer "
                         "that offers only PLAIN gets the password in clear; add sslEnabled=true to the uri")
        retry = ctx.attr(el, "retry-interval", "long", xs.DEFAULT_RETRY_INTERVAL_MS)
        if retry < 0:
            raise ctx.error(el, f"<amqp-connection> retry-interval must be >= 0 ms, got {retry}")
        attempts = ctx.attr(el, "reconnect-attempts", "int", xs.DEFAULT_RECONNECT_ATTEMPTS)
        if attempts < -1:
            raise ctx.error(el, f"<amqp-connection> reconnect-attempts must be -1 (forever) or >= 0, got {attempts}")
        conn = BrokerConnection(
            name=cname, uri=redacted_uri(uri), host=host, port=port, user=login.user, password=login.password,
            password_source=login.source, retry_interval_ms=retry, reconnect_attempts=attempts,
            auto_start=ctx.attr(el, "auto-start", "bool", xs.DEFAULT_AUTO_START),
            elements=_parse_connection_elements(ctx, el),
            line=el.line, params=params, alternate_uris=[redacted_uri(u) for u in alternates], tls=tls)
        _warn_sender_receiver_loop(ctx, el, conn)
        out.append(conn)
    return out


def _login(ctx: Ctx, el, credentials: Credentials, what: str):
    """``user`` (with ``password``, or with the password from the credentials store: broker/credentials.py)
    is enforced: the connection logs in with SASL SCRAM or PLAIN. The password never appears in a message."""
    try:
        return credentials.resolve(ctx.attr(el, "user"), ctx.attr(el, "password"), line=el.line, what=what,
                                   warn=lambda message: ctx.warn(el, message))
    except CredentialsError as exc:
        raise BrokerConfigError(exc.path, exc.line, exc.message) from None


def _parse_connection_elements(ctx: Ctx, conn_el) -> list[BrokerConnectionElement]:
    elements = []
    mirror_line = None
    for kind, child in children(ctx, conn_el):
        if kind == "mirror":
            # One mirror per connection: Artemis keeps one mirror controller (one store-and-forward queue
            # named after the connection) per broker connection.
            if mirror_line is not None:
                raise ctx.error(child, f"a second <mirror> in this <amqp-connection> (the first is at line "
                                       f"{mirror_line}); one connection mirrors to one replica: write another "
                                       "<amqp-connection> for another replica")
            mirror_line = child.line
        elements.append(_parse_connection_element(ctx, kind, child))
    return elements


def _parse_connection_element(ctx: Ctx, kind: str, el) -> BrokerConnectionElement:
    if kind in ("peer", "sender", "receiver"):
        ctx.check_attrs(el, xs.MATCH_ELEMENT_ATTRS)
        am, qn = ctx.attr(el, "address-match"), ctx.attr(el, "queue-name")
        if not am and not qn:
            raise ctx.error(el, f"<{kind}> needs address-match=\"...\" or queue-name=\"...\"")
        if am and qn:
            ctx.warn(el, f"<{kind}> has both queue-name and address-match; queue-name is used")
        if am:
            check_wildcard_words(ctx, el, f"<{kind}> address-match", am)
        for child in el:
            if isinstance(child.tag, str):
                raise unknown_element(ctx, child, kind, [])
        return BrokerConnectionElement(kind, am or None, qn or None, {}, el.line)
    if kind == "mirror":
        return _parse_mirror(ctx, el)
    if kind == "federation":
        ctx.warn(el, "<federation> is stored but not implemented yet (later); it has no effect")
        attrs = dict(el.attrib)
        attrs["xml"] = ET.tostring(el, encoding="unicode")
        return BrokerConnectionElement("federation", None, None, attrs, el.line)
    if kind == "bridge":
        raise ctx.error(el, "<bridge> in <amqp-connection> is not supported by tdbroker")
    raise unknown_element(ctx, el, "amqp-connection", xs.AMQP_CONNECTION_CHILDREN)


def _warn_sender_receiver_loop(ctx: Ctx, el, conn: BrokerConnection) -> None:
    """Artemis' docs warn that a sender and a receiver for one destination loop forever."""
    def key(e):
        return (e.address_match, e.queue_name)
    senders = {key(e) for e in conn.elements if e.kind == "sender"}
    for e in conn.elements:
        if e.kind == "receiver" and key(e) in senders:
            target = e.queue_name or e.address_match
            ctx.warn(e, f"<sender> and <receiver> for the same destination {target!r} on "
                        f"connection {conn.name!r} will loop messages forever")


def _parse_mirror(ctx: Ctx, el) -> BrokerConnectionElement:
    """``<mirror>`` with every attribute of :data:`broker.xmlschema.MIRROR_ATTRS` filled in (defaults for
    those absent); ``<property>`` children are refused. broker/mirror.py acts on it."""
    ctx.check_attrs(el, xs.MIRROR_ATTRS)
    attrs = {name: ctx.attr(el, name, vkind, default) for name, (vkind, default) in xs.MIRROR_ATTRS.items()}
    if attrs["sync"]:
        raise ctx.error(el, '<mirror sync="true"> is not implemented (a client\'s send or acknowledgement would '
                            'wait until the replica confirms it); mirroring is asynchronous: write sync="false" or '
                            'remove the attribute')
    if attrs["source-mirror-address"] is not None and not attrs["source-mirror-address"].strip():
        raise ctx.error(el, '<mirror> source-mirror-address="" must not be empty: name the address, or remove '
                            "the attribute to use the store-and-forward queue's name")
    if attrs["address-filter"] is not None:
        try:
            # The parser mirroring applies (broker/mirror.py), so start-up refuses what it could not apply.
            # Imported here: broker.mirror imports the broker's core, which must not need the config parser.
            from .mirror import address_filter

            address_filter(attrs["address-filter"])
        except ValueError as exc:
            raise ctx.error(el, f"<mirror> {exc}: write address prefixes separated by commas, '!prefix' to "
                                "leave one out") from None
    for pname, pel in children(ctx, el):
        if pname != "property":
            raise unknown_element(ctx, pel, "mirror", ["property"])
        # Artemis hands <property> entries to its mirror controller's plug-ins; tdbroker has none, and a
        # setting that does nothing must not be accepted.
        raise ctx.error(pel, "<property> in <mirror> is not supported (tdbroker's mirror takes no properties); "
                             "remove it")
    attrs["properties"] = {}
    return BrokerConnectionElement("mirror", None, None, attrs, el.line)

