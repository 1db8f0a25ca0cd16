"""Editing the properties-style files beside broker.xml in place (``artemis-users.properties``,
``artemis-roles.properties``, ``broker-credentials.properties``): what ``tdbroker user ...`` and
``tdbroker credential ...`` share.

Lines are counted as editors count them (``\\n``, ``\\r\\n``, ``\\r``; not ``str.splitlines``, which also breaks
at ``\\v``, ``\\f`` ... and would rewrite them), comments (``#``, ``!``) and unknown lines are kept as they
are, and a file is replaced atomically with mode 0600 from the start (a users file is a guessing target
even without passwords; the credentials store holds passwords).
"""

from __future__ import annotations

import os
import tempfile

from wire.users import editor_lines

#: Mode of every file these commands write.
PRIVATE_MODE = 0o600


def read_lines(path: str) -> list[str]:
    """The file's lines (no line ends); [] when it does not exist."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    lines = editor_lines(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def entry_key(line: str) -> str | None:
    """The key of a ``key = value`` (or ``key: value``) line; None for blank, comment or other lines."""
    stripped = line.strip()
    if not stripped or stripped[0] in "#!":
        return None
    cut = min((i for i in (stripped.find("="), stripped.find(":")) if i >= 0), default=-1)
    return stripped[:cut].strip() if cut > 0 else None


def write_private(path: str, lines: list[str]) -> None:
    """Replace ``path`` atomically with ``lines``, mode 0600 from the start (never a file others may read,
    not even a temporary one)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=folder)   # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), PRIVATE_MODE)
            f.write("".join(line + "\n" for line in lines))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
