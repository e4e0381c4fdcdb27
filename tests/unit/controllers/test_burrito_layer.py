"""burrito's TerraformLayer controller test cases (internal/controllers/terraformlayer/controller_test.go and its
testdata), translated onto our pure decision.

burrito reconciles against envtest and counts the runs created; we build the same layer and runs as the
controller holds them, call `decide` (what `_reconcile` acts on) and look at the state and the run it would
create. burrito's annotations map one to one onto ours (`runner.terraform.padok.cloud/plan-sum` →
`runner.burrito-py.io/plan-sum`, ...). burrito's clock in these cases is 2023-05-08 ~11:21 UTC and its drift
period 20 minutes; its runs carry a revision and no artifact. Each case's docstring names burrito's case.
Where we differ on purpose, the test asserts our behaviour and says why.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.common import SyncWindow
from burrito_py.controllers.layer.actions import decide, sync_windows
from burrito_py.controllers.layer.decide import LayerDecision
from burrito_py.controllers.layer.plan_review import Review
from burrito_py.controllers.layer.runs import runs_to_delete
from burrito_py.controllers.layer.validation import LayerValidation
from burrito_py.kube.conditions import Cond

NOW = datetime(2023, 5, 8, 11, 22, 30, tzinfo=UTC)
DRIFT = timedelta(minutes=20)
BRANCH = "cb9f15b90861c8c4364cdde63d17837c7a9ccca9"
PLANNED = "ca9b6c80ac8fb5cd837ae9b374b79ff33f472558"
SUM = "AuP6pMNxWsbSZKnxZvxD842wy0qaF9JCX8HW1nFeL1I="
MAY_8 = "2023-05-08T11:21:53Z"
MAY_7 = "2023-05-07T11:21:53Z"


def layer(name: str, annotations: dict[str, str], repository: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": ann.API_VERSION,
        "kind": "TerraformLayer",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": annotations},
        "spec": {"branch": "main", "path": f"{name}/", "repository": {"name": "burrito"}},
    }


def run(name: str, state: str, action: str = "plan", revision: str | None = None, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "annotations": annotations},
        "spec": {"action": action, "layer": {"name": "x", "namespace": "default", "revision": revision}},
        "status": {"state": state},
    }


def validation(auto_apply: bool = True) -> LayerValidation:
    return LayerValidation(Cond("Ready", True, "Ready"), auto_apply=auto_apply, max_retries=5, runs_to_keep=5,
                           destroy_on_deletion=False)


def decide_for(body: dict[str, Any], runs: list[dict[str, Any]] = (), *, auto_apply: bool = True,  # type: ignore[assignment]
               repository: dict[str, Any] | None = None, defaults: list[SyncWindow] = ()) -> LayerDecision:  # type: ignore[assignment]
    runs = [of_layer(r, body) for r in runs]
    return decide(body, runs, validation(auto_apply), DRIFT, NOW, windows=sync_windows(repository, defaults),
                  review=reviewed(body))


def of_layer(body: dict[str, Any], layer_body: dict[str, Any]) -> dict[str, Any]:
    """burrito's runs as ours are: created by the controllers for that layer (owner, label, spec.layer), and a
    succeeded plan run with the sum the run controller recorded for its attempt (what the artifact check reads)."""
    meta = layer_body["metadata"]
    run_meta = {**body["metadata"], "ownerReferences": [{"kind": "TerraformLayer", "uid": meta["uid"]}],
                "labels": {ann.LABEL_LAYER: meta["name"]}}
    spec = {**body["spec"], "layer": {**body["spec"]["layer"], "name": meta["name"]}}
    status = dict(body["status"])
    if status["state"] == "Succeeded" and spec["action"] == "plan":
        status["attempts"] = [{"number": 1, "podName": "p", "exitCode": 0, "planSum": SUM}]
    return {**body, "metadata": run_meta, "spec": spec, "status": status}


def reviewed(body: dict[str, Any]) -> Review:
    """The controllers' review of the current plan: no policy, nothing known of drift (the gate has its own
    tests: tests/unit/controllers/test_plan_gate.py)."""
    plan_sum = (body["metadata"].get("annotations") or {}).get(ann.PLAN_SUM)
    return Review({"planSum": plan_sum, "verdict": "Allowed"} if plan_sum else None, None)


def planned_at(commit: str = PLANNED, date: str = MAY_8, **extra: str) -> dict[str, str]:
    return {ann.PLAN_COMMIT: commit, ann.PLAN_DATE: date, ann.PLAN_RUN: "run-succeeded/1", ann.PLAN_SUM: SUM,
            ann.BRANCH_COMMIT: BRANCH, **extra}


def unrelated_head(a: dict[str, str]) -> dict[str, str]:
    """burrito's nominal layers have a plan of ca9b… and a head cb9f… but no relevant commit: burrito then takes
    the plan as current. Our repository controller always writes relevant-commit with branch-commit; the case
    means "the head changed nothing for this layer", so the relevant commit is the one planned."""
    return a | {ann.RELEVANT_COMMIT: a.get(ann.PLAN_COMMIT, BRANCH)}


def creates(d: LayerDecision) -> str | None:
    return d.create_run.action if d.create_run is not None else None


# -- Nominal Case ------------------------------------------------------------------------------------------
def test_nominal_created_layer_plans():
    """Nominal Case / When a TerraformLayer is created: PlanNeeded, one plan run."""
    d = decide_for(layer("nominal-case-1", {ann.BRANCH_COMMIT: BRANCH}))
    assert d.state == "PlanNeeded" and creates(d) == "plan"


def test_nominal_just_planned_in_auto_apply_applies():
    """Nominal Case / When a TerraformLayer just got planned in autoApply mode: ApplyNeeded, one apply run."""
    d = decide_for(layer("nominal-case-2", unrelated_head(planned_at())), [run("run-succeeded", "Succeeded")])
    assert d.state == "ApplyNeeded" and creates(d) == "apply"


def test_nominal_just_planned_in_dry_run_waits():
    """Nominal Case / When a TerraformLayer just got planned in dryRun mode: ApplyNeeded, no run."""
    d = decide_for(layer("nominal-case-3", unrelated_head(planned_at())), [run("run-succeeded", "Succeeded")],
                   auto_apply=False)
    assert d.state == "ApplyNeeded" and creates(d) is None


def test_nominal_just_applied_is_idle():
    """Nominal Case / When a TerraformLayer just got applied: Idle, no run."""
    a = unrelated_head(planned_at(**{ann.APPLY_COMMIT: PLANNED, ann.APPLY_DATE: MAY_8, ann.APPLY_SUM: SUM}))
    d = decide_for(layer("nominal-case-4", a))
    assert d.state == "Idle" and creates(d) is None


def test_nominal_not_planned_for_longer_than_the_drift_period_plans():
    """Nominal Case / When a TerraformLayer hasn't been planned since more time than the DriftDetection period."""
    a = unrelated_head(planned_at(date="2023-05-08T10:21:53Z", **{ann.APPLY_SUM: SUM}))
    d = decide_for(layer("nominal-case-6", a))
    assert d.state == "PlanNeeded" and creates(d) == "plan"


