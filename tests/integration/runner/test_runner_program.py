"""The runner program as a pod runs it (`burrito-py runner start` / `python -m burrito_py.runner` in a
subprocess) against the real API emulator (CRDs from crds/*.yaml) and a real datastore, with the real terraform
and a source archive made by `git archive`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from burrito_py.api import annotations as ann
from burrito_py.api.runner_secrets import RUNNER_SECRET
from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.datastore.in_process import free_port, running_datastore
from burrito_py.datastore.storage import FilesystemStorage
from tests.integration.runner.runner_world import CODE, NS, World, world

__all__ = ["world"]  # the fixture, used by name


# A Secret meant for Terraform is opened to the namespace's runners (api/runner_secrets.py).
OPEN_TO_RUNNERS = {RUNNER_SECRET: "true"}

def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_plan_then_apply_exactly_that_plan(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1", "README.md": "infra\n"})
    world.layer()
    world.run("app-plan-1", "plan", revision)

    world.api.clear_requests()
    planned = world.runner("app-plan-1", "plan", cli=True)
    assert planned.code == 0, planned.stderr
    assert planned.stderr == ""
    assert "Terraform has been successfully initialized!" in planned.stdout  # terraform's output, streamed
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in planned.stdout
    plan_bin = world.plan("app-plan-1", 1, "bin")
    # The datastore's own sum of what the runner stored: what the run controller records (§6.4).
    assert world.stored_sum("app-plan-1", 1) == sha256(plan_bin)
    assert world.stored_sum("app-plan-1", 1, "json") == sha256(world.plan("app-plan-1", 1, "json"))
    changes = json.loads(world.plan("app-plan-1", 1, "json"))["resource_changes"]
    assert [(c["address"], c["change"]["actions"]) for c in changes] == [("terraform_data.this", ["create"])]
    assert "terraform_data.this will be created" in world.plan("app-plan-1", 1, "pretty").decode()
    assert world.plan("app-plan-1", 1, "short") == b"Plan: 1 to add, 0 to change, 0 to destroy"
    assert world.state_inputs() == []
    # The runner only read the API (issue 24): its result reaches the layer through the run controller.
    assert {r.method for r in world.api.requests} == {"GET"}
    assert world.annotations() == {}

    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-1", "attempt": 1})
    world.api.clear_requests()
    applied = world.runner("app-apply-1", "apply")
    assert applied.code == 0, applied.stderr
    assert "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in applied.stdout
    assert world.state_inputs() == ["v1"]
    assert world.applied("app-apply-1", 1) == sha256(plan_bin)
    assert {r.method for r in world.api.requests} == {"GET"} and world.annotations() == {}

    # A new revision: attempt 2 of a plan run (the first attempt "failed" elsewhere) records its own artifacts.
    second = world.commit({"layers/app/main.tf": CODE % "v2"})
    world.run("app-plan-2", "plan", second)
    assert world.runner("app-plan-2", "plan", attempt=2).code == 0
    assert world.plan("app-plan-2", 2, "short") == b"Plan: 0 to add, 1 to change, 0 to destroy"
    with pytest.raises(DatastoreError):
        world.plan("app-plan-2", 1, "bin")


def test_apply_refuses_a_plan_that_is_not_the_recorded_one(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    assert world.runner("app-plan-1", "plan").code == 0

    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-1", "attempt": 1,
                                                          "sum": "sha256:" + "0" * 64})
    result = world.runner("app-apply-1", "apply")
    assert result.code == 2
    assert result.stderr.startswith("error: the stored plan of run app-plan-1 attempt 1 is sha256:")
    assert "but the controllers recorded sha256:000" in result.stderr
    assert "refusing to apply" in result.stderr and "Traceback" not in result.stderr
    assert "refusing to apply" in world.termination_message("app-apply-1")
    assert world.state_inputs() == []
    assert world.applied("app-apply-1", 1) is None


def test_apply_refuses_a_run_that_carries_no_plan_sum(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-gone", "attempt": 1})
    result = world.runner("app-apply-1", "apply")
    assert result.code == 2
    assert result.stderr == "error: apply run app-apply-1 carries no plan sum (spec.artifact.sum); refusing to apply\n"


def test_apply_of_a_plan_that_does_not_exist(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-gone", "attempt": 1,
                                                          "sum": "sha256:" + "1" * 64})
    result = world.runner("app-apply-1", "apply")
    assert result.code == 2
    assert "error: plan of default/app run app-plan-gone" in result.stderr
    assert "terraform" not in result.stdout.lower()  # nothing was initialised for a plan that is not there


def test_apply_without_plan_artifact_plans_and_applies(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer(remediationStrategy={"autoApply": True, "applyWithoutPlanArtifact": True})
    world.run("app-apply-1", "apply", revision)
    result = world.runner("app-apply-1", "apply")
    assert result.code == 0, result.stderr
    assert world.state_inputs() == ["v1"]
    # The plan it made is stored under the apply's own attempt (the run controller records it as the layer's plan
    # and as applied), and that is the plan it applied.
    made = world.stored_sum("app-apply-1", 1)
    assert made == sha256(world.plan("app-apply-1", 1, "bin")) and world.applied("app-apply-1", 1) == made


def test_a_manually_approved_apply_applies_the_approved_plan_even_with_apply_without_plan_artifact(
    world: World,
) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer(approvePlan="manual", remediationStrategy={"applyWithoutPlanArtifact": True})
    world.run("app-plan-1", "plan", revision)
    assert world.runner("app-plan-1", "plan").code == 0
    approved = world.stored_sum("app-plan-1", 1)
    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-1", "attempt": 1})
    result = world.runner("app-apply-1", "apply")
    assert result.code == 0, result.stderr
    assert world.applied("app-apply-1", 1) == approved
    assert world.stored_sum("app-apply-1", 1) is None  # no second plan was made
    assert world.state_inputs() == ["v1"]


def test_a_failing_plan_exits_1_and_annotates_nothing(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1" + 'output "x" {\n  value = var.missing\n}\n'})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan")
    assert result.code == 1
    message = "terraform plan failed (exit code 1): Error: Reference to undeclared input variable"
    assert result.stderr == f"error: {message}\n"
    assert "Error: Reference to undeclared input variable" in result.stdout  # streamed as it came
    assert world.termination_message("app-plan-1") == message
    assert world.annotations() == {}


@pytest.mark.parametrize(
    ("printed", "message"),
    [
        ("not json", "show -json printed no valid JSON: Expecting value: line 1 column 1"),
        # Valid JSON, yet no plan: once an internal error with a traceback (exit 4).
        ("[]", "show -json printed JSON that is no plan: (document): expected a JSON object"),
        ('{"resource_changes": [{"change": {"actions": ["create", "update"]}}]}',
         "show -json printed JSON that is no plan: resource_changes[0].change.actions: unknown combination"),
    ],
)
def test_a_show_json_that_is_no_plan_fails_the_plan_and_stores_no_summary(world: World, tmp_path: Path,
                                                                          printed: str, message: str) -> None:
    """The JSON goes up while it is read: should it not read as a plan, the attempt fails (exit 2, naming why)
    with no summary, so the controllers never record it (they read a succeeded attempt's plan only)."""
    real = shutil.which("terraform")
    assert real is not None
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "terraform").write_text(
        f'#!/bin/sh\nif [ "$1" = show ]; then echo \'{printed}\'; exit 0; fi\nexec {real} "$@"\n')
    (fake / "terraform").chmod(0o755)
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan", PATH=f"{fake}:{os.environ['PATH']}")
    assert result.code == 2, result.stderr
    assert result.stderr.startswith(f"error: {message}"), result.stderr
    with pytest.raises(DatastoreError) as missing:
        world.plan("app-plan-1", 1, "short")
    assert missing.value.status_code == 404
    assert world.annotations() == {}


