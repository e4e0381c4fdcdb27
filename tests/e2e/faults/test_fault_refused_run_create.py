"""Issue 25 item 3: the API refuses a layer's new TerraformRun (here a ValidatingAdmissionPolicy, as a webhook
or a policy engine would). Before, the reconcile raised and the work queue tried again every 5 seconds with only a
log line: no event, no condition, nothing in `kubectl describe`. Now the layer says it (burrito's words: `Failed to
create TerraformRun for Plan action: <API error>`) in one Warning event per distinct message, a `RunCreated=False`
condition and its lastResult, and asks again with a growing delay; once the policy goes, the run is created and
the condition with it."""

from __future__ import annotations

import itertools
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from tests.support.emulator import wait_for
from tests.support.git_repos import make_repo

from ..conftest import layer_code, running_platform

POLICY = "deny-refused-layer-runs"
DENIAL = "runs of layer 'refused' are held by the platform team"


def _policy_objects() -> list[dict[str, Any]]:
    api = "admissionregistration.k8s.io/v1"
    return [
        {"apiVersion": api, "kind": "ValidatingAdmissionPolicy", "metadata": {"name": POLICY}, "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [ann.GROUP], "apiVersions": ["*"],
                                                    "operations": ["CREATE"], "resources": ["terraformruns"]}]},
            "validations": [{"expression": "object.spec.layer.name != 'refused'", "message": DENIAL}]}},
        {"apiVersion": api, "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": POLICY},
         "spec": {"policyName": POLICY, "validationActions": ["Deny"]}},
    ]


def test_a_refused_run_create_is_told_once_shown_and_backed_off(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"layers/app/main.tf": layer_code("v1")}, "first")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", failure_grace_period=timedelta(seconds=1),
                          failure_grace_period_cap=timedelta(seconds=8)) as platform:
        from burrito_local.apply import Applier

        applier = Applier(platform.api.url)
        for obj in _policy_objects():
            applier.apply(obj)
        platform.create_repository("repo", repo.url)
        platform.create_layer("refused", "repo", "layers/app")

        def warning() -> Any:
            return next((e for e in platform.core.list_namespaced_event("default").items
                         if e.involved_object.name == "refused" and e.reason == "RunCreationFailed"), None)

        event = wait_for(warning, 60, interval=0.05, what="a Warning on the layer")
        requests = list(platform.api.requests)
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
        creates = [r.time for r in platform.api.requests if r.method == "POST" and r.path.endswith("/terraformruns")]
        gaps = [b - a for a, b in itertools.pairwise(creates)]
        assert 3 <= len(creates) <= 7, gaps
        assert all(later >= earlier * 1.5 for earlier, later in itertools.pairwise(gaps)
                   if later < 7.5), gaps
        warnings = [e for e in platform.core.list_namespaced_event("default").items
                    if e.involved_object.name == "refused" and e.reason == "RunCreationFailed"]
        assert len(warnings) == 1, [w.message for w in warnings]
        assert platform.runs("refused") == []

        # The platform team lets it through: the next try creates the run, and the refusal is gone.
        applier.close()
        with admin_client(platform.api.url) as admin:
            for kind in ("validatingadmissionpolicybindings", "validatingadmissionpolicies"):
                admin.delete(f"/apis/admissionregistration.k8s.io/v1/{kind}/{POLICY}").raise_for_status()
        platform.wait_state("refused", "ApplyNeeded", timeout=60)
        status = platform.layer("refused")["status"]
        assert "runCreation" not in status
        assert not [c for c in status["conditions"] if c["type"] == "RunCreated"]
        print(f"\nrefused create -> Warning event: {to_warning * 1000:.0f} ms; tries in 20 s {len(creates)}, "
              f"gaps {[round(g, 1) for g in gaps]} s")
