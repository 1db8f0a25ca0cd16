"""tdstat's rendering against qdstat 1.19's verbatim output (reference qdstat-qdmanage-samples-qdr-1.19.txt):
canned management rows in, the exact lines qdstat printed out (titles, headers, column order and widths,
'=' rules, ddd:hh:mm:ss times, '-' placeholders, 2-space indent, CSV quoting)."""

from __future__ import annotations


from tools.tdstat import (Table, fmt_mem, fmt_time, key_parts, render_view)

# -- golden output (everything after qdstat's date and router-id lines) ----------------------------------

GENERAL = """\
Router Statistics
  attr                             value
  ===============================================
  Version                          1.19.0
  Mode                             standalone
  Router Id                        QDR.S
  Worker Threads                   1
  Uptime                           000:00:00:27
  VmSize                           102 MiB
  Area                             0
  Link Routes                      0
  Auto Links                       0
  Links                            4
  Nodes                            0
  Addresses                        7
  Connections                      3
  Presettled Count                 0
  Dropped Presettled Count         0
  Accepted Count                   19
  Rejected Count                   0
  Released Count                   0
  Modified Count                   0
  Deliveries Delayed > 1sec        0
  Deliveries Delayed > 10sec       0
  Deliveries Stuck > 10sec         0
  Deliveries to Fallback           0
  Links Blocked                    0
  Ingress Count                    20
  Egress Count                     24
  Transit Count                    0
  Deliveries from Route Container  0
  Deliveries to Route Container    0
"""

CONNECTIONS = """\
Connections
  id  host             container                             role    proto  dir  security     authentication  tenant  last dlv      uptime
  ================================================================================================================================================
  3   127.0.0.1:54680  c39fda01-640a-4c97-8126-ce838c5234ef  normal  amqp   in   no-security  anonymous-user          -             000:00:00:01
  4   127.0.0.1:54694  ae4e9d96-133e-4f94-a001-a361bd920169  normal  amqp   in   no-security  anonymous-user          000:00:00:00  000:00:00:01
  8   127.0.0.1:54718  e64fad70-6a7c-481b-a766-cad54d4974e2  normal  amqp   in   no-security  no-auth                 000:00:00:00  000:00:00:00
"""

LINKS = """\
Router Links
  type      dir  conn id  id  peer  class   addr                  phs  cap  pri  undel  unsett  deliv  presett  psdrop  acc  rej  rel  mod  delay  rate  stuck  cred  blkd
  ==========================================================================================================================================================================
  endpoint  out  3        8         mobile  closest.work          0    250  4    0      0       0      0        0       0    0    0    0    0      0     0      10    -
  endpoint  out  4        9         mobile  multicast.news        0    250  4    0      0       5      0        0       5    0    0    0    0      1     0      9     -
  endpoint  in   9        18        mobile  $management           0    250  4    0      0       2      0        0       1    0    0    0    0      0     0      250   -
  endpoint  out  9        19        local   temp.IUsX6YfjwmK63Z2       250  4    0      0       1      1        0       0    0    0    0    0      0     0      1     -
"""

LINKS_V = """\
Router Links
  type      dir  conn id  id  peer  class   addr                  phs  cap  pri  undel  unsett  deliv  presett  psdrop  acc  rej  rel  mod  delay  rate  stuck  cred  blkd  admin    oper  name
  ====================================================================================================================================================================================================================================================================
  endpoint  out  3        8         mobile  closest.work          0    250  4    0      0       0      0        0       0    0    0    0    0      0     0      10    -     enabled  up    hold-recv-closest.work
  endpoint  out  4        9         mobile  multicast.news        0    250  4    0      0       5      0        0       5    0    0    0    0      1     0      9     -     enabled  up    hold-recv-multicast.news
  endpoint  in   20       40        mobile  $management           0    250  4    0      0       2      0        0       2    0    0    0    0      0     0      250   -     enabled  up    f730b8ad-50ce-402d-95f1-63da411b4284-$management
  endpoint  out  20       41        local   temp.kidW8Lzi9BMpLHj       250  4    0      0       1      1        0       0    0    0    0    0      0     0      1     -     enabled  up    f730b8ad-50ce-402d-95f1-63da411b4284-1e824b79-a552-4349-ba29-531a8917a47e
"""