@pytest.mark.parametrize(
    ("layer_spec", "message"),
    [
        ({"path": "layers/gone"}, "spec.path 'layers/gone' does not exist in revision"),
        ({"terraform": {"version": ">= 99.0"}},
         'no terraform version satisfying ">= 99.0" (from spec.terraform.version): looked in TENV_ROOT '),
    ],
)
def test_bad_input_exits_2(world: World, layer_spec: dict[str, Any], message: str) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer(**layer_spec)
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan")
    assert (result.code, "Traceback" in result.stderr) == (2, False)
    assert message in result.stderr
    assert world.annotations() == {}


def test_missing_objects_exit_2(world: World) -> None:
    result = world.runner("app-plan-1", "plan")
    assert result.code == 2
    assert result.stderr == "error: TerraformRun default/app-plan-1 not found\n"


def test_the_reads_made_side_by_side_refuse_in_the_order_they_were_made_in_turn(world: World) -> None:
    """The run and the layer are read while the runner imports, the repository while the source comes down:
    the refusal is still the first in the old order (run, layer, repository, source)."""
    world.create("terraformruns", {"kind": "TerraformRun", "metadata": {"name": "app-plan-1"},
                                   "spec": {"action": "plan", "layer": {"name": "app", "revision": "0" * 40}}})
    result = world.runner("app-plan-1", "plan")  # no layer
    assert (result.code, result.stderr) == (2, "error: TerraformLayer default/app not found\n")
    # Another repository, which does not exist, and no source archive of it at that revision either.
    world.layer(repository={"name": "gone"})
    result = world.runner("app-plan-1", "plan")
    assert (result.code, result.stderr) == (2, "error: TerraformRepository default/gone not found\n")
    # The repository now exists: the missing source archive is the refusal.
    world.create("terraformrepositories", {"kind": "TerraformRepository", "metadata": {"name": "gone"},
                                           "spec": {"repository": {"url": "https://example.com/gone.git"}}})
    result = world.runner("app-plan-1", "plan")
    assert result.code == 2
    assert "gone" in result.stderr and "0" * 40 in result.stderr
    assert "TerraformRepository" not in result.stderr


