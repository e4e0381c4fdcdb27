"""The emulator authenticates every request and authorizes it as kube-apiserver's RBAC authorizer does."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from burrito_local.apiserver import ApiServer
from burrito_local.identity import request_token
from burrito_local.kube_tokens import API_AUDIENCES, TokenIssuer

RBAC = "/apis/rbac.authorization.k8s.io/v1"
AUTHZ = "/apis/authorization.k8s.io/v1"
FOO = "system:serviceaccount:default:foo"


def ensure_namespace(http: httpx.Client, name: str) -> None:
    assert http.post("/api/v1/namespaces", json={"metadata": {"name": name}}).status_code in (201, 409)


def account(http: httpx.Client, namespace: str, name: str, pod: str | None = None) -> str:
    """A ServiceAccount and a token of it for the API's audience."""
    ensure_namespace(http, namespace)
    http.post(f"/api/v1/namespaces/{namespace}/serviceaccounts", json={"metadata": {"name": name}})
    return request_token(http, namespace, name, list(API_AUDIENCES), pod=pod)


def client_for(server: ApiServer, token: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return httpx.Client(base_url=server.url, headers=headers, timeout=10)


@pytest.fixture
def foo(apiserver: ApiServer, http: httpx.Client) -> Iterator[httpx.Client]:
    """default/foo, a service account with no grants yet."""
    with client_for(apiserver, account(http, "default", "foo")) as client:
        yield client


def create(http: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = http.post(path, json=body)
    assert response.status_code == 201, response.text
    return response.json()  # type: ignore[no-any-return]


def cluster_role(http: httpx.Client, name: str, rules: list[dict[str, Any]]) -> None:
    create(http, f"{RBAC}/clusterroles", {"metadata": {"name": name}, "rules": rules})


def role(http: httpx.Client, namespace: str, name: str, rules: list[dict[str, Any]]) -> None:
    create(http, f"{RBAC}/namespaces/{namespace}/roles", {"metadata": {"name": name}, "rules": rules})


def bind(http: httpx.Client, name: str, role_kind: str, role_name: str, subjects: list[dict[str, Any]],
         namespace: str | None = None) -> str:
    path = f"{RBAC}/namespaces/{namespace}/rolebindings" if namespace else f"{RBAC}/clusterrolebindings"
    create(http, path, {"metadata": {"name": name},
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
                        "subjects": subjects})
    return f"{path}/{name}"


SA_FOO = [{"kind": "ServiceAccount", "name": "foo", "namespace": "default"}]
READ_PODS = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]


def test_a_service_account_without_grants_gets_kube_apiservers_403(foo: httpx.Client) -> None:
    got = foo.get("/api/v1/namespaces/default/pods/x")
    assert got.status_code == 403
    assert got.json() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Forbidden",
        "code": 403, "details": {"name": "x", "kind": "pods"},
        "message": f'pods "x" is forbidden: User "{FOO}" cannot get resource "pods" in API group "" in the '
                   f'namespace "default"'}
    got = foo.get("/apis/terraform.burrito-py.io/v1alpha1/terraformlayers")
    assert got.json()["message"] == (
        f'terraformlayers.terraform.burrito-py.io is forbidden: User "{FOO}" cannot list resource '
        f'"terraformlayers" in API group "terraform.burrito-py.io" at the cluster scope')
    assert foo.get("/foo").json()["message"] == f'forbidden: User "{FOO}" cannot get path "/foo"'
    assert foo.get("/api/v1/namespaces/default/pods/x/log").json()["message"] == (
        f'pods "x" is forbidden: User "{FOO}" cannot get resource "pods/log" in API group "" in the namespace '
        f'"default"')
    # What every authenticated user may do: discovery, health, asking about itself.
    assert foo.get("/api").status_code == 200 and foo.get("/apis").status_code == 200
    assert foo.get("/api/v1").status_code == 200 and foo.get("/healthz").text == "ok"


