"""A log formatter that keeps one record on one line, whatever a peer put into it.

Peer-supplied text (container-ids, addresses, error descriptions) ends up in log messages; a newline
or a terminal control sequence in it could forge whole log lines (a container-id holding
``\\n... CRITICAL ...`` did). :class:`OneLineFormatter` escapes control and other non-printable
characters in the formatted message; only a traceback appended by ``log.exception`` keeps its lines.
Call sites may also escape a value themselves with :func:`wire.connection.printable`.
"""

from __future__ import annotations

import logging


def escape_unprintable(text: str) -> str:
    """``text`` with every non-printable character (newlines, escapes, other control characters)
    written as a Python escape such as ``\\n`` or ``\\x1b``; printable non-ASCII text stays as it is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


class OneLineFormatter(logging.Formatter):
    """``logging.Formatter`` whose message part never spans lines (see the module docstring)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escape_unprintable(super().formatMessage(record))