def test_nominal_last_run_still_running():
    """Nominal Case / When a TerraformLayer last run is still running.

    Differs on purpose: burrito shows Idle (its state ignores the run); ours shows Running, and creates no run
    either way: a layer never gets a second live run."""
    d = decide_for(layer("nominal-case-7", {ann.BRANCH_COMMIT: BRANCH}), [run("run-running", "Running")])
    assert d.state == "Running" and creates(d) is None


def test_nominal_sync_now_plans():
    """Nominal Case / When a TerraformLayer is annotated to be manually synced: PlanNeeded, one plan run."""
    d = decide_for(layer("nominal-case-8", {ann.BRANCH_COMMIT: BRANCH, ann.SYNC_NOW: "true"}))
    assert d.state == "PlanNeeded" and creates(d) == "plan" and d.remove_sync_now


# -- errors on plan and apply ----------------------------------------------------------------------------------
def test_errored_plan_before_the_drift_tick():
    """When a TerraformLayer has errored on plan and is still before new DriftDetection tick (error-case-1).

    Differs on purpose: burrito reads Idle and retries at the next drift tick; we record the failed plan as
    exhausted at its relevant commit (MaxRetriesReached): a new relevant commit or sync-now retries it. An
    empty plan-sum means "no plan" (issue 11 item 7)."""
    a = {ann.PLAN_COMMIT: PLANNED, ann.PLAN_DATE: MAY_8, ann.PLAN_RUN: "run-failed/0", ann.PLAN_SUM: "",
         ann.BRANCH_COMMIT: BRANCH}
    d = decide_for(layer("error-case-1", a), [run("run-failed", "Failed", revision=BRANCH)])
    assert d.state == "MaxRetriesReached" and creates(d) is None
    assert next(c for c in d.conditions if c.type == "HasLastPlanFailed").reason == "LastPlanFailed"


