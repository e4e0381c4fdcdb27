"""RBAC allow-list: the exact grants of the chart, derived from the Kubernetes calls each component makes
(see the comments in templates/rbac.yaml and templates/tenants.yaml). A new grant fails here first: add it
only with the call that needs it."""

from __future__ import annotations

from typing import Any

import pytest

from burrito_py.chart.rbac import Grant, grants, grants_per_component
from tests.unit.chart.rendering import NAMESPACE, RELEASE, VALUE_SETS, find, rendered

TF, AGL, CORE = "terraform.burrito-py.io", "agl.burrito-py.io", ""
# (apiGroup, resource, verbs, resourceNames) — namespaced rules, granted in each watched namespace.
Rule = tuple[str, str, str, tuple[str, ...]]
CONTROLLERS: list[Rule] = [
    (CORE, "pods", "list watch", ()),
    (CORE, "events", "create", ()),
    (TF, "terraformrepositories", "list watch", ()),
    (TF, "terraformlayers", "get list watch create update patch delete", ()),
    (TF, "terraformruns", "get list watch create delete", ()),
    (TF, "terraformrepositories/status", "patch", ()),
    (TF, "terraformlayers/status", "patch", ()),
    (TF, "terraformruns/status", "patch", ()),
    (TF, "terraformnotifiers/status", "patch", ()),  # a notifier's lastDelivery (controllers/layer/notifications.py)
    (TF, "terraformpullrequests", "get list watch create patch", ()),  # create, patch: pull request polls
    (TF, "terraformpullrequests/status", "patch", ()),
    (TF, "terraformplanpolicies", "list watch", ()),
    (TF, "terraformplanpolicies/status", "patch", ()),  # Ready: the policy compiles (planpolicy)
    (TF, "terraformnotifiers", "list watch", ()),
]
# Only in tenant namespaces, whatever the mode: runner pods, their logs, Secrets, per-layer Leases.
CONTROLLERS_TENANT: list[Rule] = [
    # get, delete: a pod found after a 409 (reconcile.py _refuse_existing); delete: a pod that did not start in time
    (CORE, "pods", "get create delete", ()),
    (CORE, "pods/log", "get", ()),
    (CORE, "secrets", "get create update", ()),
    (CORE, "configmaps", "get", ()),  # spec.varsFrom, resolved into the run's inputs (controllers/layer/run_inputs.py)
    (CORE, "serviceaccounts", "get", ()),  # an override's serviceAccountName, opened to runners or not
    ("coordination.k8s.io", "leases", "get create update delete", ()),
]
CONTROLLERS_CLUSTER: list[Rule] = [
    ("apiextensions.k8s.io", "customresourcedefinitions", "get list watch create", ()),
    (TF, "clusterterraformplanpolicies", "list watch", ()),
    (TF, "clusterterraformplanpolicies/status", "patch", ()),
    (CORE, "namespaces", "get", ()),
    (AGL, "applicationdefinitions", "list watch patch", ()),
    (AGL, "applicationdefinitions/status", "patch", ()),
]
KOPF_NAMESPACES: Rule = (CORE, "namespaces", "list watch", ())
SERVER: list[Rule] = [
    (TF, "terraformlayers", "get list watch patch", ()),  # watch: the UI's layer index
    (TF, "terraformrepositories", "get list watch patch", ()),  # watch: the webhooks' index of repositories
    (TF, "terraformruns", "get list", ()),
    (TF, "terraformpullrequests", "get list create patch", ()),  # list: the UI's pull requests page
    (TF, "terraformplanpolicies", "get", ()),
    (CORE, "events", "create", ()),  # a managed-state rollback's StateRolledBack on the layer (server/rest.py)
]
SERVER_TENANT: list[Rule] = [
    (CORE, "pods", "get", ()),  # token authentication: a runner token's pod
    (CORE, "pods/log", "get", ()),  # the UI's live log of a running attempt
]
DATASTORE: list[Rule] = [
    (TF, "terraformruns", "get", ()),
    (TF, "terraformlayers", "get", ()),
    (TF, "terraformrepositories", "get", ()),  # another namespace's: shared with the layer's? (allowedNamespaces)
]
DATASTORE_TENANT: list[Rule] = [(CORE, "pods", "get", ())]
TOKEN_REVIEWS: Rule = ("authentication.k8s.io", "tokenreviews", "create", ())
ACCESS_REVIEWS: Rule = ("authorization.k8s.io", "subjectaccessreviews", "create", ())
# Reads of its run, layer and repository only: no write, no Secret, no ConfigMap (issue 24, finding 4).
RUNNER: list[Rule] = [
    (TF, "terraformruns", "get", ()),
    (TF, "terraformlayers", "get", ()),
    (TF, "terraformrepositories", "get", ()),
]
# AGL kinds named in the tenants value set, and the AGL groups (controllers.agl.groups) of the value sets.
AGL_KINDS = [("apps.burrito-py.io", "databases"), ("platform.example.com", "buckets")]
APPS = "apps.burrito-py.io"
AGL_GROUPS = [APPS, "platform.example.com"]


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
             shards: bool = False, agl_groups: tuple[str, ...] = (APPS,)) -> set[Grant]:
    scopes = ["cluster"] if cluster_mode else tenants
    controllers = CONTROLLERS + [rule for g, p in agl_kinds for rule in ((g, p, "list watch", ()),
                                                                          (g, f"{p}/status", "patch", ()))]
    # Every kind of an AGL group: a definition added after install is served without a redeploy (issue 25).
    controllers += [rule for g in agl_groups for rule in ((g, "*", "list watch", ()), (g, "*/status", "patch", ()))]
    cluster = CONTROLLERS_CLUSTER + [(g, p, "list", ()) for g, p in agl_kinds] + [(g, "*", "list", ())
                                                                                  for g in agl_groups]
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
    # The webhook keys Secret(s), one per controllers Deployment, in the release namespace.
    keys = tuple(sorted(f"{RELEASE}-webhook-keys-{s['name']}" for s in VALUE_SETS["shards"]["controllers"]["shards"])
                 ) if shards else (f"{RELEASE}-webhook-keys",)
    out |= expand(sa("controllers"), [(CORE, "secrets", "create", ()), (CORE, "secrets", "get update", keys)],
                  [NAMESPACE])
    out |= expand(sa("server"), [(CORE, "secrets", "get list watch", keys)], [NAMESPACE])
    out |= expand(sa("controllers"), CONTROLLERS_TENANT, tenants)
    out |= expand(sa("server"), SERVER, scopes) | expand(sa("server"), [TOKEN_REVIEWS], ["cluster"])
    out |= expand(sa("server"), SERVER_TENANT, tenants)
    out |= expand(sa("server"), [(TF, "clusterterraformplanpolicies", "get", ()),
                                 ("authorization.k8s.io", "subjectaccessreviews", "create", ())], ["cluster"])
    out |= expand(sa("datastore"), DATASTORE, scopes) | expand(sa("datastore"), [TOKEN_REVIEWS], ["cluster"])
    out |= expand(sa("datastore"), DATASTORE_TENANT, tenants)
    # Who reads /metrics (burrito_py/kube/metrics_auth.py): a TokenReview, then may that user get /metrics.
    out |= expand(sa("controllers"), [TOKEN_REVIEWS, ACCESS_REVIEWS], ["cluster"])
    out |= expand(sa("datastore"), [ACCESS_REVIEWS], ["cluster"])
    for tenant in tenants:
        out |= expand(f"{tenant}/burrito-py-runner", RUNNER, [tenant])
        # Pull requests' plans (issue 24, P2): their own account, reading its run as the runner does, nothing else.
        out |= expand(f"{tenant}/burrito-py-runner-pr", RUNNER, [tenant])
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
    want = expected(tenants, cluster_mode, agl_kinds, shards, tuple(AGL_GROUPS) if agl_kinds else (APPS,))
    assert sorted(got - want) == [], "new grants"
    assert sorted(want - got) == [], "missing grants"


