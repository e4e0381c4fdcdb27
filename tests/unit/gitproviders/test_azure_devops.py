"""Azure DevOps service hooks (issue 30 item 6): told by their body only after every header-based provider
declined, verified by the hook's basic authentication (constant time; nothing else verifies), and read into the
pull request and comment events."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from burrito_py.gitproviders import registry
from burrito_py.gitproviders.azure_devops import PROVIDER, project_of_url
from burrito_py.gitproviders.base import BadPullRequest, hmac_key
from burrito_py.outbound import OutboundPolicy
from burrito_py.server.webhooks import BadDelivery, read_delivery

REMOTE = "https://contoso@dev.azure.com/contoso/Platform/_git/infra"


def pull_request(event: str = "git.pullrequest.created", status: str = "active", **extra: Any) -> dict[str, Any]:
    resource = {"pullRequestId": 21, "status": status, "title": "Bigger db",
                "repository": {"id": "r-1", "remoteUrl": REMOTE,
                               "sshUrl": "git@ssh.dev.azure.com:v3/contoso/Platform/infra", "webUrl": "https://dev.azure.com/contoso/Platform/_git/infra"},
                "sourceRefName": "refs/heads/topic", "targetRefName": "refs/heads/main",
                "lastMergeSourceCommit": {"commitId": "a" * 40}, "createdBy": {"uniqueName": "ann@contoso.com"},
                "_links": {"web": {"href": "https://dev.azure.com/contoso/Platform/_git/infra/pullrequest/21"}},
                **extra}
    return {"id": "evt-1", "eventType": event, "publisherId": "tfs", "resource": resource,
            "createdDate": "2026-03-01T10:00:00.123Z"}


def basic(password: str, user: str = "hook") -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_a_service_hook_is_told_by_its_body_after_the_headers() -> None:
    body = json.dumps(pull_request()).encode()
    delivery = read_delivery({"content-type": "application/json"}, body)
    assert (delivery.provider, delivery.event, delivery.delivery_id) == ("azure-devops", "git.pullrequest.created",
                                                                       "evt-1")
    # A provider's header wins whatever the body says: this one is GitHub's.
    assert read_delivery({"x-github-event": "pull_request"}, body).provider == "github"
    assert registry.detect_body({}, {**pull_request(), "publisherId": "other"}) is None
    assert registry.detect_body({}, {**pull_request(), "eventType": "build.complete"}) is None
    with pytest.raises(BadDelivery, match="no provider's service hook body"):
        read_delivery({}, b'{"eventType": "git.pullrequest.created"}')
    with pytest.raises(BadDelivery, match="not a webhook delivery"):
        read_delivery({}, b"not json")
    assert "" not in registry.event_headers().split(", ")


def test_basic_authentication_is_the_only_proof() -> None:
    key = hmac_key(b"s3cret")
    assert PROVIDER.signature_valid(basic("s3cret"), b"{}", key)
    assert PROVIDER.signature_valid(basic("s3cret", user="other"), b"{}", key)  # the user name is not checked
    for headers in ({}, basic("wrong"), basic(""), {"authorization": "Bearer s3cret"},
                    {"authorization": "Basic " + base64.b64encode(b"s3cret").decode()}, {"authorization": "Basic %%"}):
        assert not PROVIDER.signature_valid(headers, b"{}", key), headers
    long_secret = "x" * 100  # longer than HMAC's block: the key is its SHA-256, as the published key is
    assert PROVIDER.signature_valid(basic(long_secret), b"{}", hmac_key(long_secret.encode()))


@pytest.mark.parametrize(("event", "status", "action"), [
    ("git.pullrequest.created", "active", "opened"), ("git.pullrequest.updated", "active", "updated"),
    ("git.pullrequest.updated", "completed", "merged"), ("git.pullrequest.updated", "abandoned", "closed"),
    ("git.pullrequest.merged", "completed", "merged")])
def test_pull_request_events(event: str, status: str, action: str) -> None:
    found = PROVIDER.pull_request_event(event, pull_request(event, status))
    assert found is not None and found.action == action
    assert (found.number, found.base, found.head_branch, found.head_sha, found.project, found.updated_at) == (
        21, "main", "topic", "a" * 40, "contoso/Platform/infra", "2026-03-01T10:00:00.123000Z")
    assert not found.from_fork and found.author == "ann@contoso.com"
    assert found.url.endswith("/pullrequest/21")


def test_a_merge_not_completed_and_a_push_change_nothing_and_forks_are_told() -> None:
    assert PROVIDER.pull_request_event("git.pullrequest.merged", pull_request("git.pullrequest.merged")) is None
    assert PROVIDER.pull_request_event("git.push", {"resource": {}}) is None
    fork = PROVIDER.pull_request_event("git.pullrequest.created", pull_request(forkSource={"repository": {"id": "x"}}))
    assert fork is not None and fork.from_fork
    broken = pull_request()
    del broken["resource"]["lastMergeSourceCommit"]
    with pytest.raises(BadPullRequest, match=r"resource\.lastMergeSourceCommit\.commitId"):
        PROVIDER.pull_request_event("git.pullrequest.created", broken)


def test_a_comment_event() -> None:
    pull = pull_request()["resource"]
    payload = {"eventType": "ms.vss-code.git-pullrequest-comment-event", "publisherId": "tfs", "resource": {
        "comment": {"id": 3, "content": "/burrito-py plan", "author": {"uniqueName": "bob@contoso.com"},
                    "publishedDate": "2026-03-01T10:05:00Z", "commentType": "text",
                    "_links": {"threads": {"href": "https://dev.azure.com/contoso/_apis/git/repositories/r-1/"
                                                   "pullRequests/21/threads/7"}}},
        "pullRequest": pull}}
    found = PROVIDER.comment_event(payload["eventType"], payload)
    assert found is not None
    assert (found.number, found.comment_id, found.body, found.sender, found.state, found.head_sha) == (
        21, "7:3", "/burrito-py plan", "bob@contoso.com", "open", "a" * 40)
    assert PROVIDER.repository_urls(payload)[0] == REMOTE
    payload["resource"]["comment"]["commentType"] = "system"
    assert PROVIDER.comment_event(payload["eventType"], payload) is None


def test_refs_projects_and_api() -> None:
    assert PROVIDER.head_ref(21, "topic") == "refs/pull/21/merge"
    assert project_of_url(REMOTE) == "contoso/Platform/infra"
    assert project_of_url("https://tfs.example/DefaultCollection/Platform/_git/infra") == \
        "DefaultCollection/Platform/infra"
    assert PROVIDER.default_api_url("https://dev.azure.com", "dev.azure.com") == "https://dev.azure.com"
    with pytest.raises(ValueError, match="organization/project/repository"):
        PROVIDER.client("https://dev.azure.com", "contoso/infra", 1, lambda: "t", sleep=lambda _: None,
                        outbound=OutboundPolicy())
