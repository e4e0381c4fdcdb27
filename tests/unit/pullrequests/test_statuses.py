"""Commit statuses of a pull request's head, and when the sticky comment is created, edited or left alone."""

from __future__ import annotations

from burrito_py.gitproviders.client import CommitStatus
from burrito_py.plans.model import parse_plan
from burrito_py.pullrequests.comment import LayerResult, PullRequestResults, marker, render
from burrito_py.pullrequests.statuses import (
    AGGREGATE_CONTEXT,
    CommentUpdate,
    comment_update,
    commit_statuses,
    statuses_to_send,
)

from ..plans.plan_fixtures import fixture

MARK = marker("team-a/infra", 7)


def pr(*layers: LayerResult) -> PullRequestResults:
    return PullRequestResults("team-a/infra", 7, "abc123", layers)


def planned(name: str, plan: str = "update", verdict: str | None = None) -> LayerResult:
    return LayerResult("team-a", name, f"layers/{name}", "planned", parse_plan(fixture(plan)), verdict=verdict)


def test_one_status_per_planned_layer_and_an_aggregate() -> None:
    statuses = commit_statuses(pr(planned("app"), planned("db", "no_changes"),
                                  LayerResult("team-a", "web", "layers/web", "pending", downstream=True)))
    assert statuses == [
        CommitStatus("burrito-py/team-a/app", "success", "Plan: 0 to add, 1 to change, 0 to destroy"),
        CommitStatus("burrito-py/team-a/db", "success", "No changes."),
        CommitStatus(AGGREGATE_CONTEXT, "success", "2 layers planned"),
    ]


def test_pending_then_failure_wins() -> None:
    planning = commit_statuses(pr(planned("app"), LayerResult("team-a", "db", "layers/db", "planning")))
    assert planning[-1] == CommitStatus(AGGREGATE_CONTEXT, "pending", "planning 1/2 layers…")
    broken = commit_statuses(pr(LayerResult("team-a", "db", "layers/db", "failed"),
                                LayerResult("team-a", "net", "layers/net", "planning"),
                                planned("app", "delete", verdict="Denied")))
    assert [s.state for s in broken] == ["failure", "pending", "failure", "failure"]
    assert broken[2].description.endswith("denied by a mandatory plan policy")
    assert broken[-1].description == "2 of 3 layers failed or denied"
    assert all(len(s.description) <= 140 for s in broken)


def test_only_changed_statuses_are_sent_again() -> None:
    wanted = commit_statuses(pr(planned("app")))
    assert statuses_to_send(wanted, {}) == wanted
    assert statuses_to_send(wanted, {s.context: s for s in wanted}) == []


def test_the_comment_is_created_once_then_edited_only_when_it_changes() -> None:
    body = render(pr(planned("app")))
    assert comment_update({"5": "LGTM"}, MARK, body) == CommentUpdate("create")
    assert comment_update({"5": "LGTM", "9": body}, MARK, body) == CommentUpdate("none", "9")
    newer = render(pr(planned("app", "replace")))
    assert comment_update({"5": "LGTM", "9": body}, MARK, newer) == CommentUpdate("edit", "9")
    # A race left two of ours: the oldest is kept up to date, the other left alone.
    assert comment_update({"12": body, "10": body + "x"}, MARK, newer) == CommentUpdate("edit", "10")
    # Another pull request's comment (another marker) is never ours.
    assert comment_update({"3": render(PullRequestResults("team-a/infra", 8, "abc", ()))}, MARK, body) == \
        CommentUpdate("create")
