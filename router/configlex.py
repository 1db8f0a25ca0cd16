"""qdrouterd.conf lexing: text -> raw sections (router/config.py validates them).

The file is a list of ``name { key: value ... }`` sections; a value may be a JSON map, or (for the
attributes router/schema.py lists in BLOCK_ATTRIBUTES, a vhost's ``groups``) Dispatch's block form of
nested ``name: value`` lines. Every problem is a :class:`ConfigError` at ``path:line``; lines are counted as
editors count them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from wire.errors import LocatedError

from . import schema


class ConfigError(LocatedError):
    """A qdrouterd.conf problem at ``path:line``."""


# ---------------------------------------------------------------------------
# Lexing: text -> raw sections
# ---------------------------------------------------------------------------

_COMMENT = r"(?:\s+#.*)?"
_OPEN = re.compile(r"([A-Za-z_][\w.-]*)\s*(\{)?\s*(\})?" + _COMMENT)
_CLOSE = re.compile(r"\}" + _COMMENT)
_KEY = re.compile(r"[A-Za-z_$][\w$-]*")
_TRAILING_COMMENT = re.compile(r"\s+#.*$")
# A section with attributes after its '{' (``address { prefix: queue  waypoint: yes }``): the format has one
# attribute per line, so it is refused with the lines to write instead.
_ONE_LINE_SECTION = re.compile(r"([A-Za-z_][\w.-]*)\s*\{\s*(.*?)\s*(\})?" + _COMMENT)
# Where a ``key:`` starts inside such a line (or inside a value that swallowed a second attribute).
_INLINE_KEY = re.compile(r"(?:^|(?<=\s)|(?<=,))([A-Za-z_$][\w$-]*)\s*:(?=\s|$)")


@dataclass
class RawSection:
    name: str
    line: int
    items: list = field(default_factory=list)   # (key, value, line)
    nested_lines: dict = field(default_factory=dict)  # "groups.admin.users" -> line (block form)


def _is_comment_or_blank(text: str) -> bool:
    s = text.strip()
    return not s or s.startswith("#")


def _inline_attributes(text: str) -> list[tuple[str, str]]:
    """``prefix: queue  waypoint: yes`` -> [("prefix", "queue"), ("waypoint", "yes")] (a best guess, for a
    message: values are what lies between one ``key:`` and the next)."""
    keys = list(_INLINE_KEY.finditer(text))
    out = []
    for k, nxt in zip(keys, keys[1:] + [None]):
        value = text[k.end():nxt.start() if nxt else len(text)].strip().rstrip(",").strip()
        out.append((k.group(1), value))
    return out


def _one_line_section_error(path: str, lineno: int, name: str, body: str) -> ConfigError:
    pairs = _inline_attributes(body)
    written = "\n".join([f"    {name} {{", *(f"        {k}: {v}" for k, v in pairs), "    }"])
    return ConfigError(path, lineno, f"section '{name}' is written on one line, but each attribute needs a line "
                                     f"of its own (and so do '{name} {{' and '}}'); write:\n{written}")


def _check_one_attribute(path: str, lineno: int, section: str, key: str, value: str) -> None:
    """An unquoted value that holds a second attribute (``host: 127.0.0.1  port: 5672``) or the section's
    closing brace (``waypoint: yes }``) would be read as one odd value: refused, saying what to write."""
    et = schema.entity_type(section)
    for m in _INLINE_KEY.finditer(value):
        if et is not None and et.resolve(m.group(1)) is not None:
            first = value[:m.start()].strip().rstrip(",").strip()
            raise ConfigError(path, lineno, f"{section}: two attributes on one line: write '{key}: {first}' and "
                                            f"'{value[m.start():].strip()}' on lines of their own")
    if re.search(r"\s\}$", value):
        raise ConfigError(path, lineno, f"{section}: put the closing '}}' on a line of its own after "
                                        f"'{key}: {value[:-1].strip()}'")


def _clean_value(raw: str, path: str, lineno: int, key: str) -> str:
    """Strip a trailing comment and surrounding quotes from an attribute value."""
    raw = raw.strip()
    if raw[:1] in ("'", '"'):
        q = raw[0]
        end = raw.find(q, 1)
        if end < 0:
            raise ConfigError(path, lineno, f"unterminated quoted value for '{key}'")
        rest = raw[end + 1:].strip()
        if rest and not rest.startswith("#"):
            raise ConfigError(path, lineno, f"unexpected text {rest!r} after the quoted value of '{key}'")
        return raw[1:end]
    value = _TRAILING_COMMENT.sub("", raw).strip()
    if not value:
        raise ConfigError(path, lineno, f"attribute '{key}' has no value")
    return value


def _read_json_block(lines: list[str], start: int, first: str, path: str, key: str,
                     key_lines: dict | None = None) -> tuple[Any, int]:
    """Collect a map value starting with '{' on line index *start*; return (value, last index).

    The value is JSON, or Dispatch's block form (a vhost's ``groups``): ``name: value`` lines and nested
    ``name: {`` ... ``}`` blocks, values unquoted and a trailing comma ignored. For the block form,
    *key_lines* gets each nested key's line (``admin.maxSenders`` -> line)."""
    buf = [(start, first)]
    depth = first.count("{") - first.count("}")
    i = start
    while depth > 0:
        i += 1
        if i >= len(lines):
            raise ConfigError(path, start + 1, f"unterminated value for '{key}' opened here")
        if _is_comment_or_blank(lines[i]):
            continue
        buf.append((i, lines[i]))
        depth += lines[i].count("{") - lines[i].count("}")
    try:
        return json.loads("\n".join(text for _, text in buf)), i
    except ValueError as e:
        json_error = e
    except RecursionError:  # json nests by recursion: a value a thousand levels deep ends the stack
        raise ConfigError(path, start + 1, f"'{key}' is nested too deeply") from None
    if schema.camel_case(key) not in schema.BLOCK_ATTRIBUTES:
        raise ConfigError(path, start + 1, f"'{key}' is not valid JSON: {json_error}")
    return _block_map(buf, path, key, key_lines if key_lines is not None else {}), i


