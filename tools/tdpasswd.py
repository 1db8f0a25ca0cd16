"""``tdpasswd -f FILE USER``: set, delete or list the users of a trio-dispatch users file.

The users file is what a Cyrus-style SASL configuration's ``sasldb_path`` names for ``tdrouterd`` (and
the broker's acceptors): one user a line of SCRAM-SHA-256/512 salted keys, never a password (format in
:mod:`wire.users`, docs/security.md). This tool plays the part of Cyrus's ``saslpasswd2 -f FILE -p USER``:

    tdpasswd -f FILE USER        set USER's password, read from standard input (asked twice on a
                                 terminal; one line from a pipe: ``echo secret | tdpasswd -f F alice``)
    tdpasswd -f FILE -d USER     delete USER
    tdpasswd -f FILE -l          list the users, one a line

The file is created when missing and always rewritten atomically with mode 0600 (the salted keys
allow offline guessing, so only the daemon's user should read them). A daemon reads the file at
start-up: restart it (or reload it, once that is wired) after a change.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys

from wire.users import DEFAULT_ITERATIONS, MAX_ITERATIONS, Users, UsersFileError, valid_user_name

PROG = "tdpasswd"


class UsageError(Exception):
    """A mistake on the command line or in the input: one line on standard error, exit status 1."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Set, delete or list users of a trio-dispatch "
                                "users file (SCRAM salted keys; what sasldb_path names).")
    p.add_argument("-f", "--file", required=True, metavar="FILE", help="the users file (created when missing)")
    action = p.add_mutually_exclusive_group()
    action.add_argument("-d", "--delete", action="store_true", help="delete USER")
    action.add_argument("-l", "--list", action="store_true", help="list the users")
    p.add_argument("-p", "--pipe", action="store_true",
                   help="read the password once from standard input even on a terminal (saslpasswd2's -p)")
    p.add_argument("-i", "--iterations", type=int, default=DEFAULT_ITERATIONS,
                   help=f"SCRAM iteration count (default {DEFAULT_ITERATIONS}, RFC 7677's recommendation)")
    p.add_argument("user", nargs="?", metavar="USER")
    return p


def read_password(stdin, *, ask: bool) -> str:
    """The new password: asked twice without echo on a terminal, else the first line of ``stdin``."""
    if ask:
        first = getpass.getpass("Password: ")
        if getpass.getpass("Again (for verification): ") != first:
            raise UsageError("passwords do not match")
        password = first
    else:
        line = stdin.readline()
        password = line[:-1] if line.endswith("\n") else line
        if password.endswith("\r"):
            password = password[:-1]
    if not password:
        raise UsageError("empty password (nothing read from standard input)")
    return password


def load_or_new(path: str) -> Users:
    if not os.path.exists(path):
        return Users(path=path)
    return Users.load(path)


def run(opts, stdin, stdout) -> None:
    if opts.list:
        if opts.user:
            raise UsageError("-l takes no USER")
        for name in load_or_new(opts.file).names():
            print(name, file=stdout)
        return
    if not opts.user:
        raise UsageError("USER is required (or -l to list)")
    if opts.delete:
        users = load_or_new(opts.file)
        if not users.delete(opts.user):
            raise UsageError(f"{opts.file}: no user {opts.user!r}")
        users.save(opts.file)
        return
    if not valid_user_name(opts.user):
        raise UsageError(f"user name {opts.user!r} must be non-empty, without spaces or control characters, "
                         "and not start with '#'")
    if not 1 <= opts.iterations <= MAX_ITERATIONS:
        raise UsageError(f"--iterations must be 1..{MAX_ITERATIONS}")
    users = load_or_new(opts.file)  # read first: a file we cannot use is reported before the password
    password = read_password(stdin, ask=stdin.isatty() and not opts.pipe)
    users.set_password(opts.user, password, iterations=opts.iterations)
    users.save(opts.file)


def main(argv=None, stdin=None, stdout=None) -> int:
    opts = parser().parse_args(argv)
    try:
        run(opts, stdin or sys.stdin, stdout or sys.stdout)
    except (UsageError, UsersFileError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"{PROG}: {opts.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