def test_datastore_encryption_and_retention_grants() -> None:
    extra = grants(rendered("s3-encryption")) - expected([NAMESPACE], False, [])
    assert extra == {
        Grant(sa("datastore"), CORE, "secrets", "get", NAMESPACE, ("burrito-py-keys",)),
        *expand(sa("datastore"), [(TF, r, "list", ()) for r in ("terraformlayers", "terraformruns",
                                                                  "terraformrepositories")], ["cluster"]),
    }


TENANTS = {"default": [NAMESPACE], "tenants": ["team-a", "team-b"], "cluster-mode": ["team-a"],
           "shards": ["team-a-prod", "team-b"]}


@pytest.mark.parametrize("name", list(TENANTS))
def test_the_internet_facing_server_reads_no_secret_but_the_webhook_keys_and_logs_only_where_runners_run(
    name: str,
) -> None:
    """Issue 24 finding 9 (attack: the server's ServiceAccount token, taken from an exploited server, reads any
    Secret and any pod's log of the cluster in cluster mode, and every tenant's Secrets in tenant mode). The server
    may now get Secrets only in the release namespace and only the webhook keys Secret(s) by name; pods and their
    logs only in the tenant namespaces, where runners run."""
    server = {g for g in grants(rendered(name)) if g.subject == sa("server")}
    secrets = {g for g in server if g.resource == "secrets"}
    assert secrets and {g.scope for g in secrets} == {NAMESPACE}
    assert all(g.resource_names and all(n.startswith(f"{RELEASE}-webhook-keys") for n in g.resource_names)
               for g in secrets)
    assert {g.scope for g in server if g.resource in ("pods", "pods/log")} == set(TENANTS[name])


