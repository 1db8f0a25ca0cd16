"""Logging set-up from ``log`` sections: Dispatch's modules, ``enable: info+`` level syntax, and each
section's ``outputFile`` (``stderr``, the default; ``stdout``; ``syslog``; or a file appended to),
``includeTimestamp`` and ``includeSource``.

The line layout is :func:`log_format`'s; tdbroker logs in the same layout (broker/daemon.py), so a
router's and a broker's lines can be read, grepped and merged together.
"""

from __future__ import annotations

import collections
import logging
import logging.handlers
import socket
import sys
import time

from wire.errors import LocatedError
from wire.logformat import OneLineFormatter

# Dispatch's levels, lowest first, mapped onto Python's (notice sits between info and warning).
LEVELS = {
    "trace": 5,
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": 25,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}
# Dispatch module names -> the Python logger they govern. DEFAULT covers everything not named.
MODULES = {
    "DEFAULT": "",
    "ROUTER": "router",
    "ROUTER_CORE": "router.core",
    "SERVER": "wire",
    "CONTAINER": "wire.connection",
    "CONFIG": "router.config",
    "AGENT": "router.agent",
    "POLICY": "router.policy",
}
DEFAULT_LEVEL = logging.INFO
#: Where ``outputFile: syslog`` sends records (the local syslog daemon's socket; journald provides it under
#: systemd). A router whose syslog socket is missing is refused at start-up rather than losing its log.
SYSLOG_ADDRESS = "/dev/log"
#: What syslog lines are tagged with (syslog adds the time and host itself).
SYSLOG_IDENT = "tdrouterd: "


def log_format(include_timestamp: bool = True, include_source: bool = False) -> str:
    """The layout of a log line, e.g. ``2026-11-25 02:41:07,907 INFO router.core: message (path:line)``.
    tdbroker uses the same (broker/daemon.py)."""
    fmt = "%(levelname)s %(name)s: %(message)s"
    if include_source:
        fmt += " (%(pathname)s:%(lineno)d)"
    return "%(asctime)s " + fmt if include_timestamp else fmt

#: Log records kept for management's GET-LOG (qdstat --log); older ones drop off.
RECENT_LOG_MAX = 1000


def dispatch_module(logger_name: str) -> str:
    """The Dispatch module a Python logger belongs to (the most specific of MODULES), else DEFAULT."""
    best, best_len = "DEFAULT", -1
    for module, prefix in MODULES.items():
        if prefix and (logger_name == prefix or logger_name.startswith(prefix + ".")) and len(prefix) > best_len:
            best, best_len = module, len(prefix)
    return best


class RecentLog(logging.Handler):
    """The last RECENT_LOG_MAX records that passed the configured levels, for GET-LOG: each as Dispatch's
    agent gives them, ``[module, level, text, source file, line, time]``."""

    def __init__(self, maximum: int = RECENT_LOG_MAX):
        super().__init__()
        self.records: collections.deque = collections.deque(maxlen=maximum)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string must not lose the handler
            text = str(record.msg)
        self.records.append([dispatch_module(record.name), record.levelname.lower(), text, record.pathname,
                             record.lineno, record.created])

    def entries(self, module: str | None = None) -> list[list]:
        return [e for e in self.records if module is None or e[0] == module.upper()]


#: The daemon's recent-log buffer (installed by configure_logging).
RECENT = RecentLog()


def level_of(enable: str | None) -> int:
    """``info+`` -> INFO; ``none`` -> above CRITICAL; a list (``info,error``) -> its lowest level."""
    if not enable:
        return DEFAULT_LEVEL
    words = [w.strip().lower() for w in enable.replace(" ", "").split(",") if w.strip()]
    if "none" in words:
        return logging.CRITICAL + 10
    levels = [LEVELS[w.rstrip("+")] for w in words if w.rstrip("+") in LEVELS]
    return min(levels) if levels else DEFAULT_LEVEL


def _output_handler(output: str | None) -> logging.Handler:
    """Dispatch's ``outputFile``: ``stderr`` (the default), ``stdout``, ``syslog`` or a file appended to.
    OSError when it cannot be opened (for syslog: no socket at SYSLOG_ADDRESS)."""
    if output in (None, "", "stderr"):
        return logging.StreamHandler(sys.stderr)
    if output == "stdout":
        return logging.StreamHandler(sys.stdout)
    if output == "syslog":
        # SysLogHandler swallows a failed connect and then prints a traceback for every record: try first.
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            probe.connect(SYSLOG_ADDRESS)
        except OSError as exc:
            raise OSError(exc.errno, f"no syslog socket at {SYSLOG_ADDRESS} ({exc.strerror}); is a syslog daemon "
                                     "or journald running?") from None
        finally:
            probe.close()
        handler = logging.handlers.SysLogHandler(address=SYSLOG_ADDRESS,
                                                 facility=logging.handlers.SysLogHandler.LOG_DAEMON)
        handler.ident = SYSLOG_IDENT
        return handler
    return logging.FileHandler(output, encoding="utf-8")


def configure_logging(log_entities, router_entity=None) -> None:
    """Levels, timestamps, source locations and outputs from the ``log`` sections: DEFAULT's go to the root
    logger, another module's output (when it names one) replaces DEFAULT's for that module. The router
    section's ``timestampFormat`` (strftime; default: ``2026-11-25 02:41:07,907``) and ``timestampsInUTC``
    (default: local time) shape every timestamp."""
    logging.addLevelName(5, "TRACE")
    logging.addLevelName(25, "NOTICE")
    default = {"includeTimestamp": True, "includeSource": False, "outputFile": None}
    root_level = DEFAULT_LEVEL
    specific = []
    for entity in log_entities:
        module = (entity.get("module") or "DEFAULT").upper()
        if module == "DEFAULT":
            root_level = level_of(entity.get("enable"))
            default.update({k: entity.get(k) for k in default if entity.get(k) is not None})
        else:
            specific.append((MODULES.get(module, module.lower()), entity))

    date_format = router_entity.get("timestampFormat") if router_entity is not None else None
    utc = bool(router_entity.get("timestampsInUTC")) if router_entity is not None else False

    def formatter(include_ts, include_source) -> OneLineFormatter:
        made = OneLineFormatter(log_format(include_ts, include_source), datefmt=date_format)
        if utc:
            made.converter = time.gmtime
        return made

    def opened(output, entity) -> logging.Handler:
        try:
            return _output_handler(output)
        except OSError as exc:   # a file that cannot be opened is a configuration error at its section
            where = (entity.path, entity.line) if entity is not None else ("<config>", 0)
            raise LocatedError(*where, f"log: cannot open outputFile {output!r}: {exc.strerror or exc}") from None

    default_entity = next((e for e in log_entities if (e.get("module") or "DEFAULT").upper() == "DEFAULT"), None)
    handler = opened(default["outputFile"], default_entity)
    handler.setFormatter(formatter(default["includeTimestamp"], default["includeSource"]))
    root = logging.getLogger()
    root.handlers[:] = [handler, RECENT]
    root.setLevel(root_level)
    for name, entity in specific:
        logger = logging.getLogger(name)
        if entity.get("enable") is not None:
            logger.setLevel(level_of(entity.get("enable")))
        if entity.get("outputFile") or entity.get("includeTimestamp") is not None \
                or entity.get("includeSource") is not None:
            own = opened(entity.get("outputFile") or default["outputFile"], entity)
            ts = entity.get("includeTimestamp")
            src = entity.get("includeSource")
            own.setFormatter(formatter(default["includeTimestamp"] if ts is None else ts,
                                       default["includeSource"] if src is None else src))
            logger.handlers[:] = [own, RECENT]
            logger.propagate = False
