"""The steps with the real terraform on terraform_data code: plan, then apply of exactly that plan binary,
state in a `local` backend whose path comes through the extra init arguments (as in e2e and the example)."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from burrito_py.plans.model import plan_summary
from burrito_py.runner.terraform import StepFailed, Steps
from burrito_py.runner.tools import tool_for

CODE = """
terraform {
  required_version = ">= 1.5"
  backend "local" {}
}

variable "message" {
  type    = string
  default = "%s"
}

resource "terraform_data" "this" {
  input = var.message
}

output "message" {
  value = terraform_data.this.output
}
"""


def layer(directory: Path, message: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "main.tf").write_text(CODE % message)
    return directory


def state_values(state: Path) -> list[str]:
    resources = json.loads(state.read_text())["resources"]
    return [instance["attributes"]["input"]["value"] for r in resources for instance in r["instances"]]


def test_plan_then_apply_the_plan_binary_in_another_directory(tmp_path: Path) -> None:
    state = tmp_path / "state" / "app.tfstate"
    init_args = [f"-backend-config=path={state}"]
    tool = tool_for("terraform", None, layer(tmp_path / "plan-pod", "v1"))  # the real one, >= 1.5
    assert tool.binary == shutil.which("terraform")

    # The plan pod.
    out = io.StringIO()
    planner = Steps(tool, tmp_path / "plan-pod", out=out)
    planner.init(init_args)
    plan_bin, plan_json, pretty = tmp_path / "plan.bin", tmp_path / "plan.json", tmp_path / "plan.txt"
    before_plan = len(out.getvalue())
    planner.plan(plan_bin, ["-var=message=v1"], copy_to=pretty)
    planner.show_json(plan_bin, plan_json)
    shown = tmp_path / "shown.txt"
    planner.show(plan_bin, shown)
    log = out.getvalue()
    # The kept copy is exactly what the plan step streamed, after its echoed command line.
    assert log[before_plan:].split("\n", 1)[1].startswith(pretty.read_text())
    assert "terraform_data.this will be created" in shown.read_text()
    assert "Terraform has been successfully initialized!" in log
    assert "-backend-config=…" in log and str(state) not in log.split("\n")[0]  # echoed masked
    assert "Plan: 1 to add, 0 to change, 0 to destroy." in log
    assert "\x1b[" not in log  # -no-color
    assert plan_summary(json.loads(plan_json.read_text())) == "Plan: 1 to add, 0 to change, 0 to destroy"
    assert "terraform_data.this will be created" in pretty.read_text()
    assert not state.exists()

    # The apply pod: a fresh checkout of the same code, the plan binary downloaded into it.
    applied_bin = tmp_path / "apply-pod-plan.bin"
    shutil.copyfile(plan_bin, applied_bin)
    out = io.StringIO()
    applier = Steps(tool, layer(tmp_path / "apply-pod", "v1"), out=out)
    applier.init(init_args)
    applier.apply(applied_bin)
    assert "Apply complete! Resources: 1 added, 0 changed, 0 destroyed." in out.getvalue()
    assert state_values(state) == ["v1"]

    # The same plan again is stale: terraform refuses it, and the step fails with terraform's error.
    with pytest.raises(StepFailed) as error:
        applier.apply(applied_bin)
    assert error.value.exit_code == 1 and error.value.step == "terraform apply"
    assert "Saved plan is stale" in str(error.value)
    assert state_values(state) == ["v1"]

    # Nothing left to do.
    planner.plan(plan_bin)
    planner.show_json(plan_bin, plan_json)
    assert plan_summary(json.loads(plan_json.read_text())) == "No changes."

    # A destroy plan (a layer deleted with destroyResourcesOnDeletion), applied as it is, empties the state;
    # a second one then finds nothing to destroy.
    out = io.StringIO()
    destroyer = Steps(tool, tmp_path / "plan-pod", out=out)
    destroyer.plan(plan_bin, destroy=True)
    assert "$ terraform plan -input=false -no-color -destroy" in out.getvalue()
    destroyer.show_json(plan_bin, plan_json)
    assert plan_summary(json.loads(plan_json.read_text())) == "Plan: 0 to add, 0 to change, 1 to destroy"
    applier.apply(plan_bin)
    assert state_values(state) == []
    destroyer.plan(plan_bin, destroy=True)
    destroyer.show_json(plan_bin, plan_json)
    assert plan_summary(json.loads(plan_json.read_text())) == "No changes."


def test_invalid_code_fails_the_plan_with_terraforms_error(tmp_path: Path) -> None:
    directory = layer(tmp_path / "layer", "v1")
    (directory / "broken.tf").write_text('resource "terraform_data" "broken" {\n  input = var.missing\n}\n')
    steps = Steps(tool_for("terraform", None, directory), directory, out=io.StringIO())
    steps.init([f"-backend-config=path={tmp_path / 'state.tfstate'}"])
    with pytest.raises(StepFailed) as error:
        steps.plan(tmp_path / "plan.bin")
    assert str(error.value) == "terraform plan failed (exit code 1): Error: Reference to undeclared input variable"
    assert not (tmp_path / "plan.bin").exists()
