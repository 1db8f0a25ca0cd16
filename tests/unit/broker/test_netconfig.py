"""broker/netconfig.py: ActiveMQ network connectors and the bridge destination policy in broker.xml.

Every attribute with its default, every URI form, ActiveMQ's wildcards and permissible-destination rules,
the duplex properties round trip (and what it refuses from the network), policy specificity, and FILE:LINE
errors for bad or unsupported input."""

from __future__ import annotations

import os
import ssl
from dataclasses import fields

import pytest
import trustme

from broker.config import BrokerConfigError, parse_broker_config
from broker.credentials import FROM_CONFIG, FROM_STORE, STORE_FILE
from broker.netconfig import (
    BridgeFilterPolicy, DestinationFilter, MulticastGroup, NetworkConnector, ReconnectSettings,
    UNSUPPORTED_CONNECTOR_ATTRS, amq_match, policy_for,
)
from wire.tls import ClientTls

PATH = "etc/broker.xml"


def core(body: str) -> str:
    """A broker.xml whose <core> holds ``body``, which starts on line 3."""
    return ('<configuration xmlns="urn:activemq">\n<core xmlns="urn:activemq:core">\n'
            f"{body}\n</core></configuration>\n")


def line_of(text: str, needle: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def connectors_xml(*connectors: str) -> str:
    return core("<networkConnectors>\n" + "\n".join(connectors) + "\n</networkConnectors>")


def parse(text: str, path: str = PATH):
    return parse_broker_config(text, path)


def one(attrs: str = "", body: str = "", uri: str = "static:(tcp://127.0.0.1:61617)"):
    """The one connector of a <networkConnectors> with ``attrs`` and ``body``."""
    tag = f'<networkConnector name="c" uri="{uri}" {attrs}>{body}</networkConnector>'
    (connector,) = parse(connectors_xml(tag)).network_connectors
    return connector


def error_of(text: str, path: str = PATH) -> BrokerConfigError:
    with pytest.raises(BrokerConfigError) as info:
        parse(text, path)
    return info.value


def assert_error_at(text: str, needle: str, *words: str) -> str:
    """``text`` is refused at the line holding ``needle``, with ``words`` in the message."""
    err = error_of(text)
    message = str(err)
    assert message.startswith(f"{PATH}:{line_of(text, needle)}: "), message
    for word in words:
        assert word in message, (word, message)
    return message


# --- defaults and attributes -------------------------------------------------------------------------------------

def test_defaults_are_activemq_code_defaults():
    c = one()
    assert (c.name, c.discovery, c.duplex, c.dynamic_only) == ("c", "static", False, False)
    assert c.decrease_network_consumer_priority is True          # since ActiveMQ 5.18 (AMQ-5137)
    assert c.consumer_priority_base == -5
    assert (c.network_ttl, c.message_ttl, c.consumer_ttl) == (1, 1, 1)
    assert c.conduit_subscriptions is True and c.prefetch_size == 1000
    assert c.suppress_duplicate_queue_subscriptions is False and c.suppress_duplicate_topic_subscriptions is True
    assert c.bridge_temp_destinations is True and c.static_bridge is False
    assert c.always_sync_send is True                             # NetworkBridgeConfiguration (the page says false)
    assert (c.excluded, c.dynamically_included, c.statically_included) == ([], [], [])
    assert c.reconnect == ReconnectSettings(1000, 30000, True, 2.0, 0, 5000)
    assert (c.user_name, c.password, c.password_source, c.multicast) == (None, None, None, None)
    assert c.line == 4


def test_an_unnamed_connector_is_called_NC_and_two_unnamed_ones_clash():
    text = connectors_xml('<networkConnector uri="static:(tcp://127.0.0.1:1)"/>',
                          '<networkConnector uri="static:(tcp://127.0.0.1:2)"/>')
    message = str(error_of(text))
    assert message.startswith(f"{PATH}:5: ") and "duplicate networkConnector name 'NC' (first at line 4)" in message
    (c,) = parse(connectors_xml('<networkConnector uri="static:(tcp://127.0.0.1:1)"/>')).network_connectors
    assert c.name == "NC"


@pytest.mark.parametrize("attr,value,fld,expected", [
    ("duplex", "true", "duplex", True),
    ("dynamicOnly", "true", "dynamic_only", True),
    ("decreaseNetworkConsumerPriority", "false", "decrease_network_consumer_priority", False),
    ("consumerPriorityBase", "-10", "consumer_priority_base", -10),
    ("messageTTL", "3", "message_ttl", 3),
    ("consumerTTL", "-1", "consumer_ttl", -1),
    ("conduitSubscriptions", "false", "conduit_subscriptions", False),
    ("prefetchSize", "10", "prefetch_size", 10),
    ("suppressDuplicateQueueSubscriptions", "true", "suppress_duplicate_queue_subscriptions", True),
    ("suppressDuplicateTopicSubscriptions", "false", "suppress_duplicate_topic_subscriptions", False),
    ("bridgeTempDestinations", "false", "bridge_temp_destinations", False),
    ("alwaysSyncSend", "false", "always_sync_send", False),
    ("staticBridge", "true", "static_bridge", True),
])
def test_each_attribute_is_parsed(attr, value, fld, expected):
    c = one(f'{attr}="{value}"')
    assert getattr(c, fld) == expected
    # and only that field moved from its default
    default = NetworkConnector(name="c", uri=c.uri, targets=c.targets, line=c.line)
    changed = [f.name for f in fields(NetworkConnector) if getattr(c, f.name) != getattr(default, f.name)]
    assert changed == [fld]


def test_network_ttl_sets_message_and_consumer_ttl_unless_they_are_given():
    c = one('networkTTL="3"')
    assert (c.network_ttl, c.message_ttl, c.consumer_ttl) == (3, 3, 3)
    c = one('consumerTTL="1" networkTTL="4"')      # explicit wins, whatever the attribute order
    assert (c.network_ttl, c.message_ttl, c.consumer_ttl) == (4, 4, 1)
    c = one('networkTTL="2" messageTTL="5"')
    assert (c.network_ttl, c.message_ttl, c.consumer_ttl) == (2, 5, 2)


def test_pasted_amazon_mq_style_block_loads():
    text = core("""<networkConnectors>
  <networkConnector name="connector_1_to_2" userName="myCommonUser" password="pw" duplex="true"
                    uri="static:(ssl://127.0.0.1:61617)" networkTTL="2" conduitSubscriptions="false">
    <excludedDestinations><queue physicalName="q.>"/><topic physicalName="ActiveMQ.Advisory.>"/></excludedDestinations>
    <dynamicallyIncludedDestinations><queue physicalName="orders.*"/></dynamicallyIncludedDestinations>
    <staticallyIncludedDestinations><topic physicalName="prices"/></staticallyIncludedDestinations>
  </networkConnector>
</networkConnectors>
<networkConnectorStartAsync>true</networkConnectorStartAsync>""")
    cfg = parse(text)
    (c,) = cfg.network_connectors
    assert cfg.network_connector_start_async is True
    assert (c.name, c.user_name, c.password, c.password_source) == ("connector_1_to_2", "myCommonUser", "pw",
                                                                     FROM_CONFIG)
    assert c.duplex and not c.conduit_subscriptions and (c.message_ttl, c.consumer_ttl) == (2, 2)
    assert [t.text() for t in c.excluded] == ["queue:q.>", "topic:ActiveMQ.Advisory.>"]
    assert [t.text() for t in c.dynamically_included] == ["queue:orders.*"]
    assert [t.text() for t in c.statically_included] == ["topic:prices"]
    assert c.excluded[0].line == line_of(text, "<excludedDestinations>")
    assert "pw" not in repr(c)
    assert any("written in the configuration, in clear" in w for w in cfg.warnings)


def test_start_async_defaults_to_false_and_no_connectors():
    cfg = parse(core("<persistence-enabled>false</persistence-enabled>"))
    assert (cfg.network_connectors, cfg.network_connector_start_async, cfg.bridge_policies) == ([], False, [])


# --- credentials -------------------------------------------------------------------------------------------------

def test_user_name_without_password_takes_the_password_from_the_credentials_store(tmp_path):
    store = tmp_path / STORE_FILE
    store.write_text("bridge-user = st0red\n")
    os.chmod(store, 0o600)
    xml = tmp_path / "broker.xml"
    text = connectors_xml('<networkConnector name="c" userName="bridge-user" uri="static:(tcp://127.0.0.1:1)"/>')
    (c,) = parse(text, str(xml)).network_connectors
    assert (c.user_name, c.password, c.password_source) == ("bridge-user", "st0red", FROM_STORE)


def test_user_name_missing_from_the_store_is_refused_at_the_connector_line(tmp_path):
    text = connectors_xml('<networkConnector name="c" userName="nobody" uri="static:(tcp://127.0.0.1:1)"/>')
    xml = tmp_path / "broker.xml"
    err = error_of(text, str(xml))
    assert str(err).startswith(f"{xml}:4: ") and "networkConnector 'c' logs in as 'nobody'" in str(err)
    assert f"tdbroker -c {xml} credential add --user nobody" in str(err)


def test_password_without_user_name_is_refused():
    text = connectors_xml('<networkConnector name="c" password="x" uri="static:(tcp://127.0.0.1:1)"/>')
    assert_error_at(text, "<networkConnector ", "password without user")


def test_login_without_tls_beyond_loopback_is_warned_about():
    text = connectors_xml('<networkConnector name="c" userName="u" password="p" '
                          'uri="static:(tcp://10.1.2.3:61616)"/>')
    assert any("without TLS to 10.1.2.3" in w for w in parse(text).warnings)


# --- URIs --------------------------------------------------------------------------------------------------------

def test_static_list_with_reconnect_options():
    c = one(uri="static:(tcp://127.0.0.1:1,amqp://host-b:5672)?initialReconnectDelay=10&amp;"
                "maxReconnectDelay=500&amp;useExponentialBackOff=false&amp;backOffMultiplier=3&amp;"
                "maxReconnectAttempts=4&amp;minConnectTime=50")
    assert [(t.scheme, t.host, t.port, t.tls) for t in c.targets] == [("tcp", "127.0.0.1", 1, None),
                                                                      ("amqp", "host-b", 5672, None)]
    assert c.reconnect == ReconnectSettings(10, 500, False, 3.0, 4, 50)
    assert c.discovery == "static" and c.uri.startswith("static:(tcp://127.0.0.1:1,amqp://host-b:5672)?")


def test_static_without_parentheses():
    c = one(uri="static:tcp://127.0.0.1:61616?maxReconnectDelay=5000")
    assert [(t.scheme, t.host, t.port) for t in c.targets] == [("tcp", "127.0.0.1", 61616)]
    assert c.reconnect.max_reconnect_delay_ms == 5000


def test_max_reconnect_attempts_minus_one_means_unlimited_like_zero():
    assert one(uri="static:(tcp://127.0.0.1:1)?maxReconnectAttempts=-1").reconnect.max_reconnect_attempts == 0


def test_masterslave_keeps_the_order_master_first():
    c = one(uri="masterslave:(tcp://master:61616,tcp://slave:61616)?initialReconnectDelay=20")
    assert c.discovery == "masterslave" and [t.host for t in c.targets] == ["master", "slave"]
    assert c.reconnect.initial_reconnect_delay_ms == 20


@pytest.mark.parametrize("uri,group", [
    ("multicast://default", MulticastGroup()),
    ("multicast://default?group=east", MulticastGroup("239.255.2.3", 6155, "east")),
    ("multicast://239.1.2.3:7000?group=name", MulticastGroup("239.1.2.3", 7000, "name")),
    ("multicast://239.1.2.3", MulticastGroup("239.1.2.3", 6155, "default")),
])
def test_multicast_discovery(uri, group):
    c = one(uri=uri)
    assert (c.discovery, c.multicast, c.targets) == ("multicast", group, [])


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA for the trust store and a client certificate (made now: nothing secret is committed)."""
    folder = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    ca.issue_cert("broker-a").private_key_and_cert_chain_pem.write_to_path(str(folder / "client.pem"))
    return folder


@pytest.mark.parametrize("scheme", ["ssl", "amqps"])
def test_ssl_and_amqps_mean_tls_verified_by_the_system_trust_without_a_trust_store(scheme):
    (target,) = one(uri=f"static:({scheme}://broker.example:61617)").targets
    assert isinstance(target.tls, ClientTls)
    assert target.tls.context.verify_mode == ssl.CERT_REQUIRED and target.tls.context.check_hostname


def test_tls_parameters_on_the_inner_uri_and_relative_trust_store_beside_broker_xml(pki):
    text = connectors_xml('<networkConnector name="c" uri="static:(ssl://127.0.0.1:61617?trustStorePath=ca.pem;'
                          'verifyHost=false,tcp://127.0.0.1:2?sslEnabled=true)"/>')
    (c,) = parse(text, str(pki / "broker.xml")).network_connectors
    first, second = c.targets
    assert isinstance(first.tls, ClientTls) and not first.tls.context.check_hostname
    assert isinstance(second.tls, ClientTls) and second.scheme == "tcp"


def test_a_missing_trust_store_is_a_file_and_line_error(tmp_path):
    text = connectors_xml('<networkConnector name="c" uri="static:(ssl://127.0.0.1:1?trustStorePath=nope.pem)"/>')
    err = error_of(text, str(tmp_path / "broker.xml"))
    assert str(err).startswith(f"{tmp_path / 'broker.xml'}:4: ") and "trustStorePath" in str(err)


def test_a_key_store_password_is_not_kept_in_the_uri(pki):
    uri = "static:(ssl://127.0.0.1:1?trustStorePath=ca.pem;keyStorePath=client.pem;keyStorePassword=s3cret)"
    text = connectors_xml(f'<networkConnector name="c" uri="{uri}"/>')
    (c,) = parse(text, str(pki / "broker.xml")).network_connectors
    assert "s3cret" not in c.uri and "keyStorePassword=***)" in c.uri and "s3cret" not in repr(c)


@pytest.mark.parametrize("uri,words", [
    ("tcp://127.0.0.1:1", ["must start with static:, masterslave: or multicast://"]),
    ("failover:(tcp://127.0.0.1:1)", ["failover:"]),
    ("static:(tcp://127.0.0.1:1", ["no closing ')'"]),
    ("static:(tcp://127.0.0.1:1)x", ["unexpected 'x' after ')'"]),
    ("static:(tcp://127.0.0.1:1,)", ["empty broker URI"]),
    ("static:(nio://127.0.0.1:1)", ["scheme 'nio' is not supported", "tcp, amqp, ssl, amqps"]),
    ("static:(tcp://127.0.0.1)", ["has no port"]),
    ("static:(tcp://:1)", ["has no host"]),
    ("static:(tcp://127.0.0.1:1/path)", ["unexpected path"]),
    ("static:(tcp://127.0.0.1:99999)", ["not a valid URI"]),
    ("static:(tcp://127.0.0.1:1?soTimeout=5)", ["URI parameter soTimeout", "not supported"]),
    ("static:(tcp://127.0.0.1:1)?discovered.soTimeout=5", ["uri option discovered.soTimeout is not supported"]),
    ("static:(tcp://127.0.0.1:1)?initialReconnectDelay=soon", ["initialReconnectDelay must be an integer"]),
    ("static:(tcp://127.0.0.1:1)?initialReconnectDelay=-1", ["initialReconnectDelay must be >= 0"]),
    ("static:(tcp://127.0.0.1:1)?useExponentialBackOff=maybe", ["must be true or false"]),
    ("static:(tcp://127.0.0.1:1)?backOffMultiplier=0.5", ["backOffMultiplier must be between 1 and 1000"]),
    ("static:(tcp://127.0.0.1:1)?maxReconnectAttempts=-2", ["maxReconnectAttempts must be >= -1"]),
    ("static:(tcp://127.0.0.1:1)?initialReconnectDelay=5000&amp;maxReconnectDelay=100",
     ["maxReconnectDelay 100 is below initialReconnectDelay 5000"]),
    ("static:(tcp://127.0.0.1:1)?minConnectTime=1&amp;minConnectTime=2", ["minConnectTime is given twice"]),
    ("static:(tcp://127.0.0.1:1)?novalue", ["'novalue'", "is not key=value"]),
    ("static:(ssl://127.0.0.1:1?sslEnabled=false)", ["ssl:// means TLS; sslEnabled=false contradicts it"]),
    ("static:(ssl://127.0.0.1:1?trustAll=true)", ["trustAll=true is not supported"]),
    ("masterslave:(tcp://127.0.0.1:1)", ["masterslave: lists the master and at least one slave"]),
    ("multicast:default", ["write multicast discovery as multicast://default"]),
    ("multicast://10.0.0.1", ["'10.0.0.1' is not a multicast group address"]),
    ("multicast://broker-host", ["not a multicast group address"]),
    ("multicast://default?group=", ["group=\"\" must not be empty"]),
    ("multicast://default?group=a%20b", ["multicast group 'a b' must not contain spaces"]),
    ("multicast://default?timeToLive=5", ["multicast option timeToLive is not supported"]),
    ("multicast://default?initialReconnectDelay=5", ["multicast option initialReconnectDelay is not supported"]),
])
def test_bad_uris_are_refused_at_the_connector_line(uri, words):
    text = connectors_xml(f'<networkConnector name="c" uri="{uri}"/>')
    message = assert_error_at(text, "<networkConnector ", *words)
    assert message.count("networkConnector 'c'") >= 1 or "uri" in message


def test_uri_is_required():
    assert_error_at(connectors_xml('<networkConnector name="c"/>'), "<networkConnector ", 'needs a uri="..."')


# --- refused attributes and elements -----------------------------------------------------------------------------

@pytest.mark.parametrize("attr", sorted(UNSUPPORTED_CONNECTOR_ATTRS))
def test_every_known_but_unsupported_activemq_attribute_is_refused(attr):
    text = connectors_xml(f'<networkConnector name="c" uri="static:(tcp://127.0.0.1:1)"\n {attr}="false"/>')
    assert_error_at(text, "<networkConnector ", f"networkConnector attribute {attr} is not supported by tdbroker")


def test_an_unknown_attribute_is_refused_with_a_hint():
    text = connectors_xml('<networkConnector name="c" uri="static:(tcp://127.0.0.1:1)" networkTtl="2"/>')
    assert_error_at(text, "<networkConnector ", "unknown attribute networkTtl", "did you mean networkTTL?")


@pytest.mark.parametrize("attrs,words", [
    ('prefetchSize="0"', ["prefetchSize must be > 0"]),
    ('prefetchSize="-5"', ["prefetchSize must be > 0"]),
    ('networkTTL="-2"', ["networkTTL must be -1 (unlimited) or >= 0"]),
    ('messageTTL="-3"', ["messageTTL must be -1"]),
    ('duplex="yes"', ["attribute duplex must be true or false"]),
    ('prefetchSize="lots"', ["attribute prefetchSize must be an integer"]),
    ('name=""', ['name="" must not be empty']),
])
def test_bad_attribute_values_are_refused(attrs, words):
    text = connectors_xml(f'<networkConnector uri="static:(tcp://127.0.0.1:1)" {attrs}/>')
    assert_error_at(text, "<networkConnector ", *words)


@pytest.mark.parametrize("body,needle,words", [
    ("<durableDestinations><topic physicalName=\"t\"/></durableDestinations>", "<durableDestinations>",
     ["<durableDestinations> is not supported"]),
    ("<sslContext/>", "<sslContext", ["<sslContext> is not supported"]),
    ("<excludedDestination/>", "<excludedDestination/>", ["unknown element <excludedDestination>",
                                                          "did you mean <excludedDestinations>?"]),
    ("<excludedDestinations/>\n<excludedDestinations/>", "<excludedDestinations/>\n", []),
    ("<excludedDestinations>\n<tempQueue physicalName=\"x\"/></excludedDestinations>", "<tempQueue",
     ["<tempQueue> in <excludedDestinations> is not supported"]),
    ("<excludedDestinations>\n<destination physicalName=\"x\"/></excludedDestinations>", "<destination ",
     ["unknown element <destination>"]),
    ("<excludedDestinations>\n<queue name=\"x\"/></excludedDestinations>", "<queue name",
     ["unknown attribute name on <queue>"]),
    ("<excludedDestinations>\n<queue/></excludedDestinations>", "<queue/>", ['needs a physicalName="..."']),
    ("<excludedDestinations>\n<queue physicalName=\"a.>.b\"/></excludedDestinations>", "a.>.b",
     ["'>' may only be the last word"]),
    ("<excludedDestinations>\n<queue physicalName=\"a.b*\"/></excludedDestinations>", "a.b*",
     ["must stand for a whole word"]),
    ("<excludedDestinations>\n<queue physicalName=\"a,b\"/></excludedDestinations>", "a,b",
     ["composite destination"]),
    ("<staticallyIncludedDestinations>\n<queue physicalName=\"a.*\"/></staticallyIncludedDestinations>", "a.*",
     ["wildcards are allowed in excluded and dynamically included destinations only"]),
])
def test_bad_destination_lists_are_refused_at_their_line(body, needle, words):
    text = connectors_xml(f'<networkConnector name="c" uri="static:(tcp://127.0.0.1:1)">\n{body}\n'
                          "</networkConnector>")
    if not words:   # the duplicate list: refused at the second one
        err = str(error_of(text))
        assert err.startswith(f"{PATH}:6: ") and "duplicate <excludedDestinations> (first at line 5)" in err
        return
    assert_error_at(text, needle, *words)


@pytest.mark.parametrize("element,words", [
    ("<multicastNetworkConnector/>", ["<multicastNetworkConnector> is not supported"]),
    ("<ldapNetworkConnector/>", ["<ldapNetworkConnector> is not supported"]),
    ("<networkConnecter/>", ["unknown element <networkConnecter>", "did you mean <networkConnector>?"]),
])
def test_other_connector_kinds_are_refused(element, words):
    assert_error_at(connectors_xml(element), element, *words)


def test_network_elements_may_be_given_once():
    text = core("<networkConnectorStartAsync>true</networkConnectorStartAsync>\n"
                "<networkConnectorStartAsync>false</networkConnectorStartAsync>")
    assert_error_at(text, ">false<", "duplicate <networkConnectorStartAsync> (first at line 3)")
    assert_error_at(core("<networkConnectorStartAsync>soon</networkConnectorStartAsync>"), "soon",
                    "must be true or false")


def test_a_misspelt_core_element_suggests_the_network_one():
    assert_error_at(core("<networkConnector/>"), "<networkConnector/>", "did you mean <networkConnectors>?")


# --- wildcards and permissible destinations ----------------------------------------------------------------------

@pytest.mark.parametrize("pattern,name,expected", [
    ("A", "A", True),
    ("A", "B", False),
    ("A", "A.B", False),
    ("A.>", "A", True),            # PrefixDestinationFilter: "the case where A matches A.>"
    ("A.>", "A.B", True),
    ("A.>", "A.B.C", True),
    ("A.>", "AB", False),
    ("A.>", "B.A", False),
    ("A.B.>", "A", False),
    (">", "anything.at.all", True),
    (">", "x", True),
    ("A.*", "A.B", True),
    ("A.*", "A", False),
    ("A.*", "A.B.C", False),
    ("*.B", "A.B", True),
    ("A.*.C", "A.B.C", True),
    ("A.*.C", "A.B.D", False),
    ("A.*.>", "A.B", True),
    ("A.*.>", "A.B.C.D", True),
    ("A.*.>", "A", False),
    ("A.>.>", "A", True),          # trailing '>' collapse
    ("PRICE.STOCK.*.IBM", "PRICE.STOCK.NYSE.IBM", True),
    ("PRICE.STOCK.*.IBM", "PRICE.STOCK.NYSE.ORCL", False),
])
def test_amq_match(pattern, name, expected):
    assert amq_match(pattern, name) is expected
    assert DestinationFilter("queue", pattern).matches("queue", name) is expected
    assert DestinationFilter("queue", pattern).matches("topic", name) is False


def lists(excluded=(), dynamic=(), static=(), **kw) -> NetworkConnector:
    def filters(items):
        return [DestinationFilter(*item.split(":", 1)) for item in items]
    return NetworkConnector(excluded=filters(excluded), dynamically_included=filters(dynamic),
                            statically_included=filters(static), **kw)


def test_permissible_rules_in_activemq_order():
    c = lists(excluded=["queue:secret.>"], dynamic=["queue:orders.*", "topic:news.>"],
              static=["queue:secret.ops", "queue:audit"])
    assert c.permissible("queue", "orders.eu") is True          # a dynamic match
    assert c.permissible("queue", "payments") is False          # dynamic list non-empty, no match
    assert c.permissible("topic", "orders.eu") is False         # kinds are separate
    assert c.permissible("topic", "news") is True
    assert c.permissible("queue", "audit") is True              # a static match, not in the dynamic list
    assert c.permissible("queue", "secret.ops") is False        # excluded wins over static
    assert c.permissible("queue", "secret") is False            # 'secret.>' matches 'secret'
    open_connector = lists(excluded=["topic:ActiveMQ.Advisory.>"])
    assert open_connector.permissible("queue", "anything") is True
    assert open_connector.permissible("topic", "ActiveMQ.Advisory.Consumer.Queue.x") is False


def test_temporary_destinations_follow_bridge_temp_destinations_only():
    assert lists(excluded=["queue:>"]).permissible("queue", "tmp-1", temporary=True) is True
    assert lists(bridge_temp_destinations=False).permissible("queue", "tmp-1", temporary=True) is False


def test_static_destinations_skip_excluded_ones():
    c = lists(excluded=["queue:secret.>"], static=["queue:secret.ops", "queue:audit", "topic:secret.ops"])
    assert [f.text() for f in c.static_destinations()] == ["queue:audit", "topic:secret.ops"]


# --- duplex properties ------------------------------------------------------------------------------------------

def test_to_properties_round_trip():
    c = one('duplex="true" networkTTL="3" consumerTTL="1" conduitSubscriptions="false" prefetchSize="7" '
            'userName="u" password="p" staticBridge="true" alwaysSyncSend="false" consumerPriorityBase="-9"',
            body='<excludedDestinations><queue physicalName="x.>"/></excludedDestinations>'
                 '<dynamicallyIncludedDestinations><topic physicalName="t.*"/></dynamicallyIncludedDestinations>'
                 '<staticallyIncludedDestinations><queue physicalName="s"/></staticallyIncludedDestinations>')
    props = c.to_properties()
    assert all(isinstance(k, str) for k in props)
    assert all(isinstance(v, (str, int, bool, list)) for v in props.values())
    assert props["excludedDestinations"] == ["queue:x.>"] and props["networkTTL"] == 3
    assert "p" not in props.values() and not {"userName", "password", "uri", "name", "targets"} & set(props)
    back = NetworkConnector.from_properties(props, name="from-peer")
    assert back.name == "from-peer" and back.targets == [] and back.user_name is None
    for f in fields(NetworkConnector):
        if f.name in ("name", "uri", "targets", "user_name", "password", "password_source", "line"):
            continue
        left, right = getattr(c, f.name), getattr(back, f.name)
        if f.name in ("excluded", "dynamically_included", "statically_included"):
            left, right = [x.text() for x in left], [x.text() for x in right]
        assert left == right, f.name


def test_default_connector_round_trips():
    props = NetworkConnector().to_properties()
    assert NetworkConnector.from_properties(props, name="NC").to_properties() == props


def good_props(**changes) -> dict:
    props = NetworkConnector().to_properties()
    props.update(changes)
    return props


@pytest.mark.parametrize("props,words", [
    ("not a map", "must be a map"),
    (good_props(useCompression=True), "unknown network connector properties: useCompression"),
    ({k: v for k, v in good_props().items() if k != "duplex"}, "missing network connector properties: duplex"),
    (good_props(duplex="true"), "duplex must be a boolean"),
    (good_props(duplex=1), "duplex must be a boolean"),
    (good_props(prefetchSize=True), "prefetchSize must be an integer"),
    (good_props(prefetchSize="10"), "prefetchSize must be an integer"),
    (good_props(prefetchSize=0), "prefetchSize must be > 0"),
    (good_props(messageTTL=-2), "messageTTL must be -1"),
    (good_props(consumerTTL=2 ** 40), "out of range"),
    (good_props(excludedDestinations="queue:x"), "must be a list of strings"),
    (good_props(excludedDestinations=[1]), "entries must be strings"),
    (good_props(excludedDestinations=["x.>"]), "must be queue:PATTERN or topic:PATTERN"),
    (good_props(excludedDestinations=["tempQueue:x"]), "must be queue:PATTERN or topic:PATTERN"),
    (good_props(excludedDestinations=["queue:a.>.b"]), "'>' may only be the last word"),
    (good_props(excludedDestinations=["queue:"]), "must not be empty"),
    (good_props(staticallyIncludedDestinations=["queue:a.*"]), "wildcards are allowed"),
    (good_props(dynamicallyIncludedDestinations=["queue:q"] * 1001), "more than 1000 entries"),
    (good_props(dynamicallyIncludedDestinations=["queue:" + "x" * 5000]), "longer than 4096"),
])
def test_from_properties_refuses_bad_input_from_the_network(props, words):
    with pytest.raises(ValueError) as info:
        NetworkConnector.from_properties(props, name="peer")
    assert words in str(info.value)


# --- destinationPolicy --------------------------------------------------------------------------------------------

def policy_xml(entries: str) -> str:
    return core(f"<destinationPolicy><policyMap><policyEntries>\n{entries}\n</policyEntries></policyMap>"
                "</destinationPolicy>")


def test_conditional_network_bridge_filter_factory_is_parsed():
    text = policy_xml(
        '<policyEntry queue=">"><networkBridgeFilterFactory><conditionalNetworkBridgeFilterFactory '
        'replayWhenNoConsumers="true" replayDelay="1000" rateLimit="0" rateDuration="1000" selectorAware="false"/>'
        '</networkBridgeFilterFactory></policyEntry>\n'
        '<policyEntry topic="prices.>"><networkBridgeFilterFactory><conditionalNetworkBridgeFilterFactory '
        'rateLimit="10" rateDuration="500" selectorAware="true"/></networkBridgeFilterFactory></policyEntry>')
    queue_policy, topic_policy = parse(text).bridge_policies
    assert queue_policy == BridgeFilterPolicy("queue", ">", True, 1000, 0, 1000, False, line=4)
    assert topic_policy == BridgeFilterPolicy("topic", "prices.>", False, 0, 10, 500, True, line=5)


def test_policy_defaults_are_the_factory_code_defaults():
    text = policy_xml('<policyEntry queue="q"><networkBridgeFilterFactory>'
                      '<conditionalNetworkBridgeFilterFactory/></networkBridgeFilterFactory></policyEntry>')
    (p,) = parse(text).bridge_policies
    assert (p.replay_when_no_consumers, p.replay_delay_ms, p.rate_limit, p.rate_duration_ms, p.selector_aware) == \
        (False, 0, 0, 1000, False)


def test_a_policy_entry_without_a_bridge_filter_is_warned_about():
    cfg = parse(policy_xml('<policyEntry queue="q"/>'))
    assert any("has no <networkBridgeFilterFactory>: it has no effect" in w for w in cfg.warnings)


@pytest.mark.parametrize("entries,needle,words", [
    ('<policyEntry queue=">" producerFlowControl="false"/>', "<policyEntry",
     ["policyEntry attribute producerFlowControl is not supported by tdbroker"]),
    ('<policyEntry queue=">" tempQueue="true"/>', "<policyEntry", ["attribute tempQueue is not supported"]),
    ('<policyEntry/>', "<policyEntry", ["exactly one of queue=\"...\" or topic=\"...\""]),
    ('<policyEntry queue="a" topic="b"/>', "<policyEntry", ["exactly one of"]),
    ('<policyEntry queue="a.>.b"/>', "<policyEntry", ["'>' may only be the last word"]),
    ('<policyEntry queue=">">\n<deadLetterStrategy/></policyEntry>', "<deadLetterStrategy",
     ["<deadLetterStrategy> in <policyEntry> is not supported by tdbroker"]),
    ('<policyEntry queue=">"><networkBridgeFilterFactory>\n<defaultNetworkBridgeFilterFactory/>'
     '</networkBridgeFilterFactory></policyEntry>', "<defaultNetworkBridgeFilterFactory",
     ["unknown element <defaultNetworkBridgeFilterFactory>"]),
    ('<policyEntry queue=">"><networkBridgeFilterFactory>\n</networkBridgeFilterFactory></policyEntry>',
     "<policyEntry", ["needs a <conditionalNetworkBridgeFilterFactory>"]),
    ('<policyEntry queue=">"><networkBridgeFilterFactory>\n<conditionalNetworkBridgeFilterFactory '
     'replayDelay="-1"/></networkBridgeFilterFactory></policyEntry>', "replayDelay",
     ["replayDelay must be >= 0"]),
    ('<policyEntry queue=">"><networkBridgeFilterFactory>\n<conditionalNetworkBridgeFilterFactory '
     'rateDuration="0"/></networkBridgeFilterFactory></policyEntry>', "rateDuration",
     ["rateDuration must be >= 1"]),
    ('<policyEntry queue=">"><networkBridgeFilterFactory>\n<conditionalNetworkBridgeFilterFactory '
     'rateLimt="5"/></networkBridgeFilterFactory></policyEntry>', "rateLimt",
     ["unknown attribute rateLimt", "did you mean rateLimit?"]),
    ('<policyEntry topic=">"><networkBridgeFilterFactory>\n<conditionalNetworkBridgeFilterFactory '
     'replayWhenNoConsumers="true"/></networkBridgeFilterFactory></policyEntry>', "replayWhenNoConsumers",
     ["replayWhenNoConsumers applies to queues only"]),
    ('<policyEntry queue="q"/>\n<policyEntry queue="q" />', '<policyEntry queue="q" />',
     ["duplicate policyEntry queue=\"q\""]),
])
def test_bad_policies_are_refused_at_their_line(entries, needle, words):
    assert_error_at(policy_xml(entries), needle, *words)


def test_policy_map_structure_errors():
    text = core("<destinationPolicy>\n<policyMap>\n<defaultEntry/></policyMap></destinationPolicy>")
    assert_error_at(text, "<defaultEntry", "<defaultEntry> is not supported by tdbroker")
    text = core("<destinationPolicy>\n<policyMapp/></destinationPolicy>")
    assert_error_at(text, "<policyMapp", "unknown element <policyMapp>", "did you mean <policyMap>?")
    assert_error_at(core("<destinationPolicy/>"), "<destinationPolicy", "needs a <policyMap>")


def test_policy_for_prefers_the_most_specific_match():
    policies = [BridgeFilterPolicy("queue", ">"), BridgeFilterPolicy("queue", "orders.>"),
                BridgeFilterPolicy("queue", "orders.*"), BridgeFilterPolicy("queue", "orders.eu"),
                BridgeFilterPolicy("topic", "orders.eu"), BridgeFilterPolicy("queue", "*.eu")]
    assert policy_for(policies, "queue", "orders.eu") is policies[3]          # exact over wildcards
    assert policy_for(policies, "topic", "orders.eu") is policies[4]          # kinds are separate
    assert policy_for(policies, "queue", "orders.us") is policies[2]          # '*' over '>'
    assert policy_for(policies, "queue", "orders.us.west") is policies[1]     # more literal words
    assert policy_for(policies, "queue", "payments") is policies[0]
    assert policy_for(policies, "topic", "payments") is None
    tie = [BridgeFilterPolicy("queue", "a.*"), BridgeFilterPolicy("queue", "*.b")]
    assert policy_for(tie, "queue", "a.b") is tie[0]                          # then the first in the file
