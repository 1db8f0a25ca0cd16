"""tdbroker security configuration: TLS URI parameters with real PEM files, <security-enabled> with the
properties login module's files (artemis-users.properties, artemis-roles.properties), FILE:LINE errors."""

import ssl

import pytest
import trustme

from broker.config import BrokerConfigError, load_broker_config, parse_broker_config
from broker.security import ACCEPTOR_MECHANISMS, SecurityFileError, load_roles, load_users
from wire.tls import ClientTls, ServerTls
from wire.users import UserRecord
from tests.artemisdefaults import ARTEMIS_CREATE_SECURITY_SETTING


def core(body: str) -> str:
    return ('<configuration xmlns="urn:activemq">\n<core xmlns="urn:activemq:core">\n'
            f"{body}\n</core></configuration>\n")


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA and a server certificate for 127.0.0.1 (made now: no private key is committed)."""
    d = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    server.private_key_and_cert_chain_pem.write_to_path(str(d / "server.pem"))
    ca.cert_pem.write_to_path(str(d / "ca.pem"))
    return d


def acceptor_xml(params: str) -> str:
    return core(f'<acceptors>\n<acceptor name="tls">tcp://127.0.0.1:0?protocols=AMQP;{params}</acceptor>\n</acceptors>')


def connection_xml(uri: str) -> str:
    return core(f'<broker-connections>\n<amqp-connection uri="{uri}" name="r" user="u" password="p">'
                '<peer address-match="q"/></amqp-connection>\n</broker-connections>')


# --- TLS ----------------------------------------------------------------------------------------------------

def test_tls_acceptor_gets_a_server_context_and_relative_paths_are_read_beside_broker_xml(pki):
    xml = pki / "broker.xml"
    xml.write_text(acceptor_xml("sslEnabled=true;keyStorePath=server.pem;keyStoreType=PEM;"
                                "trustStorePath=ca.pem;needClientAuth=true;enabledProtocols=TLSv1.3"))
    acc = load_broker_config(xml).acceptors[0]
    assert isinstance(acc.tls, ServerTls) and acc.tls.required
    assert acc.tls.context.verify_mode == ssl.CERT_REQUIRED
    assert acc.tls.context.minimum_version == ssl.TLSVersion.TLSv1_3
    assert acc.params == {}   # the TLS parameters were consumed, none left to ignore


def test_tls_broker_connection_gets_a_client_context_per_uri(pki):
    ca = pki / "ca.pem"
    text = connection_xml(f"tcp://127.0.0.1:5672?sslEnabled=true;trustStorePath={ca}#tcp://127.0.0.1:5673")
    (conn,) = parse_broker_config(text, str(pki / "broker.xml")).broker_connections
    first, alternate = conn.tls
    assert isinstance(first, ClientTls) and first.context.check_hostname and alternate is None


@pytest.mark.parametrize("params,words", [
    ("sslEnabled=true;keyStorePath=missing.pem", "keyStorePath"),
    ("sslEnabled=true;keyStorePath=server.pem;trustStorePath=nope.pem", "trustStorePath"),
    ("sslEnabled=true", "needs keyStorePath"),
    ("keyStorePath=server.pem", "without sslEnabled=true"),
    ("sslEnabled=maybe;keyStorePath=server.pem", "sslEnabled"),
])
def test_tls_acceptor_errors_name_file_and_line(pki, params, words):
    xml = pki / "bad.xml"
    text = acceptor_xml(params)
    xml.write_text(text)
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert (info.value.path, info.value.line) == (str(xml), line_of(text, "<acceptor name"))
    assert words in info.value.message


def test_a_file_that_is_not_pem_is_refused_and_the_key_password_never_echoed(pki):
    junk = pki / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(acceptor_xml(f"sslEnabled=true;keyStorePath={junk};keyStorePassword=s3cret"), "b.xml")
    assert "keyStorePath" in info.value.message and "s3cret" not in str(info.value)


# --- users and roles ----------------------------------------------------------------------------------------

def test_users_file_plain_and_encoded_passwords(tmp_path):
    encoded = " ".join(UserRecord.from_password("bob", "hunter2").line().split()[1:])
    path = tmp_path / "artemis-users.properties"
    path.write_text(f"# comment\n! also a comment\n\nalice = secret\nbob=ENC({encoded})\ncarol: pa=ss\n")
    users = load_users(str(path))
    assert users.names() == ["alice", "bob", "carol"]
    assert users.check_plain("alice", "secret") and not users.check_plain("alice", "Secret")
    assert users.check_plain("bob", "hunter2") and users.check_plain("carol", "pa=ss")
    assert "secret" not in repr(users.get("alice"))


@pytest.mark.parametrize("content,line,words", [
    ("alice = a\nalice = b\n", 2, "appears twice"),
    ("\nno separator here\n", 2, "expected 'name = value'"),
    ("a = b\nbob = ENC(1024:ABCD:EF01)\n", 2, "Artemis' own ENC hashes cannot be read"),
    ("bob = \n", 1, "empty password"),
    ("bob = long\\\n  continued\n", 1, "continuation lines"),
])
def test_users_file_errors_name_file_and_line(tmp_path, content, line, words):
    path = tmp_path / "artemis-users.properties"
    path.write_text(content)
    with pytest.raises(SecurityFileError) as info:
        load_users(str(path))
    assert (info.value.path, info.value.line) == (str(path), line) and words in info.value.message


def test_fuzz_finding_properties_line_numbers_count_only_real_line_ends(tmp_path):
    """broker-properties: "SecurityFileError names a line past the end": str.splitlines() broke lines at
    \x1c (and \v, \f, \x1d, \x1e, \x85, U+2028, U+2029), which editors do not."""
    path = tmp_path / "artemis-users.properties"
    path.write_text("# users\nadmi+gin = secr\x1c\x1c\x1cet\n! comment\x0c\u2028\nguest: guest\nbroken\n",
                    encoding="utf-8")
    with pytest.raises(SecurityFileError) as info:
        load_users(str(path))
    assert (info.value.line, info.value.message) == (5, "expected 'name = value'")
    path.write_bytes(b"a = b\r\x0c\rc = \xff\n")  # lines ending in \r alone count as editors count them
    with pytest.raises(SecurityFileError) as info:
        load_users(str(path))
    assert (info.value.line, info.value.message) == (3, "not UTF-8 text")


def test_roles_file_and_unknown_members_warn(tmp_path):
    (tmp_path / "artemis-users.properties").write_text("alice = a\n")
    (tmp_path / "artemis-roles.properties").write_text("amq = alice, ghost\n")
    roles, warnings = load_roles(str(tmp_path / "artemis-roles.properties"),
                                 load_users(str(tmp_path / "artemis-users.properties")))
    assert roles == {"amq": ("alice", "ghost")}
    assert len(warnings) == 1 and "artemis-roles.properties:1: warning" in warnings[0] and "'ghost'" in warnings[0]


@pytest.mark.parametrize("element,users_file,enabled", [
    ("", False, None),                                            # open, warned at start
    ("", True, True),                                             # Artemis' default is true: a users file turns it on
    ("<security-enabled>true</security-enabled>", True, True),
    ("<security-enabled>false</security-enabled>", True, False),  # off: the files are not read
])
def test_security_enabled_with_and_without_users(tmp_path, element, users_file, enabled):
    xml = tmp_path / "broker.xml"
    xml.write_text(core(element))
    if users_file:
        (tmp_path / "artemis-users.properties").write_text("alice = secret\n")
    cfg = load_broker_config(xml)
    assert cfg.security_enabled is enabled
    assert (cfg.security is not None) is bool(enabled)
    if enabled:
        assert cfg.security.users.check_plain("alice", "secret")


def test_security_enabled_true_without_users_file_is_refused_with_file_and_line(tmp_path):
    xml = tmp_path / "broker.xml"
    text = core("\n<security-enabled>true</security-enabled>")
    xml.write_text(text)
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert (info.value.path, info.value.line) == (str(xml), line_of(text, "<security-enabled>"))
    assert "no users file" in info.value.message and "artemis-users.properties" in info.value.message


def test_a_bad_users_file_stops_the_config_with_its_own_file_and_line(tmp_path):
    xml = tmp_path / "broker.xml"
    xml.write_text(core(""))
    (tmp_path / "artemis-users.properties").write_text("alice = a\nbroken\n")
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert (info.value.path, info.value.line) == (str(tmp_path / "artemis-users.properties"), 2)


def test_secured_acceptors_require_a_login_without_anonymous(tmp_path):
    from broker.daemon import acceptor_security

    xml = tmp_path / "broker.xml"
    xml.write_text(core(""))
    (tmp_path / "artemis-users.properties").write_text("alice = secret\n")
    settings = acceptor_security(load_broker_config(xml))
    assert settings["authenticate_peer"] is True and settings["sasl_users"].check_plain("alice", "secret")
    assert "ANONYMOUS" not in settings["sasl_mechanisms"] == ACCEPTOR_MECHANISMS
    (tmp_path / "artemis-users.properties").unlink()
    assert acceptor_security(load_broker_config(xml)) == {}


# --- permissions ----------------------------------------------------------------------------------------------

SETTINGS = """<security-settings>
  <security-setting match="#">
    <permission type="consume" roles="admin"/>
    <permission type="send" roles="admin"/>
    <permission type="manage" roles="admin"/>
  </security-setting>
  <security-setting match="orders.*">
    <permission type="send" roles="producer, admin"/>
    <permission type="consume" roles="consumer"/>
  </security-setting>
