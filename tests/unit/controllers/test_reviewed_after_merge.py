"""Issue 30 item 4: after a merge, what was reviewed is what applies (pure decisions).

The layer side (`controllers/layer/reviewed.py`, through `decide_layer`): a plan on the branch is treated as approved
only when a merge recorded as reviewed names the layer, the layer's files at the planned commit are the merged
head's, its changes digest is the reviewed plan's, and the merge is newer than the last apply; policy gates still
hold. The pull request side (`merged_review`, `decide_pull_request`): what a merge reviewed is never a fork's, a head
pushed after its plan, a close, or a merge whose `approved` requirement failed.

The attack tests mount each case the way it would happen (the pull request's recorded facts as the server and the
controllers would hold them) and check that no apply comes out of it; each fails with its check removed."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.decide import LayerDecision, LayerSnapshot, decide_layer
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.reviewed import DIFFERS_TEXT, MergedReview, judge_merged
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.controllers.pullrequest.decide import (
    PlanOutcome,
    PullRequestSnapshot,
    RunFacts,
    decide_pull_request,
    merged_review,
    run_name,
)
from burrito_py.gitproviders.client import ReviewFacts
from burrito_py.plans.changes import changes_digest
from burrito_py.plans.model import parse_plan
from burrito_py.timeutil import format_time

from ..plans.plan_fixtures import fixture

NOW = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
MERGED_AT = NOW - timedelta(minutes=2)
HEAD, MERGE, OLD = "a" * 40, "m" * 40, "b" * 40
DIGEST, OTHER = "sha256:" + "d" * 64, "sha256:" + "e" * 64
SUM = "sha256:" + "1" * 64
NS = "team-a"


# -- the layer's decision ----------------------------------------------------------------------------------------

def review(**changes: Any) -> MergedReview:
    base = MergedReview("infra-pr-7", 7, HEAD, MERGED_AT, DIGEST, "", True, True)
    return replace(base, **changes)


def layer(*merged: MergedReview, digest: str | None = DIGEST, auto: bool = False, verdict: str = "Allowed",
          drift: str = "CodeChange", last_apply: datetime | None = None, gate_sum: str = SUM,
          plan_date: datetime = NOW - timedelta(minutes=1)) -> LayerSnapshot:
    """A manual layer whose plan `SUM` (made at the merge commit, its relevant commit) waits to be applied."""
    a = {ann.BRANCH_COMMIT: MERGE, ann.RELEVANT_COMMIT: MERGE, ann.PLAN_SUM: SUM, ann.PLAN_COMMIT: MERGE,
         ann.PLAN_DATE: format_time(plan_date), ann.PLAN_RUN: "app-plan-2/1",
         ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy"}
    if last_apply is not None:
        a[ann.APPLY_DATE] = format_time(last_apply)
        a[ann.APPLY_SUM] = "sha256:" + "0" * 64
    plan_run = RunView("app-plan-2", "plan", "Succeeded", MERGE, relevant_commit=MERGE)
    return LayerSnapshot(a, plan_run, plan_run, None, auto, timedelta(hours=1), None, plan_run=plan_run,
                         layer_name="app", gate=PlanGate(gate_sum, verdict=verdict, drift_state=drift,
                                                         changes_digest=digest), merged=merged)


def applies(d: LayerDecision) -> bool:
    return d.create_run is not None and d.create_run.action == "apply"


def test_the_reviewed_plan_applies_without_an_approval() -> None:
    d = decide_layer(layer(review()), NOW)
    assert applies(d) and d.pending_plan is None
    assert d.create_run is not None and d.create_run.plan_sum == SUM
    approval = next(c for c in d.conditions if c.type == "IsPlanApproved")
    assert approval.status and approval.reason == "ReviewedInPullRequest" and "#7" in approval.message
    assert d.reviewed is not None and d.reviewed.result == "Approved" and d.reviewed.head_sha == HEAD


def test_without_a_merge_a_manual_layer_waits_as_before() -> None:
    d = decide_layer(layer(), NOW)
    assert not applies(d) and d.pending_plan is not None and d.pending_plan.reason == "" and d.reviewed is None


def test_a_moved_base_or_another_plan_waits_and_says_why() -> None:
    for merged, why in ((review(same_tree=False), "differ from the reviewed head"),
                        (review(changes_digest=OTHER), "other changes than the reviewed plan"),
                        (review(same_tree=None), "could not be compared")):
        d = decide_layer(layer(merged), NOW)
        assert not applies(d) and d.state == "ApplyNeeded"
        assert d.pending_plan is not None and DIFFERS_TEXT in d.pending_plan.reason and why in d.pending_plan.reason
        assert d.reviewed is not None and d.reviewed.result == "Differs"
        approval = next(c for c in d.conditions if c.type == "IsPlanApproved")
        assert not approval.status and approval.reason == "WaitingForApproval"
    # The layer's own review could not read the plan: no digest, nothing approved.
    assert not applies(decide_layer(layer(review(), digest=None), NOW))


def test_a_policy_gate_still_wants_a_person() -> None:
    for verdict in ("GatesAutoApply", "Denied"):
        d = decide_layer(layer(review(), verdict=verdict), NOW)
        assert not applies(d), verdict


def test_a_review_approves_one_apply_never_a_later_drift_correction() -> None:
    # Applied since the merge: the merge is past.
    assert decide_layer(layer(review(), last_apply=MERGED_AT + timedelta(seconds=1)), NOW).reviewed is None
    # A drift correction is never what a pull request reviewed.
    assert not applies(decide_layer(layer(review(), drift="Drifted"), NOW))


def test_a_plan_of_the_branch_before_the_merge_reached_it_says_nothing_yet() -> None:
    early = review(same_tree=False, contains_head=False)
    assert decide_layer(layer(early, plan_date=MERGED_AT - timedelta(seconds=5)), NOW).reviewed is None
    # Made after the controllers saw the merge (a squash leaves no ancestry): it is the merge's, and differs.
    late = decide_layer(layer(early, plan_date=MERGED_AT + timedelta(seconds=5)), NOW).reviewed
    assert late is not None and late.result == "Differs"


def test_an_auto_layer_is_unchanged() -> None:
    d = decide_layer(layer(review(same_tree=False), auto=True), NOW)
    assert applies(d)  # it applies every plan, as before
    approval = next(c for c in d.conditions if c.type == "IsPlanApproved")
    assert approval.reason == "AutoApprove"


@given(reason=st.sampled_from(["", "a fork's pull request"]), same=st.sampled_from([True, False, None]),
       reviewed=st.sampled_from([DIGEST, OTHER, None]), current=st.sampled_from([DIGEST, OTHER, None]),
       drift=st.sampled_from(["CodeChange", "Unknown", "Drifted", "InSync"]),
       applied=st.sampled_from([None, -60, 60]), gate_sum=st.sampled_from([SUM, "sha256:" + "9" * 64]),
       contains=st.booleans())
def test_only_the_reviewed_plan_is_ever_approved(reason: str, same: bool | None, reviewed: str | None,
                                                 current: str | None, drift: str, applied: int | None,
                                                 gate_sum: str, contains: bool) -> None:
    last_apply = MERGED_AT + timedelta(seconds=applied) if applied is not None else None
    merged = review(reason=reason, same_tree=same, changes_digest=reviewed, contains_head=contains)
    gate = PlanGate(gate_sum, drift_state=drift, changes_digest=current)
    verdict = judge_merged((merged,), SUM, MERGE, gate, last_apply, NOW)
    approved = verdict is not None and verdict.approved
    assert approved == (reason == "" and same is True and reviewed is not None and reviewed == current
                        and drift not in ("Drifted", "InSync") and (last_apply is None or last_apply < MERGED_AT)
                        and gate_sum == SUM)
    d = decide_layer(layer(merged, digest=current, drift=drift, last_apply=last_apply, gate_sum=gate_sum), NOW)
    if applies(d):
        assert approved  # nothing but a reviewed plan is ever applied on a manual layer


# -- attack tests: none of these turns into an apply ----------------------------------------------------------------

def pr_spec(state: str = "merged", head: str = HEAD, fork: bool = False) -> dict[str, Any]:
    return {"provider": "github", "repository": "infra", "project": "team/infra", "number": 7, "base": "main",
            "headSha": head, "state": state, "fromFork": fork}


def planned_status(head: str = HEAD) -> dict[str, Any]:
    return {"state": "Planned", "headSha": head, "layers": [
        {"namespace": NS, "name": "app", "path": "layers/app", "run": "pr7-app-x", "state": "planned",
         "summary": "Plan: 1 to add", "changesDigest": DIGEST}]}


def recorded(spec: dict[str, Any], status: dict[str, Any], settings: dict[str, Any] | None = None,
             facts: ReviewFacts | None = None) -> MergedReview | None:
    """What the layer controller would read of the pull request's record (merged_reviews.py), as it would."""
    snap = PullRequestSnapshot("infra-pr-7", NS, spec, status, {(NS, "app"): "layers/app"}, (), now=format_time(
        MERGED_AT), review=facts)
    decision = decide_pull_request(snap, settings)
    record = decision.status.get("merged")
    if not record:
        return None
    entry = next(e for e in record["layers"] if e["name"] == "app")
    reason = record["reason"] or ("" if entry.get("changesDigest") else "not reviewed")
    return MergedReview("infra-pr-7", 7, str(record["headSha"]), MERGED_AT, entry.get("changesDigest"), reason,
                        True, True)


