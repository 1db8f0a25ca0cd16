"""Real daemons (issue 18): tdrouterd's ``log`` section sends its lines to the file it names, in the layout
it asks for; tdbroker's lines have the router's layout (``TIME LEVEL LOGGER: message``)."""

from __future__ import annotations

import re

import pytest

from tests.system.brokerharness import BrokerProcess
from tests.system.harness import RouterProcess

pytestmark = pytest.mark.system

# What both daemons print by default: "2026-11-25 02:41:07,907 INFO wire.driver: signal 15: shutting down"
LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL) [\w.]+: .+")


def test_router_log_section_writes_its_file_without_timestamp_with_source(tmp_path):
    out = tmp_path / "router.log"
    router = RouterProcess(tmp_path, f"""
        log {{
            module: DEFAULT
            enable: info+
            outputFile: {out}
            includeTimestamp: no
            includeSource: yes
        }}
        """).start()
    assert router.stop() == 0
    lines = out.read_text().splitlines()
    assert "INFO wire.driver: signal 15: shutting down" in [line.split(" (")[0] for line in lines], lines
    assert all(re.fullmatch(r"[A-Z]+ [\w.]+: .* \(\S+\.py:\d+\)", line) for line in lines), lines
    assert "shutting down" not in router.stderr_text()


def test_router_and_broker_lines_share_one_layout(tmp_path):
    router = RouterProcess(tmp_path / "router").start()
    assert router.stop() == 0
    router_lines = [line for line in router.stderr_text().splitlines() if line.strip()]
    xml = tmp_path / "broker.xml"
    xml.write_text('<configuration xmlns="urn:activemq"><core xmlns="urn:activemq:core">\n'
                   f"<journal-directory>{tmp_path / 'journal'}</journal-directory>\n"
                   "<security-enabled>false</security-enabled>\n"
                   '<acceptors><acceptor name="amqp">tcp://127.0.0.1:0?protocols=AMQP</acceptor></acceptors>\n'
                   "</core></configuration>\n")
    broker = BrokerProcess(xml, tmp_path).start()
    assert broker.stop() == 0
    broker_lines = [line for line in broker.stderr_text().splitlines() if line.strip()]
    assert router_lines and broker_lines
    for line in router_lines + broker_lines:
        assert LINE.fullmatch(line), line
