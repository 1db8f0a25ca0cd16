"""The narrated demos run end to end against real daemons and tell the truth."""

import subprocess
import sys

from tests.system.harness import REPO_ROOT


def test_brokerless_demo_shows_the_producer_blocked_until_a_consumer_exists():
    out = subprocess.run([sys.executable, "-m", "tools.demo", "brokerless", "--count", "3"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    blocked = [line for line in lines if "blocked, no consumer exists" in line]
    assert blocked and "credit 0, sent 0" in blocked[0]
    assert any("got credit 250" in line for line in lines)
    assert sum("consumer  received 'message" in line for line in lines) == 3
    assert any("all 3 messages accepted" in line for line in lines)


def _run_demo(*args):
    out = subprocess.run([sys.executable, "-m", "tools.demo", *args], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.splitlines()


def test_brokered_demo_stores_then_drains_every_message_in_order():
    lines = _run_demo("brokered", "--count", "50")
    assert any("credit 250 at once" in line for line in lines)
    assert any("sent 50, 50 accepted (stored)" in line for line in lines)
    assert any("drained all 50 messages, in order" in line for line in lines)


def test_linkroute_demo_proxies_links_to_the_broker():
    lines = _run_demo("linkroute", "--count", "50")
    assert any("sent 50, 50 accepted (stored)" in line for line in lines)
    assert any("drained all 50 messages, in order" in line for line in lines)
