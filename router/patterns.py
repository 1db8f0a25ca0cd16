"""Address and link-route pattern table.

Addresses are split into tokens on ``.`` and ``/`` (the two separators are
interchangeable; empty tokens from leading, trailing or doubled separators are
ignored).  In a pattern ``*`` matches exactly one token and ``#`` matches zero
or more tokens; any other token matches itself.  A *prefix* ``p`` is the
pattern ``p/#``: it matches ``p`` and ``p`` followed by more tokens, but not
``p1``.

Patterns are kept in a token trie.  Lookup walks it depth-first trying, at
each node, the exact-token child, then the ``*`` child, then the ``#`` child
(which first hands zero, then one, two ... tokens to its own children and only
then matches the whole rest itself).  The first pattern reached is the best
match, so ``a/b/#`` beats ``a/#`` for ``a/b/c`` and ``a/*`` beats ``a/#`` for
``a/b``.  The cost depends on the address's tokens, not on the number of
patterns stored.
"""

from __future__ import annotations

import re
from typing import Generic, Iterator, TypeVar

V = TypeVar("V")

_SEPARATORS = re.compile(r"[./]+")
STAR = "*"
HASH = "#"
_WILDCARDS = (STAR, HASH)


def tokens(address: str) -> list[str]:
    """Split *address* on ``.`` and ``/``, dropping empty tokens."""
    return [t for t in _SEPARATORS.split(address) if t]


def _normalise_tokens(toks: list[str]) -> list[str]:
    """Apply ``#.#`` -> ``#`` and ``#.*`` -> ``*.#`` until nothing changes."""
    out = list(toks)
    changed = True
    while changed:
        changed = False
        i = 0
        while i < len(out) - 1:
            if out[i] == HASH and out[i + 1] == HASH:
                del out[i + 1]
                changed = True
            elif out[i] == HASH and out[i + 1] == STAR:
                out[i], out[i + 1] = STAR, HASH
                changed = True
                i += 1
            else:
                i += 1
    return out


def validate_pattern(pattern: str) -> list[str]:
    """Tokens of *pattern*; ValueError if a token mixes a wildcard with other text."""
    toks = tokens(pattern)
    for t in toks:
        if t not in (STAR, HASH) and (STAR in t or HASH in t):
            raise ValueError(
                f"pattern {pattern!r}: token {t!r} mixes a wildcard with other characters "
                "('*' and '#' must be whole tokens)"
            )
    return toks


def normalise_pattern(p: str) -> str:
    """Canonical form of pattern *p*: '/'-separated tokens, ``#.#`` -> ``#``, ``#.*`` -> ``*.#``."""
    return "/".join(_normalise_tokens(tokens(p)))


def prefix_pattern(prefix: str) -> str:
    """The pattern a prefix stands for (``p`` -> ``p/#``)."""
    return normalise_pattern(prefix + "/" + HASH)


class _Node:
    __slots__ = ("children", "has_value", "value", "pattern")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.has_value = False
        self.value = None
        self.pattern = ""


