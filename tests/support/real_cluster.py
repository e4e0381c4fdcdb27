"""The e2e tests' real cluster (docs/architecture.md §22.8): the real control plane of the session
(tests/support/controlplane.py), the local kubelet on this host as its Node (`burrito_local.host_node`), the
CRDs and the chart's admission policies applied once, and an admin identity with a token the datastore
reviews through kube-apiserver. Tests stay apart by namespace: `new_namespace` makes one with the chart's
runner ServiceAccounts, Roles and RoleBindings (rendered from charts/burrito-py, as `helm install` makes
them in a tenant namespace), `remove_namespace` deletes it once the test's controllers have stopped.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from burrito_local.controlplane import ISSUER, ControlPlane, ControlPlaneConfig
from burrito_local.host_node import HostNode
from burrito_local.identity import DATASTORE_AUDIENCE, service_account_username

from burrito_py.api import annotations as ann
from burrito_py.api.crdgen import generate_crds
from burrito_py.chart.admission_policy import policy_objects
from burrito_py.chart.chart import render_chart

ADMIN_NAMESPACE = "kube-system"
ADMIN_ACCOUNT = "burrito-py-e2e-admin"
RELEASE = "burrito-py"
RUNNER_ACCOUNT = "burrito-py-runner"
# Every namespace new_namespace makes carries E2E_NAMESPACE, and the session's admission policy bindings match only
# those (the control plane is shared with tests/integration/controlplane/, whose namespaces and own policies they must
# leave alone); WITHOUT_ADMISSION_POLICY marks one made as on a cluster without the policies (new_namespace).
E2E_NAMESPACE = "e2e.burrito-py.io/namespace"
WITHOUT_ADMISSION_POLICY = "e2e.burrito-py.io/without-admission-policy"
TENANT_PLACEHOLDER = "burrito-py-e2e-tenant"  # the namespace the chart is rendered for, replaced per test
TOKEN_SECONDS = 48 * 3600  # a session's length, with room
RBAC = "rbac.authorization.k8s.io"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
# The namespaced kinds a test's controllers put finalizers on (the layer's destroy finalizer; kopf's own on
# anything it handles deletions of): stripped when the controllers are gone, so the namespace can go.
FINALIZED = ("terraformlayers", "terraformruns", "terraformrepositories", "terraformpullrequests")


class ApiError(AssertionError):
    """A set-up call of the harness was refused; the message names the call and kube-apiserver's answer."""


def _check(what: str, answer: tuple[int, Any], ok: tuple[int, ...] = (200, 201)) -> Any:
    status, body = answer
    if status not in ok:
        message = body.get("message") if isinstance(body, dict) else body
        raise ApiError(f"{what}: HTTP {status}: {message}")
    return body


def tenant_objects() -> list[dict[str, Any]]:
    """What the chart creates in a tenant namespace for the runners (ServiceAccounts, Roles, RoleBindings of
    the runner and pull-request runner accounts), rendered once with the chart's defaults. The RoleBindings
    of the chart's own components' accounts are left out: the tests' controllers run as the e2e admin."""
    values = {"tenants": [{"namespace": TENANT_PLACEHOLDER, "create": False}]}
    wanted = {"ServiceAccount", "Role", "RoleBinding"}
    objects = []
    for obj in render_chart(values, RELEASE, RELEASE):
        meta = obj.get("metadata") or {}
        if obj.get("kind") not in wanted or meta.get("namespace") != TENANT_PLACEHOLDER:
            continue
        if obj["kind"] == "RoleBinding" and obj["roleRef"]["kind"] != "Role":
            continue  # a component's ClusterRole bound to its chart ServiceAccount
        objects.append(obj)
    kinds = sorted(o["kind"] for o in objects)
    if kinds != ["Role", "Role", "RoleBinding", "RoleBinding", "ServiceAccount", "ServiceAccount"]:
        raise AssertionError(f"the chart's tenant objects changed: {kinds}; tests/support/real_cluster.py expects "
                             "the runner and pull-request runner accounts, each with a Role and a RoleBinding")
    return objects


def _in_namespace(obj: dict[str, Any], namespace: str) -> dict[str, Any]:
    text = yaml.safe_dump(obj).replace(TENANT_PLACEHOLDER, namespace)
    moved: dict[str, Any] = yaml.safe_load(text)
    return moved


def _collection(obj: dict[str, Any], namespace: str) -> str:
    kind = obj["kind"]
    if kind == "ServiceAccount":
        return f"/api/v1/namespaces/{namespace}/serviceaccounts"
    return f"/apis/{RBAC}/v1/namespaces/{namespace}/{kind.lower()}s"


