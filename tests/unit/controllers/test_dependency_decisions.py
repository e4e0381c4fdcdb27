"""Layer dependencies (pure): the apply rule, graph validity, the inputs digest, and what the layer decision
does with them (docs/architecture.md §5.11)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.dependencies import Dependency, dependencies_of, find_cycle
from burrito_py.controllers.layer.decide import LayerSnapshot, decide_layer
from burrito_py.controllers.layer.dependency_decisions import DependencySnapshot, UpstreamView, judge_dependencies
from burrito_py.controllers.layer.destroy import DestroySnapshot, decide_destroy
from burrito_py.controllers.layer.outputs_cache import fingerprint, read_outputs
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.run_view import RunView
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
A, B, C = ("team", "a"), ("team", "b"), ("team", "c")
OTHER = ("other", "net")


def up(key: tuple[str, str] = A, **facts: object) -> UpstreamView:
    """An upstream that satisfies everything, unless told otherwise."""
    base = {"state": "Idle", "applied_revision": "c2", "same_source": True, "apply_run": "a-apply-1/1",
            "outputs": {"vpc_id": "f-vpc-1", "cidr": "f-cidr-1"}}
    return UpstreamView(key, **{**base, **facts})  # type: ignore[arg-type]


def deps_snapshot(*upstreams: UpstreamView, dependencies: tuple[Dependency, ...] | None = None,
                  **kw: object) -> DependencySnapshot:
    if dependencies is None:
        dependencies = tuple(Dependency(u.key, (("vpc_id", "vpc_id"),)) for u in upstreams)
    return DependencySnapshot(dependent=B, branch_commit="c2", dependencies=dependencies,
                              upstreams={u.key: u for u in upstreams}, salt="uid-b", **kw)  # type: ignore[arg-type]


# (name, snapshot, reason, plan allowed, apply allowed)
TABLE = [
    ("satisfied", deps_snapshot(up()), "Satisfied", True, True),
    ("planned-only upstream (ApplyNeeded)", deps_snapshot(up(state="ApplyNeeded", applied_revision=None)),
     "UpstreamPending", True, False),
    ("planned-only upstream waiting for a plan", deps_snapshot(up(state="PlanNeeded", applied_revision=None)),
     "UpstreamPending", True, False),
    ("upstream running", deps_snapshot(up(state="Running", applied_revision=None)), "UpstreamPending", True, False),
    ("upstream failed", deps_snapshot(up(state="MaxRetriesReached", applied_revision=None)), "UpstreamFailed",
     True, False),
    ("upstream's own upstream failed", deps_snapshot(up(state="ApplyNeeded", upstream_failed=True)),
     "UpstreamFailed", True, False),
    ("stale revision (same branch)", deps_snapshot(up(applied_revision="c1")), "UpstreamPending", True, False),
    ("other branch: any applied revision", deps_snapshot(up(applied_revision="x9", same_source=False)),
     "Satisfied", True, True),
    ("never evaluated", deps_snapshot(up(state=None, applied_revision=None)), "UpstreamPending", True, False),
    ("upstream being deleted", deps_snapshot(up(deleting=True)), "UpstreamDeleting", True, False),
    ("missing upstream", deps_snapshot(dependencies=(Dependency(A),)), "DependencyNotFound", False, False),
    ("consumed output missing", deps_snapshot(up(outputs={"cidr": "f"})), "OutputMissing", False, False),
    ("outputs not read yet (never applied)", deps_snapshot(up(state="PlanNeeded", applied_revision=None,
                                                              apply_run=None, outputs=None)),
     "UpstreamPending", False, False),
    ("outputs unreadable now", deps_snapshot(up(outputs=None)), "UpstreamPending", False, False),
    ("no inputs: outputs not needed", deps_snapshot(up(outputs=None), dependencies=(Dependency(A),)),
     "Satisfied", True, True),
    ("cycle of 3", deps_snapshot(up(), cycle=(B, C, A, B)), "DependencyCycle", False, False),
    ("self-dependency", deps_snapshot(up(B), cycle=(B, B)), "DependencyCycle", False, False),
    ("cross-namespace denied", deps_snapshot(up(OTHER)), "CrossNamespaceDenied", False, False),
    ("cross-namespace allowed", deps_snapshot(up(OTHER), cross_namespace_allowed=True), "Satisfied", True, True),
    ("one of two pending", deps_snapshot(up(), up(C, state="Running", applied_revision=None)), "UpstreamPending",
     True, False),
    ("failure wins over pending", deps_snapshot(up(state="Running"), up(C, state="MaxRetriesReached")),
     "UpstreamFailed", True, False),
    ("not found wins over failure", deps_snapshot(up(state="MaxRetriesReached"),
                                                  dependencies=(Dependency(A, (("v", "vpc_id"),)), Dependency(C))),
     "DependencyNotFound", False, False),
    ("triggerAlways without inputs", deps_snapshot(up(outputs=None), dependencies=(Dependency(A, (), True),)),
     "Satisfied", True, True),
]


def test_the_table_is_big_enough() -> None:
    assert len(TABLE) >= 20


@pytest.mark.parametrize(("name", "snap", "reason", "plan", "apply"), TABLE, ids=[row[0] for row in TABLE])
def test_dependency_table(name: str, snap: DependencySnapshot, reason: str, plan: bool, apply: bool) -> None:
    verdict = judge_dependencies(snap)
    assert verdict is not None
    assert verdict.condition.reason == reason
    assert verdict.condition.status is (reason == "Satisfied")
    assert (verdict.plan_allowed, verdict.apply_allowed) == (plan, apply)
    assert len(verdict.standings) == len(snap.dependencies)
    for standing in verdict.standings:
        assert standing.satisfied is (standing.reason == "Satisfied")


def test_messages_name_the_cycle_and_the_upstream() -> None:
    cycle = judge_dependencies(deps_snapshot(up(), cycle=(B, C, A, B)))
    assert cycle is not None and cycle.condition.message == "cycle: team/b -> team/c -> team/a -> team/b"
    stale = judge_dependencies(deps_snapshot(up(applied_revision="c1")))
    assert stale is not None and "team/a has applied c1" in stale.condition.message


def test_outputs_that_cannot_be_read_say_why_on_the_dependent() -> None:
    """Before, the condition said only "not read yet" and the reason was in the controllers' log."""
    why = "cannot read them from the datastore: outputs of team/a run a-apply-1 attempt 1: datastore unavailable"
    verdict = judge_dependencies(deps_snapshot(up(outputs=None, outputs_problem=why)))
    assert verdict is not None and verdict.condition.reason == "UpstreamPending"
    assert verdict.condition.message.endswith(f"the outputs of team/a are not read yet: {why}")
    plain = judge_dependencies(deps_snapshot(up(outputs=None)))
    assert plain is not None and plain.condition.message.endswith("the outputs of team/a are not read yet")


