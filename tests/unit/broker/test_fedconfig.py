"""broker/fedconfig.py: Artemis <connectors>, <discovery-groups>, <broadcast-groups> and core
<federations> in broker.xml.

Every element with its default, the Artemis user manual's sample blocks, policy-set resolution,
include/exclude matching with Artemis wildcards, credentials, FILE:LINE errors for bad or unknown input,
and the start-up refusal of what the federation runtime does not implement (RUNTIME_SUPPORTS)."""

from __future__ import annotations

import os
import sys

import pytest

from broker import fedconfig
from broker.config import BrokerConfigError, parse_broker_config
from broker.credentials import STORE_FILE
from broker.fedconfig import AddressPolicy, Federation, QueuePolicy, Stream

PATH = "etc/broker.xml"

CONNECTORS = """<connectors>
   <connector name="eu-east-connector1">tcp://127.0.0.1:61617</connector>
   <connector name="eu-east-connector2">tcp://127.0.0.1:61618</connector>
   <connector name="netty-connector">tcp://127.0.0.1:61616</connector>
</connectors>"""

DISCOVERY = """<discovery-groups>
   <discovery-group name="dg1">
      <group-address>231.7.7.7</group-address>
      <group-port>9876</group-port>
   </discovery-group>
</discovery-groups>"""

#: federation-address.adoc's sample (the seed's), with a Python transformer class and one upstream that
#: also sets the circuit breaker and connection sharing.
SEED = """<federations>
    <federation name="eu-north-1-federation" user="federation_username" password="32a10275cf4ab4e9">
        <upstream name="eu-east-1-upstream">
           <circuit-breaker-timeout>1000</circuit-breaker-timeout>
           <share-connection>true</share-connection>
           <static-connectors>
              <connector-ref>eu-east-connector1</connector-ref>
              <connector-ref>eu-east-connector2</connector-ref>
           </static-connectors>
           <policy ref="news-address-federation"/>
        </upstream>
        <address-policy name="news-address-federation" auto-delete="true" auto-delete-delay="300000" auto-delete-message-count="-1" enable-divert-bindings="false" max-hops="1" transformer-ref="news-transformer">
           <include address-match="queue.bbc.new" />
           <include address-match="queue.usatoday" />
           <include address-match="queue.news.#" />
           <exclude address-match="queue.news.sport.#" />
        </address-policy>
        <transformer name="news-transformer">
           <class-name>h5_fed_transformers:NewsTransformer</class-name>
           <property key="key1" value="value1"/>
           <property key="key2" value="value2"/>
        </transformer>
    </federation>
</federations>"""

TRANSFORMER_SOURCE = """
class NewsTransformer:
    def init(self, properties):
        self.properties = properties

    def transform(self, message):
        return message
"""


def core(*bodies: str) -> str:
    """A broker.xml whose <core> holds ``bodies``; the first starts on line 3."""
    return ('<configuration xmlns="urn:activemq">\n<core xmlns="urn:activemq:core">\n'
            + "\n".join(bodies) + "\n</core></configuration>\n")


def line_of(text: str, needle: str) -> int:
    hits = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def parse(text: str, path: str = PATH):
    return parse_broker_config(text, path)


def error_of(text: str, path: str = PATH) -> str:
    with pytest.raises(BrokerConfigError) as info:
        parse(text, path)
    return str(info.value)


def assert_error_at(text: str, needle: str, *words: str) -> str:
    message = error_of(text)
    assert message.startswith(f"{PATH}:{line_of(text, needle)}: "), message
    for word in words:
        assert word in message, message
    return message


@pytest.fixture
def everything(monkeypatch):
    """The runtime supports every feature (as it will): parsing alone is under test."""
    monkeypatch.setattr(fedconfig, "RUNTIME_SUPPORTS", set(fedconfig.FEATURES))


@pytest.fixture
def address_only(monkeypatch):
    """The gate as it was first shipped: only address federation enforced."""
    monkeypatch.setattr(fedconfig, "RUNTIME_SUPPORTS", {"address-policy"})


