"""The flow-record schema as Spark reads it (explicit, never inferred) and the event vocabulary."""

from __future__ import annotations

# Events on the way to the consumer, in the order a message meets them; the settlement events travel back.
FORWARD_EVENTS = ("sent", "ingress", "egress", "store", "deliver", "received")
SETTLE_EVENTS = ("settle", "settled")
OUTCOMES = ("accepted", "rejected", "released", "modified")
# An outcome telling the producer its message was not delivered: such a message is "returned", not lost.
RETURNED_OUTCOMES = ("released", "modified", "rejected")

# (name, Spark type name) in record order; conn and link are strings because nodes use ints or names.
FIELDS = (
    ("ts", "long"),
    ("node", "string"),
    ("event", "string"),
    ("conn", "string"),
    ("link", "string"),
    ("address", "string"),
    ("phase", "int"),
    ("mid", "string"),
    ("outcome", "string"),
    ("size", "long"),
    ("trace", "array<string>"),
)


def record_schema():
    """The StructType used to read record files (pyspark imported here, so the module stays light)."""
    from pyspark.sql import types as T

    simple = {"long": T.LongType(), "string": T.StringType(), "int": T.IntegerType()}
    fields = []
    for name, kind in FIELDS:
        dtype = T.ArrayType(T.StringType()) if kind == "array<string>" else simple[kind]
        fields.append(T.StructField(name, dtype, True))
    return T.StructType(fields)
