"""After a merge, what was reviewed is what applies (pure; issue 30 item 4; docs/architecture.md §5.5, §11.3).

A pull request's plan is reviewed on the pull request (the sticky comment shows it; the merge on the host is the
review act, as in Atlantis). Once it is merged, the layer plans again on its branch as always. That plan is treated
as approved, even on a layer that waits for manual approval, only when it is what was reviewed:

- the pull request controller recorded the merge as *reviewed* for this layer (`status.merged` of the
  TerraformPullRequest, which only the controllers write): not a fork, the merged head is the head its plan was
  made at and succeeded for, and the repository's apply requirements held (pullrequest/decide.py `merged_review`);
- everything the layer reads (its path, trigger paths and what its Terragrunt unit reads, `layer_inputs`) is the
  same at the commit the layer planned as at the reviewed head (`same_tree`, compared in the git mirror);
- the new plan would make the same changes as the reviewed one: plan *sums* are sums of binary plans, which carry
  the refreshed state and timestamps, so two plans of the same change never share one; what is compared is the
  changes digest the controllers computed from each plan's JSON (plans/changes.py: the layer's own review of its
  plan, `status.policy.plan.changesDigest`, and the pull request controller's reading of the reviewed plan, both
  from plan JSON whose sum the run controller recorded);
- the merge is newer than the layer's last apply: a review approves one apply, never later drift corrections.

Anything else (another tree, another plan, a merge not reviewed) leaves the plan waiting for approval as usual,
and says why; the pull request is told either way. Policy gates still hold: the review lifts the wait for a
manual approval, never a gate that wants a person (`gate.auto_allowed` in decide.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from burrito_py.controllers.layer.plan_gate import PlanGate

__all__ = ["APPROVED", "DIFFERS", "DIFFERS_TEXT", "MergedReview", "ReviewedVerdict", "judge_merged"]

APPROVED: Literal["Approved"] = "Approved"
DIFFERS: Literal["Differs"] = "Differs"
DIFFERS_TEXT = "the merged result differs from what was reviewed: waiting for approval"


@dataclass(frozen=True, slots=True)
class MergedReview:
    """One merged pull request that changed the layer, as the layer controller gathers it."""

    pull_request: str  # the TerraformPullRequest's name (the layer's namespace)
    number: int
    head_sha: str  # the merged head
    at: datetime  # when the controllers saw the merge
    changes_digest: str | None  # of the layer's reviewed plan; None: its plan was not reviewed
    reason: str = ""  # why the merge approves nothing ("" when it was reviewed)
    # The layer's inputs at the commit it planned equal those at the merged head; None: not compared (the mirror
    # could not say), which never approves.
    same_tree: bool | None = None
    # The merged head is in the history of the commit the layer planned (a merge commit or a fast-forward): the
    # plan is surely of the merge. A squash or a rebase leaves no such trace: then the plan's date tells.
    contains_head: bool = False


@dataclass(frozen=True, slots=True)
class ReviewedVerdict:
    """What a merged pull request means for the layer's current plan (`status.reviewedPlan`)."""

    pull_request: str
    number: int
    head_sha: str
    plan_sum: str
    result: Literal["Approved", "Differs"]
    message: str

    @property
    def approved(self) -> bool:
        return self.result == APPROVED


def _why_not(review: MergedReview, digest: str | None, plan_commit: str) -> str:
    if review.reason:
        return review.reason
    if review.same_tree is None:
        return f"the layer's files at {plan_commit[:12]} could not be compared with the reviewed head"
    if not review.same_tree:
        return (f"the layer's files at {plan_commit[:12]} differ from the reviewed head {review.head_sha[:12]} "
                "(the base moved under it)")
    if not digest:
        return "the plan's changes are not known (its review could not read it)"
    return "the plan makes other changes than the reviewed plan (the base or the world moved)"


def judge_merged(reviews: Sequence[MergedReview], plan_sum: str | None, plan_commit: str | None,
                 gate: PlanGate | None, last_apply: datetime | None,
                 plan_date: datetime | None = None) -> ReviewedVerdict | None:
    """The verdict of the merged pull requests on the current plan, None when none concerns it: no plan, a plan
    not reviewed by the controllers yet, a drift correction, or no merge since the layer's last apply. A plan that
    differs is said to differ only when it is of the merge (its commit contains the merged head, or it was made
    after the controllers saw the merge): a plan of the branch before the merge reached it says nothing yet."""
    if plan_sum is None or plan_commit is None or gate is None or gate.plan_sum != plan_sum:
        return None
    if gate.drift_state in ("Drifted", "InSync"):
        return None  # a drift correction (or nothing to apply) was never what a pull request reviewed
    since = sorted((r for r in reviews if last_apply is None or r.at > last_apply),
                   key=lambda r: (r.at, r.number), reverse=True)
    if not since:
        return None
    digest = gate.changes_digest
    for review in since:
        if (not review.reason and review.same_tree is True and review.changes_digest and digest
                and review.changes_digest == digest):
            return ReviewedVerdict(review.pull_request, review.number, review.head_sha, plan_sum, APPROVED,
                                   f"the merged result is what pull request #{review.number} reviewed at "
                                   f"{review.head_sha[:12]}: plan {plan_sum} applies without a manual approval")
    of_merge = [r for r in since if r.contains_head or (plan_date is not None and plan_date >= r.at)]
    if not of_merge:
        return None
    newest = of_merge[0]
    return ReviewedVerdict(newest.pull_request, newest.number, newest.head_sha, plan_sum, DIFFERS,
                           f"{DIFFERS_TEXT} (pull request #{newest.number}: "
                           f"{_why_not(newest, digest, plan_commit)})")