def test_no_dependencies_no_verdict() -> None:
    assert judge_dependencies(deps_snapshot(dependencies=())) is None


def test_the_digest_follows_consumed_values_only() -> None:
    base = judge_dependencies(deps_snapshot(up()))
    assert base is not None and base.inputs_digest is not None and base.inputs_digest.startswith("sha256:")
    unconsumed = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-1", "cidr": "f-cidr-2"},
                                                     apply_run="a-apply-2/1")))
    consumed = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-2", "cidr": "f-cidr-1"})))
    assert unconsumed is not None and consumed is not None
    assert unconsumed.inputs_digest == base.inputs_digest
    assert consumed.inputs_digest != base.inputs_digest
    # triggerAlways: every upstream apply is a change.
    always = (Dependency(A, (("vpc_id", "vpc_id"),), True),)
    first = judge_dependencies(deps_snapshot(up(), dependencies=always))
    again = judge_dependencies(deps_snapshot(up(apply_run="a-apply-2/1"), dependencies=always))
    assert first is not None and again is not None and first.inputs_digest != again.inputs_digest
    # Salted per dependent: equal inputs of two layers do not show equal digests.
    other = judge_dependencies(replace(deps_snapshot(up()), salt="uid-c"))
    assert other is not None and other.inputs_digest != base.inputs_digest


def test_the_digest_never_holds_a_value() -> None:
    verdict = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-secret-fingerprint"})))
    assert verdict is not None and "f-secret-fingerprint" not in repr(verdict.inputs_digest)
    assert verdict.inputs == (("vpc_id", A, "vpc_id"),)
    assert verdict.consumed == ((A, "a-apply-1/1"),)


