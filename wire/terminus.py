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
