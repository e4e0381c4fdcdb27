"""ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1) as kube-apiserver enforces them, in pure
functions: which policies and bindings match a write, what their CEL validations decide, and the error or
warnings the request gets (worded as the apiserver's `policy/validating` dispatcher words them).

CEL is evaluated by `common-expression-language` (the `cel` module, cel-rust). Its standard library is CEL's;
Kubernetes' extension libraries (`quantity`, `url`, `authorizer`, …) are not there, and `params` is always
null: a policy with `paramKind` is a configuration error. Audit actions are not recorded (no audit log).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from burrito_local.kube_errors import ApiError, qualified
from burrito_local.workloads import label_selector_matches
from burrito_py.policy.cel_eval import CelError, evaluate_cel

Obj = dict[str, Any]
GROUP = "admissionregistration.k8s.io"
POLICIES = (GROUP, "validatingadmissionpolicies")
BINDINGS = (GROUP, "validatingadmissionpolicybindings")
# metav1.StatusReason → HTTP code, as the dispatcher's reasonToCode (anything else is 422).
_CODES = {"Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413, "Invalid": 422}


@dataclass(frozen=True)
class AdmissionRequest:
    """One write as admission sees it. `resource` is the plural; `subresource` "" for the main resource."""

    operation: str  # CREATE, UPDATE, DELETE
    group: str
    version: str
    resource: str
    kind: str
    name: str
    namespace: str  # "" for cluster-scoped objects
    object: Obj | None
    old_object: Obj | None = None
    subresource: str = ""
    user: Obj = field(default_factory=dict)  # username, uid, groups, extra
    dry_run: bool = False

    def cel_request(self) -> Obj:
        """The `request` variable (admission.k8s.io/v1 AdmissionRequest, the fields a policy reads)."""
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        return {"kind": kind, "resource": resource, "subResource": self.subresource, "requestKind": kind,
                "requestResource": resource, "requestSubResource": self.subresource, "name": self.name,
                "namespace": self.namespace, "operation": self.operation, "dryRun": self.dry_run,
                "userInfo": {"username": "", "uid": "", "groups": [], "extra": {}, **self.user}}


@dataclass
class Outcome:
    """What admission decided: `denial` (None: admitted) and Warning header texts (validationActions Warn)."""

    denial: ApiError | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Decision:
    message: str
    reason: str = "Invalid"


def _listed(values: Iterable[str] | None, value: str) -> bool:
    return any(v in ("*", value) for v in values or ())


def _resource_listed(resources: Iterable[str] | None, request: AdmissionRequest) -> bool:
    """kube's rule matching: `pods` is the main resource only, `pods/status` that subresource, `pods/*` the
    resource and its subresources, `*/status` every status subresource, `*` every main resource."""
    for entry in resources or ():
        res, slash, sub = entry.partition("/")
        if res not in ("*", request.resource):
            continue
        if (not slash and not request.subresource) or (slash and sub in ("*", request.subresource)):
            return True
    return False


def rule_matches(rule: Mapping[str, Any], request: AdmissionRequest) -> bool:
    """A NamedRuleWithOperations: operations, apiGroups, apiVersions, resources, resourceNames, scope."""
    if not _listed(rule.get("operations"), request.operation):
        return False
    if not _listed(rule.get("apiGroups"), request.group) or not _listed(rule.get("apiVersions"), request.version):
        return False
    if not _resource_listed(rule.get("resources"), request):
        return False
    names = rule.get("resourceNames") or ()
    if names and request.name not in names:
        return False
    scope = rule.get("scope") or "*"
    return scope == "*" or (scope == "Namespaced") == bool(request.namespace)


def resources_match(match: Mapping[str, Any] | None, request: AdmissionRequest,
                    namespace_labels: Mapping[str, str] | None) -> bool:
    """A MatchResources (a policy's matchConstraints, a binding's matchResources): a resource rule matches,
    no exclude rule does, and the namespace and object selectors select the request."""
    match = match or {}
    if not any(rule_matches(r, request) for r in match.get("resourceRules") or ()):
        return False
    if any(rule_matches(r, request) for r in match.get("excludeResourceRules") or ()):
        return False
    selector = match.get("namespaceSelector") or {}
    if selector and request.namespace and not label_selector_matches(selector, namespace_labels or {}):
        return False
    selector = match.get("objectSelector") or {}
    if selector:
        labelled = [o for o in (request.object, request.old_object) if o is not None]
        if not any(label_selector_matches(selector, (o.get("metadata") or {}).get("labels") or {})
                   for o in labelled):
            return False
    return True


def _variables(request: AdmissionRequest, namespace_object: Obj | None) -> dict[str, Any]:
    return {"object": request.object, "oldObject": request.old_object, "request": request.cel_request(),
            "params": None, "namespaceObject": namespace_object}


def _message(validation: Mapping[str, Any], variables: Mapping[str, Any]) -> str:
    """The denial message: messageExpression (a one-line string), else message, else the expression."""
    expression = validation.get("messageExpression")
    if expression:
        try:
            value = evaluate_cel(str(expression), variables)
        except CelError:
            value = None  # kube logs it and falls back
        if isinstance(value, str) and value.strip() and "\n" not in value.strip() and len(value) <= 5000:
            return value.strip()
    if str(validation.get("message") or "").strip():
        return str(validation["message"]).strip()
    return f"failed expression: {str(validation.get('expression') or '').strip()}"


def policy_decisions(policy: Mapping[str, Any], request: AdmissionRequest,
                     namespace_object: Obj | None) -> list[_Decision]:
    """The denials of one matching policy: one per failed validation, and an evaluation error is one unless
    `failurePolicy: Ignore`."""
    spec = policy.get("spec") or {}
    fail = spec.get("failurePolicy", "Fail") != "Ignore"
    variables = _variables(request, namespace_object)
    if spec.get("paramKind"):
        error = "failed to configure binding: params are not supported by the local API emulator"
        return [_Decision(error)] if fail else []
    try:
        for condition in spec.get("matchConditions") or ():
            if evaluate_cel(str(condition.get("expression") or ""), variables) is not True:
                return []
        variables["variables"] = {
            str(v.get("name")): evaluate_cel(str(v.get("expression") or ""), variables)
            for v in spec.get("variables") or ()
        }
    except CelError as exc:
        return [_Decision(str(exc))] if fail else []
    denials = []
    for validation in spec.get("validations") or ():
        try:
            allowed = evaluate_cel(str(validation.get("expression") or ""), variables) is True
        except CelError as exc:
            if fail:
                denials.append(_Decision(str(exc)))
            continue
        if not allowed:
            denials.append(_Decision(_message(validation, variables), str(validation.get("reason") or "Invalid")))
    return denials


def admit(policies: Iterable[Mapping[str, Any]], bindings: Iterable[Mapping[str, Any]], request: AdmissionRequest,
          namespace_object: Obj | None = None) -> Outcome:
    """Every binding of every policy matching the request, as the dispatcher runs them: the first Deny
    decision is the error, Warn decisions are warnings, Audit ones are dropped (there is no audit log)."""
    labels = ((namespace_object or {}).get("metadata") or {}).get("labels") or {}
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for binding in bindings:
        by_policy.setdefault(str((binding.get("spec") or {}).get("policyName") or ""), []).append(binding)
    outcome = Outcome()
    denied: list[tuple[str, str, _Decision]] = []
    for policy in policies:
        name = str(policy["metadata"]["name"])
        if not by_policy.get(name) or not resources_match((policy.get("spec") or {}).get("matchConstraints"),
                                                          request, labels):
            continue
        for binding in by_policy[name]:
            spec = binding.get("spec") or {}
            if spec.get("matchResources") and not resources_match(spec["matchResources"], request, labels):
                continue
            actions = spec.get("validationActions") or ()
            binding_name = str(binding["metadata"]["name"])
            for decision in policy_decisions(policy, request, namespace_object):
                if "Deny" in actions:
                    denied.append((name, binding_name, decision))
                if "Warn" in actions:
                    outcome.warnings.append(f"Validation failed for ValidatingAdmissionPolicy '{name}' with "
                                            f"binding '{binding_name}': {decision.message}")
    if denied:
        outcome.denial = denial_error(request, *denied[0])
    return outcome


def denial_error(request: AdmissionRequest, policy: str, binding: str, decision: _Decision) -> ApiError:
    """admission.NewForbidden's error with the decision's reason and code, and the message as a cause."""
    message = f"ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {decision.message}"
    resource = qualified(request.resource, request.group)
    name = request.name or str(((request.object or {}).get("metadata") or {}).get("name") or "")
    text = f'{resource} "{name}" is forbidden: {message}' if name else f"{resource} is forbidden: {message}"
    details = {"name": name, "group": request.group, "kind": request.resource, "causes": [{"message": message}]}
    return ApiError(_CODES.get(decision.reason, 422), decision.reason, text, details)
