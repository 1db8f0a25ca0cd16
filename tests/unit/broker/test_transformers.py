"""broker/transformers.py: federation transformers loaded from a Python class path, init(properties),
the bytes-in bytes-out round trip through proton, and clear ValueErrors for every way loading or
transforming can fail."""

from __future__ import annotations

import sys
import textwrap

import proton
import pytest

from broker.transformers import Transformer, TransformerConfig, apply_transformer, load_transformer

MODULE = "h5_sample_transformers"

SOURCE = '''
import proton


class Tagger:
    """Adds an application property, raises the priority and upper-cases a string body."""

    def __init__(self):
        self.properties = None

    def init(self, properties):
        self.properties = properties

    def transform(self, message):
        message.properties = dict(message.properties or {}, tagged=self.properties.get("tag", "none"))
        message.priority = 9
        message.body = message.body.upper()
        return message


class Replacer:
    """Returns a new message (no init method)."""

    def transform(self, message):
        return proton.Message(body="replaced", durable=message.durable)


class NoTransform:
    pass


class Broken:
    def transform(self, message):
        raise RuntimeError("boom")


class WrongResult:
    def transform(self, message):
        return b"bytes"


class BadInit:
    def init(self, properties):
        raise KeyError("needs key1")

    def transform(self, message):
        return message


class NeedsArgs:
    def __init__(self, required):
        pass

    def transform(self, message):
        return message


class Outer:
    class Inner:
        def transform(self, message):
            return message


not_a_class = 42
'''


@pytest.fixture
def sample_module(tmp_path, monkeypatch):
    """A transformer module written to a folder on sys.path, as a user's module would be."""
    (tmp_path / f"{MODULE}.py").write_text(textwrap.dedent(SOURCE))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    yield MODULE
    sys.modules.pop(MODULE, None)


def cfg(class_name: str, **properties) -> TransformerConfig:
    return TransformerConfig("t1", class_name, dict(properties), line=7)


def encoded(**kwargs) -> bytes:
    return bytes(proton.Message(**kwargs).encode())


def decoded(payload: bytes) -> proton.Message:
    message = proton.Message()
    message.decode(payload)
    return message


def test_colon_class_path_is_loaded_and_init_gets_the_properties(sample_module):
    t = load_transformer(cfg(f"{sample_module}:Tagger", tag="eu", other="x"))
    assert type(t).__name__ == "Tagger" and t.properties == {"tag": "eu", "other": "x"}
    assert isinstance(t, Transformer)


def test_dotted_class_path_is_accepted_too(sample_module):
    assert type(load_transformer(cfg(f"{sample_module}.Replacer"))).__name__ == "Replacer"


def test_nested_class_after_the_colon(sample_module):
    assert type(load_transformer(cfg(f"{sample_module}:Outer.Inner"))).__name__ == "Inner"


def test_init_gets_a_copy_of_the_properties(sample_module):
    config = cfg(f"{sample_module}:Tagger", tag="eu")
    t = load_transformer(config)
    t.properties["tag"] = "changed"
    assert config.properties == {"tag": "eu"}


def test_apply_round_trips_header_properties_annotations_and_body(sample_module):
    t = load_transformer(cfg(f"{sample_module}:Tagger", tag="eu"))
    payload = encoded(body="hello", durable=True, ttl=5.0, id="m-1", subject="s", properties={"k": 1},
                      annotations={"x-opt-amq-fed-hops": 1})
    out = decoded(apply_transformer(t, payload))
    assert out.body == "HELLO" and out.priority == 9
    assert out.properties == {"k": 1, "tagged": "eu"}
    assert (out.durable, out.ttl, out.id, out.subject) == (True, 5.0, "m-1", "s")
    assert out.annotations == {"x-opt-amq-fed-hops": 1}
    assert isinstance(apply_transformer(t, payload), bytes)


def test_a_transformer_may_return_a_new_message(sample_module):
    t = load_transformer(cfg(f"{sample_module}:Replacer"))
    out = decoded(apply_transformer(t, encoded(body="x", durable=True)))
    assert (out.body, out.durable) == ("replaced", True)


@pytest.mark.parametrize("class_name, words", [
    ("no_such_module_h5:Thing", ["cannot import module 'no_such_module_h5'", "PYTHONPATH"]),
    ("{m}:Missing", ["has no 'Missing'"]),
    ("{m}:NoTransform", ["has no transform(message) method"]),
    ("{m}:not_a_class", ["is not a class"]),
    ("{m}:BadInit", ["init(properties) failed", "KeyError"]),
    ("{m}:NeedsArgs", ["() failed", "TypeError"]),
    ("NoModule", ["must be written package.module:Class"]),
    (":Cls", ["must be written package.module:Class"]),
])
def test_bad_class_paths_are_value_errors_with_a_clear_message(sample_module, class_name, words):
    with pytest.raises(ValueError) as info:
        load_transformer(cfg(class_name.format(m=sample_module)))
    for word in words:
        assert word in str(info.value)


def test_a_module_that_fails_while_importing_is_a_value_error(tmp_path, monkeypatch):
    (tmp_path / "h5_broken_module.py").write_text("raise RuntimeError('import-time failure')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="importing 'h5_broken_module' failed: RuntimeError"):
        load_transformer(cfg("h5_broken_module:X"))
    sys.modules.pop("h5_broken_module", None)


def test_a_transformer_exception_is_a_value_error_naming_it(sample_module):
    t = load_transformer(cfg(f"{sample_module}:Broken"))
    with pytest.raises(ValueError, match=rf"transformer {sample_module}:Broken failed: RuntimeError: boom"):
        apply_transformer(t, encoded(body="x"))


def test_a_result_that_is_not_a_message_is_a_value_error(sample_module):
    t = load_transformer(cfg(f"{sample_module}:WrongResult"))
    with pytest.raises(ValueError, match="returned bytes, not a proton.Message"):
        apply_transformer(t, encoded(body="x"))