def test_errored_plan_after_the_drift_tick():
    """When a TerraformLayer has errored once on plan and not in grace period anymore (error-case-3).

    Differs on purpose: burrito plans again at each drift tick; we do not re-run a plan that failed after its
    retries at the same relevant commit (it would fail the same way every drift period)."""
    a = {ann.PLAN_COMMIT: PLANNED, ann.PLAN_DATE: MAY_7, ann.PLAN_RUN: "run-failed/0", ann.PLAN_SUM: "",
         ann.BRANCH_COMMIT: BRANCH}
    d = decide_for(layer("error-case-3", a), [run("run-failed", "Failed", revision=BRANCH)])
    assert d.state == "MaxRetriesReached" and creates(d) is None
    d = decide_for(layer("error-case-3", a | {ann.SYNC_NOW: "x"}), [run("run-failed", "Failed", revision=BRANCH)])
    assert creates(d) == "plan"


def test_errored_apply_after_the_current_plan():
    """When a TerraformLayer has errored on apply and was done after current plan (error-case-4).

    burrito reads Idle; ours reads MaxRetriesReached (the apply of this very plan failed for good); neither
    creates a run."""
    a = planned_at(date="2023-05-08T11:15:53Z", **{ann.APPLY_SUM: ""})
    failed = run("run-failed", "Failed", "apply", PLANNED, **{ann.RUN_PLAN_SUM: SUM})
    d = decide_for(layer("error-case-4", unrelated_head(a)), [failed])
    assert d.state == "MaxRetriesReached" and creates(d) is None


def test_errored_apply_before_the_current_plan():
    """When a TerraformLayer has errored on apply and was done before current plan (error-case-5): ApplyNeeded,
    one apply run. The failed apply applied an older plan of the same commit; a newer plan (another sum) lifts
    its exhaustion (issue 11 item 2: today the failure at that commit blocks every later plan's apply)."""
    a = planned_at(date="2023-05-08T11:25:53Z", **{ann.APPLY_SUM: ""})
    failed = run("run-failed", "Failed", "apply", PLANNED, **{ann.RUN_PLAN_SUM: "sha256:older-plan"})
    d = decide_for(layer("error-case-5", unrelated_head(a)), [failed, run("run-succeeded", "Succeeded")])
    assert d.state == "ApplyNeeded" and creates(d) == "apply"


# -- Merge, webhook and error cases ----------------------------------------------------------------------------
def test_merge_case_created_layer_plans():
    """Merge case / When a TerraformLayer is created (runner spec merged from the repository): PlanNeeded."""
    d = decide_for(layer("merge-case-1", {ann.BRANCH_COMMIT: BRANCH}))
    assert d.state == "PlanNeeded" and creates(d) == "plan"


def test_webhook_issue_commit_older_than_the_plan():
    """Webhook issues / When a TerraformLayer is reconciled (webhook-issue-case-1).

    Differs on purpose (issue 11 item 1): the relevant commit f4f5… was never planned (the plan is of ca9b…),
    but its committer date is older than the plan, so burrito counts it planned and applies the plan of ca9b….
    A committer date says nothing about whether a plan saw the commit: we plan f4f5… first."""
    relevant = "f4f5c237f34bac134e4503c40de9d142c1e04077"
    a = planned_at(**{ann.APPLY_COMMIT: relevant, ann.APPLY_DATE: MAY_7, ann.APPLY_SUM: "other",
                      ann.BRANCH_COMMIT: relevant, ann.BRANCH_COMMIT_DATE: MAY_7,
                      ann.RELEVANT_COMMIT: relevant, ann.RELEVANT_COMMIT_DATE: MAY_7})
    d = decide_for(layer("webhook-issue-case-1", a), [run("run-succeeded", "Succeeded", revision=PLANNED)])
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.revision == relevant


