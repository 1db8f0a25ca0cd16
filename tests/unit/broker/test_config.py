"""broker.config: the broker.xml (Artemis vocabulary) parser, wildcard matcher and settings merge."""

import textwrap

import pytest

from broker.config import (
    AddressSettings,
    BrokerConfig,
    BrokerConfigError,
    artemis_match,
    load_broker_config,
    match_specificity_cmp,
    parse_broker_config,
)
from tests.paths import REPO

PATH = "etc/broker.xml"

HEAD = """\
<?xml version="1.0" encoding="UTF-8"?>
<configuration xmlns="urn:activemq" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
               xsi:schemaLocation="urn:activemq /schema/artemis-configuration.xsd">
<core xmlns="urn:activemq:core">
"""
TAIL = """\
</core>
</configuration>
"""


def core(body: str) -> str:
    """A broker.xml whose <core> holds ``body``; ``body`` starts on line 5."""
    return HEAD + textwrap.dedent(body).strip("\n") + "\n" + TAIL


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line containing ``needle``."""
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def error_of(text: str) -> BrokerConfigError:
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(text, PATH)
    return info.value


FULL = core("""
    <name>broker-1</name>
    <persistence-enabled>false</persistence-enabled>
    <journal-directory>/var/lib/tdbroker/journal</journal-directory>
    <journal-file-size>20MiB</journal-file-size>
    <journal-sync-transactional>false</journal-sync-transactional>
    <journal-sync-non-transactional>true</journal-sync-non-transactional>
    <security-enabled>false</security-enabled>
    <acceptors>
       <acceptor name="amqp">tcp://0.0.0.0:0?protocols=CORE,AMQP;tcpNoDelay=true&amp;amqpIdleTimeout=60000</acceptor>
       <acceptor name="v6">tcp://[::1]:5674</acceptor>
    </acceptors>
    <addresses>
       <address name="orders">
          <anycast>
             <queue name="orders" max-consumers="3">
                <durable>false</durable>
                <filter string="color='red'"/>
             </queue>
          </anycast>
       </address>
       <address name="news">
          <multicast>
             <queue name="news.sub1"/>
             <queue name="news.sub2" purge-on-no-consumers="true"/>
          </multicast>
          <anycast/>
       </address>
    </addresses>
    <address-settings>
       <address-setting match="#">
          <dead-letter-address>DLQ</dead-letter-address>
          <expiry-address>ExpiryQueue</expiry-address>
          <expiry-delay>60000</expiry-delay>
          <max-delivery-attempts>5</max-delivery-attempts>
          <redelivery-delay>250</redelivery-delay>
          <auto-create-queues>false</auto-create-queues>
          <auto-create-addresses>false</auto-create-addresses>
          <auto-delete-queues>false</auto-delete-queues>
          <default-queue-routing-type>ANYCAST</default-queue-routing-type>
          <default-address-routing-type>anycast</default-address-routing-type>
          <max-size-bytes>100MB</max-size-bytes>
          <address-full-policy>BLOCK</address-full-policy>
          <page-size-bytes>10MB</page-size-bytes>
          <max-read-page-bytes>20MB</max-read-page-bytes>
       </address-setting>
    </address-settings>
    <broker-connections>
       <amqp-connection uri="tcp://router1:5672?amqpCredits=100#tcp://router2:5672,tcp://router3:5672"
                        name="mesh" user="u" password="p" retry-interval="1000"
                        reconnect-attempts="10" auto-start="false">
          <peer address-match="orders.#"/>
          <sender queue-name="news.sub1"/>
          <receiver address-match="inbox.*"/>
          <mirror queue-removal="false" durable="false" address-filter="orders,!orders.tmp"/>
          <federation>
             <local-address-policy name="p1"><include address-match="news.#"/></local-address-policy>
          </federation>
       </amqp-connection>
    </broker-connections>
