"""Seed inputs: real, well-formed inputs of every target, which the fuzzer mutates.

Client byte streams are recorded from a proton client talking to a live Router or Broker (so they are
exactly what a real client sends: protocol header, SASL init, OPEN, BEGIN, ATTACH, FLOW, TRANSFER,
DISPOSITION, DETACH, END, CLOSE); messages, management requests and control messages come from the
project's own encoders; configurations from the shipped examples.
"""

from __future__ import annotations

import pathlib

import proton

REPO = pathlib.Path(__file__).resolve().parents[2]


# -- client streams ----------------------------------------------------------------------------------

def _record(kind: str, script, *, sasl: bool = True, max_frame: int | None = None) -> bytes:
    from tools.fuzz.harness import Client, close, pump
    from tools.fuzz.targets_amqp import World

    world = World(kind)
    client = Client(sasl=sasl)
    if max_frame:
        client.transport.max_frame_size = max_frame
    engine = world.engine("seed")
    script(client, lambda: pump(client, engine))
    close(client, engine)
    return client.sent


def _send_one(client, pump) -> None:
    snd = client.sender("fuzz.q")
    pump()
    client.send(snd, proton.Message(address="fuzz.q", id=1, body="hello", durable=True,
                                    properties={"k": "v"}).encode())
    pump()


def _send_and_receive(client, pump) -> None:
    rcv = client.receiver("fuzz.probe", credit=5)
    snd = client.sender("fuzz.probe")
    pump()
    client.send(snd, proton.Message(body={"a": [1, 2.5, None]}, subject="s").encode())
    pump()
    client.receive(rcv)
    pump()
    rcv.close()
    snd.detach()
    pump()


def _large(client, pump) -> None:
    client.receiver("fuzz.q", credit=2)  # a consumer, so that a router grants credit
    snd = client.sender("fuzz.q")
    pump()
    client.send(snd, proton.Message(body=b"x" * 3000).encode())
    pump()


def _anonymous(client, pump) -> None:
    snd = client.sender(None)
    pump()
    client.send(snd, proton.Message(address="fuzz.q", body="to").encode())
    pump()


def _management(client, pump) -> None:
    from wire import management as wm

    rcv = client.session.receiver("reply")
    rcv.source.dynamic = True
    rcv.open()
    rcv.flow(5)
    snd = client.sender("$management")
    pump()
    reply_to = rcv.remote_source.address or "reply"
    client.send(snd, wm.build_request("QUERY", reply_to=reply_to, correlation_id=1,
                                      body={"attributeNames": []}))
    pump()
    client.receive(rcv)
    pump()


def _session_churn(client, pump) -> None:
    for _ in range(2):
        ssn = client.connection.session()
        ssn.open()
        pump()
        ssn.close()
        pump()


def client_streams(kind: str) -> list[bytes]:
    streams = [
        _record(kind, _send_one),
        _record(kind, _send_one, sasl=False),
        _record(kind, _send_and_receive),
        _record(kind, _large, max_frame=512),
        _record(kind, _management),
        _record(kind, _session_churn),
    ]
    if kind == "router":
        streams.append(_record(kind, _anonymous))
    return streams


# -- messages ----------------------------------------------------------------------------------------

def messages(address: str) -> list[bytes]:
    """Encoded messages with every section, for the messages targets (first byte: the path to take)."""
    full = proton.Message(address=address, id="m1", correlation_id=proton.ulong(7), reply_to="r", subject="s",
                          user_id=b"u", content_type="text/plain", durable=True, priority=6, ttl=5.0,
                          first_acquirer=True, delivery_count=2, group_id="g", group_sequence=3,
                          annotations={proton.symbol("x-opt-a"): "b", proton.symbol("x-opt-qd.trace"): ["R"]},
                          instructions={proton.symbol("x-opt-i"): 1},
                          properties={"k": "v", "n": 5, "f": 1.5}, body={"key": ["v", 1, True, None]})
    plain = proton.Message(address=address, body="hello")
    binary = proton.Message(address=address, body=b"\x00\x01payload", inferred=True)
    seq = proton.Message(address=address, body=[1, "two", [3]], inferred=True)
    footer = proton.Message(address=address, body="f")
    footer.footer = {proton.symbol("x-f"): 1}
    out = []
    for m in (full, plain, binary, seq, footer):
        data = bytes(m.encode())
        out.append(b"\x00" + data)  # targeted link
        out.append(b"\x01" + data)  # anonymous link (routed by properties.to)
    return out


