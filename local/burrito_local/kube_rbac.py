"""kube-apiserver's RBAC authorizer, as pure functions over RBAC objects (used by the API emulator).

- `request_attributes`: a request → the attributes kube-apiserver's RequestInfoFactory derives (verb from
  the method, list/watch/deletecollection for collections, the name a `metadata.name` field selector pins,
  group, resource, subresource, namespace; non-resource paths with the lowercase method as verb).
- `RbacIndex`: Roles, ClusterRoles and their bindings indexed by subject (user name or group), so one
  decision looks at the grants of the caller only, never at every binding.
- `authorize`: system:masters is allowed everything (kube's privileged-group authorizer, ahead of RBAC);
  else the first rule that allows the request among the caller's ClusterRoleBindings, then (for a
  namespaced request) the RoleBindings of that namespace. Rule matching is kube's `RuleAllows`.
- `forbidden`: the 403 Status kube-apiserver answers, word for word.
- `bootstrap_policy`: the default ClusterRoles and ClusterRoleBindings every cluster starts with.

Not modelled: ClusterRole `aggregationRule` (its rules are whatever the object lists, no aggregation
controller fills them), escalation checks on writing Roles/bindings, the Node authorizer.
Impersonation is `kube_impersonation`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from burrito_local.kube_authn import AUTHENTICATED, MASTERS, UNAUTHENTICATED, UserInfo
from burrito_local.kube_errors import ApiError

Obj = dict[str, Any]
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_STORAGES = ((RBAC_GROUP, "roles"), (RBAC_GROUP, "clusterroles"), (RBAC_GROUP, "rolebindings"),
                 (RBAC_GROUP, "clusterrolebindings"))
_METHOD_VERBS = {"GET": "get", "HEAD": "get", "POST": "create", "PUT": "update", "PATCH": "patch",
                 "DELETE": "delete"}
_NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
_WATCH_TRUE = frozenset({"true", "1", "True"})  # the values for which the emulator serves a watch
SA_PREFIX = "system:serviceaccount:"


# -- request attributes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class RequestAttributes:
    verb: str
    path: str
    resource_request: bool = False
    api_group: str = ""
    api_version: str = ""
    namespace: str = ""
    resource: str = ""
    subresource: str = ""
    name: str = ""


def _pinned_name(field_selector: str | None) -> str:
    """The name an AND-of-terms field selector requires (`metadata.name=x` / `==x`), else ""."""
    for term in (field_selector or "").split(","):
        for op in ("==", "="):
            key, sep, value = term.partition(op)
            if sep and key.strip() == "metadata.name" and not key.endswith("!"):
                value = value.strip()
                if value and value not in (".", "..") and "/" not in value and "%" not in value:
                    return value
                return ""
    return ""


def request_attributes(method: str, path: str, query: Mapping[str, str]) -> RequestAttributes:
    """What kube-apiserver's RequestInfoFactory derives from a request (see the module doc)."""
    parts = [p for p in path.strip("/").split("/")] if path.strip("/") else []
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return RequestAttributes(method.lower(), path)
    rest = parts[1:]
    group = ""
    if parts[0] == "apis":
        if len(rest) < 3:
            return RequestAttributes(method.lower(), path)
        group, rest = rest[0], rest[1:]
    version, rest = rest[0], rest[1:]
    verb = _METHOD_VERBS.get(method.upper(), "")
    if rest and rest[0] == "watch" and verb == "get":  # the deprecated /watch/ path prefix
        verb, rest = "watch", rest[1:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in _NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) > 1 else ""
    subresource = rest[2] if len(rest) > 2 else ""
    watch = query.get("watch") in _WATCH_TRUE
    if not name and verb in ("get", "watch"):
        verb = "watch" if watch or verb == "watch" else "list"
        name = _pinned_name(query.get("fieldSelector"))
    elif not name and verb == "delete":
        verb = "deletecollection"
    elif name and verb == "get" and watch:
        verb = "watch"  # the emulator serves a watch of one object here: authorize what is served
    return RequestAttributes(verb, path, True, group, version, namespace, resource, subresource, name)


# -- rules -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str] = frozenset()
    resources: tuple[str, ...] = ()
    resource_names: frozenset[str] = frozenset()
    non_resource_urls: tuple[str, ...] = ()

    @classmethod
    def parse(cls, rule: Mapping[str, Any]) -> Rule:
        def strings(key: str) -> list[str]:
            value = rule.get(key) or []
            return [str(v) for v in value] if isinstance(value, list) else []

        return cls(frozenset(strings("verbs")), frozenset(strings("apiGroups")), tuple(strings("resources")),
                   frozenset(strings("resourceNames")), tuple(strings("nonResourceURLs")))

    def as_object(self) -> Obj:
        out: Obj = {"verbs": sorted(self.verbs)}
        if self.non_resource_urls:
            out["nonResourceURLs"] = list(self.non_resource_urls)
        else:
            out["apiGroups"] = sorted(self.api_groups)
            out["resources"] = list(self.resources)
            if self.resource_names:
                out["resourceNames"] = sorted(self.resource_names)
        return out


