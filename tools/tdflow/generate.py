"""Synthetic flow records with known faults, for checking tdflow's answers and speed.

A line of four interior routers ``R.A - R.B - R.C - R.D`` with a broker on ``R.B``; eight producers and
eight consumers spread over the routers. Addresses: anycast ones routed over the mesh (the path is the
routers between producer and consumer, so 1 to 4 hops, with ``trace`` on inter-router egress), waypoint
``queue.*`` ones stored and delivered by the broker (phase 0 in, phase 1 out), and a multicast one with two
consumers. Every message gets the records every node would write, with realistic delays.

Faults at known rates: lost messages (records stop at a random point after the first router; a waypoint
message lost after the broker stored it keeps its ``accepted``), duplicates (one extra egress + receipt),
released messages (no consumer: ``released`` back to the producer, not a loss) and consumer rejections.
The ground truth per address goes to ``ground_truth.json`` next to (not inside) the record files.

Everything is vectorised with numpy and pyarrow: message groups of the same shape are built column-wise,
JSON lines are assembled with pyarrow string kernels and written per node, in time order.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ROUTERS = ("R.A", "R.B", "R.C", "R.D")
BROKER_ROUTER = 1  # the broker is attached to R.B
BROKER = "Broker.1"
PRODUCERS = tuple(f"client.p{i}" for i in range(8))
CONSUMERS = tuple(f"client.c{i}" for i in range(8))
NODES = ROUTERS + (BROKER,) + PRODUCERS + CONSUMERS
_P0, _C0, _B = len(ROUTERS) + 1, len(ROUTERS) + 1 + len(PRODUCERS), len(ROUTERS)
PRODUCER_ROUTER = np.array([0, 1, 2, 3, 0, 1, 2, 3])
CONSUMER_ROUTER = np.array([3, 2, 1, 0, 3, 2, 1, 0])
# (address, kind, weight)
ADDRESSES = (("orders.east", "anycast", 3), ("orders.west", "anycast", 2), ("metrics", "anycast", 1),
             ("queue.jobs", "waypoint", 2), ("queue.audit", "waypoint", 1), ("multicast.ticks", "multicast", 1))
MULTICAST_PREFIXES = ("multicast",)
EVENT_NAMES = ("sent", "ingress", "egress", "store", "deliver", "received", "settle", "settled")
OUTCOME_NAMES = ("accepted", "rejected", "released", "modified")
ACC, REJ, REL = 0, 1, 2
# Mean delays (ns): client to router, inside a router, router to router, router to broker, broker residence,
# and each step of the settlement coming back.
D_CLIENT, D_ROUTER, D_LINK, D_BROKER, D_RESIDENCE, D_SETTLE = 80_000, 40_000, 100_000, 200_000, 5_000_000, 50_000
DEFAULT_RATE = 20_000  # messages per second of simulated time
FILE_LINES = 1_000_000  # lines per file: files rotate like the recorder's do
AVG_RECORDS_PER_MESSAGE = 12.4  # for turning a record count into a message count (measured on the mix)


class _Events:
    """Column lists of generated events, concatenated at the end."""

    def __init__(self):
        self.cols = {k: [] for k in ("ts", "node", "event", "conn", "link", "phase", "mid", "outcome", "trace",
                                     "addr", "size")}

    def add(self, ts, node, event, mid, addr, size, *, link, conn=None, phase=-1, outcome=-1, trace=None):
        g = len(mid)
        full = lambda v: np.broadcast_to(np.asarray(v), (g,))  # noqa: E731
        self.cols["ts"].append(full(ts).astype(np.int64))
        self.cols["node"].append(full(node).astype(np.int16))
        self.cols["event"].append(full(EVENT_NAMES.index(event)).astype(np.int8))
        self.cols["link"].append(full(link).astype(np.int32))
        self.cols["conn"].append(full(link if conn is None else conn).astype(np.int32))
        self.cols["phase"].append(full(phase).astype(np.int8))
        self.cols["mid"].append(mid)
        self.cols["outcome"].append(full(outcome).astype(np.int8))
        self.cols["addr"].append(addr)
        self.cols["size"].append(size)
        self.cols["trace"].append(trace if trace is not None else pa.nulls(g, pa.string()))


def _path(src, dst):
    """Router indices from src to dst on the line, as a (g, n) matrix for rows of equal length."""
    step = np.where(dst >= src, 1, -1)
    n = np.abs(dst - src) + 1
    return src[:, None] + step[:, None] * np.arange(n.max())[None, :], n


def _trace(routers: np.ndarray) -> pa.Array:
    names = pa.array(ROUTERS)
    parts = [names.take(pa.array(routers[:, j])) for j in range(routers.shape[1])]
    body = pc.binary_join_element_wise(*parts, '","') if len(parts) > 1 else parts[0]
    return pc.binary_join_element_wise('["', body, '"]', "")


class _Gen:
    def __init__(self, rng, ev):
        self.rng, self.ev = rng, ev

    def delay(self, mean, g):
        return (self.rng.exponential(mean, g) + mean // 4).astype(np.int64)

    def leg(self, t, routers, mid, addr, size, phase, entry_link, cut, k):
        """Ingress/egress through a router path; returns the time, step counter and link ids used."""
        g, n = routers.shape
        for j in range(n):
            r = routers[:, j]
            t = t + self.delay(D_CLIENT if j == 0 else D_LINK, g)
            keep = cut > k
            link_in = entry_link if j == 0 else 100 + routers[:, j - 1] * 10 + r
            self.ev.add(t[keep], r[keep], "ingress", mid[keep], addr[keep], size[keep], link=link_in[keep],
                        phase=phase)
            k += 1
            t = t + self.delay(D_ROUTER, g)
            keep = cut > k
            if j < n - 1:
                self.ev.add(t[keep], r[keep], "egress", mid[keep], addr[keep], size[keep],
                            link=(100 + r * 10 + routers[:, j + 1])[keep], phase=phase,
                            trace=_trace(routers[keep, : j + 1]))
                k += 1
        return t, k

    def settle_back(self, t, routers, mid, addr, size, outcome, keep):
        g, n = routers.shape
        for j in reversed(range(n)):
            t = t + self.delay(D_SETTLE, g)
            self.ev.add(t[keep], routers[keep, j], "settle", mid[keep], addr[keep], size[keep],
                        link=500 + routers[keep, j], outcome=outcome[keep])
        return t


def _shape_groups(keys):
    order = np.lexsort(keys[::-1])
    sorted_keys = np.stack([k[order] for k in keys])
    bounds = np.flatnonzero(np.any(np.diff(sorted_keys, axis=1) != 0, axis=0)) + 1
    return np.split(order, bounds)


def generate(out: str, records: int, *, loss_rate=0.001, dup_rate=0.001, release_rate=0.002,
             reject_rate=0.002, seed=1, rate=DEFAULT_RATE, start_ns=1_800_000_000_000_000_000) -> dict:
    """Write about ``records`` records into ``out``; return (and write) the ground truth."""
    rng = np.random.default_rng(seed)
    n_msgs = max(1, int(records / AVG_RECORDS_PER_MESSAGE))
    weights = np.array([w for _, _, w in ADDRESSES], dtype=float)
    addr = rng.choice(len(ADDRESSES), n_msgs, p=weights / weights.sum()).astype(np.int16)
    kind = np.array([k for _, k, _ in ADDRESSES])[addr]
    prod = rng.integers(0, len(PRODUCERS), n_msgs)
    cons = rng.integers(0, len(CONSUMERS), n_msgs)
    cons[kind == "multicast"] %= 4  # the two multicast consumers (c, c+4) sit on the same router
    sent = start_ns + np.sort(rng.integers(0, int(n_msgs / rate * 1e9) + 1, n_msgs)).astype(np.int64)
    size = rng.lognormal(6.0, 0.8, n_msgs).astype(np.int64) + 20
    mid_idx = np.arange(n_msgs)
    # Faults are disjoint: each message draws one fate.
    u = rng.random(n_msgs)
    fate = np.zeros(n_msgs, np.int8)  # 0 ok, 1 lost, 2 dup, 3 released, 4 rejected
    edges = np.cumsum([loss_rate, dup_rate, release_rate, reject_rate])
    fate[u < edges[3]] = 4
    fate[u < edges[2]] = 3
    fate[u < edges[1]] = 2
    fate[u < edges[0]] = 1
    src = PRODUCER_ROUTER[prod]
    dst = CONSUMER_ROUTER[cons]
    is_wp = kind == "waypoint"
    n1 = np.where(is_wp, np.abs(BROKER_ROUTER - src), np.abs(dst - src)) + 1
    n2 = np.where(is_wp, np.abs(dst - BROKER_ROUTER) + 1, 0)
    kind_code = np.searchsorted(np.array(["anycast", "multicast", "waypoint"]), kind)
    released = fate == 3
    ev = _Events()
    gen = _Gen(rng, ev)
    lost_after_store = np.zeros(n_msgs, bool)
    for idx in _shape_groups([kind_code, n1, n2, released.astype(np.int64)]):
        g = len(idx)
        m, a, sz, f = mid_idx[idx], addr[idx], size[idx], fate[idx]
        p, c = prod[idx], cons[idx]
        t = sent[idx]
        plink, clink = 1000 + p, 2000 + c
        ev.add(t, _P0 + p, "sent", m, a, sz, link=plink)
        if released[idx[0]]:
            t1 = t + gen.delay(D_CLIENT, g)
            ev.add(t1, src[idx], "ingress", m, a, sz, link=plink)
            t2 = t1 + gen.delay(D_ROUTER, g)
            ev.add(t2, src[idx], "settle", m, a, sz, link=plink, outcome=REL)
            ev.add(t2 + gen.delay(D_SETTLE, g), _P0 + p, "settled", m, a, sz, link=plink, outcome=REL)
            continue
        k_kind = kind_code[idx[0]]
        wp = k_kind == 2
        r1, _ = _path(src[idx], np.full(g, BROKER_ROUTER) if wp else dst[idx])
        r2 = _path(np.full(g, BROKER_ROUTER), dst[idx])[0] if wp else None
        # Forward steps of this shape, to place the cut of a lost message after the first ingress.
        # Step index of the final egress (sent is step 0): leg 1, [egress to the broker, store, deliver, leg 2].
        final = 2 * r1.shape[1] + (2 * r2.shape[1] + 2 if wp else 0)
        cut = np.where(f == 1, rng.integers(2, final + 1, g), 1 << 30)
        outcome = np.where(f == 4, REJ, ACC).astype(np.int8)
        t, k = gen.leg(t, r1, m, a, sz, 0, plink, cut, 1)
        if wp:
            keep = cut > k
            rb = r1[:, -1]
            ev.add(t[keep], rb[keep], "egress", m[keep], a[keep], sz[keep], link=300, phase=0)
            k += 1
            t = t + gen.delay(D_BROKER, g)
            keep = cut > k
            ev.add(t[keep], np.full(keep.sum(), _B), "store", m[keep], a[keep], sz[keep], link=300, phase=0)
            k += 1
            stored = cut > k - 1
            lost_after_store[idx] = stored & (f == 1)
            acc = np.full(g, ACC, np.int8)
            ts = gen.settle_back(t, r1, m, a, sz, acc, stored)
            ev.add(ts[stored] + gen.delay(D_SETTLE, stored.sum()), _P0 + p[stored], "settled", m[stored],
                   a[stored], sz[stored], link=plink[stored], outcome=ACC)
            t = t + gen.delay(D_RESIDENCE, g)
            keep = cut > k
            ev.add(t[keep], np.full(keep.sum(), _B), "deliver", m[keep], a[keep], sz[keep], link=301, phase=1)
            k += 1
            t, k = gen.leg(t, r2, m, a, sz, 1, np.full(g, 301), cut, k)
            last = r2[np.arange(g), n2[idx] - 1]
        else:
            last = r1[np.arange(g), n1[idx] - 1]
        keep = cut > k  # the final egress and everything after it
        copies = [(c, clink)] + ([(c + 4, clink + 4)] if k_kind == 1 else [])
        t_end = t
        for ci, (cc, cl) in enumerate(copies):
            te = t + gen.delay(D_ROUTER, g)
            tr = te + gen.delay(D_CLIENT, g)
            ev.add(te[keep], last[keep], "egress", m[keep], a[keep], sz[keep], link=cl[keep], phase=1 if wp else 0)
            ev.add(tr[keep], _C0 + cc[keep], "received", m[keep], a[keep], sz[keep], link=cl[keep],
                   outcome=outcome[keep])
            dup = keep & (f == 2) & (ci == 0)
            td = tr + gen.delay(D_LINK, g)
            ev.add(td[dup], last[dup], "egress", m[dup], a[dup], sz[dup], link=cl[dup], phase=1 if wp else 0)
            ev.add(td[dup] + gen.delay(D_CLIENT, dup.sum()), _C0 + cc[dup], "received", m[dup], a[dup],
                   sz[dup], link=cl[dup], outcome=outcome[dup])
            t_end = np.maximum(t_end, tr)
        routers_back = r2 if wp else r1
        ts = gen.settle_back(t_end, routers_back, m, a, sz, outcome, keep)
        if wp:
            ev.add(ts[keep] + gen.delay(D_SETTLE, keep.sum()), np.full(keep.sum(), _B), "settle", m[keep],
                   a[keep], sz[keep], link=301, outcome=outcome[keep])
        else:
            ev.add(ts[keep] + gen.delay(D_SETTLE, keep.sum()), _P0 + p[keep], "settled", m[keep], a[keep],
                   sz[keep], link=plink[keep], outcome=outcome[keep])
    truth = _ground_truth(addr, kind, fate, lost_after_store, n_msgs)
    n_written = _write(out, ev, seed)
    truth["records"] = n_written
    truth["messages"] = n_msgs
    truth["multicast_prefixes"] = list(MULTICAST_PREFIXES)
    return truth


def _ground_truth(addr, kind, fate, lost_after_store, n_msgs) -> dict:
    per = {}
    for i, (name, k, _) in enumerate(ADDRESSES):
        sel = addr == i
        f = fate[sel]
        copies = 2 if k == "multicast" else 1
        ok = (f == 0) | (f == 2) | (f == 4)
        per[name] = {
            "sent": int(sel.sum()),
            "lost": int((f == 1).sum()),
            "duplicated": int((f == 2).sum()),
            "returned": int((f == 3).sum()),
            "received": int(ok.sum() * copies + (f == 2).sum()),
            "released": int((f == 3).sum()),
            "rejected": int((f == 4).sum()) if k != "waypoint" else 0,
            "consumer_rejected": int((f == 4).sum() * copies),
            "accepted": int(((f == 0) | (f == 2)).sum() + ((f == 4).sum() if k == "waypoint" else 0)
                            + (lost_after_store[sel] & (f == 1)).sum()),
        }
        per[name]["no_outcome"] = per[name]["sent"] - per[name]["accepted"] - per[name]["rejected"] \
            - per[name]["released"]
    return {"addresses": per, "lost": int((fate == 1).sum()), "duplicated": int((fate == 2).sum())}


def _write(out: str, ev: _Events, seed: int) -> int:
    """Sort by (node, ts) and write one line per event, per node, in rotating .jsonl files."""
    os.makedirs(out, exist_ok=True)
    cols = {k: (pa.concat_arrays(v) if k == "trace" else np.concatenate(v)) for k, v in ev.cols.items()}
    order = np.lexsort((cols["ts"], cols["node"]))
    node_sorted = cols["node"][order]
    bounds = np.searchsorted(node_sorted, np.arange(len(NODES) + 1))
    str_ = lambda arr: pc.cast(pa.array(arr), pa.string())  # noqa: E731
    for nid, name in enumerate(NODES):
        lo, hi = bounds[nid], bounds[nid + 1]
        for f_lo in range(lo, hi, FILE_LINES):
            sel = order[f_lo: min(hi, f_lo + FILE_LINES)]
            ts, evc, ph, oc = cols["ts"][sel], cols["event"][sel], cols["phase"][sel], cols["outcome"][sel]
            opt = lambda mask, key, value: pc.if_else(  # noqa: E731
                pa.array(mask), pc.binary_join_element_wise(f',"{key}":', value, ""), "")
            trace = cols["trace"].take(pa.array(sel))
            parts = [
                pc.binary_join_element_wise('{"ts":', str_(ts), f',"node":"{name}","event":"', ""),
                pa.array(EVENT_NAMES).take(pa.array(evc)),
                pc.binary_join_element_wise('","conn":', str_(cols["conn"][sel]), ',"link":',
                                            str_(cols["link"][sel]), ',"address":"', ""),
                pa.array([a for a, _, _ in ADDRESSES]).take(pa.array(cols["addr"][sel])),
                pc.binary_join_element_wise('","mid":"g', str(seed), "-", str_(cols["mid"][sel]),
                                            '","size":', str_(cols["size"][sel]), ""),
                opt(ph >= 0, "phase", str_(ph)),
                opt(oc >= 0, "outcome", pc.binary_join_element_wise(
                    '"', pa.array(OUTCOME_NAMES).take(pa.array(np.maximum(oc, 0))), '"', "")),
                pc.if_else(pc.is_null(trace), "", pc.binary_join_element_wise(',"trace":', trace, "")),
            ]
            lines = pc.binary_join_element_wise(*parts, "}\n", "").cast(pa.large_string())
            offsets = np.frombuffer(lines.buffers()[1], np.int64)[lines.offset: lines.offset + len(lines) + 1]
            data = memoryview(lines.buffers()[2])[offsets[0]: offsets[-1]]
            path = os.path.join(out, f"{name}-{int(ts[0])}-{f_lo // FILE_LINES + 1}.jsonl")
            with open(path + ".part", "wb") as fh:
                fh.write(data)
            os.replace(path + ".part", path)
    return int(len(order))


def write_truth(path: str, truth: dict) -> None:
    with open(path, "w") as fh:
        json.dump(truth, fh, indent=2, sort_keys=True)