# What a runner's start must not import (issue 31, docs/architecture.md §14 "Runner start-up costs"): pydantic and
# the API models (~0.2 s CPU; runner/objects.py reads the objects), the kubernetes client, PyYAML (a JSON kubeconfig),
# tenacity, httpx and its transport (httpcore, h11; ~0.12 s CPU with its first client: the runner's calls are
# http.client's, httpclient.py) and its command line (click, rich), croniter, and anyio and trio (async only;
# entry.py blocks them, and `-X importtime` lists a blocked import too, so their submodules tell a real import).
NOT_ON_THE_RUNNERS_PATH = ("pydantic", "pydantic_core", "kubernetes", "yaml", "tenacity", "httpx", "httpcore", "h11",
                           "click", "rich", "croniter")
BLOCKED = ("anyio.", "trio.")
MODELS = ("burrito_py.api.common", "burrito_py.api.layer", "burrito_py.api.run", "burrito_py.api.repository",
          "burrito_py.api.operations")


def test_a_plan_imports_no_pydantic_nor_the_api_models(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer(vars={"message": "hello"})
    world.run("app-plan-1", "plan", revision)
    argv, env = world.runner_command("app-plan-1", "plan", cli=True)
    # The kubeconfig as the local kubelet writes a pod's, in JSON (a YAML one is read with PyYAML, §9).
    kubeconfig = world.tmp / "runner-kubeconfig.json"
    kubeconfig.write_text(json.dumps(yaml.safe_load(world.runner_kubeconfig.read_text())))
    env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert sorted(m for m in imported
                  if m.split(".")[0] in NOT_ON_THE_RUNNERS_PATH or m in MODELS or m.startswith(BLOCKED)) == []
    assert {"burrito_py.runner.objects", "burrito_py.api.effective", "burrito_py.runner.store"} <= imported  # it ran


def test_a_plain_plan_imports_none_of_the_variables_managed_state_or_mirrors_modules(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    argv, env = world.runner_command("app-plan-1", "plan", cli=True)
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert imported & {"burrito_py.runner.variables", "burrito_py.runner.state", "zipfile", "platform"} == set()
    # Nor the `idna` codec (~3 ms): httpclient gives the resolver and TLS an ASCII name as bytes.
    assert imported & {"encodings.idna", "stringprep", "unicodedata"} == set()
    assert "burrito_py.plans.model" in imported  # the summary's, imported while init ran


def test_a_run_whose_operation_would_be_an_option_is_refused_before_terraform(world: World) -> None:
    """A hostile run (the CRD schema types spec.operation.address as any string): the runner checks it as the
    model does, so `-state-out=…` never reaches terraform's command line."""
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.create("terraformruns", {"kind": "TerraformRun", "metadata": {"name": "app-rm-1"}, "spec": {
        "action": "state-rm", "layer": {"name": "app", "revision": revision},
        "operation": {"requestedBy": "mallory", "address": "-state-out=/tmp/stolen"}}})
    result = world.runner("app-rm-1", "state-rm")
    assert result.code == 2
    assert result.stderr == ("error: TerraformRun default/app-rm-1 is invalid: spec.operation.address: address: "
                             "'-state-out=/tmp/stolen' starts with '-': an address is never an option\n")
    assert "$ terraform" not in result.stdout


def test_unreachable_datastore_exits_3(world: World) -> None:
    revision = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan", BURRITO_DATASTORE_URL=f"http://127.0.0.1:{free_port()}")
    assert result.code == 3
    assert "datastore unavailable" in result.stderr and "Traceback" not in result.stderr


VARS_CODE = """
terraform {
  backend "local" {}
}

variable "greeting" {
  type = string
}

variable "password" {
  type      = string
  sensitive = true
}

variable "region" {
  type    = string
  default = "default-region"
}

variable "sizes" {
  type = list(number)
}

resource "terraform_data" "this" {
  input = "${var.greeting} ${var.region} ${join(",", var.sizes)}"
}

resource "terraform_data" "secret" {
  input = var.password
}

output "summary" {
  value = terraform_data.this.output
}

output "password" {
  value     = terraform_data.secret.output
  sensitive = true
}

output "sizes" {
  value = var.sizes
}
"""
PASSWORD = "s3cr3t-value-7f1c"


def core(world: World) -> client.CoreV1Api:
    return client.CoreV1Api(world.custom.api_client)


def vars_layer(world: World, **spec: Any) -> str:
    revision = world.commit({"layers/app/main.tf": VARS_CODE})
    core(world).create_namespaced_secret(NS, {"metadata": {"name": "creds", "annotations": OPEN_TO_RUNNERS},
                                               "stringData": {"password": PASSWORD, "unused": "x"}})
    core(world).create_namespaced_config_map(NS, {"metadata": {"name": "site"}, "data": {"region": "eu-west-3"}})
    world.layer(vars={"greeting": "hello", "region": "from-vars", "sizes": [1, 2]},
                varsFrom=[{"kind": "Secret", "name": "creds", "keys": ["password"]},
                          {"kind": "ConfigMap", "name": "site"},
                          {"kind": "ConfigMap", "name": "absent", "optional": True}], **spec)
    return revision


def test_variables_from_spec_secrets_and_config_maps_then_outputs_after_apply(world: World) -> None:
    revision = vars_layer(world)
    world.run("app-plan-1", "plan", revision)
    planned = world.runner("app-plan-1", "plan")
    assert planned.code == 0, planned.stderr
    assert "burrito-py: variables greeting, password, region, sizes written to burrito-py.auto.tfvars.json" in (
        planned.stdout)
    assert "hello eu-west-3 1,2" in planned.stdout  # the later ConfigMap won over spec.vars
    assert PASSWORD not in planned.stdout + planned.stderr

    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-1", "attempt": 1})
    applied = world.runner("app-apply-1", "apply")
    assert applied.code == 0, applied.stderr
    assert "burrito-py: 3 output(s) recorded" in applied.stdout
    assert PASSWORD not in applied.stdout + applied.stderr
    assert sorted(world.state_inputs()) == sorted(["hello eu-west-3 1,2", PASSWORD])
    with DatastoreClient(world.datastore_url) as store:
        outputs = json.loads(store.get_outputs(NS, "app", "app-apply-1", 1))
    assert {name: (o["value"], o["sensitive"]) for name, o in outputs.items()} == {
        "summary": ("hello eu-west-3 1,2", False), "password": (PASSWORD, True), "sizes": ([1, 2], False)}


def test_a_missing_secret_or_key_fails_the_plan_naming_it(world: World) -> None:
    """The controllers put why the varsFrom cannot be satisfied in the run's inputs (names only); the runner fails
    the plan with it, as it did when it read the Secret itself."""
    revision = vars_layer(world)
    world.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, "terraformlayers", "app", {"spec": {
        "varsFrom": [{"kind": "Secret", "name": "creds", "keys": ["password", "token"]}]}})
    world.run("app-plan-1", "plan", revision)
    result = world.runner("app-plan-1", "plan")
    assert result.code == 2
    assert result.stderr == "error: Secret default/creds (spec.varsFrom[0]) has no key 'token'\n"
    world.custom.patch_namespaced_custom_object(ann.GROUP, ann.VERSION, NS, "terraformlayers", "app", {"spec": {
        "varsFrom": [{"kind": "Secret", "name": "nope"}]}})
    world.give_inputs("app-plan-1")  # what the run controller does before a retry of such a run
    result = world.runner("app-plan-1", "plan", attempt=2)
    assert result.code == 2
    assert result.stderr == "error: Secret default/nope (spec.varsFrom[0]) does not exist\n"
    assert world.termination_message("app-plan-1", 2) == "Secret default/nope (spec.varsFrom[0]) does not exist"
    assert "terraform" not in result.stdout.lower()
    assert world.annotations() == {}


def test_a_run_given_no_inputs_record_is_refused_naming_it(world: World) -> None:
    revision = vars_layer(world)
    world.create("terraformruns", {"kind": "TerraformRun", "metadata": {"name": "app-plan-1"}, "spec": {
        "action": "plan", "layer": {"name": "app", "revision": revision}}})  # no record stored
    result = world.runner("app-plan-1", "plan")
    assert result.code == 2
    assert result.stderr == "error: inputs of default/app run app-plan-1: no inputs for default/app run app-plan-1\n"


def test_the_runners_token_reads_no_secret_and_writes_no_layer(world: World) -> None:
    """Issue 24, finding 4: tenant code using the runner pod's ServiceAccount token (its kubeconfig here, with
    exactly the chart's runner Role) reads no Secret or ConfigMap of its namespace and patches no layer."""
    import httpx
    import yaml

    vars_layer(world)
    config = yaml.safe_load(world.runner_kubeconfig.read_text())
    token = config["users"][0]["user"]["token"]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=world.api.url, headers=headers, timeout=10) as api:
        assert api.get(f"/api/v1/namespaces/{NS}/secrets/creds").status_code == 403
        assert api.get(f"/api/v1/namespaces/{NS}/configmaps/site").status_code == 403
        assert api.get(f"/api/v1/namespaces/{NS}/secrets").status_code == 403
        patch = api.patch(f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/{NS}/terraformlayers/app",
                          json={"metadata": {"annotations": {ann.PLAN_RUN: "app-pr-7/1"}},
                                "spec": {"overrideRunnerSpec": {"image": "evil"}}},
                          headers={"Content-Type": "application/merge-patch+json"})
        assert patch.status_code == 403
        assert api.get(f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/{NS}/terraformlayers/app").status_code == 200
    assert world.annotations() == {}


class _NoOutputs:
    """A filesystem datastore whose outputs uploads fail, as a datastore outage right after an apply would."""

    def __init__(self, inner: FilesystemStorage) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, key: str, chunks: Any, max_size: int, **options: Any) -> Any:
        if key.endswith("/outputs.json"):
            raise OSError("disk on fire")
        return await self.inner.put(key, chunks, max_size, **options)


