"""`Hashing` of a storage told what to record (`describe`, as encryption does) counts without hashing: the size
limit still holds, and no sum can be taken from it by mistake."""

from __future__ import annotations

import hashlib

import pytest

from burrito_py.datastore.storage import Hashing, ObjectInfo, TooLarge


def test_a_hashing_one_counts_and_sums() -> None:
    hashing = Hashing(10)
    hashing.add(b"abc")
    hashing.add(b"def")
    assert hashing.info() == ObjectInfo(hashlib.sha256(b"abcdef").hexdigest(), 6)


def test_a_counting_one_still_refuses_more_than_its_limit_and_has_no_sum() -> None:
    hashing = Hashing(5, hashed=False)
    assert hashing.add(b"abc") == b"abc"
    assert hashing.size == 3 and hashing.digest is None
    with pytest.raises(TooLarge):
        hashing.add(b"def")
    with pytest.raises(RuntimeError, match="counts bytes only"):
        hashing.info()
