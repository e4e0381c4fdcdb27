"""Commit statuses of a pull request's head and the update of its sticky comment (pure; issue 15 items 4 and 5).

Statuses: one per affected layer, context `burrito-py/<namespace>/<layer>`, with the plan's summary (or why it
failed) as description, and one aggregate `burrito-py` for branch protection: pending while any plan runs,
failure when any failed or a mandatory policy denies a plan, success otherwise. Downstream layers get none:
they are not planned for the pull request.

The comment: found by its hidden marker among the pull request's comments, created once, edited when the
rendered body changed, left alone otherwise (no call at all when nothing changed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from burrito_py.gitproviders.client import CommitStatus
from burrito_py.pullrequests.comment import LayerResult, PullRequestResults

__all__ = [
    "AGGREGATE_CONTEXT",
    "CommentUpdate",
    "comment_update",
    "commit_statuses",
    "statuses_to_send",
]

AGGREGATE_CONTEXT = "burrito-py"
DESCRIPTION_MAX = 140  # GitHub's limit on a status description


def _cut(text: str) -> str:
    return text if len(text) <= DESCRIPTION_MAX else text[: DESCRIPTION_MAX - 1] + "…"


def _layer_status(layer: LayerResult) -> CommitStatus:
    context = f"{AGGREGATE_CONTEXT}/{layer.namespace}/{layer.name}"
    if layer.state == "failed":
        return CommitStatus(context, "failure", "the plan failed: see the pull request's comment")
    if layer.state != "planned" or layer.plan is None:
        return CommitStatus(context, "pending", "planning…")
    if layer.verdict == "Denied":
        return CommitStatus(context, "failure", _cut(f"{layer.plan.summary()}; denied by a mandatory plan policy"))
    return CommitStatus(context, "success", _cut(layer.plan.summary()))


def commit_statuses(results: PullRequestResults) -> list[CommitStatus]:
    """Every status the head commit should carry: one per planned layer, then the aggregate."""
    if results.notice is not None:
        # A fork's head not planned says why on the head (never silent, §11.3), and never claims a success.
        return [CommitStatus(AGGREGATE_CONTEXT, "pending", _cut(results.notice_short or results.notice))]
    own = [_layer_status(layer) for layer in results.layers if not layer.downstream]
    failed = sum(1 for s in own if s.state == "failure")
    pending = sum(1 for s in own if s.state == "pending")
    if failed:
        aggregate = CommitStatus(AGGREGATE_CONTEXT, "failure", f"{failed} of {len(own)} layers failed or denied")
    elif pending:
        aggregate = CommitStatus(AGGREGATE_CONTEXT, "pending", f"planning {len(own) - pending}/{len(own)} layers…")
    else:
        aggregate = CommitStatus(AGGREGATE_CONTEXT, "success", f"{len(own)} layers planned")
    return [*own, aggregate]


def statuses_to_send(wanted: Sequence[CommitStatus], sent: Mapping[str, CommitStatus]) -> list[CommitStatus]:
    """Only the statuses that differ from what was last sent for this head (a re-render sends nothing new)."""
    return [status for status in wanted if sent.get(status.context) != status]


@dataclass(frozen=True, slots=True)
class CommentUpdate:
    action: Literal["create", "edit", "none"]
    comment_id: str | None = None


def comment_update(comments: Mapping[str, str], marker: str, body: str) -> CommentUpdate:
    """`comments`: the pull request's comments (id → body), as the provider lists them. Ours is the one whose
    first line is the marker (the oldest when a race left two: the others are left alone)."""
    ours = sorted((cid for cid, text in comments.items() if text.split("\n", 1)[0] == marker), key=_numeric)
    if not ours:
        return CommentUpdate("create")
    if comments[ours[0]] == body:
        return CommentUpdate("none", ours[0])
    return CommentUpdate("edit", ours[0])


def _numeric(comment_id: str) -> tuple[int, str]:
    return (int(comment_id), comment_id) if comment_id.isdigit() else (1 << 62, comment_id)
