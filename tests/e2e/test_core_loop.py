"""From a git commit to an applied layer (issue: core loop), with real terraform and real git.

The scenarios taking the `engine` fixture run once per engine (terraform 1.11.4 and tofu 1.12.6, from the
engines root, issue 27): auto-apply with its outputs, manual approval then apply, and drift; the others run on
the machine's terraform only, to keep the suite's time."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from burrito_py.api import annotations as ann
from burrito_py.timeutil import parse_time
from tests.support.engines import Engine, engines_root
from tests.support.git_repos import TestRepo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, layer_code, running_platform, wait_for


def terraform_state_inputs(state_file: Path) -> list[str]:
    state = json.loads(state_file.read_text())
    return [
        instance["attributes"]["input"]["value"]
        for resource in state.get("resources", [])
        for instance in resource.get("instances", [])
    ]


def test_a_auto_apply_plans_then_applies_then_idles(platform: Platform, repo: TestRepo, engine: Engine):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", auto_apply=True, engine=engine)
    layer = platform.wait_state("app", "Idle", timeout=90)
    logs = "\n".join(platform.core.read_namespaced_pod_log(pod.metadata.name, platform.namespace)
                     for pod in platform.pods("app"))
    assert f"with {engine.kind} {engine.version} ({engines_root()}/tenv/" in logs  # the engine asked for, baked
    state = json.loads(platform.state_file("app").read_text())
    assert state["terraform_version"] == engine.version  # written by the engine that applied
    assert layer["status"]["outputs"] == ["message"]
    a = layer["metadata"]["annotations"]
    assert a[ann.APPLY_SUM] == a[ann.PLAN_SUM]
    assert a[ann.PLAN_COMMIT] == a[ann.APPLY_COMMIT] == repo.head
    assert terraform_state_inputs(platform.state_file("app")) == ["v1"]
    actions = [r["spec"]["action"] for r in platform.runs("app")]
    assert actions == ["plan", "apply"]
    assert all(r["status"]["state"] == "Succeeded" for r in platform.runs("app"))
    assert layer["status"]["lastResult"].startswith("Applied: Plan: 1 to add")


def test_b_without_auto_apply_the_layer_waits_in_apply_needed(platform: Platform, repo: TestRepo, engine: Engine):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", engine=engine)
    layer = platform.wait_state("app", "ApplyNeeded", timeout=60)
    assert layer["status"]["lastResult"] == "Plan: 1 to add, 0 to change, 0 to destroy"
    time.sleep(2)  # a window in which a wrong controller would create an apply run
    assert [r["spec"]["action"] for r in platform.runs("app")] == ["plan"]
    assert not platform.state_file("app").exists() or terraform_state_inputs(platform.state_file("app")) == []
    # Approving applies exactly that plan, with the same engine.
    platform.custom.patch_namespaced_custom_object(
        ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "app",
        {"metadata": {"annotations": {ann.APPROVE_PLAN: layer["status"]["pendingPlan"]["sum"]}}})
    platform.wait_state("app", "Idle", timeout=90)
    assert terraform_state_inputs(platform.state_file("app")) == ["v1"]
    assert json.loads(platform.state_file("app").read_text())["terraform_version"] == engine.version


def test_c_relevant_commits_plan_and_unrelated_commits_do_not(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app", additionalTriggerPaths=["modules/shared"])
    platform.wait_state("app", "ApplyNeeded")
    assert len(platform.runs("app")) == 1

    unrelated = repo.commit({"docs/README.md": "more docs\n"}, "docs only")
    wait_for(lambda: platform.annotations("app").get(ann.BRANCH_COMMIT) == unrelated, 30, what="branch-commit")
    time.sleep(2)
    assert len(platform.runs("app")) == 1, "a commit outside the layer must not plan"
    assert platform.annotations("app")[ann.PLAN_COMMIT] != unrelated

    relevant = repo.commit({"layers/app/main.tf": layer_code("v2")}, "change the layer")
    wait_for(lambda: platform.annotations("app").get(ann.PLAN_COMMIT) == relevant, 60, what="plan of the new commit")
    assert platform.runs("app")[-1]["spec"]["layer"]["revision"] == relevant

    trigger = repo.commit({"modules/shared/README.md": "changed\n"}, "change a trigger path")
    wait_for(lambda: platform.annotations("app").get(ann.PLAN_COMMIT) == trigger, 60, what="plan of trigger commit")
    platform.wait_state("app", "ApplyNeeded")


def test_d_broken_terraform_retries_then_max_retries_then_a_fix_plans(tmp_path: Path, repo: TestRepo,
                                                                      real_cluster: RealCluster):
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", max_retries=2, cluster=real_cluster) as platform:
        broken = repo.commit({"layers/app/main.tf": "resource \"terraform_data\" \"x\" {\n"}, "break it")
        platform.create_repository("repo", repo.url)
        platform.create_layer("app", "repo", "layers/app")
        layer = platform.wait_state("app", "MaxRetriesReached", timeout=90)
        runs = platform.runs("app")
        assert len(runs) == 1, "exhausting retries must not create new runs"
        status = runs[0]["status"]
        assert status["state"] == "Failed" and status["retries"] == 3
        starts = [parse_time(a["startedAt"]) for a in status["attempts"]]
        assert len(starts) == 3
        # backoff 1 s then 2 s (second-precision timestamps): the retries were spaced, not immediate
        assert starts[2] - starts[0] >= timedelta(seconds=2)
        assert layer["metadata"]["annotations"][ann.BRANCH_COMMIT] == broken
        ready = {c["type"]: c for c in layer["status"]["conditions"]}
        assert ready["HasLastRunReachedRetryLimit"]["status"] == "True"
        time.sleep(2)
        assert len(platform.runs("app")) == 1

        fixed = repo.commit({"layers/app/main.tf": layer_code("fixed")}, "fix it")
        wait_for(lambda: platform.annotations("app").get(ann.PLAN_COMMIT) == fixed, 60, what="plan of the fix")
        platform.wait_state("app", "ApplyNeeded")


def test_e_drift_period_elapsed_plans_again(tmp_path: Path, repo: TestRepo, engine: Engine,
                                            real_cluster: RealCluster):
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", drift_detection_period=timedelta(seconds=6),
                          cluster=real_cluster) as p:
        p.create_repository("repo", repo.url)
        p.create_layer("app", "repo", "layers/app", auto_apply=True, engine=engine)
        p.wait_state("app", "Idle", timeout=60)
        first_plan = p.annotations("app")[ann.PLAN_DATE]
        wait_for(lambda: p.annotations("app").get(ann.PLAN_DATE) != first_plan, 30, what="a drift plan")
        assert [r["spec"]["action"] for r in p.runs("app")][:3] == ["plan", "apply", "plan"]


def test_f_sync_now_plans_and_the_annotation_is_removed(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    platform.wait_state("app", "ApplyNeeded")
    platform.sync_now("app")
    wait_for(lambda: len(platform.runs("app")) == 2, 30, what="a second plan run")
    wait_for(lambda: ann.SYNC_NOW not in platform.annotations("app"), 30, what="sync-now removed")
    platform.wait_state("app", "ApplyNeeded")


def test_g_never_two_runner_pods_of_a_layer_and_orphan_leases_are_taken_over(platform: Platform, repo: TestRepo):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    platform.wait_state("app", "ApplyNeeded")
    # Concurrent triggers: sync-now and a relevant commit at once, plus a hand-made run.
    platform.sync_now("app")
    repo.commit({"layers/app/main.tf": layer_code("v2")}, "concurrent change")
    layer = platform.layer("app")
    manual = {
        "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
        "metadata": {"generateName": "app-plan-", "namespace": platform.namespace,
                     "labels": {ann.LABEL_LAYER: "app"}},
        "spec": {"action": "plan", "layer": {"name": "app", "namespace": platform.namespace,
                                             "revision": layer["metadata"]["annotations"][ann.BRANCH_COMMIT]}},
    }
    platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformruns",
                                                    manual)
    max_active = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        # A pod without status yet is pending: it counts as active.
        active = [p for p in platform.pods("app") if p.status is None or p.status.phase in (None, "Pending", "Running")]
        max_active = max(max_active, len(active))
        if time.monotonic() > deadline - 25 and all(
            (r.get("status") or {}).get("state") in ("Succeeded", "Failed") for r in platform.runs("app")
        ) and len(platform.runs("app")) >= 3:
            break
        time.sleep(0.05)
    assert max_active <= 1

    # A lease whose holder run was deleted is an orphan: the next run takes it over. First every run ends (a
    # live run holds, and may re-create, the real Lease).
    def every_run_finished() -> bool:
        return all((r.get("status") or {}).get("state") in ("Succeeded", "Failed") for r in platform.runs("app"))

    from burrito_py.controllers.run.leases import layer_lease_name

    lease_name = layer_lease_name(platform.layer("app"))
    body = {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": lease_name, "namespace": platform.namespace},
        "spec": {"holderIdentity": "a-run-that-was-deleted"},
    }
    from kubernetes import client

    leases = client.CoordinationV1Api(platform.core.api_client)

    def plant_orphan() -> bool:
        """The orphan in place of the layer's Lease while no run holds it. A run the controllers start between the
        check and the create takes the Lease first (409): that run is waited for, and the orphan planted again."""
        if not every_run_finished():
            return False
        for item in leases.list_namespaced_lease(platform.namespace).items:
            leases.delete_namespaced_lease(item.metadata.name, platform.namespace)
        try:
            leases.create_namespaced_lease(platform.namespace, body)
        except ApiException as exc:
            if exc.status != 409:
                raise
            return False
        return True

    wait_for(plant_orphan, 120, interval=0.5, what="the orphan lease planted while every run of the layer is finished")
    before = len(platform.runs("app"))
    platform.sync_now("app")
    wait_for(lambda: len(platform.runs("app")) > before, 30, what="a new run")
    wait_for(lambda: platform.runs("app")[-1].get("status", {}).get("state") == "Succeeded", 60,
             what="the new run to take the orphan lease over and succeed")
    with pytest.raises(ApiException) as gone:
        leases.read_namespaced_lease(lease_name, platform.namespace)
    assert gone.value.status == 404


def test_h_restarted_controllers_create_no_run_for_idle_layers(tmp_path: Path, repo: TestRepo,
                                                               real_cluster: RealCluster):
    kubeconfig = tmp_path / "kubeconfig"
    with running_platform(tmp_path / "p", kubeconfig, cluster=real_cluster) as p:
        p.create_repository("repo", repo.url)
        p.create_layer("app", "repo", "layers/app", auto_apply=True)
        p.create_layer("other", "repo", "layers/other", auto_apply=True)
        p.wait_state("app", "Idle", timeout=90)
        p.wait_state("other", "Idle", timeout=90)
        runs_before = len(p.runs())
        assert p.controllers is not None
        p.controllers.stop()
        from burrito_py.operator.main import ControllerThread

        restarted = ControllerThread(p.settings, kubeconfig)
        restarted.start()
        try:
            # A watch of the namespace's runs from now on: several poll intervals, enough for a wrong controller
            # to act, and no run may be added (a real API server has no request log to read instead).
            listing = p.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, p.namespace, "terraformruns")
            added = [event["object"]["metadata"]["name"] for event in watch.Watch().stream(
                p.custom.list_namespaced_custom_object, ann.GROUP, ann.VERSION, p.namespace, "terraformruns",
                resource_version=listing["metadata"]["resourceVersion"], timeout_seconds=4,
                _request_timeout=10) if event["type"] == "ADDED"]
            assert added == []
            assert len(p.runs()) == runs_before
            assert p.layer("app")["status"]["state"] == "Idle"
        finally:
            restarted.stop()


def test_i_kubectl_shows_states_and_plan_download_returns_the_plan_json(platform: Platform, repo: TestRepo,
                                                                           tmp_path: Path):
    platform.create_repository("repo", repo.url)
    platform.create_layer("app", "repo", "layers/app")
    platform.wait_state("app", "ApplyNeeded")
    out = subprocess.run(["kubectl", "--kubeconfig", str(platform.kubeconfig), "get", "tfl,tfrun"],
                         capture_output=True, text=True, check=True).stdout
    assert "STATE" in out and "ApplyNeeded" in out and "Succeeded" in out and "LAST RESULT" in out
    target = tmp_path / "plan.json"
    subprocess.run(["burrito-py", "plan", "download", f"{platform.namespace}/app", "--format", "json", "-o",
                    str(target), "--datastore-url", platform.datastore_url, "--kubeconfig", str(platform.kubeconfig)],
                   check=True)
    plan = json.loads(target.read_text())
    assert plan["resource_changes"][0]["change"]["actions"] == ["create"]
    short = subprocess.run(["burrito-py", "plan", "download", f"{platform.namespace}/app", "--format", "short",
                            "--datastore-url", platform.datastore_url, "--kubeconfig", str(platform.kubeconfig)],
                           capture_output=True, text=True, check=True).stdout
    assert short.strip() == "Plan: 1 to add, 0 to change, 0 to destroy"


def test_events_in_kubectl_describe_and_metrics_by_state(tmp_path: Path, repo: TestRepo, real_cluster: RealCluster):
    from burrito_py.datastore.in_process import free_port
    from burrito_py.kube.kubeconfig import kubeconfig_login

    port = free_port()
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", metrics_port=port, cluster=real_cluster) as p:
        p.create_repository("repo", repo.url)
        p.create_layer("app", "repo", "layers/app")
        p.wait_state("app", "ApplyNeeded")
        described = subprocess.run(["kubectl", "--kubeconfig", str(p.kubeconfig), "describe", "tfl", "app"],
                                   capture_output=True, text=True, check=True).stdout
        assert "RunCreated" in described and "StateChanged" in described
        assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 401  # a token allowed to get /metrics
        admin = kubeconfig_login(p.kubeconfig).token
        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {admin}"}).text
        assert 'burrito_py_layers{state="ApplyNeeded"} 1.0' in metrics
        assert 'burrito_py_runs{action="plan",state="Succeeded"} 1.0' in metrics
        assert 'burrito_py_reconcile_duration_seconds_count{controller="layer"}' in metrics
