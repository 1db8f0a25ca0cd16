"""The router's ``log`` sections take effect (issue 18): outputFile (stderr, a file, syslog),
includeTimestamp, includeSource; tdbroker logs in the router's line layout. In-process (configure_logging
on the root logger, restored after each test); tests/system/test_log_entity.py runs the real daemons."""

from __future__ import annotations

import logging
import re
import socket

import pytest

from broker.daemon import LOG_FORMAT as BROKER_LOG_FORMAT
from router import logsetup
from router.config import parse_config
from router.logsetup import configure_logging, log_format
from wire.errors import LocatedError

ROUTER = "router {\n    id: R\n}\n"
TIMESTAMPED = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO router\.test: hello$")


@pytest.fixture(autouse=True)
def restore_logging():
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        if handler not in saved[0]:
            handler.close()
    root.handlers[:], root.level = saved[0], saved[1]
    for name in logsetup.MODULES.values():   # a module section's own handlers and level
        if name:
            logger = logging.getLogger(name)
            logger.handlers[:], logger.propagate = [], True
            logger.setLevel(logging.NOTSET)


def _configure(log_section: str, router: str = ROUTER):
    cfg = parse_config(router + log_section, "r.conf")
    configure_logging(cfg.logs, cfg.router)


def test_the_broker_logs_in_the_routers_layout():
    assert BROKER_LOG_FORMAT == log_format()


def test_a_file_without_timestamp_with_source(tmp_path):
    out = tmp_path / "router.log"
    _configure(f"log {{\n    module: DEFAULT\n    outputFile: {out}\n    includeTimestamp: no\n"
               "    includeSource: yes\n}\n")
    logging.getLogger("router.test").info("hello")
    logging.getLogger().handlers[0].flush()
    [line] = out.read_text().splitlines()
    assert re.fullmatch(r"INFO router\.test: hello \(.*test_log_entity\.py:\d+\)", line), line


def test_stderr_with_the_default_timestamp(tmp_path, capsys):
    _configure("log {\n    module: DEFAULT\n    outputFile: stderr\n}\n")
    logging.getLogger("router.test").info("hello")
    assert TIMESTAMPED.match(capsys.readouterr().err.splitlines()[-1])


def test_syslog_gets_the_records_tagged_with_the_daemon_facility(tmp_path, monkeypatch):
    address = str(tmp_path / "log.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as syslog:
        syslog.bind(address)
        syslog.settimeout(10)
        monkeypatch.setattr(logsetup, "SYSLOG_ADDRESS", address)
        _configure("log {\n    module: DEFAULT\n    outputFile: syslog\n    includeTimestamp: no\n}\n")
        logging.getLogger("router.test").warning("hello")
        datagram = syslog.recv(4096)
    # <28>: facility daemon (3) * 8 + severity warning (4), RFC 3164
    assert datagram == b"<28>tdrouterd: WARNING router.test: hello\x00"


def test_syslog_without_a_syslog_socket_is_refused_at_the_section(tmp_path, monkeypatch):
    monkeypatch.setattr(logsetup, "SYSLOG_ADDRESS", str(tmp_path / "no-such.sock"))
    with pytest.raises(LocatedError) as info:
        _configure("log {\n    module: DEFAULT\n    outputFile: syslog\n}\n")
    assert info.value.line == 4 and "no syslog socket at" in info.value.message


def test_a_module_section_has_its_own_output_and_layout(tmp_path, capsys):
    out = tmp_path / "core.log"
    _configure(f"log {{\n    module: DEFAULT\n    includeTimestamp: no\n}}\nlog {{\n    module: ROUTER_CORE\n"
               f"    outputFile: {out}\n    includeSource: yes\n}}\n")
    logging.getLogger("router.core.x").info("core line")
    logging.getLogger("router.test").info("other line")
    for handler in logging.getLogger("router.core").handlers:
        handler.flush()
    [core] = out.read_text().splitlines()
    # includeTimestamp is inherited from DEFAULT (no), includeSource is the module's own
    assert re.fullmatch(r"INFO router\.core\.x: core line \(.*\.py:\d+\)", core), core
    assert capsys.readouterr().err.splitlines()[-1] == "INFO router.test: other line"


def test_router_timestamp_format_and_utc(capsys, monkeypatch):
    monkeypatch.setenv("TZ", "Pacific/Kiritimati")   # UTC+14: local time is never UTC's date and hour
    import time

    time.tzset()
    try:
        _configure("log {\n    module: DEFAULT\n}\n",
                   router="router {\n    id: R\n    timestampFormat: %Y-%m-%dT%H:%M:%SZ\n"
                          "    timestampsInUTC: yes\n}\n")
        before = time.gmtime()
        logging.getLogger("router.test").info("hello")
        after = time.gmtime()
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    stamp, rest = capsys.readouterr().err.splitlines()[-1].split(" ", 1)
    assert rest == "INFO router.test: hello"
    assert time.strftime("%Y-%m-%dT%H:%M:%SZ", before) <= stamp <= time.strftime("%Y-%m-%dT%H:%M:%SZ", after)