LINKS_CSV = """\
Router Links
"type","dir","conn id","id","peer","class","addr","phs","cap","pri","undel","unsett","deliv","presett","psdrop","acc","rej","rel","mod","delay","rate","stuck","cred","blkd"
"endpoint","out","3","8",,"mobile","closest.work","0","250","4","0","0","0","0","0","0","0","0","0","0","0","0","10","-"
"endpoint","out","4","9",,"mobile","multicast.news","0","250","4","0","0","5","0","0","5","0","0","0","0","1","0","9","-"
"endpoint","in","17","34",,"mobile","$management","0","250","4","0","0","2","0","0","1","0","0","0","0","0","0","250","-"
"endpoint","out","17","35",,"local","temp.E0A_MHvbgGftR2O",,"250","4","0","0","1","1","0","0","0","0","0","0","0","0","1","-"
"""

CONNECTIONS_CSV = """\
Connections
"id","host","container","role","proto","dir","security","authentication","tenant","last dlv","uptime"
"3","127.0.0.1:54680","c39fda01-640a-4c97-8126-ce838c5234ef","normal","amqp","in","no-security","anonymous-user",,"-","000:00:00:02"
"4","127.0.0.1:54694","ae4e9d96-133e-4f94-a001-a361bd920169","normal","amqp","in","no-security","anonymous-user",,"000:00:00:01","000:00:00:02"
"16","127.0.0.1:54790","03772e0e-e19d-42a7-93b8-bb2e601faa05","normal","amqp","in","no-security","no-auth",,"000:00:00:00","000:00:00:00"
"""

ADDRESS = """\
Router Addresses
  class   addr                   phs  distrib    pri  local  remote  in  out  thru  fallback
  ============================================================================================
  local   $_management_internal       closest    -    0      0       0   0    0     0
  mobile  $management            0    closest    -    0      0       14  0    0     0
  local   $management                 closest    -    0      0       0   0    0     0
  mobile  _$qd.edge_heartbeat    0    balanced   -    0      0       0   0    0     0
  mobile  closest.work           0    closest    -    1      0       0   0    0     0
  mobile  multicast.news         0    multicast  -    1      0       5   10   0     0
  local   temp.B2ykWjviJybFTq7        balanced   -    1      0       0   1    0     0
"""

ADDRESS_V = """\
Router Addresses
  class   addr                   phs  distrib    pri  in-proc  local  remote  in  out  thru  fallback  to-proc  from-proc
  =========================================================================================================================
  local   $_management_internal       closest    -    1        0      0       0   0    0     0         18       18
  mobile  $management            0    closest    -    1        0      0       47  0    0     0         47       0
  local   $management                 closest    -    1        0      0       0   0    0     0         0        0
  mobile  _$qd.edge_heartbeat    0    balanced   -    0        0      0       0   0    0     0         0        0
  mobile  closest.work           0    closest    -    0        1      0       0   0    0     0         0        0
  mobile  multicast.news         0    multicast  -    0        1      0       5   10   0     0         0        0
  local   temp.I8K5Ui8+W6d5G73        balanced   -    0        1      0       0   1    0     0         0        1
"""

ADDRESS_W = """\
Router Addresses
  class     addr                   phs  distrib       pri  local  remote  in  out  thru  fallback
  =================================================================================================
  local     $_management_internal       closest       -    0      0       0   0    0     0
  mobile    $management            0    closest       -    0      0       2   0    0     0
  local     $management                 closest       -    0      0       0   0    0     0
  mobile    _$qd.edge_heartbeat    0    balanced      -    0      0       0   0    0     0
  link-in   lr                          linkBalanced  -    1      0       0   0    0     0
  link-out  lr                          linkBalanced  -    1      0       0   0    0     0
  mobile    queue.q1               0    balanced      -    1      0       7   7    0     0
  mobile    queue.q1               1    balanced      -    0      0       3   3    0     0
  local     temp.4GftcRIQ25ASVW3        balanced      -    1      0       0   1    0     0
"""

