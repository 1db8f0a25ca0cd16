"""Dispatch settings tdrouterd does not act on are refused, never accepted and ignored (issue 18; the rule
"never accept a setting you do not enforce"): a value other than what tdrouterd does anyway is a FILE:LINE
error at start-up (and a 400 for management CREATE) that says what to write instead; the default, or a value
that means the same, is accepted (router/schema.py NOT_IMPLEMENTED)."""

from __future__ import annotations

import pytest

from router import schema
from router.config import ConfigError, parse_config, validate_entity

#: (section, attribute as written, a value tdrouterd does not do). Legacy spellings are refused alike.
REFUSED = [
    ("listener", "maxSessionFrames", "100"),
    ("connector", "maxSessionFrames", "1"),
    ("listener", "messageLoggingComponents", "all"),
    ("connector", "messageLoggingComponents", "message-id,to"),
    ("listener", "logMessage", "all"),
    ("listener", "socketAddressFamily", "IPv4"),
    ("listener", "protocolFamily", "IPv6"),
    ("connector", "protocolFamily", "IPv4"),
    ("connector", "allowRedirect", "yes"),
    ("address", "enableFallback", "yes"),
    ("address", "fallback", "yes"),
    ("autoLink", "fallback", "yes"),
]

#: (section, attribute, value) that are what tdrouterd does: accepted.
ACCEPTED = [
    ("router", "allowResumableLinkRoute", "yes"),
    ("router", "allowResumableLinkRoute", "no"),  # acted on: router/daemon.py -> LinkRouter.allow_resumable
    ("connector", "openProperties", '{"site": "east"}'),  # sent in the connection's OPEN
    ("listener", "maxSessionFrames", "0"),
    ("connector", "maxSessionFrames", "0"),
    ("listener", "messageLoggingComponents", "none"),
    ("connector", "logMessage", "none"),
    ("connector", "openProperties", "{}"),
    ("connector", "allowRedirect", "no"),
    ("address", "enableFallback", "no"),
    ("autoLink", "fallback", "no"),
]

#: The lines a section needs besides the attribute under test (the attribute goes on line 4).
_REQUIRED = {
    "router": "id: R",
    "listener": "port: 0",
    "connector": "port: 5672",
    "address": "prefix: a",
    "autoLink": "address: q\n    direction: in\n    connection: c",
}


def _text(section: str, attr: str, value: str) -> tuple[str, int]:
    head = f"# refused settings\n{section} {{\n    {_REQUIRED[section]}\n"
    return head + f"    {attr}: {value}\n}}\n", head.count("\n") + 1


@pytest.mark.parametrize("section,attr,value", REFUSED, ids=[f"{s}.{a}={v}" for s, a, v in REFUSED])
def test_a_setting_tdrouterd_does_not_do_is_refused_with_file_line_and_what_to_write(section, attr, value):
    text, line = _text(section, attr, value)
    with pytest.raises(ConfigError) as info:
        parse_config(text, "r.conf")
    canon = schema.entity_type(section).resolve(attr)
    assert (info.value.path, info.value.line) == ("r.conf", line)
    assert str(info.value).startswith(f"r.conf:{line}: {section}: {canon}"), str(info.value)
    why_and_instead = info.value.message.split(" is not implemented: ", 1)[1]
    assert "; " in why_and_instead and ("remove it" in why_and_instead or "write" in why_and_instead)


@pytest.mark.parametrize("section,attr,value", ACCEPTED, ids=[f"{s}.{a}={v}" for s, a, v in ACCEPTED])
def test_the_value_tdrouterd_does_is_accepted(section, attr, value):
    text, _ = _text(section, attr, value)
    parse_config(text, "ok.conf")


def test_every_not_implemented_entry_has_a_refusal_and_an_accepted_default_tested():
    refused = {(s, schema.entity_type(s).resolve(a)) for s, a, _ in REFUSED}
    assert set(schema.NOT_IMPLEMENTED) <= refused
    for section, attr in schema.NOT_IMPLEMENTED:
        a = schema.entity_type(section).attrs[attr]
        assert a.status == schema.REFUSED, (section, attr)
        # Leaving it out must be what tdrouterd does: the default is never a refused value.
        assert schema.not_implemented(section, attr, a.default) is None, (section, attr)


def test_management_create_refuses_them_too():
    with pytest.raises(ConfigError, match="allowRedirect yes is not implemented: a connector does not follow"):
        validate_entity("connector", {"host": "h", "port": "1", "allowRedirect": True})
    with pytest.raises(ConfigError, match="enableFallback yes is not implemented"):
        validate_entity("address", {"prefix": "a", "enableFallback": "yes"})
    validate_entity("autoLink", {"address": "q", "direction": "out", "connection": "c", "fallback": False})


def test_the_family_refusal_says_which_host_to_write():
    text, _ = _text("listener", "socketAddressFamily", "IPv6")
    with pytest.raises(ConfigError, match=r"write host as an address of the family: 0\.0\.0\.0 \(IPv4\) or ::"):
        parse_config(text, "r.conf")


def test_a_multi_line_open_properties_block_is_read_whole():
    """The JSON block (with a '#' inside a string, not a comment) is parsed whole: a lexer that cut it would
    report invalid JSON instead."""
    text = ('connector {\n    port: 5672\n    openProperties: {\n        "site": "east # 1",\n'
            '        "weights": {"a": 1}\n    }\n}\n')
    cfg = parse_config(text, "p.conf")
    assert cfg.connectors[0].attrs["openProperties"] == {"site": "east # 1", "weights": {"a": 1}}
