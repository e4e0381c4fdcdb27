"""`retry_after`: which answers the Kubernetes client sends again, and after how long (client-go's `checkWait`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.kube.client import RETRY_AFTER_CAP, retry_after


def test_storage_initializing_is_retried_after_the_servers_delay() -> None:
    # kube-apiserver's answer while a new CRD's storage initializes: 429, Retry-After: 1.
    assert retry_after(429, {"Retry-After": "1"}) == 1.0
    assert retry_after(503, {"retry-after": " 2 "}) == 2.0


def test_without_retry_after_or_for_a_client_error_nothing_is_retried() -> None:
    assert retry_after(429, {}) is None
    assert retry_after(500, None) is None
    assert retry_after(409, {"Retry-After": "1"}) is None
    assert retry_after(404, {"Retry-After": "1"}) is None
    # An HTTP date (RFC 9110 allows it) is not whole seconds: client-go does not wait for it, nor do we.
    assert retry_after(429, {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}) is None


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from([429, 500, 502, 503, 504]))
def test_the_wait_is_the_servers_capped(seconds: int, status: int) -> None:
    assert retry_after(status, {"Retry-After": str(seconds)}) == min(float(seconds), RETRY_AFTER_CAP)


@given(st.integers(min_value=100, max_value=499).filter(lambda s: s != 429), st.text(max_size=5))
def test_other_statuses_are_never_retried(status: int, value: str) -> None:
    assert retry_after(status, {"Retry-After": value}) is None
