// trio-dispatch web console (docs/console.md). It speaks only to the daemon that served it: POST
// /api/management with a JSON management request, and {"node": ID} for another router of the mesh (the
// router relays it over _topo/0/ID/$management). Everything is read again every POLL_MS; message rates are
// the difference of delivery counts between two polls. Text from the daemon goes into the page as text
// (textContent), never as markup.
"use strict";

const params = new URLSearchParams(location.search);
const POLL_MS = Number(params.get("interval") || 1000);
const SVG = "http://www.w3.org/2000/svg";

const state = { me: null, model: null, prev: null, polls: 0, busy: false };

// ---- talking to the daemon ---------------------------------------------------------------------------
async function manage(request) {
  const resp = await fetch("api/management", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(request),
    credentials: "same-origin",
  });
  const answer = await resp.json();
  if (answer.status >= 400) {
    const err = new Error(`${answer.status} ${answer.description}`);
    err.status = answer.status;
    throw err;
  }
  return answer;
}

// QUERY as a list of objects; node null: the router serving the page.
async function query(node, entityType, attributeNames) {
  const req = { operation: "QUERY", entityType };
  if (attributeNames) req.attributeNames = attributeNames;
  if (node && node !== state.me.id) req.node = node;
  const body = (await manage(req)).body;
  return body.results.map((row) => Object.fromEntries(body.attributeNames.map((n, i) => [n, row[i]])));
}

// ---- DOM helpers -------------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