# -- management ----------------------------------------------------------------------------------------

def management_requests(kind: str) -> list[bytes]:
    from wire import management as wm

    reqs = []

    def add(op, **kw):
        reqs.append(wm.build_request(op, reply_to="fuzz.reply", correlation_id=len(reqs) + 1, **kw))

    for op in ("GET-TYPES", "GET-ATTRIBUTES", "GET-OPERATIONS", "GET-MGMT-NODES", "GET-SCHEMA"):
        add(op)
    if kind == "router":
        for t in ("router", "connection", "router.link", "router.address", "router.node", "allocator",
                  "listener", "connector", "router.config.address", "router.config.linkRoute",
                  "router.config.autoLink", "log"):
            add("QUERY", entityType="org.apache.qpid.dispatch." + t, body={"attributeNames": []})
        add("QUERY", body={"attributeNames": ["name", "identity", "type"]}, offset=1, count=3)
        add("READ", name="self")
        add("READ", type="log", name="log/DEFAULT")
        add("CREATE", type="router.config.address", name="a1", body={"prefix": "p1", "distribution": "multicast"})
        add("CREATE", type="router.config.linkRoute", name="lr1",
            body={"prefix": "lr", "direction": "in", "connection": "broker"})
        add("CREATE", type="router.config.autoLink", name="al1",
            body={"address": "q", "direction": "out", "connection": "broker", "phase": 0})
        add("CREATE", type="listener", name="l1", body={"host": "127.0.0.1", "port": "0"})
        add("UPDATE", type="log", name="log/ROUTER", body={"enable": "debug+"})
        add("UPDATE", type="connection", identity="1", body={"adminStatus": "enabled"})
        add("UPDATE", type="router.link", identity="1", body={"adminStatus": "disabled"})
        add("DELETE", type="router.config.address", name="a1")
    else:
        for t in ("queue", "address", "brokerConnection"):
            add("QUERY", entityType="org.apache.activemq.artemis." + t, body={"attributeNames": []})
        add("READ", type="queue", name="fuzz.q")
        add("CREATE", type="queue", name="made", body={"address": "made", "routingType": "anycast",
                                                       "durable": False})
        add("PURGE", type="queue", name="made")
        add("DELETE", type="queue", name="made")
        add("startBrokerConnection", type="brokerConnection", name="nope")
    return reqs


# -- inter-router control messages -------------------------------------------------------------------------

def control_messages() -> list[bytes]:
    from router.mesh import messages as M

    ls = M.LinkState("A", 3, {"FUZZ": 1, "B": 2})
    msgs = [
        (M.Hello("A", 11, ["FUZZ"]), "amqp:/_local/qdhello"),
        (M.RouterAdvertisement("A", 11, 3, 2), "amqp:/_topo/0/all/qdrouter"),
        (M.LinkStateRequest("A"), "amqp:/_topo/0/FUZZ/qdrouter"),
        (M.LinkStateUpdate("A", 11, 3, ls), "amqp:/_topo/0/FUZZ/qdrouter"),
        (M.MobileAddressUpdate("A", 2, add=["M0q", "M0r"], delete=["M0gone"], hints=[0, 1]),
         "amqp:/_topo/0/all/qdrouter.ma"),
        (M.MobileAddressUpdate("A", 4, exist=["M0q"], hints=[0]), "amqp:/_topo/0/FUZZ/qdrouter.ma"),
        (M.MobileAddressRequest("A", 0), "amqp:/_topo/0/FUZZ/qdrouter.ma"),
    ]
    out = [M.encode(m, to) for m, to in msgs]
    out.append(M.encode(M.RouterAdvertisement("B", 5, 1, 1), "amqp:/_topo/0/all/qdrouter",
                        ingress="B", trace=["B", "A"]))
    return out


