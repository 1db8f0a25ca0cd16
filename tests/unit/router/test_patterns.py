"""router.patterns: Dispatch-style prefix/pattern matching in a token trie."""

import pytest
from hypothesis import given, settings, strategies as st

from router.patterns import PatternTable, normalise_pattern, prefix_pattern, tokens

# -- the table from the Dispatch docs (address-pattern-matching) ---------------

DOC_TABLE = [
    ("news/*", ["news/europe", "news/usa"], ["news", "news/usa/sports"]),
    ("news/#", ["news", "news/europe", "news/usa/sports"], ["europe", "usa"]),
    ("news/europe/#", ["news/europe", "news/europe/sports", "news/europe/politics/fr"],
     ["news/usa", "europe"]),
    ("news/*/sports", ["news/europe/sports", "news/usa/sports"], ["news", "news/europe/fr/sports"]),
]


@pytest.mark.parametrize("pattern,yes,no", DOC_TABLE)
def test_doc_table(pattern, yes, no):
    t = PatternTable()
    t.add(pattern, pattern)
    for a in yes:
        assert t.lookup(a) == pattern, a
        assert t.lookup(a.replace("/", ".")) == pattern, a   # '.' works as well
    for a in no:
        assert t.lookup(a) is None, a
        assert t.matches(a) == [], a


def test_doc_table_all_at_once():
    t = PatternTable()
    for pattern, _, _ in DOC_TABLE:
        t.add(pattern, pattern)
    for pattern, yes, _ in DOC_TABLE:
        for a in yes:
            assert pattern in t.matches(a)


def test_tokens():
    assert tokens("a.b/c") == ["a", "b", "c"]
    assert tokens("/a//b/") == ["a", "b"]
    assert tokens("") == []
    assert tokens("...") == []


# -- prefixes ------------------------------------------------------------------

def test_prefix_semantics():
    t = PatternTable()
    t.add_prefix("my_address", 1)
    for a in ("my_address", "my_address.1", "my_address/1", "my_address/1/2", "/my_address"):
        assert t.lookup(a) == 1, a
    for a in ("my_address1", "my", "other", "x.my_address"):
        assert t.lookup(a) is None, a
    assert prefix_pattern("my_address") == "my_address/#"
    assert "my_address/#" in t
    assert list(t.items()) == [("my_address/#", 1)]


def test_multi_token_prefix_and_longest_wins():
    t = PatternTable()
    t.add_prefix("a", "short")
    t.add_prefix("a.b", "long")
    assert t.lookup("a.b.c") == "long"
    assert t.lookup("a/b") == "long"
    assert t.lookup("a.c") == "short"
    assert t.matches("a.b.c") == ["long", "short"]


def test_separators_interchangeable():
    t = PatternTable()
    t.add("a.b/*", 1)
    assert t.lookup("a/b.c") == 1
    assert t.lookup("a.b.c") == 1
    with pytest.raises(ValueError):
        t.add("a/b.*", 2)      # same pattern with other separators


# -- precedence ----------------------------------------------------------------

def test_exact_beats_star_beats_hash():
    t = PatternTable()
    t.add("a/#", "hash")
    t.add("a/*", "star")
    t.add("a/b", "exact")
    assert t.lookup("a/b") == "exact"
    assert t.matches("a/b") == ["exact", "star", "hash"]
    assert t.lookup("a/c") == "star"
    assert t.lookup("a") == "hash"
    assert t.lookup("a/c/d") == "hash"


def test_longer_literal_path_wins():
    t = PatternTable()
    t.add("a.#", "a")
    t.add("a.b.#", "ab")
    assert t.lookup("a.b.c") == "ab"
    assert t.lookup("a.b") == "ab"
    assert t.lookup("a.c") == "a"


def test_precedence_decided_at_first_difference():
    t = PatternTable()
    t.add("a/*/c", "star-then-literal")
    t.add("a/b/#", "literal-then-hash")
    # at token 2 the literal 'b' child is tried before '*'
    assert t.lookup("a/b/c") == "literal-then-hash"
    t.add("*/b/c", "leading-star")
    assert t.matches("a/b/c") == ["literal-then-hash", "star-then-literal", "leading-star"]


def test_hash_tries_fewest_tokens_first():
    t = PatternTable()
    t.add("#", "all")
    t.add("#/x", "ends-x")
    t.add("#/x/#", "has-x")
    assert t.matches("x") == ["ends-x", "has-x", "all"]
    assert t.matches("a/x/b/x") == ["has-x", "ends-x", "all"]
    assert t.lookup("") == "all"
    assert t.lookup("q") == "all"


# -- normalisation, duplicates, removal ----------------------------------------

@pytest.mark.parametrize("raw,canon", [
    ("a.#.#", "a/#"),
    ("#.#.#", "#"),
    ("a/#/*", "a/*/#"),
    ("#.*.#", "*/#"),
    ("#/#/*/*/#", "*/*/#"),
    ("#.*.b", "*/#/b"),
    ("/a.b/", "a/b"),
    ("a/*/b", "a/*/b"),
])
def test_normalise(raw, canon):
    assert normalise_pattern(raw) == canon


