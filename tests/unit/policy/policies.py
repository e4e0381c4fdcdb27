"""Policies for the tests: each built-in rule also written in CEL and in Rego, to be judged identical."""

from __future__ import annotations

from typing import Any

from burrito_py.api.policy import ClusterTerraformPlanPolicy, TerraformPlanPolicy

# rule name → (built-in rule body, CEL rule body, Rego module): the same rule three ways.
SAME_RULE: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    "no-destroy": (
        {"noDestroy": {}},
        {"cel": {"expression": "!('delete' in change.actions)"}},
        """package burrito.nodestroy
import rego.v1
deny contains {"msg": "destroyed", "address": rc.address} if {
  some rc in input.resource_changes
  "delete" in rc.change.actions
}
""",
    ),
    "no-replace-db": (
        {"noReplace": {"types": ["aws_db_*", "terraform_data"]}},
        {"cel": {"expression": "!(change.action == 'replace' && (change.type.startsWith('aws_db_') || "
                               "change.type == 'terraform_data'))"}},
        """package burrito.noreplace
import rego.v1
stateful(t) if startswith(t, "aws_db_")
stateful(t) if t == "terraform_data"
deny contains {"msg": "replaced", "address": rc.address} if {
  some rc in input.resource_changes
  "delete" in rc.change.actions
  "create" in rc.change.actions
  stateful(rc.type)
}
""",
    ),
    "deny-iam": (
        {"denyTypes": ["aws_iam_*"]},
        {"cel": {"expression": "!change.type.startsWith('aws_iam_')"}},
        """package burrito.denyiam
import rego.v1
changing(rc) if { not rc.change.actions == ["no-op"]; not rc.change.actions == ["read"] }
changing(rc) if rc.previous_address
changing(rc) if rc.change.importing
deny contains {"msg": "iam", "address": rc.address} if {
  some rc in input.resource_changes
  changing(rc)
  startswith(rc.type, "aws_iam_")
}
""",
    ),
    "max-three": (
        {"maxChanges": {"total": 3}},
        {"cel": {"expression": "plan.counts.total <= 3", "scope": "plan"}},
        """package burrito.maxchanges
import rego.v1
changing(rc) if { not rc.change.actions == ["no-op"]; not rc.change.actions == ["read"] }
changing(rc) if rc.previous_address
changing(rc) if rc.change.importing
deny contains "too many changes" if {
  count([rc | some rc in input.resource_changes; changing(rc)]) > 3
}
""",
    ),
}


def policy(rules: list[dict[str, Any]], enforcement: str = "gateAutoApply", name: str = "p",
           namespace: str = "default", **spec: Any) -> TerraformPlanPolicy:
    return TerraformPlanPolicy.model_validate({
        "metadata": {"name": name, "namespace": namespace, "generation": 1},
        "spec": {"enforcement": enforcement, "rules": rules, **spec}})


def cluster_policy(rules: list[dict[str, Any]], enforcement: str = "mandatory", name: str = "cp",
                   **spec: Any) -> ClusterTerraformPlanPolicy:
    return ClusterTerraformPlanPolicy.model_validate({
        "metadata": {"name": name, "generation": 1}, "spec": {"enforcement": enforcement, "rules": rules, **spec}})


def written(style: int, rule: str) -> dict[str, Any]:
    """The rule named `rule` written as built-in (0), CEL (1) or Rego (2)."""
    body = SAME_RULE[rule]
    return {"name": rule, **(body[style] if style < 2 else {"rego": {"module": body[2]}})}
