"""The REST platform (rest_platform.py) plus what the UI tests need: two users on the emulator who may read
burrito-py's kinds everywhere (a ClusterRole), one of whom may patch TerraformLayers in team-a (a Role and
RoleBinding) and one who may not, one allowed through a group in team-b (and reading nothing), a pending plan on
team-a/app, a run per fixture plan with its plan JSON in the datastore, 120 layers in `bulk`, and a pull request.
The REST platform's `tenant-a` reads and acts in team-a only."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
from burrito_local.identity import ensure_namespace, ensure_service_account, request_token

from burrito_py.api import annotations as ann
from burrito_py.datastore.client import DatastoreClient
from tests.integration.server.rest_platform import (
    AUDIENCE,
    NS_A,
    NS_B,
    READ_KINDS,
    RestPlatform,
    account,
    create,
    grant,
    run_body,
    running_rest_platform,
)
from tests.unit.plans.plan_fixtures import diff_fixture, fixture, fixture_names, hostile_plan

RBAC = "/apis/rbac.authorization.k8s.io/v1"
BULK, BULK_LAYERS = "bulk", 120
PENDING_SUM = "sha256:" + "ab" * 32
PENDING_RUN = "zz-app-plan-old"
DIFF_RUN, HOSTILE_RUN = "diff-attributes", "diff-hostile"
SECRET_FED = "s3cr3t-fed-from-a-Secret"  # the hostile run's Secret-fed variable, in one of its values and keys
PATCH_LAYERS = [{"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["get", "list", "patch"]}]


def fixture_run(name: str) -> str:
    return "fixture-" + name.replace("_", "-")


def status(kube: httpx.Client, plural: str, namespace: str, name: str, body: dict[str, object]) -> None:
    kube.patch(f"/apis/{ann.API_VERSION}/namespaces/{namespace}/{plural}/{name}/status", json={"status": body},
               headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()


def _grant(kube: httpx.Client, namespace: str, subject: dict[str, str]) -> None:
    kube.post(f"{RBAC}/namespaces/{namespace}/roles", json={
        "metadata": {"name": "layer-operator"}, "rules": PATCH_LAYERS}).raise_for_status()
    kube.post(f"{RBAC}/namespaces/{namespace}/rolebindings", json={
        "metadata": {"name": "layer-operator"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "layer-operator"},
        "subjects": [subject]}).raise_for_status()


def _ran(kube: httpx.Client, run: str) -> None:
    """A plan run of team-a/app with one attempt recorded, as the controllers leave it: its plans are shown."""
    create(kube, "terraformruns", NS_A, run_body(run, "app", "plan", "abc123"))
    status(kube, "terraformruns", NS_A, run, {"state": "Succeeded", "attempts": [
        {"podName": f"{run}-1", "number": 1, "logsUploaded": False, "exitCode": 0}]})


def _ui_objects(platform: RestPlatform) -> None:
    kube = platform.kube
    for namespace, name in ((NS_A, "alice"), (NS_A, "bob"), (NS_B, "carol")):
        ensure_service_account(kube, namespace, name)
        platform.tokens[name] = request_token(kube, namespace, name, [AUDIENCE])
    _grant(kube, NS_A, {"kind": "ServiceAccount", "name": "alice", "namespace": NS_A})
    grant(kube, "burrito-py-viewer-alice", [READ_KINDS], account(NS_A, "alice"))
    grant(kube, "burrito-py-viewer-bob", [READ_KINDS], account(NS_A, "bob"))
    # carol may act in team-b only through her group (the groups of the TokenReview reach the review).
    _grant(kube, NS_B, {"kind": "Group", "name": f"system:serviceaccounts:{NS_B}",
                        "apiGroup": "rbac.authorization.k8s.io"})
    status(kube, "terraformlayers", NS_A, "app", {
        "pendingPlan": {"sum": PENDING_SUM, "run": f"{PENDING_RUN}/2", "revision": "abc123", "reason": "manual"},
        "policy": {"planSum": PENDING_SUM, "verdict": "GatesAutoApply", "policies": 1,
                   "denied": [{"policy": f"{NS_A}/safe", "rule": "no-destroy", "enforcement": "gateAutoApply"}]},
        "drift": {"state": "Drifted", "resources": 1, "addresses": ["null_resource.a"]},
        "outputs": ["endpoint", "db_password"]})
    ensure_namespace(kube, BULK)
    create(kube, "terraformrepositories", BULK, {"kind": "TerraformRepository", "metadata": {"name": "mono"},
                                                 "spec": {"repository": {"url": "https://example.com/mono.git"}}})
    for i in range(BULK_LAYERS):
        name = f"layer-{i:03d}"
        create(kube, "terraformlayers", BULK, {"kind": "TerraformLayer", "metadata": {"name": name},
                                               "spec": {"repository": {"name": "mono"}, "branch": "main",
                                                        "path": f"stacks/{'even' if i % 2 == 0 else 'odd'}/{i}"}})
        status(kube, "terraformlayers", BULK, name, {"state": "Idle" if i % 3 else "PlanNeeded",
                                                       **({"drift": {"state": "Drifted"}} if i % 10 == 0 else {})})
    with DatastoreClient(platform.datastore_url, token=platform.tokens["controller"]) as store:
        for name in fixture_names():
            _ran(kube, fixture_run(name))
            store.put_plan(NS_A, "app", fixture_run(name), 1, "json", (Path(__file__).parents[2] / "fixtures" /
                                                                       "plans" / f"{name}.json").read_bytes())
        # Attribute diffs (issue 30 item 7): terraform's own plan, and one whose values a hostile author chose, with
        # an inputs record naming a Secret-fed variable whose value is in it.
        for run, document in ((DIFF_RUN, diff_fixture("attributes")), (HOSTILE_RUN, hostile_plan([SECRET_FED]))):
            _ran(kube, run)
            store.put_plan(NS_A, "app", run, 1, "json", json.dumps(document).encode())
        store.put_inputs(NS_A, "app", HOSTILE_RUN, json.dumps({
            "digest": "sha256:0", "variables": {"token": SECRET_FED}, "sensitive": [],
            "secretVariables": ["token"]}).encode())
    assert fixture("create")  # the fixtures exist where plan_fixtures says
    create(kube, "terraformpullrequests", NS_A, {
        "kind": "TerraformPullRequest", "metadata": {"name": "infra-pr-7"},
        "spec": {"provider": "github", "repository": "infra", "project": "org/infra", "number": 7, "base": "main",
                 "headBranch": "feature", "headSha": "0123456789abcdef", "title": "Add a <bucket>",
                 "url": "https://github.com/org/infra/pull/7"}})


@contextlib.contextmanager
def running_ui_platform(workdir: Path) -> Iterator[RestPlatform]:
    with running_rest_platform(workdir) as platform:
        _ui_objects(platform)
        yield platform


CSRF = re.compile(r'<meta name="csrf-token" content="([0-9a-f]+)">')


def csrf_of(html: str) -> str:
    found = CSRF.search(html)
    assert found, html[:500]
    return found.group(1)


def logged_in(platform: RestPlatform, identity: str) -> tuple[httpx.Client, str]:
    """A browser-like client logged in with the identity's token, and its CSRF token."""
    client = httpx.Client(base_url=platform.server_url, timeout=30)
    form = client.get("/ui/login")
    answer = client.post("/ui/login", data={"csrf": csrf_of(form.text), "token": platform.tokens[identity],
                                            "next": "/ui/layers"})
    assert answer.status_code == 303, answer.text
    page = client.get("/ui/layers")
    assert page.status_code == 200, page.text
    return client, csrf_of(page.text)
