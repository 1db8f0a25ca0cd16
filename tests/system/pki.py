"""Certificates made at test time (trustme) for the TLS system tests: no key is committed."""

from __future__ import annotations

import datetime
import pathlib

import trustme


def write_pki(directory: pathlib.Path, *, stranger: bool = False, expired: bool = False,
              extra_clients: tuple[str, ...] = ()) -> dict[str, str]:
    """Write into ``directory`` and return name -> path of: ``ca.pem``; ``server.pem``/``server.key`` for
    localhost and 127.0.0.1; ``client.pem``/``client.key`` signed by the CA (CN client.example); with
    ``stranger`` a client certificate from another CA; with ``expired`` one from the CA whose validity
    ended yesterday; for each of ``extra_clients`` another client certificate the CA signed (CN
    ``<label>.example``, files ``<label>.pem``/``<label>.key``)."""
    ca = trustme.CA()
    files: dict[str, str] = {}

    def write(name: str, blob) -> None:
        path = directory / name
        blob.write_to_path(str(path))
        files[name] = str(path)

    def client(label: str, issuer: trustme.CA, **validity) -> None:
        cert = issuer.issue_cert(f"{label}.example", common_name=f"{label}.example", **validity)
        write(f"{label}.pem", cert.cert_chain_pems[0])
        write(f"{label}.key", cert.private_key_pem)

    write("ca.pem", ca.cert_pem)
    server = ca.issue_cert("localhost", "127.0.0.1")
    write("server.pem", server.cert_chain_pems[0])
    write("server.key", server.private_key_pem)
    client("client", ca)
    for label in extra_clients:
        client(label, ca)
    if stranger:
        client("stranger", trustme.CA())
    if expired:
        now = datetime.datetime.now(datetime.timezone.utc)
        client("expired", ca, not_before=now - datetime.timedelta(days=30), not_after=now - datetime.timedelta(days=1))
    return files
