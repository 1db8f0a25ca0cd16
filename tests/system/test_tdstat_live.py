"""tdstat against a real tdrouterd: golden output for every view.

The scenario is fixed (clients with fixed names connect one after the other, a fixed number of
messages, one tdstat process per view in a fixed order), so connection and link ids and every counter
are the same on every run. What cannot be (dates, uptimes, ephemeral ports, the uuids proton gives
tdstat's own connection, dynamic reply addresses, the process size) is masked with same-width
placeholders, so the column layout is still compared exactly.

``TDSTAT_GOLDEN_RECORD=FILE`` writes the masked outputs to FILE instead of comparing (to review and
paste after an intended change).
"""

from __future__ import annotations

import json
import os
import re

import pytest

from tests.system.clients import Consumer, Producer, close_all
from tests.system.harness import run_tool

pytestmark = pytest.mark.system

TIMEOUT = 30

SECTIONS = """
address {
    prefix: closest
    distribution: closest
}
address {
    prefix: multicast
    distribution: multicast
}
linkRoute {
    prefix: lr
    direction: in
    connection: broker
}
autoLink {
    address: queue.q1
    direction: out
    connection: broker
}
"""


def tdstat(router, *args: str) -> str:
    return run_tool("tools.tdstat", *args, "-b", f"127.0.0.1:{router.ports['amqp']}").stdout


def _same_width(char: str):
    return lambda m: re.sub(r"[0-9A-Za-z]", char, m.group(0))