@pytest.fixture
def transformer_module(tmp_path, monkeypatch):
    (tmp_path / "h5_fed_transformers.py").write_text(TRANSFORMER_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("h5_fed_transformers", None)


def federation(body: str, attrs: str = 'name="f"') -> str:
    return f"<federations>\n<federation {attrs}>\n{body}\n</federation>\n</federations>"


def upstream(body: str = "", attrs: str = 'name="up"', policy: str = '<policy ref="p"/>',
             connectors: str = "<static-connectors><connector-ref>netty-connector</connector-ref>"
                               "</static-connectors>") -> str:
    return f"<upstream {attrs}>\n{connectors}\n{body}\n{policy}\n</upstream>"


ADDRESS_POLICY = '<address-policy name="p"/>'


def one_stream(body: str = "", **kwargs) -> Stream:
    cfg = parse(core(CONNECTORS, federation(upstream(body, **kwargs) + "\n" + ADDRESS_POLICY)))
    (fed,) = cfg.federations
    (stream,) = fed.upstreams
    return stream


# --- the manual's samples ---------------------------------------------------------------------------------------

def test_the_seed_sample_parses_with_every_value(everything, transformer_module):
    cfg = parse(core(CONNECTORS, SEED))
    (fed,) = cfg.federations
    assert (fed.name, fed.user, fed.password) == ("eu-north-1-federation", "federation_username",
                                                  "32a10275cf4ab4e9")
    (up,) = fed.upstreams
    assert (up.kind, up.name, up.user, up.password) == ("upstream", "eu-east-1-upstream", "federation_username",
                                                        "32a10275cf4ab4e9")
    assert up.static_connectors == ["eu-east-connector1", "eu-east-connector2"]
    assert (up.circuit_breaker_timeout_ms, up.share_connection, up.discovery_group) == (1000, True, None)
    assert up.policy_refs == ["news-address-federation"]
    policy = fed.address_policies["news-address-federation"]
    assert (policy.auto_delete, policy.auto_delete_delay_ms, policy.auto_delete_message_count) == (True, 300000, -1)
    assert (policy.enable_divert_bindings, policy.max_hops, policy.transformer_ref) == (False, 1, "news-transformer")
    assert policy.includes == ["queue.bbc.new", "queue.usatoday", "queue.news.#"]
    assert policy.excludes == ["queue.news.sport.#"]
    tcfg = fed.transformers["news-transformer"]
    assert (tcfg.class_name, tcfg.properties) == ("h5_fed_transformers:NewsTransformer",
                                                  {"key1": "value1", "key2": "value2"})
    assert tcfg.instance.properties == {"key1": "value1", "key2": "value2"}   # loaded at start-up
    assert fed.policies_for(up) == ([policy], [])
    assert cfg.connectors["eu-east-connector1"].port == 61617
    assert "password of user 'federation_username' is written in the configuration" in "".join(cfg.warnings)


def test_the_seed_sample_is_refused_at_the_first_unimplemented_line(address_only):
    text = core(CONNECTORS, SEED)
    assert_error_at(text, "<circuit-breaker-timeout>",
                    "<circuit-breaker-timeout> is parsed but not implemented yet", "implemented: address-policy")


def test_the_federation_chapter_sample_with_policy_sets_and_discovery(everything):
    text = core(CONNECTORS.replace("netty-connector", "connector1"), DISCOVERY.replace("dg1", "ue-west-dg"), """
<federations>
    <federation name="eu-north-1-federation">
        <upstream name="eu-west-1" user="westuser" password="32a10275cf4ab4e9">
           <static-connectors>
              <connector-ref>connector1</connector-ref>
           </static-connectors>
           <policy ref="policySetA"/>
        </upstream>
        <upstream name="eu-east-1" user="eastuser" password="32a10275cf4ab4e9">
           <discovery-group-ref discovery-group-name="ue-west-dg"/>
           <policy ref="policySetA"/>
        </upstream>
        <policy-set name="policySetA">
           <policy ref="address-federation" />
           <policy ref="queue-federation" />
        </policy-set>
        <queue-policy name="queue-federation" >
           <exclude queue-match="federated_queue" address-match="#" />
        </queue-policy>
        <address-policy name="address-federation" >
           <include address-match="federated_address" />
        </address-policy>
    </federation>
</federations>""")
    (fed,) = parse(text).federations
    west, east = fed.upstreams
    assert (west.user, east.user, fed.user) == ("westuser", "eastuser", None)
    assert (east.discovery_group, east.static_connectors) == ("ue-west-dg", [])
    addresses, queues = fed.policies_for(east)
    assert [p.name for p in addresses] == ["address-federation"] and [q.name for q in queues] == ["queue-federation"]
    assert fed.policy_sets == {"policySetA": ["address-federation", "queue-federation"]}
    assert queues[0].excludes == [("federated_queue", "#")]


def test_the_downstream_sample(everything):
    text = core(CONNECTORS, """
<federations>
   <federation name="eu-north-1" user="federation_username" password="32a10275cf4ab4e9">
      <downstream name="eu-east-1">
          <static-connectors>
             <connector-ref>eu-east-connector1</connector-ref>
          </static-connectors>
          <policy ref="news-address-federation"/>
          <upstream-connector-ref>netty-connector</upstream-connector-ref>
      </downstream>
      <address-policy name="news-address-federation" max-hops="1">
         <include address-match="queue.news.#" />
      </address-policy>
   </federation>
</federations>""")
    (fed,) = parse(text).federations
    (down,) = fed.downstreams
    assert (fed.upstreams, down.kind, down.upstream_connector_ref) == ([], "downstream", "netty-connector")
    assert down.user == "federation_username"


def test_federations_may_come_before_the_connectors_they_use(everything):
    text = core(federation(upstream() + ADDRESS_POLICY), CONNECTORS)
    (fed,) = parse(text).federations
    assert fed.upstreams[0].static_connectors == ["netty-connector"]


# --- defaults ---------------------------------------------------------------------------------------------------

def test_stream_defaults_are_artemis():
    s = one_stream()
    assert (s.ha, s.circuit_breaker_timeout_ms, s.share_connection) == (False, 30000, False)
    assert (s.check_period_ms, s.connection_ttl_ms, s.call_timeout_ms, s.call_failover_timeout_ms) == (
        30000, 60000, 30000, -1)
    assert (s.retry_interval_ms, s.retry_interval_multiplier, s.max_retry_interval_ms) == (500, 1.0, 2000)
    assert (s.initial_connect_attempts, s.reconnect_attempts) == (-1, -1)
    assert (s.user, s.password, s.upstream_connector_ref) == (None, None, None)


def test_retry_settings_are_read():
    s = one_stream("<retry-interval>100</retry-interval><retry-interval-multiplier>2.5</retry-interval-multiplier>"
                   "<max-retry-interval>8000</max-retry-interval><initial-connect-attempts>3</initial-connect-attempts>"
                   "<reconnect-attempts>0</reconnect-attempts>")
    assert (s.retry_interval_ms, s.retry_interval_multiplier, s.max_retry_interval_ms) == (100, 2.5, 8000)
    assert (s.initial_connect_attempts, s.reconnect_attempts) == (3, 0)


def test_every_stream_setting_is_read(everything):
    s = one_stream("<ha>true</ha><circuit-breaker-timeout>5</circuit-breaker-timeout>"
                   "<share-connection>true</share-connection><check-period>1000</check-period>"
                   "<connection-ttl>2000</connection-ttl><call-timeout>3000</call-timeout>"
                   "<call-failover-timeout>4000</call-failover-timeout>")
    assert (s.ha, s.circuit_breaker_timeout_ms, s.share_connection) == (True, 5, True)
    assert (s.check_period_ms, s.connection_ttl_ms, s.call_timeout_ms, s.call_failover_timeout_ms) == (
        1000, 2000, 3000, 4000)


def test_policy_defaults_are_artemis(everything):
    text = core(CONNECTORS, federation(upstream(policy='<policy ref="a"/><policy ref="q"/>')
                                       + '<address-policy name="a"/><queue-policy name="q"/>'))
    (fed,) = parse(text).federations
    a, q = fed.address_policies["a"], fed.queue_policies["q"]
    assert (a.max_hops, a.auto_delete, a.auto_delete_delay_ms, a.auto_delete_message_count) == (0, None, None, None)
    assert (a.transformer_ref, a.enable_divert_bindings, a.includes, a.excludes) == (None, False, [], [])
    assert (q.include_federated, q.priority_adjustment, q.transformer_ref, q.includes) == (False, -1, None, [])


def test_queue_policy_attributes(everything, transformer_module):
    text = core(CONNECTORS, federation(upstream(policy='<policy ref="q"/>') + """
<queue-policy name="q" priority-adjustment="-5" include-federated="true" transformer-ref="t">
   <include queue-match="#" address-match="queue.news.#" />
   <include address-match="queue.bbc.new" />
   <exclude queue-match="#.local" />
</queue-policy>
<transformer name="t"><class-name>h5_fed_transformers:NewsTransformer</class-name></transformer>"""))
    q = parse(text).federations[0].queue_policies["q"]
    assert (q.priority_adjustment, q.include_federated, q.transformer_ref) == (-5, True, "t")
    assert q.includes == [("#", "queue.news.#"), ("#", "queue.bbc.new")] and q.excludes == [("#.local", "#")]


def test_connector_discovery_and_broadcast_group_defaults(everything):
    text = core(CONNECTORS, DISCOVERY, """<broadcast-groups>
   <broadcast-group name="bg">
      <group-address>231.7.7.7</group-address>
      <group-port>9876</group-port>
      <connector-ref>netty-connector</connector-ref>
   </broadcast-group>
</broadcast-groups>""", "<connectors-placeholder/>".replace("<connectors-placeholder/>", ""))
    cfg = parse(text)
    dg, bg = cfg.discovery_groups["dg1"], cfg.broadcast_groups["bg"]
    assert (dg.group_address, dg.group_port, dg.refresh_timeout_ms, dg.initial_wait_timeout_ms) == (
        "231.7.7.7", 9876, 10000, 10000)
    assert (dg.local_bind_address, dg.local_bind_port) == (None, -1)
    assert (bg.broadcast_period_ms, bg.connector_refs, bg.local_bind_port) == (2000, ["netty-connector"], -1)
    c = cfg.connectors["netty-connector"]
    assert (c.host, c.port, c.tls, c.params) == ("127.0.0.1", 61616, None, {})


def test_every_group_element_is_read(everything):
    text = core(CONNECTORS, """<discovery-groups><discovery-group name="d">
<local-bind-address>127.0.0.1</local-bind-address><local-bind-port>5432</local-bind-port>
<group-address>ff02::1</group-address><group-port>1</group-port><refresh-timeout>500</refresh-timeout>
<initial-wait-timeout>700</initial-wait-timeout></discovery-group></discovery-groups>
<broadcast-groups><broadcast-group name="b"><local-bind-address>127.0.0.1</local-bind-address>
<local-bind-port>-1</local-bind-port><group-address>239.255.0.1</group-address><group-port>2</group-port>
<broadcast-period>100</broadcast-period><connector-ref>netty-connector</connector-ref>
<connector-ref>eu-east-connector1</connector-ref></broadcast-group></broadcast-groups>""")
    cfg = parse(text)
    d, b = cfg.discovery_groups["d"], cfg.broadcast_groups["b"]
    assert (d.local_bind_address, d.local_bind_port, d.group_address, d.group_port) == ("127.0.0.1", 5432,
                                                                                      "ff02::1", 1)
    assert (d.refresh_timeout_ms, d.initial_wait_timeout_ms) == (500, 700)
    assert (b.group_address, b.group_port, b.broadcast_period_ms) == ("239.255.0.1", 2, 100)
    assert b.connector_refs == ["netty-connector", "eu-east-connector1"]


def test_connector_without_port_takes_artemis_default():
    cfg = parse(core("<connectors><connector name=\"c\">tcp://example.org</connector></connectors>"))
    assert (cfg.connectors["c"].host, cfg.connectors["c"].port) == ("example.org", 61616)


def test_no_federation_elements_leave_empty_defaults():
    cfg = parse(core("<name>b</name>"))
    assert (cfg.connectors, cfg.discovery_groups, cfg.broadcast_groups, cfg.federations) == ({}, {}, {}, [])


# --- matching ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("address, expected", [
    ("queue.bbc.new", True), ("queue.usatoday", True), ("queue.news", True), ("queue.news.world", True),
    ("queue.news.world.eu", True), ("queue.news.sport", False), ("queue.news.sport.f1", False),
    ("queue.bbc", False), ("queue.bbc.new.x", False), ("queue.newsx", False),
])
def test_address_policy_include_exclude_with_hash(address, expected):
    policy = AddressPolicy("p", includes=["queue.bbc.new", "queue.usatoday", "queue.news.#"],
                           excludes=["queue.news.sport.#"])
    assert policy.matches(address) is expected


