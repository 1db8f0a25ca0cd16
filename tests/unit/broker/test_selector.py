"""broker/selector.py: JMS 2.0 selectors (JMS 2.0 specification §3.8.1) over a message lookup."""

from __future__ import annotations

import pytest

from broker.selector import MAX_SELECTOR_LENGTH, SelectorError, amqp_lookup, parse

MESSAGE = {"color": "blue", "weight": 3000, "price": 7.5, "count": 3, "flag": True, "name": "a_b%c",
           "quote": "it's", "JMSType": "car"}


def selects(text: str, props: dict = MESSAGE) -> bool:
    return parse(text).matches(lambda name: props.get(name))


@pytest.mark.parametrize("text,expected", [
    ("color = 'blue'", True),
    ("color <> 'blue'", False),
    ("Color = 'blue'", False),                        # identifiers are case-sensitive: Color is NULL
    ("color = 'blue' and WEIGHT is null", True),      # keywords are not
    ("weight > 2500 AND price = 7.5", True),
    ("price = 7.50E0 AND price < 8 AND price >= 7.5", True),
    ("weight = 3000.0", True),                        # exact and approximate numbers compare
    ("count BETWEEN 1 AND 3 AND count NOT BETWEEN 4 AND 9", True),
    ("color IN ('red', 'blue') AND color NOT IN ('green')", True),
    ("name LIKE 'a\\_b\\%%' ESCAPE '\\'", True),
    ("name LIKE 'a_b%' AND color LIKE 'bl_e' AND color NOT LIKE 'r%'", True),
    ("quote = 'it''s'", True),
    ("flag = TRUE AND NOT flag = FALSE", True),
    ("count * 2 + 1 = 7 AND count / 2 = 1 AND -count / 2 = -1 AND count / 2.0 = 1.5 AND -count < 0 AND count - 4 = -1", True),
    ("(color = 'red' OR weight > 100) AND count < 10", True),
    ("order = 1 OR notes = 2 OR android IS NULL", True),  # words that start with keywords are identifiers
    ("count / 0 = 1", False),                          # division by zero: unknown
])
def test_selector_semantics(text, expected):
    assert selects(text) is expected


@pytest.mark.parametrize("text", [
    "missing = 1", "NOT missing = 1", "missing > 1 OR missing < 1", "color = 1", "count = '3'",
    "color > 'a'", "flag > FALSE", "missing BETWEEN 1 AND 2", "missing IN ('a')", "missing LIKE 'a%'",
    "NOT (missing = 1 AND count = 3)",
])
def test_unknown_is_not_selected_and_not_unknown_stays_unknown(text):
    assert selects(text) is False


def test_three_valued_and_or():
    assert selects("missing = 1 OR count = 3") is True      # unknown OR true
    assert selects("missing = 1 AND count = 4") is False     # unknown AND false
    assert selects("NOT (missing = 1 AND count = 4)") is True
    assert selects("missing IS NOT NULL") is False and selects("count IS NOT NULL") is True


@pytest.mark.parametrize("text", ["", "color =", "= 1", "color = 'unterminated", "a LIKE 'x' ESCAPE 'ab'",
                                  "a LIKE 'x\\' ESCAPE '\\'", "a IN (1, 2)", "a BETWEEN 1", "1 1",
                                  "x" * (MAX_SELECTOR_LENGTH + 1)])
def test_bad_selectors_raise_a_clear_error(text):
    with pytest.raises(SelectorError):
        parse(text)


def test_jms_headers_map_onto_amqp_sections():
    lookup = amqp_lookup({"message_id": "ID:1", "priority": None, "durable": True, "subject": "car",
                          "user_id": b"alice", "creation_time": 1700000000000},
                         {"color": "blue", "nested": {"no": 1}})
    selector = parse("JMSMessageID = 'ID:1' AND JMSPriority = 4 AND JMSDeliveryMode = 'PERSISTENT' AND "
                     "JMSType = 'car' AND JMSXUserID = 'alice' AND JMSTimestamp > 0 AND color = 'blue' "
                     "AND nested IS NULL AND JMSCorrelationID IS NULL")
    assert selector.matches(lookup)
    assert parse("JMSDeliveryMode = 'NON_PERSISTENT'").matches(amqp_lookup({}, None))
