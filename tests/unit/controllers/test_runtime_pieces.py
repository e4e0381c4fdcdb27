from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.controllers.layer.actions import snapshot
from burrito_py.controllers.layer.decide import CreateRun, decide_layer
from burrito_py.controllers.layer.run_view import run_view
from burrito_py.controllers.layer.runs import run_body, runs_to_delete
from burrito_py.controllers.layer.status import last_result
from burrito_py.controllers.layer.validation import validate_layer
from burrito_py.controllers.repository.decide import sync_requested
from burrito_py.controllers.run.leases import layer_lease_name
from burrito_py.controllers.run.reconcile import _override_runner_spec
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.inventory import Inventory
from burrito_py.kube.scheduler import Scheduler, slot_released
from burrito_py.timeutil import format_time, format_time_precise

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def obj(name: str, rv: int = 1, ns: str = "default", labels: dict[str, str] | None = None, **rest: object):
    return {"metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv), "labels": labels or {},
                         "uid": f"uid-{name}", "creationTimestamp": format_time(NOW)}, **rest}


def test_inventory_keeps_the_newest_body_and_indexes_runs_by_layer():
    inv = Inventory()
    assert inv.runs.observe(obj("r1", 5, labels={ann.LABEL_LAYER: "app"}))
    assert not inv.runs.observe(obj("r1", 4, labels={ann.LABEL_LAYER: "app"})), "an older event never wins"
    inv.runs.observe(obj("r2", 6, labels={ann.LABEL_LAYER: "app"}))
    inv.runs.observe(obj("r3", 7, labels={ann.LABEL_LAYER: "other"}))
    assert {r["metadata"]["name"] for r in inv.runs_of_layer("default", "app")} == {"r1", "r2"}
    inv.runs.observe(obj("r2", 8, labels={ann.LABEL_LAYER: "other"}))  # relabelled
    assert [r["metadata"]["name"] for r in inv.runs_of_layer("default", "app")] == ["r1"]
    inv.runs.forget(obj("r1", 9))
    assert inv.runs_of_layer("default", "app") == []


def test_runs_created_in_one_second_are_ordered_by_the_controllers_stamp():
    # The regression behind duplicate applies: `app-plan-…` sorted after `app-apply-…` by name.
    inv = Inventory()
    plan = obj("app-plan-zzz", 1, labels={ann.LABEL_LAYER: "app"})
    plan["metadata"]["annotations"] = {ann.RUN_CREATED_AT: "2026-11-22T12:00:00.100000Z"}
    apply = obj("app-apply-aaa", 2, labels={ann.LABEL_LAYER: "app"})
    apply["metadata"]["annotations"] = {ann.RUN_CREATED_AT: "2026-11-22T12:00:00.900000Z"}
    inv.runs.observe(plan)
    inv.runs.observe(apply)
    assert [r["metadata"]["name"] for r in inv.runs_of_layer("default", "app")] == ["app-apply-aaa", "app-plan-zzz"]


def test_a_live_run_anywhere_in_the_history_blocks_a_new_run():
    a = {ann.BRANCH_COMMIT: "c1", ann.RELEVANT_COMMIT: "c1", ann.PLAN_SUM: "sha256:aa", ann.PLAN_COMMIT: "c1",
         ann.PLAN_DATE: format_time(NOW), ann.PLAN_RUN: "app-plan-zzz/1"}
    layer = obj("app", annotations=a)
    layer["metadata"]["annotations"] = a
    plan = obj("app-plan-zzz", spec={"action": "plan", "layer": {"revision": "c1"}}, status={"state": "Succeeded"})
    apply = obj("app-apply-aaa", spec={"action": "apply", "layer": {"revision": "c1"}}, status={"state": "Running"})
    for order in ([plan, apply], [apply, plan]):
        d = decide_layer(snapshot(layer, order, True, timedelta(minutes=20)), NOW)
        assert d.state == "Running" and d.create_run is None


def test_merge_conditions_keeps_transition_time_unless_status_changes():
    first = merge_conditions(None, [Cond("A", True, "x")], NOW)
    later = NOW + timedelta(minutes=5)
    same = merge_conditions(first, [Cond("A", True, "x")], later)
    assert same == first
    flipped = merge_conditions(first, [Cond("A", False, "y")], later)
    assert flipped[0]["lastTransitionTime"] == format_time(later)