def test_a_role_binding_to_a_cluster_role_grants_in_its_namespace_only(http: httpx.Client,
                                                                       foo: httpx.Client) -> None:
    ensure_namespace(http, "other")
    cluster_role(http, "pod-reader", READ_PODS)
    bind(http, "foo-reads-pods", "ClusterRole", "pod-reader", SA_FOO, namespace="default")
    assert foo.get("/api/v1/namespaces/default/pods").status_code == 200
    denied = foo.get("/api/v1/namespaces/other/pods")
    assert denied.status_code == 403
    assert denied.json()["message"] == (f'pods is forbidden: User "{FOO}" cannot list resource "pods" in API group '
                                        f'"" in the namespace "other"')
    assert foo.get("/api/v1/pods").status_code == 403  # nor across namespaces


def test_a_cluster_role_binding_grants_everywhere(http: httpx.Client, foo: httpx.Client) -> None:
    ensure_namespace(http, "other")
    cluster_role(http, "pod-reader", READ_PODS)
    bind(http, "foo-reads-pods", "ClusterRole", "pod-reader", SA_FOO)
    for path in ("/api/v1/namespaces/default/pods", "/api/v1/namespaces/other/pods", "/api/v1/pods"):
        assert foo.get(path).status_code == 200, path
    assert foo.post("/api/v1/namespaces/default/configmaps", json={"metadata": {"name": "c"}}).status_code == 403


def test_resource_names_allow_that_name_only_and_never_list_or_watch(http: httpx.Client, foo: httpx.Client) -> None:
    for name in ("mine", "theirs"):
        create(http, "/api/v1/namespaces/default/configmaps", {"metadata": {"name": name}})
    role(http, "default", "one-cm", [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["mine"],
                                      "verbs": ["get", "list", "watch", "patch", "create"]}])
    bind(http, "foo-one-cm", "Role", "one-cm", SA_FOO, namespace="default")
    cms = "/api/v1/namespaces/default/configmaps"
    assert foo.get(f"{cms}/mine").status_code == 200
    assert foo.patch(f"{cms}/mine", json={"data": {"k": "v"}},
                     headers={"Content-Type": "application/merge-patch+json"}).status_code == 200
    assert foo.get(f"{cms}/theirs").status_code == 403
    assert foo.get(cms).status_code == 403
    assert foo.get(cms, params={"watch": "true"}).status_code == 403
    assert foo.post(cms, json={"metadata": {"name": "mine"}}).status_code == 403  # a create names no object
    # kube names the object a list/watch is pinned to by `metadata.name`: that one is allowed.
    listed = foo.get(cms, params={"fieldSelector": "metadata.name=mine"})
    assert listed.status_code == 200 and [i["metadata"]["name"] for i in listed.json()["items"]] == ["mine"]