def test_address_policy_star_matches_one_word():
    policy = AddressPolicy("p", includes=["a.*.c"])
    assert [policy.matches(a) for a in ("a.b.c", "a.c", "a.b.b.c", "a..c")] == [True, False, False, False]


def test_no_include_matches_everything_but_the_excludes():
    assert AddressPolicy("p").matches("anything.at.all")
    assert not AddressPolicy("p", excludes=["secret.#"]).matches("secret.x")
    assert AddressPolicy("p", excludes=["secret.#"]).matches("public.x")


def test_queue_policy_matches_queue_and_address_together():
    policy = QueuePolicy("q", includes=[("#", "queue.news.#"), ("orders.*", "#")], excludes=[("#.local", "#")])
    assert policy.matches("anything", "queue.news.eu")
    assert policy.matches("orders.eu", "other")
    assert not policy.matches("orders.eu.x", "other")
    assert not policy.matches("x.local", "queue.news.eu")          # exclude wins
    assert QueuePolicy("q").matches("q1", "a1")                     # no include: all


# --- policy sets ------------------------------------------------------------------------------------------------

def test_policy_sets_resolve_recursively_once_each_in_order(everything):
    text = core(CONNECTORS, federation(upstream(policy='<policy ref="outer"/><policy ref="a2"/>') + """
<policy-set name="outer"><policy ref="inner"/><policy ref="q1"/><policy ref="a1"/></policy-set>
<policy-set name="inner"><policy ref="a1"/><policy ref="a2"/></policy-set>
<address-policy name="a1"/><address-policy name="a2"/><queue-policy name="q1"/>"""))
    (fed,) = parse(text).federations
    addresses, queues = fed.policies_for(fed.upstreams[0])
    assert [p.name for p in addresses] == ["a1", "a2"] and [q.name for q in queues] == ["q1"]


