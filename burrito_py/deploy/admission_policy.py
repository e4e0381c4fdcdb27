"""The ValidatingAdmissionPolicy that keeps a TerraformRun to its own namespace's layer (issue 11, item 15).

A CRD's CEL rules cannot read `metadata.namespace`, so the API-side check is an admission policy (GA in
Kubernetes 1.30). One source for every installer: the chart's template is generated from `policy_objects`
(`burrito-py chart generate`), and the e2e harness and `burrito-py dev --mode in-process` apply them as is.
The controllers check the same rule (`controllers/run_isolation.py`) for clusters without the policy.
"""

from __future__ import annotations

from typing import Any

from burrito_py.api import annotations as ann

__all__ = ["MESSAGE", "RULE", "policy_objects"]

RULE = "!has(object.spec.layer.namespace) || object.spec.layer.namespace == object.metadata.namespace"
MESSAGE = ("spec.layer.namespace must be the TerraformRun's own namespace: a TerraformRun may only work for a "
           "layer of its own namespace")
API_VERSION = "admissionregistration.k8s.io/v1"


def policy_objects(fullname: str) -> list[dict[str, Any]]:
    """The policy `<fullname>-run-namespace` and its binding (Deny) of the same name."""
    name = f"{fullname}-run-namespace"
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
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