# -- configurations ------------------------------------------------------------------------------------------

def router_configs() -> list[bytes]:
    files = sorted((REPO / "conf").glob("*.conf")) + sorted((REPO / "conf" / "mesh").glob("*.conf"))
    out = [f.read_bytes() for f in files if f.is_file()]
    out.append(b"""router {
    mode: interior
    id: R.fuzz
}
listener {
    host: 0.0.0.0
    port: amqp
    role: normal
    saslMechanisms: ANONYMOUS
}
address {
    pattern: a.*.#
    distribution: balanced
}
linkRoute {
    prefix: lr
    direction: in
    connection: broker
}
autoLink {
    address: q
    direction: out
    connection: broker
}
log {
    module: DEFAULT
    enable: info+
}
connector {
    name: broker
    host: 127.0.0.1
    port: 5673
    role: route-container
    openProperties: {
        "k": "v"
    }
}
""")
    return out


def broker_configs() -> list[bytes]:
    out = [f.read_bytes() for f in sorted((REPO / "conf").glob("*.xml"))]
    from tools.fuzz.targets_amqp import BROKER_XML

    out.append(BROKER_XML.encode())
    return out


# -- security (issue 12) -----------------------------------------------------------------------------

def _sasl_exchange(client_side, server) -> bytes:
    """Run ``client_side`` (object with feed/take_output) against ``server`` until quiet; the client's bytes."""
    sent = b""
    for _ in range(50):
        out = client_side.take_output() or b""
        sent += out
        if out:
            server.feed(out)
        back = server.take_output()
        if back:
            client_side.feed(back)
        if not out and not back:
            break
    return sent


class _ProtonSaslClient:
    """A proton client transport that logs in with ``mechanism`` (the bytes a real proton client sends)."""

    def __init__(self, mechanism: str, user: str | None = None, password: str | None = None):
        self.connection = proton.Connection()
        self.connection.container = "fuzz-seed"
        if user is not None:
            self.connection.user = user
            self.connection.password = password
        self.transport = proton.Transport(proton.Transport.CLIENT)
        sasl = self.transport.sasl()
        sasl.allowed_mechs(mechanism)
        if mechanism == "PLAIN":
            self.transport.require_encryption(False)
            sasl.allow_insecure_mechs = True
        self.transport.bind(self.connection)
        self.connection.open()

    def take_output(self) -> bytes:
        p = self.transport.pending()
        if p <= 0:
            return b""
        data = bytes(self.transport.peek(p))
        self.transport.pop(p)
        return data

    def feed(self, data: bytes) -> None:
        if self.transport.capacity() > 0:
            self.transport.push(data[:self.transport.capacity()])


def sasl_client_streams() -> list[bytes]:
    """Client SASL streams recorded against the server layer: proton's PLAIN, ANONYMOUS and EXTERNAL
    clients, our SCRAM-SHA-256/512 client (wire.sasl.SaslClient) for a known user with a wrong password
    and for an unknown user, plus the frames a client builds by hand (PLAIN without an initial
    response, an AMQP header where SASL is wanted)."""
    from tools.fuzz.targets_security import EXTERNAL_NAME, SEED_PASSWORD, make_users
    from wire.sasl import SaslClient
    from wire.saslserver import (AMQP_HEADER, SASL_HEADER, SASL_INIT, SASL_RESPONSE, SUPPORTED_MECHANISMS,
                                 SaslServer, encode_frame)
    from wire.amqptypes import Symbol

    users = make_users()

    def server():
        return SaslServer(users, SUPPORTED_MECHANISMS, allow_anonymous=True, external_user=EXTERNAL_NAME)

    out = [_sasl_exchange(_ProtonSaslClient("PLAIN", "alice", SEED_PASSWORD), server()),
           _sasl_exchange(_ProtonSaslClient("PLAIN", "nobody", SEED_PASSWORD), server()),
           _sasl_exchange(_ProtonSaslClient("ANONYMOUS"), server()),
           _sasl_exchange(_ProtonSaslClient("EXTERNAL"), server())]
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        for user in ("alice", "nobody"):
            out.append(_sasl_exchange(SaslClient(user, SEED_PASSWORD, [mech]), server()))
    out.append(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN")])
               + encode_frame(SASL_RESPONSE, [b"\0bob\0" + SEED_PASSWORD.encode()]))
    out.append(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("PLAIN"), b"admin\0bob\0x"]))
    out.append(SASL_HEADER + encode_frame(SASL_INIT, [Symbol("SCRAM-SHA-256"), b"n,a=bob,n=alice,r=abc"]))
    out.append(AMQP_HEADER + b"\0\0\0\x08\x02\0\0\0")
    return [s for s in out if s]