def _resource_matches(rule: Rule, combined: str, subresource: str) -> bool:
    for allowed in rule.resources:
        if allowed in ("*", combined):
            return True
        # `*/status` matches the status subresource of every resource, `pods` never matches `pods/log`.
        if subresource and len(allowed) == len(subresource) + 2 and allowed.startswith("*/") \
                and allowed.endswith(subresource):
            return True
    return False


def _url_matches(rule: Rule, path: str) -> bool:
    for allowed in rule.non_resource_urls:
        if allowed in ("*", path):
            return True
        if allowed.endswith("*") and path.startswith(allowed.rstrip("*")):
            return True
    return False


def rule_allows(rule: Rule, attrs: RequestAttributes) -> bool:
    """kube's RuleAllows."""
    if not (attrs.verb in rule.verbs or "*" in rule.verbs):
        return False
    if not attrs.resource_request:
        return _url_matches(rule, attrs.path)
    if not (attrs.api_group in rule.api_groups or "*" in rule.api_groups):
        return False
    combined = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    if not _resource_matches(rule, combined, attrs.subresource):
        return False
    # resourceNames: an unnamed request (a list, a create, a deletecollection) never matches them.
    return not rule.resource_names or attrs.name in rule.resource_names


# -- the index ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Grant:
    """One binding's subject → the rules of its role (or why they could not be read)."""

    source: str  # how kube's allow reason names it
    rules: tuple[Rule, ...]
    error: str = ""


def _describe_subject(subject: Mapping[str, Any], binding_namespace: str) -> str:
    kind, name = str(subject.get("kind")), str(subject.get("name"))
    if kind == "ServiceAccount":
        return f'{kind} "{name}/{subject.get("namespace") or binding_namespace}"'
    return f'{kind} "{name}"'


def _subject_key(subject: Mapping[str, Any], binding_namespace: str) -> tuple[str, str] | None:
    """("user"|"group", name) the subject matches; None when it matches nobody (an SA of a
    ClusterRoleBinding without a namespace, an unknown kind)."""
    kind, name = subject.get("kind"), str(subject.get("name") or "")
    if not name:
        return None
    if kind == "User":
        return ("user", name)
    if kind == "Group":
        return ("group", name)
    if kind == "ServiceAccount":
        namespace = str(subject.get("namespace") or binding_namespace)
        return ("user", f"{SA_PREFIX}{namespace}:{name}") if namespace else None
    return None


@dataclass
class RbacIndex:
    """Grants by subject: cluster-wide (ClusterRoleBindings) and per namespace (RoleBindings)."""

    cluster: dict[tuple[str, str], list[Grant]] = field(default_factory=dict)
    namespaced: dict[tuple[str, str, str], list[Grant]] = field(default_factory=dict)

    @classmethod
    def build(cls, roles: Iterable[Obj], cluster_roles: Iterable[Obj], role_bindings: Iterable[Obj],
              cluster_role_bindings: Iterable[Obj]) -> RbacIndex:
        def parse_rules(role: Obj) -> tuple[Rule, ...]:
            return tuple(Rule.parse(r) for r in role.get("rules") or () if isinstance(r, dict))

        by_role = {(r["metadata"].get("namespace") or "", r["metadata"]["name"]): parse_rules(r) for r in roles}
        by_cluster_role = {r["metadata"]["name"]: parse_rules(r) for r in cluster_roles}
        index = cls()
        for binding, namespaced in [*((b, False) for b in cluster_role_bindings),
                                    *((b, True) for b in role_bindings)]:
            meta = binding["metadata"]
            namespace = str(meta.get("namespace") or "") if namespaced else ""
            ref = binding.get("roleRef") or {}
            role_kind, role_name = str(ref.get("kind")), str(ref.get("name"))
            found = (by_role.get((namespace, role_name)) if role_kind == "Role" and namespaced
                     else by_cluster_role.get(role_name) if role_kind == "ClusterRole" else None)
            error = "" if found is not None else f'{role_kind.lower()}.{RBAC_GROUP} "{role_name}" not found'
            binding_name = f"{namespace}/{meta['name']}" if namespaced else meta["name"]
            binding_kind = "RoleBinding" if namespaced else "ClusterRoleBinding"
            for subject in binding.get("subjects") or ():
                if not isinstance(subject, dict):
                    continue
                key = _subject_key(subject, namespace)
                if key is None:
                    continue
                source = (f'{binding_kind} "{binding_name}" of {role_kind} "{role_name}" to '
                          f"{_describe_subject(subject, namespace)}")
                grant = Grant(source, found or (), error)
                if namespaced:
                    index.namespaced.setdefault((namespace, *key), []).append(grant)
                else:
                    index.cluster.setdefault(key, []).append(grant)
        return index

    def grants(self, user: UserInfo, namespace: str) -> list[Grant]:
        """The caller's grants that apply to a request in `namespace` ("" = cluster scope / no namespace)."""
        keys = [("user", user.username), *(("group", g) for g in user.groups)]
        found = [g for key in keys for g in self.cluster.get(key, ())]
        if namespace:
            found.extend(g for key in keys for g in self.namespaced.get((namespace, *key), ()))
        return found


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""
    error: str = ""  # evaluation errors (a binding's missing role), as a SubjectAccessReview reports them


