"""Day-2 operations in the layer's pure decision (docs/architecture.md §5.12): an `api.burrito-py.io/operation`
request becomes one TerraformRun carrying it and its requester, once no run is live; a state change re-plans; a
`-replace`/`-target` plan goes the normal approval path; a bad request creates nothing and says why."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api import annotations as ann
from burrito_py.api.operations import STATE_ACTIONS, operation_digest
from burrito_py.api.run import TerraformRun
from burrito_py.controllers.layer.actions import LayerFacts, decide_reconcile, operation_ask
from burrito_py.controllers.layer.decide import LayerSnapshot, decide_layer
from burrito_py.controllers.layer.plan_gate import PlanGate
from burrito_py.controllers.layer.run_view import RunView, run_view
from burrito_py.controllers.layer.runs import run_body, run_name
from burrito_py.controllers.layer.status import announcements, last_result
from burrito_py.controllers.layer.sync_windows import Window
from burrito_py.controllers.layer.validation import LayerValidation
from burrito_py.kube.conditions import Cond
from burrito_py.timeutil import format_time

NOW = datetime(2026, 11, 27, 3, 0, tzinfo=UTC)
DRIFT = timedelta(minutes=20)
STATE_RM = json.dumps({"operation": "state-rm", "address": "terraform_data.a"})
REPLACE = json.dumps({"operation": "plan", "replace": ["terraform_data.a"]})
TARGET = json.dumps({"operation": "plan", "target": ["terraform_data.a"]})


def idle(**extra: str) -> dict[str, str]:
    """A layer whose plan of c1 is applied and fresh: it would do nothing."""
    return {ann.BRANCH_COMMIT: "c1", ann.RELEVANT_COMMIT: "c1", ann.PLAN_SUM: "sha256:aa", ann.PLAN_COMMIT: "c1",
            ann.PLAN_DATE: format_time(NOW - timedelta(minutes=1)), ann.PLAN_RUN: "p1/1", ann.APPLY_SUM: "sha256:aa",
            ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy", **extra}


def asked(value: str, by: str | None = "alice", **extra: str) -> dict[str, str]:
    return idle(**{ann.OPERATION: value, **({ann.OPERATION_BY: by} if by is not None else {}), **extra})


def snap(a: dict[str, str], runs: tuple[RunView, ...] = (), auto: bool = False,
         windows: tuple[Window, ...] = ()) -> LayerSnapshot:
    plan_run = next((r for r in runs if r.name == "p1"), None)
    live = next((r for r in runs if not r.terminal), None)
    return LayerSnapshot(a, runs[0] if runs else None, next((r for r in runs if r.action == "plan"), None),
                         next((r for r in runs if r.action == "apply"), None), auto, DRIFT, live, plan_run=plan_run,
                         windows=windows, layer_name="app", operation=operation_ask(a, runs),
                         # Reviewed, no policy (the gate has its own tests: test_plan_gate.py).
                         gate=PlanGate(a[ann.PLAN_SUM]) if a.get(ann.PLAN_SUM) else None)


def test_a_state_rm_request_makes_one_run_carrying_the_requester() -> None:
    d = decide_layer(snap(asked(STATE_RM)), NOW)
    assert d.create_run is not None
    assert d.create_run.action == "state-rm" and d.create_run.revision == "c1"
    assert d.create_run.operation is not None and d.create_run.operation.requested_by == "alice"
    assert d.create_run.operation.address == "terraform_data.a"
    assert d.create_run.operation_digest == operation_digest(STATE_RM, "alice")
    assert d.remove_operation and not d.remove_sync_now
    cond = next(c for c in d.conditions if c.type == "OperationAccepted")
    assert (cond.status, cond.reason) == (True, "OperationStarting")
    assert "state rm terraform_data.a, asked by alice" in cond.message


def test_the_run_body_holds_the_operation_and_its_name_fits_a_label() -> None:
    d = decide_layer(snap(asked(STATE_RM)), NOW)
    assert d.create_run is not None
    layer = {"apiVersion": ann.API_VERSION, "metadata": {"name": "a" * 80, "namespace": "ns", "uid": "u",
                                                          "annotations": asked(STATE_RM)}}
    name = run_name(layer, d.create_run, None, None)
    assert len(name) <= 63 and "-staterm-" in name
    body = run_body(layer, d.create_run, name)
    assert body["spec"]["operation"] == {"requestedBy": "alice", "address": "terraform_data.a", "replace": [],
                                         "target": []}
    assert body["metadata"]["annotations"][ann.RUN_OPERATION] == operation_digest(STATE_RM, "alice")
    run = TerraformRun.model_validate(body)  # what the API server's schema and the runner accept
    assert run.spec.action == "state-rm"
    view = run_view(body)
    assert view.operation == "state rm terraform_data.a (asked by alice)"
    assert view.operation_digest == operation_digest(STATE_RM, "alice")


def test_it_waits_for_a_live_run() -> None:
    running = RunView("p2", "plan", "Running", "c1")
    d = decide_layer(snap(asked(STATE_RM), (running,)), NOW)
    assert d.create_run is None and not d.remove_operation
    cond = next(c for c in d.conditions if c.type == "OperationAccepted")
    assert cond.reason == "WaitingForRun" and "p2" in cond.message


def test_a_request_already_run_is_only_removed() -> None:
    done = RunView("app-staterm-1", "state-rm", "Running", "c1", operation_digest=operation_digest(STATE_RM, "alice"))
    d = decide_layer(snap(asked(STATE_RM), (done,)), NOW)
    assert d.create_run is None and d.remove_operation
    finished = RunView("app-staterm-1", "state-rm", "Failed", "c1",
                       operation_digest=operation_digest(STATE_RM, "alice"))
    d = decide_layer(snap(asked(STATE_RM), (finished,)), NOW)
    assert d.create_run is None and d.remove_operation  # never a second run of one request


def test_a_bad_request_creates_nothing_and_names_the_field() -> None:
    for value, by, field in [
        (json.dumps({"operation": "state-rm", "address": "-lock=false"}), "alice", "address: '-lock=false' starts"),
        (json.dumps({"operation": "import", "address": "a.b", "id": "x\ny"}), "alice", "id: holds a newline"),
        (STATE_RM, None, "api.burrito-py.io/operation-by: missing"),
    ]:
        d = decide_layer(snap(asked(value, by)), NOW)
        assert d.create_run is None and not d.remove_operation
        cond = next(c for c in d.conditions if c.type == "OperationAccepted")
        assert (cond.status, cond.reason) == (False, "InvalidOperation")
        assert field in cond.message
        old: dict[str, Any] = {"conditions": []}
        new = {"conditions": [{"type": c.type, "reason": c.reason, "message": c.message} for c in d.conditions]}
        assert ("Warning", "InvalidOperation", cond.message) in announcements(old, new, Cond("Ready", True, "Ready"))


def test_a_replace_plan_goes_the_normal_approval_path() -> None:
    d = decide_layer(snap(asked(REPLACE)), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None
    assert d.create_run.action == "plan" and d.create_run.operation is not None
    assert d.create_run.operation.replace == ["terraform_data.a"]
    # Its plan recorded (a new sum, not applied), a manual layer waits for the approval of that sum.
    plan = RunView("p1", "plan", "Succeeded", "c1", operation="plan -replace=terraform_data.a (asked by alice)",
                   operation_digest=operation_digest(REPLACE, "alice"), relevant_commit="c1")
    after = idle(**{ann.PLAN_SUM: "sha256:bb"})
    d = decide_layer(snap(after, (plan,)), NOW)
    assert d.state == "ApplyNeeded" and d.create_run is None
    assert d.pending_plan is not None and d.pending_plan.sum == "sha256:bb"
    d = decide_layer(snap({**after, ann.APPROVE_PLAN: "sha256:bb"}, (plan,)), NOW)
    assert d.create_run is not None and d.create_run.action == "apply" and d.create_run.operation is None
    assert d.create_run.artifact_run == "p1"


def test_after_a_state_change_the_layer_plans_again() -> None:
    for action in STATE_ACTIONS:
        done = RunView("op", action, "Succeeded", "c1", operation=f"{action} x (asked by alice)")
        d = decide_layer(snap(idle(), (done,)), NOW)
        assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.action == "plan"
        fresh = next(c for c in d.conditions if c.type == "IsPlanArtifactUpToDate")
        assert fresh.reason == "OperationChangedState"
    # A failed one changed nothing the layer knows of; a force-unlock changes no resource.
    for view in (RunView("op", "state-rm", "Failed", "c1"), RunView("op", "force-unlock", "Succeeded", "c1")):
        assert decide_layer(snap(idle(), (view,)), NOW).state == "Idle"


def test_a_targeted_plan_once_applied_is_followed_by_a_whole_plan() -> None:
    plan = RunView("p1", "plan", "Succeeded", "c1", relevant_commit="c1", targeted=True)
    waiting = idle(**{ann.PLAN_SUM: "sha256:bb"})
    assert decide_layer(snap(waiting, (plan,)), NOW).state == "ApplyNeeded"  # the targeted plan waits, kept
    applied = RunView("a1", "apply", "Succeeded", "c1", artifact="p1")
    d = decide_layer(snap(idle(), (applied, plan)), NOW)
    assert d.state == "PlanNeeded" and d.create_run is not None and d.create_run.operation is None


def test_state_operations_wait_for_a_deny_window_as_applies_do() -> None:
    deny = Window.from_spec({"kind": "deny", "schedule": "0 0 * * *", "duration": "24h", "actions": ["apply"],
                             "layers": ["*"]})
    d = decide_layer(snap(asked(STATE_RM), windows=(deny,)), NOW)
    assert d.create_run is None and not d.remove_operation
    d = decide_layer(snap(asked(REPLACE), windows=(deny,)), NOW)  # a plan is not an apply
    assert d.create_run is not None


def test_last_result_says_what_the_operation_did() -> None:
    done = RunView("op", "import", "Succeeded", "c1", operation="import a.b (ID x) (asked by alice)")
    assert last_result(None, {}, done) == "Operation succeeded: import a.b (ID x) (asked by alice)"
    failed = RunView("op", "state-rm", "Failed", "c1", message="no such resource",
                     operation="state rm a.b (asked by bob)")
    assert last_result(None, {}, failed) == "Operation failed: state rm a.b (asked by bob): no such resource"


# -- properties, on the whole reconcile decision ----------------------------------------------------------------
REQUESTS = st.sampled_from([
    STATE_RM, REPLACE, TARGET,
    json.dumps({"operation": "import", "address": "terraform_data.b", "id": "b-1"}),
    json.dumps({"operation": "state-mv", "source": "terraform_data.a", "destination": "terraform_data.c"}),
    json.dumps({"operation": "force-unlock", "lockId": "6f1c"}),
    json.dumps({"operation": "state-rm", "address": "-state=/etc/passwd"}),
    json.dumps({"operation": "import", "address": "a.b", "id": "x\n-y"}),
    "not json",
])


@st.composite
def operation_facts(draw: st.DrawFn) -> LayerFacts:
    annotations = idle()
    if draw(st.booleans()):
        annotations[ann.OPERATION] = draw(REQUESTS)
    if draw(st.booleans()):
        annotations[ann.OPERATION_BY] = draw(st.sampled_from(["alice", "system:serviceaccount:t:x"]))
    if draw(st.booleans()):
        annotations[ann.SYNC_NOW] = "x"
    runs = []
    for i in range(draw(st.integers(0, 3))):
        action = draw(st.sampled_from(["plan", "apply", "state-rm", "import"]))
        state = draw(st.sampled_from(["Running", "Succeeded", "Failed"]))
        run_annotations = {}
        if draw(st.booleans()) and ann.OPERATION in annotations:
            run_annotations[ann.RUN_OPERATION] = operation_digest(annotations[ann.OPERATION],
                                                                  annotations.get(ann.OPERATION_BY))
        runs.append({"metadata": {"name": f"r{i}", "namespace": "ns", "annotations": run_annotations,
                                  "creationTimestamp": format_time(NOW - timedelta(seconds=i))},
                     "spec": {"action": action, "layer": {"name": "app", "namespace": "ns", "revision": "c1"}},
                     "status": {"state": state}})
    ready = draw(st.booleans())
    return LayerFacts(
        layer={"metadata": {"name": "app", "namespace": "ns", "uid": "uid-app", "generation": 1,
                            "annotations": annotations}, "spec": {"branch": "main"}, "status": {}},
        repository=None, validation=LayerValidation(Cond("Ready", ready, "Ready" if ready else "Invalid"),
                                                             auto_apply=draw(st.booleans()), runs_to_keep=5,
                                                             max_retries=3),
        runs=tuple(runs), now=NOW, drift_period=DRIFT, grace=timedelta(seconds=15), grace_cap=timedelta(minutes=5),
    )


@settings(max_examples=400)
@given(operation_facts())
def test_an_operation_runs_once_only_when_valid_ready_and_alone(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    annotations = f.layer["metadata"]["annotations"]
    create = actions.create
    if create is None or create.operation is None:
        return
    # Never beside a live run, never for an invalid layer, never twice for one request, always with its requester.
    assert all(r["status"]["state"] in ("Succeeded", "Failed") for r in f.runs)
    assert f.validation.ready.status
    digest = operation_digest(annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY))
    assert create.operation_digest == digest
    assert all((r["metadata"]["annotations"] or {}).get(ann.RUN_OPERATION) != digest for r in f.runs)
    assert create.operation.requested_by == annotations[ann.OPERATION_BY]
    # What reaches the runner's argv was checked: nothing looks like an option or holds a second line.
    for value in (create.operation.address, create.operation.id, *create.operation.replace):
        assert value is None or (not value.startswith("-") and "\n" not in value)
    assert actions.decision.remove_operation and not actions.decision.remove_sync_now


@settings(max_examples=400)
@given(operation_facts())
def test_a_request_is_consumed_only_when_acted_on(f: LayerFacts) -> None:
    actions = decide_reconcile(f)
    annotations = f.layer["metadata"]["annotations"]
    digest = operation_digest(annotations.get(ann.OPERATION), annotations.get(ann.OPERATION_BY))
    done = any((r["metadata"]["annotations"] or {}).get(ann.RUN_OPERATION) == digest for r in f.runs)
    if actions.decision.remove_operation:
        assert ann.OPERATION in annotations
        assert done or (actions.decision.create_run is not None and actions.decision.create_run.operation)
    if actions.settlement.remove_annotations:
        assert done and actions.decision.create_run is None
        # Removed only while still holding the value decided on: a request rewritten meanwhile is kept.
        assert all(annotations[k] == v for k, v in actions.settlement.remove_annotations)
