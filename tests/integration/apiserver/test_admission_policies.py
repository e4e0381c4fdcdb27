"""ValidatingAdmissionPolicies as kubectl meets them on the emulator (issue 11, item 15): applied with kubectl
(their OpenAPI schemas served), enforced on create and update of matching resources with kube-apiserver's
422 and words, Warn bindings as kubectl's warnings, status updates and unbound policies left alone."""

from __future__ import annotations

import httpx
import yaml

from tests.integration.apiserver.conftest import WIDGETS, KubectlRun, widget

VAP = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
RULE = "object.spec.branch.startsWith(object.metadata.namespace + '/')"


def policy_docs(actions: list[str]) -> str:
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "branch-per-namespace"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"],
                                                    "operations": ["CREATE", "UPDATE"], "resources": ["widgets"]}]},
            "validations": [{"expression": RULE, "reason": "Invalid",
                             "messageExpression": "request.userInfo.username + ' may not use branch ' + "
                                                  "object.spec.branch + ' in namespace ' + request.namespace"}],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "branch-per-namespace-binding"},
        "spec": {"policyName": "branch-per-namespace", "validationActions": actions},
    }
    return yaml.safe_dump_all([policy, binding])


def test_a_policy_applied_with_kubectl_denies_with_the_apiservers_words(
    http: httpx.Client, widgets: str, kubectl: KubectlRun
) -> None:
    # Unbound, a policy does nothing.
    assert http.post(WIDGETS, json=widget("early", branch="main")).status_code == 201
    kubectl("apply", "-f", "-", stdin=policy_docs(["Deny"]))
    assert http.get(f"{VAP}/branch-per-namespace").json()["spec"]["validations"][0]["expression"] == RULE
    assert http.get(f"{BINDINGS}/branch-per-namespace-binding").status_code == 200

    refused = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(widget("w", branch="main")), check=False)
    assert refused.returncode != 0
    # kubectl prints a 422's causes, as it does against kube-apiserver (the Kubernetes docs' example output).
    assert refused.stderr == ('The widgets "w" is invalid: : ValidatingAdmissionPolicy \'branch-per-namespace\' '
                              "with binding 'branch-per-namespace-binding' denied request: burrito-py-local-admin "
                              "may not use branch main in namespace default\n")
    denied = http.post(WIDGETS, json=widget("w", branch="main"))
    assert denied.status_code == 422
    assert denied.json()["reason"] == "Invalid"
    assert denied.json()["message"] == (
        'widgets.example.com "w" is forbidden: ValidatingAdmissionPolicy \'branch-per-namespace\' with binding '
        "'branch-per-namespace-binding' denied request: burrito-py-local-admin may not use branch main in "
        "namespace default")
    assert denied.json()["details"]["causes"][0]["message"].startswith(
        "ValidatingAdmissionPolicy 'branch-per-namespace' with binding 'branch-per-namespace-binding' denied")
    assert http.get(f"{WIDGETS}/w").status_code == 404

    # Allowed objects pass; an update that breaks the rule is refused, the status subresource is not matched.
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump(widget("ok", branch="default/main")))
    patch = {"Content-Type": "application/merge-patch+json"}
    assert http.patch(f"{WIDGETS}/ok", json={"spec": {"branch": "main"}}, headers=patch).status_code == 422
    assert http.patch(f"{WIDGETS}/early/status", json={"status": {"state": "x"}}, headers=patch).status_code == 200
    # A dry run is refused the same way.
    assert http.post(f"{WIDGETS}?dryRun=All", json=widget("dry", branch="main")).status_code == 422


def test_a_warn_binding_lets_the_write_through_with_a_warning(
    http: httpx.Client, widgets: str, kubectl: KubectlRun
) -> None:
    kubectl("apply", "-f", "-", stdin=policy_docs(["Warn"]))
    done = kubectl("apply", "-f", "-", stdin=yaml.safe_dump(widget("w", branch="main")))
    assert ("Warning: Validation failed for ValidatingAdmissionPolicy 'branch-per-namespace' with binding "
            "'branch-per-namespace-binding': burrito-py-local-admin may not use branch main in namespace default"
            ) in done.stderr
    assert http.get(f"{WIDGETS}/w").status_code == 200


def test_an_expression_error_denies_unless_the_failure_policy_ignores_it(
    http: httpx.Client, widgets: str, kubectl: KubectlRun
) -> None:
    docs = policy_docs(["Deny"]).replace(RULE, "object.spec.nothing == 'x'")
    kubectl("apply", "-f", "-", stdin=docs)
    denied = http.post(WIDGETS, json=widget("w", branch="main"))
    assert denied.status_code == 422
    assert denied.json()["message"].endswith(
        "denied request: expression 'object.spec.nothing == 'x'' resulted in error: no such key: nothing")
    kubectl("apply", "-f", "-", stdin=docs.replace("failurePolicy: Fail", "failurePolicy: Ignore"))
    assert http.post(WIDGETS, json=widget("w", branch="main")).status_code == 201