def test_outputs_lost_after_an_apply_fail_the_attempt_and_a_retry_only_reads_them(world: World) -> None:
    revision = vars_layer(world)
    world.run("app-plan-1", "plan", revision)
    assert world.runner("app-plan-1", "plan").code == 0
    world.run("app-apply-1", "apply", revision, artifact={"run": "app-plan-1", "attempt": 1})
    data = world.tmp / "datastore"
    with running_datastore(data, storage=_NoOutputs(FilesystemStorage(data))) as broken:  # type: ignore[arg-type]
        failed = world.runner("app-apply-1", "apply", BURRITO_DATASTORE_URL=broken)
    assert failed.code == 3, failed.stderr
    assert "upload of the outputs of default/app run app-apply-1 attempt 1" in failed.stderr
    # Applied, outputs not recorded: the applied record tells the run controller to record the apply anyway.
    assert world.applied("app-apply-1", 1) == world.stored_sum("app-plan-1", 1)
    state = world.state().read_text()

    retried = world.runner("app-apply-1", "apply", attempt=2)
    assert retried.code == 0, retried.stderr
    assert "is already applied (an earlier attempt); reading its outputs" in retried.stdout
    assert "terraform apply" not in retried.stdout
    assert json.loads(world.state().read_text())["serial"] == json.loads(state)["serial"]
    with DatastoreClient(world.datastore_url) as store:
        assert json.loads(store.get_outputs(NS, "app", "app-apply-1", 2))["password"]["value"] == PASSWORD


