"""tools/tdpasswd.py: set (password from standard input), delete and list users of a users file."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys

import pytest

from tools import tdpasswd
from wire.users import Users

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def run(argv, stdin_text="", tty=False):
    stdin = io.StringIO(stdin_text)
    stdin.isatty = lambda: tty
    out = io.StringIO()
    code = tdpasswd.main(argv, stdin=stdin, stdout=out)
    return code, out.getvalue()


def test_set_from_a_pipe_creates_the_file_0600(tmp_path):
    path = str(tmp_path / "users")
    assert run(["-f", path, "alice"], "s3cret\n") == (0, "")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    text = open(path).read()
    assert "s3cret" not in text and text.count("SCRAM-SHA-") == 2
    users = Users.load(path)
    assert users.check_plain("alice", "s3cret") and not users.check_plain("alice", "s3cret\n")


def test_set_again_changes_the_password_and_keeps_others(tmp_path):
    path = str(tmp_path / "users")
    run(["-f", path, "alice"], "one\n")
    run(["-f", path, "bob"], "two\r\n")
    run(["-f", path, "alice"], "three")
    users = Users.load(path)
    assert users.check_plain("alice", "three") and not users.check_plain("alice", "one")
    assert users.check_plain("bob", "two")


def test_list_and_delete(tmp_path):
    path = str(tmp_path / "users")
    for name in ("carol", "alice", "bob"):
        run(["-f", path, name], "pw\n")
    assert run(["-f", path, "-l"]) == (0, "alice\nbob\ncarol\n")
    assert run(["-f", path, "-d", "bob"]) == (0, "")
    assert run(["-f", path, "-l"]) == (0, "alice\ncarol\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_terminal_asks_twice(tmp_path, monkeypatch):
    path = str(tmp_path / "users")
    answers = iter(["pw1", "pw1", "pw2", "different"])
    monkeypatch.setattr(tdpasswd.getpass, "getpass", lambda prompt: next(answers))
    assert run(["-f", path, "alice"], tty=True)[0] == 0
    assert Users.load(path).check_plain("alice", "pw1")
    assert run(["-f", path, "alice"], tty=True)[0] == 1  # mismatch: nothing changes
    assert Users.load(path).check_plain("alice", "pw1")


@pytest.mark.parametrize("argv, stdin_text, message", [
    (["alice"], "", "empty password"),
    (["-d", "nobody"], "", "no user 'nobody'"),
    ([], "", "USER is required"),
    (["-l", "alice"], "", "-l takes no USER"),
    (["a b"], "pw\n", "must be non-empty, without spaces"),
    (["-i", "0", "alice"], "pw\n", "--iterations must be"),
])
def test_mistakes_are_one_line_and_change_nothing(tmp_path, capsys, argv, stdin_text, message):
    path = str(tmp_path / "users")
    run(["-f", path, "keep"], "pw\n")
    before = open(path).read()
    assert run(["-f", path] + argv, stdin_text)[0] == 1
    err = capsys.readouterr().err
    assert err.startswith("tdpasswd: ") and message in err and err.count("\n") == 1
    assert open(path).read() == before


def test_a_berkeley_db_sasldb_is_refused_before_asking(tmp_path, capsys):
    path = tmp_path / "qdrouterd.sasldb"
    path.write_bytes(b"\0" * 12 + (0x00061561).to_bytes(4, "little") + b"\0" * 100)
    assert run(["-f", str(path), "alice"], "pw\n")[0] == 1
    err = capsys.readouterr().err
    assert "Berkeley DB" in err and "tdpasswd -f" in err
    assert path.read_bytes()[:12] == b"\0" * 12  # left alone


def test_subprocess_pipe(tmp_path):
    """The real command line: the password comes from a pipe, as with saslpasswd2 -p."""
    path = str(tmp_path / "users")
    proc = subprocess.run([sys.executable, "-m", "tools.tdpasswd", "-f", path, "alice"], input="pw\n",
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    listed = subprocess.run([sys.executable, "-m", "tools.tdpasswd", "-f", path, "-l"], capture_output=True,
                            text=True, cwd=ROOT, timeout=60)
    assert listed.stdout == "alice\n"
    assert Users.load(path).check_plain("alice", "pw")