# Dispatch's block form nests at most this deep under the attribute (vhost groups -> group -> settings).
_MAX_BLOCK_DEPTH = 8


def _block_map(buf: list, path: str, key: str, key_lines: dict) -> dict:
    """Dispatch's block form (see _read_json_block) of the lines in *buf* [(index, text)] into a dict."""
    root: dict = {}
    stack: list[tuple[dict, str]] = [(root, "")]
    first_index, first = buf[0]
    rest = first.strip()[1:].strip()
    items = ([(first_index, rest)] if rest else []) + buf[1:]
    for index, text in items:
        lineno = index + 1
        s = _TRAILING_COMMENT.sub("", text).strip()
        while s.startswith("}"):
            if not stack:
                raise ConfigError(path, lineno, f"'{key}': unexpected '}}'")
            stack.pop()
            s = s[1:].strip().lstrip(",").strip()
        if not s:
            continue
        if not stack:
            raise ConfigError(path, lineno, f"'{key}': unexpected {s!r} after the block's closing '}}'")
        name, sep, value = s.partition(":")
        name = name.strip().strip("'\"")
        if not sep or not name:
            raise ConfigError(path, lineno, f"'{key}': expected 'name: value' or 'name: {{', got {s!r}")
        current, prefix = stack[-1]
        if name in current:
            raise ConfigError(path, lineno, f"'{key}': {prefix}{name} is given twice")
        value = value.strip()
        where = f"{prefix}{name}"
        key_lines[where] = lineno
        if value.startswith("{"):
            inner = value[1:].strip()
            current[name] = {}
            if inner.rstrip(",").strip() == "}":
                continue
            if inner:
                raise ConfigError(path, lineno, f"'{key}': put the settings of {where} on the lines after '{{'")
            if len(stack) > _MAX_BLOCK_DEPTH:
                raise ConfigError(path, lineno, f"'{key}' is nested too deeply")
            stack.append((current[name], where + "."))
            continue
        value = value.rstrip(",").strip()
        if value[:1] in ("'", '"') and value[-1:] == value[:1] and len(value) >= 2:
            value = value[1:-1]
        current[name] = value
    if stack:
        raise ConfigError(path, buf[0][0] + 1, f"'{key}': a block opened here is not closed")
    return root