def _serial(world: World) -> int:
    return int(json.loads(world.state().read_text())["serial"])


def test_a_stale_saved_plan_exits_5_with_a_stale_plan_message(world: World) -> None:
    """Issue 11, item 2: terraform refuses a saved plan made before the state changed ("Saved plan is
    stale"); the runner says so with its own exit code, which the run controller does not retry."""
    first = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    world.run("app-plan-1", "plan", first)
    assert world.runner("app-plan-1", "plan").code == 0
    second = world.commit({"layers/app/main.tf": CODE % "v2"})
    world.run("app-plan-2", "plan", second)
    assert world.runner("app-plan-2", "plan").code == 0
    world.run("app-apply-2", "apply", second, artifact={"run": "app-plan-2", "attempt": 1})
    assert world.runner("app-apply-2", "apply").code == 0  # the state moves on
    serial = _serial(world)

    world.run("app-apply-1", "apply", first, artifact={"run": "app-plan-1", "attempt": 1})
    stale = world.runner("app-apply-1", "apply")
    assert stale.code == 5, stale.stderr
    assert "Error: Saved plan is stale" in stale.stdout  # terraform's own words, streamed
    assert "error: stale plan: terraform apply refused the saved plan sha256:" in stale.stderr
    assert world.termination_message("app-apply-1").startswith("stale plan: ")
    assert world.state_inputs() == ["v2"] and _serial(world) == serial


