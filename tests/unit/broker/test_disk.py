"""Disk full (issue 10: on ENOSPC tdbroker exited and took its router peering down): max-disk-usage and
disk-scan-period refuse durable messages before the disk is full, a journal write that finds no space is
undone and retried, and the broker takes durable messages again by itself. A real Broker in memory with
an injected file-system reading and an injected journal writer that fails with ENOSPC."""

from __future__ import annotations

import logging

import pytest
import trio
from proton import Message

from broker.config import BrokerConfigError, parse_broker_config
from broker.disk import DiskMonitor
from broker.runtime import BrokerRuntime
from broker.server import Broker
from tests.unit.enginepair import RouterHarness, outcome, settle
from tests.unit.broker.fixtures import FullDisk

GB = 1024 ** 3
XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>disk</name>
  <journal-directory>{journal}</journal-directory>
  {core}
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="paged"><anycast><queue name="paged"/></anycast></address>
  </addresses>
  <address-settings>
    <address-setting match="paged"><max-size-bytes>2K</max-size-bytes>
      <address-full-policy>PAGE</address-full-policy></address-setting>
  </address-settings>
</core></configuration>
"""


class Usage:
    """An injectable file-system reading: ``percent`` of 100 GiB used."""

    def __init__(self, percent: float):
        self.percent = percent
        self.reads = 0

    def __call__(self, path):
        self.reads += 1
        total = 100 * GB
        return total, int(total * (100 - self.percent) / 100)


def make(tmp_path, usage, *, core="", write=None, clock=None) -> tuple[Broker, RouterHarness]:
    cfg = parse_broker_config(XML.format(journal=tmp_path / "journal", core=core))
    b = Broker(cfg, disk_usage=usage, journal_write=write, clock=clock)
    b.open_journal()
    return b, RouterHarness(router=b)


def sync(b: Broker) -> None:
    b.journal.sync()
    b.durable_up_to(b.journal.durable_id)  # what the group committer reports after a sync


def states(ds) -> list[str]:
    return [outcome(d)["state"] for d in ds]


# ---- the monitor ----------------------------------------------------------------------------------------

def test_monitor_arithmetic_and_off_switch():
    usage = Usage(50)
    m = DiskMonitor(["/j"], 90, usage=usage)
    assert not m.check() and not m.over and round(m.percent) == 50
    assert m.headroom == 40 * GB  # what may still be written before 90 %
    usage.percent = 95
    assert m.check() and m.over and m.headroom == 0
    assert not m.check()  # no change, nothing to report
    usage.percent = 89
    assert m.check() and not m.over
    off = DiskMonitor(["/j"], -1, usage=usage)
    usage.percent = 100
    assert not off.check() and not off.over and off.headroom == -1


def test_min_disk_free_is_checked_beside_max_disk_usage():
    usage = Usage(50)  # 50 GiB of 100 free
    m = DiskMonitor(["/j"], 90, min_free=60 * GB, usage=usage)
    assert m.check() and m.over and m.short_of_free  # 50 GiB free is under the 60 GiB minimum
    assert "min-disk-free" in m.describe()
    usage.percent = 30
    assert m.check() and not m.over
    assert m.headroom == 10 * GB  # the stricter of the two limits: 70 GiB free - 60 GiB
    only = DiskMonitor(["/j"], -1, min_free=5 * GB, usage=usage)
    usage.percent = 96
    assert only.enabled and only.check() and only.over


@pytest.mark.parametrize("core,message", [
    ("<min-disk-free>-2</min-disk-free>", "byte size or -1"),
    ("<global-max-messages>1000</global-max-messages>", "does not enforce"),
    ("<max-disk-usage>101</max-disk-usage>", "percentage"),
    ("<max-disk-usage>-2</max-disk-usage>", "percentage"),
    ("<disk-scan-period>0</disk-scan-period>", "positive"),
])
def test_bad_disk_settings_are_refused_with_file_and_line(tmp_path, core, message):
    with pytest.raises(BrokerConfigError, match=message) as info:
        parse_broker_config(XML.format(journal=tmp_path, core=core), "b.xml")
    assert str(info.value).startswith("b.xml:")


def test_min_disk_free_refuses_durable_sends(tmp_path):
    usage = Usage(50)
    b, h = make(tmp_path, usage, core="<max-disk-usage>-1</max-disk-usage><min-disk-free>60GB</min-disk-free>")
    assert b.cfg.min_disk_free == 60 * GB and b.disk.over
    usage.percent = 30
    b.disk.check()
    assert not b.disk.over


# ---- max-disk-usage --------------------------------------------------------------------------------------

def test_over_max_disk_usage_refuses_durable_sends_until_it_drops(tmp_path, caplog):
    usage = Usage(50)
    b, h = make(tmp_path, usage, core="<max-disk-usage>80</max-disk-usage>")
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    stored = [prod.send(snd, Message(id=i, body="stored", durable=True)) for i in range(5)]
    h.pump()
    sync(b)
    h.pump()
    assert states(stored) == ["accepted"] * 5
    usage.percent = 85
    with caplog.at_level(logging.INFO, logger="broker"):
        assert b.check_disk()
        refused = [prod.send(snd, Message(id=10 + i, body="r", durable=True)) for i in range(50)]
        transient = prod.send(snd, Message(id=99, body="kept in memory", durable=False))
        h.pump()
    assert states(refused) == ["rejected"] * 50
    cond = outcome(refused[0])["condition"]
    assert cond[0] == "amqp:resource-limit-exceeded" and "max-disk-usage 80%" in cond[1]
    assert states([transient]) == ["accepted"]
    assert b.messages_refused_disk == 50
    assert len([r for r in caplog.records if "max-disk-usage" in r.getMessage()]) == 1  # one line, not 50
    # What is stored stays consumable, acknowledgements are taken.
    cons = h.connect()
    rcv = cons.receiver("orders", credit=10)
    h.pump()
    got = cons.received(rcv, clear=True)
    assert [r.message.id for r in got] == [0, 1, 2, 3, 4, 99]
    for r in got:
        settle(r)
    h.pump()
    usage.percent = 79
    assert b.check_disk()
    again = prod.send(snd, Message(id=100, body="back", durable=True))
    h.pump()
    sync(b)
    h.pump()
    assert states([again]) == ["accepted"]


def test_paging_is_refused_while_over_max_disk_usage(tmp_path):
    usage = Usage(95)
    b, h = make(tmp_path, usage)  # the default max-disk-usage: 90
    assert b.disk.over
    prod = h.connect()
    snd = prod.sender("paged")
    h.pump()
    ds = [prod.send(snd, Message(id=i, body=b"x" * 900)) for i in range(4)]
    h.pump()
    # Two fit in memory (2K); the others would page: refused, not written to a full disk.
    assert states(ds) == ["accepted", "accepted", "rejected", "rejected"]
    assert "cannot page" in outcome(ds[2])["condition"][1]


async def test_disk_scan_period_is_when_the_usage_is_read(tmp_path, autojump_clock):
    usage = Usage(10)
    b, _h = make(tmp_path, usage, core="<disk-scan-period>2000</disk-scan-period>")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(BrokerRuntime(b).disk_loop)
        await trio.sleep(1.9)
        usage.percent = 99
        reads = usage.reads
        assert not b.disk.over
        await trio.sleep(0.2)  # the scan at 2 s sees it
        assert b.disk.over and usage.reads == reads + len(b.disk.paths)  # one reading per scan
        usage.percent = 10
        await trio.sleep(2.0)
        assert not b.disk.over
        nursery.cancel_scope.cancel()
    b.close_journal()


# ---- a journal write that finds no space ------------------------------------------------------------------

async def test_enospc_keeps_the_broker_up_and_it_recovers_by_itself(tmp_path, caplog):
    disk = FullDisk()
    b, h = make(tmp_path, Usage(10), write=disk)
    b.committer.retry_seconds = 0.05
    prod = h.connect()
    snd = prod.sender("orders")
    cons = h.connect()
    rcv = cons.receiver("orders", credit=0)
    h.pump()

    async def until(cond, what):
        with trio.fail_after(10):
            while not cond():
                h.pump()
                await trio.sleep(0.01)

    with caplog.at_level(logging.INFO, logger="broker"):
        async with trio.open_nursery() as nursery:
            await nursery.start(b.committer.run)  # it reports each sync: b.durable_up_to
            first = [prod.send(snd, Message(id=i, body="on disk", durable=True)) for i in range(3)]
            await until(lambda: states(first) == ["accepted"] * 3, "first")
            disk.full = True
            pending = prod.send(snd, Message(id=3, body="pending", durable=True))
            await until(lambda: b.committer.out_of_space, "out of space")
            refused = [prod.send(snd, Message(id=10 + i, body="refused", durable=True)) for i in range(20)]
            h.pump()
            assert states(refused) == ["rejected"] * 20
            assert "disk is full" in outcome(refused[0])["condition"][1]
            assert states([pending]) == ["none"]  # kept pending in memory: not answered yet
            # Everything stored stays consumable; acknowledgements wait in memory with the rest.
            rcv.flow(10)
            await until(lambda: len(cons.received(rcv)) == 4, "consumed")
            for r in cons.received(rcv, clear=True):
                settle(r)
            h.pump()
            assert b.journal.pending
            disk.full = False  # space returns
            await until(lambda: states([pending]) == ["accepted"] and not b.committer.out_of_space, "recovered")
            again = prod.send(snd, Message(id=30, body="after", durable=True))
            await until(lambda: states([again]) == ["accepted"], "accepted again")
            nursery.cancel_scope.cancel()
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("broker")]
    assert len([m for m in lines if "out of space" in m]) == 1 and any("space is available" in m for m in lines)
    b.close_journal()
    b2, _ = make(tmp_path, Usage(10))
    assert b2.queues["orders"].message_count == 1  # 0-3 were acknowledged; "after" is still there
    b2.close_journal()


def test_a_large_durable_message_is_refused_at_its_first_frame_while_the_disk_is_over(tmp_path):
    usage = Usage(95)
    b, h = make(tmp_path, usage)
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    seen = []
    real = b.admission.check_arriving  # observe how much was held when it was refused

    def spy(bl, arriving, held):
        seen.append(held)
        return real(bl, arriving, held)

    b.admission.check_arriving = spy
    big = prod.send(snd, Message(body=b"d" * 5_000_000, durable=True))
    h.pump()
    assert outcome(big)["state"] == "rejected"
    assert outcome(big)["condition"][0] == "amqp:resource-limit-exceeded"
    assert seen and max(seen) < 100_000
    assert not b.messages_arriving()  # nothing of it is kept


def test_a_durable_message_larger_than_the_space_left_is_refused_early(tmp_path):
    class Tight(Usage):
        def __call__(self, path):
            return 100 * 1024 * 1024, 11 * 1024 * 1024  # 89 % used: 1 MiB left below 90 %

    b, h = make(tmp_path, Tight(0))
    prod = h.connect()
    snd = prod.sender("orders")
    h.pump()
    big = prod.send(snd, Message(body=b"d" * 3_000_000, durable=True))
    h.pump()
    assert outcome(big)["condition"][0] == "amqp:link:message-size-exceeded"
    assert "max-disk-usage" in outcome(big)["condition"][1]
    assert b.disk.headroom < 2 * 1024 * 1024
