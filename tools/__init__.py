"""Operator and developer tools shipped with trio-dispatch: tdbench, tddemo, tdstat, tdmanage, tdflow, and the
process helpers they and the system tests share (daemons.py: tdrouterd/tdbroker subprocesses; rabbitmq.py:
a private RabbitMQ node)."""
