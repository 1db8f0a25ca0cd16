"""Message selectors: JMS 2.0 selector syntax (JMS 2.0 specification §3.8.1, "Message selector"), as an
AMQP consumer asks for one with the ``apache.org:selector-filter:string`` source filter (AMQP Filter
Expressions, and the filter registry of ActiveMQ/Artemis/Qpid JMS).

:func:`parse` turns a selector into a :class:`Selector`; :meth:`Selector.matches` evaluates it against a
message seen through a lookup function (identifier -> value, None when absent), so the module knows nothing
of message encodings: :func:`amqp_lookup` maps the JMS header names onto AMQP sections as Qpid JMS and
Artemis do (``JMSMessageID`` is ``properties.message-id``, ``JMSPriority`` ``header.priority`` ...) and
every other identifier onto application-properties.

Semantics from the specification:

* identifiers are case-sensitive; keywords (``AND``, ``OR``, ``NOT``, ``BETWEEN``, ``IN``, ``LIKE``,
  ``ESCAPE``, ``IS``, ``NULL``, ``TRUE``, ``FALSE``) are not;
* SQL three-valued logic: a comparison with an absent (NULL) value is *unknown*, ``NOT unknown`` is
  unknown, and a message is selected only when the whole selector is TRUE;
* comparisons are between like types (numbers with numbers, exact and approximate alike; strings and
  booleans only with ``=`` and ``<>``); anything else is unknown;
* ``LIKE`` takes ``_`` (one character) and ``%`` (any run), with an optional ``ESCAPE`` character;
  ``IN`` takes a list of string literals; arithmetic ``+ - * /`` on numbers (division by zero: unknown).

The grammar is written for lark (LALR), a well-kept parser generator, instead of a hand-written parser.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Callable

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import LarkError, UnexpectedCharacters, UnexpectedToken

from wire.amqptypes import decode_value
from wire.codec import properties_fields, scan
from wire.header import read_header

#: Longest selector accepted: selectors come from clients, and parsing cost grows with length.
MAX_SELECTOR_LENGTH = 4096

_GRAMMAR = r"""
?start: or_expr
?or_expr: and_expr | or_expr _OR and_expr -> or_
?and_expr: not_expr | and_expr _AND not_expr -> and_
?not_expr: predicate | _NOT not_expr -> not_
?predicate: sum
    | sum COMP sum -> compare
    | sum _BETWEEN sum _AND sum -> between
    | sum _NOT _BETWEEN sum _AND sum -> not_between
    | sum _IN "(" strings ")" -> in_
    | sum _NOT _IN "(" strings ")" -> not_in
    | sum _LIKE STRING -> like
    | sum _LIKE STRING _ESCAPE STRING -> like_escape
    | sum _NOT _LIKE STRING -> not_like
    | sum _NOT _LIKE STRING _ESCAPE STRING -> not_like_escape
    | sum _IS _NULL -> is_null
    | sum _IS _NOT _NULL -> is_not_null
strings: STRING ("," STRING)*
?sum: product | sum ADD product -> arith
?product: unary | product MUL unary -> arith
?unary: atom | ADD unary -> sign
?atom: STRING -> string
    | FLOAT -> approx
    | INT -> exact
    | _TRUE -> true
    | _FALSE -> false
    | _NULL -> null
    | IDENT -> ident
    | "(" or_expr ")"

