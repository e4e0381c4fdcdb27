"""The API behaviours burrito-py relies on, observed the same way on any API server (docs/architecture.md §22.6).

Each check makes requests as the cluster admin (and, where it says so, as an impersonated user) in a namespace of
its own and returns an observation: status codes, reasons, the fields our code reads. Messages are left out
where only their wording differs. `tests/integration/controlplane/test_fidelity.py` runs every check on the
emulator and on the real control plane and fails on any difference not in its allow-list.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from burrito_py.api import annotations as ann
from tests.support.kube_access import KubeAccess

Obj = dict[str, Any]
Observation = dict[str, Any]
RUNS = f"/apis/{ann.API_VERSION}/namespaces/{{ns}}/terraformruns"
CONFIGMAPS = "/api/v1/namespaces/{ns}/configmaps"
MERGE = "application/merge-patch+json"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


class Api:
    """An admin HTTP client made from a kubeconfig (a bearer token or a client certificate)."""

    def __init__(self, kubeconfig: Path) -> None:
        self.http = KubeAccess.from_kubeconfig(kubeconfig).client()

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json",
             params: dict[str, str] | None = None, headers: dict[str, str] | None = None,
             accept: str = "application/json") -> tuple[int, Obj]:
        sent = {"Accept": accept, "Content-Type": content_type, **(headers or {})}
        response = self.http.request(method, path, params=params, headers=sent,
                                     content=None if body is None else json.dumps(body))
        try:
            data = response.json()
        except ValueError:
            data = {"text": response.text[:200]}
        return response.status_code, data


def status_of(code: int, body: Obj) -> Observation:
    """What a client reads of an error: the code, the reason and the details' kind and name."""
    details = body.get("details") or {}
    return {"code": code, "reason": body.get("reason"), "kind": details.get("kind"), "name": details.get("name")}


