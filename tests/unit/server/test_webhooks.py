"""Reading, verifying and matching webhook deliveries (pure)."""

from __future__ import annotations

import hashlib
import hmac
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from burrito_py.gitops.urls import repository_identity
from burrito_py.server.webhooks import BadDelivery, RecentDeliveries, read_delivery, signature_valid

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
