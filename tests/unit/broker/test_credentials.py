"""tdbroker's credentials store (broker/credentials.py): broker-credentials.properties beside broker.xml,
read at start-up (refused when group or others may read it), the password of an <amqp-connection> that
names its user only, FILE:LINE errors that never hold a password, and `tdbroker credential add|rm|list`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from broker.config import BrokerConfigError, load_broker_config
from broker.credentials import (
    FROM_CONFIG, FROM_STORE, STORE_FILE, CredentialsError, add_credential, list_credentials, load_store,
    remove_credential,
)
from tests.paths import REPO

SECRET = "Stored-s3cret=x:y#z"   # separators and a '#' inside: taken literally after the first '='


def core(body: str) -> str:
    return ('<configuration xmlns="urn:activemq">\n<core xmlns="urn:activemq:core">\n'
            f"{body}\n</core></configuration>\n")


def line_of(text: str, needle: str) -> int:
    return text[:text.index(needle)].count("\n") + 1


def connection_xml(attrs: str) -> str:
    return core('<persistence-enabled>false</persistence-enabled>\n<broker-connections>\n'
                f'<amqp-connection uri="tcp://127.0.0.1:5672" name="to-b" {attrs}>'
                '<sender address-match="q"/></amqp-connection>\n</broker-connections>')


def write_store(folder, text: str, mode: int = 0o600):
    path = folder / STORE_FILE
    path.write_text(text)
    os.chmod(path, mode)
    return path


def broker_xml(folder, attrs: str):
    xml = folder / "broker.xml"
    text = connection_xml(attrs)
    xml.write_text(text)
    return xml, text


# --- the file ---------------------------------------------------------------------------------------------------

def test_store_entries_comments_and_separators(tmp_path):
    path = write_store(tmp_path, f"# outgoing logins\n! also a comment\n\nupstream = {SECRET}\nother: pw2  \n")
    store = load_store(str(path))
    assert store.names() == ["other", "upstream"]
    assert store.password("upstream") == SECRET and store.password("other") == "pw2"
    assert "upstream" in store and "nobody" not in store
    assert SECRET not in repr(store) and "pw2" not in repr(store)
    assert store.lines == {"upstream": 4, "other": 5}


@pytest.mark.parametrize("content,line,words", [
    ("a = p1\na = p2\n", 2, "appears twice (first at line 1)"),
    ("# c\nempty =\n", 2, "empty password"),
    ("just-a-word\n", 1, "expected 'user = password'"),
    ("u = ENC(SCRAM-SHA-256$4096:abc)\n", 1, "ENC(...) is not decoded"),
    ("bad\x01name = p\n", 1, "control characters"),
], ids=["duplicate", "empty", "no-separator", "enc", "bad-name"])
def test_store_errors_name_file_and_line_and_never_the_password(tmp_path, content, line, words):
    path = write_store(tmp_path, content)
    with pytest.raises(CredentialsError) as info:
        load_store(str(path))
    assert (info.value.path, info.value.line) == (str(path), line) and words in info.value.message
    assert "p1" not in str(info.value) and "p2" not in str(info.value)


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620])
def test_a_store_group_or_others_may_access_is_refused_at_start_up(tmp_path, mode):
    """Like ssh and a private key: the file is refused with its path and the chmod that fixes it, even when
    no connection uses it (its passwords are exposed either way)."""
    path = write_store(tmp_path, f"upstream = {SECRET}\n", mode)
    xml = tmp_path / "broker.xml"
    xml.write_text(core("<persistence-enabled>false</persistence-enabled>"))
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert info.value.path == str(path) and f"chmod 600 {path}" in info.value.message
    assert f"{mode:04o}" in info.value.message and SECRET not in str(info.value)
    os.chmod(path, 0o600)
    load_broker_config(xml)


# --- broker.xml: user only -> the stored password -----------------------------------------------------------------

def test_a_connection_with_user_only_logs_in_with_the_stored_password(tmp_path):
    write_store(tmp_path, f"upstream = {SECRET}\n")
    xml, _ = broker_xml(tmp_path, 'user="upstream"')
    cfg = load_broker_config(xml)
    (conn,) = cfg.broker_connections
    assert (conn.user, conn.password, conn.password_source) == ("upstream", SECRET, FROM_STORE)
    assert SECRET not in repr(conn) and SECRET not in repr(cfg) and cfg.warnings == []


@pytest.mark.parametrize("store", [None, "someone-else = pw\n"], ids=["no-store", "not-in-store"])
def test_a_user_missing_from_the_store_is_refused_at_the_connection_line(tmp_path, store):
    if store is not None:
        write_store(tmp_path, store)
    xml, text = broker_xml(tmp_path, 'user="upstream"')
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert (info.value.path, info.value.line) == (str(xml), line_of(text, "<amqp-connection"))
    message = info.value.message
    assert str(tmp_path / STORE_FILE) in message
    assert f"tdbroker -c {xml} credential add --user upstream" in message
    assert ("has no entry for 'upstream'" if store else "there is no credentials store") in message


def test_a_password_in_broker_xml_still_works_and_is_warned_about_without_being_shown(tmp_path):
    xml, text = broker_xml(tmp_path, 'user="u" password="inline-s3cret"')
    cfg = load_broker_config(xml)
    (conn,) = cfg.broker_connections
    assert (conn.password, conn.password_source) == ("inline-s3cret", FROM_CONFIG)
    (warning,) = [w for w in cfg.warnings if "in clear" in w]
    assert warning.startswith(f"{xml}:{line_of(text, '<amqp-connection')}: warning: ")
    assert "credential add --user u" in warning and "inline-s3cret" not in warning


def test_anonymous_connections_need_no_store(tmp_path):
    xml, _ = broker_xml(tmp_path, "")
    (conn,) = load_broker_config(xml).broker_connections
    assert (conn.user, conn.password, conn.password_source) == (None, None, None)


@pytest.mark.parametrize("attrs,words", [
    ('password="s3cret"', "password without user is not enforced"),
    ('user="u" password="ENC(s3cret)"', "masked passwords (ENC(...)) are not enforced yet"),
    ('user="u" password="${s3cret}"', "property substitution is not supported"),
])
def test_credentials_that_would_be_ignored_are_refused_without_echo(tmp_path, attrs, words):
    xml, _ = broker_xml(tmp_path, attrs)
    with pytest.raises(BrokerConfigError) as info:
        load_broker_config(xml)
    assert words in info.value.message and "s3cret" not in str(info.value)


# --- tdbroker credential add|rm|list -------------------------------------------------------------------------------

def test_credential_add_rm_list(tmp_path):
    from click.testing import CliRunner

    from broker.daemon import main

    xml = str(tmp_path / "broker.xml")
    runner = CliRunner()
    added = runner.invoke(main, ["-c", xml, "credential", "add", "--user", "upstream"], input=f"{SECRET}\n")
    assert added.exit_code == 0, added.output
    assert SECRET not in added.output
    store = tmp_path / STORE_FILE
    assert store.stat().st_mode & 0o777 == 0o600
    assert load_store(str(store)).password("upstream") == SECRET
    assert runner.invoke(main, ["-c", xml, "credential", "add", "--user", "b"], input="pw-b\n").exit_code == 0
    listed = runner.invoke(main, ["-c", xml, "credential", "list"])
    assert listed.output.splitlines() == ["b", "upstream"]
    assert runner.invoke(main, ["-c", xml, "credential", "add", "--user", "upstream"], input="new-pw\n").exit_code == 0
    assert load_store(str(store)).password("upstream") == "new-pw"
    assert runner.invoke(main, ["-c", xml, "credential", "rm", "--user", "upstream"]).exit_code == 0
    assert list_credentials(xml) == ["b"] and "new-pw" not in store.read_text()
    assert runner.invoke(main, ["-c", xml, "credential", "rm", "--user", "upstream"]).exit_code == 1
    for bad in ("\n", " padded \n", "ENC(x)\n"):
        assert runner.invoke(main, ["-c", xml, "credential", "add", "--user", "c"], input=bad).exit_code == 1
    assert runner.invoke(main, ["-c", xml, "credential", "add", "--user", "a=b"], input="pw\n").exit_code == 1
    assert [p.name for p in tmp_path.iterdir()] == [STORE_FILE]   # no temporary file left behind


def test_credential_add_rewrites_an_open_store_private_and_keeps_its_comments(tmp_path):
    xml = str(tmp_path / "broker.xml")
    store = write_store(tmp_path, "# mine\nold = pw\n", 0o644)
    add_credential(xml, "new", "pw2")
    assert store.stat().st_mode & 0o777 == 0o600
    assert store.read_text() == "# mine\nold = pw\nnew = pw2\n"
    assert remove_credential(xml, "old") and not remove_credential(xml, "old")
    with pytest.raises(ValueError):
        add_credential(xml, "#comment", "pw")


def test_credential_list_refuses_an_open_store(tmp_path):
    write_store(tmp_path, "u = pw\n", 0o644)
    with pytest.raises(CredentialsError, match="chmod 600"):
        list_credentials(str(tmp_path / "broker.xml"))


def test_the_real_command_reads_the_password_from_standard_input(tmp_path):
    """`tdbroker credential add` as an operator runs it: the password on stdin, not in argv or the output."""
    xml = tmp_path / "broker.xml"
    cmd = [sys.executable, "-m", "broker.daemon", "-c", str(xml), "credential"]
    proc = subprocess.run(cmd + ["add", "--user", "upstream"], input=f"{SECRET}\n", cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert SECRET not in proc.stdout + proc.stderr
    listed = subprocess.run(cmd + ["list"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert listed.stdout == "upstream\n" and SECRET not in listed.stdout + listed.stderr
    assert load_store(str(tmp_path / STORE_FILE)).password("upstream") == SECRET


def test_daemon_exits_2_with_file_and_line_for_a_user_without_a_stored_password(tmp_path):
    xml, text = broker_xml(tmp_path, 'user="upstream"')
    proc = subprocess.run([sys.executable, "-m", "broker.daemon", "-c", str(xml)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.startswith(f"{xml}:{line_of(text, '<amqp-connection')}: amqp-connection 'to-b' logs in as "
                                  "'upstream' without a password"), proc.stderr
    assert "credential add --user upstream" in proc.stderr and "ready" not in proc.stdout


def test_the_secure_example_connection_takes_its_password_from_the_store(tmp_path):
    """conf/broker-secure/broker.xml's commented-out <broker-connections>, uncommented: refused until
    `credential add` stores the user's password, then loaded with it."""
    import re

    import trustme

    from broker.security import add_user

    text = (REPO / "conf" / "broker-secure" / "broker.xml").read_text()
    block = re.search(r"(<broker-connections>.*?</broker-connections>)\s*-->", text, re.S)
    assert block, "the example connection is gone from conf/broker-secure/broker.xml"
    xml = tmp_path / "broker.xml"
    xml.write_text(text.replace(block.group(0), "-->\n" + block.group(1)))
    (tmp_path / "certs").mkdir()
    ca = trustme.CA()
    ca.issue_cert("localhost").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "certs" / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp_path / "certs" / "ca.pem"))
    add_user(str(xml), "admin", "pw", ["admin"])
    with pytest.raises(BrokerConfigError, match="credential add --user bridge"):
        load_broker_config(xml)
    add_credential(str(xml), "bridge", SECRET)
    (conn,) = load_broker_config(xml).broker_connections
    assert (conn.name, conn.user, conn.password, conn.password_source) == ("upstream", "bridge", SECRET, FROM_STORE)
    assert conn.tls[0] is not None