def configmap(name: str, **data: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def run(name: str, **spec: Any) -> Obj:
    return {"apiVersion": ann.API_VERSION, "kind": "TerraformRun", "metadata": {"name": name},
            "spec": {"action": "plan", "layer": {"name": "l1", "revision": "0" * 40}, **spec}}


def eventually(predicate: Callable[[], Any], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


# -- the checks ------------------------------------------------------------------------------------------
def get_missing(api: Api, ns: str) -> Observation:
    return status_of(*api.call("GET", CONFIGMAPS.format(ns=ns) + "/nope"))


def create_twice(api: Api, ns: str) -> Observation:
    first, _ = api.call("POST", CONFIGMAPS.format(ns=ns), configmap("twice"))
    return {"first": first, "second": status_of(*api.call("POST", CONFIGMAPS.format(ns=ns), configmap("twice")))}


def stale_update(api: Api, ns: str) -> Observation:
    _, created = api.call("POST", CONFIGMAPS.format(ns=ns), configmap("stale", a="1"))
    path = CONFIGMAPS.format(ns=ns) + "/stale"
    fresh, _ = api.call("PUT", path, {**created, "data": {"a": "2"}})
    stale = api.call("PUT", path, {**created, "data": {"a": "3"}})
    return {"fresh": fresh, "stale": status_of(*stale)}


def crd_schema_type_error(api: Api, ns: str) -> Observation:
    code, body = api.call("POST", RUNS.format(ns=ns), run("bad", action=7))
    causes = sorted({c.get("field", "") for c in (body.get("details") or {}).get("causes") or []})
    return {**status_of(code, body), "fields": causes}


def crd_unknown_field(api: Api, ns: str) -> Observation:
    """Unknown fields are pruned by default and refused under `fieldValidation=Strict` (what kubectl sends)."""
    code, body = api.call("POST", RUNS.format(ns=ns), run("pruned", bogus=1))
    strict, refused = api.call("POST", RUNS.format(ns=ns), run("strict", bogus=1),
                               params={"fieldValidation": "Strict"})
    return {"code": code, "kept": "bogus" in body.get("spec", {}), "strict": strict,
            "strict_reason": refused.get("reason")}


def generation_and_status(api: Api, ns: str) -> Observation:
    """metadata.generation moves with spec changes only; the main resource ignores status and the status
    subresource ignores spec."""
    path = RUNS.format(ns=ns) + "/gen"
    _, created = api.call("POST", RUNS.format(ns=ns), run("gen"))
    _, patched = api.call("PATCH", path, {"spec": {"retries": 1}}, content_type=MERGE)
    status, via_status = api.call("PATCH", path + "/status", {"status": {"state": "Running"}, "spec": {"retries": 2}},
                                  content_type=MERGE)
    _, via_main = api.call("PATCH", path, {"status": {"state": "Failed"}}, content_type=MERGE)
    return {"created": created["metadata"].get("generation"), "spec_patch": patched["metadata"].get("generation"),
            "status_code": status, "status_kept": via_status.get("status", {}).get("state"),
            "spec_via_status": via_status["spec"].get("retries"),
            "generation_after_status": via_status["metadata"].get("generation"),
            "status_via_main": via_main.get("status", {}).get("state")}


def strategic_patch_on_custom_resource(api: Api, ns: str) -> Observation:
    api.call("POST", RUNS.format(ns=ns), run("smp"))
    code, body = api.call("PATCH", RUNS.format(ns=ns) + "/smp", {"spec": {"retries": 1}},
                          content_type="application/strategic-merge-patch+json")
    return {"code": code, "reason": body.get("reason")}


def json_patch_test_then_remove(api: Api, ns: str) -> Observation:
    """How the controllers consume an annotation (Kube.remove_annotations): a `test` of the value acted on before its
    `remove`. A value rewritten meanwhile fails the test (422) and nothing of the patch is applied."""
    body = run("jp")
    body["metadata"]["annotations"] = {"api.burrito-py.io/operation": "old", "api.burrito-py.io/sync-now": "1"}
    api.call("POST", RUNS.format(ns=ns), body)
    path = RUNS.format(ns=ns) + "/jp"

    def patch(*pairs: tuple[str, str]) -> int:
        operations: list[dict[str, Any]] = []
        for key, value in pairs:
            pointer = "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")
            operations += [{"op": "test", "path": pointer, "value": value}, {"op": "remove", "path": pointer}]
        return api.call("PATCH", path, operations, content_type="application/json-patch+json")[0]

    stale = patch(("api.burrito-py.io/operation", "new"), ("api.burrito-py.io/sync-now", "1"))
    kept = api.call("GET", path)[1]["metadata"].get("annotations")
    current = patch(("api.burrito-py.io/sync-now", "1"))
    return {"stale": stale, "kept": kept, "current": current,
            "after": api.call("GET", path)[1]["metadata"].get("annotations")}


def finalizer_holds_deletion(api: Api, ns: str) -> Observation:
    path = RUNS.format(ns=ns) + "/fin"
    api.call("POST", RUNS.format(ns=ns), {**run("fin"), "metadata": {"name": "fin", "finalizers": ["x.io/hold"]}})
    deleted, body = api.call("DELETE", path)
    held, obj = api.call("GET", path)
    api.call("PATCH", path, {"metadata": {"finalizers": None}}, content_type=MERGE)
    gone = eventually(lambda: api.call("GET", path)[0] == 404)
    return {"delete": deleted, "returned_deleting": bool(body.get("metadata", {}).get("deletionTimestamp")),
            "held": held, "deleting": bool(obj["metadata"].get("deletionTimestamp")), "gone_after_release": gone}


def dry_run_create(api: Api, ns: str) -> Observation:
    code, body = api.call("POST", CONFIGMAPS.format(ns=ns), configmap("dry"), params={"dryRun": "All"})
    return {"code": code, "name": body.get("metadata", {}).get("name"),
            "stored": api.call("GET", CONFIGMAPS.format(ns=ns) + "/dry")[0]}


def pagination_and_selectors(api: Api, ns: str) -> Observation:
    for i in range(3):
        body = configmap(f"page-{i}")
        body["metadata"]["labels"] = {"set": "odd" if i % 2 else "even"}
        api.call("POST", CONFIGMAPS.format(ns=ns), body)
    # Only ours: the controller manager adds `kube-root-ca.crt` to every namespace of a real cluster.
    ours = {"labelSelector": "set"}
    _, first = api.call("GET", CONFIGMAPS.format(ns=ns), params={**ours, "limit": "2"})
    token = first["metadata"].get("continue", "")
    _, rest = api.call("GET", CONFIGMAPS.format(ns=ns), params={**ours, "limit": "2", "continue": token})
    _, even = api.call("GET", CONFIGMAPS.format(ns=ns), params={"labelSelector": "set=even"})
    _, named = api.call("GET", CONFIGMAPS.format(ns=ns), params={"fieldSelector": "metadata.name=page-1"})
    names = [i["metadata"]["name"] for i in (*first["items"], *rest["items"])]
    return {"pages": [len(first["items"]), len(rest["items"])], "has_continue": bool(token),
            "last_continue": rest["metadata"].get("continue", ""), "names": sorted(n for n in names if "page" in n),
            "even": sorted(i["metadata"]["name"] for i in even["items"]),
            "named": [i["metadata"]["name"] for i in named["items"]], "list_rv": bool(first["metadata"].get(
                "resourceVersion"))}


def impersonation(api: Api, ns: str) -> Observation:
    """`kubectl --as`: the request acts as the impersonated service account, whose groups follow."""
    user = f"system:serviceaccount:{ns}:viewer"
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    code, who = api.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review,
                         headers={"Impersonate-User": user})
    info = who.get("status", {}).get("userInfo", {})
    access = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": {"namespace": ns, "verb": "create", "resource": "pods"}}}
    _, can = api.call("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", access,
                      headers={"Impersonate-User": user})
    denied = api.call("GET", f"/api/v1/namespaces/{ns}/secrets", headers={"Impersonate-User": user})
    no_user = api.call("GET", CONFIGMAPS.format(ns=ns), headers={"Impersonate-Group": "system:masters"})
    return {"code": code, "username": info.get("username", "").replace(ns, "<ns>"),
            "groups": sorted(g.replace(ns, "<ns>") for g in info.get("groups", [])),
            "can_create_pods": can.get("status", {}).get("allowed"), "list_secrets": status_of(*denied),
            "group_without_user": no_user[0]}


