"""ValidatingAdmissionPolicy decisions (issue 11, item 15): matching, CEL validations, failurePolicy, messages
and the denial worded as kube-apiserver's validating-policy dispatcher words it."""

from __future__ import annotations

from typing import Any

import pytest
from burrito_local.kube_admission_policy import (
    AdmissionRequest,
    CelError,
    admit,
    evaluate_cel,
    resources_match,
    rule_matches,
)

GROUP = "terraform.burrito-py.io"
RULE = {"apiGroups": [GROUP], "apiVersions": ["*"], "operations": ["CREATE", "UPDATE"], "resources": ["terraformruns"]}
SAME_NS = "!has(object.spec.layer.namespace) || object.spec.layer.namespace == object.metadata.namespace"


def run(namespace: str = "tenant", layer_ns: str | None = "default", name: str = "forged") -> dict[str, Any]:
    layer = {"name": "victim", **({"namespace": layer_ns} if layer_ns is not None else {})}
    return {"metadata": {"name": name, "namespace": namespace, "labels": {"team": "a"}},
            "spec": {"action": "apply", "layer": layer}}


def request(obj: dict[str, Any] | None = None, operation: str = "CREATE", sub: str = "",
            old: dict[str, Any] | None = None, user: str = "alice") -> AdmissionRequest:
    obj = obj if obj is not None else run()
    return AdmissionRequest(operation, GROUP, "v1alpha1", "terraformruns", "TerraformRun", obj["metadata"]["name"],
                            obj["metadata"]["namespace"], obj, old, sub, {"username": user})


def policy(*validations: dict[str, Any], name: str = "p", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"matchConstraints": {"resourceRules": [RULE]}, "validations": list(validations), **spec}}


def binding(policy_name: str = "p", actions: tuple[str, ...] = ("Deny",), name: str = "b",
            **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"policyName": policy_name, "validationActions": list(actions), **spec}}


def test_a_cross_namespace_run_is_denied_with_the_apiservers_words():
    rule = {"expression": SAME_NS, "message": "spec.layer.namespace must be the run's namespace"}
    outcome = admit([policy(rule)], [binding()], request())
    assert outcome.denial is not None
    status = outcome.denial.status()
    inner = ("ValidatingAdmissionPolicy 'p' with binding 'b' denied request: spec.layer.namespace must be the run's "
             "namespace")
    assert status["message"] == f'terraformruns.{GROUP} "forged" is forbidden: {inner}'
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["details"] == {"name": "forged", "group": GROUP, "kind": "terraformruns",
                                 "causes": [{"message": inner}]}


def test_same_namespace_and_absent_namespace_are_admitted():
    rules = [policy({"expression": SAME_NS})]
    assert admit(rules, [binding()], request(run(layer_ns="tenant"))).denial is None
    assert admit(rules, [binding()], request(run(layer_ns=None))).denial is None


def test_reason_sets_the_code_and_the_message_falls_back_to_the_expression():
    outcome = admit([policy({"expression": SAME_NS, "reason": "Forbidden"})], [binding()], request())
    assert outcome.denial is not None
    assert (outcome.denial.code, outcome.denial.reason) == (403, "Forbidden")
    assert outcome.denial.message.endswith(f"denied request: failed expression: {SAME_NS}")


def test_message_expression_wins_and_sees_request():
    rule = {"expression": SAME_NS, "message": "static",
            "messageExpression": "request.userInfo.username + ' may not run ' + request.name + ' in ' + "
                                 "request.namespace + ' on ' + request.operation"}
    outcome = admit([policy(rule)], [binding()], request())
    assert outcome.denial is not None
    assert outcome.denial.message.endswith("denied request: alice may not run forged in tenant on CREATE")
    # A messageExpression that fails or is not a one-line string falls back to `message`.
    for broken in ("object.nope", "'two\\nlines'", "1"):
        out = admit([policy({**rule, "messageExpression": broken})], [binding()], request())
        assert out.denial is not None and out.denial.message.endswith("denied request: static")


def test_expression_errors_follow_the_failure_policy():
    rule = {"expression": "object.spec.missing == 'x'", "message": "never shown"}
    denied = admit([policy(rule)], [binding()], request()).denial
    assert denied is not None
    assert denied.message.endswith("denied request: expression 'object.spec.missing == 'x'' resulted in error: "
                                   "no such key: missing")
    assert admit([policy(rule, failurePolicy="Ignore")], [binding()], request()).denial is None
    syntax = admit([policy({"expression": "object.spec =="})], [binding()], request()).denial
    assert syntax is not None and "compilation error: compilation failed" in syntax.message