def _aggregate(errors: list[str]) -> str:
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def authorize(index: RbacIndex, user: UserInfo, attrs: RequestAttributes) -> Decision:
    if MASTERS in user.groups:
        return Decision(True)
    errors: list[str] = []
    for grant in index.grants(user, attrs.namespace):
        if grant.error:
            errors.append(grant.error)
            continue
        for rule in grant.rules:
            if rule_allows(rule, attrs):
                return Decision(True, f"RBAC: allowed by {grant.source}")
    if errors:
        return Decision(False, f"RBAC: {_aggregate(errors)}", _aggregate(errors))
    return Decision(False)


def rules_for(index: RbacIndex, user: UserInfo, namespace: str) -> tuple[list[Rule], list[str]]:
    """Every rule granted to `user` in `namespace` (SelfSubjectRulesReview) and the evaluation errors."""
    if MASTERS in user.groups:
        return [Rule(frozenset({"*"}), frozenset({"*"}), ("*",)), Rule(frozenset({"*"}), non_resource_urls=("*",))], []
    rules: list[Rule] = []
    errors: list[str] = []
    for grant in index.grants(user, namespace):
        if grant.error:
            errors.append(grant.error)
        rules.extend(grant.rules)
    return rules, errors


# -- answers ---------------------------------------------------------------------------------------------
def forbidden_message(username: str, attrs: RequestAttributes) -> str:
    """kube-apiserver's forbiddenMessage."""
    if not attrs.resource_request:
        return f'User "{username}" cannot {attrs.verb} path "{attrs.path}"'
    resource = f"{attrs.resource}/{attrs.subresource}" if attrs.subresource else attrs.resource
    where = f'in the namespace "{attrs.namespace}"' if attrs.namespace else "at the cluster scope"
    return f'User "{username}" cannot {attrs.verb} resource "{resource}" in API group "{attrs.api_group}" {where}'


def forbidden(username: str, attrs: RequestAttributes, reason: str = "") -> ApiError:
    """The 403 Status: `<resource>[.<group>] ["<name>"] is forbidden: <message>[: <reason>]`."""
    message = forbidden_message(username, attrs)
    if reason:
        message = f"{message}: {reason}"
    qualified = f"{attrs.resource}.{attrs.api_group}" if attrs.api_group else attrs.resource
    if not attrs.resource_request or not qualified:
        return ApiError(403, "Forbidden", f"forbidden: {message}")
    details = {k: v for k, v in (("name", attrs.name), ("group", attrs.api_group), ("kind", attrs.resource)) if v}
    head = f'{qualified} "{attrs.name}"' if attrs.name else qualified
    return ApiError(403, "Forbidden", f"{head} is forbidden: {message}", details)


def access_review_attributes(spec: Mapping[str, Any]) -> RequestAttributes:
    """The attributes a (Self)SubjectAccessReview spec asks about; ValueError names a bad field."""
    resource = spec.get("resourceAttributes")
    non_resource = spec.get("nonResourceAttributes")
    if resource and non_resource:
        raise ValueError("spec.resourceAttributes: Invalid value: \"\": cannot be specified in combination "
                         "with nonResourceAttributes")
    if isinstance(non_resource, dict):
        return RequestAttributes(str(non_resource.get("verb") or ""), str(non_resource.get("path") or ""))
    if isinstance(resource, dict):
        return RequestAttributes(
            verb=str(resource.get("verb") or ""), path="", resource_request=True,
            api_group=str(resource.get("group") or ""), api_version=str(resource.get("version") or ""),
            namespace=str(resource.get("namespace") or ""), resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""), name=str(resource.get("name") or ""))
    raise ValueError("spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or "
                     "resourceAttributes must be specified")


