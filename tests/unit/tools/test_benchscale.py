"""tdbench --scale end to end on a small scale (a real tdrouterd), its helpers, and the RSS sampler."""

from __future__ import annotations

import mmap
import os
import resource

import pytest

from tools.benchprocs import RssSampler, process_memory_kb
from tools.benchscale import ScaleError, format_scale, raise_fd_limit, run_scale


@pytest.mark.system
def test_scale_run_opens_every_connection_and_link_and_forwards_while_they_are_open():
    rep = run_scale(connections=30, links_per_connection=4, rounds=1, messages=2000)
    assert rep["ok"], rep["problems"]
    [r] = rep["rounds"]
    assert r["connections"] == 30 and r["links"] == 120
    assert r["connection_per_s"] > 0 and r["link_per_s"] > 0 and r["links_attached"] == 120
    assert len(r["links_per_s_by_tenth"]) == 10
    assert r["rss_connections_mb"] >= r["rss_start_mb"] > 0
    for phase in ("load_before", "load_during"):
        assert r[phase]["received"] == 2000 and r[phase]["router_cpu_us_per_msg"] is not None
    assert r["connections_lost"] == 0 and r["unexpected_deliveries"] == 0
    assert "links attached/s" in format_scale(rep)


def test_fd_limit_is_raised_to_the_hard_limit_only_when_needed():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert raise_fd_limit(10) == soft
    if hard != resource.RLIM_INFINITY:
        with pytest.raises(ScaleError, match="hard limit"):
            raise_fd_limit(hard + 1)


def test_rss_sampler_reads_this_process():
    rss, hwm = process_memory_kb(os.getpid())
    assert 0 < rss <= hwm
    assert process_memory_kb(2**22 + 12345) is None  # no such process
    s = RssSampler(os.getpid())
    # a fresh anonymous mapping, touched page by page: resident whatever the heap already holds (a bytearray
    # could reuse pages a previous test freed, and the process would not grow)
    ballast = mmap.mmap(-1, 32 * 1024 * 1024)
    for offset in range(0, len(ballast), 4096):
        ballast[offset] = 1
    s.sample()
    out = s.result()
    [m] = out["router_rss_mb"]
    assert m["growth"] >= 30 and m["peak"] <= m["hwm"]
    assert out["router_rss_growth_max_mb"] == m["growth"]
    ballast.close()


def test_no_heartbeats_router_config_sets_no_idle_timeout_on_the_listener():
    from tools.benchscale import no_heartbeat_router_config

    conf = no_heartbeat_router_config()
    listener = conf[conf.index("listener {"):]
    assert "idleTimeoutSeconds: 0" in listener
