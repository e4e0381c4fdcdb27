"""Bitbucket Cloud (issue 30 item 6): its webhooks told apart from Data Center's, verified by their `X-Hub-Signature`,
read into pull request and comment events, forks told by the source repository; head refs and the API's names.

The attack tests mount what an outsider can send: a delivery with no signature, one signed with another secret, a
SHA-1 or unprefixed signature, a body changed after signing; each is refused by the server's own verification
(`server/webhooks.py`), and a fork dressed up with the destination's name but another uuid is still a fork.
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
from burrito_py.gitproviders.bitbucket import PROVIDER, from_fork, status_key
from burrito_py.gitproviders.delivery import comment_event, pull_request_event
from burrito_py.outbound import OutboundPolicy
from burrito_py.server.webhook_keys import hmac_key
from burrito_py.server.webhooks import read_delivery, signature_valid, verified_by

SECRET = b"bitbucket-webhook-secret"
REPO = {"full_name": "team/infra", "uuid": "{11111111-1111-1111-1111-111111111111}", "type": "repository",
        "links": {"html": {"href": "https://bitbucket.org/team/infra"}}}
FORK = {"full_name": "outsider/infra", "uuid": "{22222222-2222-2222-2222-222222222222}", "type": "repository"}
ALICE = {"account_id": "557058:alice", "uuid": "{a}", "nickname": "alice", "display_name": "Alice"}
BOB = {"account_id": "557058:bob", "uuid": "{b}", "nickname": "alice", "display_name": "Bob"}  # same nickname


def pull(source_repo: dict[str, Any] | None = REPO, state: str = "OPEN") -> dict[str, Any]:
    source: dict[str, Any] = {"branch": {"name": "topic"}, "commit": {"hash": "0123456789ab"}}
    if source_repo is not None:
        source["repository"] = source_repo
    return {"id": 7, "title": "Add a bucket", "state": state, "author": ALICE,
            "source": source,
            "destination": {"branch": {"name": "main"}, "commit": {"hash": "fedcba987654"}, "repository": REPO},
            "links": {"html": {"href": "https://bitbucket.org/team/infra/pull-requests/7"}},
            "updated_on": "2026-03-01T10:20:30.123456+00:00", "participants": []}


def payload(**changes: Any) -> dict[str, Any]:
    return {"actor": BOB, "repository": REPO, "pullrequest": pull(), **changes}


def headers(body: bytes, event: str, secret: bytes = SECRET) -> dict[str, str]:
    return {"x-event-key": event, "x-hook-uuid": "hook-1", "x-request-uuid": "req-1",
            "x-hub-signature": "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest(),
            "user-agent": "Bitbucket-Webhooks/2.0"}


def test_a_signed_pull_request_delivery_is_detected_verified_and_read() -> None:
    body = json.dumps(payload()).encode()
    sent = headers(body, "pullrequest:created")
    delivery = read_delivery(sent, body)
    assert (delivery.provider, delivery.event, delivery.delivery_id) == ("bitbucket", "pullrequest:created", "req-1")
    assert delivery.identities() == {("bitbucket.org", "/team/infra")}
    assert signature_valid(delivery, sent, body, hmac_key(SECRET))
    assert pull_request_event(delivery) == PullRequestEvent(
        "bitbucket", "opened", 7, "main", "topic", "0123456789ab", "Add a bucket",
        "https://bitbucket.org/team/infra/pull-requests/7", "team/infra", "2026-03-01T10:20:30.123456Z",
        from_fork=False, author="557058:alice", sender="557058:bob")
    assert comment_event(delivery) is None and not delivery.is_push


@pytest.mark.parametrize(("event", "action"), [("pullrequest:updated", "updated"), ("pullrequest:fulfilled", "merged"),
                                               ("pullrequest:rejected", "closed")])
def test_each_pull_request_event_is_its_action(event: str, action: str) -> None:
    read = PROVIDER.pull_request_event(event, payload())
    assert read is not None and read.action == action
    assert PROVIDER.pull_request_event("pullrequest:approved", payload()) is None  # changes no plan


def test_a_payload_missing_a_field_names_it() -> None:
    broken = payload()
    del broken["pullrequest"]["source"]["commit"]
    with pytest.raises(BadPullRequest, match=r"pullrequest\.source\.commit\.hash: missing or not a str"):
        PROVIDER.pull_request_event("pullrequest:created", broken)


def test_a_comment_is_read_with_its_account_and_head() -> None:
    comment = {"id": 99, "content": {"raw": "/burrito-py plan"}, "user": BOB,
               "created_on": "2026-03-01T10:21:00.000001+00:00"}
    body = json.dumps(payload(comment=comment)).encode()
    delivery = read_delivery(headers(body, "pullrequest:comment_created"), body)
    assert comment_event(delivery) == CommentEvent("bitbucket", 7, "99", "/burrito-py plan", "557058:bob",
                                                   "team/infra", "2026-03-01T10:21:00.000001Z", None, "open",
                                                   "0123456789ab")
    assert pull_request_event(delivery) is None
    merged = payload(comment=comment, pullrequest=pull(state="MERGED"))
    found = PROVIDER.comment_event("pullrequest:comment_created", merged)
    assert found is not None and found.state == "merged"
    assert PROVIDER.comment_event("pullrequest:comment_updated", merged) is None  # an edit is no command


# -- attacks: forged, absent or wrong signatures -----------------------------------------------------------------
def forgeries(body: bytes) -> dict[str, dict[str, str]]:
    good = headers(body, "pullrequest:created")
    digest = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
    return {
        "absent": {k: v for k, v in good.items() if k != "x-hub-signature"},
        "empty": {**good, "x-hub-signature": ""},
        "another secret": headers(body, "pullrequest:created", b"attacker-secret"),
        "zeros": {**good, "x-hub-signature": "sha256=" + "0" * 64},
        "no prefix": {**good, "x-hub-signature": digest},  # the right digest, not in Bitbucket's form
        "sha1": {**good, "x-hub-signature": "sha1=" + hmac.new(SECRET, body, hashlib.sha1).hexdigest()},
        "the secret itself": {**good, "x-hub-signature": SECRET.decode()},
    }


@pytest.mark.parametrize("kind", ["absent", "empty", "another secret", "zeros", "no prefix", "sha1",
                                  "the secret itself"])
def test_a_forged_or_unsigned_delivery_is_refused(kind: str) -> None:
    body = json.dumps(payload()).encode()
    sent = forgeries(body)[kind]
    delivery = read_delivery(sent, body)
    assert delivery.provider == "bitbucket"
    assert not signature_valid(delivery, sent, body, hmac_key(SECRET))
    assert verified_by(delivery, sent, body, [hmac_key(SECRET), None]) == [False, False]


def test_a_body_changed_after_signing_is_refused() -> None:
    body = json.dumps(payload()).encode()
    sent = headers(body, "pullrequest:created")
    forked = payload(pullrequest=pull(FORK))
    tampered = json.dumps(forked).encode()
    assert not signature_valid(read_delivery(sent, tampered), sent, tampered, hmac_key(SECRET))
    long_secret = b"s" * 100  # longer than a block: the published key is its SHA-256 (RFC 2104), still verifies
    signed = headers(body, "pullrequest:created", long_secret)
    assert signature_valid(read_delivery(signed, body), signed, body, hmac_key(long_secret))


# -- attacks: a fork is a fork ------------------------------------------------------------------------------------
def test_a_fork_is_a_fork_however_it_names_itself() -> None:
    assert from_fork(pull()) is False
    assert from_fork(pull(FORK)) is True
    assert from_fork(pull(None)) is True  # a deleted fork, or a payload that does not say
    # The fork takes the destination's full name (another workspace cannot, but a payload may say anything): the
    # uuid decides.
    assert from_fork(pull({**FORK, "full_name": "team/infra"})) is True
    assert from_fork(pull({"full_name": "team/infra"})) is False  # no uuids at all: the full names decide
    assert from_fork(pull({"uuid": ""})) is True
    event = PROVIDER.pull_request_event("pullrequest:created", payload(pullrequest=pull(FORK)))
    assert event is not None and event.from_fork


def test_data_center_deliveries_are_not_clouds() -> None:
    """The same event header without `X-Hook-UUID`: not Bitbucket Cloud's."""
    assert PROVIDER.detect({"x-event-key": "pr:opened", "x-request-id": "r"}) is None
    assert PROVIDER.detect({"x-event-key": "pullrequest:created", "x-hook-uuid": "h"}) == ("pullrequest:created",
                                                                                           None)