@pytest.mark.parametrize("name", list(TENANTS))
def test_controllers_create_pods_and_touch_secrets_and_leases_only_in_tenant_namespaces(name: str) -> None:
    """Issue 24 finding 9: in cluster mode the controllers could create pods and write Secrets in any namespace.
    Now every pod creation, pod log, Secret and per-layer Lease grant is scoped to a tenant namespace (the release
    namespace adds the leader Lease and the webhook keys Secret, by name where Kubernetes allows)."""
    controllers = {g for g in grants(rendered(name)) if g.subject == sa("controllers")}
    sensitive = {g for g in controllers if (g.resource, g.verb) in {("pods", "create"), ("pods/log", "get")}
                 or g.resource in ("secrets", "leases")}
    assert {g.scope for g in sensitive} <= {*TENANTS[name], NAMESPACE}
    assert "cluster" not in {g.scope for g in sensitive}
    outside_tenants = {g for g in sensitive if g.scope not in TENANTS[name]}
    assert all(g.resource_names or g.verb == "create" for g in outside_tenants)


def _roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] in ("Role", "ClusterRole")]


@pytest.mark.parametrize(
    "name", ["default", "tenants", "cluster-mode", "s3-encryption", "network-policy", "ha", "shards"]
)
def test_no_wildcards_and_no_cluster_wide_secrets_in_tenant_mode(name: str) -> None:
    objects = rendered(name)
    agl_groups = set(VALUE_SETS[name].get("controllers", {}).get("agl", {}).get("groups") or [APPS])
    for role in _roles(objects):
        for rule in role["rules"]:
            for key in ("apiGroups", "verbs", "resourceNames"):
                assert "*" not in (rule.get(key) or ()), (role["metadata"]["name"], rule)
            # The one wildcard: the resources of a group given to AGL kinds (controllers.agl.groups), read and
            # status only; never a Kubernetes or burrito-py group.
            if any("*" in r for r in rule.get("resources") or ()):
                assert set(rule["apiGroups"]) <= agl_groups, (role["metadata"]["name"], rule)
                assert set(rule["resources"]) <= {"*", "*/status"}, rule
                assert set(rule["verbs"]) <= {"list", "watch"} or rule["resources"] == ["*/status"], rule
                assert rule["resources"] != ["*/status"] or rule["verbs"] == ["patch"], rule
            assert "escalate" not in rule["verbs"] and "bind" not in rule["verbs"] and "impersonate" not in rule[
                "verbs"]
    all_grants = grants(objects)
    # Cluster mode too (issue 24 finding 9): no component touches a Secret cluster-wide.
    assert {g for g in all_grants if g.resource == "secrets" and g.scope == "cluster"} == set()
    # No Secret list or watch but the server's, pinned to the webhook keys by name.
    assert {(g.subject, g.scope) for g in all_grants if g.resource == "secrets" and g.verb in ("list", "watch")
            and g.resource_names} <= {(sa("server"), NAMESPACE)}
    assert not [g for g in all_grants if g.resource == "secrets" and g.verb in ("list", "watch")
                and not g.resource_names]
    runner = {g for g in all_grants if g.subject.endswith("/burrito-py-runner")}
    assert {(g.resource, g.verb) for g in runner} == {("terraformruns", "get"), ("terraformlayers", "get"),
                                                     ("terraformrepositories", "get")}
    assert all(g.scope != "cluster" for g in runner)
    pull_requests = {g for g in all_grants if g.subject.endswith("/burrito-py-runner-pr")}
    assert {(g.resource, g.verb) for g in pull_requests} == {(g.resource, g.verb) for g in runner}
    assert all(g.scope != "cluster" for g in pull_requests)


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
    assert counts == {"controllers": 69, "server": 24, "datastore": 6, "runner": 3, "runner-pr": 3}