def test_a_policy_set_containing_itself_is_refused(everything):
    text = core(CONNECTORS, federation(upstream(policy='<policy ref="s1"/>') + """
<policy-set name="s1"><policy ref="s2"/></policy-set>
<policy-set name="s2"><policy ref="s1"/></policy-set>"""))
    assert "policy-set 's1' contains itself (s1 -> s2 -> s1)" in error_of(text)


def test_an_unknown_policy_ref_is_refused_at_its_line():
    text = core(CONNECTORS, federation(upstream(policy='<policy ref="adress-policy"/>')
                                       + '<address-policy name="address-policy"/>'))
    assert_error_at(text, 'ref="adress-policy"', "no address-policy, queue-policy or policy-set named",
                    "did you mean address-policy?")


def test_an_unknown_ref_inside_a_policy_set_is_refused_at_its_line():
    text = core(CONNECTORS, federation(upstream(policy='<policy ref="s"/>')
                                       + '<policy-set name="s">\n<policy ref="nope"/>\n</policy-set>'))
    assert_error_at(text, 'ref="nope"', "'nope'")


# --- credentials ------------------------------------------------------------------------------------------------

def test_federation_login_is_shared_and_a_stream_may_override_it():
    text = core(CONNECTORS, federation(
        upstream(attrs='name="a"') + upstream(attrs='name="b" user="own" password="pw"') + ADDRESS_POLICY,
        attrs='name="f" user="shared" password="spw"'))
    a, b = parse(text).federations[0].upstreams
    assert (a.user, a.password, b.user, b.password) == ("shared", "spw", "own", "pw")
    assert "spw" not in repr(a) and "pw" not in repr(b)


def test_a_user_without_password_takes_it_from_the_credentials_store(tmp_path):
    store = tmp_path / STORE_FILE
    store.write_text("fed-user = st0red\n")
    os.chmod(store, 0o600)
    text = core(CONNECTORS, federation(upstream(attrs='name="a" user="fed-user"') + ADDRESS_POLICY))
    (s,) = parse(text, str(tmp_path / "broker.xml")).federations[0].upstreams
    assert (s.user, s.password) == ("fed-user", "st0red")


def test_a_user_missing_from_the_store_is_refused_at_the_element(tmp_path):
    text = core(CONNECTORS, federation(ADDRESS_POLICY, attrs='name="f" user="nobody"'))
    xml = str(tmp_path / "broker.xml")
    message = error_of(text, xml)
    assert message.startswith(f"{xml}:{line_of(text, 'user=')}: ") and "federation 'f' logs in as 'nobody'" in message


def test_a_password_to_a_remote_host_without_tls_warns():
    text = core('<connectors><connector name="c">tcp://192.0.2.1:5672</connector></connectors>',
                federation(upstream(attrs='name="a" user="u" password="p"',
                                    connectors="<static-connectors><connector-ref>c</connector-ref>"
                                               "</static-connectors>") + ADDRESS_POLICY))
    assert any("without TLS to a remote host" in w for w in parse(text).warnings)


# --- the runtime gate -------------------------------------------------------------------------------------------