def server_side_apply_conflict(api: Api, ns: str) -> Observation:
    path = CONFIGMAPS.format(ns=ns) + "/ssa"
    apply_type = "application/apply-patch+yaml"
    first, _ = api.call("PATCH", path, configmap("ssa", a="1"), content_type=apply_type,
                        params={"fieldManager": "one"})
    conflict, body = api.call("PATCH", path, configmap("ssa", a="2"), content_type=apply_type,
                              params={"fieldManager": "two"})
    forced, obj = api.call("PATCH", path, configmap("ssa", a="2"), content_type=apply_type,
                           params={"fieldManager": "two", "force": "true"})
    return {"first": first, "conflict": conflict, "reason": body.get("reason"), "forced": forced,
            "value": obj.get("data", {}).get("a"),
            "managers": sorted(m["manager"] for m in obj.get("metadata", {}).get("managedFields", []))}


def lease_micro_time(api: Api, ns: str) -> Observation:
    """Leader election reads and writes MicroTime to the microsecond."""
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "lead"},
             "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15,
                      "acquireTime": "2026-01-02T03:04:05.123456Z", "renewTime": "2026-01-02T03:04:05.000001Z"}}
    code, body = api.call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", lease)
    spec = body.get("spec", {})
    bad, refused = api.call("POST", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
                            {**lease, "metadata": {"name": "bad"}, "spec": {"acquireTime": "yesterday"}})
    return {"code": code, "acquire": spec.get("acquireTime"), "renew": spec.get("renewTime"), "bad": bad,
            "bad_reason": refused.get("reason")}


