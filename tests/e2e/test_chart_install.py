"""Issue 10: `burrito-py dev` installs charts/burrito-py, into the real control plane since issue 26, with RBAC
enforced, and the product works through it: the controllers, datastore and server run as pods of the chart's
Deployments under the chart's ServiceAccounts (a permission the chart forgot is a 403 here), with the quickstart
and AGL examples, outputs Secrets, datastore auth and plan download, a signed webhook, and a removed rule
surfacing as an event."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from burrito_local.dev import RELEASE, RELEASE_NAMESPACE, DevOptions, running_dev

from burrito_py.api import annotations as ann
from tests.support.emulator import wait_for
from tests.support.kube_access import KubeAccess

pytestmark = pytest.mark.e2e
LAYERS = f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/default/terraformlayers"
HOOK_SECRET = "chart-e2e-hook"


@dataclass
class Dev:
    endpoints: dict[str, str]
    data_dir: Path
    access: KubeAccess  # the kubeconfig's: the local admin (a cluster-admin service account)
    api: httpx.Client  # as the local admin, for the test's own reads and writes

    @property
    def kubeconfig(self) -> Path:
        return Path(self.endpoints["kubeconfig"])

    def kubectl(self, *args: str) -> str:
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        return subprocess.run(["kubectl", *args], env=env, capture_output=True, text=True, check=True,
                              timeout=60).stdout

    def state(self, layer: str) -> str | None:
        response = self.api.get(f"{LAYERS}/{layer}")
        return ((response.json().get("status") or {}).get("state")) if response.status_code == 200 else None

    def wait_state(self, layer: str, state: str, timeout: float = 120.0) -> None:
        wait_for(lambda: self.state(layer) == state, timeout, interval=0.2, what=f"layer {layer} {state}")

    def events(self, namespace: str = "default") -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.api.get(f"/api/v1/namespaces/{namespace}/events").json()["items"]
        return items

    def apply(self, doc: dict[str, Any]) -> None:
        from burrito_local.apply import Applier

        applier = Applier(self.access.url, token=self.access.token or "", verify=self.access.verify)
        try:
            applier.apply(doc)
        finally:
            applier.close()


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    data_dir = tmp_path_factory.mktemp("chart-dev")
    # On the real control plane (dev's default, §22.7): kube-apiserver's RBAC, admission policies and service proxy.
    options = DevOptions(data_dir=data_dir, kubeconfig=data_dir / "kubeconfig", examples=["quickstart", "agl"],
                         repository_poll_interval=timedelta(hours=1), mode="chart", cluster="real")
    with running_dev(options) as endpoints:
        access = KubeAccess.from_kubeconfig(Path(endpoints["kubeconfig"]))
        with access.client() as api:
            yield Dev(endpoints, data_dir.resolve(), access, api)


def test_a_components_run_as_the_charts_pods_and_the_quickstart_converges(dev: Dev) -> None:
    pods = dev.api.get(f"/api/v1/namespaces/{RELEASE_NAMESPACE}/pods").json()["items"]
    accounts = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"]["serviceAccountName"]
                for p in pods}
    assert accounts == {c: f"{RELEASE}-{c}" for c in ("controllers", "datastore", "server")}
    assert all(p["status"]["phase"] == "Running" for p in pods)
    dev.wait_state("hello", "Idle")
    dev.wait_state("greetings", "ApplyNeeded")
    table = dev.kubectl("get", "tfl")
    assert "Idle" in table and "ApplyNeeded" in table
    runners = dev.api.get("/api/v1/namespaces/default/pods", params={
        "labelSelector": f"{ann.LABEL_COMPONENT}={ann.COMPONENT_RUNNER}"}).json()["items"]
    assert runners and {p["spec"]["serviceAccountName"] for p in runners} == {"burrito-py-runner"}


def test_b_plan_download_with_only_the_kubeconfig_and_the_datastore_refuses_strangers(dev: Dev) -> None:
    dev.wait_state("greetings", "ApplyNeeded")
    # Nothing but KUBECONFIG: the datastore is reached through the API server's service proxy.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BURRITO_DATASTORE", "BURRITO_PY_"))}
    short = subprocess.run(
        ["burrito-py", "plan", "download", "default/greetings", "--format", "short"],
        env={**env, "KUBECONFIG": str(dev.kubeconfig)}, capture_output=True, text=True, check=True, timeout=60,
    ).stdout
    assert short.strip() == "Plan: 2 to add, 0 to change, 0 to destroy"
    # The proxy forwards no Authorization: kubectl, authenticated to the API, is a stranger to the datastore.
    run_name = dev.api.get(f"{LAYERS}/greetings").json()["status"]["lastRun"]["name"]
    proxied = (f"/api/v1/namespaces/{RELEASE_NAMESPACE}/services/{RELEASE}-datastore:8080/proxy"
               f"/api/v1/layers/default/greetings/runs/{run_name}/plan")
    raw = subprocess.run(["kubectl", "get", "--raw", proxied], env={**env, "KUBECONFIG": str(dev.kubeconfig)},
                         capture_output=True, text=True, timeout=60)
    assert raw.returncode != 0 and "must be logged in" in raw.stderr, raw.stderr  # kubectl's words for a 401
    short = subprocess.run(
        ["burrito-py", "plan", "download", "default/greetings", "--format", "short",
         "--datastore-url", dev.endpoints["datastore"], "--kubeconfig", str(dev.kubeconfig)],
        capture_output=True, text=True, check=True, timeout=60).stdout
    assert short.strip() == "Plan: 2 to add, 0 to change, 0 to destroy"
    run = dev.api.get(f"{LAYERS}/greetings").json()["status"]["lastRun"]["name"]
    plan = f"{dev.endpoints['datastore']}/api/v1/layers/default/greetings/runs/{run}/plan"
    token = yaml.safe_load(dev.kubeconfig.read_text())["users"][0]["user"]["token"]
    assert httpx.get(plan, timeout=10, headers={"Authorization": f"Bearer {token}"}).status_code == 200
    assert httpx.get(plan, timeout=10).status_code == 401
    assert httpx.get(f"{dev.endpoints['server']}/api/layers", timeout=10).status_code == 401


def test_c_outputs_reach_the_layers_secret_and_a_notifier_records_its_delivery(dev: Dev) -> None:
    """Issue 24 finding 9: the chart granted no `terraformnotifiers/status`, so a notifier's lastDelivery was never
    written (a 403 in the controllers' log). This notifier's URL Secret is missing: the delivery is "not sent", which
    needs no network, and is recorded in its status."""
    notifiers = f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/default/terraformnotifiers"
    dev.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformNotifier",
               "metadata": {"name": "applied", "namespace": "default"},
               "spec": {"events": ["ApplySucceeded"],
                        "webhook": {"urlSecretRef": {"name": "no-such-secret", "key": "url"},
                                    "hmacSecretRef": {"name": "no-such-secret", "key": "key"}}}})
    dev.apply({
        "apiVersion": ann.API_VERSION, "kind": "TerraformLayer",
        "metadata": {"name": "hello-outputs", "namespace": "default"},
        "spec": {"repository": {"name": "quickstart"}, "branch": "main", "path": "layers/hello",
                 "remediationStrategy": {"autoApply": True},
                 # Its state in the datastore, as the quickstart repository's layers (spec.state.managed).
                 "writeOutputsToSecret": {"name": "hello-outputs"}},
    })
    dev.wait_state("hello-outputs", "Idle")
    secret = wait_for(lambda: (r := dev.api.get("/api/v1/namespaces/default/secrets/hello-outputs")).status_code
                      == 200 and r.json(), 60, interval=0.2, what="the outputs Secret")
    assert base64.b64decode(secret["data"]["message"]).decode().startswith("Hello")
    delivery = wait_for(lambda: (dev.api.get(f"{notifiers}/applied").json().get("status") or {}).get("lastDelivery"),
                        60, interval=0.2, what="the notifier's status.lastDelivery")
    assert delivery["event"] == "ApplySucceeded" and delivery["layer"] == "hello-outputs"
    assert delivery["result"].startswith("not sent: Secret default/no-such-secret (spec.webhook.urlSecretRef) is not "
                                         "open to notifiers"), delivery


def test_d_a_signed_push_plans_the_layer_it_touches(dev: Dev) -> None:
    dev.wait_state("greetings", "ApplyNeeded")
    dev.api.post("/api/v1/namespaces/default/secrets", json={
        "metadata": {"name": "quickstart-hook"}, "stringData": {"webhookSecret": HOOK_SECRET}}).raise_for_status()
    repository = f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/default/terraformrepositories/quickstart"
    url = dev.api.get(repository).json()["spec"]["repository"]["url"]
    dev.api.patch(repository, json={"spec": {"repository": {"secretName": "quickstart-hook"}}},
                  headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()

    def published() -> bool:  # the controllers publish the key for the server, which reads no tenant Secret
        conditions = (dev.api.get(repository).json().get("status") or {}).get("conditions") or ()
        return any(c["type"] == "Webhooks" and c["status"] == "True" for c in conditions)

    wait_for(published, 60, interval=0.2, what="the repository's webhook key published")
    repo = dev.data_dir / "repos" / "quickstart"
    main_tf = repo / "layers" / "greetings" / "main.tf"
    main_tf.write_text(main_tf.read_text() + "\n# touched by the webhook test\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "commit", "-qam", "touch greetings"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    body = json.dumps({"ref": "refs/heads/main", "repository": {"clone_url": url}}).encode()
    digest = hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()

    def post() -> httpx.Response | None:  # the server's watch of the keys Secret sees the key within moments
        answer = httpx.post(f"{dev.endpoints['server']}/api/webhook", content=body, timeout=30, headers={
            "X-GitHub-Event": "push", "X-GitHub-Delivery": "chart-e2e-1", "X-Hub-Signature-256": f"sha256={digest}",
            "Content-Type": "application/json"})
        return answer if answer.status_code != 401 else None

    answer = wait_for(post, 10, interval=0.2, what="the signed push accepted")
    assert answer.status_code == 202 and answer.json().get("repositories") == ["default/quickstart"], answer.text
    # The server read no tenant Secret for it: it may not (the chart's RBAC, enforced here).
    server = f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-server"
    review = dev.api.post("/apis/authorization.k8s.io/v1/subjectaccessreviews", json={
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": server, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{RELEASE_NAMESPACE}",
                                            "system:authenticated"],
                 "resourceAttributes": {"namespace": "default", "verb": "get", "resource": "secrets",
                                        "name": "quickstart-hook"}}}).raise_for_status().json()
    assert review["status"]["allowed"] is False, review

    def planned_head() -> bool:
        layer = dev.api.get(f"{LAYERS}/greetings").json()
        return (layer.get("status") or {}).get("lastRun", {}).get("revision") == head and \
            layer["status"]["state"] == "ApplyNeeded"

    try:
        wait_for(planned_head, 90, interval=0.3, what="greetings planned at the pushed commit")
    except AssertionError:
        repository_now = dev.api.get(repository).json()
        raise AssertionError(f"greetings not planned at {head}: repository annotations "
                             f"{repository_now['metadata'].get('annotations')}, status {repository_now.get('status')}, "
                             f"layer annotations {dev.api.get(f'{LAYERS}/greetings').json()['metadata']['annotations']}"
                             ) from None


def test_e_an_agl_instance_is_compiled_approved_and_applied(dev: Dev) -> None:
    buckets = "/apis/apps.burrito-py.io/v1alpha1/namespaces/default/buckets"

    def pending_sum() -> str | None:
        response = dev.api.get(f"{buckets}/photos")
        return ((response.json().get("status") or {}).get("pendingPlan") or {}).get("sum") \
            if response.status_code == 200 else None

    plan_sum = wait_for(pending_sum, 120, interval=0.3, what="the Bucket's pending plan")
    dev.kubectl("annotate", "bucket", "photos", "--overwrite", f"{ann.APPROVE_PLAN}={plan_sum}")
    wait_for(lambda: dev.api.get("/api/v1/namespaces/default/secrets/bucket-photos-outputs").status_code == 200,
             120, interval=0.3, what="the Bucket's outputs Secret")
    assert "bucket-photos" in dev.kubectl("get", "tfl")


def test_f_a_rule_removed_from_the_controllers_role_is_a_forbidden_event_naming_verb_and_resource(dev: Dev) -> None:
    role_path = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{RELEASE}-controllers-tenant"
    role = dev.api.get(role_path).json()
    original = json.loads(json.dumps(role["rules"]))
    pods_rule = next(r for r in role["rules"] if r.get("apiGroups") == [""] and "pods" in r["resources"]
                     and "create" in r["verbs"])
    pods_rule["verbs"] = [v for v in pods_rule["verbs"] if v != "create"]
    dev.api.put(role_path, json=role).raise_for_status()
    try:
        dev.wait_state("hello", "Idle")
        dev.api.patch(f"{LAYERS}/hello", json={"metadata": {"annotations": {ann.SYNC_NOW: "rbac-test"}}},
                      headers={"Content-Type": "application/merge-patch+json"}).raise_for_status()

        def forbidden() -> dict[str, Any] | None:
            return next((e for e in dev.events() if e["reason"] == "Forbidden"
                         and e["involvedObject"]["kind"] == "TerraformRun"), None)

        event = wait_for(forbidden, 60, interval=0.3, what="a Forbidden event on the run")
        assert event["type"] == "Warning"
        assert 'cannot create resource "pods"' in event["message"], event["message"]
        assert f"system:serviceaccount:{RELEASE_NAMESPACE}:{RELEASE}-controllers" in event["message"]
    finally:
        role = dev.api.get(role_path).json()
        role["rules"] = original
        dev.api.put(role_path, json=role).raise_for_status()
    dev.wait_state("hello", "Idle", timeout=120)  # the rule back, the run's next attempt creates its pod


def test_g_plan_policies_report_whether_they_compile_under_the_charts_rbac(dev: Dev) -> None:
    """Issue 24: the controllers' pod compiles policies in its policy workers and may write both kinds' status
    (`terraformplanpolicies/status`, `clusterterraformplanpolicies/status`: a missing grant is a 403 here)."""
    dev.apply({"apiVersion": ann.API_VERSION, "kind": "TerraformPlanPolicy",
               "metadata": {"name": "chart-broken", "namespace": "default"},
               "spec": {"enforcement": "advisory", "rules": [{"name": "typo", "cel": {"expression": "1 +"}}]}})
    dev.apply({"apiVersion": ann.API_VERSION, "kind": "ClusterTerraformPlanPolicy",
               "metadata": {"name": "chart-fine"},
               "spec": {"enforcement": "advisory", "namespaceSelector": {"matchLabels": {"none": "none"}},
                        "rules": [{"name": "small", "cel": {"expression": "plan.counts.total < 100",
                                                            "scope": "plan"}}]}})

    def ready(path: str) -> dict[str, Any] | None:
        status = dev.api.get(path).json().get("status") or {}
        return next((c for c in status.get("conditions") or () if c["type"] == "Ready"), None)

    tf = f"/apis/{ann.GROUP}/{ann.VERSION}"
    broken = wait_for(lambda: ready(f"{tf}/namespaces/default/terraformplanpolicies/chart-broken"), 120,
                      interval=0.3, what="the namespaced policy's status")
    assert (broken["status"], broken["reason"]) == ("False", "CompileFailed")
    assert broken["message"].startswith("rule typo: CEL: Failed to parse expression '1 +'")
    fine = wait_for(lambda: ready(f"{tf}/clusterterraformplanpolicies/chart-fine"), 120, interval=0.3,
                    what="the cluster policy's status")
    assert (fine["status"], fine["reason"]) == ("True", "Compiled")
    table = dev.kubectl("get", "tfpp", "-n", "default")
    assert "READY" in table.splitlines()[0] and "chart-broken" in table and "False" in table


def test_h_runners_change_no_layer_and_only_the_controllers_record_runner_annotations(dev: Dev) -> None:
    """Issue 24, findings 1 (b) and 4, in chart mode (the chart's RBAC and admission policies, its identities):
    a runner's ServiceAccount token reads no Secret and patches no layer (RBAC); given `patch` on layers by an
    operator's mistake, the admission policy still refuses any change it makes; and a tenant user allowed to
    patch layers may approve a plan but never set or change the `runner.burrito-py.io/` annotations."""
    from burrito_local.identity import ensure_service_account, request_token
    from burrito_local.kube_tokens import API_AUDIENCES

    from burrito_py.chart.admission_policy import ANNOTATION_MESSAGE, RUNNER_MESSAGE

    dev.wait_state("greetings", "ApplyNeeded")
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/default"
    merge = {"Content-Type": "application/merge-patch+json"}
    forged = {"metadata": {"annotations": {ann.PLAN_RUN: "greetings-pr-1/7", ann.PLAN_SUM: "sha256:" + "0" * 64}}}

    def as_account(account: str) -> httpx.Client:
        token = request_token(dev.api, "default", account, list(API_AUDIENCES))
        return dev.access.client(token)

    with as_account("burrito-py-runner") as runner:
        assert runner.get(f"{LAYERS}/greetings").status_code == 200  # what it needs: reads
        assert runner.get("/api/v1/namespaces/default/secrets").status_code == 403
        for secret in dev.api.get("/api/v1/namespaces/default/secrets").json()["items"][:3]:
            assert runner.get(f"/api/v1/namespaces/default/secrets/{secret['metadata']['name']}").status_code == 403
        assert runner.get("/api/v1/namespaces/default/configmaps").status_code == 403
        assert runner.patch(f"{LAYERS}/greetings", json=forged, headers=merge).status_code == 403  # RBAC

        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "too-wide", "namespace": "default"},
                "rules": [{"apiGroups": [ann.GROUP], "resources": ["terraformlayers"], "verbs": ["patch"]}]}
        dev.api.post(f"{rbac}/roles", json=role).raise_for_status()
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "too-wide", "namespace": "default"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "too-wide"},
                   "subjects": [{"kind": "ServiceAccount", "name": "burrito-py-runner", "namespace": "default"},
                                {"kind": "ServiceAccount", "name": "alice", "namespace": "default"}]}
        dev.api.post(f"{rbac}/rolebindings", json=binding).raise_for_status()
        try:
            # A new binding reaches kube-apiserver's authorizer through its informers, a moment after it is written:
            # until then RBAC, not the admission policy, refuses (a forged patch that went through fails below).
            wait_for(lambda: "cannot patch resource" not in runner.patch(f"{LAYERS}/greetings", json=forged,
                                                                       headers=merge).text,
                     10, interval=0.1, what="the RoleBinding to take effect")
            for patch in (forged, {"metadata": {"labels": {"x": "y"}}},
                          {"spec": {"overrideRunnerSpec": {"image": "evil.example/runner"}}}):
                refused = runner.patch(f"{LAYERS}/greetings", json=patch, headers=merge)
                assert refused.status_code == 403 and refused.json()["message"].endswith(RUNNER_MESSAGE), refused.text

            ensure_service_account(dev.api, "default", "alice")
            with as_account("alice") as alice:
                refused = alice.patch(f"{LAYERS}/greetings", json=forged, headers=merge)
                assert refused.status_code == 403 and refused.json()["message"].endswith(ANNOTATION_MESSAGE)
                plan_sum = dev.api.get(f"{LAYERS}/greetings").json()["metadata"]["annotations"][ann.PLAN_SUM]
                changed = {"metadata": {"annotations": {ann.PLAN_SUM: plan_sum + "0"}}}
                assert alice.patch(f"{LAYERS}/greetings", json=changed, headers=merge).status_code == 403
                label = alice.patch(f"{LAYERS}/greetings", json={"metadata": {"labels": {"team": "a"}}},
                                    headers=merge)
                assert label.status_code == 200, label.text  # the rest of the layer is hers to change
        finally:
            dev.api.delete(f"{rbac}/rolebindings/too-wide")
            dev.api.delete(f"{rbac}/roles/too-wide")
    annotations = dev.api.get(f"{LAYERS}/greetings").json()["metadata"]["annotations"]
    assert annotations[ann.PLAN_RUN] != "greetings-pr-1/7" and annotations[ann.PLAN_SUM] == plan_sum