def sasl_files() -> list[bytes]:
    """A users file written by wire.users, the shipped Cyrus SASL configuration, and variants naming the
    users file and a Berkeley DB file (see targets_security.SaslFilesTarget.setup)."""
    from tools.fuzz.targets_security import _seed_users_text

    out = [_seed_users_text().encode()]
    out += [f.read_bytes() for f in sorted((REPO / "conf").glob("*/qdrouterd.conf"))]
    out.append(b"# Cyrus SASL\nmech_list: SCRAM-SHA-256 PLAIN\nsasldb_path: fuzz.users\npwcheck_method: auxprop\n"
               b"auxprop_plugin: sasldb\n")
    out.append(b"mech_list: ANONYMOUS EXTERNAL\n")
    out.append(b"mech_list: PLAIN\nsasldb_path: sasldb2\n")
    return out


def broker_properties() -> list[bytes]:
    """artemis-users.properties, a NUL line, artemis-roles.properties (targets_security.BrokerPropertiesTarget)."""
    from tools.fuzz.targets_security import _seed_users_text

    hashed = _seed_users_text().splitlines()[-1].split(None, 1)
    out = []
    for d in sorted((REPO / "conf").glob("*")):
        u, r = d / "artemis-users.properties", d / "artemis-roles.properties"
        if u.exists():
            out.append(u.read_bytes() + b"\n\0\n" + (r.read_bytes() if r.exists() else b""))
    out.append(f"# users\nadmin = secret\n! comment\nguest: guest\n{hashed[0]} = ENC({hashed[1]})\n".encode()
               + b"\n\0\n" + b"amq = admin\nviewers = guest, bob, nobody\n")
    return out


def tls_client_flights(directory: str) -> list[bytes]:
    """What real TLS clients (Python's ssl, OpenSSL) send a listener: the ClientHello of TLS 1.3 and of
    TLS 1.2, and every byte of complete handshakes with and without a client certificate, recorded
    against the target's own server context (targets_security.TlsHandshakeTarget)."""
    import ssl

    from tools.fuzz.targets_security import _tls_contexts, _tls_files

    paths = _tls_files(directory)
    out = []
    for version in (ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2):
        for server_ctx in _tls_contexts(directory):
            client_ctx = ssl.create_default_context(cafile=paths["ca"])
            client_ctx.maximum_version = version
            client_ctx.load_cert_chain(paths["client"])
            out.append(_tls_exchange(client_ctx, server_ctx))
    out.append(out[0][:out[0][3] * 256 + out[0][4] + 5])  # the TLS 1.3 ClientHello alone
    return out


def _tls_exchange(client_ctx, server_ctx) -> bytes:
    """Every byte the client sends in a handshake between two in-memory SSLObjects."""
    import ssl

    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_ctx.wrap_bio(c_in, c_out, server_hostname="localhost")
    server = server_ctx.wrap_bio(s_in, s_out, server_side=True)
    sent = b""
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
        data = c_out.read()
        sent += data
        s_in.write(data)
        c_in.write(s_out.read())
    return sent
