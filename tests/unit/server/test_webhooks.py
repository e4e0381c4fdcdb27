"""Reading, verifying and matching webhook deliveries (pure)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.git.urls import repository_identity
from burrito_py.gitproviders.delivery import Delivery
from burrito_py.server.ratelimit import SourceLimiter, source_of
from burrito_py.server.webhook_keys import PublishedKey, decode_entries, encode_entry, entry_name, hmac_key
from burrito_py.server.webhooks import (
    BadDelivery,
    RecentDeliveries,
    body_digest,
    read_delivery,
    signature_valid,
    verified_by,
)

SECRET = b"s3cret"
BODY = json.dumps({"ref": "refs/heads/main", "repository": {"clone_url": "https://github.com/org/infra.git",
                                                            "ssh_url": "git@github.com:org/infra.git"}}).encode()


def github_headers(body: bytes, secret: bytes = SECRET, event: str = "push") -> dict[str, str]:
    digest = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return {"x-github-event": event, "x-github-delivery": "d1", "x-hub-signature-256": f"sha256={digest}"}


@pytest.mark.parametrize(
    "url",
    [
        "https://github.com/org/infra",
        "https://GitHub.com/Org/Infra.git",
        "https://github.com/org/infra.git/",
        "https://user:token@github.com/org/infra.git",
        "ssh://git@github.com/org/infra.git",
        "ssh://git@github.com:22/org/infra.git",
        "git@github.com:org/infra.git",
        "git@GITHUB.com:org/infra",
        "https://github.com/ORG/INFRA.GIT",
        "http://github.com:8080/org/infra",
    ],
)
def test_every_spelling_of_a_repository_has_one_identity(url: str) -> None:
    assert repository_identity(url) == ("github.com", "/org/infra")


@pytest.mark.parametrize("url", ["ext::sh -c x", "--upload-pack=x", "", "file:///"])
def test_invalid_urls_have_no_identity(url: str) -> None:
    assert repository_identity(url) is None


def test_a_local_repository_is_its_path_case_kept() -> None:
    assert repository_identity("file:///srv/Git/infra.git/") == ("file", "/srv/Git/infra")
    assert repository_identity("file:///srv/Git/infra") != repository_identity("file:///srv/git/infra")
    assert repository_identity("file:///srv/git/infra") != repository_identity("https://srv/git/infra")


def test_other_repositories_and_hosts_differ() -> None:
    assert repository_identity("https://github.com/org/infra-2") != repository_identity("https://github.com/org/infra")
    assert repository_identity("https://gitlab.com/org/infra") != repository_identity("https://github.com/org/infra")


def test_github_push_is_read_and_verified() -> None:
    headers = github_headers(BODY)
    delivery = read_delivery(headers, BODY)
    assert (delivery.provider, delivery.is_push, delivery.branch) == ("github", True, "main")
    assert delivery.delivery_id == "d1"
    assert delivery.identities() == {("github.com", "/org/infra")}
    assert signature_valid(delivery, headers, BODY, SECRET)
    assert not signature_valid(delivery, headers, BODY, b"other")
    assert not signature_valid(delivery, headers, BODY + b" ", SECRET)
    assert not signature_valid(delivery, {"x-github-event": "push"}, BODY, SECRET)
    assert not signature_valid(delivery, headers, BODY, b"")  # a repository without webhookSecret verifies nothing


def test_gitea_signs_with_its_own_header_even_when_it_sends_github_headers() -> None:
    digest = hmac.new(SECRET, BODY, hashlib.sha256).hexdigest()
    headers = {"x-gitea-event": "push", "x-github-event": "push", "x-gitea-delivery": "g1", "x-gitea-signature": digest}
    delivery = read_delivery(headers, BODY)
    assert delivery.provider == "gitea" and delivery.delivery_id == "g1"
    assert signature_valid(delivery, headers, BODY, SECRET)
    assert not signature_valid(delivery, {**headers, "x-gitea-signature": "0" * 64}, BODY, SECRET)


def test_gitlab_push_is_verified_by_its_token() -> None:
    body = json.dumps({"ref": "refs/heads/dev/x", "project": {"git_http_url": "https://gitlab.example.com/g/infra.git",
                                                               "git_ssh_url": "git@gitlab.example.com:g/infra.git"}})
    headers = {"x-gitlab-event": "Push Hook", "x-gitlab-token": "s3cret", "x-gitlab-event-uuid": "u1"}
    delivery = read_delivery(headers, body.encode())
    assert (delivery.provider, delivery.is_push, delivery.branch) == ("gitlab", True, "dev/x")
    assert delivery.identities() == {("gitlab.example.com", "/g/infra")}
    assert signature_valid(delivery, headers, body.encode(), SECRET)
    assert not signature_valid(delivery, {**headers, "x-gitlab-token": "nope"}, body.encode(), SECRET)


def test_tags_and_other_events_are_not_branch_pushes() -> None:
    tag = json.dumps({"ref": "refs/tags/v1"}).encode()
    assert read_delivery(github_headers(tag), tag).branch is None
    assert not read_delivery(github_headers(BODY, event="issues"), BODY).is_push


@pytest.mark.parametrize(
    ("headers", "body", "message"),
    [
        ({}, BODY, "no X-GitHub-Event"),
        ({"x-github-event": "push"}, b"{not json", "not valid JSON"),
        ({"x-github-event": "push"}, b"[1, 2]", "not a JSON object"),
        ({"x-github-event": "push"}, b"\xff\xfe", "not valid JSON"),
    ],
)
def test_unreadable_deliveries_are_named(headers: dict[str, str], body: bytes, message: str) -> None:
    with pytest.raises(BadDelivery, match=message):
        read_delivery(headers, body)


@given(st.binary(max_size=200), st.binary(min_size=1, max_size=32), st.binary(min_size=1, max_size=32))
def test_a_signature_verifies_only_under_its_own_secret(body: bytes, secret: bytes, other: bytes) -> None:
    headers = github_headers(body, secret)
    delivery = read_delivery({"x-github-event": "push"}, b"{}")
    assert signature_valid(delivery, headers, body, secret)
    assert signature_valid(delivery, headers, body, other) == (other == secret)


def test_recent_deliveries_are_bounded() -> None:
    recent = RecentDeliveries(size=2)
    for key in ("a", "b", "c"):
        recent.remember(key)
    assert not recent.seen("a") and recent.seen("b") and recent.seen("c")


@given(st.binary(max_size=200), st.binary(min_size=1, max_size=300), st.binary(min_size=1, max_size=300))
def test_the_published_key_verifies_exactly_what_the_secret_does(body: bytes, secret: bytes, other: bytes) -> None:
    """The controllers publish `hmac_key(secret)` (at most 64 bytes), never more: HMAC under it is HMAC under the
    secret (RFC 2104), and a GitLab token is compared through it, so every provider verifies as before."""
    key = hmac_key(secret)
    assert len(key) <= 64
    delivery = read_delivery({"x-github-event": "push"}, b"{}")
    assert signature_valid(delivery, github_headers(body, secret), body, key)
    assert signature_valid(delivery, github_headers(body, other), body, key) == (hmac_key(other) == key)
    gitlab = read_delivery({"x-gitlab-event": "Push Hook"}, b"{}")
    token = {"x-gitlab-token": secret.decode("latin-1")}
    assert signature_valid(gitlab, token, body, hmac_key(secret.decode("latin-1").encode()))


def test_published_entries_round_trip_and_malformed_ones_verify_nothing() -> None:
    secret = {"data": {entry_name("team-a", "infra.git"): encode_entry("uid-1", b"s" * 100),
                       "no-dot": encode_entry("uid-2", b"x"), "team-b.bad": "!!notbase64", "team-c.empty": ""}}
    assert decode_entries(secret) == {("team-a", "infra.git"): PublishedKey("uid-1", hmac_key(b"s" * 100))}
    assert decode_entries(None) == {}


def test_every_key_costs_one_check_and_an_unknown_repository_one_decoy_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """No early answer: zero candidates (unknown repository) and a candidate without a key are checked against a
    decoy, so they take the time of a wrong signature."""
    from burrito_py.server import webhooks

    calls: list[bytes] = []
    real = webhooks.signature_valid

    def counting(delivery: Delivery, headers: dict[str, str], body: bytes, key: bytes) -> bool:
        calls.append(key)
        return real(delivery, headers, body, key)

    monkeypatch.setattr(webhooks, "signature_valid", counting)
    headers = github_headers(BODY)
    delivery = read_delivery(headers, BODY)
    assert verified_by(delivery, headers, BODY, []) == [] and len(calls) == 1
    assert verified_by(delivery, headers, BODY, [None, SECRET, b"other"]) == [False, True, False]
    assert len(calls) == 4 and calls[1] not in (b"", None)


def test_a_delivery_is_remembered_by_its_id_and_by_its_body() -> None:
    recent = RecentDeliveries(size=10)
    recent.remember("github:d1", f"body:{body_digest(BODY)}")
    assert recent.seen("github:d2", f"body:{body_digest(BODY)}")  # a replay under a new (unsigned) id
    assert recent.seen("github:d1", f"body:{body_digest(BODY + b' ')}")  # a redelivery
    assert not recent.seen("github:d2", f"body:{body_digest(BODY + b' ')}")
    assert not recent.seen(None, None)


def test_refused_deliveries_are_limited_per_source_and_come_back_with_time() -> None:
    now = [0.0]
    limiter = SourceLimiter(per_minute=60, burst=3, max_sources=2, now=lambda: now[0])
    for _ in range(3):
        assert limiter.retry_after("a") is None
        limiter.charge("a")
    assert limiter.retry_after("a") == pytest.approx(1.0)
    assert limiter.retry_after("b") is None  # another source is not slowed
    now[0] += 1.0
    assert limiter.retry_after("a") is None
    limiter.charge("a")
    assert limiter.retry_after("a") is not None
    unlimited = SourceLimiter(per_minute=0, burst=1)
    for _ in range(10):
        unlimited.charge("a")
    assert unlimited.retry_after("a") is None


@pytest.mark.parametrize(("peer", "source"), [
    ("203.0.113.7", "203.0.113.7"),
    ("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"),  # one host holds a /64
    ("::ffff:203.0.113.7", "203.0.113.7"),
    ("not-an-address", "not-an-address"),
    (None, "unknown"),
])
def test_the_source_of_a_delivery(peer: str | None, source: str) -> None:
    assert source_of(peer) == source


def test_a_source_that_delivered_a_verified_delivery_is_not_throttled_while_it_is_recent() -> None:
    now = [0.0]
    limiter = SourceLimiter(per_minute=60, burst=1, now=lambda: now[0], vouched_seconds=100)
    limiter.vouch("provider")
    for _ in range(10):
        limiter.charge("provider")
        assert limiter.retry_after("provider") is None
    now[0] += 101  # long without a verified delivery: an address like any other again
    limiter.charge("provider")
    assert limiter.retry_after("provider") is not None