def test_duplicate_after_normalisation():
    t = PatternTable()
    t.add("a/#", 1)
    with pytest.raises(ValueError):
        t.add("a.#.#", 2)
    t.add("x/*/#", 3)
    with pytest.raises(ValueError):
        t.add("x/#/*", 4)
    with pytest.raises(ValueError):
        t.add_prefix("a", 5)     # prefix a == pattern a/#
    assert len(t) == 2


def test_bad_wildcard_token():
    t = PatternTable()
    with pytest.raises(ValueError):
        t.add("a/b*/c", 1)
    with pytest.raises(ValueError):
        t.add("a#", 1)


def test_remove():
    t = PatternTable()
    t.add("a/b/#", "ab")
    t.add("a/#", "a")
    t.add_prefix("q", "q")
    assert len(t) == 3
    assert t.remove("a.b.#.#") == "ab"     # normalised like add
    assert t.lookup("a/b/c") == "a"
    assert t.remove_prefix("q") == "q"
    assert t.lookup("q") is None
    with pytest.raises(KeyError):
        t.remove("a/b/#")
    with pytest.raises(KeyError):
        t.remove("a")                       # a node on a path, but no value
    with pytest.raises(KeyError):
        t.remove_prefix("nope")
    assert t.remove("a/#") == "a"
    assert len(t) == 0 and list(t.items()) == []
    assert t._root.children == {}           # pruned
    t.add("a/b/#", "again")                 # re-adding after removal is fine
    assert t.lookup("a.b") == "again"


def test_items_and_get():
    t = PatternTable()
    t.add("x.*", 1)
    t.add("#.#", 2)
    assert dict(t.items()) == {"x/*": 1, "#": 2}
    assert t.get("x/*") == 1 and t.get("#") == 2 and t.get("y") is None
    assert "#.#.#" in t and "x" not in t


def test_wildcard_chars_in_address_only_matched_by_wildcards():
    t = PatternTable()
    t.add("a/*", "star")
    assert t.lookup("a/*") == "star"
    t.add("a/#", "hash")
    assert t.lookup("a/#") == "star"
    assert t.lookup("a/#/b") == "hash"


# -- property test against a brute-force reference -----------------------------

def _alignments(p, a, i=0, j=0, key=()):
    """Every way pattern tokens p match address tokens a, as precedence keys."""
    if i == len(p):
        if j == len(a):
            yield key
        return
    tok = p[i]
    if tok == "#":
        for k in range(0, len(a) - j + 1):
            yield from _alignments(p, a, i + 1, j + k, key + ((2, k),))
    elif j < len(a):
        if tok == "*":
            yield from _alignments(p, a, i + 1, j + 1, key + ((1, 0),))
        elif tok == a[j]:
            yield from _alignments(p, a, i + 1, j + 1, key + ((0, 0),))


def _reference(patterns, address):
    """Matching patterns ordered best first: exact < '*' < '#' (fewest tokens first), per position."""
    a = tokens(address)
    keyed = []
    for p in patterns:
        keys = list(_alignments(normalise_pattern(p).split("/") if normalise_pattern(p) else [], a))
        if keys:
            keyed.append((min(keys), p))
    return [p for _, p in sorted(keyed)]


_tok = st.sampled_from(["a", "b", "c"])
_ptok = st.sampled_from(["a", "b", "c", "*", "#"])
_sep = st.sampled_from([".", "/"])


@st.composite
def _joined(draw, elem, max_size):
    toks = draw(st.lists(elem, max_size=max_size))
    out = ""
    for i, t in enumerate(toks):
        out += (draw(_sep) if i else "") + t
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_joined(_ptok, 4), max_size=8), st.lists(_joined(_tok, 5), min_size=1, max_size=6))
def test_matches_reference(patterns, addresses):
    t = PatternTable()
    stored = []
    canon = set()
    for p in patterns:
        n = normalise_pattern(p)
        if n in canon:
            with pytest.raises(ValueError):
                t.add(p, p)
            continue
        t.add(p, p)
        canon.add(n)
        stored.append(p)
    assert len(t) == len(stored)
    for address in addresses:
        want = _reference(stored, address)
        assert t.matches(address) == want, (stored, address)
        assert t.lookup(address) == (want[0] if want else None)


@settings(max_examples=200, deadline=None)
@given(_joined(_ptok, 5), st.lists(_joined(_tok, 6), min_size=1, max_size=8))
def test_normalisation_preserves_meaning(pattern, addresses):
    raw = tokens(pattern)
    canon = normalise_pattern(pattern)
    assert normalise_pattern(canon) == canon
    assert "#/#" not in canon and "#/*" not in canon
    for address in addresses:
        a = tokens(address)
        assert any(True for _ in _alignments(raw, a)) == \
            any(True for _ in _alignments(canon.split("/") if canon else [], a))
