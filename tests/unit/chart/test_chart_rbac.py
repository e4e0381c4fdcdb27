"""RBAC allow-list: the exact grants of the chart, derived from the Kubernetes calls each component makes
(see the comments in templates/rbac.yaml and templates/tenants.yaml). A new grant fails here first: add it
only with the call that needs it."""

from __future__ import annotations

from typing import Any

import pytest

from burrito_py.deploy.rbac import Grant, grants, grants_per_component
from tests.unit.chart.rendering import NAMESPACE, RELEASE, VALUE_SETS, find, rendered

TF, AGL, CORE = "terraform.burrito-py.io", "agl.burrito-py.io", ""
# (apiGroup, resource, verbs, resourceNames) — namespaced rules, granted in each watched namespace.
Rule = tuple[str, str, str, tuple[str, ...]]
CONTROLLERS: list[Rule] = [
    (CORE, "pods", "create list watch", ()),
    (CORE, "pods/log", "get", ()),
    (CORE, "events", "create", ()),
    (CORE, "secrets", "get create update", ()),
    (CORE, "configmaps", "get", ()),  # spec.varsFrom, resolved into the run's inputs (controllers/run_inputs.py)
    ("coordination.k8s.io", "leases", "get create update delete", ()),
    (TF, "terraformrepositories", "list watch", ()),
    (TF, "terraformlayers", "get list watch create update patch delete", ()),
    (TF, "terraformruns", "get list watch create delete", ()),
    (TF, "terraformrepositories/status", "patch", ()),
    (TF, "terraformlayers/status", "patch", ()),
    (TF, "terraformruns/status", "patch", ()),
    (TF, "terraformpullrequests", "list watch", ()),
    (TF, "terraformpullrequests/status", "patch", ()),
    (TF, "terraformplanpolicies", "list watch", ()),
    (TF, "terraformnotifiers", "list watch", ()),
]
CONTROLLERS_CLUSTER: list[Rule] = [
    ("apiextensions.k8s.io", "customresourcedefinitions", "get list watch create", ()),
    (TF, "clusterterraformplanpolicies", "list watch", ()),
    (CORE, "namespaces", "get", ()),
    (AGL, "applicationdefinitions", "list watch patch", ()),
    (AGL, "applicationdefinitions/status", "patch", ()),
]
KOPF_NAMESPACES: Rule = (CORE, "namespaces", "list watch", ())
SERVER: list[Rule] = [
    (TF, "terraformlayers", "get list watch patch", ()),  # watch: the UI's layer index
    (TF, "terraformrepositories", "get list patch", ()),
    (TF, "terraformruns", "get list", ()),
    (TF, "terraformpullrequests", "get list create patch", ()),  # list: the UI's pull requests page
    (TF, "terraformplanpolicies", "get", ()),
    (CORE, "secrets", "get", ()),
    (CORE, "pods", "get", ()),
    (CORE, "pods/log", "get", ()),  # the UI's live log of a running attempt
]
DATASTORE: list[Rule] = [
    (CORE, "pods", "get", ()),
    (TF, "terraformruns", "get", ()),
    (TF, "terraformlayers", "get", ()),
]
TOKEN_REVIEWS: Rule = ("authentication.k8s.io", "tokenreviews", "create", ())
# Reads of its run, layer and repository only: no write, no Secret, no ConfigMap (issue 24, finding 4).
RUNNER: list[Rule] = [
    (TF, "terraformruns", "get", ()),
    (TF, "terraformlayers", "get", ()),
    (TF, "terraformrepositories", "get", ()),
]
# AGL kinds named in the tenants value set.
AGL_KINDS = [("apps.burrito-py.io", "databases"), ("platform.example.com", "buckets")]


def sa(component: str) -> str:
    return f"{NAMESPACE}/{RELEASE}-{component}"


def expand(subject: str, rules: list[Rule], scopes: list[str]) -> set[Grant]:
    return {
        Grant(subject, group, resource, verb, scope, names)
        for group, resource, verbs, names in rules
        for verb in verbs.split()
        for scope in scopes
    }


def expected(tenants: list[str], cluster_mode: bool, agl_kinds: list[tuple[str, str]],
             shards: bool = False) -> set[Grant]:
    scopes = ["cluster"] if cluster_mode else tenants
    controllers = CONTROLLERS + [rule for g, p in agl_kinds for rule in ((g, p, "list watch", ()),
                                                                          (g, f"{p}/status", "patch", ()))]
    cluster = CONTROLLERS_CLUSTER + [(g, p, "list", ()) for g, p in agl_kinds]
    if agl_kinds:
        names = tuple(sorted(f"{p}.{g}" for g, p in agl_kinds))
        cluster.append(("apiextensions.k8s.io", "customresourcedefinitions", "update delete", names))
    if not cluster_mode or shards:  # shards: kopf follows the namespaces of their patterns, _prime lists them
        cluster.append(KOPF_NAMESPACES)
    out = expand(sa("controllers"), controllers, scopes) | expand(sa("controllers"), cluster, ["cluster"])
    # The leader Lease(s), one per Deployment (shard), in the release namespace.
    leases = tuple(sorted(f"{RELEASE}-controllers-{s['name']}" for s in VALUE_SETS["shards"]["controllers"]["shards"])
                   ) if shards else (f"{RELEASE}-controllers",)
    out |= expand(sa("controllers"), [("coordination.k8s.io", "leases", "create", ()),
                                      ("coordination.k8s.io", "leases", "get update", leases)], [NAMESPACE])
    out |= expand(sa("server"), SERVER, scopes) | expand(sa("server"), [TOKEN_REVIEWS], ["cluster"])
    out |= expand(sa("server"), [(TF, "clusterterraformplanpolicies", "get", ()),
                                 ("authorization.k8s.io", "subjectaccessreviews", "create", ())], ["cluster"])
    out |= expand(sa("datastore"), DATASTORE, scopes) | expand(sa("datastore"), [TOKEN_REVIEWS], ["cluster"])
    for tenant in tenants:
        out |= expand(f"{tenant}/burrito-py-runner", RUNNER, [tenant])
    return out