def table_columns(api: Api, ns: str) -> Observation:
    """`kubectl get terraformruns` prints the CRD's additionalPrinterColumns."""
    api.call("POST", RUNS.format(ns=ns), run("tab"))
    code, body = api.call("GET", RUNS.format(ns=ns), accept=TABLE)
    return {"code": code, "kind": body.get("kind"),
            "columns": [c["name"] for c in body.get("columnDefinitions", [])],
            "rows": len(body.get("rows", []))}


def watch_sees_changes(api: Api, ns: str) -> Observation:
    _, listed = api.call("GET", CONFIGMAPS.format(ns=ns))
    events: list[tuple[str, str]] = []

    def watch() -> None:
        params = {"watch": "true", "resourceVersion": listed["metadata"]["resourceVersion"], "timeoutSeconds": "5",
                  "allowWatchBookmarks": "true"}
        with api.http.stream("GET", CONFIGMAPS.format(ns=ns), params=params) as response:
            for line in response.iter_lines():
                if line:
                    event = json.loads(line)
                    # Only ours: the controller manager adds `kube-root-ca.crt` to a new namespace.
                    if event["type"] != "BOOKMARK" and event["object"]["metadata"]["name"] == "w":
                        events.append((event["type"], event["object"]["metadata"]["name"]))
                if len(events) >= 3:
                    return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    time.sleep(0.5)
    api.call("POST", CONFIGMAPS.format(ns=ns), configmap("w", a="1"))
    api.call("PATCH", CONFIGMAPS.format(ns=ns) + "/w", {"data": {"a": "2"}}, content_type=MERGE)
    api.call("DELETE", CONFIGMAPS.format(ns=ns) + "/w")
    thread.join(10)
    return {"events": events}


def graceful_pod_deletion(api: Api, ns: str) -> Observation:
    """A pod bound to a node stays, with its deletionTimestamp, until its kubelet confirms (none does here)."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
           "spec": {"nodeName": "ghost-node", "containers": [{"name": "c", "image": "busybox"}]}}
    api.call("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    deleted, _ = api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/p")
    code, obj = api.call("GET", f"/api/v1/namespaces/{ns}/pods/p")
    meta = obj.get("metadata", {})
    forced, _ = api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/p", params={"gracePeriodSeconds": "0"})
    return {"delete": deleted, "still_there": code, "deleting": bool(meta.get("deletionTimestamp")),
            "grace": meta.get("deletionGracePeriodSeconds"), "forced": forced,
            "gone": api.call("GET", f"/api/v1/namespaces/{ns}/pods/p")[0]}


def owner_garbage_collection(api: Api, ns: str) -> Observation:
    _, owner = api.call("POST", CONFIGMAPS.format(ns=ns), configmap("owner"))
    child = configmap("child")
    child["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                             "uid": owner["metadata"]["uid"]}]
    api.call("POST", CONFIGMAPS.format(ns=ns), child)
    api.call("DELETE", CONFIGMAPS.format(ns=ns) + "/owner")
    collected = eventually(lambda: api.call("GET", CONFIGMAPS.format(ns=ns) + "/child")[0] == 404)
    return {"child_collected": collected}


CHECKS: dict[str, Callable[[Api, str], Observation]] = {f.__name__: f for f in (
    get_missing, create_twice, stale_update, crd_schema_type_error, crd_unknown_field, generation_and_status,
    strategic_patch_on_custom_resource, json_patch_test_then_remove, finalizer_holds_deletion, dry_run_create,
    pagination_and_selectors, impersonation, server_side_apply_conflict, lease_micro_time, table_columns,
    watch_sees_changes, graceful_pod_deletion, owner_garbage_collection)}


@contextmanager
def namespace(api: Api) -> Iterator[str]:
    name = f"fid-{uuid.uuid4().hex[:8]}"
    code, body = api.call("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                         "metadata": {"name": name}})
    if code != 201:
        raise AssertionError(f"namespace {name}: {code} {body}")
    # Left in place: the session's server goes with the session (the emulator per module, the control plane per
    # worker), and the impersonation check's service account need exist on neither (impersonation is by name).
    yield name
