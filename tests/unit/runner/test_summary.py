"""The plan's one-line summary, on hand-written plan JSON and on plans made by real terraform, where it must
agree with terraform's own `Plan:` line."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from burrito_py.plans.model import NO_CHANGES, is_summary_line, plan_summary


def change(*actions: str, importing: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"actions": list(actions)}
    if importing:
        block["importing"] = {"id": "x"}
    return {"address": "terraform_data.x", "change": block}


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ([], NO_CHANGES),
        ([change("no-op"), change("read")], NO_CHANGES),
        ([change("create"), change("create")], "Plan: 2 to add, 0 to change, 0 to destroy"),
        ([change("update")], "Plan: 0 to add, 1 to change, 0 to destroy"),
        ([change("delete")], "Plan: 0 to add, 0 to change, 1 to destroy"),
        ([change("delete", "create"), change("create", "delete")], "Plan: 2 to add, 0 to change, 2 to destroy"),
        ([change("no-op", importing=True)], "Plan: 1 to import, 0 to add, 0 to change, 0 to destroy"),
        ([change("forget")], "Plan: 0 to add, 0 to change, 0 to destroy, 1 to forget"),
    ],
)
def test_counts(changes: list[dict[str, Any]], expected: str) -> None:
    assert plan_summary({"format_version": "1.2", "resource_changes": changes}) == expected
    assert is_summary_line(expected)


def test_output_only_changes_are_changes() -> None:
    plan = {"resource_changes": [change("no-op")], "output_changes": {"a": {"actions": ["create"]}}}
    assert plan_summary(plan) == "Plan: 0 to add, 0 to change, 0 to destroy"
    unchanged = {"resource_changes": [], "output_changes": {"a": {"actions": ["no-op"]}}}
    assert plan_summary(unchanged) == NO_CHANGES


# -- real terraform ---------------------------------------------------------------------------------
V1 = """
terraform {
  backend "local" {}
}
resource "terraform_data" "kept" { input = "one" }
resource "terraform_data" "updated" { input = "one" }
resource "terraform_data" "replaced" { triggers_replace = ["one"] }
resource "terraform_data" "removed" { input = "one" }
"""
V2 = """
terraform {
  backend "local" {}
}
resource "terraform_data" "kept" { input = "one" }
resource "terraform_data" "updated" { input = "two" }
resource "terraform_data" "replaced" { triggers_replace = ["two"] }
resource "terraform_data" "added" { input = "two" }
"""


def terraform(cwd: Path, *args: str) -> str:
    env = {**os.environ, "TF_IN_AUTOMATION": "1"}
    result = subprocess.run(["terraform", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def plan(cwd: Path) -> tuple[dict[str, Any], str]:
    terraform(cwd, "plan", "-input=false", "-no-color", "-out=plan.bin")
    human = terraform(cwd, "show", "-no-color", "plan.bin")
    return json.loads(terraform(cwd, "show", "-json", "plan.bin")), human


def terraform_line(human: str) -> str:
    """Terraform's own summary line, without its final period."""
    match = re.search(r"^(Plan: .*)\.$", human, re.M)
    return match.group(1) if match else NO_CHANGES if "No changes." in human else "?"


def test_agrees_with_terraform_on_real_plans(tmp_path: Path) -> None:
    (tmp_path / "main.tf").write_text(V1)
    terraform(tmp_path, "init", "-input=false", "-no-color", f"-backend-config=path={tmp_path / 'state.tfstate'}")
    first, human = plan(tmp_path)
    assert plan_summary(first) == terraform_line(human) == "Plan: 4 to add, 0 to change, 0 to destroy"
    terraform(tmp_path, "apply", "-input=false", "-no-color", "plan.bin")

    (tmp_path / "main.tf").write_text(V2)
    second, human = plan(tmp_path)
    assert plan_summary(second) == terraform_line(human) == "Plan: 2 to add, 1 to change, 2 to destroy"

    (tmp_path / "main.tf").write_text(V1)  # the state still holds V1: the V2 plan was not applied
    third, human = plan(tmp_path)
    assert plan_summary(third) == terraform_line(human) == NO_CHANGES
    assert all(is_summary_line(plan_summary(p)) for p in (first, second, third))


def test_summary_reads_no_value() -> None:
    """The runner counts: values (and their masking) are not read, and the counts are those of the full model."""
    from burrito_py.plans.model import parse_plan

    plan = {"resource_changes": [
        {"address": "a.x", "change": {"actions": ["create"], "after": {"secret": "s3cr3t"},
                                      "after_sensitive": {"secret": True}}},
        {"address": "a.y", "change": {"actions": ["delete", "create"], "before": {"v": 1}, "after": {"v": 2}}},
    ]}
    light, full = parse_plan(plan, values=False), parse_plan(plan)
    assert all(rc.before is None and rc.after is None and rc.after_unknown is None for rc in light.resource_changes)
    assert full.resource_changes[0].after == {"secret": "(sensitive value)"}
    assert light.counts == full.counts
    assert plan_summary(plan) == full.summary() == "Plan: 2 to add, 0 to change, 1 to destroy"