def test_run_body_names_owner_labels_and_artifact():
    layer = obj("app", apiVersion=ann.API_VERSION)
    body = run_body(layer, CreateRun("apply", "c1", "app-plan-x", 2))
    assert body["metadata"]["generateName"] == "app-apply-"
    assert body["metadata"]["labels"] == {ann.LABEL_LAYER: "app"}
    assert body["metadata"]["annotations"][ann.RUN_CREATED_AT].endswith("Z")
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-app"
    assert body["spec"] == {"action": "apply", "layer": {"name": "app", "namespace": "default", "revision": "c1"},
                            "artifact": {"run": "app-plan-x", "attempt": 2}}


def test_history_keeps_live_runs_and_the_plan_an_apply_needs():
    runs = [obj(f"r{i}", spec={"action": "plan", "layer": {"revision": "c"}}, status={"state": s})
            for i, s in enumerate(["Succeeded", "Running", "Succeeded", "Failed", "Succeeded"])]
    doomed = runs_to_delete(runs, 2, {ann.PLAN_RUN: "r4/1"})
    assert [r["metadata"]["name"] for r in doomed] == ["r2", "r3"]
    # The last apply's run is kept too: drift classification reads its relevant commit.
    doomed = runs_to_delete(runs, 2, {ann.PLAN_RUN: "r4/1", ann.APPLY_RUN: "r3/1"})
    assert [r["metadata"]["name"] for r in doomed] == ["r2"]


def test_last_result_texts():
    summary = {ann.PLAN_SUMMARY: "Plan: 1 to add, 0 to change, 0 to destroy"}
    plan = run_view(obj("p", spec={"action": "plan"}, status={"state": "Succeeded"}))
    apply = run_view(obj("a", spec={"action": "apply"}, status={"state": "Succeeded"}))
    failed = run_view(obj("f", spec={"action": "plan"}, status={"state": "Failed", "conditions": [
        {"type": "HasSucceeded", "status": "False", "message": "Error: Unsupported block type"}]}))
    assert last_result(None, summary, plan) == "Plan: 1 to add, 0 to change, 0 to destroy"
    assert last_result(None, summary, apply) == "Applied: Plan: 1 to add, 0 to change, 0 to destroy"
    assert last_result(None, summary, failed) == "Plan failed: Error: Unsupported block type"
    assert last_result("kept", summary, None) == "kept"
    # The controllers' own reading of the plan wins over the runner's annotation, for that plan only.
    reviewed = {"planSum": "sha256:aa", "summary": "Plan: 0 to add, 0 to change, 2 to destroy"}
    assert last_result(None, {**summary, ann.PLAN_SUM: "sha256:aa"}, plan, reviewed) == reviewed["summary"]
    assert last_result(None, {**summary, ann.PLAN_SUM: "sha256:bb"}, plan, reviewed) == summary[ann.PLAN_SUMMARY]


