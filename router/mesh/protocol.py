"""The vocabulary of the Qpid Dispatch 1.x inter-router protocol, in one place (Qpid Dispatch 1.19:
src/amqp.c, src/router_core/connections.c, python/qpid_dispatch_internal/router/,
modules/mobile_sync/mobile.c): control addresses and opcodes, link capabilities, OPEN properties, address
hints and key classes, and the default routing timers.

The data plane (router/core.py's OPEN properties, router/interrouter.py's links, router/meshforward.py),
the control plane (:mod:`router.mesh.messages`, :mod:`router.mesh.engine`) and the configuration schema
(router/schema.py) import these names rather than spell them again. Two neighbouring facts live elsewhere
because they are not the inter-router protocol's own: a message's default priority is AMQP's (4, AMQP 1.0
§3.2.1: ``wire.header.DEFAULT_PRIORITY``), and the router annotation keys (``x-opt-qd.*``) belong to
their codec, ``wire.annotations``, which the broker's side of wire/ shares.
"""

from __future__ import annotations

#: The routing protocol version this engine speaks; messages with a higher ``pv`` are ignored.
PROTOCOL_VERSION = 1
#: Dispatch's area is an unused placeholder, always "0".
DEFAULT_AREA = "0"

# -- control addresses (properties.to of control messages) ---------------------------------------
HELLO_NODE = "_local/qdhello"                        # one hop, to each neighbour
HELLO_ADDRESS = "amqp:/" + HELLO_NODE
ALL_ROUTERS_ADDRESS = "amqp:/_topo/0/all/qdrouter"   # flooded: RA
ALL_ROUTERS_MA_ADDRESS = "amqp:/_topo/0/all/qdrouter.ma"  # flooded: differential MAU
CONTROL_NODE = "qdrouter"
CONTROL_NODE_MA = "qdrouter.ma"


def router_address(router_id: str, area: str = DEFAULT_AREA) -> str:
    """Unicast control address of one router (LSR, LSU)."""
    return f"amqp:/_topo/{area}/{router_id}/{CONTROL_NODE}"


def router_ma_address(router_id: str, area: str = DEFAULT_AREA) -> str:
    """Unicast mobile-address control address of one router (MAR, absolute MAU)."""
    return f"amqp:/_topo/{area}/{router_id}/{CONTROL_NODE_MA}"


def management_address(router_id: str, area: str = DEFAULT_AREA) -> str:
    """The router's management node as listed in ``router.node``."""
    return f"amqp:/_topo/{area}/{router_id}/$management"


# -- opcodes (application-properties {"opcode": ...}) ---------------------------------------------
OPCODE_KEY = "opcode"
HELLO = "HELLO"
RA = "RA"
LSR = "LSR"
LSU = "LSU"
MAU = "MAU"
MAR = "MAR"
OPCODES = (HELLO, RA, LSR, LSU, MAU, MAR)

# -- link capabilities and OPEN properties --------------------------------------------------------
CAP_ROUTER_CONTROL = "qd.router"          # the control link pair of an inter-router connection
CAP_ROUTER_DATA = "qd.router-data"        # the data links, one per priority
#: OPEN properties a router sends. ``product`` names the implementation and is informational: Dispatch
#: recognises an inter-router or edge connection by the listener's role and the link capabilities above,
#: never by product (a real qdrouterd 1.19 meshes with a router whose product is ``trio-dispatch``).
OPEN_PRODUCT = "product"
OPEN_VERSION = "version"
OPEN_COST = "qd.inter-router-cost"        # sent only when the connection's cost is > 1
OPEN_ANNOTATIONS_VERSION = "qd.annotations-version"
ANNOTATIONS_VERSION = 1
#: OPEN property and link property keys starting with this are the router's (configuration refuses them
#: in a listener's or connector's openProperties).
RESERVED_PROPERTY_PREFIX = "qd."
#: Priority data links per inter-router connection (one per priority 0..9).
DATA_LINK_PRIORITIES = 10

#: A connection that claims a router id already in use in the mesh is closed with this AMQP error
#: condition (AMQP 1.0 §2.8.15: the peer used the connection in a way this router does not permit) and
#: a description starting with DUPLICATE_ID_REASON, which the refused router recognises and logs.
DUPLICATE_ID_CONDITION = "amqp:not-allowed"
DUPLICATE_ID_REASON = "duplicate router id"

# -- treatment hints carried in MAU `hints` (Dispatch's qd_address_treatment_t) -------------------
HINT_MULTICAST_FLOOD = 0
HINT_MULTICAST_ONCE = 1
HINT_ANYCAST_CLOSEST = 2
HINT_ANYCAST_BALANCED = 3
HINT_LINK_BALANCED = 4
HINT_UNAVAILABLE = 5
HINT_DISTRIBUTIONS = {
    HINT_MULTICAST_FLOOD: "multicast",
    HINT_MULTICAST_ONCE: "multicast",
    HINT_ANYCAST_CLOSEST: "closest",
    HINT_ANYCAST_BALANCED: "balanced",
    HINT_LINK_BALANCED: "balanced",
    HINT_UNAVAILABLE: "unavailable",
}

#: Address-key classes that mobile address sync carries (Qpid Dispatch 1.19 mobile_sync/mobile.c): mobile
#: (M), link-route prefixes (C, D), link-route patterns (E, F) and edge (H).
SYNCED_KEY_CLASSES = frozenset("MCDEFH")

# -- timer defaults (whole seconds: the `router` entity's helloIntervalSeconds, helloMaxAgeSeconds,
# raIntervalSeconds, raIntervalFluxSeconds and remoteLsMaxAgeSeconds; Qpid Dispatch 1.19 qdrouter.json) --
HELLO_INTERVAL = 1
HELLO_MAX_AGE = 3
RA_INTERVAL = 30
RA_INTERVAL_FLUX = 4
REMOTE_LS_MAX_AGE = 60

#: Dispatch's neighbour bitmask holds 128 routers (bit 0 is self); a larger mesh cannot be represented
#: by a 1.x peer, so the engine refuses to track more nodes than this.
MAX_ROUTERS = 128


def is_synced_key(key: str) -> bool:
    """True for address keys that mobile address sync propagates."""
    return bool(key) and key[0] in SYNCED_KEY_CLASSES
