"""Issue 25 item 3: the API refuses a layer's new TerraformRun (here a ValidatingAdmissionPolicy, as a webhook
or a policy engine would). Before, the reconcile raised and the work queue tried again every 5 seconds with only a
log line: no event, no condition, nothing in `kubectl describe`. Now the layer says it (burrito's words: `Failed to
create TerraformRun for Plan action: <API error>`) in one Warning event per distinct message, a `RunCreated=False`
condition and its lastResult, and asks again with a growing delay; once the policy goes, the run is created and
the condition with it.

On the real control plane: the policy is kube-apiserver's own (its namespace selector keeps it to the test's
namespace), and the controllers' requests are counted by the fault proxy they talk through."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from ..conftest import Platform, layer_code, running_platform

POLICY = "deny-refused-layer-runs"
DENIAL = "runs of layer 'refused' are held by the platform team"


ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def _policy_objects(namespace: str) -> list[dict[str, Any]]:
    api = "admissionregistration.k8s.io/v1"
    only_here = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}  # the session's other tests go on
    return [
        {"apiVersion": api, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": POLICY}, "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"namespaceSelector": only_here,
                                 "resourceRules": [{"apiGroups": [ann.GROUP], "apiVersions": ["*"],
                                                    "operations": ["CREATE"], "resources": ["terraformruns"]}]},
            "validations": [{"expression": "object.spec.layer.name != 'refused'", "message": DENIAL}]}},
        {"apiVersion": api, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": POLICY},
         "spec": {"policyName": POLICY, "validationActions": ["Deny"]}},
    ]


def _policy_enforced(cluster: RealCluster, namespace: str, last: list[Any]) -> bool:
    """Does kube-apiserver refuse the layer's run yet (a dry run)? A new policy takes a moment to be enforced.
    `last`: kube-apiserver's last answer, for the failure's message."""
    run = {"apiVersion": ann.API_VERSION, "kind": "TerraformRun",
           "metadata": {"name": "probe", "namespace": namespace, "labels": {ann.LABEL_LAYER: "refused"}},
           "spec": {"action": "plan", "layer": {"name": "refused", "namespace": namespace, "revision": "0" * 40}}}
    status, body = cluster.admin.call(
        "POST", f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/{namespace}/terraformruns?dryRun=All", run)
    last[:] = [status, body]
    return status >= 400 and DENIAL in str(body)  # kube-apiserver: 422 Invalid (a policy without a reason)


def _remove_policy(cluster: RealCluster) -> None:
    for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
        status, body = cluster.admin.call("DELETE", f"{ADMISSION}/{kind}/{POLICY}")
        assert status in (200, 404), (kind, status, body)


def test_a_refused_run_create_is_told_once_shown_and_backed_off(tmp_path: Path, real_cluster: RealCluster) -> None:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": layer_code("v1")}, "first")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster, fault_proxy=True,
                          failure_grace_period=timedelta(seconds=1),
                          failure_grace_period_cap=timedelta(seconds=8)) as platform:
        try:
            _refused_then_let_through(platform, real_cluster, repo)
        finally:
            _remove_policy(real_cluster)  # cluster-scoped: never left to the session's later tests


def _refused_then_let_through(platform: Platform, cluster: RealCluster, repo: TestRepo) -> None:
    namespace = platform.namespace
    for obj in _policy_objects(namespace):
        plural = "validatingadmissionpolicies" if obj["kind"] == "ValidatingAdmissionPolicy" else \
            "validatingadmissionpolicybindings"
        status, body = cluster.admin.call("POST", f"{ADMISSION}/{plural}", obj)
        assert status == 201, (obj["kind"], status, body)
    last: list[Any] = []
    try:
        wait_for(lambda: _policy_enforced(cluster, namespace, last), 30, interval=0.2, what="the policy enforced")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the dry run's last answer: {last}") from None
    platform.create_repository("repo", repo.url)
    platform.create_layer("refused", "repo", "layers/app")

    def warning() -> Any:
        return next((e for e in platform.core.list_namespaced_event(namespace).items
                     if e.involved_object.name == "refused" and e.reason == "RunCreationFailed"), None)

    event = wait_for(warning, 60, interval=0.05, what="a Warning on the layer")
    requests = list(platform.faults.requests)
    creates = [r for r in requests if r.method == "POST" and r.path.endswith("/terraformruns")]
    assert creates, "the controllers asked for the run"
    # The first event posted after the first refused create is the Warning (the StateChanged event comes
    # before the create): the time between the two requests is the figure.
    told = next(r.time for r in requests if r.method == "POST" and r.path.endswith("/events")
                and r.time >= creates[0].time)
    assert event.type == "Warning"
    assert event.message.startswith("Failed to create TerraformRun for Plan action: "), event.message
    assert DENIAL in event.message and POLICY in event.message, event.message
    to_warning = told - creates[0].time

    # The event is posted before the status patch lands: wait for the condition, do not race it.
    def refused_status() -> Any:
        status = platform.layer("refused").get("status") or {}
        cond = next((c for c in status.get("conditions", []) if c["type"] == "RunCreated"), None)
        return (status, cond) if cond else None

    status, cond = wait_for(refused_status, 30, interval=0.05, what="the RunCreated condition")
    assert cond["status"] == "False" and cond["reason"] == "RunCreationFailed" and DENIAL in cond["message"]
    assert status["state"] == "PlanNeeded" and status["lastResult"].startswith("Plan cannot start: ")
    assert status["runCreation"]["action"] == "plan" and status["runCreation"]["failures"] >= 1

    # Asked again later and later (1, 2, 4, 8, 8 s), never every 5 s for ever; told once.
    time.sleep(20)
    creates = [r.time for r in platform.faults.requests if r.method == "POST" and r.path.endswith("/terraformruns")]
    gaps = [b - a for a, b in itertools.pairwise(creates)]
    assert 3 <= len(creates) <= 7, gaps
    assert all(later >= earlier * 1.5 for earlier, later in itertools.pairwise(gaps)
               if later < 7.5), gaps
    warnings = [e for e in platform.core.list_namespaced_event(namespace).items
                if e.involved_object.name == "refused" and e.reason == "RunCreationFailed"]
    assert len(warnings) == 1, [w.message for w in warnings]
    assert platform.runs("refused") == []

    # The platform team lets it through: the next try creates the run, and the refusal is gone.
    _remove_policy(cluster)
    platform.wait_state("refused", "ApplyNeeded", timeout=60)
    status = platform.layer("refused")["status"]
    assert "runCreation" not in status
    assert not [c for c in status["conditions"] if c["type"] == "RunCreated"]
    print(f"\nrefused create -> Warning event: {to_warning * 1000:.0f} ms; tries in 20 s {len(creates)}, "
          f"gaps {[round(g, 1) for g in gaps]} s")