def test_layer_not_annotated_by_the_repository_controller():
    """Error cases / When a TerraformLayer has not been annotated by Repository Controller (error-case-6).

    Differs on purpose: burrito reads PlanNeeded and retries on error; we wait without a state, saying why
    (HasBranchCommit False, WaitingForRepository), and the repository controller is woken."""
    d = decide_for(layer("error-case-6", {}))
    assert d.state is None and creates(d) is None and d.conditions[0].reason == "WaitingForRepository"


def test_last_run_that_does_not_exist():
    """Error cases / When a TerraformLayer has a LastRun that does not exist: PlanNeeded, one plan run."""
    d = decide_for(layer("last-run-not-exist", {ann.BRANCH_COMMIT: BRANCH}), [])
    assert d.state == "PlanNeeded" and creates(d) == "plan"


# -- Retry limit cases -------------------------------------------------------------------------------------------
def test_exhausted_plan_for_the_same_revision():
    """Retry limit cases / last plan run has reached the retry limit for the same revision (error-case-7):
    MaxRetriesReached, no run."""
    a = {ann.PLAN_COMMIT: PLANNED, ann.PLAN_DATE: MAY_7, ann.PLAN_SUM: "", ann.BRANCH_COMMIT: BRANCH}
    d = decide_for(layer("error-case-7", a), [run("run-failed-exhausted-plan", "Failed", revision=BRANCH)])
    assert d.state == "MaxRetriesReached" and creates(d) is None


def test_exhausted_plan_but_a_new_revision():
    """Retry limit cases / last plan run has reached the retry limit but a new revision is available
    (error-case-8): PlanNeeded, one plan run."""
    a = {ann.PLAN_COMMIT: PLANNED, ann.PLAN_DATE: MAY_7, ann.PLAN_SUM: "", ann.BRANCH_COMMIT: BRANCH,
         ann.RELEVANT_COMMIT: BRANCH}
    failed = run("run-failed-exhausted-plan-old-rev", "Failed", revision="old-revision-that-was-already-tried")
    d = decide_for(layer("error-case-8", a), [failed])
    assert d.state == "PlanNeeded" and creates(d) == "plan"


def test_exhausted_plan_and_an_unrelated_new_revision():
    """Not a burrito case, its counterpart (issue 11 item 5): a new head that does not touch the layer is not a
    new revision for it, so the broken layer is not re-run."""
    a = {ann.PLAN_SUM: "", ann.BRANCH_COMMIT: "unrelated-head", ann.RELEVANT_COMMIT: BRANCH}
    failed = run("run-failed-exhausted-plan", "Failed", revision=BRANCH, **{ann.RUN_RELEVANT_COMMIT: BRANCH})
    d = decide_for(layer("error-case-7b", a), [failed])
    assert d.state == "MaxRetriesReached" and creates(d) is None


def test_exhausted_apply():
    """Retry limit cases / last apply run has reached the retry limit (error-case-9): MaxRetriesReached, no run.
    Our apply runs carry the sum of the plan they apply (the key of their exhaustion; burrito keys on the
    revision), so the translated run carries it."""
    a = {ann.PLAN_COMMIT: BRANCH, ann.PLAN_DATE: "2023-05-08T11:15:53Z", ann.PLAN_SUM: SUM, ann.PLAN_RUN: "p/0",
         ann.APPLY_COMMIT: BRANCH, ann.APPLY_SUM: "", ann.BRANCH_COMMIT: BRANCH}
    failed = run("run-failed-exhausted-apply", "Failed", "apply", BRANCH, **{ann.RUN_PLAN_SUM: SUM})
    d = decide_for(layer("error-case-9", a), [failed])
    assert d.state == "MaxRetriesReached" and creates(d) is None