GATED = [
    ("queue-policy", '<queue-policy name="q"/>', '<policy ref="q"/>', '<queue-policy'),
    ("downstream", None, None, "<downstream"),
    ("discovery-group", "", "<discovery-group-ref", "<discovery-group-ref"),
    ("ha", "<ha>true</ha>", None, "<ha>"),
    ("circuit-breaker-timeout", "<circuit-breaker-timeout>1</circuit-breaker-timeout>", None, "<circuit-breaker"),
    ("check-period", "<check-period>1</check-period>", None, "<check-period>"),
    ("connection-ttl", "<connection-ttl>1</connection-ttl>", None, "<connection-ttl>"),
    ("call-timeout", "<call-timeout>1</call-timeout>", None, "<call-timeout>"),
    ("call-failover-timeout", "<call-failover-timeout>1</call-failover-timeout>", None, "<call-failover"),
    ("enable-divert-bindings", "", None, "enable-divert-bindings"),
    ("transformer", "", None, "<transformer "),
]


def gated_text(key: str) -> str:
    """A configuration that uses exactly the feature ``key`` on a line of its own (plus address-policy)."""
    policy = '<address-policy name="p"/>'
    if key == "queue-policy":
        return core(CONNECTORS, federation(upstream(policy='<policy ref="q"/>') + '\n<queue-policy name="q"/>'))
    if key == "downstream":
        return core(CONNECTORS, federation(
            "<downstream name=\"d\">\n<static-connectors><connector-ref>netty-connector</connector-ref>"
            "</static-connectors>\n<policy ref=\"p\"/>\n<upstream-connector-ref>netty-connector"
            "</upstream-connector-ref>\n</downstream>\n" + policy))
    if key == "discovery-group":
        return core(CONNECTORS, DISCOVERY, federation(upstream(
            connectors='<discovery-group-ref discovery-group-name="dg1"/>') + policy))
    if key == "enable-divert-bindings":
        return core(CONNECTORS, federation(upstream() + '\n<address-policy name="p" enable-divert-bindings="true"/>'))
    if key == "transformer":
        return core(CONNECTORS, federation(upstream() + '\n<address-policy name="p" transformer-ref="t"/>\n'
                                           '<transformer name="t">\n<class-name>m:C</class-name></transformer>'))
    body = next(b for k, b, _p, _n in GATED if k == key)
    return core(CONNECTORS, federation(upstream(body) + policy))


@pytest.mark.parametrize("key, _body, _policy, needle", GATED, ids=[g[0] for g in GATED])
def test_each_unimplemented_feature_is_refused_at_its_line(address_only, key, _body, _policy, needle):
    text = gated_text(key)
    line = next(i + 1 for i, ln in enumerate(text.splitlines()) if needle in ln)
    message = error_of(text)
    assert message.startswith(f"{PATH}:{line}: ") and "is parsed but not implemented yet" in message, message
    assert fedconfig.FEATURES[key] in message


def test_share_connection_without_a_downstream_to_share_with_has_no_effect_and_is_accepted(address_only):
    """Artemis shares a connection only between an upstream and a downstream to the same broker."""
    text = core(CONNECTORS, federation(upstream("<share-connection>true</share-connection>") + "\n" + ADDRESS_POLICY))
    (fed,) = parse(text).federations
    assert fed.upstreams[0].share_connection is True


def test_share_connection_between_an_upstream_and_a_downstream_is_refused_at_the_downstream(monkeypatch):
    monkeypatch.setattr(fedconfig, "RUNTIME_SUPPORTS", {"address-policy", "downstream"})
    down = ("<downstream name=\"d\">\n<static-connectors><connector-ref>netty-connector</connector-ref>"
            "</static-connectors>\n<share-connection>true</share-connection>\n<policy ref=\"p\"/>\n"
            "<upstream-connector-ref>netty-connector</upstream-connector-ref>\n</downstream>")
    text = core(CONNECTORS, federation(upstream("<share-connection>true</share-connection>") + "\n" + down
                                       + "\n" + ADDRESS_POLICY))
    message = error_of(text)
    assert message.startswith(f"{PATH}:{line_of(text, '<downstream name')}: ")
    assert fedconfig.FEATURES["share-connection"] in message


def _shared_pair(down_connector: str = "netty-connector", down_attrs: str = 'name="d"') -> str:
    down = (f"<downstream {down_attrs}>\n<static-connectors><connector-ref>{down_connector}</connector-ref>"
            "</static-connectors>\n<share-connection>true</share-connection>\n<policy ref=\"p\"/>\n"
            "<upstream-connector-ref>netty-connector</upstream-connector-ref>\n</downstream>")
    return core(CONNECTORS, federation(upstream("<share-connection>true</share-connection>") + "\n" + down
                                       + "\n" + ADDRESS_POLICY))


def test_share_connection_between_an_upstream_and_a_downstream_to_the_same_connectors_is_accepted():
    (fed,) = parse(_shared_pair()).federations
    assert fed.upstreams[0].share_connection and fed.downstreams[0].share_connection


def test_share_connection_with_partly_different_connectors_is_refused_at_the_downstream():
    text = _shared_pair().replace(
        "<static-connectors><connector-ref>netty-connector</connector-ref></static-connectors>\n<share",
        "<static-connectors><connector-ref>netty-connector</connector-ref><connector-ref>eu-east-connector1"
        "</connector-ref></static-connectors>\n<share", 1)   # the upstream's: it comes first
    assert_error_at(text, "<downstream name", "share-connection", "different connectors")


def test_share_connection_with_different_logins_is_refused_at_the_downstream():
    text = _shared_pair(down_attrs='name="d" user="other" password="secret"')
    assert_error_at(text, "<downstream name", "share-connection", "log in differently")