def mask(text: str) -> str:
    """Variable tokens replaced by placeholders of the same width (layout stays comparable)."""
    text = re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC$", "<DATE>", text, flags=re.M)
    text = re.sub(r"\b\d{3}:\d\d:\d\d:\d\d\b", _same_width("T"), text)
    text = re.sub(r"127\.0\.0\.1:\d+", lambda m: "127.0.0.1:" + "P" * (len(m.group(0)) - 10), text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", _same_width("x"), text)
    text = re.sub(r"temp\.[A-Za-z0-9_-]{12}", "temp.XXXXXXXXXXXX", text)
    text = re.sub(r"\b\d+ (MiB|KiB|GiB)$", "<VMSIZE>", text, flags=re.M)
    return text


@pytest.fixture
def live_router(router_factory):
    r = router_factory(SECTIONS, router_id="Router.Live")
    url = r.url
    Consumer(url, "closest.work", name="hold-closest", credit=10).start()
    news = Consumer(url, "multicast.news", name="hold-news", credit=10).start()
    ex = Consumer(url, "examples", name="examples-rx", count=5).start()
    sender = Producer(url, "examples", count=5, name="examples-tx").start()
    sender.wait(TIMEOUT)
    ex.wait(TIMEOUT)
    mc = Producer(url, "multicast.news", count=3, name="news-tx").start()
    mc.wait(TIMEOUT)
    news.wait(TIMEOUT, count=3)
    for c in (ex, sender, mc):
        c.close()
    yield r
    close_all()


VIEWS = [
    ("general", ["-g"]), ("connections", ["-c"]), ("links", ["-l"]), ("address", ["-a"]),
    ("nodes", ["-n"]), ("autolinks", ["--autolinks"]), ("linkroutes", ["--linkroutes"]),
    ("links_verbose", ["-l", "-v"]), ("address_verbose", ["-a", "-v"]), ("connections_csv", ["-c", "--csv"]),
    ("address_limit", ["--limit", "2", "-a"]), ("edge", ["-e"]),
]


def test_every_view_matches_golden(live_router):
    outputs = {name: mask(tdstat(live_router, *args)) for name, args in VIEWS}
    record = os.environ.get("TDSTAT_GOLDEN_RECORD")
    if record:
        with open(record, "w") as f:
            f.write("GOLDEN = {\n")
            for name, text in outputs.items():
                f.write(f"    {name!r}: '''\\\n{text}''',\n")
            f.write("}\n")
        pytest.skip(f"golden outputs recorded in {record}")
    for name, _ in VIEWS:
        assert outputs[name] == GOLDEN[name], f"tdstat view {name} differs:\n{outputs[name]}"


def test_json_output_has_real_counts(live_router):
    rows = json.loads(tdstat(live_router, "-l", "--json"))
    by_name = {r["linkName"]: r for r in rows}
    assert by_name["hold-news-rx"]["deliveryCount"] == 3
    assert by_name["hold-news-rx"]["owningAddr"] == "M0multicast.news"
    [general] = json.loads(tdstat(live_router, "-g", "--json"))
    assert general["id"] == "Router.Live" and general["connectionCount"] == 3
    assert general["autoLinkCount"] == 1 and general["linkRouteCount"] == 1


def test_memory_view(live_router):
    # Record sizes change whenever a record gains a field: the layout and the live counts are compared.
    lines = mask(tdstat(live_router, "-m")).splitlines()
    assert lines[3:5] == ["Memory Pools", "  type              size  batch  thread-max  total  in-threads  rebal-in  "
                                          "rebal-out"]
    rows = {line.split()[0]: line.split() for line in lines[6:10]}
    assert list(rows) == ["Address", "InDelivery", "RouterConnection", "RouterLink"]   # sorted, as qdstat
    assert rows["RouterConnection"][4] == "3" and rows["Address"][4] == "7"
    assert lines[10:13] == ["", "Memory Summary", "  VmSize  Pooled"] or lines[12].split() == ["VmSize", "Pooled"]


def test_log_view_lists_the_routers_recent_log_lines(live_router):
    """tdstat --log prints qdstat --log's layout: '<ctime> <module> (<level>) <text>', oldest first."""
    lines = tdstat(live_router, "--log").splitlines()
    assert lines, "no log lines"
    layout = re.compile(r"^\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4} \S+ \((debug|info|notice|warning|error|critical)\) .+")
    assert all(layout.match(line) for line in lines), lines[:3]
    assert any(" ROUTER_CORE (info) connection " in line and " opened " in line for line in lines), lines[:10]
    assert len(tdstat(live_router, "--log", "--limit", "2").splitlines()) == 2


def test_unreachable_router_is_one_line_error(tmp_path):
    from tests.system.harness import free_port
    proc = run_tool("tools.tdstat", "-g", "-b", f"127.0.0.1:{free_port()}", "-t", "3", check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("tdstat: ") and len(proc.stderr.strip().splitlines()) == 1


# Recorded with TDSTAT_GOLDEN_RECORD and reviewed against qdstat's layout (reference samples).
GOLDEN = {
    'general': '''\
<DATE>
Router.Live

Router Statistics
  attr                             value
  ===============================================
  Version                          0.1.0
  Mode                             standalone
  Router Id                        Router.Live
  Worker Threads                   1
  Uptime                           TTT:TT:TT:TT
  VmSize                           <VMSIZE>
  Area                             0
  Link Routes                      1
  Auto Links                       1
  Links                            4
  Nodes                            0
  Addresses                        7
  Connections                      3
  Presettled Count                 0
  Dropped Presettled Count         0
  Accepted Count                   8
  Rejected Count                   0
  Released Count                   0
  Modified Count                   0
  Deliveries Delayed > 1sec        0
  Deliveries Delayed > 10sec       0
  Deliveries Stuck > 10sec         0
  Deliveries to Fallback           0
  Links Blocked                    0
  Ingress Count                    9
  Egress Count                     8
  Transit Count                    0
  Deliveries from Route Container  0
  Deliveries to Route Container    0
''',
    'connections': '''\
<DATE>
Router.Live

Connections
  id  host             container                             role    proto  dir  security     authentication  tenant  last dlv      uptime
  ================================================================================================================================================
  1   127.0.0.1:PPPPP  hold-closest                          normal  amqp   in   no-security  anonymous-user          -             TTT:TT:TT:TT
  2   127.0.0.1:PPPPP  hold-news                             normal  amqp   in   no-security  anonymous-user          TTT:TT:TT:TT  TTT:TT:TT:TT
  7   127.0.0.1:PPPPP  xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx  normal  amqp   in   no-security  anonymous-user          -             TTT:TT:TT:TT
''',
    'links': '''\
<DATE>
Router.Live

Router Links
  type      dir  conn id  id  peer  class   addr               phs  cap  pri  undel  unsett  deliv  presett  psdrop  acc  rej  rel  mod  delay  rate  stuck  cred  blkd
  =======================================================================================================================================================================
  endpoint  out  1        1         mobile  closest.work       0    250  4    0      0       0      0        0       0    0    0    0    0      0     0      10    -
  endpoint  out  2        2         mobile  multicast.news     0    250  4    0      0       3      0        0       3    0    0    0    0      0     0      10    -
  endpoint  out  8        10        local   temp.XXXXXXXXXXXX       250  4    0      0       0      0        0       0    0    0    0    0      0     0      0     -
  endpoint  in   8        11        mobile  $management        0    250  4    0      1       1      0        0       0    0    0    0    0      0     0      249   -
''',
    'address': '''\
<DATE>
Router.Live

Router Addresses
  class    addr                   phs  distrib       pri  local  remote  in  out  thru  fallback
  ================================================================================================
  local    $_management_internal       closest       -    0      0       0   0    0     0
  mobile   $management            0    closest       -    0      0       7   0    0     0
  local    $management                 closest       -    0      0       0   0    0     0
  mobile   _$qd.edge_heartbeat    0    balanced      -    0      0       0   0    0     0
  mobile   closest.work           0    closest       -    1      0       0   0    0     0
  link-in  lr                          linkBalanced  -    0      0       0   0    0     0
  mobile   multicast.news         0    multicast     -    1      0       3   3    0     0
  local    temp.XXXXXXXXXXXX           balanced      -    1      0       0   0    0     0
''',
    'nodes': '''\
<DATE>
Router.Live

Router is Standalone - No Router List
''',
    'autolinks': '''\
<DATE>
Router.Live

AutoLinks
  addr      dir  phs  extAddr  link  status    lastErr
  ======================================================
  queue.q1  out  0                   inactive  
''',
    'linkroutes': '''\
<DATE>
Router.Live

Link Routes
  address  dir  distrib       status
  ======================================
  lr       in   linkBalanced  inactive
''',
    'links_verbose': '''\
<DATE>
Router.Live

Router Links
  type      dir  conn id  id  peer  class   addr               phs  cap  pri  undel  unsett  deliv  presett  psdrop  acc  rej  rel  mod  delay  rate  stuck  cred  blkd  admin    oper  name
  =================================================================================================================================================================================================================================================================
  endpoint  out  1        1         mobile  closest.work       0    250  4    0      0       0      0        0       0    0    0    0    0      0     0      10    -     enabled  up    hold-closest-rx
  endpoint  out  2        2         mobile  multicast.news     0    250  4    0      0       3      0        0       3    0    0    0    0      0     0      10    -     enabled  up    hold-news-rx
  endpoint  out  13       20        local   temp.XXXXXXXXXXXX       250  4    0      0       0      0        0       0    0    0    0    0      0     0      0     -     enabled  up    xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  endpoint  in   13       21        mobile  $management        0    250  4    0      1       1      0        0       0    0    0    0    0      0     0      249   -     enabled  up    xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx-$management
''',
    'address_verbose': '''\
<DATE>
Router.Live

Router Addresses
  class    addr                   phs  distrib       pri  in-proc  local  remote  in  out  thru  fallback  to-proc  from-proc
  =============================================================================================================================
  local    $_management_internal       closest       -    1        0      0       0   0    0     0         0        0
  mobile   $management            0    closest       -    1        0      0       17  0    0     0         0        0
  local    $management                 closest       -    1        0      0       0   0    0     0         0        0
  mobile   _$qd.edge_heartbeat    0    balanced      -    0        0      0       0   0    0     0         0        0
  mobile   closest.work           0    closest       -    0        1      0       0   0    0     0         0        0
  link-in  lr                          linkBalanced  -    0        0      0       0   0    0     0         0        0
  mobile   multicast.news         0    multicast     -    0        1      0       3   3    0     0         0        0
  local    temp.XXXXXXXXXXXX           balanced      -    0        1      0       0   0    0     0         0        0
''',
    'connections_csv': '''\
<DATE>
Router.Live

Connections
"id","host","container","role","proto","dir","security","authentication","tenant","last dlv","uptime"
"1","127.0.0.1:PPPPP","hold-closest","normal","amqp","in","no-security","anonymous-user",,"-","TTT:TT:TT:TT"
"2","127.0.0.1:PPPPP","hold-news","normal","amqp","in","no-security","anonymous-user",,"TTT:TT:TT:TT","TTT:TT:TT:TT"
"15","127.0.0.1:PPPPP","xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx","normal","amqp","in","no-security","anonymous-user",,"-","TTT:TT:TT:TT"
''',
    'address_limit': '''\
<DATE>
Router.Live

Router Addresses
  class   addr                 phs  distrib   pri  local  remote  in  out  thru  fallback
  =========================================================================================
  mobile  $management          0    closest   -    0      0       21  0    0     0
  mobile  _$qd.edge_heartbeat  0    balanced  -    0      0       0   0    0     0
''',
    'edge': '''\
<DATE>
Router.Live

Connections
  id  host  container  role  dir  security  authentication  tenant
  ==================================================================
''',
}


def test_broker_view_and_management(tmp_path):
    from proton import Message
    from proton.utils import BlockingConnection

    from tools.demo import BROKER_XML, PEER_CONNECTION, Daemon

    connection = PEER_CONNECTION.replace('retry-interval="200"', 'retry-interval="200" auto-start="false"')
    xml = BROKER_XML.format(journal=str(tmp_path / "journal"), queue="orders",
                            connections=connection.format(port=9))  # nothing listens on port 9
    with Daemon("broker.daemon", "broker.xml", xml, str(tmp_path)) as broker:
        bus = f"127.0.0.1:{broker.port}"
        conn = BlockingConnection(f"amqp://{bus}")
        sender = conn.create_sender("orders")
        for i in range(3):
            sender.send(Message(body=i))
        conn.close()
        out = mask(run_tool("tools.tdstat", "--broker", "-b", bus).stdout).splitlines()
        assert out[1] == "broker 127.0.0.1:PPPPP"
        assert out[3:] == [
            "Queues",
            "  name    address  routing  durable  messages  paged  consumers  delivered  acked  dead-lettered",
            "  " + "=" * 96,
            "  orders  orders   anycast  yes      3         0      0          0          0      0",
            "",
            "Broker Connections",
            "  name       uri                status   links",
            "  " + "=" * 46,
            "  my-router  tcp://127.0.0.1:P  stopped  0",
        ]
        manage = ("tools.tdmanage", "-b", bus)
        created = json.loads(run_tool(*manage, "create", "--type", "queue", "--name", "q2", "durable=false").stdout)
        assert created["durable"] is False and created["address"] == "q2"
        purged = json.loads(run_tool(*manage, "purge", "--type", "queue", "--name", "orders").stdout)
        assert purged["messagesRemoved"] == 3
        started = json.loads(run_tool(*manage, "startBrokerConnection", "--name", "my-router").stdout)
        assert started["name"] == "my-router"
        run_tool(*manage, "delete", "--type", "queue", "--name", "q2")
        rows = json.loads(run_tool(*manage, "query", "--type", "queue", "name", "messageCount", "temporary").stdout)
        assert [r for r in rows if not r["temporary"]] == [{"name": "orders", "messageCount": 0, "temporary": False}]
        missing = run_tool(*manage, "delete", "--type", "queue", "--name", "nope", check=False)
        assert missing.returncode == 1 and missing.stderr.startswith("tdmanage: 404 ")
