"""Shared helpers for the broker unit tests: a broker built from a small broker.xml, and a journal writer
that runs out of space on demand.

The server and validation tests build brokers alike, and the journal and disk tests both fill the disk;
the helpers live here so no test module imports another.
"""

from __future__ import annotations

import errno
import os

from broker.config import parse_broker_config
from broker.journal_io import write_all
from broker.server import Broker

BROKER_XML = """\
<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">
  <name>b1</name>
  <persistence-enabled>{persist}</persistence-enabled>
  <journal-directory>{journal}</journal-directory>
  <addresses>
    <address name="orders"><anycast><queue name="orders"/></anycast></address>
    <address name="news"><multicast/></address>
    <address name="DLQ"><anycast><queue name="DLQ"/></anycast></address>
  </addresses>
  <address-settings>
    <address-setting match="#"><dead-letter-address>DLQ</dead-letter-address>
      <max-delivery-attempts>3</max-delivery-attempts></address-setting>
    <address-setting match="slow.#"><redelivery-delay>500</redelivery-delay></address-setting>
    <address-setting match="short.#"><expiry-delay>1000</expiry-delay></address-setting>
  </address-settings>
  {connections}
</core></configuration>
"""


def make_broker(tmp_path, *, persist=False, connections="", clock=None) -> Broker:
    """A Broker on BROKER_XML with its journal directory under ``tmp_path``, journal opened."""
    text = BROKER_XML.format(persist=str(persist).lower(), journal=tmp_path / "journal", connections=connections)
    b = Broker(parse_broker_config(text), clock=clock)
    b.open_journal()
    return b


class FullDisk:
    """An injectable journal writer: while ``full``, every write puts half its bytes down and then fails
    with ENOSPC (or EDQUOT), as a file system that runs out mid-write does."""

    def __init__(self, errno_=None):
        self.full = False
        self.errno = errno_ or errno.ENOSPC
        self.failures = 0

    def __call__(self, fd, data):
        if self.full:
            os.write(fd, bytes(data[:len(data) // 2]))
            self.failures += 1
            raise OSError(self.errno, os.strerror(self.errno))
        write_all(fd, data)