def approved_by(merged: MergedReview | None) -> bool:
    return merged is not None and applies(decide_layer(layer(merged), NOW))


def test_a_same_repository_merge_of_the_planned_head_is_reviewed() -> None:
    assert approved_by(recorded(pr_spec(), planned_status()))


def test_attack_a_forks_plan_never_approves_an_apply() -> None:
    """An outsider's fork, approved for planning and merged by a maintainer with identical files: its plan ran the
    outsider's code (and may have reported anything), so it approves nothing."""
    merged = recorded(pr_spec(fork=True), planned_status())
    assert merged is not None and "fork" in merged.reason and not approved_by(merged)


def test_attack_a_push_after_the_plan_is_not_what_was_reviewed() -> None:
    """Planned and shown at OLD; a push (HEAD) lands and is merged before its plan is shown."""
    merged = recorded(pr_spec(head=HEAD), planned_status(head=OLD))
    assert merged is not None and "a push after the plan" in merged.reason and not approved_by(merged)
    # The new head's plan still running at the merge: not reviewed either.
    running = {**planned_status(), "layers": [{**planned_status()["layers"][0], "state": "planning",
                                               "changesDigest": None}]}
    assert not approved_by(recorded(pr_spec(), running))


def test_attack_a_pull_request_closed_without_merging_reviews_nothing() -> None:
    assert recorded(pr_spec(state="closed"), planned_status()) is None
    # Even one that held a record (merged, then its record kept by a replayed close): a close clears it.
    closed = decide_pull_request(PullRequestSnapshot("infra-pr-7", NS, pr_spec(state="closed"), {
        **planned_status(), "merged": {"headSha": HEAD, "at": format_time(MERGED_AT), "reason": "",
                                       "layers": [{"namespace": NS, "name": "app", "changesDigest": DIGEST}]}},
        {}, ()))
    assert closed.status["merged"] is None