# Lines end at \n, \r\n or \r only. str.splitlines() also breaks at \v, \f, \x1c-\x1e, \x85,
# \u2028 and \u2029, which editors do not, so every FILE:LINE after such a character was off.
_LINE_END = re.compile(r"\r\n|\r|\n")


def lex(text: str, path: str) -> list[RawSection]:
    lines = _LINE_END.split(text)
    sections: list[RawSection] = []
    current: RawSection | None = None
    pending: tuple[str, int] | None = None    # section name waiting for its '{'
    i = 0
    while i < len(lines):
        lineno = i + 1
        s = lines[i].strip()
        if not s or s.startswith("#"):
            i += 1
            continue
        if current is None:
            if pending is not None:
                m = re.fullmatch(r"\{\s*(\})?" + _COMMENT, s)
                if not m:
                    raise ConfigError(path, pending[1], f"expected '{{' after section name '{pending[0]}'")
                current = RawSection(pending[0], pending[1])
                pending = None
                if m.group(1):
                    sections.append(current)
                    current = None
            else:
                m = _OPEN.fullmatch(s)
                if m and m.group(2):
                    current = RawSection(m.group(1), lineno)
                    if m.group(3):
                        sections.append(current)
                        current = None
                elif m and not m.group(3):
                    pending = (m.group(1), lineno)
                elif (one := _ONE_LINE_SECTION.fullmatch(s)) and _INLINE_KEY.search(one.group(2)):
                    raise _one_line_section_error(path, lineno, one.group(1), one.group(2))
                elif s.startswith("}"):
                    raise ConfigError(path, lineno, "unexpected '}' outside any section")
                elif ":" in s:
                    key = s.split(":", 1)[0].strip()
                    raise ConfigError(path, lineno, f"attribute '{key}' outside any section")
                else:
                    raise ConfigError(path, lineno, f"expected a section name followed by '{{', got {s!r}")
            i += 1
            continue
        # inside a section
        if _CLOSE.fullmatch(s):
            sections.append(current)
            current = None
        elif ":" in s:
            key, _, raw = s.partition(":")
            key = key.strip()
            if not _KEY.fullmatch(key):
                raise ConfigError(path, lineno, f"{current.name}: invalid attribute name {key!r}")
            raw = raw.strip()
            if raw.startswith("{"):
                if schema.camel_case(key) not in schema.JSON_ATTRIBUTES:
                    raise ConfigError(path, lineno,
                                      f"{current.name}: '{key}' cannot open a block; "
                                      "nested sections are not allowed")
                nested_lines: dict = {}
                value, i = _read_json_block(lines, i, raw, path, key, nested_lines)
                current.nested_lines.update({f"{schema.camel_case(key)}.{k}": v for k, v in nested_lines.items()})
            else:
                value = _clean_value(raw, path, lineno, key)
                if raw[:1] not in ("'", '"'):
                    _check_one_attribute(path, lineno, current.name, key, value)
            current.items.append((key, value, lineno))
        else:
            m = _OPEN.fullmatch(s)
            if m and (m.group(2) or schema.entity_type(m.group(1)) is not None):
                raise ConfigError(
                    path, lineno,
                    f"section '{m.group(1)}' cannot be nested inside '{current.name}' "
                    f"(missing '}}' for '{current.name}' opened at line {current.line}?)")
            raise ConfigError(path, lineno, f"{current.name}: expected 'name: value', got {s!r}")
        i += 1
    if current is not None:
        raise ConfigError(path, current.line, f"unterminated section '{current.name}' opened here")
    if pending is not None:
        raise ConfigError(path, pending[1], f"expected '{{' after section name '{pending[0]}'")
    return sections
