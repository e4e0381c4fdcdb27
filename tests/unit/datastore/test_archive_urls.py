"""Signed archive URLs of the provider mirror (datastore/providercache/signing.py): what verifies, what does not."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.datastore.providercache.signing import ArchiveSigner, UrlKeys

SHA, FILE = "a" * 64, "terraform-provider-x_1.0.0_linux_amd64.zip"


def parts(query: str) -> tuple[str, str]:
    values = dict(item.split("=", 1) for item in query.split("&"))
    return values["exp"], values["sig"]


def test_a_url_verifies_for_its_archive_until_it_expires() -> None:
    now = [1_000_000.0]
    signer = ArchiveSigner(UrlKeys(b"k"), 3600, clock=lambda: now[0])
    exp, sig = parts(signer.query(SHA, FILE))
    assert exp == str(1_000_000 + 3600)
    assert signer.valid(SHA, FILE, exp, sig)
    assert not signer.valid("b" * 64, FILE, exp, sig) and not signer.valid(SHA, FILE + "x", exp, sig)
    assert not signer.valid(SHA, FILE, str(int(exp) + 1), sig)  # the expiry is signed
    assert not signer.valid(SHA, FILE, None, sig) and not signer.valid(SHA, FILE, exp, None)
    assert not signer.valid(SHA, FILE, "-1", sig) and not signer.valid(SHA, FILE, "9" * 40, sig)
    now[0] += 3600
    assert not signer.valid(SHA, FILE, exp, sig)


def test_replicas_with_one_key_agree_and_others_do_not() -> None:
    one, same, other = (ArchiveSigner(UrlKeys(k), 60) for k in (b"shared", b"shared", b"else"))
    exp, sig = parts(one.query(SHA, FILE))
    assert same.valid(SHA, FILE, exp, sig) and not other.valid(SHA, FILE, exp, sig)
    assert UrlKeys().accepted() != UrlKeys().accepted()  # no key, no file: random per process


def test_a_key_derived_from_the_https_key_follows_its_rotation_and_keeps_the_last_one(tmp_path: Path) -> None:
    key_file = tmp_path / "tls.key"
    key_file.write_bytes(b"first private key")
    clock = [0.0]
    keys = UrlKeys(derive_from=key_file, check_every=10, clock=lambda: clock[0])
    signer = ArchiveSigner(keys, 60)
    before = parts(signer.query(SHA, FILE))
    assert ArchiveSigner(UrlKeys(derive_from=key_file), 60).valid(SHA, FILE, *before)  # another replica
    key_file.write_bytes(b"second private key, renewed")
    os.utime(key_file, ns=(1, 1))
    clock[0] += 10
    after = parts(signer.query(SHA, FILE))
    assert after != before and len(keys.accepted()) == 2
    assert signer.valid(SHA, FILE, *before) and signer.valid(SHA, FILE, *after)


@given(st.text(max_size=20), st.text(max_size=60))
def test_no_guessed_query_verifies(exp: str, sig: str) -> None:
    signer = ArchiveSigner(UrlKeys(b"k"), 3600, clock=lambda: 0.0)
    real_exp, real_sig = parts(signer.query(SHA, FILE))
    assert signer.valid(SHA, FILE, exp, sig) == (exp == real_exp and sig == real_sig)
