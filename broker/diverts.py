"""Artemis diverts: ``<diverts><divert name>`` in broker.xml, parsed, checked and applied when a message is
routed to an address (ActiveMQ Artemis user manual, "Diverting and Splitting Message Flows",
``docs/user-manual/diverts.adoc``; ``DivertImpl.java`` and ``BindingsImpl.java`` in artemis-server).

A divert watches ``<address>`` (an Artemis wildcard is allowed: a divert bound to ``news.#`` sees what is
sent to ``news.europe``, as any binding on a wildcard address does) and sends what it selects on to
``<forwarding-address>`` (a comma-separated list makes a *composite* divert, one copy per address):

* ``<exclusive>`` (default ``false``): an exclusive divert takes the message away from its address; a
  non-exclusive one sends a copy and the message also goes to the address's own queues. An address's
  exclusive diverts are looked at first; when one of them takes the message, none of the non-exclusive
  ones does (every matching exclusive divert gets it, as in ``BindingsImpl.routeToExclusiveBindings``).
* ``<filter string="...">``: a JMS selector; only messages it selects are diverted (others go on as if
  there were no divert).
* ``<routing-type>`` (default ``STRIP``): the routing type the copy is routed with at the forwarding
  address. ``ANYCAST``: one of its anycast queues; ``MULTICAST``: every multicast queue; ``STRIP`` (no
  routing type): one anycast queue and every multicast queue; ``PASS``: the original's routing type
  (anycast when it was sent on a link bound to a queue, multicast when sent to a multicast address).
* ``<routing-name>``: non-exclusive diverts of an address sharing a routing name are one group: each
  message goes through one of them, in turn (Artemis' bindings of one routing name). Without it every
  divert is its own group.
* ``<transformer-class-name>`` / ``<transformer>``: a Python class (:mod:`broker.transformers`) that
  rewrites each diverted copy; every divert of an address sees the original message, not another
  divert's transformed copy.

The diverted copy is a new message, as Artemis makes it (``DivertImpl.route``): its address (AMQP
``properties.to``) is set to the forwarding address and the original address, message id and the divert's
name are kept in the annotations ``x-opt-ORIG-ADDRESS``, ``x-opt-ORIG-MESSAGE-ID`` and ``x-opt-ORIG-QUEUE``
(the AMQP form of ``_AMQ_ORIG_ADDRESS`` / ``_AMQ_ORIG_MESSAGE_ID`` / ``_AMQ_ORIG_QUEUE``). Its AMQP
message-id, header (durable, priority, ttl) and body are the original's. It is then routed at the
forwarding address like any message sent there, diverts included: diverts chain. Artemis has no guard
against a chain that comes back to where it started (it would recurse until the stack overflows);
tdbroker refuses such a cycle at start-up with FILE:LINE, and at run time never routes a copy through an
address it has already passed on its way nor more than :data:`MAX_DIVERT_DEPTH` diverts deep. A copy
whose forwarding address has no queue is dropped (nothing is auto-created for it), as Artemis drops a
message routed to no binding.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import proton

from .configmodel import ANY_WORDS, SINGLE_WORD, artemis_match
from .largemessage import split_reference
from .selector import Selector, SelectorError, message_lookup, parse as parse_selector
from .xmlschema import Ctx, children

log = logging.getLogger("broker.diverts")

#: <core> children this module parses (broker/config.py hands them over).
CORE_ELEMENTS = ("diverts",)
#: Artemis' divert-routing-type values and its default (artemis-configuration.xsd).
ROUTING_TYPES = ("STRIP", "PASS", "ANYCAST", "MULTICAST")
DEFAULT_ROUTING_TYPE = "STRIP"
DEFAULT_EXCLUSIVE = False
#: How many diverts deep a copy may be routed. Cycles are refused at start-up, so this only bounds a long
#: (acyclic) chain of diverts: each level decodes and re-encodes the message.
MAX_DIVERT_DEPTH = 8
#: Addresses whose divert lists are remembered; past this the cache starts again (addresses come from
#: clients, so the cache must be bounded by configuration, not by them).
MAX_CACHED_ADDRESSES = 4096

# Annotations Artemis puts on a copy it makes (the AMQP names of Message.HDR_ORIGINAL_*).
ORIG_ADDRESS = proton.symbol("x-opt-ORIG-ADDRESS")
ORIG_QUEUE = proton.symbol("x-opt-ORIG-QUEUE")
ORIG_MESSAGE_ID = proton.symbol("x-opt-ORIG-MESSAGE-ID")

_DIVERT_CHILDREN = ("address", "forwarding-address", "exclusive", "filter", "routing-type", "routing-name",
                    "transformer-class-name", "transformer")


@dataclass
class DivertConfig:
    """One ``<divert>`` of broker.xml (see the module docstring)."""

    name: str
    address: str
    forwarding_addresses: tuple
    exclusive: bool = DEFAULT_EXCLUSIVE
    filter: str | None = None
    routing_type: str = DEFAULT_ROUTING_TYPE
    routing_name: str | None = None
    transformer: object = None   # broker.transformers.TransformerConfig, when one is configured
    line: int = 0
    selector: Selector | None = field(default=None, repr=False)

    @property
    def forwarding_address(self) -> str:
        return ", ".join(self.forwarding_addresses)


# --- parsing ---------------------------------------------------------------------------------------------

def parse_diverts(ctx: Ctx, el) -> list[DivertConfig]:
    """``<diverts>``: a FILE:LINE error for anything tdbroker would not act on."""
    ctx.check_attrs(el, ())
    out: list[DivertConfig] = []
    names: dict[str, int] = {}
    for name, child in children(ctx, el):
        if name != "divert":
            raise ctx.error(child, f"unknown element <{name}> in <diverts>; only <divert> is allowed")
        d = _parse_divert(ctx, child)
        if d.name in names:
            raise ctx.error(child, f"duplicate divert name {d.name!r} (first at line {names[d.name]})")
        names[d.name] = d.line
        out.append(d)
    _check_cycles(ctx, out)
    return out


def _parse_divert(ctx: Ctx, el) -> DivertConfig:
    ctx.check_attrs(el, ("name",))
    name = ctx.attr(el, "name", required=True)
    values: dict[str, object] = {}
    lines: dict[str, int] = {}
    for cname, child in children(ctx, el):
        if cname not in _DIVERT_CHILDREN:
            hint = [c for c in _DIVERT_CHILDREN if c.split("-")[0] in cname]
            raise ctx.error(child, f"unknown element <{cname}> in <divert name=\"{name}\">"
                                   + (f" (did you mean <{hint[0]}>?)" if hint else ""))
        if cname in lines:
            raise ctx.error(child, f"duplicate <{cname}> in divert {name} (first at line {lines[cname]})")
        lines[cname] = child.line
        if cname == "exclusive":
            values[cname] = ctx.value(child, "bool")
        elif cname == "filter":
            ctx.check_attrs(child, ("string",))
            text = ctx.attr(child, "string", required=True)
            try:
                values["selector"] = parse_selector(text)
            except SelectorError as exc:
                raise ctx.error(child, f"divert {name}: filter {text!r}: {exc}") from None
            values[cname] = text
        elif cname == "routing-type":
            rt = ctx.text(child)
            if rt not in ROUTING_TYPES:
                raise ctx.error(child, f"divert {name}: <routing-type> must be one of {', '.join(ROUTING_TYPES)}, "
                                       f"got {rt!r}")
            values[cname] = rt
        elif cname in ("transformer-class-name", "transformer"):
            values["transformer"] = _parse_transformer(ctx, child, name, cname)
        else:
            values[cname] = ctx.text(child)
    if "transformer-class-name" in lines and "transformer" in lines:
        raise ctx.error(el, f"divert {name}: give <transformer-class-name> or <transformer>, not both")
    for required in ("address", "forwarding-address"):
        if required not in values:
            raise ctx.error(el, f"divert {name} needs an <{required}>")
    address = str(values["address"])
    _check_words(ctx, el, name, address)
    forwards = tuple(a.strip() for a in str(values["forwarding-address"]).split(","))
    for f in forwards:
        if not f:
            raise ctx.error(lines["forwarding-address"], f"divert {name}: an empty name in <forwarding-address>")
        if ANY_WORDS in f.split(".") or SINGLE_WORD in f.split(".") or "::" in f:
            raise ctx.error(lines["forwarding-address"], f"divert {name}: forwarding address {f!r} must be a "
                                                         "plain address (no wildcard, no queue name)")
    return DivertConfig(name=name, address=address, forwarding_addresses=forwards,
                        exclusive=bool(values.get("exclusive", DEFAULT_EXCLUSIVE)),
                        filter=values.get("filter"), routing_type=str(values.get("routing-type",
                                                                                 DEFAULT_ROUTING_TYPE)),
                        routing_name=values.get("routing-name"), transformer=values.get("transformer"),
                        line=el.line, selector=values.get("selector"))


def _check_words(ctx: Ctx, el, name: str, pattern: str) -> None:
    if "::" in pattern:
        raise ctx.error(el, f"divert {name}: <address> {pattern!r} is an address, not a queue name")
    for word in pattern.split("."):
        if word not in (ANY_WORDS, SINGLE_WORD) and (ANY_WORDS in word or SINGLE_WORD in word):
            raise ctx.error(el, f"divert {name}: <address> {pattern!r}: '#' and '*' must stand for a whole word")


def _parse_transformer(ctx: Ctx, el, divert: str, cname: str):
    """A transformer through :mod:`broker.transformers` (loaded now, so that a class that cannot be
    imported is a start-up error); refused while that module is not there."""
    try:
        from . import transformers
    except ImportError:
        raise ctx.error(el, f"divert {divert}: <{cname}> is not implemented yet (no transformer support "
                            "in this tdbroker); remove it") from None
    if cname == "transformer-class-name":
        class_name, properties = ctx.text(el), {}
    else:
        class_name, properties = None, {}
        for pname, pel in children(ctx, el):
            if pname == "class-name":
                class_name = ctx.text(pel)
            elif pname == "property":
                ctx.check_attrs(pel, ("key", "value"))
                properties[ctx.attr(pel, "key", required=True)] = ctx.attr(pel, "value", default="")
            else:
                raise ctx.error(pel, f"unknown element <{pname}> in <transformer>; expected <class-name> "
                                     "and <property key value>")
        if not class_name:
            raise ctx.error(el, f"divert {divert}: <transformer> needs a <class-name>")
    cfg = transformers.TransformerConfig(divert, class_name, properties, el.line)
    try:
        cfg.instance = transformers.load_transformer(cfg)
    except ValueError as exc:
        raise ctx.error(el, f"divert {divert}: transformer {class_name}: {exc}") from None
    return cfg


def _check_cycles(ctx: Ctx, diverts: list[DivertConfig]) -> None:
    """Refuse diverts that lead back to an address they divert from (a copy would be diverted forever)."""
    edges = {d.name: [e for f in d.forwarding_addresses for e in diverts if artemis_match(e.address, f)]
             for d in diverts}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(d: DivertConfig, path: list[str]) -> None:
        state[d.name] = 1
        for e in edges[d.name]:
            if state.get(e.name) == 1:
                cycle = path[path.index(e.name):] + [e.name] if e.name in path else [d.name, e.name]
                raise ctx.error(e.line, "diverts form a cycle (" + " -> ".join(cycle) + "): a message would be "
                                        "diverted forever; break the chain")
            if e.name not in state:
                visit(e, path + [e.name])
        state[d.name] = 2

    for d in diverts:
        if d.name not in state:
            visit(d, [d.name])


# --- run time --------------------------------------------------------------------------------------------

class _AddressDiverts:
    """The diverts that apply to one address: its exclusive ones, and its non-exclusive ones in groups
    (one routing name each) with the group's turn."""

    __slots__ = ("exclusive", "groups", "turns")

    def __init__(self, exclusive: list, groups: list):
        self.exclusive = exclusive
        self.groups = groups
        self.turns = [0] * len(groups)