def test_attack_an_approved_requirement_that_did_not_hold() -> None:
    settings = {"commands": {"applyRequirements": ["approved"]}}
    snap = PullRequestSnapshot("infra-pr-7", NS, pr_spec(), planned_status(), {(NS, "app"): "layers/app"}, (),
                               now=format_time(MERGED_AT))
    assert decide_pull_request(snap, settings).needs_review  # asked of the provider before anything is recorded
    self_approved = ReviewFacts("author", ("author",), None, 1)
    merged = recorded(pr_spec(), planned_status(), settings, self_approved)
    assert merged is not None and "approved" in merged.reason and not approved_by(merged)
    peer = ReviewFacts("author", ("reviewer",), None, 1)  # mergeable/behind mean nothing once merged
    assert approved_by(recorded(pr_spec(), planned_status(), settings, peer))


def test_attack_a_digest_the_controllers_did_not_compute_is_never_recorded() -> None:
    """A runner pod controls its own plan JSON, never the digest: the row's digest is the controllers' reading of the
    JSON the run controller recorded (`PlanOutcome.changes_digest`, computed in `_read_outcome`). A row claiming a
    digest without such an outcome (a status written before, a forged row) loses it at the next decision, so a
    merge records nothing for it."""
    forged = planned_status()
    run = RunFacts("pr7-app-x", (NS, "app"), "Succeeded", attempt=1)
    name = run_name("infra-pr-7", (NS, "app"), HEAD, 7)
    forged["layers"][0]["run"] = name
    snap = PullRequestSnapshot("infra-pr-7", NS, pr_spec(state="open"), forged, {(NS, "app"): "layers/app"},
                               (replace(run, name=name),))
    decided = decide_pull_request(snap)
    assert "changesDigest" not in decided.status["layers"][0]  # the outcome is not read: no digest
    plan = parse_plan(fixture("create"))
    read = replace(snap, outcomes={name: PlanOutcome("planned", plan.summary(), plan,
                                                     changes_digest=changes_digest(plan))})
    assert decide_pull_request(read).status["layers"][0]["changesDigest"] == changes_digest(plan)


def test_attack_the_layers_digest_is_its_reviewed_plan_in_force() -> None:
    """The layer's digest is the controllers' review of exactly `plan-sum`: a review of another plan (the status
    still holding a reviewed plan while `plan-sum` names a new one, not yet reviewed) approves nothing."""
    d = decide_layer(layer(review(), gate_sum="sha256:" + "9" * 64), NOW)
    assert not applies(d) and d.reviewed is None


def test_the_merge_record_is_written_once_and_each_verdict_told_once() -> None:
    record = merged_review(pr_spec(), planned_status(), None, None, format_time(MERGED_AT))
    assert record is not None and record["reason"] == ""
    status = {"state": "Merged", "merged": record}
    verdict = {"pullRequest": "infra-pr-7", "headSha": HEAD, "planSum": SUM, "result": "Differs",
               "message": f"{DIFFERS_TEXT} (pull request #7: …)"}
    snap = PullRequestSnapshot("infra-pr-7", NS, pr_spec(), status, {}, (), verdicts={(NS, "app"): verdict},
                               now=format_time(NOW))
    first = decide_pull_request(snap)
    assert first.status["merged"]["at"] == format_time(MERGED_AT)  # not rewritten
    assert first.wake_layers == () and len(first.tell) == 1 and DIFFERS_TEXT in first.tell[0][1]
    again = decide_pull_request(replace(snap, status={**status, "merged": first.status["merged"]}))
    assert again.tell == ()
    # A first record wakes the layers it names.
    fresh = decide_pull_request(PullRequestSnapshot("infra-pr-7", NS, pr_spec(), planned_status(), {}, (),
                                                    now=format_time(MERGED_AT)))
    assert fresh.wake_layers == ((NS, "app"),)
