"""What an ended attempt leaves on its layer, decided by the run controller from the datastore's facts (issue 24,
design item 1): pure."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.run.results import AttemptFacts, facts_needed, record_result
from burrito_py.datastore.client import StoredObject

BIN = StoredObject("sha256:" + "b" * 64, 100)
JSON = StoredObject("sha256:" + "j" * 64, 2000)
ARTIFACT = "sha256:" + "a" * 64
AT = "2026-05-01T12:00:00Z"


def run(action: str = "plan", *, pull_request: str | None = None, destroy: bool = False,
        artifact: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"action": action, "layer": {"name": "app", "revision": "c1"}}
    if pull_request:
        spec["pullRequest"] = pull_request
    if destroy:
        spec["destroy"] = True
    if artifact:
        spec["artifact"] = artifact
    return {"metadata": {"name": f"app-{action}-1", "namespace": "team"}, "spec": spec}


def test_a_plan_attempt_records_the_datastores_sums_and_annotates_the_layer() -> None:
    facts = AttemptFacts(BIN, JSON, "Plan: 1 to add,\n 0 to change, 0 to destroy\n")
    recorded = record_result(run(), 2, True, AT, facts)
    assert recorded.problem is None
    assert recorded.annotations == {
        ann.PLAN_DATE: AT, ann.PLAN_SUM: BIN.sha256, ann.PLAN_RUN: "app-plan-1/2", ann.PLAN_COMMIT: "c1",
        ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy", ann.PLAN_DESTROY: None}
    assert recorded.attempt == {"planSum": BIN.sha256, "planJsonSum": JSON.sha256, "planJsonSize": 2000}
    destroy = record_result(run(destroy=True), 1, True, AT,
                            AttemptFacts(BIN, JSON, "Plan: 0 to add, 0 to change, 1 to destroy"))
    assert destroy.annotations[ann.PLAN_DESTROY] == "true"


def test_a_pull_request_plan_never_touches_the_layer() -> None:
    recorded = record_result(run(pull_request="github-7"), 1, True, AT, AttemptFacts(BIN, JSON, "No changes."))
    assert recorded.annotations == {} and recorded.attempt["planSum"] == BIN.sha256


def test_a_plan_that_exited_0_without_its_objects_fails_the_attempt() -> None:
    recorded = record_result(run(), 1, True, AT, AttemptFacts(BIN, None, "No changes."))
    assert recorded.problem == "attempt 1 ended without storing plan.json in the datastore"
    assert recorded.annotations == {}
    assert record_result(run(), 1, False, AT, AttemptFacts()).annotations == {}


def test_attack_a_summary_that_is_no_plan_summary_never_reaches_the_layer() -> None:
    """The runner's `short.txt` is written in a pod that runs the branch's code: markup in it (`<!channel>`, a link)
    went into `plan-summary`, and from there into lastResult and the Slack and Teams notifications."""
    markup = "Plan: 1 to add <!channel> <https://evil.example|Approve the plan here>"
    recorded = record_result(run(), 1, True, AT, AttemptFacts(BIN, JSON, markup))
    assert ann.PLAN_SUMMARY not in recorded.annotations, recorded.annotations
    assert recorded.problem == ("attempt 1 stored a summary that is not a plan's summary ('Plan: …' or "
                                "'No changes.')")
    planned_apply = record_result(run("apply", artifact={"run": "app-plan-1", "attempt": 2, "sum": ARTIFACT}), 1,
                                  True, AT, AttemptFacts(BIN, JSON, markup, outputs=True))
    assert ann.PLAN_SUMMARY not in planned_apply.annotations


def test_an_apply_records_the_sum_it_carries_and_its_outputs() -> None:
    apply_run = run("apply", artifact={"run": "app-plan-1", "attempt": 2, "sum": ARTIFACT})
    recorded = record_result(apply_run, 1, True, AT, AttemptFacts(outputs=True))
    assert recorded.annotations == {ann.APPLY_DATE: AT, ann.APPLY_SUM: ARTIFACT, ann.APPLY_COMMIT: "c1",
                                    ann.APPLY_RUN: "app-apply-1/1"}
    assert recorded.attempt == {"appliedSum": ARTIFACT} and recorded.problem is None


def test_an_apply_without_its_outputs_records_the_apply_and_fails() -> None:
    apply_run = run("apply", artifact={"run": "app-plan-1", "attempt": 2, "sum": ARTIFACT})
    recorded = record_result(apply_run, 1, True, AT, AttemptFacts(outputs=False))
    assert ann.APPLY_RUN not in recorded.annotations and recorded.annotations[ann.APPLY_SUM] == ARTIFACT
    assert recorded.problem == "attempt 1 applied but stored no outputs in the datastore"


def test_a_failed_apply_that_applied_still_records_the_apply_from_its_applied_record() -> None:
    apply_run = run("apply", artifact={"run": "app-plan-1", "attempt": 2, "sum": ARTIFACT})
    recorded = record_result(apply_run, 3, False, AT, AttemptFacts(applied=ARTIFACT))
    assert recorded.annotations == {ann.APPLY_DATE: AT, ann.APPLY_SUM: ARTIFACT, ann.APPLY_COMMIT: "c1"}
    # A record claiming another plan (tenant code lying) records nothing.
    assert record_result(apply_run, 3, False, AT, AttemptFacts(applied="sha256:" + "f" * 64)) \
        .annotations == {}
    assert record_result(apply_run, 3, False, AT, AttemptFacts()).annotations == {}


def test_an_apply_that_planned_itself_records_that_plan_as_planned_and_applied() -> None:
    apply_run = run("apply", artifact={"run": "app-plan-1", "attempt": 2, "sum": ARTIFACT})
    facts = AttemptFacts(BIN, JSON, "Plan: 1 to add, 0 to change, 0 to destroy", outputs=True)
    recorded = record_result(apply_run, 1, True, AT, facts)
    assert recorded.annotations[ann.PLAN_SUM] == recorded.annotations[ann.APPLY_SUM] == BIN.sha256
    assert recorded.annotations[ann.PLAN_RUN] == "app-apply-1/1"


def test_an_apply_without_a_sum_is_not_recorded_as_a_success() -> None:
    recorded = record_result(run("apply", artifact={"run": "app-plan-1", "attempt": 2}), 1, True, AT,
                             AttemptFacts(outputs=True))
    assert recorded.problem is not None and recorded.annotations == {}


@given(action=st.sampled_from(["plan", "apply"]), succeeded=st.booleans(), pull_request=st.booleans(),
       plan=st.sampled_from([None, BIN]), plan_json=st.sampled_from([None, JSON]),
       summary=st.sampled_from([None, "No changes."]), outputs=st.booleans(),
       applied=st.sampled_from([None, ARTIFACT, BIN.sha256, "x"]))
def test_every_sum_on_the_layer_is_one_the_datastore_computed_or_the_run_carries(
    action: str, succeeded: bool, pull_request: bool, plan: StoredObject | None, plan_json: StoredObject | None,
    summary: str | None, outputs: bool, applied: str | None,
) -> None:
    body = run(action, pull_request="github-7" if pull_request and action == "plan" else None,
               artifact={"run": "app-plan-1", "attempt": 2, "sum": ARTIFACT} if action == "apply" else None)
    recorded = record_result(body, 1, succeeded, AT, AttemptFacts(plan, plan_json, summary, outputs, applied))
    a = recorded.annotations
    assert a.get(ann.PLAN_SUM) in (None, BIN.sha256)
    assert a.get(ann.APPLY_SUM) in (None, ARTIFACT, BIN.sha256)
    if pull_request and action == "plan":
        assert a == {}
    if ann.APPLY_RUN in a:
        assert succeeded and outputs
    if not succeeded and action == "plan":
        assert a == {} and recorded.problem is None
    assert set(facts_needed(action, succeeded)) <= {"plan", "plan_json", "summary", "outputs", "applied"}
