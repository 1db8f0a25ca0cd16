"""uidFormat / uidNameMappingFile: the user name a client certificate logs in with (wire.tls).

Expected ids follow Dispatch's ``tests/system_tests_user_id.py``: the fields in the order the letters name
them, joined by ``;``, fingerprints as lower-case hex of the DER certificate, absent fields left out.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from wire.tls import CertificateUserIds, TlsConfigError, TlsPeerInfo, TlsProfile

DER = b"0\x82\x01 not really a certificate, but the digests only hash bytes"
RDNS = ((("countryName", "US"),), (("stateOrProvinceName", "NC"),), (("localityName", "Raleigh"),),
        (("organizationalUnitName", "Dev"),), (("organizationName", "Client"),), (("commonName", "127.0.0.1"),))
SUBJECT = "CN=127.0.0.1,O=Client,OU=Dev,L=Raleigh,ST=NC,C=US"


def info(rdns=RDNS, subject=SUBJECT) -> TlsPeerInfo:
    return TlsPeerInfo("TLSv1.3", "TLS_AES_256_GCM_SHA384", 256, subject, DER, rdns)


@pytest.mark.parametrize("fmt,expected", [
    (None, SUBJECT),
    ("1", hashlib.sha1(DER).hexdigest()),
    ("2noucs", f"{hashlib.sha256(DER).hexdigest()};127.0.0.1;Client;Dev;US;NC"),
    ("cs5", f"US;NC;{hashlib.sha512(DER).hexdigest()}"),
    ("nsuco", "127.0.0.1;NC;Dev;US;Client"),
    ("scounl", "NC;US;Client;Dev;127.0.0.1;Raleigh"),
])
def test_uid_format_fields_in_order(fmt, expected):
    assert CertificateUserIds(fmt).user_for(info()) == expected


def test_absent_fields_are_left_out_and_none_present_means_the_subject():
    only_cn = ((("commonName", "alice"),),)
    assert CertificateUserIds("ocn").user_for(info(only_cn, "CN=alice")) == "alice"
    assert CertificateUserIds("ou").user_for(info(only_cn, "CN=alice")) == "CN=alice"


def test_no_certificate_no_user():
    assert CertificateUserIds("n").user_for(info((), None)) is None


def test_mapping_file_translates_ids_and_leaves_others(tmp_path):
    names = tmp_path / "names.json"
    sha1 = hashlib.sha1(DER).hexdigest()
    names.write_text(json.dumps({sha1: "user13", "someone-else": "x"}))
    ids = TlsProfile(name="p", uid_format="1", uid_name_mapping_file=str(names)).user_ids()
    assert ids.user_for(info()) == "user13"
    assert TlsProfile(name="p", uid_format="n", uid_name_mapping_file=str(names)).user_ids().user_for(info()) \
        == "127.0.0.1"


@pytest.mark.parametrize("fmt", ["1x", "abxd", ""])
def test_unknown_letters_are_a_start_up_error(fmt):
    with pytest.raises(TlsConfigError) as err:
        TlsProfile(name="p", uid_format=fmt).user_ids()
    assert err.value.attribute == "uidFormat"


@pytest.mark.parametrize("content", ["[1, 2]", "{\"a\": 1}", "not json", "\xff"])
def test_bad_mapping_file_is_a_start_up_error(tmp_path, content):
    path = tmp_path / "names.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.raises(TlsConfigError) as err:
        TlsProfile(name="p", uid_format="n", uid_name_mapping_file=str(path)).user_ids()
    assert err.value.attribute == "uidNameMappingFile" and str(path) in str(err.value)


def test_missing_mapping_file_names_attribute(tmp_path):
    with pytest.raises(TlsConfigError) as err:
        TlsProfile(name="p", uid_name_mapping_file=str(tmp_path / "nope.json")).user_ids()
    assert err.value.attribute == "uidNameMappingFile"