@pytest.mark.parametrize("key", [g[0] for g in GATED if g[0] != "transformer"])
def test_the_lead_lifts_a_refusal_by_adding_its_key(monkeypatch, key):
    monkeypatch.setattr(fedconfig, "RUNTIME_SUPPORTS", {"address-policy", key})
    assert len(parse(gated_text(key)).federations) == 1


def test_transformers_are_loaded_only_when_supported(monkeypatch):
    text = gated_text("transformer")      # class m:C does not exist
    monkeypatch.setattr(fedconfig, "RUNTIME_SUPPORTS", {"address-policy", "transformer"})
    message = error_of(text)
    assert message.startswith(f"{PATH}:{line_of(text, '<transformer name')}: ")
    assert "transformer 't': " in message and "cannot import module 'm'" in message


def test_off_values_of_boolean_settings_are_accepted_unsupported(address_only):
    s = one_stream("<ha>false</ha><share-connection>false</share-connection>")
    assert (s.ha, s.share_connection) == (False, False)


def test_a_plain_address_federation_is_accepted_with_address_policy_alone(address_only):
    text = core(CONNECTORS, federation(upstream() + '<address-policy name="p" max-hops="1">'
                                       '<include address-match="news.#"/></address-policy>'))
    (fed,) = parse(text).federations
    assert fed.address_policies["p"].matches("news.eu")


def test_a_broadcast_group_is_refused_until_supported(address_only):
    text = core(CONNECTORS, "<broadcast-groups>\n<broadcast-group name=\"b\"><group-address>231.7.7.7"
                            "</group-address><group-port>1</group-port><connector-ref>netty-connector"
                            "</connector-ref></broadcast-group>\n</broadcast-groups>")
    assert_error_at(text, "<broadcast-group ", "<broadcast-group> (announcing connectors by UDP) is parsed but "
                                               "not implemented yet")


def test_an_unused_discovery_group_is_accepted():
    assert "dg1" in parse(core(DISCOVERY)).discovery_groups


def test_every_feature_key_names_what_it_refuses():
    assert set(fedconfig.RUNTIME_SUPPORTS) <= set(fedconfig.FEATURES)
    assert {g[0] for g in GATED} | {"address-policy", "broadcast-group", "share-connection"} == set(fedconfig.FEATURES)


# --- errors -----------------------------------------------------------------------------------------------------

def F(body: str) -> str:
    return core(CONNECTORS, DISCOVERY, federation(body))


