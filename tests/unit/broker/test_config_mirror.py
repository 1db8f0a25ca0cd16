"""``<mirror>`` in ``<amqp-connection>`` (broker/configconn.py): defaults, source-mirror-address, and the
refusals at FILE:LINE (sync="true", a bad address-filter, a second mirror on one connection)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfigError, parse_broker_config

PATH = "/etc/tdbroker/broker.xml"

#: The <amqp-connection> sits on line 3, its first child on line 4.
TEMPLATE = """<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
<broker-connections>
<amqp-connection uri="tcp://replica.example:5672" name="dr">
{children}
</amqp-connection>
</broker-connections>
</core></configuration>
"""
FIRST_CHILD_LINE = 4

DEFAULTS = {"message-acknowledgements": True, "queue-creation": True, "queue-removal": True, "durable": True,
            "sync": False, "source-mirror-address": None, "address-filter": None, "properties": {}}


def parse(children: str):
    return parse_broker_config(TEMPLATE.format(children=children), PATH)


def refusal(children: str) -> BrokerConfigError:
    with pytest.raises(BrokerConfigError) as info:
        parse(children)
    return info.value


def mirror_of(cfg):
    [conn] = cfg.broker_connections
    [mirror] = [e for e in conn.elements if e.kind == "mirror"]
    return mirror


def test_a_bare_mirror_has_every_default_and_no_warning():
    cfg = parse("<mirror/>")
    mirror = mirror_of(cfg)
    assert mirror.attrs == DEFAULTS and mirror.line == FIRST_CHILD_LINE
    assert (mirror.address_match, mirror.queue_name) == (None, None)
    assert not [w for w in cfg.warnings if "mirror" in w]   # it is acted on: no "not implemented" warning


def test_attributes_are_read():
    mirror = mirror_of(parse('<mirror message-acknowledgements="false" queue-creation="false" '
                             'queue-removal="false" durable="false" sync="false" '
                             'source-mirror-address="dr.events" address-filter="orders, !orders.tmp"/>'))
    assert mirror.attrs == {"message-acknowledgements": False, "queue-creation": False, "queue-removal": False,
                            "durable": False, "sync": False, "source-mirror-address": "dr.events",
                            "address-filter": "orders, !orders.tmp", "properties": {}}


def test_a_mirror_property_is_refused_at_its_line():
    text = '<mirror>\n<property key="k" value="v"/>\n</mirror>'
    with pytest.raises(BrokerConfigError) as info:
        parse(text)
    assert "<property> in <mirror> is not supported" in str(info.value)
    assert ":" in str(info.value).split(" ", 1)[0]


def test_a_mirror_shares_its_connection_with_senders():
    cfg = parse('<sender queue-name="out"/>\n<mirror/>')
    [conn] = cfg.broker_connections
    assert [e.kind for e in conn.elements] == ["sender", "mirror"]


def test_sync_true_is_refused_at_its_line_saying_what_to_write():
    err = refusal('<mirror sync="true"/>')
    assert (err.path, err.line) == (PATH, FIRST_CHILD_LINE)
    assert str(err).startswith(f"{PATH}:{FIRST_CHILD_LINE}: ")
    assert "not implemented" in err.message and 'sync="false"' in err.message and "remove" in err.message


@pytest.mark.parametrize("text", ["orders", "orders,billing", "!orders.tmp", "orders,!orders.tmp", " a , !b "])
def test_good_address_filters_are_kept_as_written(text):
    assert mirror_of(parse(f'<mirror address-filter="{text}"/>')).attrs["address-filter"] == text


@pytest.mark.parametrize("text", ["", "orders,,billing", "orders,", ",orders", "!", "orders, ! ", " "])
def test_an_address_filter_with_an_empty_item_is_refused_at_its_line(text):
    err = refusal(f'<mirror address-filter="{text}"/>')
    assert (err.path, err.line) == (PATH, FIRST_CHILD_LINE)
    assert "address-filter" in err.message


def test_a_second_mirror_on_one_connection_is_refused_at_its_line():
    err = refusal("<mirror/>\n<mirror durable=\"false\"/>")
    assert (err.path, err.line) == (PATH, FIRST_CHILD_LINE + 1)
    assert f"line {FIRST_CHILD_LINE}" in err.message and "<amqp-connection>" in err.message


def test_mirrors_on_two_connections_are_fine():
    text = TEMPLATE.format(children="<mirror/>").replace(
        "</broker-connections>",
        '<amqp-connection uri="tcp://other.example:5672" name="dr2"><mirror/></amqp-connection>\n'
        "</broker-connections>")
    cfg = parse_broker_config(text, PATH)
    assert [mirror_of_conn.name for mirror_of_conn in cfg.broker_connections] == ["dr", "dr2"]


def test_an_empty_source_mirror_address_is_refused():
    err = refusal('<mirror source-mirror-address=" "/>')
    assert (err.path, err.line) == (PATH, FIRST_CHILD_LINE) and "source-mirror-address" in err.message


def test_unknown_mirror_attribute_and_child_are_refused():
    assert refusal('<mirror sync-mode="x"/>').line == FIRST_CHILD_LINE
    err = refusal("<mirror>\n<filter/>\n</mirror>")
    assert err.line == FIRST_CHILD_LINE + 1 and "<filter>" in err.message