LEAKY_CODE = """
terraform {
  backend "local" {}
}

variable "password" {
  type = string  # not declared sensitive: terraform prints it in a failing validation
  validation {
    condition     = length(var.password) > 100
    error_message = "The password is too short."
  }
}
"""
LEAKY = 'hunter2-Leaky"Value'


def test_a_secret_printed_by_terraform_is_masked_in_every_log(world: World) -> None:
    """Issue 11, item 17 (security): a failing validation prints `var.password is "…"`; neither the runner's
    output (the pod log, which the controller copies to the datastore), the termination message nor the log
    the runner uploads itself holds the value, nor its base64 form."""
    import base64

    revision = world.commit({"layers/app/main.tf": LEAKY_CODE})
    core(world).create_namespaced_secret(NS, {"metadata": {"name": "creds", "annotations": OPEN_TO_RUNNERS},
                                               "stringData": {"password": LEAKY}})
    world.layer(varsFrom=[{"kind": "Secret", "name": "creds"}])
    world.run("app-plan-1", "plan", revision)
    failed = world.runner("app-plan-1", "plan")
    assert failed.code == 1, failed.stderr
    printed = failed.stdout + failed.stderr
    assert "The password is too short." in printed  # the failure is still explained
    assert 'var.password is "***"' in printed  # terraform printed it, the runner masked it
    for form in (LEAKY, json.dumps(LEAKY)[1:-1], base64.b64encode(LEAKY.encode()).decode()):
        assert form not in printed
        assert form not in world.termination_message("app-plan-1")


def _pull_request_run(world: World, name: str, action: str, revision: str,
                      artifact: dict[str, Any] | None = None) -> None:
    spec: dict[str, Any] = {"action": action, "layer": {"name": "app", "revision": revision},
                            "pullRequest": "infra-pr-7", **({"artifact": artifact} if artifact else {})}
    world.create("terraformruns", {"kind": "TerraformRun", "metadata": {"name": name}, "spec": spec})


def test_attack_a_pull_requests_apply_whose_stored_plan_was_replaced_applies_nothing(world: World) -> None:
    """Apply before merge (§11.3): the pull request's reviewed plan is stored, then replaced in the datastore's
    storage by another plan (one that would apply something else). The apply run carries the sum recorded for the
    reviewed plan: the runner finds the stored bytes' sum differs and applies nothing."""
    reviewed_at = world.commit({"layers/app/main.tf": CODE % "v1"})
    world.layer()
    _pull_request_run(world, "pr7-app-1", "plan", reviewed_at)
    assert world.runner("pr7-app-1", "plan").code == 0
    reviewed = world.stored_sum("pr7-app-1", 1)
    assert reviewed is not None
    evil_at = world.commit({"layers/app/main.tf": CODE % "evil"})
    _pull_request_run(world, "pr7-app-2", "plan", evil_at)
    assert world.runner("pr7-app-2", "plan").code == 0
    # Each stored file is a header (the body's sum and size) and the body: the whole file, header and all, is
    # replaced by the other plan's, behind the datastore's back (storage write access, a restored backup). Found by
    # their keys, not read through the datastore first: a read would put the reviewed bytes in its read cache
    # (§10.8), which would then serve them, not the replaced ones, for its TTL.
    runs = world.tmp / "datastore" / "layers" / NS / "app"
    stored, other = runs / "pr7-app-1" / "1" / "plan.bin", runs / "pr7-app-2" / "1" / "plan.bin"
    assert stored.read_bytes() != other.read_bytes()
    stored.write_bytes(other.read_bytes())

    _pull_request_run(world, "pr7-apply-1", "apply", reviewed_at, {"run": "pr7-app-1", "attempt": 1, "sum": reviewed})
    result = world.runner("pr7-apply-1", "apply")
    assert result.code == 2, result.stdout + result.stderr
    assert f"but the controllers recorded {reviewed}" in result.stderr and "refusing to apply" in result.stderr
    assert world.state_inputs() == [] and world.applied("pr7-apply-1", 1) is None