def test_runner_pod_follows_design_and_overrides():
    run = obj("app-plan-abc", apiVersion=ann.API_VERSION, spec={"action": "plan"})
    layer = obj("app")
    override = _override_runner_spec(
        {"spec": {"overrideRunnerSpec": {"env": [{"name": "TF_LOG", "value": "DEBUG"}],
                                         "metadata": {"labels": {"team": "a"}}}}},
        {"spec": {"overrideRunnerSpec": {"image": "custom:1", "serviceAccountName": "tf",
                                         "metadata": {"labels": {"cost": "x", "team": "repo"}}}}},
    )
    pod = build_runner_pod(run, layer, 2, RunnerDefaults("img:0", "runner", "http://ds"), override)
    assert pod["metadata"]["name"] == pod_name("app-plan-abc", 2) == "app-plan-abc-2"
    assert pod["metadata"]["labels"] == {"team": "a", "cost": "x", ann.LABEL_COMPONENT: "runner",
                                         ann.LABEL_RUN: "app-plan-abc", ann.LABEL_LAYER: "app",
                                         ann.LABEL_LEASE: layer_lease_name(layer, run)}
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "uid-app-plan-abc"
    spec = pod["spec"]
    assert spec["restartPolicy"] == "Never" and spec["serviceAccountName"] == "tf"
    container = spec["containers"][0]
    assert container["name"] == "runner" and container["image"] == "custom:1"
    assert container["command"] == ["burrito-py", "runner", "start"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["BURRITO_RUNNER_RUN"] == "app-plan-abc" and env["BURRITO_RUNNER_ACTION"] == "plan"
    assert env["BURRITO_RUNNER_ATTEMPT"] == "2" and env["BURRITO_DATASTORE_URL"] == "http://ds"
    assert env["TF_LOG"] == "DEBUG" and env["BURRITO_RUNNER_LAYER_NAMESPACE"] == "default"
    token = spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
    assert token["audience"] == "burrito-py"
    assert container["volumeMounts"][0]["mountPath"] == "/var/run/secrets/burrito-py"


def test_settings_inherit_layer_then_repository_then_default():
    settings = ControllerSettings(max_retries=3, runs_to_keep=5)
    layer = {"metadata": {"namespace": "default"},
             "spec": {"repository": {"name": "r"}, "remediationStrategy": {"autoApply": True}}}
    repo = {"spec": {"remediationStrategy": {"autoApply": False, "onError": {"maxRetries": 1}},
                     "runHistoryPolicy": {"runs": 2}}}
    v = validate_layer(layer, repo, settings)
    assert (v.auto_apply, v.max_retries, v.runs_to_keep, v.ready.status) == (True, 1, 2, True)
    v = validate_layer(layer, None, settings)
    assert (v.max_retries, v.runs_to_keep, v.ready.reason) == (3, 5, "RepositoryNotFound")
    assert "spec.repository" in v.ready.message


def test_branch_not_found_is_reported_from_the_repository_status():
    layer = {"metadata": {"namespace": "default"}, "spec": {"repository": {"name": "r"}, "branch": "nope"}}
    repo = {"spec": {}, "status": {"branches": [
        {"name": "nope", "lastSyncStatus": 'branch "nope" does not exist in file:///x'}]}}
    v = validate_layer(layer, repo, ControllerSettings())
    assert v.ready.reason == "BranchNotFound" and "spec.branch" in v.ready.message


def test_an_unknown_engine_is_a_ready_false_condition_naming_both_switches():
    """Both engines switched on at one level: which one was meant is unknown, so the layer is not Ready (issue 27);
    a level that switches one off is fine, whatever the other level says."""
    layer = {"metadata": {"namespace": "default"},
             "spec": {"repository": {"name": "r"}, "branch": "main", "opentofu": {"enabled": True},
                      "terraform": {"enabled": True}}}
    v = validate_layer(layer, {"spec": {}}, ControllerSettings())
    assert (v.ready.status, v.ready.reason) == (False, "InvalidSpec")
    assert v.ready.message.startswith("spec.terraform.enabled and spec.opentofu.enabled are both true")
    repo = {"spec": {"terraform": {"enabled": True}, "opentofu": {"enabled": True}}}
    layer["spec"]["terraform"] = {"enabled": False}
    assert validate_layer(layer, repo, ControllerSettings()).ready.status is True  # the layer decides
    del layer["spec"]["terraform"], layer["spec"]["opentofu"]
    v = validate_layer(layer, repo, ControllerSettings())
    assert v.ready.message.startswith("repository spec.terraform.enabled and repository spec.opentofu.enabled")


def test_sync_requested_by_a_newer_annotation_only():
    repo = {"metadata": {"annotations": {ann.repository_sync_annotation("feature/x"): format_time(NOW)}},
            "status": {"branches": [{"name": "feature/x", "lastSyncDate": format_time(NOW - timedelta(seconds=5))}]}}
    assert sync_requested(repo)
    repo["status"]["branches"][0]["lastSyncDate"] = format_time(NOW + timedelta(seconds=5))
    assert not sync_requested(repo)
    # Within one second: a request made before the fetch started is satisfied by it (no second fetch).
    asked, fetched = NOW + timedelta(milliseconds=100), NOW + timedelta(milliseconds=400)
    repo["metadata"]["annotations"] = {ann.repository_sync_annotation("feature/x"): format_time_precise(asked)}
    repo["status"]["branches"][0]["lastSyncDate"] = format_time_precise(fetched)
    assert not sync_requested(repo)
    repo["status"]["branches"][0]["lastSyncDate"] = format_time_precise(asked - timedelta(milliseconds=50))
    assert sync_requested(repo)


def test_scheduler_deduplicates_and_never_runs_a_key_twice_at_once():
    async def scenario() -> list[str]:
        seen: list[str] = []
        running: set[str] = set()

        async def handler(key: str) -> None:
            assert key not in running
            running.add(key)
            seen.append(key)
            await asyncio.sleep(0.02)
            running.discard(key)

        scheduler: Scheduler[str] = Scheduler("test", handler)
        task = asyncio.create_task(scheduler.run())
        await asyncio.sleep(0)
        scheduler.schedule("a", 0.01)
        scheduler.schedule("a", 0.0)  # earlier wins, one run
        scheduler.schedule("b", 0.0)
        await asyncio.sleep(0.01)
        scheduler.schedule("a", 0.0)  # while "a" runs: runs once more afterwards
        while scheduler.pending():
            await asyncio.sleep(0.01)
        task.cancel()
        return seen

    seen = asyncio.run(scenario())
    assert sorted(seen) == ["a", "a", "b"]


def test_a_stopped_scheduler_returns_only_once_its_handlers_have_cleaned_up():
    """The controllers close the policy sandbox and the API client after their schedulers stop: a handler cancelled
    mid-way must have given back what it holds (its `finally`, which may await: a policy worker's process is
    waited for) before `run()` returns. Before, `run()` cancelled its handlers and returned at once, and a policy
    worker could outlive the event loop that owned its pipes."""

    async def scenario() -> list[str]:
        events: list[str] = []
        started = asyncio.Event()

        async def handler(key: str) -> None:
            started.set()
            try:
                await asyncio.sleep(60)
            finally:
                await asyncio.sleep(0.05)  # e.g. waiting for a killed worker's process
                events.append(f"{key} cleaned up")

        scheduler: Scheduler[str] = Scheduler("test", handler)
        task = asyncio.create_task(scheduler.run())
        scheduler.schedule("a")
        await started.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        events.append("run returned")
        return events

    assert asyncio.run(scenario()) == ["a cleaned up", "run returned"]


def test_a_handler_waiting_with_its_slot_released_holds_up_no_other_key():
    """One tenant's reconciles waiting on the policy sandbox do not keep another's queued (issue 24, finding 5):
    with one slot, `slow` waits 0.3 s with its slot released, and `quick` runs meanwhile; the slot is taken
    back after, and the scheduler never runs more handlers at once than its slots (outside the released part)."""

    async def scenario() -> tuple[list[str], int]:
        events: list[str] = []
        holding = 0
        most = 0

        async def handler(key: str) -> None:
            nonlocal holding, most
            holding += 1
            most = max(most, holding)
            if key == "slow":
                holding -= 1
                async with slot_released():
                    events.append("slow waits")
                    await asyncio.sleep(0.3)
                holding += 1
                most = max(most, holding)
            events.append(f"{key} done")
            holding -= 1

        scheduler: Scheduler[str] = Scheduler("test", handler, concurrency=1)
        task = asyncio.create_task(scheduler.run())
        await asyncio.sleep(0)
        scheduler.schedule("slow")
        await asyncio.sleep(0.05)
        scheduler.schedule("quick")
        while scheduler.pending():
            await asyncio.sleep(0.01)
        task.cancel()
        return events, most

    events, most = asyncio.run(scenario())
    assert events == ["slow waits", "quick done", "slow done"]
    assert most == 1


def test_slot_released_is_a_no_op_outside_a_scheduler():
    async def scenario() -> str:
        async with slot_released():
            return "ran"

    assert asyncio.run(scenario()) == "ran"


def test_a_key_that_keeps_failing_is_retried_later_and_later_then_at_once_after_a_success():
    """Issue 25: a permanent error (a 403 on a run) was retried every 5 s forever."""
    from burrito_py.kube.scheduler import retry_delay

    assert [retry_delay(n) for n in range(1, 9)] == [5, 10, 20, 40, 80, 160, 300, 300]

    async def scenario() -> list[float]:
        fail = {"a": 3}
        delays: list[float] = []

        async def handler(key: str) -> None:
            if fail[key]:
                fail[key] -= 1
                raise RuntimeError("403 Forbidden")

        scheduler: Scheduler[str] = Scheduler("test", handler)
        task = asyncio.create_task(scheduler.run())
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        for _ in range(4):
            scheduler.schedule("a", 0.0)  # a wake-up now (an event) runs it now, whatever its backoff
            while scheduler.busy():
                await asyncio.sleep(0.001)
            delays.append(round(scheduler._due["a"] - loop.time()) if "a" in scheduler._due else 0.0)
        task.cancel()
        return delays

    assert asyncio.run(scenario()) == [5, 10, 20, 0], "the success resets the count; nothing more is due"