NODES = """\
Routers in the Network
Last Topology Change: Saturday Nov 21 22:43:38 2026 GMT
  router-id  next-hop  link
  ===========================
  QDR.A      (self)    -
  QDR.B      -         0
"""

NODES_V = """\
Routers in the Network
Last Topology Change: Saturday Nov 21 22:43:38 2026 GMT
  router-id  next-hop  link  ver  cost  neighbors  valid-origins
  ================================================================
  QDR.A      (self)    -     1          ['QDR.B']  []
  QDR.B      -         0     1    1     ['QDR.A']  []
"""

AUTOLINKS = """\
AutoLinks
  addr      dir  phs  extAddr  link  status  lastErr
  ====================================================
  queue.q1  out  0             8     active  
  queue.q1  in   1             9     active  
"""

LINKROUTES = """\
Link Routes
  address  dir  distrib       status
  ====================================
  lr       in   linkBalanced  active
  lr       out  linkBalanced  active
"""

AUTOLINKS_NONE = """\
AutoLinks
No AutoLinks found
"""

LINKROUTES_NONE = """\
Link Routes
No Link Routes found
"""

MEMORY_SAMPLE = """\
Memory Pools
  type                        size   batch  thread-max  total  in-threads  rebal-in  rebal-out
  ==============================================================================================
  qd_bitmask_t                24     64     128         128    128         0         0
  qd_buffer_t                 536    64     128         64     64          0         0
  qd_composed_field_t         64     64     128         64     64          0         0
  qd_composite_t              112    64     128         128    128         0         0
  qd_connection_t             2,472  16     32          16     16          0         0
  qd_hash_handle_t            16     64     128         128    128         0         0
  qd_hash_item_t              40     64     128         128    128         0         0
  qd_iterator_t               160    64     128         64     64          0         0
  qd_link_ref_t               24     64     128         64     64          0         0
  qd_link_t                   144    64     128         64     64          0         0
  qd_listener_t               456    64     128         64     64          0         0
  qd_log_entry_t              2,112  16     32          96     96          0         0
  qd_management_context_t     48     64     128         64     64          0         0
  qd_message_content_t        1,040  64     128         64     64          0         0
  qd_message_t                128    64     128         128    128         0         0
  qd_node_t                   56     64     128         64     64          0         0
  qd_parse_node_t             112    64     128         128    128         0         0
  qd_parse_tree_t             32     64     128         64     64          0         0
  qd_parsed_field_t           144    64     128         128    128         0         0
  qd_session_t                56     64     128         64     64          0         0
  qd_timer_t                  72     64     128         64     64          0         0
  qdr_action_t                136    64     128         192    128         2         3
  qdr_address_config_t        80     64     128         64     64          0         0
  qdr_address_t               416    64     128         128    128         0         0
  qdr_connection_info_t       88     64     128         64     64          0         0
  qdr_connection_t            632    64     128         64     64          0         0
  qdr_connection_work_t       56     64     128         64     64          0         0
  qdr_core_timer_t            40     64     128         64     64          0         0
  qdr_delivery_cleanup_t      32     64     128         128    128         0         0
  qdr_delivery_ref_t          24     64     128         64     64          0         0
  qdr_delivery_t              312    64     128         128    128         0         0
  qdr_field_t                 40     64     128         64     64          0         0
  qdr_forward_deliver_info_t  32     64     128         64     64          0         0
  qdr_general_work_t          136    64     128         128    128         0         0
  qdr_link_ref_t              24     64     128         64     64          0         0
  qdr_link_t                  552    64     128         64     64          0         0
  qdr_link_work_t             48     64     128         64     64          0         0
  qdr_query_t                 344    64     128         64     64          0         0
  qdr_terminus_t              64     64     128         64     64          0         0

Memory Summary
  VmSize   Pooled
  ==================
  102 MiB  741 KiB
"""