""")


def test_full_file_every_element():
    cfg = parse_broker_config(FULL, PATH)
    assert isinstance(cfg, BrokerConfig)
    assert cfg.path == PATH
    assert cfg.name == "broker-1"
    assert cfg.persistence_enabled is False
    assert cfg.journal_directory == "/var/lib/tdbroker/journal"
    assert cfg.journal_file_size == 20 * 1024 * 1024
    assert cfg.journal_sync_transactional is False
    assert cfg.journal_sync_non_transactional is True

    amqp, v6 = cfg.acceptors
    assert (amqp.name, amqp.host, amqp.port) == ("amqp", "0.0.0.0", 0)
    assert amqp.protocols == ("CORE", "AMQP")
    assert amqp.params == {"tcpNoDelay": "true", "amqpIdleTimeout": "60000"}
    assert amqp.line == line_of(FULL, 'name="amqp"')
    assert (v6.host, v6.port, v6.protocols) == ("::1", 5674, ("AMQP",))

    orders, news = cfg.addresses
    assert orders.routing_types == {"anycast"} and news.routing_types == {"multicast", "anycast"}
    (q,) = orders.queues
    assert (q.name, q.address, q.routing_type, q.durable, q.max_consumers, q.filter) == (
        "orders", "orders", "anycast", False, 3, "color='red'")
    assert q.line == line_of(FULL, '<queue name="orders"')
    assert [(x.name, x.routing_type, x.durable, x.max_consumers) for x in news.queues] == [
        ("news.sub1", "multicast", True, -1), ("news.sub2", "multicast", True, -1)]
    assert [x.name for x in cfg.queues()] == ["orders", "news.sub1", "news.sub2"]
    assert cfg.address("news") is news and cfg.address("nope") is None

    (s,) = cfg.address_settings
    assert s == AddressSettings(
        match="#", dead_letter_address="DLQ", expiry_address="ExpiryQueue", expiry_delay=60000,
        max_delivery_attempts=5, redelivery_delay=250, auto_create_queues=False,
        auto_create_addresses=False, auto_delete_queues=False, default_queue_routing_type="anycast",
        default_address_routing_type="anycast", max_size_bytes=100 * 1024 * 1024,
        address_full_policy="BLOCK", page_size_bytes=10 * 1024 * 1024, line=line_of(FULL, 'match="#"'))

    (conn,) = cfg.broker_connections
    assert (conn.name, conn.host, conn.port, conn.user, conn.password) == ("mesh", "router1", 5672, "u", "p")
    assert (conn.retry_interval_ms, conn.reconnect_attempts, conn.auto_start) == (1000, 10, False)
    assert conn.params == {"amqpCredits": "100"}
    assert conn.alternate_uris == ["tcp://router2:5672", "tcp://router3:5672"]
    assert conn.line == line_of(FULL, 'name="mesh"') - 1     # the start tag's first line
    kinds = [(e.kind, e.address_match, e.queue_name) for e in conn.elements]
    assert kinds == [("peer", "orders.#", None), ("sender", None, "news.sub1"),
                     ("receiver", "inbox.*", None), ("mirror", None, None), ("federation", None, None)]
    mirror = conn.elements[3].attrs
    assert mirror == {"message-acknowledgements": True, "queue-creation": True, "queue-removal": False,
                      "durable": False, "sync": False, "source-mirror-address": None,
                      "address-filter": "orders,!orders.tmp", "properties": {}}
    fed = conn.elements[4]
    assert "local-address-policy" in fed.attrs["xml"] and fed.line == line_of(FULL, "<federation>")

    # Ignored-but-accepted elements and attributes are warnings with FILE:LINE.
    joined = "\n".join(cfg.warnings)
    assert "<security-enabled>" not in joined     # false is enforced (the broker is open), not ignored
    assert cfg.security_enabled is False
    assert f"{PATH}:{line_of(FULL, 'max-read-page-bytes')}: warning: <max-read-page-bytes>" in joined
    assert "purge-on-no-consumers is ignored" in joined
    assert "ignoring CORE" in joined
    assert "federation" in joined and "later" in joined


def test_defaults():
    cfg = parse_broker_config(core("""
        <acceptors><acceptor name="a">tcp://127.0.0.1</acceptor></acceptors>
        <addresses><address name="q"><anycast><queue name="q"/></anycast></address></addresses>
        <broker-connections>
           <amqp-connection uri="tcp://localhost:5672" name="r"><peer queue-name="q"/></amqp-connection>
        </broker-connections>
    """), PATH)
    assert cfg.name is None
    assert cfg.persistence_enabled is True
    assert cfg.journal_directory == "data/journal"
    assert cfg.journal_file_size == 10 * 1024 * 1024
    assert cfg.journal_sync_transactional is True and cfg.journal_sync_non_transactional is True
    (acc,) = cfg.acceptors
    assert (acc.port, acc.protocols, acc.params) == (61616, ("AMQP",), {})
    q = cfg.queues()[0]
    assert (q.durable, q.max_consumers, q.filter) == (True, -1, None)
    (conn,) = cfg.broker_connections
    assert (conn.retry_interval_ms, conn.reconnect_attempts, conn.auto_start) == (5000, -1, True)
    assert conn.user is None and conn.password is None and conn.alternate_uris == []
    assert cfg.address_settings == [] and cfg.warnings == []
    s = cfg.settings_for("anything")
    assert s == AddressSettings(
        match=None, dead_letter_address=None, expiry_address=None, expiry_delay=-1,
        max_delivery_attempts=10, redelivery_delay=0, auto_create_queues=True,
        auto_create_addresses=True, auto_delete_queues=True, default_queue_routing_type="multicast",
        default_address_routing_type="multicast", max_size_bytes=-1, address_full_policy="PAGE",
        page_size_bytes=10 * 1024 * 1024, line=0)


def test_conf_broker_xml_parses():
    cfg = load_broker_config(REPO / "conf" / "broker.xml")
    assert cfg.warnings == []
    acc, web = cfg.acceptors
    assert (acc.name, acc.host, acc.port, acc.protocols) == ("amqp", "127.0.0.1", 5673, ("AMQP",))
    assert (web.name, web.port, web.protocols) == ("web", 8161, ("HTTP",))   # the web console
    queue = cfg.address("queue")
    assert queue.routing_types == {"anycast"} and [q.name for q in queue.queues] == ["queue"]
    s = cfg.settings_for("queue")
    assert (s.dead_letter_address, s.expiry_address, s.max_delivery_attempts, s.auto_create_queues) == (
        "DLQ", "ExpiryQueue", 10, True)
    (conn,) = cfg.broker_connections
    assert (conn.name, conn.host, conn.port) == ("my-router", "127.0.0.1", 5672)
    assert (conn.retry_interval_ms, conn.reconnect_attempts, conn.auto_start) == (1000, -1, True)
    assert [(e.kind, e.address_match) for e in conn.elements] == [("peer", "queue")]


# --- errors: FILE:LINE: message ------------------------------------------------

ERRORS = [
    # (core body, text on the offending line, exact message)
    ("<name>b</name>\n<jurnal-directory>x</jurnal-directory>", "<jurnal-directory>",
     "unknown element <jurnal-directory> in <core> (did you mean <journal-directory>?)"),
    ("<frobnicate/>", "<frobnicate/>", "unknown element <frobnicate> in <core>"),
    ("<address-settings>\n<address-setting match=\"#\">\n<max-delivery-attempts>ten</max-delivery-attempts>\n"
     "</address-setting>\n</address-settings>", "ten",
     "<max-delivery-attempts> must be an integer, got 'ten'"),
    ("<persistence-enabled>yes</persistence-enabled>", "yes",
     "<persistence-enabled> must be true or false, got 'yes'"),
    ("<acceptors>\n<acceptor name=\"amqp\"></acceptor>\n</acceptors>", "<acceptor name",
     "<acceptor name=\"amqp\"> needs a URI such as tcp://0.0.0.0:5672?protocols=AMQP"),
    ("<acceptors>\n<acceptor name=\"amqp\">tcp://host:99999</acceptor>\n</acceptors>", "99999",
     "acceptor URI 'tcp://host:99999' is not a valid URI: Port out of range 0-65535"),
    ("<acceptors>\n<acceptor name=\"a\">vm://0</acceptor>\n</acceptors>", "vm://",
     "acceptor URI 'vm://0' must start with tcp:// (got scheme 'vm')"),
    ("<acceptors>\n<acceptor name=\"a\">tcp://h:1?protocols=CORE,MQTT</acceptor>\n</acceptors>", "MQTT",
     "acceptor 'a': protocols=CORE,MQTT does not include AMQP, the only protocol tdbroker speaks"),
    ("<addresses>\n<address name=\"a\"><anycast><queue name=\"q\"/></anycast></address>\n"
     "<address name=\"b\"><multicast>\n<queue name=\"q\"/></multicast></address>\n</addresses>",
     "<queue name=\"q\"/></multicast>",
     "duplicate queue name 'q' (first at line 6); queue names are broker-wide"),
    ("<addresses>\n<address name=\"a\">\n<queue name=\"q\"/>\n</address>\n</addresses>", "<queue name",
     "<queue> must be inside <anycast> or <multicast> of address 'a'"),
    ("<address-settings>\n<address-setting match=\"#\">\n"
     "<default-queue-routing-type>BROADCAST</default-queue-routing-type>\n</address-setting>\n"
     "</address-settings>", "BROADCAST",
     "<default-queue-routing-type> must be ANYCAST or MULTICAST, got 'BROADCAST'"),
    ("<address-settings>\n<address-setting match=\"#\">\n<address-full-policy>SPILL</address-full-policy>\n"
     "</address-setting>\n</address-settings>", "SPILL",
     "<address-full-policy> must be one of PAGE, DROP, FAIL, BLOCK, got 'SPILL'"),
    ("<address-settings>\n<address-setting match=\"#\">\n<dead-letter-adress>DLQ</dead-letter-adress>\n"
     "</address-setting>\n</address-settings>", "dead-letter-adress",
     "unknown element <dead-letter-adress> in <address-setting> (did you mean <dead-letter-address>?)"),
    ("<address-settings>\n<address-setting>\n</address-setting>\n</address-settings>", "<address-setting>",
     "<address-setting> needs a match=\"...\" attribute"),
    ("<address-settings>\n<address-setting match=\"a.#.b\"/>\n</address-settings>", "a.#.b",
     "address-setting match 'a.#.b': '#' may only be the last word"),
    ("<journal-file-size>lots</journal-file-size>", "lots",
     "<journal-file-size> must be a byte size such as 10485760, 10M or 10MiB, got 'lots'"),
    ("<name>a</name>\n<name>b</name>", "<name>b", "duplicate <name> (first at line 5)"),
    ("<broker-connections>\n<amqp-connection name=\"r\"/>\n</broker-connections>", "amqp-connection name",
     "<amqp-connection> needs a uri=\"...\" attribute"),
    ("<broker-connections>\n<amqp-connection uri=\"tcp://h:1\" name=\"r\" retry-intervall=\"5\"/>\n"
     "</broker-connections>", "retry-intervall",
     "unknown attribute retry-intervall on <amqp-connection> (did you mean retry-interval?)"),
    ("<broker-connections>\n<amqp-connection uri=\"tcp://h:1\" name=\"r\" auto-start=\"maybe\"/>\n"
     "</broker-connections>", "maybe",
     "<amqp-connection> attribute auto-start must be true or false, got 'maybe'"),
    ("<broker-connections>\n<amqp-connection uri=\"tcp://h:1\" name=\"r\">\n<peer/>\n</amqp-connection>\n"
     "</broker-connections>", "<peer/>", "<peer> needs address-match=\"...\" or queue-name=\"...\""),
    ("<broker-connections>\n<amqp-connection uri=\"tcp://h:1\" name=\"r\">\n<pear address-match=\"q\"/>\n"
     "</amqp-connection>\n</broker-connections>", "<pear",
     "unknown element <pear> in <amqp-connection> (did you mean <peer>?)"),
    ("<broker-connections>\n<amqp-connection uri=\"tcp://h:1\" name=\"r\" reconnect-attempts=\"-2\"/>\n"
     "</broker-connections>", "-2",
     "<amqp-connection> reconnect-attempts must be -1 (forever) or >= 0, got -2"),
    ("<addresses>\n<address name=\"a\"><anycast>\n<queue name=\"q\" max-consumers=\"many\"/>\n"
     "</anycast></address>\n</addresses>", "many",
     "<queue> attribute max-consumers must be an integer, got 'many'"),
    ("<address-settings>\n<address-setting match=\"#\">\n<max-delivery-attempts>-2</max-delivery-attempts>\n"
     "</address-setting>\n</address-settings>", "-2<", "<max-delivery-attempts> must be -1 (unlimited) or >= 0"),
    ("<acceptors>\n<acceptor name=\"a\">tcp://${host}:5672</acceptor>\n</acceptors>", "${host}",
     "<acceptor>: ${...} property substitution is not supported"),
    ("<addresses>\n<address name=\"a\"><anycast>\n<queue name=\"q\">\n<filter string=\"color = \"/>\n"
     "</queue></anycast></address>\n</addresses>", "<filter",
     "queue q: filter 'color = ': not a JMS selector: it ends too early"),
]


@pytest.mark.parametrize("body,marker,message", ERRORS, ids=[e[2][:40] for e in ERRORS])
def test_errors_name_file_and_line(body, marker, message):
    text = core(body)
    err = error_of(text)
    line = line_of(text, marker)
    assert (err.path, err.line, err.message) == (PATH, line, message)
    assert str(err) == f"{PATH}:{line}: {message}"


def test_root_and_namespace_errors():
    err = error_of("<broker>\n</broker>")
    assert str(err) == f"{PATH}:1: the root element must be <configuration xmlns=\"urn:activemq\">, got <broker>"
    err = error_of('<configuration xmlns="urn:activemq">\n<jms/>\n</configuration>')
    assert err.line == 2 and "unknown element <jms> in <configuration>" in err.message
    err = error_of('<configuration xmlns="urn:activemq">\n</configuration>')
    assert err.line == 1 and "has no <core" in err.message
    err = error_of(core('<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="more.xml"/>'))
    assert err.line == 5 and "XInclude" in err.message


def test_no_namespace_is_accepted():
    cfg = parse_broker_config("<configuration><core><name>x</name></core></configuration>", PATH)
    assert cfg.name == "x"


def test_malformed_xml():
    err = error_of(core("<name>x</nam>"))
    assert err.line == 5 and err.message.startswith("malformed XML: mismatched tag")


BOMB = """\
<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><name>&lol3;</name></core></configuration>
"""

EXTERNAL = """\
<?xml version="1.0"?>
<!DOCTYPE configuration [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core"><name>&xxe;</name></core></configuration>
"""


@pytest.mark.parametrize("text", [BOMB, EXTERNAL, '<?xml version="1.0"?>\n<!DOCTYPE configuration>\n<configuration/>'])
def test_dtd_entities_and_bombs_are_refused(text):
    err = error_of(text)
    assert err.path == PATH and err.line == 2
    assert err.message.startswith("refused unsafe XML (DTDForbidden)")


def test_missing_file(tmp_path):
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(tmp_path / "nope.xml")
    assert str(info.value).startswith(f"{tmp_path / 'nope.xml'}:0: cannot read broker configuration")


# --- sizes, warnings, odd corners -------------------------------------------------

@pytest.mark.parametrize("raw,expected", [
    ("1048576", 1048576), ("10M", 10 * 2 ** 20), ("10MB", 10 * 2 ** 20), ("10mib", 10 * 2 ** 20),
    ("512K", 512 * 1024), ("512 KB", 512 * 1024), ("1G", 2 ** 30), ("100b", 100),
])
def test_journal_file_size_byte_notation(raw, expected):
    assert parse_broker_config(core(f"<journal-file-size>{raw}</journal-file-size>")).journal_file_size == expected


def test_max_consumers_element_form_warns():
    cfg = parse_broker_config(core("""
        <addresses><address name="a"><anycast>
           <queue name="q"><max-consumers>2</max-consumers></queue>
        </anycast></address></addresses>
    """), PATH)
    assert cfg.queues()[0].max_consumers == 2
    assert len(cfg.warnings) == 1 and "max-consumers=\"N\"" in cfg.warnings[0]


def test_stock_management_match_is_normalised_with_warning():
    text = core('<address-settings>\n<address-setting match="activemq.management#"/>\n</address-settings>')
    cfg = parse_broker_config(text, PATH)
    assert cfg.address_settings[0].match == "activemq.management.#"
    assert cfg.warnings == [f"{PATH}:6: warning: match 'activemq.management#' read as "
                            "'activemq.management.#'; write the '#' as a word of its own"]


def test_sender_and_receiver_for_one_destination_warns():
    cfg = parse_broker_config(core("""
        <broker-connections><amqp-connection uri="tcp://h:1" name="r">
           <sender address-match="q.#"/>
           <receiver address-match="q.#"/>
        </amqp-connection></broker-connections>
    """), PATH)
    assert any("loop messages forever" in w for w in cfg.warnings)


# --- wildcards and the address-settings merge ------------------------------------

@pytest.mark.parametrize("pattern,address,expected", [
    ("#", "a", True), ("#", "a.b.c", True), ("#", "", True),
    ("queue", "queue", True), ("queue", "queue.a", False), ("queue", "queues", False),
    ("queue.#", "queue", True),            # '#' matches zero words
    ("queue.#", "queue.a", True), ("queue.#", "queue.a.b", True), ("queue.#", "queueX", False),
    ("queue.*", "queue.a", True), ("queue.*", "queue", False), ("queue.*", "queue.a.b", False),
    ("queue.*", "queue.", False),          # '*' needs a non-empty word
    ("*.b", "a.b", True), ("*.b", "b", False),
    ("a.*.c", "a.b.c", True), ("a.*.c", "a.b.x.c", False),
    ("a.#.c", "a.c", True), ("a.#.c", "a.b.x.c", True), ("a.#.c", "a.b.x", False),
    ("news.europe.#", "news.europe.sport", True), ("news.europe.#", "news.usaeurope", False),
])
def test_artemis_match(pattern, address, expected):
    assert artemis_match(pattern, address) is expected


def test_specificity_order():
    import functools
    pats = ["#", "queue.#", "queue.a", "queue.*", "*.a", "queue.a.#"]
    ordered = sorted(pats, key=functools.cmp_to_key(match_specificity_cmp))
    # exact first, then '*' (literal words beat '*' position by position), then '#' (longer first)
    assert ordered == ["queue.a", "queue.*", "*.a", "queue.a.#", "queue.#", "#"]


PRECEDENCE = core("""
    <address-settings>
       <address-setting match="#">
          <dead-letter-address>DLQ</dead-letter-address>
          <max-delivery-attempts>5</max-delivery-attempts>
          <redelivery-delay>100</redelivery-delay>
          <expiry-address>Expired</expiry-address>
       </address-setting>
       <address-setting match="queue.#">
          <max-delivery-attempts>4</max-delivery-attempts>
          <redelivery-delay>200</redelivery-delay>
       </address-setting>
       <address-setting match="queue.*">
          <max-delivery-attempts>3</max-delivery-attempts>
       </address-setting>
       <address-setting match="queue.exact">
          <dead-letter-address>ExactDLQ</dead-letter-address>
       </address-setting>
    </address-settings>
""")


@pytest.mark.parametrize("address,match,dla,attempts,redelivery", [
    ("other", "#", "DLQ", 5, 100),
    ("queue", "queue.#", "DLQ", 4, 200),          # queue.# covers 'queue' itself (zero words)
    ("queue.a.b", "queue.#", "DLQ", 4, 200),
    ("queue.a", "queue.*", "DLQ", 3, 200),        # '*' beats '#'; unset fields come from queue.#
    ("queue.exact", "queue.exact", "ExactDLQ", 3, 200),   # exact beats '*', merged down the chain
])
def test_settings_precedence_and_merge(address, match, dla, attempts, redelivery):
    cfg = parse_broker_config(PRECEDENCE, PATH)
    s = cfg.settings_for(address)
    assert (s.match, s.dead_letter_address, s.max_delivery_attempts, s.redelivery_delay) == (
        match, dla, attempts, redelivery)
    assert s.expiry_address == "Expired"          # only '#' sets it
    assert s.address_full_policy == "PAGE"        # nobody sets it: the default
    assert s.line == line_of(PRECEDENCE, f'match="{match}"')


def test_settings_order_in_file_does_not_matter():
    cfg = parse_broker_config(PRECEDENCE, PATH)
    cfg.address_settings.reverse()
    assert cfg.settings_for("queue.exact").max_delivery_attempts == 3
    assert cfg.settings_for("queue.exact").dead_letter_address == "ExactDLQ"


STOCK = core("""
    <name>0.0.0.0</name>
    <persistence-enabled>true</persistence-enabled>
    <journal-type>NIO</journal-type>
    <paging-directory>data/paging</paging-directory>
    <bindings-directory>data/bindings</bindings-directory>
    <journal-directory>data/journal</journal-directory>
    <large-messages-directory>data/large-messages</large-messages-directory>
    <journal-datasync>true</journal-datasync>
    <journal-min-files>2</journal-min-files>
    <journal-pool-files>10</journal-pool-files>
    <journal-device-block-size>4096</journal-device-block-size>
    <journal-file-size>10M</journal-file-size>
    <journal-buffer-timeout>20000</journal-buffer-timeout>
    <journal-max-io>1</journal-max-io>
    <disk-scan-period>5000</disk-scan-period>
    <max-disk-usage>90</max-disk-usage>
    <critical-analyzer>true</critical-analyzer>
    <critical-analyzer-timeout>120000</critical-analyzer-timeout>
    <critical-analyzer-check-period>60000</critical-analyzer-check-period>
    <critical-analyzer-policy>HALT</critical-analyzer-policy>
    <page-sync-timeout>2244000</page-sync-timeout>
    <acceptors>
       <acceptor name="artemis">tcp://0.0.0.0:61616?tcpSendBufferSize=1048576;tcpReceiveBufferSize=1048576;amqpMinLargeMessageSize=102400;protocols=CORE,AMQP,STOMP,HORNETQ,MQTT,OPENWIRE;useEpoll=true;amqpCredits=1000;amqpLowCredits=300</acceptor>
       <acceptor name="amqp">tcp://0.0.0.0:5672?tcpSendBufferSize=1048576;protocols=AMQP;useEpoll=true;amqpCredits=1000</acceptor>
    </acceptors>
    <security-enabled>false</security-enabled>
    <security-settings>
       <!-- Artemis' stock <security-setting> elements are refused while not enforced (issue 12) -->
    </security-settings>
    <address-settings>
       <address-setting match="activemq.management.#">
          <dead-letter-address>DLQ</dead-letter-address>
          <expiry-address>ExpiryQueue</expiry-address>
          <redelivery-delay>0</redelivery-delay>
          <max-size-bytes>-1</max-size-bytes>
          <message-counter-history-day-limit>10</message-counter-history-day-limit>
          <address-full-policy>PAGE</address-full-policy>
          <auto-create-queues>true</auto-create-queues>
          <auto-create-addresses>true</auto-create-addresses>
          <auto-create-jms-queues>true</auto-create-jms-queues>
          <auto-create-jms-topics>true</auto-create-jms-topics>
       </address-setting>
       <address-setting match="#">
          <dead-letter-address>DLQ</dead-letter-address>
          <expiry-address>ExpiryQueue</expiry-address>
          <redelivery-delay>0</redelivery-delay>
          <max-size-bytes>-1</max-size-bytes>
          <max-size-messages>-1</max-size-messages>
          <page-size-bytes>10M</page-size-bytes>
          <max-read-page-messages>-1</max-read-page-messages>
          <max-read-page-bytes>20M</max-read-page-bytes>
          <message-counter-history-day-limit>10</message-counter-history-day-limit>
          <address-full-policy>PAGE</address-full-policy>
          <auto-create-queues>true</auto-create-queues>
          <auto-create-addresses>true</auto-create-addresses>
          <auto-delete-queues>false</auto-delete-queues>
          <auto-delete-addresses>false</auto-delete-addresses>
       </address-setting>
    </address-settings>
    <addresses>
       <address name="DLQ"><anycast><queue name="DLQ" /></anycast></address>
       <address name="ExpiryQueue"><anycast><queue name="ExpiryQueue" /></anycast></address>
    </addresses>
""")


def test_stock_artemis_style_file_loads_with_warnings():
    cfg = parse_broker_config(STOCK, PATH)
    assert [a.port for a in cfg.acceptors] == [61616, 5672]
    assert cfg.acceptors[0].params["amqpCredits"] == "1000"
    s = cfg.settings_for("orders")
    assert (s.match, s.auto_delete_queues, s.dead_letter_address) == ("#", False, "DLQ")
    mgmt = cfg.settings_for("activemq.management.x")
    assert mgmt.match == "activemq.management.#"
    assert mgmt.auto_delete_queues is False       # unset there: inherited from '#', not the default
    assert any("<max-read-page-messages> is accepted but ignored" in w for w in cfg.warnings)
    assert all(": warning: " in w for w in cfg.warnings)


def test_flow_records_element():
    cfg = parse_broker_config(core('<flow-records directory="/tmp/fr" sample="0.25" rotate-mb="8"/>'), PATH)
    fr = cfg.flow_records
    assert (fr.directory, fr.sample, fr.rotate_mb, fr.line) == ("/tmp/fr", 0.25, 8, 5)
    assert parse_broker_config(core("<name>x</name>"), PATH).flow_records is None
    dflt = parse_broker_config(core('<flow-records directory="d"/>'), PATH).flow_records
    assert (dflt.sample, dflt.rotate_mb) == (1.0, 64)


@pytest.mark.parametrize("attrs, message", [
    ('sample="0.5"', "needs a directory"),
    ('directory="d" sample="2"', "sample must be in (0, 1]"),
    ('directory="d" sample="lots"', "sample must be a number"),
    ('directory="d" rotate-mb="0"', "rotate-mb must be positive"),
    ('directory="d" rotate="1"', "unknown attribute rotate"),
])
def test_flow_records_errors(attrs, message):
    err = error_of(core(f"<flow-records {attrs}/>"))
    assert err.line == 5 and message in str(err)


def test_acceptor_limits_are_parsed_and_checked():
    from broker.config import BrokerConfigError, parse_broker_config

    def acceptor(params: str):
        return ("<configuration xmlns=\"urn:activemq\"><core xmlns=\"urn:activemq:core\"><acceptors>\n"
                f"<acceptor name=\"a\">tcp://127.0.0.1:0?protocols=AMQP;{params}</acceptor>\n"
                "</acceptors></core></configuration>")

    acc = parse_broker_config(acceptor("amqpCredits=1000")).acceptors[0]
    assert (acc.connections_allowed, acc.handshake_timeout) == (-1, 10.0)  # Artemis' defaults
    acc = parse_broker_config(acceptor("connectionsAllowed=5;handshake-timeout=0")).acceptors[0]
    assert (acc.connections_allowed, acc.handshake_timeout) == (5, 0.0)
    assert "connectionsAllowed" not in acc.params
    for bad, why in (("connectionsAllowed=lots", "is not an integer"), ("handshake-timeout=-2", "at least 0"),
                     ("sslEnabled=true", "an sslEnabled acceptor needs keyStorePath"),
                     ("sslEnabled=true;verifyHost=true", "an acceptor does not dial a host")):
        with pytest.raises(BrokerConfigError, match=why) as info:
            parse_broker_config(acceptor(bad), "b.xml")
        assert str(info.value).startswith("b.xml:2:")


# --- security settings: enforced or refused, never accepted and ignored (issue 12) --------------------

@pytest.mark.parametrize("element,words", [
    ('<security-settings>\n  <security-setting match="#"><permission type="send" roles="amq"/></security-setting>'
     "\n</security-settings>", "permissions need logins to check"),   # no users file: nothing to check
    ("<mask-password>true</mask-password>", "<mask-password> is not enforced yet"),
    ("<password-codec>org.example.Codec</password-codec>", "<password-codec> is not enforced yet"),
])
def test_unenforced_security_elements_are_refused_with_file_and_line(element, words):
    text = core("\n" + element)
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(text, "b.xml")
    assert (info.value.path, info.value.line) == ("b.xml", line_of(text, element.split(">")[0]))
    assert words in info.value.message


def test_security_elements_that_mean_off_are_accepted():
    cfg = parse_broker_config(core("<security-enabled>false</security-enabled>\n<mask-password>false</mask-password>"
                                   "\n<security-settings/>"), PATH)
    assert cfg.security_enabled is False and cfg.warnings == []
    assert parse_broker_config(core(""), PATH).security_enabled is None   # absent: open, warned at start


# Of Artemis' TLS parameters, those wire.tls.artemis_tls does not implement stay refused (the enforced ones
# are tested with real certificates in test_security.py).
REFUSED_TLS_PARAMS = ["wantClientAuth=true", "trustAll=true", "trustStorePassword=s3cret", "keyStoreProvider=SUN",
                      "enabledCipherSuites=TLS_AES_128_GCM_SHA256", "sslProvider=OPENSSL", "crlPath=/etc/crl",
                      "keyStoreType=PKCS12"]


@pytest.mark.parametrize("param", REFUSED_TLS_PARAMS)
def test_unsupported_tls_acceptor_parameters_are_refused(param):
    text = core(f"<acceptors>\n<acceptor name=\"a\">tcp://127.0.0.1:0?protocols=AMQP;{param}</acceptor>\n"
                "</acceptors>")
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(text, "b.xml")
    key = param.split("=")[0]
    assert info.value.line == line_of(text, "<acceptor name") and f"{key}" in info.value.message
    assert "s3cret" not in str(info.value)


@pytest.mark.parametrize("param", REFUSED_TLS_PARAMS + ["sslEnabled=true;keyStorePath=/etc/missing.pem"])
def test_unsupported_tls_broker_connection_parameters_are_refused(param):
    text = core("<broker-connections>\n"
                f"<amqp-connection uri=\"tcp://127.0.0.1:5672?{param}\" name=\"r\"><peer address-match=\"q\"/>"
                "</amqp-connection>\n</broker-connections>")
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(text, "b.xml")
    assert info.value.line == line_of(text, "<amqp-connection") and "s3cret" not in str(info.value)


def test_tls_parameters_that_mean_off_are_accepted():
    text = core("<acceptors>\n<acceptor name=\"a\">tcp://127.0.0.1:0?protocols=AMQP;sslEnabled=false;"
                "needClientAuth=false;wantClientAuth=false</acceptor>\n</acceptors>")
    acc = parse_broker_config(text, PATH).acceptors[0]
    assert acc.port == 0 and acc.tls is None and acc.params == {}


@pytest.mark.parametrize("attrs,words", [
    ('password="s3cret"', "password without user is not enforced"),
    ('user="u" password="ENC(-2d4a6f)"', "masked passwords (ENC(...)) are not enforced yet"),
])
def test_broker_connection_credentials_that_would_be_ignored_are_refused(attrs, words):
    text = core("<broker-connections>\n"
                f"<amqp-connection uri=\"tcp://127.0.0.1:5672\" name=\"r\" {attrs}><peer address-match=\"q\"/>"
                "</amqp-connection>\n</broker-connections>")
    with pytest.raises(BrokerConfigError) as info:
        parse_broker_config(text, "b.xml")
    assert words in info.value.message and "s3cret" not in str(info.value) and "2d4a6f" not in str(info.value)


def test_broker_connection_user_and_password_are_kept_and_not_in_repr():
    text = core("<broker-connections>\n<amqp-connection uri=\"tcp://127.0.0.1:5672\" name=\"r\" user=\"u\" "
                "password=\"s3cret\"><peer address-match=\"q\"/></amqp-connection>\n</broker-connections>")
    (conn,) = parse_broker_config(text, PATH).broker_connections
    assert (conn.user, conn.password) == ("u", "s3cret")    # enforced: SASL PLAIN (broker/connections.py)
    assert "s3cret" not in repr(conn)


def test_daemon_exits_2_with_file_and_line_for_security_enabled_without_users(tmp_path):
    """The real tdbroker refuses <security-enabled>true with no artemis-users.properties before it listens."""
    import subprocess
    import sys

    xml = tmp_path / "broker.xml"
    text = core("<security-enabled>true</security-enabled>\n<acceptors>\n"
                "<acceptor name=\"a\">tcp://127.0.0.1:0?protocols=AMQP</acceptor>\n</acceptors>")
    xml.write_text(text)
    proc = subprocess.run([sys.executable, "-m", "broker.daemon", "-c", str(xml)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    line = line_of(text, "<security-enabled>")
    assert proc.stderr.startswith(f"{xml}:{line}: <security-enabled>true but there is no users file "), proc.stderr
    assert "listening" not in proc.stdout


@pytest.mark.parametrize("security,warned", [("", True), ("<security-enabled>false</security-enabled>\n", False)])
def test_daemon_warns_at_start_when_security_enabled_is_absent(tmp_path, security, warned):
    """Artemis' default is security-enabled true; tdbroker is open, and says so unless told false."""
    import signal
    import subprocess
    import sys

    xml = tmp_path / "broker.xml"
    xml.write_text(core(f"{security}<persistence-enabled>false</persistence-enabled>\n<acceptors>\n"
                        "<acceptor name=\"a\">tcp://127.0.0.1:0?protocols=AMQP</acceptor>\n</acceptors>"))
    proc = subprocess.Popen([sys.executable, "-m", "broker.daemon", "-c", str(xml)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:          # the warning is logged before the acceptors listen
            if line.startswith("tdbroker: ready"):
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert ("anyone who can reach an acceptor may connect" in err) is warned, err