</security-settings>"""


def secured_config(tmp_path, body):
    from broker.config import load_broker_config as load

    xml = tmp_path / "broker.xml"
    xml.write_text(core(body))
    (tmp_path / "artemis-users.properties").write_text("ann = a\npete = p\ncora = c\n")
    (tmp_path / "artemis-roles.properties").write_text("admin = ann\nproducer = pete\nconsumer = cora\n")
    return load(xml), xml


def test_the_most_specific_security_setting_decides(tmp_path):
    from broker.security import permitted, user_roles

    cfg, _ = secured_config(tmp_path, SETTINGS)
    sec = cfg.security

    def may(user, permission, address):
        return permitted(sec.settings, user_roles(sec, user), permission, address)

    assert may("pete", "send", "orders.eu") and not may("pete", "consume", "orders.eu")
    assert may("cora", "consume", "orders.eu") and not may("cora", "send", "orders.eu")
    assert not may("ann", "consume", "orders.eu")      # orders.* lists consume for consumer only (not merged)
    assert may("ann", "consume", "other") and may("ann", "manage", "$management")
    assert not may("pete", "send", "other") and not may(None, "send", "orders.eu")
    assert not may("ann", "createAddress", "other")    # not listed: denied


@pytest.mark.parametrize("permission,words", [
    ('<permission type="sned" roles="amq"/>', "unknown permission type 'sned'"),
    ('<permission type="deleteQueue" roles="amq"/>', "unknown permission type 'deleteQueue'"),
    ('<permission type="send"/>', "roles"),
])
def test_permission_errors_name_file_and_line(tmp_path, permission, words):
    body = f'<security-settings>\n<security-setting match="#">\n{permission}\n</security-setting>\n</security-settings>'
    with pytest.raises(BrokerConfigError) as info:
        secured_config(tmp_path, body)
    assert info.value.line == line_of(core(body), "<permission") and words in info.value.message


#: The block `artemis create` writes into broker.xml: all ten permission types for role amq.
ARTEMIS_DEFAULT_SETTINGS = f"<security-settings>\n  {ARTEMIS_CREATE_SECURITY_SETTING}\n</security-settings>"

ALL_TEN = ("createNonDurableQueue", "deleteNonDurableQueue", "createDurableQueue", "deleteDurableQueue",
           "createAddress", "deleteAddress", "consume", "browse", "send", "manage")


def test_the_security_block_artemis_create_writes_loads(tmp_path):
    from broker.security import ENFORCED_PERMISSIONS, UNENFORCED_PERMISSIONS, permitted, user_roles

    assert set(ALL_TEN) == set(ENFORCED_PERMISSIONS) and not UNENFORCED_PERMISSIONS
    cfg, _ = secured_config_roles(tmp_path, ARTEMIS_DEFAULT_SETTINGS, "amq = ann\n")
    sec = cfg.security
    for permission in ALL_TEN:
        assert permitted(sec.settings, user_roles(sec, "ann"), permission, "any.address")
        assert not permitted(sec.settings, user_roles(sec, "pete"), permission, "any.address")


def secured_config_roles(tmp_path, body, roles: str):
    from broker.config import load_broker_config as load

    xml = tmp_path / "broker.xml"
    xml.write_text(core(body))
    (tmp_path / "artemis-users.properties").write_text("ann = a\npete = p\ncora = c\n")
    (tmp_path / "artemis-roles.properties").write_text(roles)
    return load(xml), xml


# --- permissions enforced on links, in memory (a real SASL PLAIN login through the broker's acceptor settings) ---

#: The Artemis default block for amq (ann), and role app (pete) without the delete types nor browse.
ROLE_SETTINGS = ARTEMIS_DEFAULT_SETTINGS.replace(
    "</security-settings>",
    """<security-setting match="limited.#">
    <permission type="createNonDurableQueue" roles="amq, app"/>
    <permission type="createDurableQueue" roles="amq, app"/>
    <permission type="createAddress" roles="amq, app"/>
    <permission type="consume" roles="amq, app"/>
    <permission type="send" roles="amq, app"/>
    <permission type="deleteNonDurableQueue" roles="amq"/>
    <permission type="deleteDurableQueue" roles="amq"/>
    <permission type="deleteAddress" roles="amq"/>
    <permission type="browse" roles="amq"/>
  </security-setting>
  <security-setting match="temp.#">
    <permission type="createNonDurableQueue" roles="amq, app"/>
    <permission type="consume" roles="amq, app"/>
    <permission type="deleteNonDurableQueue" roles="amq"/>
  </security-setting>
