"""A ``<downstream>``'s command, both ends (docs/federation-protocol.md "Downstream: the command").

The downstream sends one message on ``$td.federation.control``: which federation and stream, where to dial
back, and the address policies (with their transformers). :func:`command_body` builds it; on the remote
broker :class:`ControlOwner` takes it off the control link, :func:`parse_command` checks it (it comes from
the network: every field typed and bounded) and :meth:`broker.federation.FederationPart.command` makes the
upstream. The answer is the delivery's outcome: accepted, or rejected with ``amqp:invalid-field`` and why.
"""

from __future__ import annotations

import logging

import proton

from wire import raw
from wire.assembly import KEEP

log = logging.getLogger("broker.federation")

#: Longest text field of a command (names, host): a bound on what a peer can make us keep.
MAX_FIELD = 255


class CommandedFederation:
    """The federation of an upstream a downstream's command made: its name and the transformers the command
    named."""

    def __init__(self, name: str):
        self.name = name
        self.transformers: dict = {}


class ControlOwner:
    """Wire's owner of a control link: each message is a downstream's command (accepted or rejected)."""

    def __init__(self, part):
        self.part = part  # broker.federation.FederationPart

    def on_message(self, engine, bl, d, payload) -> None:
        why = "empty command"
        if payload is not None:
            try:
                m = proton.Message()
                m.decode(payload)
                body = m.body
                why = self.part.command(engine, {str(k): v for k, v in body.items()}) if isinstance(body, dict) \
                    else "the command's body must be a map"
            except Exception as exc:  # noqa: BLE001 - a bad command is refused, never the connection's end
                why = f"bad federation command: {exc}"
        if why is None:
            raw.delivery_update(d, raw.ACCEPTED)
        else:
            log.warning("federation command refused: %s", why)
            raw.set_rejected(d, "amqp:invalid-field", why[:200])
        raw.delivery_settle(d)
        raw.link_flow(bl.ptr, 1)
        engine.wake()

    def on_partial(self, engine, bl, d, held: int) -> int:
        return KEEP

    def on_delivery_update(self, engine, bl, d) -> None:
        pass

    def on_link_flow(self, engine, bl) -> None:
        pass

    def on_oversized(self, engine, bl, d, limit: int) -> None:
        pass


def parse_command(body: dict):
    """``(federation, stream, address policies, host, port)`` from a command; ValueError when malformed or
    when a transformer it names cannot be loaded here."""
    from broker.fedconfig import AddressPolicy, Stream

    fed = CommandedFederation(_text(body, "federation"))
    stream_name = _text(body, "upstream")
    host = _text(body, "host")
    port = body.get("port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise ValueError("port must be 1..65535")
    policies = []
    for raw_policy in body.get("address-policies") or []:
        d = {str(k): v for k, v in raw_policy.items()}
        transformer_ref = None
        if isinstance(d.get("transformer"), dict):
            from broker.transformers import TransformerConfig, load_transformer

            t = {str(k): v for k, v in d["transformer"].items()}
            props = t.get("properties") if isinstance(t.get("properties"), dict) else {}
            tcfg = TransformerConfig(name=_text(t, "name"), class_name=_text(t, "class-name"),
                                     properties={str(k): str(v) for k, v in props.items()})
            load_transformer(tcfg)  # the class must load here too: refused otherwise
            fed.transformers[tcfg.name] = tcfg
            transformer_ref = tcfg.name
        policies.append(AddressPolicy(
            name=_text(d, "name"), max_hops=_int(d.get("max-hops"), 0),
            auto_delete=d.get("auto-delete") if isinstance(d.get("auto-delete"), bool) else None,
            auto_delete_delay_ms=_int(d.get("auto-delete-delay"), None),
            auto_delete_message_count=_int(d.get("auto-delete-message-count"), None),
            enable_divert_bindings=d.get("enable-divert-bindings") is True,
            includes=[str(x) for x in d.get("includes") or []],
            excludes=[str(x) for x in d.get("excludes") or []], transformer_ref=transformer_ref))
    user = body.get("user") if isinstance(body.get("user"), str) else None
    password = body.get("password") if isinstance(body.get("password"), str) else None
    stream = Stream(kind="upstream", name=stream_name, user=user, password=password)
    return fed, stream, policies, host, port


def command_body(federation, stream, address_policies: list, host: str, port: int) -> dict:
    """The command a ``<downstream>`` sends: federate these addresses from me (host:port)."""
    return {"federation": federation.name, "upstream": stream.name, "host": host, "port": port,
            **({"user": stream.user, "password": stream.password} if stream.user else {}),
            "address-policies": [{
                **_transformer_entry(federation, p),
                "name": p.name, "max-hops": p.max_hops, "enable-divert-bindings": p.enable_divert_bindings,
                "includes": list(p.includes), "excludes": list(p.excludes),
                **({"auto-delete": p.auto_delete} if p.auto_delete is not None else {}),
                **({"auto-delete-delay": p.auto_delete_delay_ms} if p.auto_delete_delay_ms is not None else {}),
                **({"auto-delete-message-count": p.auto_delete_message_count}
                   if p.auto_delete_message_count is not None else {})} for p in address_policies]}


def _transformer_entry(federation, policy) -> dict:
    """A policy's transformer in a command: its class and properties (the remote broker loads the same
    class, as Artemis sends the transformer configuration with the policies)."""
    ref = getattr(policy, "transformer_ref", None)
    cfg = getattr(federation, "transformers", {}).get(ref) if ref else None
    if cfg is None:
        return {}
    return {"transformer": {"name": cfg.name, "class-name": cfg.class_name,
                            "properties": {str(k): str(v) for k, v in cfg.properties.items()}}}


def _text(d: dict, key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_FIELD:
        raise ValueError(f"{key} must be a non-empty string of at most {MAX_FIELD} characters")
    return value


def _int(value, default):
    return value if isinstance(value, int) and not isinstance(value, bool) else default


__all__ = ["CommandedFederation", "ControlOwner", "command_body", "parse_command"]
