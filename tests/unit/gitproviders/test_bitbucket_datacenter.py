"""Bitbucket Data Center (issue 30 item 6): its webhooks told apart from Bitbucket Cloud's, verified by their
`X-Hub-Signature`, read into pull request and comment events (times in epoch milliseconds), forks told by the
source repository; its head ref and API names.

The attack tests mount what an outsider can send: no signature, another secret, a SHA-1 or bare digest, a body
changed after signing, each refused by the server's own verification; a fork that names itself like the target
repository but is another repository is still a fork.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
from typing import Any

import pytest

from burrito_py.gitproviders import registry
from burrito_py.gitproviders.base import BadPullRequest, CommentEvent, PullRequestEvent
from burrito_py.gitproviders.bitbucket_datacenter import PROVIDER, from_fork
from burrito_py.gitproviders.delivery import comment_event, pull_request_event
from burrito_py.outbound import OutboundPolicy
from burrito_py.server.webhook_keys import hmac_key
from burrito_py.server.webhooks import read_delivery, signature_valid, verified_by

SECRET = b"datacenter-webhook-secret"
TARGET = {"slug": "infra", "id": 84, "name": "infra", "project": {"key": "TEAM", "id": 1},
          "links": {"clone": [{"href": "ssh://git@bitbucket.example:7999/team/infra.git", "name": "ssh"},
                              {"href": "https://bitbucket.example/scm/team/infra.git", "name": "http"}],
                    "self": [{"href": "https://bitbucket.example/projects/TEAM/repos/infra/browse"}]}}
FORK = {"slug": "infra", "id": 99, "name": "infra", "project": {"key": "~OUTSIDER", "id": 7}}
HEAD = "ef8755f06ee4b28c96a847a95cb8ec8ed6ddd1ca"


def pull(source: dict[str, Any] | None = TARGET, state: str = "OPEN") -> dict[str, Any]:
    from_ref: dict[str, Any] = {"id": "refs/heads/topic", "displayId": "topic", "latestCommit": HEAD}
    if source is not None:
        from_ref["repository"] = source
    return copy.deepcopy({
            "id": 7, "version": 1, "title": "Add a bucket", "state": state, "updatedDate": 1772360430123,
            "createdDate": 1772360000000, "fromRef": from_ref,
            "toRef": {"id": "refs/heads/main", "displayId": "main", "latestCommit": "1" * 40, "repository": TARGET},
            "author": {"user": {"name": "alice", "id": 3}, "role": "AUTHOR", "approved": False},
            "links": {"self": [{"href": "https://bitbucket.example/projects/TEAM/repos/infra/pull-requests/7"}]}})


def payload(**changes: Any) -> dict[str, Any]:
    return {"eventKey": "pr:opened", "date": "2026-03-01T10:20:30+1000", "actor": {"name": "bob", "id": 4},
            "pullRequest": pull(), **changes}


def headers(body: bytes, event: str, secret: bytes = SECRET) -> dict[str, str]:
    return {"x-event-key": event, "x-request-id": "req-1",
            "x-hub-signature": "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()}


def test_a_signed_pull_request_delivery_is_detected_verified_and_read() -> None:
    body = json.dumps(payload()).encode()
    sent = headers(body, "pr:opened")
    delivery = read_delivery(sent, body)
    assert (delivery.provider, delivery.event, delivery.delivery_id) == ("bitbucket-datacenter", "pr:opened", "req-1")
    assert delivery.identities() >= {("bitbucket.example", "/team/infra"), ("bitbucket.example", "/scm/team/infra")}
    assert signature_valid(delivery, sent, body, hmac_key(SECRET))
    assert pull_request_event(delivery) == PullRequestEvent(
        "bitbucket-datacenter", "opened", 7, "main", "topic", HEAD, "Add a bucket",
        "https://bitbucket.example/projects/TEAM/repos/infra/pull-requests/7", "TEAM/infra",
        "2026-03-01T10:20:30.123000Z", from_fork=False, author="alice", sender="bob")
    assert comment_event(delivery) is None and not delivery.is_push


@pytest.mark.parametrize(("event", "action"), [("pr:from_ref_updated", "updated"), ("pr:merged", "merged"),
                                               ("pr:declined", "closed"), ("pr:deleted", "closed")])
def test_each_pull_request_event_is_its_action(event: str, action: str) -> None:
    read = PROVIDER.pull_request_event(event, payload())
    assert read is not None and read.action == action
    assert PROVIDER.pull_request_event("pr:modified", payload()) is None
    assert PROVIDER.pull_request_event("pr:reviewer:approved", payload()) is None


def test_a_payload_missing_a_field_names_it() -> None:
    broken = payload()
    broken["pullRequest"]["updatedDate"] = "yesterday"
    with pytest.raises(BadPullRequest, match=r"pullRequest\.updatedDate: missing or not a int"):
        PROVIDER.pull_request_event("pr:opened", broken)
    broken["pullRequest"]["updatedDate"] = 10 ** 20
    with pytest.raises(BadPullRequest, match="is not a time in milliseconds"):
        PROVIDER.pull_request_event("pr:opened", broken)
    del broken["pullRequest"]["toRef"]["repository"]["project"]
    with pytest.raises(BadPullRequest, match=r"pullRequest\.toRef\.repository\.project\.key"):
        PROVIDER.comment_event("pr:comment:added", {**broken, "comment": {"id": 1, "text": "x"}})


def test_a_comment_is_read_with_its_author_and_head() -> None:
    comment = {"id": 99, "version": 0, "text": "/burrito-py plan", "author": {"name": "bob", "id": 4},
               "createdDate": 1772360460000}
    body = json.dumps(payload(eventKey="pr:comment:added", comment=comment)).encode()
    delivery = read_delivery(headers(body, "pr:comment:added"), body)
    assert comment_event(delivery) == CommentEvent("bitbucket-datacenter", 7, "99", "/burrito-py plan", "bob",
                                                   "TEAM/infra", "2026-03-01T10:21:00.000000Z", 4, "open", HEAD)
    declined = PROVIDER.comment_event("pr:comment:added", payload(comment=comment, pullRequest=pull(state="DECLINED")))
    assert declined is not None and declined.state == "closed"
    assert PROVIDER.comment_event("pr:comment:edited", payload(comment=comment)) is None


# -- attacks -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["absent", "empty", "another secret", "zeros", "no prefix", "sha1", "the secret"])
def test_a_forged_or_unsigned_delivery_is_refused(kind: str) -> None:
    body = json.dumps(payload()).encode()
    good = headers(body, "pr:opened")
    digest = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    sent = {
        "absent": {k: v for k, v in good.items() if k != "x-hub-signature"},
        "empty": {**good, "x-hub-signature": ""},
        "another secret": headers(body, "pr:opened", b"attacker-secret"),
        "zeros": {**good, "x-hub-signature": "sha256=" + "0" * 64},
        "no prefix": {**good, "x-hub-signature": digest},
        "sha1": {**good, "x-hub-signature": "sha1=" + hmac.new(SECRET, body, hashlib.sha1).hexdigest()},
        "the secret": {**good, "x-hub-signature": SECRET.decode()},
    }[kind]
    delivery = read_delivery(sent, body)
    assert delivery.provider == "bitbucket-datacenter"
    assert not signature_valid(delivery, sent, body, hmac_key(SECRET))
    assert verified_by(delivery, sent, body, [hmac_key(SECRET), None]) == [False, False]


def test_a_body_changed_after_signing_is_refused() -> None:
    body = json.dumps(payload()).encode()
    sent = headers(body, "pr:opened")
    tampered = json.dumps(payload(pullRequest=pull(FORK))).encode()
    assert not signature_valid(read_delivery(sent, tampered), sent, tampered, hmac_key(SECRET))


def test_a_fork_is_a_fork_however_it_names_itself() -> None:
    assert from_fork(pull()) is False
    assert from_fork(pull(FORK)) is True
    assert from_fork(pull(None)) is True
    # Another repository (id) that names the target's project and slug: the id decides.
    assert from_fork(pull({**FORK, "project": {"key": "TEAM"}})) is True
    assert from_fork(pull({"slug": "infra", "project": {"key": "TEAM"}})) is True  # target has an id, source none
    no_ids = {k: v for k, v in TARGET.items() if k != "id"}
    same = pull(no_ids)
    same["toRef"]["repository"] = no_ids
    assert from_fork(same) is False  # no ids at all: project key and slug decide
    event = PROVIDER.pull_request_event("pr:opened", payload(pullRequest=pull(FORK)))
    assert event is not None and event.from_fork


def test_cloud_deliveries_are_not_data_centers() -> None:
    assert PROVIDER.detect({"x-event-key": "pullrequest:created", "x-hook-uuid": "h"}) is None
    body = b"{}"
    cloud = read_delivery({"x-event-key": "pullrequest:created", "x-hook-uuid": "h"}, body)
    assert cloud.provider == "bitbucket"
    assert read_delivery({"x-event-key": "pr:opened", "x-request-id": "r"}, body).provider == "bitbucket-datacenter"


def test_heads_and_api() -> None:
    assert PROVIDER.head_ref(7, "topic") == "refs/pull-requests/7/from"
    assert PROVIDER.default_api_url("https://bitbucket.example:8443", "bitbucket.example") == (
        "https://bitbucket.example:8443/rest")
    with pytest.raises(ValueError, match="bitbucket-datacenter project 'TEAM' is not PROJECT/repository"):
        PROVIDER.client("https://bitbucket.example/rest", "TEAM", 7, lambda: "t", sleep=lambda _: None,
                        outbound=OutboundPolicy())
    assert registry.provider_named("bitbucket-datacenter") is PROVIDER
