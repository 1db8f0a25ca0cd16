"""The fuzz campaign (issue 10): coverage-guided fuzzing of the router and the broker, in-process.

Targets (``python -m tools.fuzz --list``), each run against the real code in this process:

* ``frames-router``, ``frames-broker`` — mutated client byte streams (protocol header, SASL, OPEN, BEGIN,
  ATTACH, TRANSFER ...) into a server-side engine of a live Router / Broker;
* ``messages-router``, ``messages-broker`` — mutated message sections sent as one delivery through a live
  Router / Broker to a consumer;
* ``mgmt-router``, ``mgmt-broker`` — mutated ``$management`` requests to the agents of a live Router / Broker;
* ``mesh`` — mutated inter-router control messages (HELLO, RA, LSU, LSR, MAU, MAR) into a RoutingEngine;
* ``config-router``, ``config-broker`` — mutated qdrouterd.conf and broker.xml text into the parsers;
* ``sasl-server`` — mutated client SASL streams into the server-side SASL layer with a users file;
* ``sasl-files``, ``broker-properties`` — mutated users files, Cyrus SASL configuration files and
  artemis-users/roles.properties into their parsers;
* ``tls-handshake`` — mutated ClientHellos and client handshake flights into a TLS listener's handshake
  (issue 12, :mod:`tools.fuzz.targets_security`).

Each target states its properties in its module docstring (:mod:`tools.fuzz.targets_amqp`,
:mod:`tools.fuzz.targets_misc`, :mod:`tools.fuzz.targets_security`). The engine is atheris (libFuzzer,
coverage-guided over the ``wire``, ``router`` and ``broker`` packages); without atheris a plain random
mutator (``--engine random``) runs the same targets, without coverage guidance. Each target runs in its own subprocess
(:mod:`tools.fuzz.worker`), so that a crash, a hang or runaway memory ends one target, not the campaign.

Long run (documented in docs/robustness.md)::

    python -m tools.fuzz --target all --seconds 600 --corpus build/fuzz/corpus --crashes build/fuzz/crashes

Every distinct failure is saved once as ``<crashes>/<target>-<hash>.bin`` (the input) with a ``.txt``
(the property that failed and the traceback); ``python -m tools.fuzz --replay FILE --target NAME`` runs
one input again and ``--minimize`` shrinks it while it still fails the same way.

Nothing here imports the code under test at import time: the worker must import it inside atheris'
instrumentation.
"""

from __future__ import annotations

#: target name -> "module:attribute" of the target object (imported only in the worker)
TARGETS = {
    "frames-router": "tools.fuzz.targets_amqp:FRAMES_ROUTER",
    "frames-broker": "tools.fuzz.targets_amqp:FRAMES_BROKER",
    "messages-router": "tools.fuzz.targets_amqp:MESSAGES_ROUTER",
    "messages-broker": "tools.fuzz.targets_amqp:MESSAGES_BROKER",
    "mgmt-router": "tools.fuzz.targets_misc:MGMT_ROUTER",
    "mgmt-broker": "tools.fuzz.targets_misc:MGMT_BROKER",
    "mesh": "tools.fuzz.targets_misc:MESH",
    "config-router": "tools.fuzz.targets_misc:CONFIG_ROUTER",
    "config-broker": "tools.fuzz.targets_misc:CONFIG_BROKER",
    "sasl-server": "tools.fuzz.targets_security:SASL_SERVER",
    "sasl-files": "tools.fuzz.targets_security:SASL_FILES",
    "broker-properties": "tools.fuzz.targets_security:BROKER_PROPERTIES",
    "tls-handshake": "tools.fuzz.targets_security:TLS_HANDSHAKE",
}


def load_target(name: str):
    """The target object called ``name`` (imports its module and, through it, the code under test)."""
    import importlib

    module, _, attr = TARGETS[name].partition(":")
    return getattr(importlib.import_module(module), attr)