def test_find_cycle() -> None:
    graph = {B: (A,), A: (C,), C: (B,)}
    assert find_cycle(B, graph) == (B, A, C, B)
    assert find_cycle(A, {A: (A,)}) == (A, A)
    assert find_cycle(B, {B: (A, C), A: (C,), C: ()}) is None  # a diamond is no cycle
    # A layer downstream of a cycle is not in it.
    assert find_cycle(("team", "d"), {("team", "d"): (A,), A: (C,), C: (A,)}) is None


def test_a_long_chain_is_walked_in_linear_time() -> None:
    """A tenant's chain of 20,000 layers, each depending on the next: the walk rebuilt the set of its path at every
    step (quadratic: ~0.5 s at 4,000 layers, ~12 s at 20,000, on every reconcile of the chain's first layer)."""
    import time

    chain = [("team", f"l{i}") for i in range(20_000)]
    graph = {layer: (chain[i + 1],) for i, layer in enumerate(chain[:-1])}
    started = time.process_time()
    assert find_cycle(chain[0], graph) is None
    assert find_cycle(chain[0], {**graph, chain[-1]: (chain[0],)}) == (*chain, chain[0])
    assert time.process_time() - started < 2.0  # CPU time, not wall time: ~0.05 s here


def test_dependencies_of_defaults_the_namespace_and_merges_duplicates() -> None:
    spec = {"dependsOn": [{"name": "a", "inputs": {"vpc": "vpc_id"}}, {"name": "net", "namespace": "other"},
                          {"name": "a", "inputs": {"cidr": "cidr"}, "triggerAlways": True}]}
    assert dependencies_of(spec, "team") == (
        Dependency(A, (("cidr", "cidr"), ("vpc", "vpc_id")), True),
        Dependency(OTHER),
    )