def test_heads_statuses_and_api() -> None:
    assert PROVIDER.head_ref(7, "feature/x") == "refs/heads/feature/x"
    with pytest.raises(ValueError, match="bitbucket pull request #7: no source branch"):
        PROVIDER.head_ref(7, "")
    assert PROVIDER.default_api_url("https://bitbucket.org", "bitbucket.org") == "https://api.bitbucket.org/2.0"
    assert status_key("burrito-py") == "burrito-py"
    long = "burrito-py/team-a/a-rather-long-layer-name/plan"
    assert len(status_key(long)) == 40 and status_key(long) == status_key(long) != status_key(long + "x")
    with pytest.raises(ValueError, match="bitbucket project 'team' is not workspace/repository"):
        PROVIDER.client("https://api.bitbucket.org/2.0", "team", 7, lambda: "t", sleep=lambda _: None,
                        outbound=OutboundPolicy())
    assert registry.provider_named("bitbucket") is PROVIDER


def test_nicknames_are_not_logins() -> None:
    """Bob shares Alice's nickname: he is told apart by his account id."""
    first = PROVIDER.pull_request_event("pullrequest:created", payload())
    assert first is not None and first.author == "557058:alice" and first.sender == "557058:bob"
    anonymous = copy.deepcopy(payload())
    anonymous["actor"] = {"nickname": "alice"}
    event = PROVIDER.pull_request_event("pullrequest:created", anonymous)
    assert event is not None and event.sender == ""
