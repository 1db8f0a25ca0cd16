"""Prometheus text exposition format (version 0.0.4) for ``GET /metrics``, and reading management rows.

The format (Prometheus docs, "Exposition formats"): per metric family a ``# HELP`` and a ``# TYPE`` line,
then one ``name{label="value",...} number`` line per series. Label values escape backslash, double quote
and newline. Counters end in ``_total``.

Both daemons build their metrics from the same management rows tdstat reads over AMQP:
:func:`management_rows` runs a QUERY through an agent's ``dispatch`` in process (no message encoding).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from wire import management as wm

#: Series of one family at most (per-link and per-address families grow with clients); past it the rest
#: are left out and counted in ``<prefix>_metrics_series_omitted``, so a scrape stays bounded.
MAX_SERIES_PER_FAMILY = 2000


def _escape(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _number(value: Any) -> str | None:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and math.isnan(value):
            return "NaN"
        return repr(float(value)) if isinstance(value, float) else str(value)
    return None


class MetricsText:
    """Families of series, rendered in the order they were declared."""

    def __init__(self, prefix: str):
        self.prefix = prefix
        self._families: dict[str, tuple[str, str, list[str]]] = {}
        self.omitted = 0

    def add(self, name: str, kind: str, help_text: str, value: Any, labels: dict | None = None) -> None:
        """One series of family ``prefix_name`` (``kind``: counter or gauge). A value that is not a
        number (None: the counter does not apply) is left out."""
        text = _number(value)
        full = f"{self.prefix}_{name}"
        family = self._families.get(full)
        if family is None:
            family = self._families[full] = (kind, help_text, [])
        if text is None:
            return
        if len(family[2]) >= MAX_SERIES_PER_FAMILY:
            self.omitted += 1
            return
        label_text = ""
        if labels:
            label_text = "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items() if v is not None) + "}"
        family[2].append(f"{full}{label_text} {text}")

    def render(self) -> str:
        self.add("metrics_series_omitted", "gauge",
                 f"Series left out of this scrape (more than {MAX_SERIES_PER_FAMILY} in a family).", self.omitted)
        out = []
        for name, (kind, help_text, lines) in self._families.items():
            out.append(f"# HELP {name} {help_text}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(lines)
        return "\n".join(out) + "\n"


def management_rows(dispatch: Callable[[wm.Request], tuple[int, Any]], entity_type: str) -> list[dict]:
    """Every row of ``entity_type`` as dicts, from an agent's ``dispatch`` (QUERY, paged as tdstat pages);
    empty when the agent does not have the type."""
    rows: list[dict] = []
    offset = 0
    while True:
        try:
            status, body = dispatch(wm.Request("QUERY", type=wm.NODE_TYPE, entity_type=entity_type, offset=offset))
        except wm.ManagementError:
            return rows
        if status != wm.OK:
            return rows
        names, results = body["attributeNames"], body["results"]
        rows.extend(dict(zip(names, r)) for r in results)
        if len(results) < wm.MAX_QUERY_COUNT:
            return rows
        offset += len(results)
