"""kube_rbac against kube-apiserver's documented RBAC behaviour (request attributes, RuleAllows, bindings)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from burrito_local.kube_authn import ANONYMOUS, UserInfo
from burrito_local.kube_rbac import (
    RbacIndex,
    RequestAttributes,
    Rule,
    authorize,
    bootstrap_policy,
    forbidden,
    request_attributes,
    rule_allows,
    rules_for,
)

RBAC = "rbac.authorization.k8s.io"
SA = UserInfo("system:serviceaccount:team:runner", "u1",
              ("system:serviceaccounts", "system:serviceaccounts:team", "system:authenticated"))
ALICE = UserInfo("alice", groups=("devs", "system:authenticated"))


def attrs(method: str, path: str, **query: str) -> RequestAttributes:
    return request_attributes(method, path, query)


@pytest.mark.parametrize(("method", "path", "query", "verb", "resource", "sub", "name", "ns"), [
    ("GET", "/api/v1/namespaces/a/pods/p", {}, "get", "pods", "", "p", "a"),
    ("GET", "/api/v1/namespaces/a/pods", {}, "list", "pods", "", "", "a"),
    ("GET", "/api/v1/pods", {}, "list", "pods", "", "", ""),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "true"}, "watch", "pods", "", "", "a"),
    ("GET", "/api/v1/namespaces/a/pods", {"watch": "1", "fieldSelector": "metadata.name=p"}, "watch", "pods", "",
     "p", "a"),
    ("GET", "/api/v1/namespaces/a/pods", {"fieldSelector": "metadata.name==p,status.phase=Running"}, "list", "pods",
     "", "p", "a"),
    ("GET", "/api/v1/namespaces/a/pods", {"fieldSelector": "metadata.name!=p"}, "list", "pods", "", "", "a"),
    ("GET", "/api/v1/namespaces/a/pods/p", {"watch": "true"}, "watch", "pods", "", "p", "a"),
    ("GET", "/api/v1/namespaces/a/pods/p/log", {}, "get", "pods", "log", "p", "a"),
    ("POST", "/api/v1/namespaces/a/serviceaccounts/s/token", {}, "create", "serviceaccounts", "token", "s", "a"),
    ("POST", "/api/v1/namespaces/a/configmaps", {}, "create", "configmaps", "", "", "a"),
    ("PUT", "/apis/terraform.burrito-py.io/v1alpha1/namespaces/a/terraformlayers/l/status", {}, "update",
     "terraformlayers", "status", "l", "a"),
    ("PATCH", "/apis/coordination.k8s.io/v1/namespaces/a/leases/x", {}, "patch", "leases", "", "x", "a"),
    ("DELETE", "/api/v1/namespaces/a/pods/p", {}, "delete", "pods", "", "p", "a"),
    ("DELETE", "/api/v1/namespaces/a/pods", {}, "deletecollection", "pods", "", "", "a"),
    # The namespace object is named by, and lives in, its own namespace (kube's RequestInfo).
    ("GET", "/api/v1/namespaces/a", {}, "get", "namespaces", "", "a", "a"),
    ("PUT", "/api/v1/namespaces/a/finalize", {}, "update", "namespaces", "finalize", "a", "a"),
    ("GET", "/api/v1/namespaces", {}, "list", "namespaces", "", "", ""),
])
def test_request_attributes_are_what_kube_apiserver_derives(
    method: str, path: str, query: dict[str, str], verb: str, resource: str, sub: str, name: str, ns: str
) -> None:
    a = request_attributes(method, path, query)
    assert a.resource_request
    assert (a.verb, a.resource, a.subresource, a.name, a.namespace) == (verb, resource, sub, name, ns)


def test_group_and_version_and_non_resource_paths() -> None:
    a = attrs("GET", "/apis/terraform.burrito-py.io/v1alpha1/terraformlayers")
    assert (a.api_group, a.api_version, a.resource, a.verb) == ("terraform.burrito-py.io", "v1alpha1",
                                                               "terraformlayers", "list")
    for path in ("/healthz", "/version", "/api", "/api/v1", "/apis", "/apis/apps", "/apis/apps/v1", "/openapi/v3"):
        a = attrs("GET", path)
        assert not a.resource_request and a.verb == "get" and a.path == path
    assert attrs("POST", "/foo").verb == "post"  # the lowercase method


def rule(**fields: Any) -> Rule:
    return Rule.parse(fields)


def test_rule_allows_verbs_groups_resources_and_wildcards() -> None:
    pods = rule(apiGroups=[""], resources=["pods"], verbs=["get", "list"])
    assert rule_allows(pods, attrs("GET", "/api/v1/namespaces/a/pods/p"))
    assert rule_allows(pods, attrs("GET", "/api/v1/namespaces/a/pods"))
    assert not rule_allows(pods, attrs("GET", "/api/v1/namespaces/a/pods", watch="true"))
    assert not rule_allows(pods, attrs("DELETE", "/api/v1/namespaces/a/pods/p"))
    assert not rule_allows(pods, attrs("GET", "/apis/x.io/v1/namespaces/a/pods/p"))  # another group
    everything = rule(apiGroups=["*"], resources=["*"], verbs=["*"])
    assert rule_allows(everything, attrs("GET", "/api/v1/namespaces/a/pods/p/log"))
    assert not rule_allows(everything, attrs("GET", "/healthz"))  # resource rules never match paths


def test_subresources_need_their_own_rule() -> None:
    log = attrs("GET", "/api/v1/namespaces/a/pods/p/log")
    assert not rule_allows(rule(apiGroups=[""], resources=["pods"], verbs=["get"]), log)
    assert rule_allows(rule(apiGroups=[""], resources=["pods/log"], verbs=["get"]), log)
    assert not rule_allows(rule(apiGroups=[""], resources=["pods/log"], verbs=["get"]),
                           attrs("GET", "/api/v1/namespaces/a/pods/p"))
    status = attrs("PATCH", "/apis/t.io/v1/namespaces/a/layers/l/status")
    assert rule_allows(rule(apiGroups=["t.io"], resources=["*/status"], verbs=["patch"]), status)
    assert rule_allows(rule(apiGroups=["t.io"], resources=["layers/status"], verbs=["patch"]), status)
    assert not rule_allows(rule(apiGroups=["t.io"], resources=["layers"], verbs=["patch"]), status)
    assert not rule_allows(rule(apiGroups=["t.io"], resources=["*/status"], verbs=["patch"]),
                           attrs("PATCH", "/apis/t.io/v1/namespaces/a/layers/l"))
    assert not rule_allows(rule(apiGroups=["t.io"], resources=["*/scale"], verbs=["patch"]), status)
    token = attrs("POST", "/api/v1/namespaces/a/serviceaccounts/s/token")
    assert rule_allows(rule(apiGroups=[""], resources=["serviceaccounts/token"], verbs=["create"]), token)
    assert not rule_allows(rule(apiGroups=[""], resources=["serviceaccounts"], verbs=["create"]), token)


def test_resource_names_restrict_named_requests_and_never_allow_collections() -> None:
    named = rule(apiGroups=[""], resources=["configmaps"], resourceNames=["cfg"], verbs=["*"])
    assert rule_allows(named, attrs("GET", "/api/v1/namespaces/a/configmaps/cfg"))
    assert rule_allows(named, attrs("PATCH", "/api/v1/namespaces/a/configmaps/cfg"))
    assert rule_allows(named, attrs("DELETE", "/api/v1/namespaces/a/configmaps/cfg"))
    assert not rule_allows(named, attrs("GET", "/api/v1/namespaces/a/configmaps/other"))
    assert not rule_allows(named, attrs("GET", "/api/v1/namespaces/a/configmaps"))
    assert not rule_allows(named, attrs("GET", "/api/v1/namespaces/a/configmaps", watch="true"))
    assert not rule_allows(named, attrs("POST", "/api/v1/namespaces/a/configmaps"))
    assert not rule_allows(named, attrs("DELETE", "/api/v1/namespaces/a/configmaps"))
    # ... except a list or watch pinned to that name by a field selector, as kube's RequestInfo names it.
    assert rule_allows(named, attrs("GET", "/api/v1/namespaces/a/configmaps", fieldSelector="metadata.name=cfg"))


def test_non_resource_urls_match_exactly_or_by_a_trailing_star() -> None:
    urls = rule(nonResourceURLs=["/healthz", "/apis/*"], verbs=["get"])
    assert rule_allows(urls, attrs("GET", "/healthz"))
    assert not rule_allows(urls, attrs("GET", "/healthz/etcd"))
    assert rule_allows(urls, attrs("GET", "/apis/apps/v1"))
    assert not rule_allows(urls, attrs("GET", "/apis"))
    assert not rule_allows(urls, attrs("POST", "/healthz"))
    assert rule_allows(rule(nonResourceURLs=["*"], verbs=["*"]), attrs("PUT", "/anything"))


def role(kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"kind": kind, "metadata": meta, "rules": rules}


def binding(name: str, role_kind: str, role_name: str, subjects: list[dict[str, Any]],
            namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"metadata": meta, "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role_name},
            "subjects": subjects}


READ_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


def index(roles: Sequence[Any] = (), cluster_roles: Sequence[Any] = (), role_bindings: Sequence[Any] = (),
          cluster_role_bindings: Sequence[Any] = ()) -> RbacIndex:
    return RbacIndex.build(roles, cluster_roles, role_bindings, cluster_role_bindings)


def test_a_role_binding_to_a_cluster_role_grants_in_its_namespace_only() -> None:
    idx = index(cluster_roles=[role("ClusterRole", "pod-reader", READ_PODS)],
                role_bindings=[binding("rb", "ClusterRole", "pod-reader", [{"kind": "User", "name": "alice"}],
                                       "team")])
    got = authorize(idx, ALICE, attrs("GET", "/api/v1/namespaces/team/pods/p"))
    assert got.allowed
    assert got.reason == 'RBAC: allowed by RoleBinding "team/rb" of ClusterRole "pod-reader" to User "alice"'
    assert not authorize(idx, ALICE, attrs("GET", "/api/v1/namespaces/other/pods/p")).allowed
    assert not authorize(idx, ALICE, attrs("GET", "/api/v1/pods")).allowed  # not at the cluster scope


def test_a_cluster_role_binding_grants_everywhere_and_at_the_cluster_scope() -> None:
    idx = index(cluster_roles=[role("ClusterRole", "pod-reader", READ_PODS)],
                cluster_role_bindings=[binding("crb", "ClusterRole", "pod-reader",
                                               [{"kind": "Group", "name": "devs"}])])
    for path in ("/api/v1/namespaces/a/pods/p", "/api/v1/namespaces/b/pods", "/api/v1/pods"):
        assert authorize(idx, ALICE, attrs("GET", path)).allowed
    assert not authorize(idx, UserInfo("bob"), attrs("GET", "/api/v1/pods")).allowed


def test_role_bindings_use_roles_of_their_own_namespace() -> None:
    idx = index(roles=[role("Role", "r", READ_PODS, "team")],
                role_bindings=[binding("rb", "Role", "r", [{"kind": "User", "name": "alice"}], "team"),
                               binding("rb", "Role", "r", [{"kind": "User", "name": "alice"}], "other")])
    assert authorize(idx, ALICE, attrs("GET", "/api/v1/namespaces/team/pods")).allowed
    denied = authorize(idx, ALICE, attrs("GET", "/api/v1/namespaces/other/pods"))
    assert not denied.allowed
    assert denied.reason == f'RBAC: role.{RBAC} "r" not found'  # the binding in "other" names a missing Role


def test_service_account_subjects_and_their_groups() -> None:
    sa_in_team = [{"kind": "ServiceAccount", "name": "runner", "namespace": "team"}]
    idx = index(cluster_roles=[role("ClusterRole", "reader", READ_PODS)],
                role_bindings=[binding("explicit", "ClusterRole", "reader", sa_in_team, "x"),
                               # no namespace in a RoleBinding: the binding's own namespace
                               binding("implicit", "ClusterRole", "reader",
                                       [{"kind": "ServiceAccount", "name": "runner"}], "team"),
                               binding("all-sas", "ClusterRole", "reader",
                                       [{"kind": "Group", "name": "system:serviceaccounts"}], "y"),
                               binding("team-sas", "ClusterRole", "reader",
                                       [{"kind": "Group", "name": "system:serviceaccounts:team"}], "z"),
                               binding("authn", "ClusterRole", "reader",
                                       [{"kind": "Group", "name": "system:authenticated"}], "w")],
                cluster_role_bindings=[binding("no-ns", "ClusterRole", "reader",
                                               [{"kind": "ServiceAccount", "name": "runner"}])])
    for ns in ("x", "team", "y", "z", "w"):
        assert authorize(idx, SA, attrs("GET", f"/api/v1/namespaces/{ns}/pods")).allowed, ns
    assert not authorize(idx, SA, attrs("GET", "/api/v1/namespaces/v/pods")).allowed  # the CRB matches no one
    assert authorize(idx, SA, attrs("GET", "/api/v1/namespaces/team/pods")).reason == (
        'RBAC: allowed by RoleBinding "team/implicit" of ClusterRole "reader" to ServiceAccount "runner/team"')
    other_sa = UserInfo("system:serviceaccount:else:runner", groups=("system:serviceaccounts",
                                                                      "system:serviceaccounts:else"))
    assert not authorize(idx, other_sa, attrs("GET", "/api/v1/namespaces/z/pods")).allowed
    assert authorize(idx, other_sa, attrs("GET", "/api/v1/namespaces/y/pods")).allowed


def test_system_masters_is_allowed_everything_and_anonymous_nothing_but_public_info() -> None:
    policy = bootstrap_policy()
    idx = index(cluster_roles=[o for o in policy if o["kind"] == "ClusterRole"],
                cluster_role_bindings=[o for o in policy if o["kind"] == "ClusterRoleBinding"])
    masters = UserInfo("root", groups=("system:masters",))
    assert authorize(idx, masters, attrs("DELETE", "/api/v1/namespaces/a/secrets")).allowed
    assert authorize(idx, ANONYMOUS, attrs("GET", "/healthz")).allowed
    assert authorize(idx, ANONYMOUS, attrs("GET", "/version")).allowed
    assert not authorize(idx, ANONYMOUS, attrs("GET", "/api")).allowed  # discovery is for authenticated users
    assert authorize(idx, ALICE, attrs("GET", "/apis/apps/v1")).allowed
    assert authorize(idx, ALICE, attrs("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")).allowed
    assert not authorize(idx, ALICE, attrs("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews")).allowed
    assert not authorize(idx, ANONYMOUS, attrs("GET", "/api/v1/namespaces/default/pods")).allowed
    rules, errors = rules_for(idx, ALICE, "default")
    assert not errors and any("/api/*" in r.non_resource_urls for r in rules)


def test_forbidden_messages_are_kube_apiservers() -> None:
    user = "system:serviceaccount:default:foo"
    got = forbidden(user, attrs("GET", "/api/v1/namespaces/default/pods/x")).status()
    assert got["message"] == (f'pods "x" is forbidden: User "{user}" cannot get resource "pods" in API group "" '
                              f'in the namespace "default"')
    assert (got["reason"], got["code"], got["details"]) == ("Forbidden", 403, {"name": "x", "kind": "pods"})
    got = forbidden(user, attrs("GET", "/apis/terraform.burrito-py.io/v1alpha1/terraformlayers")).status()
    assert got["message"] == (f'terraformlayers.terraform.burrito-py.io is forbidden: User "{user}" cannot list '
                              f'resource "terraformlayers" in API group "terraform.burrito-py.io" at the cluster '
                              f'scope')
    assert got["details"] == {"group": "terraform.burrito-py.io", "kind": "terraformlayers"}
    got = forbidden(user, attrs("GET", "/api/v1/namespaces/default/pods/x/log")).status()
    assert 'cannot get resource "pods/log" in API group ""' in got["message"]
    assert got["message"].startswith('pods "x" is forbidden')
    assert forbidden("x", attrs("GET", "/foo")).status()["message"] == 'forbidden: User "x" cannot get path "/foo"'
    assert forbidden("x", attrs("GET", "/foo"), "RBAC: oops").message.endswith('path "/foo": RBAC: oops')


def test_bindings_are_defaulted_and_validated_as_kube_does() -> None:
    from burrito_local.kube_rbac import prepare_binding

    ok, causes = prepare_binding({"roleRef": {"kind": "Role", "name": "r"},
                                  "subjects": [{"kind": "User", "name": "u"},
                                               {"kind": "ServiceAccount", "name": "s"}]}, namespaced=True)
    assert causes == []
    assert ok["roleRef"]["apiGroup"] == RBAC
    assert [s["apiGroup"] for s in ok["subjects"]] == [RBAC, ""]
    _, causes = prepare_binding({"roleRef": {"kind": "Role", "name": "r"},
                                 "subjects": [{"kind": "ServiceAccount", "name": "s"}, {"kind": "Robot", "name": "x"},
                                              {"kind": "Group"}]}, namespaced=False)
    assert [(c["field"], c["message"]) for c in causes] == [
        ("roleRef.kind", 'Unsupported value: "Role": supported values: "ClusterRole"'),
        ("subjects[0].namespace", "Required value"),
        ("subjects[1].kind", 'Unsupported value: "Robot": supported values: "ServiceAccount", "User", "Group"'),
        ("subjects[2].name", "Required value"),
    ]