def lines(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


def render(view, rows, **kw):
    data = {"rows": rows}
    if "vm_size" in kw:
        data["vm_size"] = kw.pop("vm_size")
    return render_view(view, data, **kw)


GENERAL_ROW = {
    "version": "1.19.0", "mode": "standalone", "id": "QDR.S", "workerThreads": 1, "uptimeSeconds": 27,
    "memoryUsage": 107409408, "area": "0", "linkRouteCount": 0, "autoLinkCount": 0, "linkCount": 4, "nodeCount": 0,
    "addrCount": 7, "connectionCount": 3, "presettledDeliveries": 0, "droppedPresettledDeliveries": 0,
    "acceptedDeliveries": 19, "rejectedDeliveries": 0, "releasedDeliveries": 0, "modifiedDeliveries": 0,
    "deliveriesDelayed1Sec": 0, "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0,
    "deliveriesRedirectedToFallback": 0, "linksBlocked": 0, "deliveriesIngress": 20, "deliveriesEgress": 24,
    "deliveriesTransit": 0, "deliveriesIngressRouteContainer": 0, "deliveriesEgressRouteContainer": 0,
}


def conn(identity, host, container, auth, last, up):
    return {"identity": identity, "host": host, "container": container, "role": "normal", "protocol": "amqp",
            "dir": "in", "isEncrypted": False, "sasl": "ANONYMOUS" if auth else None, "isAuthenticated": auth,
            "user": "anonymous", "tenant": None, "lastDlvSeconds": last, "uptimeSeconds": up}


CONNECTIONS_ROWS = [
    conn("4", "127.0.0.1:54694", "ae4e9d96-133e-4f94-a001-a361bd920169", True, 0, 1),
    conn("3", "127.0.0.1:54680", "c39fda01-640a-4c97-8126-ce838c5234ef", True, None, 1),
    conn("8", "127.0.0.1:54718", "e64fad70-6a7c-481b-a766-cad54d4974e2", False, 0, 0),
]


def link(direction, conn_id, identity, owning, deliv, acc=0, presett=0, rate=0, cred=250, name=""):
    return {"linkType": "endpoint", "linkDir": direction, "connectionId": conn_id, "identity": identity,
            "peer": None, "owningAddr": owning, "capacity": 250, "undeliveredCount": 0, "unsettledCount": 0,
            "deliveryCount": deliv, "presettledCount": presett, "droppedPresettledCount": 0, "acceptedCount": acc,
            "rejectedCount": 0, "releasedCount": 0, "modifiedCount": 0, "deliveriesDelayed1Sec": 0,
            "deliveriesDelayed10Sec": 0, "deliveriesStuck": 0, "creditAvailable": cred, "zeroCreditSeconds": 0,
            "adminStatus": "enabled", "operStatus": "up", "linkName": name, "priority": 4, "settleRate": rate}


LINK_ROWS = [
    link("out", "3", "8", "M0closest.work", 0, cred=10),
    link("out", "4", "9", "M0multicast.news", 5, acc=5, rate=1, cred=9),
    link("in", "9", "18", "M0$management", 2, acc=1),
    link("out", "9", "19", "Ltemp.IUsX6YfjwmK63Z2", 1, presett=1, cred=1),
]


def addr(key, dist, local=0, ingress=0, egress=0, in_proc=0, to_proc=0, from_proc=0, containers=0):
    return {"name": key, "distribution": dist, "inProcess": in_proc, "subscriberCount": local, "remoteCount": 0,
            "containerCount": containers, "deliveriesIngress": ingress, "deliveriesEgress": egress,
            "deliveriesTransit": 0, "deliveriesToContainer": to_proc, "deliveriesFromContainer": from_proc,
            "deliveriesRedirectedToFallback": 0, "priority": -1}


# In the agent's order (not sorted): tdstat sorts by address, keeping that order for equal addresses.
ADDRESS_ROWS = [
    addr("M0closest.work", "closest", local=1),
    addr("M0$management", "closest", ingress=14),
    addr("L$_management_internal", "closest"),
    addr("L$management", "closest"),
    addr("M0multicast.news", "multicast", local=1, ingress=5, egress=10),
    addr("M0_$qd.edge_heartbeat", "balanced"),
    addr("Ltemp.B2ykWjviJybFTq7", "balanced", local=1, egress=1),
]


def test_general():
    assert render("general", [GENERAL_ROW]) == lines(GENERAL)


def test_connections_text_and_csv():
    assert render("connections", CONNECTIONS_ROWS) == lines(CONNECTIONS)
    rows = [dict(r) for r in CONNECTIONS_ROWS]
    rows[0].update(lastDlvSeconds=1, uptimeSeconds=2)
    rows[1].update(uptimeSeconds=2)
    rows[2].update(identity="16", host="127.0.0.1:54790", container="03772e0e-e19d-42a7-93b8-bb2e601faa05")
    assert render("connections", rows, csv=True) == lines(CONNECTIONS_CSV)


def test_links_text_verbose_and_csv():
    assert render("links", LINK_ROWS) == lines(LINKS)
    rows = [dict(r) for r in LINK_ROWS]
    rows[2].update(connectionId="17", identity="34")
    rows[3].update(connectionId="17", identity="35", owningAddr="Ltemp.E0A_MHvbgGftR2O")
    assert render("links", rows, csv=True) == lines(LINKS_CSV)
    names = ["hold-recv-closest.work", "hold-recv-multicast.news",
             "f730b8ad-50ce-402d-95f1-63da411b4284-$management",
             "f730b8ad-50ce-402d-95f1-63da411b4284-1e824b79-a552-4349-ba29-531a8917a47e"]
    rows = [dict(r, linkName=n) for r, n in zip(LINK_ROWS, names)]
    rows[2].update(connectionId="20", identity="40", acceptedCount=2)
    rows[3].update(connectionId="20", identity="41", owningAddr="Ltemp.kidW8Lzi9BMpLHj")
    assert render("links", rows, verbose=True) == lines(LINKS_V)


def test_addresses_sorted_and_verbose():
    assert render("address", ADDRESS_ROWS) == lines(ADDRESS)
    rows = [dict(r) for r in ADDRESS_ROWS]
    by_key = {r["name"]: r for r in rows}
    by_key["L$_management_internal"].update(inProcess=1, deliveriesToContainer=18, deliveriesFromContainer=18)
    by_key["M0$management"].update(inProcess=1, deliveriesIngress=47, deliveriesToContainer=47)
    by_key["L$management"].update(inProcess=1)
    by_key["Ltemp.B2ykWjviJybFTq7"].update(name="Ltemp.I8K5Ui8+W6d5G73", deliveriesFromContainer=1)
    assert render("address", rows, verbose=True) == lines(ADDRESS_V)


def test_addresses_with_link_routes_use_container_count():
    rows = [
        addr("M0queue.q1", "balanced", local=1, ingress=7, egress=7),
        addr("M1queue.q1", "balanced", ingress=3, egress=3),
        addr("L$_management_internal", "closest"), addr("M0$management", "closest", ingress=2),
        addr("L$management", "closest"), addr("M0_$qd.edge_heartbeat", "balanced"),
        addr("Clr", "linkBalanced", containers=1), addr("Dlr", "linkBalanced", containers=1),
        addr("Ltemp.4GftcRIQ25ASVW3", "balanced", local=1, egress=1),
    ]
    assert render("address", rows) == lines(ADDRESS_W)


NODE_ROWS = [
    {"id": "QDR.B", "protocolVersion": 1, "linkState": ["QDR.A"], "nextHop": None, "validOrigins": [],
     "routerLink": 0, "cost": 1, "lastTopoChange": None},
    {"id": "QDR.A", "protocolVersion": 1, "linkState": ["QDR.B"], "nextHop": "(self)", "validOrigins": [],
     "routerLink": None, "cost": None, "lastTopoChange": 1795301018},
]


def test_nodes():
    assert render("nodes", NODE_ROWS) == lines(NODES)
    assert render("nodes", NODE_ROWS, verbose=True) == lines(NODES_V)
    assert render("nodes", []) == ["Router is Standalone - No Router List"]


def test_autolinks_and_linkroutes():
    rows = [{"address": "queue.q1", "direction": "out", "phase": 0, "externalAddress": None, "linkRef": "8",
             "operStatus": "active", "lastError": None},
            {"address": "queue.q1", "direction": "in", "phase": 1, "externalAddress": None, "linkRef": "9",
             "operStatus": "active", "lastError": None}]
    assert render("autolinks", rows) == lines(AUTOLINKS)
    assert render("autolinks", []) == lines(AUTOLINKS_NONE)
    routes = [{"prefix": "lr", "pattern": None, "direction": d, "distribution": "linkBalanced",
               "operStatus": "active", "addExternalPrefix": None, "delExternalPrefix": None} for d in ("in", "out")]
    assert render("linkroutes", routes) == lines(LINKROUTES)
    assert render("linkroutes", []) == lines(LINKROUTES_NONE)
    routes[0]["addExternalPrefix"] = "ext."
    out = render("linkroutes", routes)
    assert out[1].split() == ["address", "dir", "distrib", "status", "add-ext-prefix", "del-ext-prefix"]


def _memory_rows_from_golden():
    rows = []
    for line in lines(MEMORY_SAMPLE)[3:]:
        if not line.strip():
            break
        name, *nums = line.split()
        nums = [int(n.replace(",", "")) for n in nums]
        rows.append(dict(zip(["typeName", "typeSize", "transferBatchSize", "localFreeListMax", "totalAllocFromHeap",
                              "heldByThreads", "batchesRebalancedToThreads", "batchesRebalancedToGlobal"],
                             [name, *nums])))
    return rows


def test_memory_pools_table():
    rows = _memory_rows_from_golden()
    assert len(rows) == 39
    out = render("memory", rows, vm_size=107409408)
    golden = lines(MEMORY_SAMPLE)
    n = len(rows) + 3
    assert out[:n] == golden[:n]
    assert out[n:n + 3] == ["", "Memory Summary", "  VmSize   Pooled"]
    assert out[n + 3] == "  " + "=" * 18 and out[n + 4].startswith("  102 MiB  ")


def test_helpers():
    assert fmt_time(None) == "-"
    assert fmt_time(0) == "000:00:00:00"
    assert fmt_time(90061) == "001:01:01:01"
    assert fmt_mem(107409408) == "102 MiB" and fmt_mem(758784) == "741 KiB" and fmt_mem(None) == "-"
    assert key_parts("M1queue.q1") == ("mobile", "queue.q1", "1")
    assert key_parts("RQDR.B") == ("router", "QDR.B", "")
    assert key_parts(None) == ("", "", "")
    t = Table("T", ["a", "bb"], [["xxxx", None], [1, True]])
    assert t.lines() == ["T", "  a     bb", "  ============", "  xxxx  ", "  1     true"]
    assert t.lines(csv=True) == ["T", '"a","bb"', '"xxxx",', '"1","true"']


def test_broker_view():
    from tools.tdstat import render_broker, render_lines
    out = render_lines(render_broker(
        [{"name": "orders", "address": "orders", "routingType": "anycast", "durable": True, "messageCount": 3,
          "consumerCount": 0, "deliveredCount": 5, "acknowledgedCount": 2, "deadLetteredCount": 1}],
        [{"name": "to-router", "uri": "tcp://127.0.0.1:5672", "status": "STARTED", "links": 2}]))
    assert out == [
        "Queues",
        "  name    address  routing  durable  messages  paged  consumers  delivered  acked  dead-lettered",
        "  " + "=" * 96,
        "  orders  orders   anycast  yes      3         0      0          5          2      1",
        "",
        "Broker Connections",
        "  name       uri                   status   links",
        "  " + "=" * 49,
        "  to-router  tcp://127.0.0.1:5672  STARTED  2",
    ]


# -- qdstat -m and the vhost views ---------------------------------------------------------------------------
def _pool(name, size, batch, tmax, total, held, rin, rout):
    return {"identity": f"allocator/{name}", "typeName": name, "typeSize": size, "transferBatchSize": batch,
            "localFreeListMax": tmax, "totalAllocFromHeap": total, "heldByThreads": held,
            "batchesRebalancedToThreads": rin, "batchesRebalancedToGlobal": rout}


def test_memory_view_is_qdstats_layout_sorted_by_type():
    rows = [_pool("qdr_action_t", 136, 64, 128, 192, 128, 2, 3), _pool("qd_connection_t", 2472, 16, 32, 16, 16, 0, 0),
            _pool("qd_bitmask_t", 24, 64, 128, 128, 128, 0, 0)]
    lines = render_view("memory", {"rows": rows, "vm_size": 107409408})
    assert lines == [
        "Memory Pools",
        "  type             size   batch  thread-max  total  in-threads  rebal-in  rebal-out",
        "  " + "=" * 83,
        "  qd_bitmask_t     24     64     128         128    128         0         0",
        "  qd_connection_t  2,472  16     32          16     16          0         0",
        "  qdr_action_t     136    64     128         192    128         2         3",
        "",
        "Memory Summary",
        "  VmSize   Pooled",
        "  =================",
        "  102 MiB  67 KiB",
    ]
    assert render_view("memory", {"rows": [], "vm_size": 1}) == ["No memory statistics available"]


VHOST_ROW = {"hostname": "$default", "maxConnections": 6, "maxMessageSize": 0, "maxConnectionsPerUser": 2,
             "maxConnectionsPerHost": 65535, "allowUnknownUser": False,
             "groups": {"admin": {"users": "admin", "allowDynamicSource": True, "maxSenders": 5}}}


def test_vhost_views_are_qdstats_layout():
    assert render_view("vhosts", {"rows": [VHOST_ROW]}) == [
        "Vhosts",
        "  hostname  maxConnections  maxMessageSize  maxConnectionsPerUser  maxConnectionsPerHost  "
        "allowUnknownUser  groups",
        "  " + "=" * 114,
        "  $default  6               0               2                      65535                  "
        "False             1",
    ]
    lines = render_view("vhostgroups", {"rows": [VHOST_ROW], "defaults": {"maxFrameSize": 16384,
                                                                          "allowUserIdProxy": False}})
    assert lines[0] == "Vhost Groups"
    head, row = lines[1].split(), lines[3].split()
    values = dict(zip(head, row))
    assert values["maxSenders"] == "5" and values["maxFrameSize"] == "16384"
    assert values["maxSessions"] == "(nil)" and values["allowDynamicSource"] == "True"
    assert values["allowUserIdProxy"] == "False" and values["allowWaypointLinks"] == "False"
    assert lines[4:8] == ["", "Vhost '$default' UserGroup 'admin'", "  attr           value", "  " + "=" * 25]
    assert lines[8:11] == ["  vhost          $default", "  group          admin", "  users          admin"]
    assert render_view("vhosts", {"rows": []}) == ["No Vhosts"]
    stats = {"hostname": "$default", "connectionsApproved": 3, "connectionsDenied": 1, "connectionsCurrent": 2,
             "sessionDenied": 0, "senderDenied": 0, "receiverDenied": 0, "maxMessageSizeDenied": 0,
             "perUserState": {"alice": 2}}
    lines = render_view("vhoststats", {"rows": [stats]})
    assert lines[0] == "Vhost Stats" and lines[3].split() == ["$default", "3", "1", "2", "0", "0", "0", "0"]
    assert lines[4:9] == ["", "Vhost User Stats", "  vhost     user   remote hosts", "  " + "=" * 31,
                          "  $default  alice  2"]
    assert render_view("vhoststats", {"rows": []}) == ["No Vhost Stats"]
