"""Terminus capabilities, shared by router and broker: what a peer declared on a link's source or target.

Peers send capabilities as one symbol, a list or an array of symbols (Artemis sends an array,
DISPATCH-1430); every reader here wants the same thing, the symbols as strings in their order.
"""

from __future__ import annotations

import proton


def capabilities(data) -> list[str]:
    """The symbols of a terminus ``capabilities`` field (``proton.Data``; None or empty -> [])."""
    if data is None:
        return []
    try:
        data.rewind()
        value = data.get_object() if data.next() is not None else None
    except Exception:  # a malformed field is treated as no capabilities, never a crash
        return []
    if value is None:
        return []
    items = value.elements if isinstance(value, proton.Array) else value if isinstance(value, (list, tuple)) else [value]
    return [str(v) for v in items if isinstance(v, str)]


# Qpid Dispatch's waypoint capability: a container that declares ``qd.waypoint`` (= 1) or ``qd.waypoint.N``
# on the terminus naming a node consumes phase N-1 and produces phase N of that address (Dispatch accepts
# N = 1..9, phases 0..9; DISPATCH-1430). Artemis' broker connections declare it on their links.
WAYPOINT_CAPABILITY = "qd.waypoint"
MAX_WAYPOINT_ORDINAL = 9
# Qpid Dispatch's fallback capability: a link serving an address's fallback destination (DISPATCH-1509).
FALLBACK_CAPABILITY = "qd.fallback"


def waypoint_ordinal(terminus) -> int | None:
    """N from a ``qd.waypoint`` (= 1) or ``qd.waypoint.N`` capability of a terminus, given as a single
    symbol or an array of symbols; None when the terminus has none."""
    for sym in capabilities(terminus.capabilities):
        if sym == WAYPOINT_CAPABILITY:
            return 1
        if sym.startswith(WAYPOINT_CAPABILITY + "."):
            suffix = sym[len(WAYPOINT_CAPABILITY) + 1:]
            if suffix.isdigit() and 1 <= int(suffix) <= MAX_WAYPOINT_ORDINAL:
                return int(suffix)
    return None


# The AMQP selector filter (AMQP Filter Expressions registry; the descriptor ActiveMQ, Artemis and Qpid JMS
# use): a source filter entry whose described value is a JMS selector string.
SELECTOR_FILTER = "apache.org:selector-filter:string"
SELECTOR_FILTER_CODE = 0x0000468C00000004


def source_selector(data) -> tuple[str, str] | None:
    """``(key, selector text)`` of the selector entry in a source's ``filter`` map (``proton.Data``), or None.
    Raises ValueError when the filter map is malformed or the selector entry's value is not a string."""
    if data is None:
        return None
    try:
        data.rewind()
        value = data.get_object() if data.next() is not None else None
    except Exception as exc:
        raise ValueError(f"malformed source filter: {exc}") from None
    if not isinstance(value, dict):
        return None
    for key, entry in value.items():
        if isinstance(entry, proton.Described) and (
                entry.descriptor == SELECTOR_FILTER or entry.descriptor == SELECTOR_FILTER_CODE):
            if not isinstance(entry.value, str):
                raise ValueError("the selector filter's value must be a string")
            return str(key), entry.value
    return None


def put_source_selector(data, key: str, text: str) -> None:
    """Make ``data`` (a source's ``filter``) the map with only the selector entry ``key`` -> ``text``."""
    data.clear()
    data.put_map()
    data.enter()
    data.put_symbol(key)
    data.put_described()
    data.enter()
    data.put_symbol(SELECTOR_FILTER)
    data.put_string(text)
    data.exit()
    data.exit()
