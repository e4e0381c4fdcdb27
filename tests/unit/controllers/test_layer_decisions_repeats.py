"""Issue 25 item 2: an apply that always fails is applied once (with its retries), not once per drift period.

Every drift check makes a new plan with a new sum, and a new sum used to lift the apply's exhaustion. Now a plan is
applied after a failed apply only when something changed: a new relevant commit, other upstream inputs, other
changes (the digest of what the apply would do, plans/changes.py), or a person asking (`sync-now`, an approval).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.controllers.layer.decide import Exhaustion, LayerDecision, LayerSnapshot, decide_layer
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.plan_review import gate_of, plan_facts
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.plans.changes import UNKNOWN, changes_digest, planned_values
from burrito_py.plans.model import parse_plan
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)
DRIFT = timedelta(seconds=20)
DIGEST = "sha256:" + "d" * 64
OTHER_DIGEST = "sha256:" + "e" * 64


# -- the changes digest ---------------------------------------------------------------------------------------
def resource(address: str, actions: list[str], before: Any = None, after: Any = None, unknown: Any = None,
             **extra: Any) -> dict[str, Any]:
    kind, _, name = address.partition(".")
    return {"address": address, "mode": "managed", "type": kind, "name": name, "provider_name": "terraform",
            "change": {"actions": actions, "before": before, "after": after, "after_unknown": unknown or {},
                       **extra}}


def plan(*changes: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {"format_version": "1.2", "terraform_version": "1.9.0", "resource_changes": list(changes), **top}


TAINTED = resource("terraform_data.this", ["delete", "create"], before={"id": "1", "input": "always fails"},
                   after={"input": "always fails", "triggers_replace": None}, unknown={"id": True, "output": True},
                   action_reason="replace_because_tainted")


def digest(document: dict[str, Any]) -> str:
    return changes_digest(parse_plan(document))


def test_two_drift_plans_of_an_always_failing_apply_have_one_digest():
    """What differs between two plans of the same code: timestamps, Terraform's version, the refreshed values an
    attribute changes from, drift outside Terraform, data source reads. None of it is what the apply would do."""
    first = plan(TAINTED, timestamp="2026-11-23T10:00:00Z")
    later = plan(
        {**TAINTED, "change": {**TAINTED["change"], "before": {"id": "2", "input": "always fails"}}},
        resource("data.http.clock", ["read"], after={"body": "10:00:20"}),
        terraform_version="1.9.1", timestamp="2026-11-23T10:00:20Z",
        resource_drift=[resource("terraform_data.this", ["update"], before={"id": "1"}, after={"id": "2"})],
    )
    assert digest(first) == digest(later)


def test_what_the_apply_would_do_changes_the_digest():
    base = plan(resource("aws_s3_bucket.logs", ["update"], before={"acl": "private", "tags": {"a": "1"}},
                         after={"acl": "public", "tags": {"a": "1"}}))
    other_value = plan(resource("aws_s3_bucket.logs", ["update"], before={"acl": "private", "tags": {"a": "1"}},
                                after={"acl": "log-delivery", "tags": {"a": "1"}}))
    other_action = plan(resource("aws_s3_bucket.logs", ["delete", "create"], before={"acl": "private"},
                                 after={"acl": "public", "tags": {"a": "1"}}))
    more = plan(base["resource_changes"][0], resource("aws_s3_bucket.more", ["create"], after={"acl": "private"}))
    assert len({digest(base), digest(other_value), digest(other_action), digest(more)}) == 4
    # An attribute that stays as it is (`tags`) is not part of an update's digest: its refreshed value may move.
    quiet = plan(resource("aws_s3_bucket.logs", ["update"], before={"acl": "private", "tags": {"a": "9"}},
                          after={"acl": "public", "tags": {"a": "9"}}))
    assert digest(quiet) == digest(base)


def test_planned_values_name_the_paths_and_unknowns():
    change = parse_plan(plan(TAINTED)).resource_changes[0]
    assert planned_values(change) == {"/id": UNKNOWN, "/output": UNKNOWN, "/triggers_replace": None}
    create = parse_plan(plan(resource("x.y", ["create"], after={"a": [1, {"b/c": 2}]}))).resource_changes[0]
    assert planned_values(create) == {"/a/0": 1, "/a/1/b~1c": 2}
    gone = parse_plan(plan(resource("x.y", ["delete"], before={"a": 1}))).resource_changes[0]
    assert planned_values(gone) == {}


JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.text("ab/~", max_size=3),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text("ab", max_size=2), inner,
                                                                                   max_size=3), max_leaves=8)
CHANGES = st.lists(st.tuples(st.sampled_from(["create", "update", "delete", "replace"]),
                             st.dictionaries(st.text("abc", min_size=1, max_size=2), JSON, max_size=3),
                             st.dictionaries(st.text("abc", min_size=1, max_size=2), JSON, max_size=3)),
                   max_size=4)
ACTIONS = {"create": ["create"], "update": ["update"], "delete": ["delete"], "replace": ["delete", "create"]}


def _plan_of(changes: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> dict[str, Any]:
    return plan(*(resource(f"t.r{i}", ACTIONS[action], before if action != "create" else None,
                           after if action != "delete" else None) for i, (action, before, after) in enumerate(changes)))


@settings(max_examples=200)
@given(CHANGES, st.randoms(use_true_random=False))
def test_the_digest_ignores_order_bookkeeping_reads_and_drift(changes: list[Any], rng: Any):
    document = _plan_of(changes)
    shuffled = copy.deepcopy(document)
    rng.shuffle(shuffled["resource_changes"])
    shuffled["resource_changes"].append(resource("data.t.read", ["read"], after={"now": rng.random()}))
    shuffled["resource_changes"].append(resource("t.same", ["no-op"], before={"a": 1}, after={"a": 1}))
    shuffled |= {"terraform_version": "9.9.9", "timestamp": str(rng.random()),
                 "resource_drift": [resource("t.r0", ["update"], before={"x": 1}, after={"x": rng.random()})]}
    assert digest(shuffled) == digest(document)


@settings(max_examples=200)
@given(CHANGES, st.dictionaries(st.text("abc", min_size=1, max_size=2), JSON, min_size=1, max_size=3))
def test_another_created_value_is_another_digest(changes: list[Any], extra: dict[str, Any]):
    document = _plan_of(changes)
    created = plan(*document["resource_changes"], resource("t.new", ["create"], after=extra))
    assert digest(created) != digest(document)


# -- the decision ---------------------------------------------------------------------------------------------
FAILED = Exhaustion("app-apply-1", "sha256:aa", "RetryLimitReached", "exit 1", "c1", changes_digest=DIGEST)


def snap(*, plan_sum: str = "sha256:bb", relevant: str = "c1", changes: str | None = DIGEST,
         failed: Exhaustion | None = FAILED, inputs: str | None = None, sync_requested: bool = False,
         approval: str | None = None, auto: bool = True, plan_age: timedelta = timedelta(seconds=1)) -> LayerSnapshot:
    """A drift plan (sum `plan_sum`, made by plan run app-plan-2 at c1) after `failed`, the apply of sha256:aa."""
    a = {ann.BRANCH_COMMIT: relevant, ann.RELEVANT_COMMIT: relevant, ann.PLAN_SUM: plan_sum,
         ann.PLAN_COMMIT: relevant, ann.PLAN_DATE: format_time(NOW - plan_age), ann.PLAN_RUN: "app-plan-2/1",
         ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 1 to destroy"}
    if approval is not None:
        a[ann.APPROVE_PLAN] = approval
    plan_run = RunView("app-plan-2", "plan", "Succeeded", relevant, relevant_commit=relevant,
                       inputs_digest=inputs, sync_requested=sync_requested)
    apply_run = RunView(failed.run, "apply", "Failed", "c1", message="exit 1", plan_sum=failed.key,
                        relevant_commit=failed.relevant_commit, changes_digest=failed.changes_digest,
                        inputs_digest=failed.inputs_digest) if failed is not None else None
    runs = [plan_run, *([apply_run] if apply_run is not None else [])]
    return LayerSnapshot(a, runs[0], plan_run, apply_run, auto, DRIFT, None, plan_run=plan_run,
                         exhausted_apply=failed, layer_name="app", gate=PlanGate(plan_sum, changes_digest=changes),
                         plan_inputs_digest=inputs)


def applies(d: LayerDecision) -> bool:
    return d.create_run is not None and d.create_run.action == "apply"


def test_a_drift_plan_making_the_same_changes_is_not_applied_again():
    d = decide_layer(snap(), NOW)
    assert d.state == "MaxRetriesReached" and d.create_run is None and d.pending_plan is None
    cond = next(c for c in d.conditions if c.type == "HasLastRunReachedRetryLimit")
    assert cond.status and "would make the same changes" in cond.message and "sha256:bb" in cond.message
    assert f"{ann.APPROVE_PLAN}=sha256:bb" in cond.message and ann.SYNC_NOW in cond.message
    assert d.exhausted_apply == FAILED, "the record stands"


def test_the_next_drift_check_still_plans():
    """Drift detection goes on (a fix outside Terraform, a new provider answer): only the apply is held back."""
    d = decide_layer(snap(plan_age=DRIFT * 2), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.action == "plan"


def test_each_thing_that_changes_something_lifts_it():
    assert applies(decide_layer(snap(changes=OTHER_DIGEST), NOW)), "other changes"
    assert applies(decide_layer(snap(relevant="c2"), NOW)), "a new relevant commit"
    assert applies(decide_layer(snap(inputs="sha256:new-outputs"), NOW)), "other upstream outputs"
    assert applies(decide_layer(snap(sync_requested=True), NOW)), "a sync-now plan"
    approved = decide_layer(snap(approval="sha256:bb"), NOW)
    assert applies(approved) and approved.remove_approval, "an approval of this very plan, consumed by its apply"
    assert not applies(decide_layer(snap(approval="sha256:zz"), NOW)), "an approval of another plan lifts nothing"


def test_the_same_plan_is_never_applied_twice_whatever_is_asked():
    same = decide_layer(snap(plan_sum="sha256:aa", sync_requested=True, approval="sha256:aa"), NOW)
    assert same.state == "MaxRetriesReached" and same.create_run is None


def test_unknown_facts_never_hold_a_plan_back():
    """A record or a review made before digests existed (an upgrade), or a plan the review could not read."""
    assert applies(decide_layer(snap(failed=replace(FAILED, changes_digest=None)), NOW))
    assert applies(decide_layer(snap(changes=None), NOW))
    assert applies(decide_layer(snap(failed=replace(FAILED, relevant_commit=None)), NOW))


def test_a_stale_apply_still_re_plans_once_and_that_plan_is_applied():
    stale = replace(FAILED, reason="StalePlan", stale_count=1)
    assert applies(decide_layer(snap(failed=stale), NOW)), "the stale re-plan's apply is the failed apply's retry"
    twice = replace(FAILED, reason="StalePlan", stale_count=2)
    assert decide_layer(snap(failed=twice), NOW).state == "MaxRetriesReached"


def test_under_manual_approval_the_repeat_waits_for_an_approval_of_its_sum():
    held = decide_layer(snap(auto=False), NOW)
    assert held.state == "MaxRetriesReached" and held.pending_plan is None
    approved = decide_layer(snap(auto=False, approval="sha256:bb"), NOW)
    assert applies(approved) and approved.remove_approval


def test_the_apply_run_carries_the_digest_its_exhaustion_will_be_keyed_on():
    d = decide_layer(snap(failed=None, changes=DIGEST), NOW)
    assert d.create_run is not None and d.create_run.changes_digest == DIGEST


def test_the_review_records_the_digest_and_the_gate_reads_it_back():
    model = parse_plan(plan(TAINTED))
    facts = plan_facts(model, "sha256:bb", None, None)
    assert facts["changesDigest"] == changes_digest(model)
    gate = gate_of({"planSum": "sha256:bb", "verdict": "Allowed", "plan": facts}, {ann.PLAN_SUM: "sha256:bb"})
    assert gate is not None and gate.changes_digest == changes_digest(model)


@settings(max_examples=300)
@given(st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans(), st.booleans())
def test_a_plan_after_a_failed_apply_is_applied_exactly_when_something_changed(
        same_changes: bool, same_commit: bool, same_inputs: bool, sync: bool, approved: bool, auto: bool):
    d = decide_layer(snap(changes=DIGEST if same_changes else OTHER_DIGEST, relevant="c1" if same_commit else "c2",
                          inputs=None if same_inputs else "sha256:x", sync_requested=sync,
                          approval="sha256:bb" if approved else None, auto=auto), NOW)
    something_changed = not (same_changes and same_commit and same_inputs) or sync or approved
    wanted = something_changed and (auto or approved)
    assert applies(d) == wanted, d


@settings(max_examples=100)
@given(st.integers(1, 60), st.lists(st.booleans(), min_size=60, max_size=60))
def test_an_always_failing_apply_is_applied_once_whatever_the_number_of_drift_checks(periods: int,
                                                                                        stale: list[bool]):
    """A small simulation of the loop: every drift check plans (a new sum, the same changes); every apply fails
    (sometimes on a stale retry). Over any number of periods: the first apply, the stale re-plan's apply at most
    (the bounded retry of §5.1), and no other."""
    failed: Exhaustion | None = None
    applies_made = 0
    plan_sum = "sha256:p0"
    for period in range(periods * 3):  # several reconciles per period: plan, then apply, then at rest
        s = snap(plan_sum=plan_sum, failed=failed)
        d = decide_layer(s, NOW)
        if d.create_run is not None and d.create_run.action == "plan":
            plan_sum = f"sha256:p{period + 1}"  # a new plan, with a new sum and the same changes
        elif d.create_run is not None and d.create_run.action == "apply":
            applies_made += 1
            reason = "StalePlan" if stale[period % len(stale)] else "RetryLimitReached"
            count = (failed.stale_count if failed is not None and failed.reason == "StalePlan" else 0) + 1
            failed = Exhaustion(f"app-apply-{applies_made}", plan_sum, reason, "exit 1", "c1",
                                count if reason == "StalePlan" else 0, d.create_run.changes_digest)
        else:  # at rest until the next drift check: the plan ages past the period
            plan_sum = f"sha256:p{period + 1}"
    assert applies_made <= 2, applies_made
