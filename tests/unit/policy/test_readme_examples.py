"""The README's policy and notifier examples are valid objects, and the policy judges as the README says."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from burrito_py.api.notifier import TerraformNotifier
from burrito_py.api.policy import TerraformPlanPolicy
from burrito_py.plans.model import parse_plan
from burrito_py.policy.evaluate import evaluate

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()


def example(kind: str) -> dict[str, object]:
    found = re.search(rf"```yaml\n(apiVersion: terraform.burrito-py.io/v1alpha1\nkind: {kind}\n.*?)```", README, re.S)
    assert found is not None, kind
    document: dict[str, object] = yaml.safe_load(found.group(1))
    return document


def test_the_policy_example_judges_as_documented() -> None:
    policy = TerraformPlanPolicy.model_validate(example("TerraformPlanPolicy"))
    plan = parse_plan({"resource_changes": [
        {"address": "aws_s3_bucket_acl.a", "type": "aws_s3_bucket_acl",
         "change": {"actions": ["create"], "after": {"acl": "public-read", "tags": {"owner": "x"}}}},
        {"address": "aws_instance.b", "type": "aws_instance",
         "change": {"actions": ["update"], "before": {}, "after": {"tags": {}}}},
        {"address": "aws_instance.c", "type": "aws_instance", "change": {"actions": ["delete"], "before": {}}},
        {"address": "aws_iam_role.d", "type": "aws_iam_role",
         "change": {"actions": ["create"], "after": {"tags": {"owner": "y"}}}}]})
    verdict = evaluate([policy], plan, plan_sum="s", drift_correction=False)
    assert verdict.result == "GatesAutoApply"
    assert {(r.rule, tuple(r.addresses)) for r in verdict.results} == {
        ("no-destroy", ("aws_instance.c",)), ("tags", ("aws_instance.b",)), ("no-iam", ("aws_iam_role.d",)),
        ("conftest", ("aws_s3_bucket_acl.a",))}


def test_the_notifier_example_is_valid() -> None:
    notifier = TerraformNotifier.model_validate(example("TerraformNotifier"))
    assert notifier.spec.target_kind == "slack" and "DriftDetected" in notifier.spec.events
