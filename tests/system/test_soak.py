"""Soak: sustained load and link churn on one router, checking nothing is lost and memory stays flat.

Marked slow; CI runs it (it takes well under a minute). A leak of per-message or per-link state shows up
as resident memory that keeps growing from one round to the next.
"""

import uuid

import pytest
from proton import Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from tests.system.procstat import rss_kib
from tools.bench import run_bench

pytestmark = pytest.mark.slow

ROUNDS = 5  # the first one warms up allocator pools and caches
MESSAGES_PER_ROUND = 100_000
# RSS is a high-water mark: how many messages were buffered at once (which varies with how busy the
# machine is) moves it by a few MB in the first rounds, then it stays flat. A leak grows every round:
# keeping one 100-byte message per delivery adds ~10 MB per round (checked: +30 MB over the rounds).
LAST_ROUND_RSS_SLACK_BYTES = 2 * 1024 * 1024
AFTER_WARMUP_RSS_SLACK_BYTES = 8 * 1024 * 1024
# Measured growth over the churn below: a few KB. Keeping each closed connection's state costs ~17 KB
# (checked by leaking them on purpose: +2.6 MB over 150), so 100 leaked connections exceed this.
CHURN_RSS_SLACK_BYTES = 1024 * 1024
CHURN_CONNECTIONS = 100


def rss_bytes(pid: int) -> int:
    return rss_kib(pid) * 1024


def test_sustained_load_loses_nothing_and_memory_stays_flat(router_factory):
    router = router_factory()
    rss = []
    for mode in ("at-least-once",) * (ROUNDS - 1) + ("presettled",):
        report = run_bench(messages=MESSAGES_PER_ROUND, router=router.url, router_pid=router.pid,
                           presettled=(mode == "presettled"), senders=2, receivers=2, direct=False,
                           duration_limit=60)
        assert report["ok"], report["problems"]
        assert report["router"]["received"] == MESSAGES_PER_ROUND
        rss.append(rss_bytes(router.pid))
    kib = [r // 1024 for r in rss]
    assert rss[-1] - rss[-2] <= LAST_ROUND_RSS_SLACK_BYTES, kib
    assert rss[-1] - rss[1] <= AFTER_WARMUP_RSS_SLACK_BYTES, kib


def test_link_and_connection_churn_does_not_leak(router_factory):
    router = router_factory()

    def churn(connections: int, links_per_connection: int) -> None:
        for _ in range(connections):
            conn = BlockingConnection(router.url, timeout=10)
            try:
                address = f"churn/{uuid.uuid4()}"
                receiver = conn.create_receiver(address, credit=links_per_connection)
                for i in range(links_per_connection):
                    sender = conn.create_sender(address, name=f"s{i}", options=AtMostOnce())
                    conn.wait(lambda: sender.link.credit > 0, timeout=10)
                    sender.send(Message(body=f"m{i}"))
                    assert receiver.receive(timeout=10).body == f"m{i}"
                    sender.close()
                receiver.close()
            finally:
                conn.close()

    churn(10, 20)  # warm-up: allocator pools, caches
    before = rss_bytes(router.pid)
    churn(CHURN_CONNECTIONS, 20)
    after = rss_bytes(router.pid)
    assert after - before <= CHURN_RSS_SLACK_BYTES, (before // 1024, after // 1024)
