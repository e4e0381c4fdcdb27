"""Issue 27 item 4, end to end with the built Terragrunt 1.1.3 wrapping terraform 1.11.4 (§9.1, §23): two units,
`live/app` with a `dependency "vpc"` block, both including `root.hcl` (a shared local backend standing in for a
team's remote state), one layer each.

- Terragrunt plans and applies each unit; app only after vpc (its dependency block is its only link: no
  spec.dependsOn), and its outputs are recorded (status.outputs, the Secret).
- A change of the output app reads plans app again; an edit to root.hcl plans both (their trigger paths).
- A unit whose config_path leaves the repository and two units depending on each other never run: their
  condition names the cause.

The runner finds Terragrunt in the engines' tenv layout (`scripts/build-engines.sh --cached`, here as the
image's baked root `BURRITO_RUNNER_TOOLS_PATH`) and terraform on PATH."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from tests.support.emulator import wait_for
from tests.support.engines import OPENTOFU
from tests.support.git_repos import TestRepo, make_repo
from tests.support.real_cluster import RealCluster

from .conftest import Platform, running_platform

REPO_ROOT = Path(__file__).resolve().parents[2]

ROOT_HCL = """remote_state {
  backend = "local"
  generate = {
    path      = "backend.tf"
    if_exists = "overwrite"
  }
  config = {
    path = "@STATE@/${path_relative_to_include()}/terraform.tfstate"
  }
}
"""
VPC_TF = """variable "name" {
  type    = string
  default = "@VPC@"
}
resource "terraform_data" "vpc" {
  input = var.name
}
output "vpc_id" {
  value = terraform_data.vpc.output
}
output "note" {
  value = "@NOTE@"
}
"""
APP_TF = """variable "vpc_id" {
  type = string
}
resource "terraform_data" "app" {
  input = "app in ${var.vpc_id}"
}
output "where" {
  value = terraform_data.app.output
}
"""
VPC_UNIT = """include "root" {
  path = find_in_parent_folders("root.hcl")
}
terraform {
  source = "../../modules/vpc"
}
"""
APP_UNIT = """include "root" {
  path = find_in_parent_folders("root.hcl")
}
terraform {
  source = "../../modules/app"
}
dependency "vpc" {
  config_path = "../vpc"
}
inputs = {
  vpc_id = dependency.vpc.outputs.vpc_id
}
"""


def vpc(name: str = "vpc-1", note: str = "n1") -> str:
    return VPC_TF.replace("@VPC@", name).replace("@NOTE@", note)


@pytest.fixture(scope="module")
def engines() -> Path:
    done = subprocess.run(["bash", str(REPO_ROOT / "scripts" / "build-engines.sh"), "--cached"], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the engines are not built: run scripts/build-engines.sh ({done.stderr.strip()})")
    root = Path(done.stdout.strip()) / "tenv"
    assert (root / "Terragrunt" / "1.1.3" / "terragrunt").is_file(), root
    return root


@pytest.fixture
def world(tmp_path: Path, engines: Path, real_cluster: RealCluster) -> Iterator[tuple[Platform, TestRepo, Path]]:
    state = tmp_path / "state"
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"root.hcl": ROOT_HCL.replace("@STATE@", str(state)), "modules/vpc/main.tf": vpc(),
                 "modules/app/main.tf": APP_TF, "live/vpc/terragrunt.hcl": VPC_UNIT,
                 "live/app/terragrunt.hcl": APP_UNIT}, "two units, app reads vpc's output")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster) as platform:
        platform.create_repository("infra", repo.url, terragrunt={"enabled": True, "version": "~> 1.1"})
        yield platform, repo, state


def create_layer(platform: Platform, name: str, path: str, engines: Path, **spec: Any) -> None:
    body = {
        "apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
        "metadata": {"name": name, "namespace": platform.namespace},
        "spec": {"repository": {"name": "infra"}, "branch": "main", "path": path,
                 "remediationStrategy": {"autoApply": True},
                 "overrideRunnerSpec": {"env": [{"name": "BURRITO_RUNNER_TOOLS_PATH", "value": str(engines)}]},
                 **spec},
    }
    platform.custom.create_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace, "terraformlayers", body)


def app_input(state: Path) -> str:
    body = json.loads((state / "live" / "app" / "terraform.tfstate").read_text())
    resource = next(r for r in body["resources"] if r["name"] == "app")
    return str(resource["instances"][0]["attributes"]["input"]["value"])


def applies(platform: Platform, layer: str) -> list[dict[str, Any]]:
    return [r for r in platform.runs(layer) if r["spec"]["action"] == "apply"
            and (r.get("status") or {}).get("state") == "Succeeded"]


def plans(platform: Platform, layer: str) -> int:
    return len([r for r in platform.runs(layer) if r["spec"]["action"] == "plan"])


def condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (body.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def test_units_apply_in_dependency_order_and_replan_on_what_they_read(
        world: tuple[Platform, TestRepo, Path], engines: Path) -> None:
    platform, repo, state = world
    # The dependent first: it waits for a layer that does not exist yet.
    create_layer(platform, "app", "live/app", engines,
                 writeOutputsToSecret={"name": "app-outputs", "outputs": ["where"]})
    def judged() -> dict[str, Any] | None:
        body = platform.layer("app")
        return body if condition(body, "DependenciesSatisfied") else None

    app = wait_for(judged, 30, 0.2, "app's dependency condition")
    assert condition(app, "DependenciesSatisfied")["reason"] == "DependencyNotFound"
    assert "no layer of this repository, branch and namespace follows the unit live/vpc" in \
        condition(app, "DependenciesSatisfied")["message"]
    assert platform.runs("app") == []
    create_layer(platform, "vpc", "live/vpc", engines)

    platform.wait_state("vpc", "Idle", timeout=180)
    app = platform.wait_state("app", "Idle", timeout=180)
    assert len(applies(platform, "vpc")) == 1 and len(applies(platform, "app")) == 1
    vpc_applied = applies(platform, "vpc")[0]["status"]["attempts"][-1]["finishedAt"]
    app_apply = applies(platform, "app")[0]
    assert app_apply["metadata"]["annotations"][ann.RUN_CREATED_AT] >= vpc_applied[:19]
    assert app_input(state) == "app in vpc-1"
    # The dependency is derived from the unit, recorded on the layer and in its status.
    record = json.loads(app["metadata"]["annotations"][ann.TERRAGRUNT])
    assert record["dependencies"] == [{"name": "vpc", "unit": "live/vpc", "block": "vpc", "outputs": ["vpc_id"]}]
    assert record["reads"] == ["modules/app", "root.hcl"] and record["problems"] == []
    assert [(d["name"], d["reason"]) for d in app["status"]["dependencies"]] == [(f"{platform.namespace}/vpc",
                                                                                  "Satisfied")]
    # Outputs recorded.
    secret = wait_for(lambda: _secret(platform, "app-outputs"), 30, 0.2, "the outputs Secret")
    assert base64.b64decode(secret["where"]).decode() == "app in vpc-1"

    # An output app does not read changes: vpc applies, app does not plan again.
    plans_before = plans(platform, "app")
    repo.commit({"modules/vpc/main.tf": vpc(note="n2")}, "vpc: a note nobody reads")
    platform.wait_reporting(lambda: len(applies(platform, "vpc")) == 2 or None, 180, "vpc's second apply", "vpc")
    platform.wait_state("vpc", "Idle", timeout=60)
    platform.wait_state("app", "Idle", timeout=60)
    assert plans(platform, "app") == plans_before

    # The output app reads changes: app plans and applies again with it.
    repo.commit({"modules/vpc/main.tf": vpc(name="vpc-2", note="n2")}, "vpc: a new id")
    platform.wait_reporting(lambda: len(applies(platform, "app")) == 2 or None, 240, "app's second apply", "vpc",
                            "app")
    platform.wait_state("app", "Idle", timeout=60)
    assert app_input(state) == "app in vpc-2"
    assert [a["metadata"]["annotations"][ann.RUN_CREATED_AT] for a in applies(platform, "app")][-1] >= \
        applies(platform, "vpc")[-1]["status"]["attempts"][-1]["finishedAt"][:19]

    # An edit to root.hcl (included by both) is relevant to both; one elsewhere to neither.
    before = {name: platform.annotations(name)[ann.RELEVANT_COMMIT] for name in ("vpc", "app")}
    elsewhere = repo.commit({"docs/README.md": "docs\n"}, "docs")
    wait_for(lambda: all(platform.annotations(n)[ann.BRANCH_COMMIT] == elsewhere for n in before) or None, 30, 0.2,
             "the docs commit seen")
    assert {name: platform.annotations(name)[ann.RELEVANT_COMMIT] for name in before} == before
    root = repo.commit({"root.hcl": ROOT_HCL.replace("@STATE@", str(state)) + "# shared settings\n"}, "root.hcl")
    wait_for(lambda: all(platform.annotations(n)[ann.RELEVANT_COMMIT] == root for n in before) or None, 30, 0.2,
             "root.hcl relevant to both units")


def _secret(platform: Platform, name: str) -> dict[str, str] | None:
    from kubernetes.client.exceptions import ApiException

    try:
        return dict(platform.core.read_namespaced_secret(name, platform.namespace).data or {})
    except ApiException:
        return None


def test_an_escaping_unit_and_a_cycle_never_run(world: tuple[Platform, TestRepo, Path], engines: Path) -> None:
    platform, repo, _ = world
    repo.commit({
        "live/evil/terragrunt.hcl": 'dependency "etc" {\n  config_path = "../../../etc"\n}\n',
        "live/c1/terragrunt.hcl": 'dependency "c2" {\n  config_path = "../c2"\n}\n',
        "live/c2/terragrunt.hcl": 'dependency "c1" {\n  config_path = "../c1"\n}\n',
    }, "a unit reaching out of the repository, two units in a cycle")
    for name in ("evil", "c1", "c2"):
        create_layer(platform, name, f"live/{name}", engines)

    def judged(name: str, reason: str) -> dict[str, Any] | None:
        # In the moment between the units' annotations a layer may read UpstreamPending or DependencyNotFound first.
        found = condition(platform.layer(name), "DependenciesSatisfied")
        return found if found.get("status") == "False" and found.get("reason") == reason else None

    evil = wait_for(lambda: judged("evil", "PathOutsideRepository"), 30, 0.2, "evil's condition")
    assert evil["message"] == ("live/evil/terragrunt.hcl: dependency \"etc\": config_path ../../../etc: "
                               "'../../../etc' leads above the repository root")
    for name in ("c1", "c2"):
        cycle = wait_for(lambda n=name: judged(n, "DependencyCycle"), 30, 0.2, f"{name}'s cycle")  # type: ignore[misc]
        ns = platform.namespace
        assert f"{ns}/c1 -> {ns}/c2" in cycle["message"] or f"{ns}/c2 -> {ns}/c1" in cycle["message"]
    # evil's problem came with its first branch-commit; c1 and c2 name no output of each other, so they wait for all
    # of them (terragrunt fetches them anyway), which never exist: not even a plan, before or after the cycle is seen.
    time.sleep(2)
    for name in ("evil", "c1", "c2"):
        assert platform.runs(name) == [], name


def test_a_repository_generates_a_layer_per_unit(tmp_path: Path, engines: Path, real_cluster: RealCluster) -> None:
    """spec.layersFromUnits: one layer per unit under live/, applied in the units' order, a new unit's layer
    created, a removed unit's layer deleted."""
    state = tmp_path / "state"
    repo = make_repo(tmp_path / "upstream")
    repo.commit({"root.hcl": ROOT_HCL.replace("@STATE@", str(state)), "modules/vpc/main.tf": vpc(),
                 "modules/app/main.tf": APP_TF, "live/vpc/terragrunt.hcl": VPC_UNIT,
                 "live/app/terragrunt.hcl": APP_UNIT, "other/terragrunt.hcl": VPC_UNIT}, "units")
    with running_platform(tmp_path / "p", tmp_path / "kubeconfig", cluster=real_cluster) as platform:
        platform.create_repository(
            "infra", repo.url, terragrunt={"enabled": True},
            overrideRunnerSpec={"env": [{"name": "BURRITO_RUNNER_TOOLS_PATH", "value": str(engines)}]},
            layersFromUnits={"branch": "main", "path": "live", "autoApply": True})

        def names() -> set[str]:
            items = platform.custom.list_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                  "terraformlayers")["items"]
            return {i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")}

        wait_for(lambda: names() == {"infra-live-vpc", "infra-live-app"} or None, 30, 0.2, "the generated layers")
        app = platform.layer("infra-live-app")
        assert app["metadata"]["labels"]["burrito-py.io/generated-by"] == "infra"
        assert app["metadata"]["ownerReferences"][0]["kind"] == "TerraformRepository"
        platform.wait_state("infra-live-vpc", "Idle", timeout=180)
        platform.wait_state("infra-live-app", "Idle", timeout=180)
        assert app_input(state) == "app in vpc-1"
        vpc_applied = applies(platform, "infra-live-vpc")[0]["status"]["attempts"][-1]["finishedAt"]
        assert applies(platform, "infra-live-app")[0]["metadata"]["annotations"][ann.RUN_CREATED_AT] >= \
            vpc_applied[:19]
        repository = platform.custom.get_namespaced_custom_object(ann.GROUP, ann.VERSION, platform.namespace,
                                                                  "terraformrepositories", "infra")
        generated = next(c for c in repository["status"]["conditions"] if c["type"] == "LayersGenerated")
        assert (generated["status"], generated["message"]) == ("True", "2 unit(s) under live")

        repo.commit({"live/extra/terragrunt.hcl": VPC_UNIT}, "a new unit")
        wait_for(lambda: "infra-live-extra" in names() or None, 30, 0.2, "the new unit's layer")
        repo.commit({"live/extra/terragrunt.hcl": None}, "the unit removed")
        wait_for(lambda: "infra-live-extra" not in names() or None, 120, 0.2, "the removed unit's layer deleted")
        assert names() == {"infra-live-vpc", "infra-live-app"}


def test_a_unit_runs_terragrunt_over_opentofu(world: tuple[Platform, TestRepo, Path], engines: Path) -> None:
    """Issue 27 item 4 on the other engine: with OpenTofu switched on, terragrunt drives tofu (TG_TF_PATH), which
    writes the state."""
    platform, _, state = world
    create_layer(platform, "vpc", "live/vpc", engines, opentofu={"enabled": True, "version": OPENTOFU.version},
                 terraform={"enabled": False})
    platform.wait_state("vpc", "Idle", timeout=180)
    written = json.loads((state / "live" / "vpc" / "terraform.tfstate").read_text())
    assert written["terraform_version"] == OPENTOFU.version, written["terraform_version"]
    logs = "\n".join(platform.core.read_namespaced_pod_log(pod.metadata.name, platform.namespace)
                     for pod in platform.pods("vpc"))
    assert f"with opentofu {OPENTOFU.version}" in logs and "terragrunt 1.1.3" in logs, logs