</security-settings>""")


@pytest.fixture
def secured_broker(tmp_path):
    from broker.addressing import TEMP_PREFIX
    from broker.server import Broker
    from tests.unit.enginepair import RouterHarness

    assert TEMP_PREFIX.startswith("temp.")  # the temp.# setting above governs dynamic queues
    body = ("<persistence-enabled>false</persistence-enabled>\n" + ROLE_SETTINGS +
            '\n<addresses><address name="limited.q"><anycast><queue name="limited.q"/></anycast></address>'
            '<address name="limited.news"><multicast/></address></addresses>')
    cfg, _ = secured_config_roles(tmp_path, body, "amq = ann\napp = pete\n")
    b = Broker(cfg)
    b.open_journal()
    return b, RouterHarness(router=b)


def login(harness, user: str, password: str, container: str | None = None):
    """A Peer that logs in with SASL PLAIN (in memory: proton must be told PLAIN is fine unencrypted)."""
    from tests.unit.enginepair import Peer

    peer = Peer(sasl=False, container=container)
    peer.transport.unbind()   # the user name is read when the transport is bound
    peer.connection.user, peer.connection.password = user, password
    sasl = peer.transport.sasl()
    sasl.allowed_mechs("PLAIN")
    sasl.allow_insecure_mechs = True
    peer.transport.bind(peer.connection)
    b = harness.router
    harness.connect(peer, sasl_users=b.cfg.security.users, sasl_mechanisms=ACCEPTOR_MECHANISMS,
                    authenticate_peer=True)
    assert peer.router_engine.user == user
    return peer


def copy_receiver(peer, address: str, credit: int):
    import proton

    rcv = peer.receiver(address, name=f"browse-{address}", open=False)
    rcv.source.distribution_mode = proton.Terminus.DIST_MODE_COPY
    rcv.open()
    rcv.flow(credit)
    return rcv


def refusal(link) -> tuple | None:
    cond = link.remote_condition
    return (cond.name, cond.description) if cond is not None else None


def test_browse_needs_the_browse_permission(secured_broker):
    b, h = secured_broker
    ann, pete = login(h, "ann", "a"), login(h, "pete", "p")
    snd = pete.sender("limited.q")
    h.pump()
    pete.send(snd, body="look")
    h.pump()
    looking = copy_receiver(ann, "limited.q", 5)
    h.pump()
    assert refusal(looking) is None and ann.bodies(looking) == ["look"]
    denied = copy_receiver(pete, "limited.q", 5)
    h.pump()
    name, why = refusal(denied)
    assert name == "amqp:unauthorized-access" and "browse" in why and "limited.q" in why
    assert pete.bodies(denied) == [] and b.queues["limited.q"].message_count == 1
    taking = pete.receiver("limited.q", credit=5)           # consume is a different permission
    h.pump()
    assert refusal(taking) is None and pete.bodies(taking) == ["look"]


def subscribe(peer, address: str, *, durable: bool, name: str):
    import proton

    rcv = peer.receiver(address, name=name, open=False)
    if durable:
        rcv.source.durability = proton.Terminus.DELIVERIES
        rcv.source.expiry_policy = proton.Terminus.EXPIRE_NEVER
    rcv.open()
    rcv.flow(10)
    return rcv


@pytest.mark.parametrize("user,password,deleted", [("ann", "a", True), ("pete", "p", False)])
def test_closing_a_non_durable_subscription_needs_delete_non_durable_queue(secured_broker, caplog, user,
                                                                          password, deleted):
    b, h = secured_broker
    peer = login(h, user, password)
    rcv = subscribe(peer, "limited.news", durable=False, name="sub")
    h.pump()
    assert refusal(rcv) is None and len(b.multicast_queues("limited.news")) == 1
    with caplog.at_level("INFO", logger="broker.server"):
        rcv.close()
        h.pump()
    assert refusal(rcv) is None                              # the close itself is not refused
    assert len(b.multicast_queues("limited.news")) == (0 if deleted else 1)
    if not deleted:
        assert "refused deleteNonDurableQueue on limited.news" in caplog.text
        assert "kept until connection" in caplog.text
        peer.connection.close()                              # the connection closing removes it, unchecked
        h.pump()
        assert b.multicast_queues("limited.news") == []


def test_a_denied_non_durable_subscription_goes_when_its_connection_drops(secured_broker):
    b, h = secured_broker
    pete = login(h, "pete", "p")
    rcv = subscribe(pete, "limited.news", durable=False, name="sub")
    h.pump()
    rcv.close()
    h.pump()
    assert len(b.multicast_queues("limited.news")) == 1
    h.drop(pete)
    assert b.multicast_queues("limited.news") == []


@pytest.mark.parametrize("user,password,deleted", [("ann", "a", True), ("pete", "p", False)])
def test_closing_a_dynamic_receiver_needs_delete_non_durable_queue(secured_broker, user, password, deleted):
    from broker.addressing import TEMP_PREFIX

    b, h = secured_broker
    peer = login(h, user, password)
    rcv = peer.receiver(dynamic=True, credit=1)
    h.pump()
    assert refusal(rcv) is None
    [temp] = [n for n in b.queues if n.startswith(TEMP_PREFIX)]
    rcv.close()
    h.pump()
    assert (temp in b.queues) is not deleted
    peer.connection.close()
    h.pump()
    assert temp not in b.queues


@pytest.mark.parametrize("user,password,deleted", [("ann", "a", True), ("pete", "p", False)])
def test_closing_a_durable_subscription_needs_delete_durable_queue(secured_broker, user, password, deleted):
    b, h = secured_broker
    peer = login(h, user, password, container="app")
    rcv = subscribe(peer, "limited.news", durable=True, name="s1")
    h.pump()
    assert refusal(rcv) is None and "app.s1" in b.queues
    rcv.close()
    h.pump()
    assert ("app.s1" in b.queues) is not deleted
    if deleted:
        assert refusal(rcv) is None
    else:
        name, why = refusal(rcv)
        assert name == "amqp:unauthorized-access" and "deleteDurableQueue" in why and "app.s1" in why
        peer.connection.close()
        h.pump()
        assert "app.s1" in b.queues                          # a durable subscription outlives its connection


def test_detaching_a_durable_subscription_needs_no_delete_permission(secured_broker):
    b, h = secured_broker
    pete = login(h, "pete", "p", container="app")
    rcv = subscribe(pete, "limited.news", durable=True, name="s1")
    h.pump()
    rcv.detach()
    h.pump()
    assert "app.s1" in b.queues and refusal(rcv) is None


def test_security_settings_without_logins_are_refused(tmp_path):
    xml = tmp_path / "broker.xml"
    text = core("<security-enabled>false</security-enabled>\n" + SETTINGS)
    xml.write_text(text)
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert info.value.line == line_of(text, "<security-settings>") and "would be ignored" in info.value.message


# --- tdbroker user add|rm|list ----------------------------------------------------------------------------------

def test_tdbroker_user_add_rm_list(tmp_path):
    from click.testing import CliRunner

    from broker.daemon import main

    xml = str(tmp_path / "broker.xml")
    runner = CliRunner()
    assert runner.invoke(main, ["-c", xml, "user", "add", "--user", "alice", "--role", "admin,amq"],
                         input="s3cret\n").exit_code == 0
    assert runner.invoke(main, ["-c", xml, "user", "add", "--user", "bob", "--role", "amq"], input="pw\n").exit_code == 0
    users_text = (tmp_path / "artemis-users.properties").read_text()
    assert "s3cret" not in users_text and "alice = ENC(SCRAM-SHA-256$" in users_text
    assert (tmp_path / "artemis-users.properties").stat().st_mode & 0o077 == 0
    assert load_users(str(tmp_path / "artemis-users.properties")).check_plain("alice", "s3cret")
    listed = runner.invoke(main, ["-c", xml, "user", "list"])
    assert listed.output.splitlines() == ["alice roles: admin,amq", "bob roles: amq"]
    assert runner.invoke(main, ["-c", xml, "user", "add", "--user", "alice"], input="new\n").exit_code == 0
    assert load_users(str(tmp_path / "artemis-users.properties")).check_plain("alice", "new")
    assert runner.invoke(main, ["-c", xml, "user", "rm", "--user", "alice"]).exit_code == 0
    assert runner.invoke(main, ["-c", xml, "user", "list"]).output.splitlines() == ["bob roles: amq"]
    assert runner.invoke(main, ["-c", xml, "user", "rm", "--user", "zed"]).exit_code == 1
    assert runner.invoke(main, ["-c", xml, "user", "add", "--user", "eve"], input="\n").exit_code == 1


def test_the_shipped_secure_example_loads_once_it_has_certificates_and_users(tmp_path):
    """conf/broker-secure/broker.xml: refused as shipped (no users file), loads with certs and users."""
    import shutil

    from broker.security import add_user
    from tests.paths import REPO

    xml = tmp_path / "broker.xml"
    shutil.copy(REPO / "conf" / "broker-secure" / "broker.xml", xml)
    with pytest.raises(BrokerConfigError, match="certs/ca.pem"):
        load_broker_config(xml)
    (tmp_path / "certs").mkdir()
    ca = trustme.CA()
    ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "certs" / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "certs" / "ca.pem"))
    with pytest.raises(BrokerConfigError, match="no users file"):
        load_broker_config(xml)
    add_user(str(xml), "admin", "pw", ["admin"])
    cfg = load_broker_config(xml)
    assert cfg.security_enabled and cfg.acceptors[0].tls is not None and len(cfg.security.settings) == 2


@pytest.mark.parametrize("uri,warned", [("tcp://10.1.2.3:5672", True), ("tcp://127.0.0.1:5672", False)])
def test_a_login_without_tls_beyond_loopback_is_warned_about(uri, warned):
    cfg = parse_broker_config(connection_xml(uri), "b.xml")
    assert any("without TLS to 10.1.2.3" in w for w in cfg.warnings) is warned


def test_a_key_password_in_a_connection_uri_is_never_shown(pki):
    """The uri management and logs show has the key password replaced (the client key is still used)."""
    text = connection_xml(f"tcp://127.0.0.1:5672?sslEnabled=true;keyStorePath=server.pem;keyStorePassword=s3cret;"
                          f"trustStorePath=ca.pem#tcp://127.0.0.1:5673?sslEnabled=true;trustStorePath=ca.pem")
    (conn,) = parse_broker_config(text, str(pki / "broker.xml")).broker_connections
    assert "s3cret" not in conn.uri and "keyStorePassword=***" in conn.uri and "s3cret" not in repr(conn)
    assert conn.alternate_uris == ["tcp://127.0.0.1:5673?sslEnabled=true;trustStorePath=ca.pem"]