@pytest.mark.parametrize("text, needle, words", [
    (F(upstream("<retry-intervall>1</retry-intervall>") + ADDRESS_POLICY), "<retry-intervall>",
     ["unknown element <retry-intervall> in <upstream>", "did you mean <retry-interval>"]),
    (F(upstream(attrs='name="u" colour="red"') + ADDRESS_POLICY), 'colour="red"', ["unknown attribute colour"]),
    (F(upstream(connectors="<static-connectors><connector-ref>netty-conector</connector-ref></static-connectors>")
       + ADDRESS_POLICY), "netty-conector", ['no <connector name="netty-conector">', "did you mean <netty-connector>"]),
    (F(upstream(connectors="<static-connectors><connector-ref>netty-connector</connector-ref></static-connectors>"
                           '<discovery-group-ref discovery-group-name="dg1"/>') + ADDRESS_POLICY), "<upstream ",
     ["both <static-connectors> and <discovery-group-ref>"]),
    (F(upstream(connectors="") + ADDRESS_POLICY), "<upstream ", ["needs <static-connectors>"]),
    (F(upstream(connectors="<static-connectors/>") + ADDRESS_POLICY), "<static-connectors/>",
     ["needs at least one <connector-ref>"]),
    (F(upstream(connectors='<discovery-group-ref discovery-group-name="dg2"/>') + ADDRESS_POLICY), '"dg2"',
     ['no <discovery-group name="dg2">']),
    (F(upstream(policy="") + ADDRESS_POLICY), "<upstream ", ["has no <policy"]),
    (F(upstream("<upstream-connector-ref>netty-connector</upstream-connector-ref>") + ADDRESS_POLICY),
     "<upstream-connector-ref>", ["unknown element <upstream-connector-ref> in <upstream>"]),
    (F("<downstream name=\"d\">\n<static-connectors><connector-ref>netty-connector</connector-ref>"
       "</static-connectors>\n<policy ref=\"p\"/></downstream>" + ADDRESS_POLICY), "<downstream ",
     ["needs <upstream-connector-ref>"]),
    (F(upstream("<ha>true</ha>\n<ha>true</ha>") + ADDRESS_POLICY), None, ["duplicate <ha>"]),
    (F(upstream(attrs="") + ADDRESS_POLICY), "<upstream ", ['needs a name="..." attribute']),
    (F(upstream() + "\n" + upstream() + ADDRESS_POLICY), None, ["duplicate upstream/downstream name 'up'"]),
    (F(upstream() + '\n<address-policy name="p"/>\n<queue-policy name="p"/>'), '<queue-policy name="p"/>',
     ["duplicate policy name 'p'"]),
    (F(upstream() + '\n<address-policy name="p" transformer-ref="tt"/>'), 'transformer-ref="tt"',
     ["transformer-ref 'tt': no <transformer name=\"tt\">"]),
    (F(upstream() + ADDRESS_POLICY + '\n<transformer name="t"><property key="k" value="v"/></transformer>'),
     '<transformer name="t">', ["needs <class-name>"]),
    (F(upstream() + ADDRESS_POLICY + '\n<transformer name="t"><transformer-class-name>x:Y'
       '</transformer-class-name></transformer>'), "<transformer name", ["did you mean <class-name>"]),
    (F(upstream("<retry-interval>-1</retry-interval>") + ADDRESS_POLICY), "<retry-interval>", ["at least 0"]),
    (F(upstream("<retry-interval-multiplier>0</retry-interval-multiplier>") + ADDRESS_POLICY), "multiplier",
     ["must be positive"]),
    (F(upstream("<retry-interval-multiplier>fast</retry-interval-multiplier>") + ADDRESS_POLICY), "multiplier",
     ["must be a number"]),
    (F(upstream("<reconnect-attempts>-2</reconnect-attempts>") + ADDRESS_POLICY), "<reconnect-attempts>",
     ["at least -1"]),
    (F(upstream("<ha>maybe</ha>") + ADDRESS_POLICY), "<ha>", ["must be true or false"]),
    (F(upstream() + '\n<address-policy name="p" max-hops="-2"/>'), "max-hops", ["max-hops must be -1"]),
    (F(upstream() + '\n<address-policy name="p" max-hops="one"/>'), "max-hops", ["must be an integer"]),
    (F(upstream() + '\n<address-policy name="p" auto-delete-delay="-5"/>'), "auto-delete-delay",
     ["auto-delete-delay must be >= 0"]),
    (F(upstream() + '\n<address-policy name="p" auto-delete-message-count="-3"/>'), "auto-delete-message",
     ["auto-delete-message-count must be -1"]),
    (F(upstream() + '\n<address-policy name="p" maxhops="1"/>'), "maxhops", ["unknown attribute maxhops",
                                                                            "did you mean max-hops"]),
    (F(upstream() + '\n<address-policy name="p">\n<include address-match="news#"/></address-policy>'),
     "news#", ["'#' and '*' must stand for a whole word"]),
    (F(upstream() + '\n<address-policy name="p">\n<include/></address-policy>'), "<include/>",
     ['needs a address-match="..." attribute']),
    (F(upstream() + '\n<address-policy name="p">\n<include queue-match="q"/></address-policy>'), "queue-match",
     ["unknown attribute queue-match"]),
    (F(upstream() + '\n<address-policy name="p">\n<includes address-match="a"/></address-policy>'), "<includes",
     ["unknown element <includes> in <address-policy>"]),
    (F(upstream(policy='<policy ref="q"/>') + '\n<queue-policy name="q">\n<exclude/></queue-policy>'),
     "<exclude/>", ["needs queue-match=... and/or address-match=..."]),
    (F(upstream() + ADDRESS_POLICY + "\n<shovel/>"), "<shovel/>", ["unknown element <shovel> in <federation>"]),
    (core(CONNECTORS, "<federations>\n<federation/>\n</federations>"), "<federation/>", ['needs a name="..."']),
    (core(CONNECTORS, '<federations>\n<federation name="f"/>\n<federation name="f"/>\n</federations>'), None,
     ["duplicate federation name 'f'"]),
    (core(CONNECTORS, "<federations>\n<upstream/>\n</federations>"), "<upstream/>",
     ["unknown element <upstream> in <federations>"]),
    (core("<connectors>\n<connector name=\"c\"/>\n</connectors>"), '<connector name="c"/>', ["must not be empty"]),
    (core("<connectors>\n<connector>tcp://h:1</connector>\n</connectors>"), "<connector>", ['needs a name="..."']),
    (core("<connectors>\n<connector name=\"c\">tcp://h:1</connector>\n<connector name=\"c\">tcp://h:2</connector>"
          "\n</connectors>"), "tcp://h:2", ["duplicate connector name 'c'"]),
    (core("<connectors>\n<connector name=\"c\">tcp://h:1?reconnect</connector>\n</connectors>"), "reconnect",
     ["is not key=value"]),
    (core("<connectors>\n<connector name=\"c\">tcp://h:99999</connector>\n</connectors>"), "99999",
     ["is not a valid URI"]),
    (core("<connectors>\n<acceptor name=\"c\">tcp://h:1</acceptor>\n</connectors>"), "<acceptor",
     ["unknown element <acceptor> in <connectors>"]),
    (core("<connectors>\n<connector name=\"c\">tcp://h:1?sslEnabled=true;trustStorePath=/no/such.pem"
          "</connector>\n</connectors>"), "sslEnabled", ["connector 'c'"]),
    (core("<discovery-groups>\n<discovery-group name=\"d\"><group-address>10.0.0.1</group-address>"
          "<group-port>1</group-port></discovery-group>\n</discovery-groups>"), "10.0.0.1",
     ["is not a multicast address"]),
    (core("<discovery-groups>\n<discovery-group name=\"d\"><group-address>nope</group-address>"
          "</discovery-group>\n</discovery-groups>"), "nope", ["must be a multicast IP address"]),
    (core("<discovery-groups>\n<discovery-group name=\"d\"><group-address>231.7.7.7</group-address>"
          "</discovery-group>\n</discovery-groups>"), "231.7.7.7", ["needs <group-port>"]),
    (core("<discovery-groups>\n<discovery-group name=\"d\"><group-address>231.7.7.7</group-address>"
          "<group-port>0</group-port></discovery-group>\n</discovery-groups>"), "231.7.7.7",
     ["<group-port> must be a port number"]),
    (core("<discovery-groups>\n<discovery-group name=\"d\">\n<jgroups-file>j.xml</jgroups-file>"
          "</discovery-group>\n</discovery-groups>"), "<jgroups-file>", ["JGroups is not supported"]),
    (core("<discovery-groups>\n<discovery-group name=\"d\"><group-address>231.7.7.7</group-address>"
          "<group-port>1</group-port>\n<refresh-timeout>0</refresh-timeout></discovery-group>\n"
          "</discovery-groups>"), "<refresh-timeout>", ["must be a positive number of ms"]),
    (core("<broadcast-groups>\n<broadcast-group name=\"b\"><group-address>231.7.7.7</group-address>"
          "<group-port>1</group-port></broadcast-group>\n</broadcast-groups>"), "<broadcast-group ",
     ["needs a <connector-ref>"]),
    (core("<broadcast-groups>\n<broadcast-group name=\"b\"><group-address>231.7.7.7</group-address>"
          "<group-port>1</group-port><connector-ref>x</connector-ref></broadcast-group>\n</broadcast-groups>"),
     "<broadcast-group ", ['no <connector name="x">']),
    (core("<federations/>", "<federations/>"), None, ["duplicate <federations>"]),
])
def test_bad_input_is_a_file_line_error(everything, text, needle, words):
    message = error_of(text)
    if needle is not None:
        assert message.startswith(f"{PATH}:{line_of(text, needle)}: "), message
    else:
        assert message.startswith(f"{PATH}:"), message
    for word in words:
        assert word in message, message


