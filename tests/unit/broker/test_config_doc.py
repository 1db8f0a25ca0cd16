"""docs/broker-configuration.md must document every element and attribute tdbroker's parser knows.

The tables are broker/xmlschema.py's: a name added there without a line in the reference fails here.
Handled names need a table row (``| `name` |``) in their element's section, and where the table has a
default, the row must show the parser's default; ignored and refused names need to appear (in backticks)
in the section that lists them.
"""

from __future__ import annotations

import re

from broker import xmlschema as xs
from tests.paths import REPO

DOC_PATH = REPO / "docs" / "broker-configuration.md"

# Child elements that the parser (broker/config.py, broker/configconn.py) reads inline (not from a table), per section.
QUEUE_CHILDREN = ("<durable>", "<filter>", "<user>", "<max-consumers>")
MIRROR_CHILDREN = ("<property>",)
PROPERTY_ATTRS = ("key", "value")


def sections(doc: str) -> dict[str, str]:
    """``{heading text: the lines under it up to the next heading}`` (fenced code is not a heading)."""
    out: dict[str, str] = {}
    heading, body, fenced = "", [], False
    for line in doc.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and re.match(r"^#{1,6} ", line):
            out[heading] = "\n".join(body)
            heading, body = line.lstrip("#").strip(), []
        else:
            body.append(line)
    out[heading] = "\n".join(body)
    return out


def section(secs: dict[str, str], title: str) -> str | None:
    """The body of the one heading that contains ``title``; None when there is none."""
    found = [body for head, body in secs.items() if title in head]
    return found[0] if len(found) == 1 else None


def row(body: str, name: str) -> str | None:
    """The table row documenting ``name`` (its first cell is `` `name` ``), or None."""
    for line in body.splitlines():
        if line.startswith(f"| `{name}` |"):
            return line
    return None


def doc_default(value) -> str:
    """How the reference writes a parser default in a table row."""
    if value is None:
        return "none"
    if value is True or value is False:
        return f"`{str(value).lower()}`"
    if isinstance(value, str) and value.lower() in ("anycast", "multicast"):
        return f"`{value.upper()}`"
    return f"`{value}`"


def missing_from(doc: str) -> list[str]:
    """Every table name the document fails to cover (empty when the reference is complete)."""
    secs = sections(doc)
    missing: list[str] = []

    def need_rows(title: str, names, defaults=None) -> None:
        body = section(secs, title)
        if body is None:
            missing.append(f"section {title!r}")
            return
        for name in names:
            line = row(body, name)
            if line is None:
                missing.append(f"{title}: row {name}")
            elif defaults is not None and doc_default(defaults[name]) not in line:
                missing.append(f"{title}: row {name} does not show the default {doc_default(defaults[name])}")

    def need_mentions(title: str, names) -> None:
        body = section(secs, title)
        if body is None:
            missing.append(f"section {title!r}")
            return
        for name in sorted(names):
            if f"`{name}`" not in body:
                missing.append(f"{title}: {name}")

    need_rows("`<core>` children", xs.CORE_HANDLED)
    need_rows("`<acceptor>`", ("name",))
    need_rows("`<queue>`", xs.QUEUE_ATTRS + QUEUE_CHILDREN)
    need_mentions("`<queue>`", xs.QUEUE_IGNORED_ATTRS)
    need_rows("`<address-setting>` elements", xs.ADDRESS_SETTING_FIELDS,
              {name: default for name, (_f, _k, default) in xs.ADDRESS_SETTING_FIELDS.items()})
    need_mentions("Ignored address-setting elements", xs.ADDRESS_SETTING_IGNORED)
    need_rows("`<amqp-connection>` attributes", xs.AMQP_CONNECTION_ATTRS,
              {"uri": None, "name": None, "user": None, "password": None,
               "retry-interval": xs.DEFAULT_RETRY_INTERVAL_MS,
               "reconnect-attempts": xs.DEFAULT_RECONNECT_ATTEMPTS, "auto-start": xs.DEFAULT_AUTO_START})
    need_rows("`<amqp-connection>` children", [f"<{c}>" for c in xs.AMQP_CONNECTION_CHILDREN])
    need_rows("`<peer>`, `<sender>` and `<receiver>`", xs.MATCH_ELEMENT_ATTRS)
    need_rows("`<mirror>`", list(xs.MIRROR_ATTRS) + list(MIRROR_CHILDREN),
              {**{name: default for name, (_k, default) in xs.MIRROR_ATTRS.items()}, "<property>": None})
    need_mentions("`<mirror>`", PROPERTY_ATTRS)
    need_rows("`<flow-records>`", xs.FLOW_RECORDS_ATTRS,
              {"directory": None, "sample": xs.DEFAULT_FLOW_SAMPLE, "rotate-mb": xs.DEFAULT_FLOW_ROTATE_MB})
    need_mentions("Ignored `<core>` elements", xs.CORE_IGNORED)
    need_rows("Refused elements", xs.CORE_UNSUPPORTED)
    need_rows("Security settings", xs.CORE_SECURITY_UNENFORCED)
    need_rows("Security settings", xs.CORE_SECURITY_ENFORCED)
    need_mentions("Security settings", xs.TLS_URI_PARAMS)
    return missing


def test_every_broker_element_and_attribute_is_documented():
    """The reference operators read must not drift from the parser's tables."""
    missing = missing_from(DOC_PATH.read_text(encoding="utf-8"))
    assert not missing, "docs/broker-configuration.md lacks:\n  " + "\n  ".join(missing)


def test_a_missing_row_is_noticed():
    doc = DOC_PATH.read_text(encoding="utf-8")
    without = "\n".join(line for line in doc.splitlines() if not line.startswith("| `expiry-delay` |"))
    assert "`<address-setting>` elements: row expiry-delay" in missing_from(without)


def test_a_wrong_default_is_noticed():
    doc = DOC_PATH.read_text(encoding="utf-8")
    line = row(section(sections(doc), "`<amqp-connection>` attributes"), "retry-interval")
    wrong = doc.replace(line, line.replace(f"`{xs.DEFAULT_RETRY_INTERVAL_MS}`", "`4000`"))
    assert any("retry-interval does not show the default" in m for m in missing_from(wrong))


def test_a_missing_ignored_name_is_noticed():
    doc = DOC_PATH.read_text(encoding="utf-8")
    assert "Ignored `<core>` elements: jmx-domain" in missing_from(doc.replace("`jmx-domain`", "jmx-domain"))