COMP: "<>" | "<=" | ">=" | "=" | "<" | ">"
ADD: "+" | "-"
MUL: "*" | "/"
STRING: /'([^']|'')*'/
FLOAT: /(\d+\.\d*|\.\d+)([eE][+-]?\d+)?[dDfF]?/ | /\d+[eE][+-]?\d+[dDfF]?/
INT: /\d+[lL]?/
_OR.2: /or\b/i
_AND.2: /and\b/i
_NOT.2: /not\b/i
_BETWEEN.2: /between\b/i
_IN.2: /in\b/i
_LIKE.2: /like\b/i
_ESCAPE.2: /escape\b/i
_IS.2: /is\b/i
_NULL.2: /null\b/i
_TRUE.2: /true\b/i
_FALSE.2: /false\b/i
IDENT: /[A-Za-z_$][A-Za-z0-9_$]*/
%import common.WS
%ignore WS
"""


@functools.cache
def _parser() -> Lark:
    """The selector parser, built on first use: building the LALR tables costs about 80 ms on a slow core,
    which every broker start would pay, while most brokers never see a selector."""
    return Lark(_GRAMMAR, parser="lalr", maybe_placeholders=False)


class SelectorError(ValueError):
    """A selector that is not valid JMS selector syntax (the consumer's attach is refused with it)."""


# Nodes are tuples (opcode, operands...): evaluated by _eval, never built per message.
@v_args(inline=True)
class _Build(Transformer):
    def string(self, tok: Token):
        return ("lit", tok[1:-1].replace("''", "'"))

    def exact(self, tok: Token):
        return ("lit", int(tok.rstrip("lL")))

    def approx(self, tok: Token):
        return ("lit", float(tok.rstrip("dDfF")))

    def true(self):
        return ("lit", True)

    def false(self):
        return ("lit", False)

    def null(self):
        return ("lit", None)

    def ident(self, tok: Token):
        return ("id", str(tok))

    def sign(self, op: Token, operand):
        return ("neg", operand) if op == "-" else ("pos", operand)

    def arith(self, left, op: Token, right):
        return ("arith", str(op), left, right)

    def compare(self, left, op: Token, right):
        return ("cmp", str(op), left, right)

    def between(self, value, low, high):
        return ("between", value, low, high)

    def not_between(self, value, low, high):
        return ("not", ("between", value, low, high))

    def strings(self, *toks: Token):
        return tuple(t[1:-1].replace("''", "'") for t in toks)

    def in_(self, value, options):
        return ("in", value, options)

    def not_in(self, value, options):
        return ("not", ("in", value, options))

    def like(self, value, pattern: Token):
        return ("like", value, _like_regex(pattern[1:-1].replace("''", "'"), None))

    def like_escape(self, value, pattern: Token, escape: Token):
        esc = escape[1:-1].replace("''", "'")
        if len(esc) != 1:
            raise SelectorError(f"ESCAPE takes one character, not {esc!r}")
        return ("like", value, _like_regex(pattern[1:-1].replace("''", "'"), esc))

    def not_like(self, value, pattern: Token):
        return ("not", self.like(value, pattern))

    def not_like_escape(self, value, pattern: Token, escape: Token):
        return ("not", self.like_escape(value, pattern, escape))

    def is_null(self, value):
        return ("isnull", value)

    def is_not_null(self, value):
        return ("not", ("isnull", value))

    def not_(self, operand):
        return ("not", operand)

    def and_(self, left, right):
        return ("and", left, right)

    def or_(self, left, right):
        return ("or", left, right)


def _like_regex(pattern: str, escape: str | None) -> re.Pattern:
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if escape is not None and ch == escape:
            if i + 1 == len(pattern):
                raise SelectorError(f"LIKE pattern {pattern!r} ends with its escape character")
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append("." if ch == "_" else ".*" if ch == "%" else re.escape(ch))
        i += 1
    return re.compile("".join(out), re.DOTALL)


@dataclass(frozen=True)
class Selector:
    """A parsed selector; :meth:`matches` is TRUE only when the selector is TRUE for the message."""

    text: str
    tree: tuple

    def matches(self, lookup: Callable[[str], Any]) -> bool:
        return _eval(self.tree, lookup) is True


def parse(text: str) -> Selector:
    """Parse ``text``; raises :class:`SelectorError` naming what is wrong."""
    if len(text) > MAX_SELECTOR_LENGTH:
        raise SelectorError(f"selector longer than {MAX_SELECTOR_LENGTH} characters")
    try:
        tree = _Build().transform(_parser().parse(text))
    except SelectorError:
        raise
    except UnexpectedToken as exc:
        if exc.token.type == "$END":
            raise SelectorError("not a JMS selector: it ends too early") from None
        raise SelectorError(f"not a JMS selector: unexpected {str(exc.token)!r} at column {exc.column}") from None
    except UnexpectedCharacters as exc:
        raise SelectorError(f"not a JMS selector: unexpected {exc.char!r} at column {exc.column}") from None
    except LarkError as exc:
        cause = getattr(exc, "orig_exc", None)
        if isinstance(cause, SelectorError):
            raise cause from None
        raise SelectorError(f"not a JMS selector: {str(exc).splitlines()[0]}") from None
    return Selector(text, tree)


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_COMPARE = {"=": lambda a, b: a == b, "<>": lambda a, b: a != b, "<": lambda a, b: a < b,
            ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}


def _eval(node: tuple, lookup) -> Any:
    """The value of ``node``: a number, string or boolean, or None for NULL/unknown."""
    op = node[0]
    if op == "lit":
        return node[1]
    if op == "id":
        return lookup(node[1])
    if op == "and":
        left = _eval(node[1], lookup)
        if left is False:
            return False
        right = _eval(node[2], lookup)
        if right is False:
            return False
        return True if left is True and right is True else None
    if op == "or":
        left = _eval(node[1], lookup)
        if left is True:
            return True
        right = _eval(node[2], lookup)
        if right is True:
            return True
        return False if left is False and right is False else None
    if op == "not":
        value = _eval(node[1], lookup)
        return None if not isinstance(value, bool) else not value
    if op == "cmp":
        a, b = _eval(node[2], lookup), _eval(node[3], lookup)
        if a is None or b is None:
            return None
        if _number(a) and _number(b):
            return _COMPARE[node[1]](a, b)
        if type(a) is type(b) and isinstance(a, (str, bool)) and node[1] in ("=", "<>"):
            return _COMPARE[node[1]](a, b)
        return None
    if op == "between":
        v, low, high = (_eval(n, lookup) for n in node[1:])
        if not (_number(v) and _number(low) and _number(high)):
            return None
        return low <= v <= high
    if op == "in":
        v = _eval(node[1], lookup)
        return None if not isinstance(v, str) else v in node[2]
    if op == "like":
        v = _eval(node[1], lookup)
        return None if not isinstance(v, str) else node[2].fullmatch(v) is not None
    if op == "isnull":
        return _eval(node[1], lookup) is None
    if op == "arith":
        a, b = _eval(node[2], lookup), _eval(node[3], lookup)
        if not (_number(a) and _number(b)):
            return None
        sym = node[1]
        if sym == "+":
            return a + b
        if sym == "-":
            return a - b
        if sym == "*":
            return a * b
        if b == 0:
            return None
        if isinstance(a, int) and isinstance(b, int):
            # Exact operands divide as Java longs do (ActiveMQ/Artemis evaluate selectors in Java):
            # truncated toward zero, so 3 / 2 = 1 and -3 / 2 = -1 (Python's // floors).
            quotient = abs(a) // abs(b)
            return quotient if (a >= 0) == (b >= 0) else -quotient
        return a / b
    if op in ("neg", "pos"):
        v = _eval(node[1], lookup)
        if not _number(v):
            return None
        return -v if op == "neg" else v
    raise AssertionError(f"unknown selector node {op!r}")


#: JMS header names -> how Qpid JMS and Artemis carry them in AMQP (their AMQP JMS mapping).
JMS_HEADERS = {
    "JMSMessageID": "message_id", "JMSCorrelationID": "correlation_id", "JMSPriority": "priority",
    "JMSDeliveryMode": "durable", "JMSTimestamp": "creation_time", "JMSType": "subject",
    "JMSExpiration": "absolute_expiry_time", "JMSXUserID": "user_id", "JMSXGroupID": "group_id",
    "JMSXGroupSeq": "group_sequence",
}
#: AMQP's default priority (AMQP 1.0 §3.2.1), which JMS also uses.
DEFAULT_PRIORITY = 4


def amqp_lookup(fields: dict, application_properties: dict | None) -> Callable[[str], Any]:
    """A lookup over one message: ``fields`` holds the header/properties values a selector may name
    (``message_id``, ``correlation_id``, ``priority``, ``durable``, ``creation_time``, ``subject``,
    ``absolute_expiry_time``, ``user_id``, ``group_id``, ``group_sequence``), ``application_properties``
    the message's application-properties map."""
    props = application_properties or {}

    def lookup(name: str):
        field = JMS_HEADERS.get(name)
        if field is None:
            value = props.get(name)
            return value if isinstance(value, (str, int, float, bool)) else None
        value = fields.get(field)
        if field == "priority":
            return DEFAULT_PRIORITY if value is None else int(value)
        if field == "durable":
            return "PERSISTENT" if value else "NON_PERSISTENT"
        if field == "user_id" and isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", "replace")
        if value is None or isinstance(value, (str, int, float, bool)):
            return value
        return str(value)   # a uuid or binary message-id compares as its string form

    return lookup


def message_lookup(payload: bytes) -> Callable[[str], Any]:
    """A lookup over an encoded AMQP message (header, properties and application-properties decoded
    here; the body is never read). Raises wire's CodecError for a malformed message."""
    header = read_header(payload)
    (message_id, user_id, _to, subject, _reply_to, correlation_id, _ctype, _cenc, expiry, created,
     group_id, group_seq) = properties_fields(payload, 12)
    fields = {"message_id": message_id, "correlation_id": correlation_id, "priority": header.priority,
              "durable": header.durable, "creation_time": created, "subject": subject,
              "absolute_expiry_time": expiry, "user_id": user_id, "group_id": group_id,
              "group_sequence": group_seq}
    span = scan(payload).application_properties
    props = None
    if span is not None:
        described, _ = decode_value(payload, span[0])
        props = getattr(described, "value", None)
    return amqp_lookup(fields, props if isinstance(props, dict) else None)


def selector_accepts(selector: Selector) -> Callable[[Any], bool]:
    """A queue consumer's ``accepts`` (:meth:`broker.queue.Queue.add_consumer`): whether ``selector`` selects
    a queued message. A message the lookup cannot walk is not selected."""
    def accepts(msg) -> bool:
        try:
            return selector.matches(message_lookup(msg.payload))
        except ValueError:   # wire's CodecError: a malformed message matches no selector
            return False
    return accepts
