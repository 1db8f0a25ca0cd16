"""``tdflow``: the flow-record pipeline on PySpark (report, audit) and the synthetic record generator.

See docs/flowrecords.md for the record schema. ``tools.tdflow.cli`` is the command line; the Spark work
is in ``pipeline`` (DataFrame operations only) and ``report``; ``generate`` writes synthetic records with
known faults.
"""
