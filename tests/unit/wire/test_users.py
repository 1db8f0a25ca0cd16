"""wire/users.py: the SCRAM users file (format, load errors with FILE:LINE, PLAIN checks, atomic save)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat

import pytest

from wire.users import (DEFAULT_ITERATIONS, ScramCredential, UserRecord, Users, UsersFileError,
                        valid_user_name)


def test_credential_matches_rfc7677_test_vector():
    """RFC 7677 §3's SCRAM-SHA-256 example: user "user", password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==,
    4096 iterations; its server signature v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4= must follow."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = ScramCredential.derive("SCRAM-SHA-256", "pencil", salt=salt, iterations=4096)
    auth_message = ("n=user,r=rOprNGfwEbeRWgbNEkqO,"
                    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,"
                    "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0").encode()
    server_signature = hmac.new(cred.server_key, auth_message, hashlib.sha256).digest()
    assert base64.b64encode(server_signature).decode() == "6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def test_set_password_stores_no_password_and_checks_plain(tmp_path):
    users = Users()
    users.set_password("alice", "s3cret")
    text = users.dumps()
    assert "s3cret" not in text
    assert hashlib.sha256(b"s3cret").hexdigest() not in text
    rec = users.get("alice")
    assert set(rec.credentials) == {"SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert all(c.iterations == DEFAULT_ITERATIONS for c in rec.credentials.values())
    assert users.check_plain("alice", "s3cret")
    assert not users.check_plain("alice", "wrong")
    assert not users.check_plain("bob", "s3cret")


def test_plain_uses_sha512_when_only_that_is_stored():
    rec = UserRecord.from_password("carol", "pw")
    only512 = UserRecord("carol", {"SCRAM-SHA-512": rec.credentials["SCRAM-SHA-512"]})
    assert only512.check_password("pw")
    assert not only512.check_password("px")


def test_save_is_0600_and_round_trips(tmp_path):
    path = tmp_path / "users.db"
    users = Users()
    users.set_password("alice", "a")
    users.set_password("bob", "b")
    users.save(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = Users.load(str(path))
    assert again.names() == ["alice", "bob"]
    assert again.check_plain("bob", "b")
    assert again.get("alice") == users.get("alice")
    assert [p.name for p in tmp_path.iterdir()] == ["users.db"]  # no temporary file left behind


def _line(name="alice", **over):
    rec = UserRecord.from_password(name, "pw")
    return rec.line()


@pytest.mark.parametrize("line, message", [
    ("alice", "alice' has no credentials"),
    ("alice SCRAM-SHA-1$4096:AAAA$AAAA:AAAA", "unknown mechanism 'SCRAM-SHA-1'"),
    ("alice SCRAM-SHA-256$0:AAAA$AAAA:AAAA", "iteration count '0'"),
    ("alice SCRAM-SHA-256$4096:!!!$AAAA:AAAA", "not base64"),
    ("alice SCRAM-SHA-256$4096:AAAA$AAAA:AAAA", "keys not 32 bytes"),
    ("alice plaintextpassword", "not MECH$ITERATIONS"),
])
def test_malformed_line_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "users"
    path.write_text("# users\n\n" + _line("bob") + "\n" + line + "\n")
    with pytest.raises(UsersFileError) as err:
        Users.load(str(path))
    assert str(err.value).startswith(f"{path}:4: ")
    assert message in str(err.value)


def test_duplicate_user_and_duplicate_mechanism(tmp_path):
    path = tmp_path / "users"
    path.write_text(_line("bob") + "\n" + _line("bob") + "\n")
    with pytest.raises(UsersFileError, match=r":2: user 'bob' appears twice"):
        Users.load(str(path))
    cred = UserRecord.from_password("x", "y").credentials["SCRAM-SHA-256"].encode()
    path.write_text(f"x {cred} {cred}\n")
    with pytest.raises(UsersFileError, match=r":1: user 'x': SCRAM-SHA-256 given twice"):
        Users.load(str(path))


def test_berkeley_db_sasldb_is_refused_with_what_to_do(tmp_path):
    """A Cyrus sasldb is a Berkeley DB file: hash magic 0x00061561 at offset 12 (db.h DB_HASHMAGIC)."""
    path = tmp_path / "qdrouterd.sasldb"
    path.write_bytes(b"\x00" * 12 + (0x00061561).to_bytes(4, "little") + b"\x00" * 4080)
    with pytest.raises(UsersFileError) as err:
        Users.load(str(path))
    assert str(err.value).startswith(f"{path}: this is a Berkeley DB file")
    assert "tdpasswd -f" in str(err.value)


def test_binary_and_non_utf8_files_are_refused(tmp_path):
    path = tmp_path / "bin"
    path.write_bytes(b"alice \x00\x01\x02")
    with pytest.raises(UsersFileError, match="a binary file"):
        Users.load(str(path))
    path.write_bytes(b"# ok\nal\xffice x\n")
    with pytest.raises(UsersFileError, match=r"bin:2: not UTF-8"):
        Users.load(str(path))


def test_missing_file_is_an_error_naming_it(tmp_path):
    with pytest.raises(UsersFileError, match="missing: cannot read users file"):
        Users.load(str(tmp_path / "missing"))


@pytest.mark.parametrize("name, ok", [("alice", True), ("a@b.c", True), ("", False), ("a b", False),
                                      ("#x", False), ("a\nb", False)])
def test_user_names(name, ok):
    assert valid_user_name(name) is ok
    if not ok:
        with pytest.raises(ValueError):
            Users().set_password(name, "pw")


def test_unicode_password_is_normalised():
    """RFC 5802 §2.2 (SASLprep's NFKC): a composed and a decomposed "é" are the same password."""
    users = Users()
    users.set_password("u", "caf\u00e9")
    assert users.check_plain("u", "cafe\u0301")


def test_plain_check_of_an_unknown_user_costs_one_pbkdf2_like_a_known_one(monkeypatch):
    """Otherwise the answer's timing would tell which user names exist."""
    import wire.users as users_module

    users = Users()
    users.set_password("alice", "pw")
    calls = []
    real = hashlib.pbkdf2_hmac
    monkeypatch.setattr(users_module.hashlib, "pbkdf2_hmac", lambda *a: calls.append(a[3]) or real(*a))
    assert not users.check_plain("alice", "guess")
    assert not users.check_plain("nobody", "guess")
    assert calls == [DEFAULT_ITERATIONS, DEFAULT_ITERATIONS]


# fuzz finding sasl-files-fa5020f6f912 ("UsersFileError names a line past the end"): the exact input.
# str.splitlines() also breaks lines at \v, \f, \x1c-\x1e, \x85, U+2028 and U+2029; editors do not.
FUZZ_USERS_VERTICAL_TAB = b"# C\x0byru#s  St.use"


def test_fuzz_finding_users_file_line_numbers_count_only_real_line_ends(tmp_path):
    assert len(Users.parse(FUZZ_USERS_VERTICAL_TAB, "users")) == 0  # one comment line (it was line 2)
    text = f"# a form feed \x0c and a line separator \u2028 in a comment\r{_line('bob')}\r\nbroken\n"
    with pytest.raises(UsersFileError) as err:
        Users.parse(text.encode(), "users")
    assert str(err.value).startswith("users:3: "), err.value
    with pytest.raises(UsersFileError) as err:
        Users.parse(b"# one\rtwo \x1c\rthr\xffee\n", "users")  # lines that end in \r alone count too
    assert str(err.value).startswith("users:3: not UTF-8"), err.value


def test_fuzz_finding_users_file_name_with_a_nul_is_a_users_file_error(tmp_path):
    """sasl-files: a sasldb_path with a NUL character made open() raise ValueError out of Users.load."""
    with pytest.raises(UsersFileError, match="the name has a NUL character"):
        Users.load(str(tmp_path / "sa\0db"))