class PatternTable(Generic[V]):
    """Token trie: lookup cost is proportional to the address's token count, not to the number of patterns."""

    def __init__(self) -> None:
        self._root = _Node()
        self._count = 0

    # -- update --------------------------------------------------------

    def _path(self, pattern: str) -> list[str]:
        return _normalise_tokens(validate_pattern(pattern))

    def add(self, pattern: str, value: V) -> None:
        """Store *value* under *pattern*; ValueError if the (normalised) pattern is present."""
        toks = self._path(pattern)
        node = self._root
        for t in toks:
            nxt = node.children.get(t)
            if nxt is None:
                nxt = node.children[t] = _Node()
            node = nxt
        canon = "/".join(toks)
        if node.has_value:
            raise ValueError(f"duplicate pattern {pattern!r} (normalised {canon!r})")
        node.has_value, node.value, node.pattern = True, value, canon
        self._count += 1

    def add_prefix(self, prefix: str, value: V) -> None:
        """Store *value* for every address equal to *prefix* or starting with ``prefix.``/``prefix/``."""
        self.add(prefix + "/" + HASH, value)

    def remove(self, pattern: str) -> V:
        """Remove and return the value stored under *pattern*; KeyError if absent."""
        try:
            toks = self._path(pattern)
        except ValueError:
            raise KeyError(pattern) from None
        trail = [self._root]
        for t in toks:
            nxt = trail[-1].children.get(t)
            if nxt is None:
                raise KeyError(pattern)
            trail.append(nxt)
        node = trail[-1]
        if not node.has_value:
            raise KeyError(pattern)
        value = node.value
        node.has_value, node.value, node.pattern = False, None, ""
        self._count -= 1
        # prune nodes that no longer lead anywhere
        for depth in range(len(toks), 0, -1):
            n = trail[depth]
            if n.has_value or n.children:
                break
            del trail[depth - 1].children[toks[depth - 1]]
        return value

    def remove_prefix(self, prefix: str) -> V:
        return self.remove(prefix + "/" + HASH)

    # -- queries -------------------------------------------------------

    def _walk(self, node: _Node, toks: list[str], i: int) -> Iterator[_Node]:
        """Nodes with values that match toks[i:] below *node*, best first."""
        n = len(toks)
        children = node.children
        if i == n:
            if node.has_value:
                yield node
        else:
            tok = toks[i]
            child = children.get(tok) if tok not in _WILDCARDS else None
            if child is not None:
                yield from self._walk(child, toks, i + 1)
            child = children.get(STAR)
            if child is not None:
                yield from self._walk(child, toks, i + 1)
        child = children.get(HASH)
        if child is not None:
            yield from self._walk_hash(child, toks, i)

    def _walk_hash(self, node: _Node, toks: list[str], i: int) -> Iterator[_Node]:
        """*node* is a '#': let it swallow 0, 1, ... tokens before its children, then all of them."""
        n = len(toks)
        if node.children:
            for j in range(i, n):
                tok = toks[j]
                child = node.children.get(tok) if tok not in _WILDCARDS else None
                if child is not None:
                    yield from self._walk(child, toks, j + 1)
                child = node.children.get(STAR)
                if child is not None:
                    yield from self._walk(child, toks, j + 1)
        if node.has_value:
            yield node

    def lookup(self, address: str) -> V | None:
        """Value of the best matching pattern, or None."""
        for node in self._walk(self._root, tokens(address), 0):
            return node.value
        return None

    def lookup_pattern(self, address: str) -> tuple[str, V] | None:
        """(normalised pattern, value) of the best match, or None."""
        for node in self._walk(self._root, tokens(address), 0):
            return node.pattern, node.value
        return None

    def matches(self, address: str) -> list[V]:
        """Values of every matching pattern, best first (each pattern once)."""
        seen: set[int] = set()
        out: list[V] = []
        for node in self._walk(self._root, tokens(address), 0):
            if id(node) not in seen:
                seen.add(id(node))
                out.append(node.value)
        return out

    def get(self, pattern: str, default: V | None = None) -> V | None:
        """Value stored under exactly *pattern* (after normalisation)."""
        try:
            toks = self._path(pattern)
        except ValueError:
            return default
        node = self._root
        for t in toks:
            node = node.children.get(t)
            if node is None:
                return default
        return node.value if node.has_value else default

    def __contains__(self, pattern: str) -> bool:
        sentinel = object()
        return self.get(pattern, sentinel) is not sentinel  # type: ignore[arg-type]

    def __len__(self) -> int:
        return self._count

    def items(self) -> Iterator[tuple[str, V]]:
        """(normalised pattern, value) for every stored pattern."""
        stack = [self._root]
        while stack:
            node = stack.pop()
            if node.has_value:
                yield node.pattern, node.value
            stack.extend(reversed(list(node.children.values())))

    def __repr__(self) -> str:
        return f"PatternTable({dict(self.items())!r})"