def test_connector_tls_parameters_are_read(tmp_path):
    import trustme
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    text = core('<connectors><connector name="c">tcp://127.0.0.1:5671?sslEnabled=true;trustStorePath=ca.pem'
                "</connector></connectors>")
    c = parse(text, str(tmp_path / "broker.xml")).connectors["c"]
    assert c.tls is not None and c.params == {}


def test_a_connector_with_parameters_tdbroker_ignores_is_refused_where_a_stream_uses_it():
    text = core('<connectors><connector name="c">tcp://127.0.0.1:1?consumerWindowSize=0</connector></connectors>',
                federation(upstream(connectors="<static-connectors>\n<connector-ref>c</connector-ref>\n"
                                               "</static-connectors>") + ADDRESS_POLICY))
    assert_error_at(text, "<connector-ref>c<", "has URI parameters tdbroker does not act on", "consumerWindowSize")
    assert parse(core('<connectors><connector name="c">tcp://h:1?consumerWindowSize=0</connector>'
                      "</connectors>")).connectors["c"].params == {"consumerWindowSize": "0"}


def test_a_non_tcp_connector_is_skipped_with_a_warning_and_cannot_be_used():
    cfg = parse(core('<connectors>\n<connector name="in-vm">vm://0</connector>\n</connectors>'))
    assert cfg.connectors == {} and any("connector 'in-vm' (vm scheme) is skipped" in w for w in cfg.warnings)
    text = core('<connectors>\n<connector name="in-vm">vm://0</connector>\n</connectors>',
                federation(upstream(connectors="<static-connectors>\n<connector-ref>in-vm</connector-ref>\n"
                                               "</static-connectors>") + ADDRESS_POLICY))
    assert_error_at(text, "<connector-ref>in-vm", 'no <connector name="in-vm">')


def test_a_federation_without_streams_warns():
    cfg = parse(core(federation(ADDRESS_POLICY)))
    assert any("has no <upstream> or <downstream>: it does nothing" in w for w in cfg.warnings)


def test_policies_for_on_an_unparsed_federation_names_the_bad_ref():
    fed = Federation("f", None, None)
    stream = Stream("upstream", "u", None, None, policy_refs=["missing"])
    with pytest.raises(ValueError, match="no address-policy, queue-policy or policy-set named 'missing'"):
        fed.policies_for(stream)


# --- docs/federation.md -----------------------------------------------------------------------------------------

def test_the_user_documentation_covers_every_name_and_the_gate():
    from tests.paths import REPO
    doc = (REPO / "docs" / "federation.md").read_text(encoding="utf-8")
    names = (list(fedconfig.STREAM_SETTINGS) + list(fedconfig.ADDRESS_POLICY_ATTRS)
             + list(fedconfig.QUEUE_POLICY_ATTRS) + list(fedconfig.FEDERATION_ATTRS) + list(fedconfig.FEATURES)
             + ["static-connectors", "discovery-group-ref", "upstream-connector-ref", "policy-set", "class-name",
                "group-address", "group-port", "local-bind-address", "local-bind-port", "refresh-timeout",
                "initial-wait-timeout", "broadcast-period", "connector-ref"])
    missing = [n for n in names if f"`{n}`" not in doc and f"`<{n}>`" not in doc]
    assert not missing, f"docs/federation.md does not mention {missing}"
    for key in fedconfig.FEATURES:
        assert f"| `{key}` |" in doc, key
    enforced = next(line for line in doc.splitlines() if line.startswith("Enforced today:"))
    listed = set(enforced.split(":", 1)[1].replace("`", "").rstrip(".").replace(" ", "").split(","))
    assert listed == fedconfig.RUNTIME_SUPPORTS, "update 'Enforced today:' in docs/federation.md"
    assert "\n## How it works\n" in doc


def test_the_seed_sample_loads_with_what_the_runtime_enforces_today(transformer_module):
    """The issue's acceptance: the seed's <federations> block works after changing host and port (with the
    runtime's real gate, not a test's)."""
    cfg = parse(core(CONNECTORS, SEED))
    assert [f.name for f in cfg.federations] == ["eu-north-1-federation"]