def test_warn_gives_a_warning_and_audit_nothing():
    rule = {"expression": SAME_NS, "message": "wrong namespace"}
    warned = admit([policy(rule)], [binding(actions=("Warn",))], request())
    assert warned.denial is None
    assert warned.warnings == ["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': wrong namespace"]
    audited = admit([policy(rule)], [binding(actions=("Audit",))], request())
    assert audited.denial is None and audited.warnings == []


def test_only_bound_and_matching_policies_apply():
    rule = {"expression": "false"}
    assert admit([policy(rule)], [], request()).denial is None  # no binding
    assert admit([policy(rule)], [binding("other")], request()).denial is None
    assert admit([policy(rule)], [binding()], request(sub="status", operation="UPDATE", old=run())).denial is None
    assert admit([policy(rule)], [binding()], request(operation="DELETE")).denial is None
    # A binding's matchResources narrows the policy's constraints.
    narrowed = binding(matchResources={"resourceRules": [RULE], "namespaceSelector": {"matchLabels": {"x": "y"}}})
    tenant = {"metadata": {"name": "tenant", "labels": {"x": "y"}}}
    assert admit([policy(rule)], [narrowed], request()).denial is None
    assert admit([policy(rule)], [narrowed], request(), tenant).denial is not None


def test_match_conditions_variables_and_old_object():
    spec = {"matchConditions": [{"name": "updates", "expression": "request.operation == 'UPDATE'"}],
            "variables": [{"name": "was", "expression": "oldObject.spec.layer.name"}]}
    rule = {"expression": "object.spec.layer.name == variables.was", "message": "spec.layer.name is immutable"}
    assert admit([policy(rule, **spec)], [binding()], request()).denial is None  # CREATE: condition false
    renamed = run()
    renamed["spec"]["layer"]["name"] = "other"
    denied = admit([policy(rule, **spec)], [binding()], request(renamed, "UPDATE", old=run())).denial
    assert denied is not None and denied.message.endswith("spec.layer.name is immutable")
    assert admit([policy(rule, **spec)], [binding()], request(run(), "UPDATE", old=run())).denial is None


def test_params_are_a_configuration_error_unless_ignored():
    denied = admit([policy({"expression": "true"}, paramKind={"apiVersion": "v1", "kind": "ConfigMap"})],
                   [binding()], request()).denial
    assert denied is not None and "params are not supported" in denied.message
    ignored = policy({"expression": "true"}, paramKind={"kind": "ConfigMap"}, failurePolicy="Ignore")
    assert admit([ignored], [binding()], request()).denial is None


@pytest.mark.parametrize(("resources", "sub", "matches"), [
    (["terraformruns"], "", True),
    (["terraformruns"], "status", False),
    (["terraformruns/status"], "status", True),
    (["terraformruns/*"], "status", True),
    (["*/status"], "status", True),
    (["*"], "", True),
    (["*"], "status", False),
    (["*/*"], "status", True),
    (["pods"], "", False),
])
def test_resource_rules(resources: list[str], sub: str, matches: bool):
    assert rule_matches({**RULE, "resources": resources}, request(sub=sub, operation="UPDATE")) is matches


def test_rule_scope_names_and_selectors():
    assert not rule_matches({**RULE, "scope": "Cluster"}, request())
    assert rule_matches({**RULE, "scope": "Namespaced"}, request())
    assert not rule_matches({**RULE, "resourceNames": ["other"]}, request())
    assert not rule_matches({**RULE, "apiGroups": [""]}, request())
    match = {"resourceRules": [RULE], "objectSelector": {"matchLabels": {"team": "b"}}}
    assert not resources_match(match, request(), None)
    assert resources_match({**match, "objectSelector": {"matchLabels": {"team": "a"}}}, request(), None)
    assert not resources_match({"resourceRules": [RULE], "excludeResourceRules": [RULE]}, request(), None)


def test_evaluate_cel_errors_are_worded_as_kubernetes():
    assert evaluate_cel("object.a + 1", {"object": {"a": 1}}) == 2
    with pytest.raises(CelError, match=r"^expression 'object.b' resulted in error: no such key: b$"):
        evaluate_cel("object.b", {"object": {"a": 1}})