def test_subresources_need_their_own_rule(apiserver: ApiServer, http: httpx.Client, foo: httpx.Client,
                                          widgets: str) -> None:
    create(http, widgets, {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
                           "spec": {"branch": "main"}})
    create(http, "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "bar"}})
    role(http, "default", "parents", [
        {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create", "get"]},
    ])
    bind(http, "foo-parents", "Role", "parents", SA_FOO, namespace="default")
    merge = {"Content-Type": "application/merge-patch+json"}
    status = {"status": {"state": "ok"}}
    assert foo.patch(f"{widgets}/w", json={"spec": {"mode": "apply"}}, headers=merge).status_code == 200
    denied = foo.patch(f"{widgets}/w/status", json=status, headers=merge)
    assert denied.status_code == 403
    assert 'cannot patch resource "widgets/status" in API group "example.com"' in denied.json()["message"]
    token_path = "/api/v1/namespaces/default/serviceaccounts/bar/token"
    assert foo.post(token_path, json={"spec": {}}).status_code == 403
    role(http, "default", "subs", [
        {"apiGroups": ["example.com"], "resources": ["widgets/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]},
    ])
    bind(http, "foo-subs", "Role", "subs", SA_FOO, namespace="default")
    assert foo.patch(f"{widgets}/w/status", json=status, headers=merge).status_code == 200
    assert foo.post(token_path, json={"spec": {}}).status_code == 201
    # `*/status` grants the status of every resource, and nothing else.
    cluster_role(http, "any-status", [{"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]}])
    with client_for(apiserver, account(http, "default", "baz")) as baz:
        bind(http, "baz-status", "ClusterRole", "any-status",
             [{"kind": "ServiceAccount", "name": "baz", "namespace": "default"}], namespace="default")
        assert baz.get(f"{widgets}/w/status").status_code == 200
        assert baz.get(f"{widgets}/w").status_code == 403


def test_the_service_account_groups_and_system_authenticated(apiserver: ApiServer, http: httpx.Client) -> None:
    for ns in ("team", "granted-all-sas", "granted-team-sas", "granted-authenticated"):
        ensure_namespace(http, ns)
    cluster_role(http, "pod-reader", READ_PODS)
    bind(http, "sas", "ClusterRole", "pod-reader", [{"kind": "Group", "name": "system:serviceaccounts"}],
         namespace="granted-all-sas")
    bind(http, "team", "ClusterRole", "pod-reader", [{"kind": "Group", "name": "system:serviceaccounts:team"}],
         namespace="granted-team-sas")
    bind(http, "authn", "ClusterRole", "pod-reader", [{"kind": "Group", "name": "system:authenticated"}],
         namespace="granted-authenticated")
    with client_for(apiserver, account(http, "team", "a")) as in_team, \
            client_for(apiserver, account(http, "default", "b")) as elsewhere, \
            client_for(apiserver, None) as anonymous:
        for ns in ("granted-all-sas", "granted-team-sas", "granted-authenticated"):
            assert in_team.get(f"/api/v1/namespaces/{ns}/pods").status_code == 200, ns
        assert elsewhere.get("/api/v1/namespaces/granted-all-sas/pods").status_code == 200
        assert elsewhere.get("/api/v1/namespaces/granted-team-sas/pods").status_code == 403
        assert elsewhere.get("/api/v1/namespaces/granted-authenticated/pods").status_code == 200
        assert anonymous.get("/api/v1/namespaces/granted-authenticated/pods").status_code == 403


def test_non_resource_urls(apiserver: ApiServer, http: httpx.Client, foo: httpx.Client) -> None:
    assert foo.get("/openapi/v3").status_code == 200  # system:discovery: /openapi/*
    cluster_role(http, "metrics", [{"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]}])
    bind(http, "foo-metrics", "ClusterRole", "metrics", SA_FOO)
    grants = foo.post(f"{AUTHZ}/selfsubjectaccessreviews",
                      json={"spec": {"nonResourceAttributes": {"path": "/logs/kubelet.log", "verb": "get"}}})
    assert grants.json()["status"] == {
        "allowed": True, "reason": 'RBAC: allowed by ClusterRoleBinding "foo-metrics" of ClusterRole "metrics" to '
                                   'ServiceAccount "foo/default"'}
    denied = foo.post(f"{AUTHZ}/selfsubjectaccessreviews",
                      json={"spec": {"nonResourceAttributes": {"path": "/metrics/extra", "verb": "get"}}})
    assert denied.json()["status"] == {"allowed": False}
    assert foo.get("/version").status_code == 200


def test_bindings_take_effect_on_the_next_request_and_their_deletion_revokes(http: httpx.Client,
                                                                             foo: httpx.Client) -> None:
    cms = "/api/v1/namespaces/default/configmaps"
    assert foo.get(cms).status_code == 403
    role(http, "default", "cm-reader", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}])
    binding = bind(http, "foo-cms", "Role", "cm-reader", SA_FOO, namespace="default")
    assert foo.get(cms).status_code == 200
    # Editing the Role changes the grant too.
    patched = http.patch(f"{RBAC}/namespaces/default/roles/cm-reader", json={"rules": []},
                         headers={"Content-Type": "application/merge-patch+json"})
    assert patched.status_code == 200 and foo.get(cms).status_code == 403
    http.patch(f"{RBAC}/namespaces/default/roles/cm-reader",
               json={"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]},
               headers={"Content-Type": "application/merge-patch+json"})
    assert foo.get(cms).status_code == 200
    assert http.delete(binding).status_code == 200
    assert foo.get(cms).status_code == 403


def test_subject_access_reviews(apiserver: ApiServer, http: httpx.Client, foo: httpx.Client) -> None:
    cluster_role(http, "pod-reader", READ_PODS)
    bind(http, "foo-reads-pods", "ClusterRole", "pod-reader", SA_FOO, namespace="default")
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": {
        "user": FOO, "groups": ["system:serviceaccounts", "system:authenticated"],
        "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "pods", "name": "p"}}}
    answer = http.post(f"{AUTHZ}/subjectaccessreviews", json=review)
    assert answer.status_code == 201
    assert answer.json()["status"] == {
        "allowed": True,
        "reason": 'RBAC: allowed by RoleBinding "default/foo-reads-pods" of ClusterRole "pod-reader" to '
                  'ServiceAccount "foo/default"'}
    review["spec"]["resourceAttributes"]["namespace"] = "kube-system"
    assert http.post(f"{AUTHZ}/subjectaccessreviews", json=review).json()["status"] == {"allowed": False}
    # Asking about others needs `create subjectaccessreviews` (system:auth-delegator grants it).
    denied = foo.post(f"{AUTHZ}/subjectaccessreviews", json=review)
    assert denied.status_code == 403
    assert denied.json()["message"] == (
        f'subjectaccessreviews.authorization.k8s.io is forbidden: User "{FOO}" cannot create resource '
        f'"subjectaccessreviews" in API group "authorization.k8s.io" at the cluster scope')
    bind(http, "foo-delegates", "ClusterRole", "system:auth-delegator", SA_FOO)
    assert foo.post(f"{AUTHZ}/subjectaccessreviews", json=review).status_code == 201
    invalid = http.post(f"{AUTHZ}/subjectaccessreviews", json={"spec": {"resourceAttributes": {"verb": "get"}}})
    assert invalid.status_code == 422 and "at least one of user or group must be specified" in invalid.text
    # A self review answers for the caller; a local one is pinned to its namespace.
    mine = foo.post(f"{AUTHZ}/selfsubjectaccessreviews", json={"spec": {"resourceAttributes": {
        "namespace": "default", "verb": "list", "resource": "pods"}}})
    assert mine.status_code == 201 and mine.json()["status"]["allowed"] is True
    local = http.post(f"{AUTHZ}/namespaces/default/localsubjectaccessreviews", json={"spec": {
        "user": FOO, "resourceAttributes": {"namespace": "default", "verb": "delete", "resource": "pods"}}})
    assert local.status_code == 201 and local.json()["status"] == {"allowed": False}
    # A binding to a missing role is an evaluation error, as kube reports it.
    bind(http, "dangling", "Role", "nope", SA_FOO, namespace="default")
    dangling = foo.post(f"{AUTHZ}/selfsubjectaccessreviews", json={"spec": {"resourceAttributes": {
        "namespace": "default", "verb": "delete", "resource": "pods"}}}).json()["status"]
    assert dangling == {"allowed": False, "reason": 'RBAC: role.rbac.authorization.k8s.io "nope" not found',
                        "evaluationError": 'role.rbac.authorization.k8s.io "nope" not found'}


def test_self_subject_rules_review_lists_the_callers_rules(http: httpx.Client, foo: httpx.Client) -> None:
    role(http, "default", "r", [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s"],
                                 "verbs": ["get"]}])
    bind(http, "foo-r", "Role", "r", SA_FOO, namespace="default")
    status = foo.post(f"{AUTHZ}/selfsubjectrulesreviews", json={"spec": {"namespace": "default"}}).json()["status"]
    assert {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["s"]} in (
        status["resourceRules"])
    assert any("/healthz" in r["nonResourceURLs"] for r in status["nonResourceRules"])
    assert status["incomplete"] is False


def sa_kubeconfig(server: ApiServer, token: str, path: Path) -> Path:
    server.write_kubeconfig(path)
    config = yaml.safe_load(path.read_text())
    config["users"][0]["user"] = {"token": token}
    path.write_text(yaml.safe_dump(config))
    return path


def test_kubectl_auth_can_i_and_whoami_as_a_service_account(apiserver: ApiServer, http: httpx.Client,
                                                            tmp_path: Path) -> None:
    kubeconfig = sa_kubeconfig(apiserver, account(http, "default", "foo"), tmp_path / "foo.kubeconfig")
    role(http, "default", "cm-reader", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list"]}])
    bind(http, "foo-cms", "Role", "cm-reader", SA_FOO, namespace="default")

    def kubectl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True,
                              timeout=60, check=False)

    assert kubectl("auth", "can-i", "list", "configmaps").stdout.strip() == "yes"
    no = kubectl("auth", "can-i", "delete", "configmaps")
    assert (no.stdout.strip(), no.returncode) == ("no", 1)
    assert kubectl("auth", "can-i", "list", "configmaps", "-n", "kube-system").stdout.strip() == "no"
    assert kubectl("auth", "can-i", "get", "/healthz").stdout.strip() == "yes"
    assert kubectl("get", "configmaps").returncode == 0
    refused = kubectl("get", "secrets")
    assert refused.returncode == 1
    assert (f'Error from server (Forbidden): secrets is forbidden: User "{FOO}" cannot list resource "secrets" in '
            f'API group "" in the namespace "default"') in refused.stderr
    whoami = kubectl("auth", "whoami", "-o", "yaml")
    assert yaml.safe_load(whoami.stdout)["status"]["userInfo"]["username"] == FOO
    # The admin kubeconfig is in system:masters.
    admin = subprocess.run(["kubectl", "--kubeconfig", str(apiserver.write_kubeconfig(tmp_path / "admin")), "auth",
                            "can-i", "*", "*", "--all-namespaces"], capture_output=True, text=True, check=False)
    assert admin.stdout.strip() == "yes"


def test_bad_tokens_are_401_and_no_token_is_anonymous(apiserver: ApiServer, http: httpx.Client) -> None:
    unauthorized = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    sa_uid = http.get("/api/v1/namespaces/default/serviceaccounts/default").json()["metadata"]["uid"]
    forged = TokenIssuer(lambda *_: None).issue("default", "default", sa_uid, list(API_AUDIENCES), 3600)[0]
    wrong_audience = request_token(http, "default", "default", ["burrito-py"])
    create(http, "/api/v1/namespaces/default/pods", {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "i"}]}})
    bound = request_token(http, "default", "default", list(API_AUDIENCES), pod="p")
    with client_for(apiserver, bound) as pod_client:
        assert pod_client.get("/api").status_code == 200
    http.delete("/api/v1/namespaces/default/pods/p")
    for token in (forged, wrong_audience, bound, "garbage"):
        with client_for(apiserver, token) as client:
            got = client.get("/api/v1/namespaces/default/pods")
            assert (got.status_code, got.json()) == (401, unauthorized)
            assert client.get("/healthz").status_code == 401  # a bad credential is refused everywhere
    with client_for(apiserver, None) as anonymous:
        got = anonymous.get("/api/v1/namespaces/default/pods")
        assert got.status_code == 403 and got.json()["message"] == (
            'pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" in the '
            'namespace "default"')
        for path in ("/healthz", "/livez", "/readyz", "/version"):
            assert anonymous.get(path).status_code == 200, path
        assert anonymous.get("/api").status_code == 403  # discovery is for authenticated users
        basic = anonymous.get("/api/v1/pods", headers={"Authorization": "Basic " + base64.b64encode(b"a:b").decode()})
        assert basic.status_code == 403  # no authenticator handles Basic: anonymous, as kube-apiserver


def test_the_bootstrap_policy_is_served(http: httpx.Client) -> None:
    roles = {r["metadata"]["name"]: r for r in http.get(f"{RBAC}/clusterroles").json()["items"]}
    assert {"cluster-admin", "system:discovery", "system:basic-user", "system:public-info-viewer",
            "system:auth-delegator"} <= set(roles)
    assert roles["cluster-admin"]["metadata"]["labels"] == {"kubernetes.io/bootstrapping": "rbac-defaults"}
    admin = http.get(f"{RBAC}/clusterrolebindings/cluster-admin").json()
    assert admin["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:masters"}]


def test_a_cluster_role_binding_must_name_the_namespace_of_a_service_account(http: httpx.Client) -> None:
    got = http.post(f"{RBAC}/clusterrolebindings", json={
        "metadata": {"name": "b"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                               "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "foo"}]})
    assert got.status_code == 422
    assert got.json()["message"] == ('ClusterRoleBinding.rbac.authorization.k8s.io "b" is invalid: '
                                     'subjects[0].namespace: Required value')
