"""The chart's RBAC proven by kube-apiserver's own authorizer with real impersonation (issue 26 item 6): every
grant the rendered chart holds is allowed for its ServiceAccount, and what each component and a tenant user must
never do is refused. tests/unit/chart/test_chart_rbac.py pins the grants to an exact allow-list; this checks that
the objects mean on a cluster what that list says (a wrong apiGroup, a binding in the wrong namespace or a
subject's typo would pass the unit test's reading and fail here)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from burrito_local.controlplane import ControlPlane

from burrito_py.chart.rbac import Grant, grants
from tests.support.controlplane import apply
from tests.support.fidelity import Api
from tests.unit.chart.rendering import NAMESPACE, RELEASE, rendered

RBAC_KINDS = ("Namespace", "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")
TF, CORE = "terraform.burrito-py.io", ""
TENANT_USER = "alice"  # Kubernetes' built-in `edit` in team-a, as a platform would give a team


@pytest.fixture(scope="module")
def api(controlplane: ControlPlane) -> Iterator[Api]:
    objects = [o for o in rendered("tenants") if o["kind"] in RBAC_KINDS]
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}
                  for n in (NAMESPACE, "team-a", "team-b", "team-c")]
    apply(controlplane, *namespaces)
    apply(controlplane, *objects)
    apply(controlplane, {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                         "metadata": {"name": "alice-edit", "namespace": "team-a"},
                         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
                         "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                       "name": TENANT_USER}]})
    client = Api(controlplane.kubeconfig)
    yield client
    client.close()


def user_of(subject: str) -> str:
    namespace, _, name = subject.partition("/")
    return f"system:serviceaccount:{namespace}:{name}"


def can(api: Api, user: str, verb: str, group: str, resource: str, namespace: str = "", name: str = "") -> bool:
    """kube-apiserver's answer for `user` (impersonated, as `kubectl auth can-i --as` asks)."""
    resource, _, subresource = resource.partition("/")
    attributes: dict[str, Any] = {"verb": verb, "group": group, "resource": resource, "subresource": subresource,
                                  "namespace": namespace, "name": name}
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {k: v for k, v in attributes.items() if v}}}
    code, body = api.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review,
                          headers={"Impersonate-User": user})
    assert code == 201, body
    return bool(body["status"].get("allowed"))


def ask(api: Api, grant: Grant) -> bool:
    namespace = "" if grant.scope == "cluster" else grant.scope
    resource = grant.resource.replace("*", "anykind")  # an AGL group's every kind: ask about one
    return can(api, user_of(grant.subject), grant.verb, grant.api_group, resource, namespace,
               grant.resource_names[0] if grant.resource_names else "")


def test_every_grant_of_the_chart_is_allowed_by_kube_apiserver(api: Api) -> None:
    chart = sorted(g for g in grants(rendered("tenants")) if "/" in g.subject)
    assert len(chart) > 100
    refused = [g for g in chart if not ask(api, g)]
    assert refused == []


def sa(component: str) -> str:
    return f"system:serviceaccount:{NAMESPACE}:{RELEASE}-{component}"


RUNNER = "system:serviceaccount:team-a:burrito-py-runner"
PR_RUNNER = "system:serviceaccount:team-a:burrito-py-runner-pr"
# (who, verb, group, resource, namespace, name): what kube-apiserver must refuse.
NEVER: list[tuple[str, str, str, str, str, str]] = [
    # Runner pods run tenant code: reads of their run, layer and repository only (issue 24, finding 4).
    *[(who, verb, g, r, "team-a", "") for who in (RUNNER, PR_RUNNER) for verb, g, r in (
        ("get", CORE, "secrets"), ("list", CORE, "secrets"), ("get", CORE, "configmaps"), ("create", CORE, "pods"),
        ("create", TF, "terraformruns"), ("patch", TF, "terraformruns/status"), ("patch", TF, "terraformlayers"),
        ("list", TF, "terraformlayers"), ("create", CORE, "serviceaccounts/token"))],
    (RUNNER, "get", TF, "terraformlayers", "team-b", ""),
    (RUNNER, "get", CORE, "secrets", NAMESPACE, f"{RELEASE}-webhook-keys"),
    (RUNNER, "impersonate", CORE, "serviceaccounts", "team-a", "burrito-py-runner"),
    # The internet-facing server: no Secret but the webhook keys, no runs created, no pods outside tenants.
    (sa("server"), "get", CORE, "secrets", "team-a", ""),
    (sa("server"), "get", CORE, "secrets", NAMESPACE, "other"),
    (sa("server"), "create", TF, "terraformruns", "team-a", ""),
    (sa("server"), "get", CORE, "pods", "team-c", ""),
    # The datastore: reviews and reads of runs and layers; no Secret (no encryption key in this value set).
    (sa("datastore"), "get", CORE, "secrets", NAMESPACE, ""),
    (sa("datastore"), "list", TF, "terraformlayers", "team-a", ""),
    (sa("datastore"), "patch", TF, "terraformlayers/status", "team-a", ""),
    # The controllers: Secrets and pods only in tenant namespaces; no RBAC or namespace writes, no impersonation.
    (sa("controllers"), "get", CORE, "secrets", "team-c", ""),
    (sa("controllers"), "create", CORE, "pods", "team-c", ""),
    (sa("controllers"), "create", CORE, "pods", NAMESPACE, ""),
    (sa("controllers"), "delete", CORE, "namespaces", "", "team-a"),
    (sa("controllers"), "create", "rbac.authorization.k8s.io", "rolebindings", "team-a", ""),
    (sa("controllers"), "escalate", "rbac.authorization.k8s.io", "clusterroles", "", ""),
    (sa("controllers"), "impersonate", CORE, "users", "", "admin"),
    (sa("controllers"), "get", CORE, "secrets", NAMESPACE, "burrito-py-keys"),
    # A tenant user with `edit` in team-a: nothing in another team or in the release namespace.
    (TENANT_USER, "get", CORE, "secrets", "team-b", ""),
    (TENANT_USER, "get", CORE, "secrets", NAMESPACE, f"{RELEASE}-webhook-keys"),
    (TENANT_USER, "create", CORE, "pods", NAMESPACE, ""),
    (TENANT_USER, "impersonate", CORE, "serviceaccounts", "team-b", "burrito-py-runner"),
    (TENANT_USER, "impersonate", CORE, "serviceaccounts", NAMESPACE, f"{RELEASE}-controllers"),
    (TENANT_USER, "create", TF, "terraformruns", "team-b", ""),
]


def test_what_no_component_and_no_tenant_may_do_is_refused(api: Api) -> None:
    allowed = [row for row in NEVER if can(api, *row)]
    assert allowed == []


def test_the_tenant_user_can_act_in_their_own_namespace(api: Api) -> None:
    """The control: `edit` works in team-a, so the refusals above are RBAC's answer, not a broken identity."""
    assert can(api, TENANT_USER, "get", CORE, "secrets", "team-a")
    assert can(api, TENANT_USER, "create", CORE, "pods", "team-a")
    assert can(api, RUNNER, "get", TF, "terraformruns", "team-a")
