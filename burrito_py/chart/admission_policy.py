"""The chart's ValidatingAdmissionPolicies (GA in Kubernetes 1.30), one source for every installer: the chart's
template is generated from `policy_objects` (`burrito-py chart generate`), and the e2e harness and
`burrito-py dev --mode in-process` apply them as is.

- `<fullname>-run-namespace` keeps a TerraformRun to its own namespace's layer (issue 11, item 15). A CRD's CEL
  rules cannot read `metadata.namespace`; the controllers check the same rule (`controllers/run/isolation.py`)
  for clusters without the policy.
- `<fullname>-layer-annotations` guards the layer annotations that grant an apply (docs/architecture.md §5.9):
  only the server sets a plan policy override (`api.burrito-py.io/override-policy`, after checking the caller
  against the policies' `overrideBy`); only the controllers set or change the `runner.burrito-py.io/`
  annotations (a plan's run, sum and summary, an apply's: they record them from the datastore, §6.4), so neither
  tenant code nor a tenant user with `patch` on layers can point a layer at a plan of their choosing (removing
  one only makes the layer plan again); and a runner's ServiceAccount, which executes tenant code, may not change
  a TerraformLayer at all (issue 24, findings 1 and 4). A day-2 operation's request (`api.burrito-py.io/operation`,
  docs/architecture.md §5.12) names who asks in `api.burrito-py.io/operation-by`: a user may name only themselves,
  and only the server names another (the caller it authenticated and authorized), so the audit is not the
  requester's word.
- `<fullname>-run-namespace` also lets only the controllers create or change a TerraformRun carrying
  `spec.operation`: such a run is made from an authorized request (and its runner may force-unlock the state).

Who the controllers and the server are depends on the installer: the chart names its release's ServiceAccounts
(`chartgen.admission_policy_template`), while the e2e harness and `burrito-py dev --mode in-process`, which run
the controllers and the server in process as the local admin, pass that identity as both writers.
"""

from __future__ import annotations

from typing import Any

from burrito_py.api import annotations as ann

__all__ = ["ANNOTATION_MESSAGE", "MESSAGE", "OPERATION_BY_MESSAGE", "OPERATION_RUN_MESSAGE", "OVERRIDE_MESSAGE", "RULE",
           "RUNNER_MESSAGE", "policy_objects"]

RULE = "!has(object.spec.layer.namespace) || object.spec.layer.namespace == object.metadata.namespace"
MESSAGE = ("spec.layer.namespace must be the TerraformRun's own namespace: a TerraformRun may only work for a "
           "layer of its own namespace")
API_VERSION = "admissionregistration.k8s.io/v1"
OVERRIDE_MESSAGE = (f"only the burrito-py server sets {ann.OVERRIDE_POLICY} (POST "
                    "/api/layers/<namespace>/<name>/override, which checks the caller against the policies' "
                    "overrideBy)")
RUNNER_MESSAGE = ("a runner's ServiceAccount may not change a TerraformLayer: the controllers record a run's "
                  "result on its layer")
OPERATION_BY_MESSAGE = (f"{ann.OPERATION_BY} must name the user who sets {ann.OPERATION} (request.userInfo.username); "
                        "only the burrito-py server names another (the caller of POST "
                        "/api/layers/<namespace>/<name>/operations)")
OPERATION_RUN_MESSAGE = ("only the burrito-py controllers create or change a TerraformRun with spec.operation (ask for "
                         f"a day-2 operation with the layer's {ann.OPERATION} annotation or the REST API)")
ANNOTATION_MESSAGE = (f"only the burrito-py controllers set or change the {ann.RUNNER_PREFIX} annotations of a "
                      "layer (they record them from the datastore when a run's attempt ends), or remove "
                      f"{ann.STATE_LOCATION} (only a migrate-state run moves a layer's state)")


def policy_objects(fullname: str, override_writers: list[str], runner_service_account: str,
                   annotation_writers: list[str]) -> list[dict[str, Any]]:
    """The policies `<fullname>-run-namespace` and `<fullname>-layer-annotations`, each with its binding (Deny) of
    the same name. `override_writers`: the usernames that may set the override (the server's);
    `annotation_writers`: those that may set the `runner.burrito-py.io/` annotations (the controllers')."""
    return [*_with_binding(_run_namespace(f"{fullname}-run-namespace", annotation_writers)),
            *_with_binding(_layer_annotations(f"{fullname}-layer-annotations", override_writers,
                                              runner_service_account, annotation_writers))]


def _with_binding(policy: dict[str, Any]) -> list[dict[str, Any]]:
    name = policy["metadata"]["name"]
    binding = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]


def _layer_annotations(name: str, override_writers: list[str], runner_service_account: str,
                       annotation_writers: list[str]) -> dict[str, Any]:
    key = ann.OVERRIDE_POLICY
    writers = ", ".join(f"'{w}'" for w in override_writers)
    recorders = ", ".join(f"'{w}'" for w in annotation_writers)
    override_rule = (f"!('{key}' in variables.new) || ('{key}' in variables.old && "
                     f"variables.old['{key}'] == variables.new['{key}']) || request.userInfo.username in [{writers}]")
    runner_rule = (
        f"!(request.userInfo.username.startsWith('system:serviceaccount:') && "
        f"request.userInfo.username.endsWith(':{runner_service_account}'))"
    )
    # Setting or changing a key is the controllers' alone; removing one is anyone's (the layer then plans again),
    # except where a migration put the state (§5.12): without it runs would follow the spec to the copy the
    # migration left behind.
    location = ann.STATE_LOCATION
    annotation_rule = (
        f"request.userInfo.username in [{recorders}] || "
        f"(variables.new.all(k, !k.startsWith('{ann.RUNNER_PREFIX}') || "
        f"(k in variables.old && variables.old[k] == variables.new[k])) && "
        f"(!('{location}' in variables.old) || '{location}' in variables.new))"
    )
    # Setting or changing an operation request (or who asks) names the author, unless the server writes it.
    op, by = ann.OPERATION, ann.OPERATION_BY
    operation_rule = (
        f"!(('{op}' in variables.new && !('{op}' in variables.old && variables.old['{op}'] == variables.new['{op}'])) "
        f"|| ('{by}' in variables.new && !('{by}' in variables.old && variables.old['{by}'] == variables.new['{by}']))"
        f") || request.userInfo.username in [{writers}] || "
        f"('{by}' in variables.new && variables.new['{by}'] == request.userInfo.username)"
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
                {"expression": annotation_rule, "message": ANNOTATION_MESSAGE, "reason": "Forbidden"},
                {"expression": operation_rule, "message": OPERATION_BY_MESSAGE, "reason": "Forbidden"},
            ],
        },
    }


def _run_namespace(name: str, controllers: list[str]) -> dict[str, Any]:
    recorders = ", ".join(f"'{w}'" for w in controllers)
    # A run's spec.operation is the controllers' to write (from an authorized request), on create and update.
    operation_rule = (f"!has(object.spec.operation) || request.userInfo.username in [{recorders}] || "
                      "(oldObject != null && has(oldObject.spec.operation) && oldObject.spec.operation == "
                      "object.spec.operation)")
    policy = {
        "apiVersion": API_VERSION,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [ann.GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"],
                "resources": ["terraformruns"]}]},
            "validations": [{"expression": RULE, "message": MESSAGE, "reason": "Invalid"},
                            {"expression": operation_rule, "message": OPERATION_RUN_MESSAGE, "reason": "Forbidden"}],
        },
    }
    return policy