def test_the_emulator_platforms_grant_runners_exactly_the_charts_runner_role() -> None:
    """`grant_runner_access` (test platforms, `dev --mode in-process`) and the chart must not drift apart."""
    from burrito_local.identity import RUNNER_RULES

    def flat(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
        return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]
                for v in rule["verbs"]}

    role = next(o for o in rendered("default") if o["kind"] == "Role" and o["metadata"]["name"] == "burrito-py-runner")
    assert flat(RUNNER_RULES) == flat(role["rules"])


def test_datastore_admins_may_reach_the_datastore_through_the_service_proxy_and_nothing_else() -> None:
    """`burrito-py plan download` with only a kubeconfig (burrito_py/kube/service_proxy.py): the datastore's admin users
    and groups get `services/proxy` get on the datastore Service alone, and list of Services to find it."""
    from burrito_py.chart.chart import render_chart

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


def test_prometheus_may_be_bound_to_get_metrics_and_nothing_else() -> None:
    """The controllers' and the datastore's /metrics answer only who may get the non-resource URL /metrics
    (burrito_py/kube/metrics_auth.py): the chart's metrics-reader ClusterRole grants that alone, bound to the subjects
    of metrics.readers; the ServiceMonitor scrapes with Prometheus's service-account token."""
    from burrito_py.chart.chart import render_chart

    role = find(rendered("default"), "ClusterRole", f"{RELEASE}-metrics-reader")
    assert role["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert not [o for o in rendered("default") if o["kind"] == "ClusterRoleBinding"
                and o["metadata"]["name"] == f"{RELEASE}-metrics-reader"]
    prometheus = {"kind": "ServiceAccount", "name": "prometheus-k8s", "namespace": "monitoring"}
    objects = render_chart({"metrics": {"readers": [prometheus], "serviceMonitor": {"enabled": True}}}, RELEASE,
                           NAMESPACE)
    binding = find(objects, "ClusterRoleBinding", f"{RELEASE}-metrics-reader")
    assert binding["subjects"] == [prometheus] and binding["roleRef"]["name"] == f"{RELEASE}-metrics-reader"
    endpoint = find(objects, "ServiceMonitor", f"{RELEASE}-controllers")["spec"]["endpoints"][0]
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"


@pytest.mark.parametrize("group", ["apps", "", "rbac.authorization.k8s.io", "metrics.k8s.io", "x.kubernetes.io",
                                   "terraform.burrito-py.io", "agl.burrito-py.io"])
def test_agl_groups_never_reach_kubernetes_or_burrito_pys_own_groups(group: str) -> None:
    """A wildcard over a group's resources is only for groups of AGL kinds: the schema (a dotted DNS name) or the
    template refuses the others, naming the value."""
    from burrito_py.chart.chart import ChartRenderError, render_chart

    with pytest.raises(ChartRenderError, match=r"controllers.agl.groups: |/controllers/agl/groups/0"):
        render_chart({"controllers": {"agl": {"groups": [group]}}}, RELEASE, NAMESPACE)