# -- Cleanup case ------------------------------------------------------------------------------------------------
def test_cleanup_keeps_five_runs():
    """Cleanup case: with 7 finished runs and a history of 5, the 2 oldest are deleted."""
    runs = [run(f"run-to-keep-{i}", "Succeeded") for i in range(1, 6)]
    runs += [run(f"run-to-cleanup-{i}", "Succeeded") for i in range(1, 3)]
    doomed = runs_to_delete(runs, 5, {})
    assert [r["metadata"]["name"] for r in doomed] == ["run-to-cleanup-1", "run-to-cleanup-2"]


# -- Sync Window Cases: decided before a run exists (issue 11 item 6: today the run is created, then waits) ----
def repository(*windows: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "repo", "namespace": "default"}, "spec": {"syncWindows": list(windows)}}


def window(kind: str, schedule: str, duration: str, layers: str, action: str) -> dict[str, Any]:
    return {"kind": kind, "schedule": schedule, "duration": duration, "layers": [layers], "actions": [action]}


def held_back(d: LayerDecision, reason: str) -> bool:
    cond = next(c for c in d.conditions if c.type == "IsInSyncWindow")
    return d.create_run is None and not cond.status and cond.reason == reason


def test_deny_window_for_apply():
    """Sync Window Cases / When a TerraformLayer is in a deny window for apply action: stays ApplyNeeded, no run."""
    repo = repository(window("deny", "* * * * *", "1h", "sync-window-case-deny-*", "apply"))
    d = decide_for(layer("sync-window-case-deny-apply-1", unrelated_head(planned_at())),
                   [run("run-succeeded", "Succeeded")], repository=repo)
    assert d.state == "ApplyNeeded" and held_back(d, "SyncWindowDenied")


def test_outside_the_allow_window_for_apply():
    """Sync Window Cases / When a TerraformLayer is outside the allow window for apply action (`0 0 30 2 *`):
    stays ApplyNeeded, no run. Today the never-firing cron raises (InvalidSyncWindow)."""
    repo = repository(window("allow", "0 0 30 2 *", "1m", "sync-window-case-allow-*", "apply"))
    d = decide_for(layer("sync-window-case-allow-apply-1", unrelated_head(planned_at())),
                   [run("run-succeeded", "Succeeded")], repository=repo)
    assert d.state == "ApplyNeeded" and held_back(d, "OutsideSyncWindow")


def test_deny_window_for_plan():
    """Sync Window Cases / When a TerraformLayer is in a deny window for plan action: stays PlanNeeded, no run."""
    repo = repository(window("deny", "* * * * *", "1h", "sync-window-case-deny-*", "plan"))
    d = decide_for(layer("sync-window-case-deny-plan-1", {ann.BRANCH_COMMIT: BRANCH}), repository=repo)
    assert d.state == "PlanNeeded" and held_back(d, "SyncWindowDenied")


def test_outside_the_allow_window_for_plan():
    """Sync Window Cases / When a TerraformLayer is outside the allow window for plan action: PlanNeeded, no run."""
    repo = repository(window("allow", "0 0 30 2 *", "1m", "sync-window-case-allow-*", "plan"))
    d = decide_for(layer("sync-window-case-allow-plan-1", {ann.BRANCH_COMMIT: BRANCH}), repository=repo)
    assert d.state == "PlanNeeded" and held_back(d, "OutsideSyncWindow")


def test_default_deny_window_for_apply():
    """Sync Window Cases / When there is a deny sync window on apply action in the default controller config."""
    default = SyncWindow(kind="deny", schedule="* * * * *", duration="1h", layers=["sync-window-case-default-1"],
                         actions=["apply"])
    d = decide_for(layer("sync-window-case-default-1", unrelated_head(planned_at())),
                   [run("run-succeeded", "Succeeded")], repository=repository(), defaults=[default])
    assert d.state == "ApplyNeeded" and held_back(d, "SyncWindowDenied")


def test_default_deny_window_for_plan():
    """Sync Window Cases / When there is a deny sync window on plan action in the controller config."""
    default = SyncWindow(kind="deny", schedule="* * * * *", duration="1h", layers=["sync-window-case-default-2"],
                         actions=["plan"])
    d = decide_for(layer("sync-window-case-default-2", {ann.BRANCH_COMMIT: BRANCH}), repository=repository(),
                   defaults=[default])
    assert d.state == "PlanNeeded" and held_back(d, "SyncWindowDenied")
