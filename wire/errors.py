"""Errors shared by the router and the broker."""

from __future__ import annotations


class LocatedError(Exception):
    """A problem in an input file at ``path:line``; ``str()`` is ``"path:line: message"``, the form
    operators (and editors) jump to. Configuration errors of the router and the broker derive from it."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(path, line, message)
        self.path = path
        self.line = line
        self.message = message

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"
