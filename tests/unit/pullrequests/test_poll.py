"""Pull requests without webhooks (docs/architecture.md §11.3): one poll's decision, pure. What the host lists is
written exactly as its webhook event would be (`pull_request_write`, the server's own), closes only from a
complete listing, nothing when nothing a webhook would change changed; and a poll of what it wrote writes nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.gitproviders.base import PollLimits, PullRequestEvent
from burrito_py.gitproviders.delivery import Delivery, pull_request_event
from burrito_py.gitproviders.github import GitHubPulls
from burrito_py.gitproviders.gitlab import PROVIDER as GITLAB
from burrito_py.gitproviders.gitlab import GitLabMergeRequests
from burrito_py.pullrequests.events import pull_request_write
from burrito_py.pullrequests.poll import (
    MIN_INTERVAL,
    HostSnapshot,
    decide_poll,
    next_poll,
    poll_interval,
    recorded_of,
    to_look_up,
)

SHA = "9f2c1e0d8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
OTHER = "1" * 40
T0 = "2030-01-01T00:00:01.000000Z"
T1 = "2030-01-01T00:00:02.000000Z"


def opened(number: int, head: str = SHA, at: str = T1, title: str = "A change") -> PullRequestEvent:
    return PullRequestEvent("github", "opened", number, "main", "feature", head, title, f"https://x/pr/{number}",
                            "team/infra", at, from_fork=False, author="author")


def spec_of(event: PullRequestEvent) -> dict[str, Any]:
    return pull_request_write(event, "infra", {"enabled": True}).spec


def decide(recorded: Mapping[int, Mapping[str, Any]], host: HostSnapshot) -> Any:
    return decide_poll("infra", {"enabled": True}, "github", recorded, host)


def test_a_new_pull_request_is_written_as_its_webhook_writes_it() -> None:
    event = opened(7)
    decision = decide({}, HostSnapshot((event,), True))
    assert decision.writes == (pull_request_write(event, "infra", {"enabled": True}),)
    assert decision.writes[0].create and decision.writes[0].name == "infra-pr-7"
    assert decision.opened == (7,)


def test_the_listing_is_read_as_the_webhook_reads_its_pull_request() -> None:
    """GitHub's `pulls` listing carries the webhook's `pull_request` object: the poll's event is the webhook's."""
    pull = {"number": 7, "state": "open", "title": "A change", "html_url": "https://x/pr/7",
            "updated_at": "2030-01-01T00:00:02Z", "user": {"login": "author"},
            "head": {"ref": "feature", "sha": SHA, "repo": {"id": 1, "full_name": "team/infra"}},
            "base": {"ref": "main", "sha": OTHER, "repo": {"id": 1, "full_name": "team/infra"}}}
    webhook = pull_request_event(Delivery("github", "pull_request", "d", {
        "action": "opened", "pull_request": pull, "repository": {"full_name": "team/infra"},
        "sender": {"login": "author"}}))
    polled = GitHubPulls("github", None, "team", "infra", "team/infra", PollLimits())._event(pull, "opened")  # type: ignore[arg-type]
    assert polled == webhook


def test_a_merge_request_is_read_as_its_hook_reads_it() -> None:
    hook = GITLAB.pull_request_event("Merge Request Hook", {
        "object_attributes": {"action": "open", "iid": 7, "target_branch": "main", "source_branch": "feature",
                              "last_commit": {"id": SHA}, "title": "A change", "url": "https://x/mr/7",
                              "updated_at": "2030-01-01T00:00:02Z", "source_project_id": 1, "target_project_id": 1},
        "project": {"path_with_namespace": "team/infra"}, "user": {"username": "author"}})
    mr = {"iid": 7, "state": "opened", "target_branch": "main", "source_branch": "feature", "sha": SHA,
          "title": "A change", "web_url": "https://x/mr/7", "updated_at": "2030-01-01T00:00:02.000Z",
          "source_project_id": 1, "target_project_id": 1, "author": {"username": "author"}}
    lister = GitLabMergeRequests(GITLAB, None, "team/infra", PollLimits())  # type: ignore[arg-type]
    assert lister._event(mr) == hook
    assert lister._event({**mr, "state": "merged"}).action == "merged"
    assert lister._event({**mr, "state": "closed"}).action == "closed"
    assert lister._event({**mr, "source_project_id": 2}).from_fork


def test_nothing_is_written_when_nothing_a_webhook_would_change_changed() -> None:
    recorded = {7: spec_of(opened(7, at=T0))}
    assert decide(recorded, HostSnapshot((opened(7, title="Renamed"),), True)).writes == ()


def test_a_new_head_is_written() -> None:
    recorded = {7: spec_of(opened(7, at=T0))}
    decision = decide(recorded, HostSnapshot((opened(7, OTHER),), True))
    assert [w.spec["headSha"] for w in decision.writes] == [OTHER]
    assert decision.updated == (7,)


def test_an_event_older_than_the_recorded_one_writes_nothing() -> None:
    recorded = {7: spec_of(opened(7, OTHER, at=T1))}
    assert decide(recorded, HostSnapshot((opened(7, SHA, at=T0),), True)).writes == ()


def test_a_reopened_pull_request_is_opened_again() -> None:
    recorded = {7: {**spec_of(opened(7, at=T0)), "state": "closed"}}
    decision = decide(recorded, HostSnapshot((opened(7),), True))
    assert [w.spec["state"] for w in decision.writes] == ["open"] and decision.opened == (7,)


def test_one_gone_from_the_listing_is_closed_or_merged_as_the_host_says() -> None:
    recorded = {7: spec_of(opened(7, at=T0)), 8: spec_of(opened(8, at=T0))}
    assert to_look_up(recorded, [], True) == (7, 8)
    merged = dataclasses.replace(opened(7), action="merged")
    decision = decide(recorded, HostSnapshot((), True, {7: merged, 8: None}))
    assert [(w.name, w.spec["state"], w.create) for w in decision.writes] == [
        ("infra-pr-7", "merged", False), ("infra-pr-8", "closed", False)]
    assert decision.closed == (7, 8)
    # A pull request the host no longer knows is closed as recorded, with no time (it replaces nothing newer).
    assert decision.writes[1].spec["headSha"] == SHA and "updatedAt" not in decision.writes[1].spec


def test_an_incomplete_listing_closes_nothing() -> None:
    recorded = {7: spec_of(opened(7, at=T0))}
    assert to_look_up(recorded, [], False) == ()
    assert decide(recorded, HostSnapshot((), False)).writes == ()


def test_lookups_are_bounded() -> None:
    recorded = {n: spec_of(opened(n, at=T0)) for n in range(1, 50)}
    assert to_look_up(recorded, [], True, limit=20) == tuple(range(1, 21))


def test_recorded_pull_requests_are_the_repository_s_of_the_provider() -> None:
    bodies = [{"spec": {**spec_of(opened(1)), "repository": "infra"}}, {"spec": {**spec_of(opened(2)),
                                                                                 "repository": "other"}},
              {"spec": {**spec_of(opened(3)), "provider": "gitlab"}}]
    assert list(recorded_of(bodies, "infra", "github")) == [1]


def test_interval_and_due_time() -> None:
    assert poll_interval({"interval": "2m"}) == timedelta(minutes=2)
    assert poll_interval({"interval": "1s"}) == MIN_INTERVAL
    assert poll_interval({}) == timedelta(minutes=1)
    now = datetime(2030, 1, 1, tzinfo=UTC)
    assert next_poll(None, timedelta(minutes=1), None, now) == 0.0
    assert next_poll(now - timedelta(seconds=20), timedelta(minutes=1), None, now) == 40.0
    assert next_poll(now - timedelta(minutes=5), timedelta(minutes=1), now + timedelta(seconds=90), now) == 90.0


def _apply(recorded: dict[int, dict[str, Any]], decision: Any) -> dict[int, dict[str, Any]]:
    """What the writer leaves: a create or a merge-patch of the spec (an absent one is not created on a close)."""
    after = {n: dict(s) for n, s in recorded.items()}
    for write in decision.writes:
        number = int(write.spec["number"])
        if number in after or write.create:
            after[number] = {**after.get(number, {}), **{k: v for k, v in write.spec.items() if v is not None}}
    return after


HEADS = st.sampled_from([SHA, OTHER, "2" * 40])
TIMES = st.sampled_from([T0, T1, "2030-01-01T00:00:03.000000Z"])
STATES = st.sampled_from(["open", "closed", "merged"])


@st.composite
def worlds(draw: st.DrawFn) -> tuple[dict[int, dict[str, Any]], HostSnapshot]:
    numbers = draw(st.sets(st.integers(1, 8), max_size=6))
    recorded = {n: {**spec_of(opened(n, draw(HEADS), draw(TIMES))), "state": draw(STATES)}
                for n in draw(st.sets(st.integers(1, 8), max_size=6))}
    listed = tuple(opened(n, draw(HEADS), draw(TIMES)) for n in sorted(numbers) if draw(st.booleans()))
    complete = draw(st.booleans())
    actions = st.sampled_from(["closed", "merged", "opened"])
    lookups = {n: draw(st.one_of(st.none(), st.builds(
        lambda action, head, at, n=n: dataclasses.replace(opened(n, head, at), action=action), actions, HEADS,
        TIMES))) for n in to_look_up(recorded, listed, complete)}
    return recorded, HostSnapshot(listed, complete, lookups)


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_properties_of_one_poll(world: tuple[dict[int, dict[str, Any]], HostSnapshot]) -> None:
    recorded, host = world
    decision = decide(recorded, host)
    numbers = [int(w.spec["number"]) for w in decision.writes]
    assert len(numbers) == len(set(numbers))  # one write per pull request
    events = {e.number: e for e in (*host.open, *(e for e in host.looked_up.values() if e is not None))}
    for write in decision.writes:
        number = int(write.spec["number"])
        if number in events:  # the one way an event becomes an object
            assert write == pull_request_write(events[number], "infra", {"enabled": True})
        else:  # gone from the host: closed as recorded
            assert write.spec["state"] == "closed" and not write.create
        if write.spec["state"] != "open":
            assert not write.create and number in recorded  # a close never creates
    if not host.complete:
        assert host.looked_up == {} and all(w.spec["state"] == "open" for w in decision.writes)
    # What it wrote is what the next poll of the same host finds: it writes nothing again.
    after = _apply(recorded, decision)
    assert decide(after, HostSnapshot(host.open, host.complete, {n: e for n, e in host.looked_up.items()})).writes == ()