@pytest.mark.parametrize(
    ("name", "tenants", "cluster_mode", "agl_kinds", "shards"),
    [
        ("default", [NAMESPACE], False, [], False),
        ("tenants", ["team-a", "team-b"], False, AGL_KINDS, False),
        ("cluster-mode", ["team-a"], True, [], False),
        ("network-policy", ["team-a", "team-b"], False, [], False),
        ("shards", ["team-a-prod", "team-b"], True, [], True),
    ],
)
def test_exact_grants(name: str, tenants: list[str], cluster_mode: bool, agl_kinds: list[tuple[str, str]],
                      shards: bool) -> None:
    got = grants(rendered(name))
    want = expected(tenants, cluster_mode, agl_kinds, shards)
    assert sorted(got - want) == [], "new grants"
    assert sorted(want - got) == [], "missing grants"


def test_datastore_encryption_and_retention_grants() -> None:
    extra = grants(rendered("s3-encryption")) - expected([NAMESPACE], False, [])
    assert extra == {
        Grant(sa("datastore"), CORE, "secrets", "get", NAMESPACE, ("burrito-py-keys",)),
        *expand(sa("datastore"), [(TF, r, "list", ()) for r in ("terraformlayers", "terraformruns",
                                                                  "terraformrepositories")], ["cluster"]),
    }


def _roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Role", "ClusterRole")]


@pytest.mark.parametrize(
    "name", ["default", "tenants", "cluster-mode", "s3-encryption", "network-policy", "ha", "shards"]
)
def test_no_wildcards_and_no_cluster_wide_secrets_in_tenant_mode(name: str) -> None:
    objects = rendered(name)
    for role in _roles(objects):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in (rule.get(key) or ()), (role["metadata"]["name"], rule)
            assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"] and "impersonate" not in rule[
                "verbs"]
    all_grants = grants(objects)
    cluster_secrets = {g for g in all_grants if g.resource == "secrets" and g.scope == "cluster"}
    if name not in ("cluster-mode", "shards"):
        assert cluster_secrets == set()
    else:  # cluster mode: only what the code needs everywhere (outputs Secrets, webhook secrets), never list/watch
        assert {g.verb for g in cluster_secrets} == {"get", "create", "update"}
    runner = {g for g in all_grants if g.subject.endswith("/burrito-py-runner")}
    assert {(g.resource, g.verb) for g in runner} == {("terraformruns", "get"), ("terraformlayers", "get"),
                                                     ("terraformrepositories", "get")}
    assert all(g.scope != "cluster" for g in runner)


def test_runner_rules_match_the_runner_api_calls() -> None:
    """The runner's only API calls (burrito_py/runner/kube.py): GET of its run, layer and repository. It writes
    nothing and reads no Secret (issue 24: the controllers record its result and resolve its variables)."""
    import inspect

    from burrito_py.runner import kube

    source = inspect.getsource(kube.Kube)
    assert source.count('"GET"') == 1 and "/api/v1/" not in source
    for verb in ('"PATCH"', '"POST"', '"PUT"', '"DELETE"'):
        assert verb not in source


def test_rule_counts_per_component() -> None:
    """The figures quoted in the README: distinct (apiGroup, resource, verb) grants per component."""
    counts = grants_per_component(rendered("default"), RELEASE)
    assert counts == {"controllers": 52, "server": 20, "datastore": 4, "runner": 3}


def test_the_emulator_platforms_grant_runners_exactly_the_charts_runner_role() -> None:
    """`grant_runner_access` (test platforms, `dev --mode in-process`) and the chart must not drift apart."""
    from burrito_py.local.identity import RUNNER_RULES

    def flat(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}

    role = next(o for o in rendered("default") if o["kind"] == "Role" and o["metadata"]["name"] == "burrito-py-runner")
    assert flat(RUNNER_RULES) == flat(role["rules"])


def test_datastore_admins_may_reach_the_datastore_through_the_service_proxy_and_nothing_else() -> None:
    """`burrito-py plan download` with only a kubeconfig (burrito_py/kube_proxy.py): the datastore's admin users
    and groups get `services/proxy` get on the datastore Service alone, and list of Services to find it."""
    from burrito_py.deploy.chart import render_chart

    assert not [o for o in rendered("default") if o["metadata"]["name"].endswith("-plan-download")]
    objects = render_chart({"datastore": {"auth": {"extraAdminUsers": ["alice@example.com"],
                                                   "adminGroups": ["platform"]}}}, RELEASE, NAMESPACE)
    role = find(objects, "Role", f"{RELEASE}-plan-download")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"],
         "resourceNames": [f"{RELEASE}-datastore:8080", f"{RELEASE}-datastore:http"]},
    ]
    binding = find(objects, "RoleBinding", f"{RELEASE}-plan-download")
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [("User", "alice@example.com"),
                                                                    ("Group", "platform")]