class Diverts:
    """The broker's diverts (:class:`DivertConfig` list) at run time: which apply to an address, the copy
    a divert makes, and (for federation's ``enable-divert-bindings``) which addresses feed an address."""

    def __init__(self, configs: list[DivertConfig]):
        self.configs = list(configs)
        self.active = bool(self.configs)
        self._by_address: dict[str, _AddressDiverts | None] = {}
        self._transformers: dict[str, object] = {}
        for d in self.configs:
            if d.transformer is not None:
                from . import transformers  # only reached when the configuration has a transformer
                t = d.transformer
                self._transformers[d.name] = t.instance if t.instance is not None else transformers.load_transformer(t)
        self.diverted = {d.name: 0 for d in self.configs}  # copies made per divert (management, tests)

    def for_address(self, address: str) -> _AddressDiverts | None:
        """The diverts bound to ``address`` (None: none)."""
        found = self._by_address.get(address, False)
        if found is not False:
            return found
        matching = [d for d in self.configs if d.address == address or artemis_match(d.address, address)]
        if not matching:
            entry = None
        else:
            groups: dict[str, list] = {}
            for d in matching:
                if not d.exclusive:
                    groups.setdefault(d.routing_name or f"\0{d.name}", []).append(d)
            entry = _AddressDiverts([d for d in matching if d.exclusive], list(groups.values()))
        if len(self._by_address) >= MAX_CACHED_ADDRESSES:
            self._by_address.clear()
        self._by_address[address] = entry
        return entry

    def select(self, address: str, payload: bytes, *, exclusive_only: bool = False) -> tuple[list, bool]:
        """``(diverts, exclusive)``: the diverts a message sent to ``address`` goes through, and whether
        they take it away from the address (an exclusive divert selected it)."""
        entry = self.for_address(address)
        if entry is None:
            return [], False
        lookup = None
        chosen = []
        for d in entry.exclusive:
            if d.selector is not None:
                if lookup is None:
                    lookup = message_lookup(payload)
                if not d.selector.matches(lookup):
                    continue
            chosen.append(d)
        if chosen or exclusive_only:
            return chosen, bool(chosen)
        for i, group in enumerate(entry.groups):
            n = len(group)
            start = entry.turns[i] % n
            for k in range(n):
                d = group[(start + k) % n]
                if d.selector is not None:
                    if lookup is None:
                        lookup = message_lookup(payload)
                    if not d.selector.matches(lookup):
                        continue
                chosen.append(d)
                entry.turns[i] = (start + k + 1) % n
                break
        return chosen, False

    def copy(self, d: DivertConfig, payload: bytes, source_address: str, forward: str) -> bytes | None:
        """The copy divert ``d`` sends to ``forward`` (see the module docstring); None when the message
        cannot be decoded or its transformer fails (the copy is then not made, and logged)."""
        # A large message reference (broker.largemessage): the head is copied, the footer naming the file
        # follows it again, and the copy is another reference to the same file. A transformer may rewrite
        # the body, which is in the file: its copy is not a reference, and the broker refuses the message.
        payload, footer = split_reference(payload)
        try:
            m = proton.Message()
            m.decode(payload)
            ann = dict(m.annotations or {})
            ann[ORIG_ADDRESS] = source_address
            ann[ORIG_QUEUE] = d.name
            if m.id is not None:
                ann[ORIG_MESSAGE_ID] = m.id
            m.annotations = ann
            m.address = forward
            out = bytes(m.encode())
        except Exception as exc:  # validated on arrival, so only a proton limitation gets here
            log.warning("divert %s: message not diverted (cannot re-encode it: %s)", d.name, exc)
            return None
        t = self._transformers.get(d.name)
        if t is not None:
            from . import transformers
            try:
                out = transformers.apply_transformer(t, out)
            except Exception as exc:  # a user's transformer must not stop the broker
                log.warning("divert %s: transformer failed (%s); message not diverted", d.name, exc)
                return None
        elif footer:
            out += footer
        self.diverted[d.name] += 1
        return out

    def divert_sources(self, forwarding_address: str, *, transitive: bool = False) -> list[str]:
        """The ``<address>`` of every divert that forwards to ``forwarding_address`` (with ``transitive``,
        also those that reach it through other diverts); patterns as configured. Federation's
        ``enable-divert-bindings`` uses it: a queue on a forwarding address is demand on its sources."""
        out: list[str] = []
        todo = [forwarding_address]
        seen = set()
        while todo:
            target = todo.pop()
            if target in seen:
                continue
            seen.add(target)
            for d in self.configs:
                if target in d.forwarding_addresses and d.address not in out:
                    out.append(d.address)
                    if transitive:
                        todo.append(d.address)
        return out


def divert_sources(source, forwarding_address: str, *, transitive: bool = False) -> list[str]:
    """:meth:`Diverts.divert_sources` for whatever holds the diverts: a :class:`broker.server.Broker`, its
    :class:`broker.addressing.AddressModel`, a :class:`Diverts`, a ``BrokerConfig`` or a list of
    :class:`DivertConfig` (``cfg.diverts``). Federation's ``enable-divert-bindings`` calls it."""
    if isinstance(source, Diverts):
        return source.divert_sources(forwarding_address, transitive=transitive)
    addressing = getattr(source, "addressing", None)          # a Broker
    held = getattr(addressing if addressing is not None else source, "diverts", source)
    if isinstance(held, Diverts):                              # a Broker's or an AddressModel's
        return held.divert_sources(forwarding_address, transitive=transitive)
    return Diverts(list(held or [])).divert_sources(forwarding_address, transitive=transitive)  # config / list
