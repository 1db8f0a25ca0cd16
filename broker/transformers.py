"""Federation transformers: user code that rewrites a message on its way from one broker to another.

Artemis lets an ``<address-policy>`` or ``<queue-policy>`` name a ``<transformer>`` whose class implements
``org.apache.activemq.artemis.core.server.transformer.Transformer`` (Artemis user manual,
``federation-address.adoc``, "transformer parameters"); its ``transform()`` is called with each message
before it is federated, and ``<property key value>`` pairs configure it. tdbroker keeps the vocabulary and
takes a Python class instead of a Java one::

    <transformer name="news-transformer">
       <class-name>mycompany.transformers:NewsTransformer</class-name>
       <property key="key1" value="value1"/>
    </transformer>

The interface (:class:`Transformer`), documented for users in ``docs/federation.md``:

* ``class-name`` is ``package.module:Class`` (or ``package.module.Class``); the module must be importable
  by the Python that runs tdbroker (``PYTHONPATH``). The class is instantiated with no arguments; when it
  has an ``init(properties)`` method, that is called once with the ``<property>`` pairs as a ``dict`` of
  strings (Artemis' ``Transformer.init(Map<String, String>)``).
* ``transform(message)`` receives a :class:`proton.Message` (header fields ``durable``, ``priority``,
  ``ttl``, ``first_acquirer``, ``delivery_count``; the properties ``id``, ``subject``, ``correlation_id``
  ...; ``properties`` (application properties), ``annotations`` (message annotations), ``instructions``
  (delivery annotations) and ``body``) and returns a :class:`proton.Message`: the same one changed, or a
  new one.

Loading happens at start-up (:func:`load_transformer`): a class that cannot be imported, or has no
callable ``transform``, is a :class:`ValueError` that the configuration parser reports at the
``<transformer>``'s FILE:LINE. :func:`apply_transformer` is what the federation runtime calls per message:
bytes in, bytes out. Decoding into a :class:`proton.Message` costs an object graph per message, which the
hot-path rule allows only because the user asked for a transformer; messages of policies without one are
never decoded.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import proton


@dataclass
class TransformerConfig:
    """One ``<transformer name>``: its ``<class-name>`` and ``<property key value>`` pairs.

    ``instance`` is the loaded transformer (:func:`load_transformer`) once the configuration parser has
    loaded it at start-up, None before (or while the runtime does not apply transformers)."""

    name: str
    class_name: str
    properties: dict[str, str]
    line: int = 0
    instance: object = field(default=None, repr=False, compare=False)


@runtime_checkable
class Transformer(Protocol):
    """What a ``<class-name>`` class must provide (see the module docstring). ``init`` is optional."""

    def transform(self, message: proton.Message) -> proton.Message:
        """Return the message to federate in place of ``message``."""


def _import_class(class_name: str):
    """The class named ``package.module:Class`` or ``package.module.Class``."""
    if ":" in class_name:
        module_name, _, attr_path = class_name.partition(":")
    else:
        module_name, _, attr_path = class_name.rpartition(".")
    if not module_name or not attr_path:
        raise ValueError(f"transformer class {class_name!r} must be written package.module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"transformer class {class_name!r}: cannot import module {module_name!r}: {exc} "
                         "(the module must be on the PYTHONPATH of tdbroker)") from None
    except Exception as exc:   # the module's own code failed while importing
        raise ValueError(f"transformer class {class_name!r}: importing {module_name!r} failed: "
                         f"{type(exc).__name__}: {exc}") from None
    obj = module
    for part in attr_path.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"transformer class {class_name!r}: module {module_name!r} has no "
                             f"{attr_path!r}") from None
    return obj


def load_transformer(cfg: TransformerConfig) -> object:
    """Import, instantiate and ``init`` the transformer ``cfg`` names; ValueError with a clear message
    when that fails or the result has no callable ``transform``."""
    try:
        cls = _import_class(cfg.class_name)
    except ValueError as exc:
        raise ValueError(f"transformer {cfg.name!r}: {exc}") from None
    if not callable(cls):
        raise ValueError(f"transformer {cfg.name!r}: {cfg.class_name!r} is not a class")
    try:
        instance = cls()
    except Exception as exc:
        raise ValueError(f"transformer {cfg.name!r}: {cfg.class_name}() failed: "
                         f"{type(exc).__name__}: {exc}") from None
    if not callable(getattr(instance, "transform", None)):
        raise ValueError(f"transformer {cfg.name!r}: {cfg.class_name!r} has no transform(message) method")
    init = getattr(instance, "init", None)
    if init is not None:
        if not callable(init):
            raise ValueError(f"transformer {cfg.name!r}: {cfg.class_name}.init is not a method")
        try:
            init(dict(cfg.properties))
        except Exception as exc:
            raise ValueError(f"transformer {cfg.name!r}: {cfg.class_name}.init(properties) failed: "
                             f"{type(exc).__name__}: {exc}") from None
    return instance


def _describe(transformer) -> str:
    cls = type(transformer)
    return f"{cls.__module__}:{cls.__qualname__}"


def apply_transformer(transformer, payload: bytes) -> bytes:
    """``payload`` (an encoded AMQP message) decoded, transformed and encoded again.

    Any exception from the transformer, or a result that is not a :class:`proton.Message`, is a
    ValueError naming the transformer: the runtime treats the delivery as failed, not the connection."""
    message = proton.Message()
    try:
        message.decode(payload)
    except Exception as exc:   # proton's decoder: MessageException, DataException ...
        raise ValueError(f"transformer {_describe(transformer)}: the message does not decode: "
                         f"{type(exc).__name__}: {exc}") from None
    try:
        out = transformer.transform(message)
    except Exception as exc:
        raise ValueError(f"transformer {_describe(transformer)} failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(out, proton.Message):
        raise ValueError(f"transformer {_describe(transformer)} returned {type(out).__name__}, "
                         "not a proton.Message")
    try:
        return bytes(out.encode())
    except Exception as exc:
        raise ValueError(f"transformer {_describe(transformer)} returned a message that does not encode: "
                         f"{type(exc).__name__}: {exc}") from None