class RealCluster:
    """The session's cluster as the e2e harness uses it (see the module)."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        self.plane = plane
        self.workdir = workdir
        self.node = HostNode(plane, workdir / "node")
        self.admin = plane.admin_client()
        self.admin_username = service_account_username(ADMIN_NAMESPACE, ADMIN_ACCOUNT)
        self._token = ""
        self._tenant: list[dict[str, Any]] = []
        self.timings: dict[str, float] = {}

    def start(self) -> RealCluster:
        began = time.monotonic()
        self.node.start()
        self.timings["node_ready"] = time.monotonic() - began
        for crd in generate_crds().values():
            self._put_crd(crd)
        self._admin_identity()
        for obj in policy_objects(RELEASE, [self.admin_username], RUNNER_ACCOUNT, [self.admin_username]):
            kind = "validatingadmissionpolicies" if obj["kind"] == "ValidatingAdmissionPolicy" else \
                "validatingadmissionpolicybindings"
            if kind == "validatingadmissionpolicybindings":
                # The e2e namespaces but those a test makes as on a cluster without the policies (new_namespace).
                obj["spec"]["matchResources"] = {"namespaceSelector": {"matchExpressions": [
                    {"key": E2E_NAMESPACE, "operator": "Exists"},
                    {"key": WITHOUT_ADMISSION_POLICY, "operator": "DoesNotExist"}]}}
            _check(f"create {obj['kind']} {obj['metadata']['name']}",
                   self.admin.call("POST", f"/apis/admissionregistration.k8s.io/v1/{kind}", obj))
        self._tenant = tenant_objects()
        self._wait_served()
        self.timings["ready"] = time.monotonic() - began
        return self

    def _put_crd(self, crd: dict[str, Any]) -> None:
        """Create the CRD, or, when the session's control plane has it already (tests/integration/controlplane/
        applies the CRDs of crds/ to the control plane it shares with this directory), replace it with this
        version's."""
        name = crd["metadata"]["name"]
        status, body = self.admin.call("POST", CRDS, crd)
        if status != 409:
            _check(f"create CRD {name}", (status, body))
            return
        current = _check(f"read CRD {name}", self.admin.call("GET", f"{CRDS}/{name}"), ok=(200,))
        replacement = copy.deepcopy(crd)
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        _check(f"replace CRD {name}", self.admin.call("PUT", f"{CRDS}/{name}", replacement))

    def _admin_identity(self) -> None:
        """`kube-system/burrito-py-e2e-admin`, bound to cluster-admin, with a token for the API and the
        datastore: the controllers, `plan download` and the datastore's own TokenReviews act as it (the
        control plane's admin is a client certificate, which the datastore cannot review)."""
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": ADMIN_ACCOUNT, "namespace": ADMIN_NAMESPACE}}
        _check("create the e2e admin ServiceAccount",
               self.admin.call("POST", f"/api/v1/namespaces/{ADMIN_NAMESPACE}/serviceaccounts", account))
        binding = {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ADMIN_ACCOUNT},
                   "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": "cluster-admin"},
                   "subjects": [{"kind": "ServiceAccount", "name": ADMIN_ACCOUNT, "namespace": ADMIN_NAMESPACE}]}
        _check("bind the e2e admin to cluster-admin",
               self.admin.call("POST", f"/apis/{RBAC}/v1/clusterrolebindings", binding))
        request = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                   "spec": {"audiences": [ISSUER, DATASTORE_AUDIENCE], "expirationSeconds": TOKEN_SECONDS}}
        body = _check("request the e2e admin's token", self.admin.call(
            "POST", f"/api/v1/namespaces/{ADMIN_NAMESPACE}/serviceaccounts/{ADMIN_ACCOUNT}/token", request))
        self._token = str(body["status"]["token"])

    def ensure_crds(self, timeout: float = 60.0) -> None:
        """Make again the CRDs a test deleted (on a cluster of a test's own: §21's tests delete them), once any
        deletion in progress has ended, and wait until each is served."""
        deadline = time.monotonic() + timeout
        for crd in generate_crds().values():
            name = crd["metadata"]["name"]
            while True:
                status, found = self.admin.call("GET", f"{CRDS}/{name}")
                if status == 404:
                    _check(f"create CRD {name}", self.admin.call("POST", CRDS, crd))
                    break
                if status == 200 and not found["metadata"].get("deletionTimestamp"):
                    break
                if time.monotonic() > deadline:
                    raise ApiError(f"CRD {name} still terminating after {timeout:g}s (HTTP {status})")
                time.sleep(0.1)
        self._wait_served(timeout)

    def _wait_served(self, timeout: float = 60.0) -> None:
        """Until every CRD is Established and its storage answers a LIST (a new CRD's storage answers 429 for
        a moment: §22.5)."""
        deadline = time.monotonic() + timeout
        for crd in generate_crds().values():
            group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
            version = next(v["name"] for v in crd["spec"]["versions"] if v.get("served"))
            while True:
                status, _ = self.admin.call("GET", f"/apis/{group}/{version}/{plural}?limit=1")
                if status == 200:
                    break
                if time.monotonic() > deadline:
                    raise ApiError(f"CRD {crd['metadata']['name']} not served after {timeout:g}s (HTTP {status})")
                time.sleep(0.1)

    def write_kubeconfig(self, path: Path, namespace: str) -> Path:
        """A kubeconfig as the e2e admin (its token), `namespace` as the context's."""
        config = {
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.plane.server,
                "certificate-authority-data": base64.b64encode(self.plane.ca_pem).decode()}}],
            "users": [{"name": ADMIN_ACCOUNT, "user": {"token": self._token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": ADMIN_ACCOUNT,
                                                     "namespace": namespace}}],
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(yaml.safe_dump(config))
        return path

    def new_namespace(self, prefix: str = "e2e", name: str | None = None, pod_security: str = "restricted",
                      admission_policy: bool = True) -> str:
        """A fresh namespace under Pod Security `restricted` (as the chart labels the tenant namespaces it
        creates; `pod_security` another level), with the chart's runner accounts and their Roles:
        `<prefix>-<8 hex>`, or `name` (a test whose namespace names matter, e.g. to shard patterns, makes them
        unique itself). `admission_policy=False`: the chart's admission policies do not apply in it, as on a
        cluster older than 1.30 or with `admissionPolicy.enabled: false` (the session's bindings skip it)."""
        name = name or f"{prefix}-{uuid.uuid4().hex[:8]}"
        labels = {f"pod-security.kubernetes.io/{mode}": pod_security for mode in ("enforce", "warn", "audit")}
        labels[E2E_NAMESPACE] = "true"
        if not admission_policy:
            labels[WITHOUT_ADMISSION_POLICY] = "true"
        _check(f"create namespace {name}", self.admin.call("POST", "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}))
        for template in self._tenant:
            obj = _in_namespace(copy.deepcopy(template), name)
            _check(f"create {obj['kind']} {name}/{obj['metadata']['name']}",
                   self.admin.call("POST", _collection(obj, name), obj))
        return name

    def restore_tenant_objects(self, namespace: str) -> None:
        """Create again whichever of the chart's tenant objects a test deleted from `namespace` (409: still
        there)."""
        for template in self._tenant:
            obj = _in_namespace(copy.deepcopy(template), namespace)
            _check(f"create {obj['kind']} {namespace}/{obj['metadata']['name']}",
                   self.admin.call("POST", _collection(obj, namespace), obj), ok=(200, 201, 409))

    def remove_namespace(self, namespace: str) -> None:
        """Delete `namespace` once its controllers are gone: their finalizers are stripped first (nobody is
        left to remove them), so the namespace controller can empty it; its pods end on the kubelet."""
        base = f"/apis/{ann.GROUP}/{ann.VERSION}/namespaces/{namespace}"
        for plural in FINALIZED:
            status, listing = self.admin.call("GET", f"{base}/{plural}")
            if status != 200 or not isinstance(listing, dict):
                continue
            for item in listing.get("items") or ():
                if item["metadata"].get("finalizers"):
                    self.admin.call("PATCH", f"{base}/{plural}/{item['metadata']['name']}",
                                    {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json")
        self.admin.call("DELETE", f"/api/v1/namespaces/{namespace}")

    def stop(self) -> None:
        self.node.stop()


@contextlib.contextmanager
def own_cluster(workdir: Path) -> Iterator[RealCluster]:
    """A control plane of the caller's own (its own data directory, ports and node), for tests that change what
    every test of the session's control plane shares (deleting the CRDs: §21). `timings` adds the control
    plane's own start (`controlplane_ready`) to the node's and the set-up's."""
    from tests.support.controlplane import built_binary

    began = time.monotonic()
    with ControlPlane(built_binary(), ControlPlaneConfig(workdir / "controlplane", unsafe_no_fsync=True)) as plane:
        ready = time.monotonic() - began
        cluster = RealCluster(plane, workdir / "cluster").start()
        cluster.timings["controlplane_ready"] = ready
        cluster.timings["total"] = time.monotonic() - began
        try:
            yield cluster
        finally:
            cluster.stop()
