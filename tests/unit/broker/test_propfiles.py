"""broker/propfiles.py: editing the properties files beside broker.xml (users, roles, credentials store)."""

from __future__ import annotations

import os
import stat

from broker.propfiles import entry_key, read_lines, write_private


def test_lines_are_counted_as_editors_count_them_and_kept(tmp_path):
    path = tmp_path / "x.properties"
    path.write_bytes(b"# comment\r\nalice = a\x0bb\nbob: c\rcarol=d")
    assert read_lines(str(path)) == ["# comment", "alice = a\x0bb", "bob: c", "carol=d"]   # \v is not a line end
    assert [entry_key(line) for line in read_lines(str(path))] == [None, "alice", "bob", "carol"]
    assert read_lines(str(tmp_path / "missing")) == []


def test_write_private_replaces_the_file_with_mode_0600(tmp_path):
    path = tmp_path / "x.properties"
    path.write_text("old\n")
    os.chmod(path, 0o644)
    write_private(str(path), ["# kept", "alice = a\x0bb"])
    assert path.read_text() == "# kept\nalice = a\x0bb\n"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["x.properties"]   # no temporary file left


def test_entry_key_ignores_blank_comment_and_keyless_lines():
    assert [entry_key(s) for s in ("", "  ", "! c", "# c", "= v", "novalue", " k = v ")] == \
        [None, None, None, None, None, None, "k"]
