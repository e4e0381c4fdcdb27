"""The chart's ValidatingAdmissionPolicies (GA in Kubernetes 1.30), one source for every installer: the chart's
template is generated from `policy_objects` (`burrito-py chart generate`), and the e2e harness and
`burrito-py dev --mode in-process` apply them as is.

- `<fullname>-run-namespace` keeps a TerraformRun to its own namespace's layer (issue 11, item 15). A CRD's CEL
  rules cannot read `metadata.namespace`; the controllers check the same rule (`controllers/run_isolation.py`)
  for clusters without the policy.
- `<fullname>-layer-annotations` guards the layer annotations that grant an apply (docs/architecture.md §5.9):
  only the server sets a plan policy override (`api.burrito-py.io/override-policy`, after checking the caller
  against the policies' `overrideBy`), and a runner, which executes tenant code, may change only the
  `runner.burrito-py.io/` annotations it reports with (never an approval or an override of its own plan).
"""

from __future__ import annotations

from typing import Any

from burrito_py.api import annotations as ann

__all__ = ["MESSAGE", "OVERRIDE_MESSAGE", "RULE", "RUNNER_MESSAGE", "policy_objects"]

RULE = "!has(object.spec.layer.namespace) || object.spec.layer.namespace == object.metadata.namespace"
MESSAGE = ("spec.layer.namespace must be the TerraformRun's own namespace: a TerraformRun may only work for a "
           "layer of its own namespace")
API_VERSION = "admissionregistration.k8s.io/v1"
OVERRIDE_MESSAGE = (f"only the burrito-py server sets {ann.OVERRIDE_POLICY} (POST "
                    "/api/layers/<namespace>/<name>/override, which checks the caller against the policies' "
                    "overrideBy)")
RUNNER_MESSAGE = f"a runner may change only the {ann.RUNNER_PREFIX} annotations of a layer"


def policy_objects(fullname: str, override_writers: list[str], runner_service_account: str) -> list[dict[str, Any]]:
    """The policies `<fullname>-run-namespace` and `<fullname>-layer-annotations`, each with its binding (Deny) of
    the same name. `override_writers`: the usernames that may set the override (the server's)."""
    return [*_with_binding(_run_namespace(f"{fullname}-run-namespace")),
            *_with_binding(_layer_annotations(f"{fullname}-layer-annotations", override_writers,
                                              runner_service_account))]


def _with_binding(policy: dict[str, Any]) -> list[dict[str, Any]]:
    name = policy["metadata"]["name"]
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def _layer_annotations(name: str, override_writers: list[str], runner_service_account: str) -> dict[str, Any]:
    key = ann.OVERRIDE_POLICY
    writers = ", ".join(f"'{w}'" for w in override_writers)
    override_rule = (f"!('{key}' in variables.new) || ('{key}' in variables.old && "
                     f"variables.old['{key}'] == variables.new['{key}']) || request.userInfo.username in [{writers}]")
    runner_rule = (
        f"!(request.userInfo.username.startsWith('system:serviceaccount:') && "
        f"request.userInfo.username.endsWith(':{runner_service_account}')) || "
        f"(variables.new.all(k, k.startsWith('{ann.RUNNER_PREFIX}') || "
        f"(k in variables.old && variables.old[k] == variables.new[k])) && "
        f"variables.old.all(k, k.startsWith('{ann.RUNNER_PREFIX}') || k in variables.new))"
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [ann.GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["terraformlayers"]}]},
            "variables": [
                {"name": "new", "expression": "has(object.metadata.annotations) ? object.metadata.annotations : {}"},
                {"name": "old", "expression": "oldObject != null && has(oldObject.metadata.annotations) ? "
                                              "oldObject.metadata.annotations : {}"},
            ],
            "validations": [
                {"expression": override_rule, "message": OVERRIDE_MESSAGE, "reason": "Forbidden"},
                {"expression": runner_rule, "message": RUNNER_MESSAGE, "reason": "Forbidden"},
            ],
        },
    }


def _run_namespace(name: str) -> dict[str, Any]:
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [ann.GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["terraformruns"]}]},
            "validations": [{"expression": RULE, "message": MESSAGE, "reason": "Invalid"}],
        },
    }
    return policy