function svg(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

function show(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function table(rows, columns, { id, actions } = {}) {
  const head = el("tr", {}, ...columns.map((c) => el("th", { text: c })), actions ? el("th", { text: "" }) : null);
  const body = rows.map((r) => el("tr", { "data-key": show(r.identity ?? r.name ?? r.key) },
    ...columns.map((c) => el("td", { class: typeof r[c] === "number" ? "num" : "", text: show(r[c]) })),
    actions ? el("td", {}, ...actions(r)) : null));
  const t = el("table", id ? { id } : {}, el("thead", {}, head), el("tbody", {}, ...body));
  return t;
}

function section(title, ...content) {
  return el("section", {}, el("h2", { text: title }), ...content);
}

// ---- the model: the whole mesh, read from each router's management ------------------------------------
const CONN_ATTRS = ["identity", "role", "dir", "container", "host", "user", "isAuthenticated"];
const LINK_ATTRS = ["identity", "linkType", "linkDir", "connectionId", "deliveryCount", "owningAddr"];

async function readRouter(id) {
  const [connections, links] = await Promise.all([query(id, "connection", CONN_ATTRS), query(id, "router.link", LINK_ATTRS)]);
  return { id, connections, links };
}

async function readMesh() {
  let nodes = [];
  try {
    nodes = (await query(null, "router.node", ["id", "nextHop", "cost"])).map((n) => n.id);
  } catch (e) { /* a standalone or edge router has no node table */ }
  if (!nodes.includes(state.me.id)) nodes.unshift(state.me.id);
  const routers = await Promise.all(nodes.map((id) => readRouter(id).catch((err) => ({ id, error: String(err) }))));
  return { at: performance.now(), routers: routers.filter((r) => !r.error), unreachable: routers.filter((r) => r.error) };
}

// Inter-router traffic: per router, the deliveries on its outgoing inter-router links, by the peer router.
function interRouterCounts(model) {
  const counts = {};
  for (const r of model.routers) {
    const peerOf = {};
    for (const c of r.connections) if (c.role === "inter-router") peerOf[c.identity] = c.container;
    for (const l of r.links) {
      if (l.linkType !== "inter-router" || l.linkDir !== "out") continue;
      const peer = peerOf[l.connectionId];
      if (!peer) continue;
      const key = `${r.id}>${peer}`;
      counts[key] = (counts[key] || 0) + (l.deliveryCount || 0);
    }
  }
  return counts;
}

function rates(model, prev) {
  const now = interRouterCounts(model);
  const out = {};
  if (!prev) return out;
  const before = interRouterCounts(prev);
  const seconds = Math.max((model.at - prev.at) / 1000, 0.001);
  for (const [k, v] of Object.entries(now)) out[k] = Math.max(0, (v - (before[k] ?? v)) / seconds);
  return out;
}

// ---- topology ------------------------------------------------------------------------------------------
function topology(model, linkRates) {
  const W = 900, H = 560, cx = W / 2, cy = H / 2;
  const interiors = model.routers.map((r) => r.id).sort();
  const radius = interiors.length > 1 ? 170 : 0;
  const pos = {};
  interiors.forEach((id, i) => {
    const a = (2 * Math.PI * i) / interiors.length - Math.PI / 2;
    pos[id] = [cx + radius * Math.cos(a), cy + radius * Math.sin(a)];
  });
  const root = svg("svg", { class: "topology", id: "topology", width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  // inter-router connections, one line per pair, labelled with the message rate each way
  const pairs = new Set();
  for (const r of model.routers) {
    for (const c of r.connections) {
      if (c.role !== "inter-router" || !pos[c.container]) continue;
      pairs.add([r.id, c.container].sort().join("|"));
    }
  }
  for (const p of pairs) {
    const [a, b] = p.split("|");
    const ab = linkRates[`${a}>${b}`] || 0, ba = linkRates[`${b}>${a}`] || 0;
    const total = ab + ba;
    const g = svg("g", { class: "edge" + (total > 0.5 ? " busy" : ""), "data-from": a, "data-to": b,
                         "data-rate": total.toFixed(1) });
    const [x1, y1] = pos[a], [x2, y2] = pos[b];
    g.append(svg("line", { x1, y1, x2, y2 }));
    g.append(svg("text", { x: (x1 + x2) / 2, y: (y1 + y2) / 2 - 6 },
                 `${a}→${b} ${ab.toFixed(0)}/s · ${b}→${a} ${ba.toFixed(0)}/s`));
    root.append(g);
  }
  // interiors (or the one standalone/edge router), with what is attached to each
  for (const r of model.routers) {
    const [x, y] = pos[r.id];
    const attached = r.connections.filter((c) => c.dir === "in" && (c.role === "edge" || c.role === "route-container"));
    const outward = Math.atan2(y - cy, x - cx) || Math.PI / 2;
    attached.forEach((c, i) => {
      const spread = (i - (attached.length - 1) / 2) * 0.45;
      const ax = x + 115 * Math.cos(outward + spread), ay = y + 115 * Math.sin(outward + spread);
      const line = svg("g", { class: "attach" });
      line.append(svg("line", { x1: x, y1: y, x2: ax, y2: ay }));
      root.prepend(line);
      const kind = c.role === "edge" ? "edge" : "broker";
      const g = svg("g", { class: `node ${kind}`, "data-id": c.container || "?", "data-kind": kind, "data-router": r.id });
      if (kind === "edge") g.append(svg("circle", { cx: ax, cy: ay, r: 20 }));
      else g.append(svg("rect", { x: ax - 34, y: ay - 14, width: 68, height: 28, rx: 4 }));
      g.append(svg("text", { x: ax, y: ay + 4 }, c.container || "?"));
      root.append(g);
    });
    const clients = r.connections.filter((c) => c.role === "normal" && c.dir === "in").length;
    const g = svg("g", { class: "node interior", "data-id": r.id, "data-kind": "interior", "data-clients": clients });
    g.append(svg("circle", { cx: x, cy: y, r: 32 }));
    g.append(svg("text", { x, y: y + 4 }, r.id));
    g.append(svg("text", { x, y: y + 48, class: "clients" }, `${clients} client${clients === 1 ? "" : "s"}`));
    g.style.cursor = "pointer";
    g.addEventListener("click", () => { location.hash = `#/router/${encodeURIComponent(r.id)}`; });
    root.append(g);
  }
  const notes = model.unreachable.map((u) => el("li", { text: `${u.id}: ${u.error}` }));
  return el("div", {}, root, notes.length ? section("Not answering", el("ul", {}, ...notes)) : null);
}

// ---- router pages --------------------------------------------------------------------------------------
function nodeParam() {
  const m = location.hash.match(/^#\/[a-z]+\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : state.me.id;
}

function routerPicker(view, current) {
  const ids = state.model ? state.model.routers.map((r) => r.id) : [current];
  return el("p", {}, "Router: ", ...ids.map((id) => el("a", {
    href: `#/${view}/${encodeURIComponent(id)}`, class: id === current ? "active" : "", style: "margin-right:0.8em",
    text: id })));
}

const CONFIG_TYPES = {
  address: ["router.config.address", ["name", "prefix", "pattern", "distribution", "waypoint", "priority"]],
  linkRoute: ["router.config.linkRoute", ["name", "prefix", "pattern", "direction", "connection", "containerId"]],
  autoLink: ["router.config.autoLink", ["name", "address", "direction", "connection", "containerId", "linkRef", "operStatus"]],
  connector: ["connector", ["name", "host", "port", "role", "connectionStatus"]],
  listener: ["listener", ["name", "host", "port", "role"]],
};

async function routerPage(node) {
  const [routerRow] = await query(node, "router");
  const [connections, config] = await Promise.all([
    query(node, "connection", ["identity", "container", "role", "dir", "host", "user", "isAuthenticated", "uptimeSeconds"]),
    Promise.all(Object.entries(CONFIG_TYPES).map(([k, [t, cols]]) => query(node, t, cols).then((rows) => [k, rows]))),
  ]);
  const attrs = el("dl", { class: "attrs", id: "router-attributes" });
  for (const [k, v] of Object.entries(routerRow)) attrs.append(el("dt", { text: k }), el("dd", { text: show(v) }));
  const parts = [routerPicker("router", node), section(`Router ${node}`, attrs),
                 section("Connections", table(connections, ["identity", "container", "role", "dir", "host", "user", "uptimeSeconds"], { id: "connections" }))];
  for (const [kind, rows] of config) {
    const [type, cols] = CONFIG_TYPES[kind];
    parts.push(section(`Configuration: ${kind}`, table(rows, cols, {
      id: `config-${kind}`,
      actions: state.me.mayManage ? (r) => [el("button", { class: "delete", text: "Delete",
        onclick: () => act({ operation: "DELETE", type, name: r.name, node }) })] : null,
    })));
  }
  if (state.me.mayManage) parts.push(createForm(node));
  return el("div", {}, ...parts);
}

// CREATE as tdmanage does it: a type, a name and attribute=value lines.
function createForm(node) {
  const type = el("select", { name: "type" }, ...Object.keys(CONFIG_TYPES).map((k) => el("option", { value: k, text: k })));
  const name = el("input", { name: "name", placeholder: "name" });
  const attrs = el("textarea", { name: "attributes", placeholder: "prefix=orders\ndistribution=multicast" });
  const form = el("form", { class: "manage", id: "create-form" },
    el("label", {}, "Create ", type), el("label", {}, name), attrs, " ", el("button", { type: "submit", text: "Create" }));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const body = {};
    for (const line of attrs.value.split("\n")) {
      const i = line.indexOf("=");
      if (i > 0) body[line.slice(0, i).trim()] = line.slice(i + 1).trim();
    }
    act({ operation: "CREATE", type: CONFIG_TYPES[type.value][0], name: name.value || undefined, body, node });
  });
  return section("Manage", form);
}

async function act(request) {
  if (request.node === state.me.id) delete request.node;
  const out = document.getElementById("action-result") || el("span", { id: "action-result", class: "result" });
  document.getElementById("view").prepend(out);
  try {
    const answer = await manage(request);
    out.className = "result";
    out.textContent = `${request.operation} ${request.name || ""}: ${answer.status} ${answer.description}`;
  } catch (err) {
    out.className = "result error";
    out.textContent = `${request.operation} ${request.name || ""}: ${err.message}`;
  }
  refresh(true);
}

async function addressesPage(node) {
  const rows = await query(node, "router.address", ["key", "distribution", "inProcess", "subscriberCount", "remoteCount",
    "containerCount", "deliveriesIngress", "deliveriesEgress", "deliveriesTransit", "deliveriesToContainer", "deliveriesFromContainer"]);
  return el("div", {}, routerPicker("addresses", node), section(`Addresses of ${node}`, table(rows, Object.keys(rows[0] || { key: 0 }), { id: "addresses" })));
}

async function linksPage(node) {
  const rows = await query(node, "router.link", ["identity", "linkType", "linkDir", "connectionId", "owningAddr", "capacity",
    "undeliveredCount", "unsettledCount", "deliveryCount", "acceptedCount", "releasedCount", "rejectedCount", "modifiedCount",
    "deliveriesDelayed1Sec", "deliveriesStuck", "creditAvailable"]);
  return el("div", {}, routerPicker("links", node), section(`Links of ${node}`, table(rows, Object.keys(rows[0] || { identity: 0 }), { id: "links" })));
}

// ---- broker page (served by tdbroker) -------------------------------------------------------------------
const ARTEMIS = "org.apache.activemq.artemis.";

async function brokerPage() {
  if (state.me.kind !== "broker") {
    return el("p", { text: "This page is served by tdbroker: open the console on the broker's HTTP acceptor " +
                           "(an <acceptor> with protocols=HTTP)." });
  }
  const q = (t, attrs) => query(null, ARTEMIS + t, attrs).catch(() => []);
  const [queues, acceptors, bridges, mirrors, connections] = await Promise.all([
    q("queue", ["name", "address", "routingType", "durable", "messageCount", "consumerCount", "deliveredCount", "acknowledgedCount", "deadLetteredCount", "pagedMessageCount"]),
    q("acceptor", ["name", "bound", "started", "tls", "connections"]),
    q("networkBridge", ["name", "remote", "direction", "state", "forwarded"]),
    q("mirror", ["name", "remote", "state", "queuedEvents", "oldestEventAgeMs", "eventsSent"]),
    q("brokerConnection", ["name", "uri", "status", "links"]),
  ]);
  const parts = [
    section(`Broker ${state.me.id}: queues`, table(queues, ["name", "address", "routingType", "durable", "messageCount", "consumerCount", "deliveredCount", "acknowledgedCount", "deadLetteredCount", "pagedMessageCount"], {
      id: "queues",
      actions: state.me.mayManage ? (r) => [
        el("button", { text: "Purge", onclick: () => act({ operation: "PURGE", type: "queue", name: r.name }) }),
        el("button", { class: "delete", text: "Delete", onclick: () => act({ operation: "DELETE", type: "queue", name: r.name }) })] : null,
    })),
    section("Acceptors", table(acceptors, ["name", "bound", "started", "tls", "connections"], { id: "acceptors" })),
    section("Broker connections", table(connections, ["name", "uri", "status", "links"], { id: "broker-connections" })),
    section("Network bridges", table(bridges, ["name", "remote", "direction", "state", "forwarded"], { id: "bridges" })),
    section("Mirrors", table(mirrors, ["name", "remote", "state", "queuedEvents", "oldestEventAgeMs", "eventsSent"], { id: "mirrors" })),
  ];
  if (state.me.mayManage) {
    const name = el("input", { name: "name", placeholder: "queue name" });
    const address = el("input", { name: "address", placeholder: "address (default: the name)" });
    const routing = el("select", { name: "routingType" }, el("option", { text: "anycast" }), el("option", { text: "multicast" }));
    const form = el("form", { class: "manage", id: "create-queue" }, el("label", {}, "Create queue ", name), address, " ", routing, " ",
                    el("button", { type: "submit", text: "Create" }));
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      act({ operation: "CREATE", type: "queue", name: name.value, body: { address: address.value || name.value, routingType: routing.value } });
    });
    parts.push(section("Manage", form));
  }
  return el("div", {}, ...parts);
}

// ---- the loop ------------------------------------------------------------------------------------------
function currentView() {
  const m = location.hash.match(/^#\/([a-z]+)/);
  if (m) return m[1];
  return state.me && state.me.kind === "broker" ? "broker" : "topology";
}

async function render() {
  const view = currentView();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
  if (view === "topology") return topology(state.model, rates(state.model, state.prev));
  if (view === "router") return routerPage(nodeParam());
  if (view === "addresses") return addressesPage(nodeParam());
  if (view === "links") return linksPage(nodeParam());
  if (view === "broker") return brokerPage();
  return el("p", { text: `no page ${view}` });
}

async function refresh(keepModel) {
  if (state.busy) return;
  state.busy = true;
  const status = document.getElementById("status");
  try {
    if (!state.me) {
      state.me = await (await fetch("api/whoami", { credentials: "same-origin" })).json();
      document.getElementById("who").textContent = `${state.me.kind} ${state.me.id} · ${state.me.user || "anonymous"}` +
        (state.me.mayManage ? "" : " (read-only)");
      for (const a of document.querySelectorAll("#nav a")) {
        const brokerOnly = a.dataset.view === "broker";
        a.hidden = state.me.kind === "broker" ? !brokerOnly : brokerOnly;
      }
    }
    if (state.me.kind === "router" && !keepModel) {
      const model = await readMesh();
      // rates compare with the sample before (at least a second old, so one slow poll does not spike them)
      if (!state.model || model.at - (state.prevAt || 0) >= 900) {
        state.prev = state.model;
        state.prevAt = state.model ? state.model.at : 0;
      }
      state.model = model;
    }
    // someone typing in a form keeps it: the model is read, the page is not rebuilt under their fingers
    const typing = document.activeElement && document.activeElement.closest && document.activeElement.closest("form");
    if (typing && !keepModel) return;
    const content = await render();
    const view = document.getElementById("view");
    const result = document.getElementById("action-result");
    view.replaceChildren(...(result ? [result] : []), content);
    state.polls += 1;
    status.className = "";
    status.dataset.polls = state.polls;
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    status.className = "error";
    status.textContent = `error: ${err.message}`;
  } finally {
    state.busy = false;
  }
}

window.addEventListener("hashchange", () => refresh(true));
refresh();
setInterval(refresh, POLL_MS);
