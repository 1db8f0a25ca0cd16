"""A federation transformer for the system tests (tests/system/test_federation_features.py), loaded by the
tdbroker processes as ``tests.system.fedtransformers:SuffixTransformer`` (tdbroker runs from the repository
root with it on PYTHONPATH; the interface is broker/transformers.py's)."""

from __future__ import annotations

#: The application property the transformer sets, so a test can tell a transformed copy from the original.
TRANSFORMED_BY = "transformed-by"


class SuffixTransformer:
    """Appends the ``suffix`` property (from ``<property key="suffix" value=...>``) to a string body and marks
    the message with :data:`TRANSFORMED_BY`."""

    def __init__(self):
        self.suffix = ""

    def init(self, properties: dict) -> None:
        self.suffix = properties.get("suffix", "")

    def transform(self, message):
        if isinstance(message.body, str):
            message.body = message.body + self.suffix
        message.properties = {**(message.properties or {}), TRANSFORMED_BY: "SuffixTransformer"}
        return message
