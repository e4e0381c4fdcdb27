"""The pure parts of the controllers' plan review: when a plan is reviewed again, code change or drift,
the drift status over time, and who may override a mandatory denial."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.plan_review import (
    RETRY_UNREADABLE,
    PlanReading,
    code_changed,
    drift_state,
    drift_status,
    gate_of,
    parse_override,
    plan_facts,
    review_needed,
    review_plan,
)
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.policy.override import override_refusal
from burrito_py.policy.verdict import Verdict

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
SUM = "sha256:aa"
PLANNED = {ann.PLAN_SUM: SUM, ann.PLAN_RUN: "app-plan-2/1", ann.PLAN_COMMIT: "c2",
           ann.PLAN_SUMMARY: "Plan: 0 to add, 1 to change, 0 to destroy"}
APPLIED = {ann.APPLY_SUM: "sha256:old", ann.APPLY_RUN: "app-apply-1/1", ann.APPLY_COMMIT: "c1"}


def runs(plan_relevant: str | None, apply_relevant: str | None) -> dict[str, RunView]:
    return {"app-plan-2": RunView("app-plan-2", "plan", "Succeeded", "c2", relevant_commit=plan_relevant),
            "app-apply-1": RunView("app-apply-1", "apply", "Succeeded", "c1", relevant_commit=apply_relevant)}


def test_code_changed_compares_relevant_commits_then_revisions() -> None:
    a = PLANNED | APPLIED
    assert code_changed(a, runs("r1", "r1")) is False  # an unrelated commit moved the head: same code
    assert code_changed(a, runs("r2", "r1")) is True
    assert code_changed(a, {}) is None  # runs gone and the revisions differ: unknown
    assert code_changed(a | {ann.APPLY_COMMIT: "c2"}, {}) is False
    assert code_changed(PLANNED, runs("r1", "r1")) is None  # never applied

    # Dependencies: a plan made with other upstream outputs than the last apply's is a change, not drift.
    other_inputs = runs("r1", "r1")
    other_inputs["app-plan-2"] = RunView("app-plan-2", "plan", "Succeeded", "c2", relevant_commit="r1",
                                         inputs_digest="sha256:new")
    assert code_changed(a, other_inputs) is True


def test_review_needed() -> None:
    digest = "d1"
    reviewed = {"policy": {"planSum": SUM, "digest": digest}}
    assert review_needed({}, PLANNED, digest)
    assert not review_needed(reviewed, PLANNED, digest)
    assert review_needed(reviewed, PLANNED, "d2")  # the policies changed and the plan may still be applied
    assert not review_needed(reviewed, PLANNED | {ann.APPLY_SUM: SUM}, "d2")  # applied: the verdict stands
    assert review_needed({"policy": {"planSum": SUM, "digest": digest, "error": "down"}}, PLANNED, digest)
    assert not review_needed({}, {}, digest)


def test_drift_state_and_since() -> None:
    facts = {"planSum": SUM, "classified": "Drifted", "resources": 2, "addresses": ["a.b", "c.d"],
             "planDate": "2026-11-24T11:59:00Z"}
    assert drift_state(PLANNED, facts) == "Drifted"
    assert drift_state(PLANNED | {ann.APPLY_SUM: SUM}, facts) == "InSync"  # the correction was applied
    assert drift_state(PLANNED, {**facts, "planSum": "sha256:other"}) == "Unknown"
    first = drift_status(None, "Drifted", facts, NOW)
    assert first == {"state": "Drifted", "since": "2026-11-24T12:00:00Z", "lastCheck": "2026-11-24T11:59:00Z",
                     "planSum": SUM, "resources": 2, "addresses": ["a.b", "c.d"]}
    later = drift_status(first, "Drifted", facts, NOW + timedelta(minutes=20))
    assert later["since"] == first["since"]
    resolved = drift_status(later, "InSync", facts, NOW + timedelta(minutes=40))
    assert "since" not in resolved and resolved["resources"] == 0 and resolved["addresses"] == []


def test_attack_an_override_written_where_no_admission_policy_guards_it_is_not_honoured() -> None:
    """Where the chart's admission policy is off (Kubernetes 1.29, or turned off), anyone who may patch the layer
    writes `override-policy` naming a user the mandatory policy's `overrideBy` lists, and the controllers' check
    trusted the name: the denial was lifted by someone who was never asked. Now no override is honoured there."""
    import json

    from tests.unit.policy.policies import policy

    mandatory = policy([{"name": "r", "cel": {"expression": "true"}}], "mandatory", overrideBy={"users": ["alice"]})
    denied = {"planSum": SUM, "verdict": "Denied",
              "denied": [{"policy": "default/p", "rule": "r", "enforcement": "mandatory"}]}
    override = json.dumps({"sum": SUM, "user": "alice", "groups": []})
    layer = {"metadata": {"namespace": "default", "name": "app",
                          "annotations": PLANNED | {ann.OVERRIDE_POLICY: override}},
             "status": {"policy": denied}}
    guarded = review_plan(layer, runs("c2", None), [mandatory], None, NOW)
    assert guarded.policy is not None and guarded.policy["override"] == {"by": "alice", "planSum": SUM}
    unguarded = review_plan(layer, runs("c2", None), [mandatory], None, NOW, overrides_guarded=False)
    assert unguarded.policy is not None and "override" not in unguarded.policy
    assert unguarded.policy["overrideRefused"] == "alice"
    assert [(e[1], e[2]) for e in unguarded.events] == [("OverrideRefused", "alice: the admission policy that lets "
                                                         "only the burrito-py server write the override is off "
                                                         "(admissionPolicy.enabled=false), so who wrote it cannot be "
                                                         "told: no override is honoured")]
    gates = [gate_of(review.policy, layer["metadata"]["annotations"]) for review in (guarded, unguarded)]
    assert [(g.verdict, g.override_by) for g in gates if g is not None] == [("Denied", "alice"), ("Denied", None)]


def test_override_refusal() -> None:
    denied = [{"policy": "default/p", "rule": "r", "enforcement": "mandatory"},
              {"policy": "q", "rule": "r", "enforcement": "mandatory"},
              {"policy": "default/g", "rule": "r", "enforcement": "gateAutoApply"}]
    allowed = {"default/p": (["alice"], []), "q": ([], ["platform"])}
    assert override_refusal(denied, allowed, "alice", ["platform"]) is None
    refusal = override_refusal(denied, allowed, "alice", [])
    assert refusal is not None and "denial by q" in refusal
    assert "nothing to override" in str(override_refusal(denied[2:], allowed, "alice", []))


def test_parse_override_and_gate() -> None:
    raw = '{"sum": "sha256:aa", "user": "alice", "groups": ["g"]}'
    override = parse_override(raw)
    assert override is not None and (override.plan_sum, override.user, override.groups) == (SUM, "alice", ("g",))
    assert parse_override("not json") is None and parse_override('{"sum": 1}') is None
    policy = {"planSum": SUM, "verdict": "Denied", "denied": [{"policy": "p", "rule": "r", "addresses": ["a.b"]}],
              "plan": {"planSum": SUM, "classified": "CodeChange"}, "override": {"by": "alice", "planSum": SUM}}
    gate = gate_of(policy, PLANNED)
    assert gate is not None and gate.verdict == "Denied" and gate.override_by == "alice"
    assert gate.reason == "p/r (a.b)" and gate.drift_state == "CodeChange"
    assert gate_of(policy, {**PLANNED, ann.PLAN_SUM: "sha256:new"}) is None


def test_a_rule_stopped_by_a_limit_is_named_with_its_limit_in_the_gate() -> None:
    """The condition and events say which limit stopped which rule (the sandbox's words, never the rule's)."""
    from burrito_py.controllers.layer.plan_gate import gate_plan

    limit = "rule loop of policy team-a/slow exceeded the 2 s evaluation limit"
    policy = {"planSum": SUM, "verdict": "Denied", "plan": {"planSum": SUM},
              "denied": [{"policy": "team-a/slow", "rule": "loop", "addresses": [], "error": limit},
                         {"policy": "team-a/safe", "rule": "r", "addresses": ["a.b"]}]}
    gate = gate_of(policy, PLANNED)
    assert gate is not None and gate.reason == f"{limit}; team-a/safe/r (a.b)"
    outcome = gate_plan(gate, SUM, "detect")
    assert outcome.condition.message == f"denied by {limit}; team-a/safe/r (a.b)"


def planned_layer(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "app", "namespace": "ns", "annotations": {**PLANNED, **APPLIED}},
            "status": status or {}}


def test_review_plan_without_a_reading_keeps_the_recorded_verdict() -> None:
    policy = {"planSum": SUM, "verdict": "Allowed", "digest": "d", "plan": {"planSum": SUM, "classified": "Drifted"}}
    review = review_plan(planned_layer({"policy": policy}), runs("c2", "c2"), [], None, NOW)
    assert review.policy == policy and review.reading is None and review.retry_in is None
    assert review.drift is not None and review.drift["state"] == "Drifted"
    assert [e[1] for e in review.events] == ["DriftDetected"]


def test_review_plan_records_a_new_reading_and_retries_an_unreadable_plan() -> None:
    facts = plan_facts(None, SUM, None, None)
    unreadable = PlanReading(Verdict.of(SUM, []), facts, "the plan JSON cannot be read: 503", readable=False)
    review = review_plan(planned_layer(), runs("c2", "c1"), [], unreadable, NOW)
    assert review.reading is unreadable and review.retry_in == RETRY_UNREADABLE
    assert review.policy is not None and review.policy["planSum"] == SUM and "503" in review.policy["error"]
    readable = PlanReading(Verdict.of(SUM, []), facts)
    assert review_plan(planned_layer(), runs("c2", "c1"), [], readable, NOW).retry_in is None


def test_review_plan_waits_for_the_run_recording_its_plan() -> None:
    live = {"app-plan-2": RunView("app-plan-2", "plan", "Running", "c2")}
    review = review_plan(planned_layer({"policy": {"planSum": "old"}}), live, [], None, NOW)
    assert review.policy == {"planSum": "old"} and review.events == []