# -- the layer decision with dependencies -------------------------------------------------------------
def layer(*, applied: bool = False, digest: str | None = None, auto: bool = True) -> LayerSnapshot:
    a = {ann.BRANCH_COMMIT: "c2", ann.RELEVANT_COMMIT: "c2", ann.PLAN_SUM: "sha256:bb", ann.PLAN_COMMIT: "c2",
         ann.PLAN_DATE: format_time(NOW - timedelta(minutes=1)), ann.PLAN_RUN: "b-plan-1/1",
         ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy."}
    if applied:
        a[ann.APPLY_SUM] = "sha256:bb"
    plan_run = RunView("b-plan-1", "plan", "Succeeded", "c2", inputs_digest=digest)
    return LayerSnapshot(a, plan_run, plan_run, None, auto, timedelta(minutes=20), plan_run=plan_run,
                         gate=PlanGate("sha256:bb"), plan_inputs_digest=digest)


def with_deps(snap: LayerSnapshot, deps: DependencySnapshot) -> LayerSnapshot:
    return replace(snap, dependencies=judge_dependencies(deps))


def test_a_planned_only_upstream_never_lets_the_dependent_apply() -> None:
    verdict = judge_dependencies(deps_snapshot(up(state="ApplyNeeded", applied_revision=None)))
    assert verdict is not None
    d = decide_layer(replace(layer(digest=verdict.inputs_digest), dependencies=verdict), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None
    assert any(c.type == "DependenciesSatisfied" and c.reason == "UpstreamPending" for c in d.conditions)
    assert d.applied_revision is None


def test_a_satisfied_dependent_applies_with_its_digest() -> None:
    verdict = judge_dependencies(deps_snapshot(up()))
    assert verdict is not None
    d = decide_layer(replace(layer(digest=verdict.inputs_digest), dependencies=verdict), NOW)
    assert d.create_run is not None and d.create_run.action == "apply"
    assert d.create_run.inputs_digest == verdict.inputs_digest
    assert d.inputs_digest == verdict.inputs_digest


def test_a_changed_consumed_output_plans_again_with_the_new_digest() -> None:
    old = judge_dependencies(deps_snapshot(up()))
    new = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-2"}, apply_run="a-apply-2/1")))
    assert old is not None and new is not None
    d = decide_layer(replace(layer(applied=True, digest=old.inputs_digest), dependencies=new), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.action == "plan"
    assert d.create_run.inputs_digest == new.inputs_digest
    planned = next(c for c in d.conditions if c.type == "IsLastRelevantCommitPlanned")
    assert planned.reason == "InputsChanged"
    # An unconsumed output's change: nothing to do.
    same = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-1", "cidr": "x"}, apply_run="a-apply-3/1")))
    assert same is not None
    idle = decide_layer(replace(layer(applied=True, digest=old.inputs_digest), dependencies=same), NOW)
    assert idle.state == "Idle" and idle.create_run is None and idle.applied_revision == "c2"


def test_without_known_outputs_nothing_is_planned() -> None:
    verdict = judge_dependencies(deps_snapshot(up(state="PlanNeeded", applied_revision=None, apply_run=None,
                                                  outputs=None)))
    assert verdict is not None and verdict.inputs_digest is None
    new_layer = LayerSnapshot({ann.BRANCH_COMMIT: "c2", ann.RELEVANT_COMMIT: "c2"}, None, None, None, True,
                              timedelta(minutes=20), dependencies=verdict)
    d = decide_layer(new_layer, NOW)
    assert d.state == "PlanNeeded" and d.create_run is None


def test_a_cycle_stops_every_run() -> None:
    verdict = judge_dependencies(deps_snapshot(up(), cycle=(B, A, B)))
    assert verdict is not None
    d = decide_layer(replace(layer(), dependencies=verdict), NOW)
    assert d.create_run is None
    sync = replace(layer(), annotations={**layer().annotations, ann.SYNC_NOW: "x"}, dependencies=verdict)
    assert decide_layer(sync, NOW).create_run is None


def test_an_upstream_pending_dependent_may_still_plan() -> None:
    """Drift checks and new commits plan with the last known outputs."""
    verdict = judge_dependencies(deps_snapshot(up(state="Running", applied_revision=None)))
    assert verdict is not None
    stale = replace(layer(applied=True, digest=verdict.inputs_digest), dependencies=verdict)
    stale = replace(stale, annotations={**stale.annotations, ann.PLAN_DATE: format_time(NOW - timedelta(hours=2))})
    d = decide_layer(stale, NOW)
    assert d.create_run is not None and d.create_run.action == "plan"


def test_a_destroy_waits_for_live_dependents() -> None:
    a = {ann.BRANCH_COMMIT: "c2"}
    waiting = decide_destroy(DestroySnapshot(a, (), 1, True, dependents=("team/b",)))
    assert waiting.create_run is None and not waiting.remove_finalizer
    assert next(c for c in waiting.conditions if c.type == "HasDestroyFailed").reason == "WaitingForDependents"
    free = decide_destroy(DestroySnapshot(a, (), 1, True))
    assert free.create_run is not None and free.create_run.destroy
    # Without destroyResourcesOnDeletion nothing waits: the layer just goes.
    assert decide_destroy(DestroySnapshot(a, (), 1, False, dependents=("team/b",))).remove_finalizer


# -- property: a dependent never applies before its upstream applied a revision at least as new -------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["push", "deliver_a", "deliver_b", "step_a", "step_b", "finish_a", "finish_b"]),
                max_size=60))
def test_a_dependent_never_applies_before_its_upstream(actions: list[str]) -> None:
    """A small world of one branch (commits 0, 1, 2, …), an upstream A and a dependent B following it. Each layer
    sees the branch head late (deliver_*), plans at the head it sees, then applies; B's apply is gated by the
    real decision. Whenever B applies a plan of commit p, A's latest apply is of a commit ≥ p."""
    head = 0
    seen = {"a": 0, "b": 0}
    planned: dict[str, int | None] = {"a": None, "b": None}
    running: dict[str, str | None] = {"a": None, "b": None}
    applied: dict[str, int | None] = {"a": None, "b": None}

    def a_view() -> UpstreamView:
        idle = running["a"] is None and planned["a"] == seen["a"] and applied["a"] == planned["a"]
        return UpstreamView(A, state="Idle" if idle else "ApplyNeeded",
                            applied_revision=str(seen["a"]) if idle else None, same_source=True)

    for action in actions:
        if action == "push":
            head += 1
        elif action.startswith("deliver_"):
            seen[action[-1]] = head
        elif action.startswith("step_"):
            name = action[-1]
            if running[name] is not None:
                continue
            if planned[name] != seen[name]:
                running[name] = "plan"
            elif applied[name] != planned[name]:
                if name == "b":
                    verdict = judge_dependencies(DependencySnapshot(B, str(seen["b"]), (Dependency(A),),
                                                                    {A: a_view()}))
                    assert verdict is not None
                    if not verdict.apply_allowed:
                        continue
                    assert applied["a"] is not None and planned["b"] is not None
                    assert applied["a"] >= planned["b"], (applied, planned)
                running[name] = "apply"
        else:
            name = action[-1]
            if running[name] == "plan":
                planned[name] = seen[name]
            elif running[name] == "apply":
                applied[name] = planned[name]
            running[name] = None


def test_outputs_are_read_with_their_sensitivity_and_fingerprinted() -> None:
    raw = json.dumps({"vpc_id": {"value": "vpc-1", "type": "string", "sensitive": False},
                      "password": {"value": "hunter2-long", "type": "string", "sensitive": True}}).encode()
    held = read_outputs(raw, "a-apply-1/1")
    assert held is not None and held.apply_run == "a-apply-1/1"
    assert held.values == {"vpc_id": "vpc-1", "password": "hunter2-long"} and held.sensitive == {"password"}
    assert held.fingerprints["vpc_id"] == fingerprint("vpc-1") and "hunter2" not in repr(held.fingerprints)
    assert read_outputs(b"not json", "x/1") is None and read_outputs(b'{"a": 1}', "x/1") is None


# -- Terragrunt units (§9.1): outputs terragrunt reads itself, and the unit's own problems ------------------------
def test_watched_outputs_key_the_plan_without_becoming_variables() -> None:
    watched = (Dependency(A, watched=("vpc_id",)),)
    base = judge_dependencies(deps_snapshot(up(), dependencies=watched))
    assert base is not None and base.inputs_digest is not None and base.inputs == () and base.apply_allowed
    unwatched = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-1", "cidr": "f-cidr-2"},
                                                    apply_run="a-apply-2/1"), dependencies=watched))
    changed = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-2", "cidr": "f-cidr-1"}),
                                               dependencies=watched))
    assert unwatched is not None and changed is not None
    assert unwatched.inputs_digest == base.inputs_digest and changed.inputs_digest != base.inputs_digest
    # The whole outputs object: any output's change plans again.
    every = (Dependency(A, watch_all=True),)
    first = judge_dependencies(deps_snapshot(up(), dependencies=every))
    second = judge_dependencies(deps_snapshot(up(outputs={"vpc_id": "f-vpc-1", "cidr": "f-cidr-2"}),
                                              dependencies=every))
    assert first is not None and second is not None and first.inputs_digest != second.inputs_digest
    # Never without the outputs: no plan before they are read, and a watched output the apply lacks is missing.
    unread = judge_dependencies(deps_snapshot(up(outputs=None), dependencies=every))
    assert unread is not None and not unread.plan_allowed and unread.condition.reason == "UpstreamPending"
    gone = judge_dependencies(deps_snapshot(up(outputs={"cidr": "f"}), dependencies=watched))
    assert gone is not None and gone.condition.reason == "OutputMissing" and not gone.apply_allowed


@pytest.mark.parametrize("reason", ["PathOutsideRepository", "TerragruntConfigInvalid", "DependencyNotFound"])
def test_a_unit_problem_stops_every_run_and_names_its_cause(reason: str) -> None:
    message = 'live/app/terragrunt.hcl: dependency "evil": config_path ../../../etc: leads above the repository root'
    for dependencies in ((), (Dependency(A, watched=("vpc_id",)),)):
        verdict = judge_dependencies(deps_snapshot(up(), dependencies=dependencies, problems=((reason, message),)))
        assert verdict is not None
        assert (verdict.plan_allowed, verdict.apply_allowed) == (False, False)
        assert (verdict.condition.status, verdict.condition.reason, verdict.condition.message) == (False, reason,
                                                                                                   message)