# -- validation of bindings --------------------------------------------------------------------------------
def _unsupported(field: str, value: object, allowed: Iterable[str]) -> Obj:
    listed = ", ".join(f'"{a}"' for a in allowed)
    return {"reason": "FieldValueNotSupported", "field": field,
            "message": f'Unsupported value: "{value}": supported values: {listed}'}


def _required(field: str) -> Obj:
    return {"reason": "FieldValueRequired", "field": field, "message": "Required value"}


def prepare_binding(obj: Obj, namespaced: bool) -> tuple[Obj, list[Obj]]:
    """A RoleBinding / ClusterRoleBinding with kube's v1 defaults (the apiGroups of roleRef and subjects)
    and the causes kube's validation reports (roleRef kind and group, subject kinds, names, and the
    namespace a ServiceAccount subject of a ClusterRoleBinding must name)."""
    causes: list[Obj] = []
    ref = dict(obj.get("roleRef") or {}) if isinstance(obj.get("roleRef"), dict) else {}
    ref.setdefault("apiGroup", RBAC_GROUP)
    kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
    if ref.get("apiGroup") != RBAC_GROUP:
        causes.append(_unsupported("roleRef.apiGroup", ref.get("apiGroup"), [RBAC_GROUP]))
    if ref.get("kind") not in kinds:
        causes.append(_unsupported("roleRef.kind", ref.get("kind") or "", kinds))
    if not ref.get("name"):
        causes.append(_required("roleRef.name"))
    subjects = []
    for i, raw in enumerate(obj.get("subjects") or ()):
        subject = dict(raw) if isinstance(raw, dict) else {}
        kind, field = subject.get("kind"), f"subjects[{i}]"
        group = "" if kind == "ServiceAccount" else RBAC_GROUP
        subject.setdefault("apiGroup", group)
        if not subject.get("name"):
            causes.append(_required(f"{field}.name"))
        if kind not in ("ServiceAccount", "User", "Group"):
            causes.append(_unsupported(f"{field}.kind", kind or "", ["ServiceAccount", "User", "Group"]))
        elif subject["apiGroup"] != group:
            causes.append(_unsupported(f"{field}.apiGroup", subject["apiGroup"], [group]))
        if kind == "ServiceAccount" and not namespaced and not subject.get("namespace"):
            causes.append(_required(f"{field}.namespace"))
        subjects.append(subject)
    out = {**obj, "roleRef": ref}
    if subjects:
        out["subjects"] = subjects
    return out, causes


# -- bootstrap policy ------------------------------------------------------------------------------------
_BOOTSTRAP_META = {"labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                   "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}}
_DISCOVERY_URLS = ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                   "/readyz", "/version", "/version/"]
_PUBLIC_INFO_URLS = ["/healthz", "/livez", "/readyz", "/version", "/version/"]


def _cluster_role(name: str, rules: list[Obj]) -> Obj:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRole", "metadata": {"name": name, **_BOOTSTRAP_META},
            "rules": rules}


def _cluster_role_binding(name: str, groups: list[str]) -> Obj:
    return {"apiVersion": f"{RBAC_GROUP}/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name, **_BOOTSTRAP_META},
            "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": RBAC_GROUP, "kind": "Group", "name": g} for g in groups]}


def bootstrap_policy() -> list[Obj]:
    """kube-apiserver's default roles that matter here (the user-facing admin/edit/view roles are not
    created: they are aggregated roles listing every built-in kind, none of which burrito-py uses)."""
    return [
        _cluster_role("cluster-admin", [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                                        {"nonResourceURLs": ["*"], "verbs": ["*"]}]),
        _cluster_role("system:discovery", [{"nonResourceURLs": _DISCOVERY_URLS, "verbs": ["get"]}]),
        _cluster_role("system:basic-user", [
            {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews",
                                                                  "selfsubjectrulesreviews"], "verbs": ["create"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]}]),
        _cluster_role("system:public-info-viewer", [{"nonResourceURLs": _PUBLIC_INFO_URLS, "verbs": ["get"]}]),
        _cluster_role("system:auth-delegator", [
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}]),
        _cluster_role_binding("cluster-admin", [MASTERS]),
        _cluster_role_binding("system:discovery", [AUTHENTICATED]),
        _cluster_role_binding("system:basic-user", [AUTHENTICATED]),
        _cluster_role_binding("system:public-info-viewer", [AUTHENTICATED, UNAUTHENTICATED]),
    ]
