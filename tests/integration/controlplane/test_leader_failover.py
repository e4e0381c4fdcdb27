"""Issue 25 item 6 on a real API server: the chart's two controllers replicas (leader election, the chart's RBAC,
their ServiceAccount's tokens issued by kube-apiserver through TokenRequest, bound to each pod) run as pods on the
local kubelet, a Node of the real control plane (§22.3). Deleting the leader's pod hands the Lease over within a
retry period: Kubernetes keeps the pod, and the token it releases the Lease with, while its kubelet stops it. A
forced deletion (`--grace-period=0 --force`) removes the pod, and so its token, at once: the release is refused
and the standby waits for the Lease to expire.

The whole chart is installed as `burrito-py dev --mode chart` installs it into the emulator (`dev_values`, the
rendered chart in Helm's install order), with `kubectl apply --server-side`. Timing is the chart's: lease 15 s,
renew deadline 10 s, retry 2 s. tests/bench/bench_failover.py `--real` prints medians over more rounds.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from burrito_local.controlplane import AdminClient
from burrito_local.dev import RELEASE, RELEASE_NAMESPACE, DevOptions, dev_values
from burrito_local.install import deployment_available, install_order
from burrito_local.netns import NodeNamespace

from burrito_py.chart.chart import render_chart
from tests.support.controlplane import eventually, kubectl

pytestmark = pytest.mark.slow

LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NAMESPACE}/leases/{RELEASE}-controllers"
PODS = f"/api/v1/namespaces/{RELEASE_NAMESPACE}/pods"
CONTROLLERS = f"/apis/apps/v1/namespaces/{RELEASE_NAMESPACE}/deployments/{RELEASE}-controllers"
SELECTOR = "app.kubernetes.io/component=controllers"
# The chart's controllers.config leaseDuration, renewDeadline, retryPeriod.
LEASE_SECONDS, RENEW_SECONDS, RETRY_SECONDS = 15.0, 10.0, 2.0
TOKEN_CACHE_SECONDS = 10.0  # kube-apiserver caches a successful token authentication this long


def install_chart(cluster: NodeNamespace, workdir: Path) -> list[dict[str, Any]]:
    """charts/burrito-py with `burrito-py dev`'s values (the local kubelet runs the installed `burrito-py` for the
    image), applied as `helm install --create-namespace` would: Helm's install order, the release namespace first."""
    options = DevOptions(data_dir=workdir, kubeconfig=workdir / "kubeconfig", mode="chart",
                         controllers_replicas=2)  # the chart's default; `dev` itself runs one
    objects = install_order(render_chart(dev_values(options), RELEASE, RELEASE_NAMESPACE))
    for obj in objects:
        if obj["kind"] != "Namespace" and obj["kind"] not in CLUSTER_SCOPED:
            obj["metadata"].setdefault("namespace", RELEASE_NAMESPACE)
    kubectl(cluster, "create", "namespace", RELEASE_NAMESPACE)
    kubectl(cluster, "apply", "--server-side", "--field-manager=burrito-py-test", "-f", "-", timeout=120,
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    return objects


CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding", "PriorityClass", "StorageClass", "PersistentVolume",
                  "IngressClass", "APIService", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}


def _micro_time(text: str) -> float:
    """A Lease MicroTime (RFC 3339 with microseconds) as a Unix time."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Handover:
    how: str
    old: str
    new: str
    released: bool  # the old leader cleared the holder before the new one took it (else: it waited for expiry)
    polled: float  # from the request to our first read of another holder (an upper bound)
    acquired: float  # from the request to the new holder's acquireTime (same machine, same clock)


class RealLeaders:
    """The chart's controllers replicas and their Lease `<release>-controllers` on the real API server."""

    def __init__(self, api: AdminClient, cluster: NodeNamespace) -> None:
        self.api, self.cluster = api, cluster

    def get(self, path: str) -> Any:
        status, body = self.api.call("GET", path)
        return body if status == 200 else None

    def lease(self) -> dict[str, Any]:
        return dict((self.get(LEASE) or {}).get("spec") or {})

    def holder(self) -> str:
        return str(self.lease().get("holderIdentity") or "")

    def replicas(self) -> list[dict[str, Any]]:
        listing = self.get(f"{PODS}?labelSelector={SELECTOR}") or {"items": []}
        items: list[dict[str, Any]] = listing["items"]
        return items

    def ready_pair(self) -> tuple[str, str] | None:
        """(leader, standby) when the Lease is held and two replicas are Ready and not being deleted."""
        def ready(pod: dict[str, Any]) -> bool:
            return not pod["metadata"].get("deletionTimestamp") and any(
                c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions")
                or ())

        names = [p["metadata"]["name"] for p in self.replicas() if ready(p)]
        leader = self.holder()
        if len(names) != 2 or leader not in names:
            return None
        return leader, next(n for n in names if n != leader)

    def wait_ready_pair(self, timeout: float = 180) -> tuple[str, str]:
        """A leader and a standby, both Ready for 3 s: the standby has read the Lease at least once (retry
        period 2 s), so it judges expiry from a record it has seen, as a long-running standby does."""
        deadline = time.monotonic() + timeout
        while True:
            pair = eventually(self.ready_pair, max(deadline - time.monotonic(), 1), interval=0.2,
                              what="a leader and a Ready standby")
            time.sleep(3)
            if self.ready_pair() == pair:
                return pair

    def handover(self, how: str, leader: str) -> Handover:
        """Delete the leader's pod (`kubectl delete pod`: the pod's grace; `forced`: `--grace-period=0 --force`)
        or SIGTERM its container; time until another replica holds the Lease."""
        before_rv = str(self.get(LEASE)["metadata"]["resourceVersion"])
        before = self.lease()
        started_wall, started = time.time(), time.monotonic()
        if how == "SIGTERM":
            self.sigterm(leader)
        else:
            # The body kubectl sends: `kubectl delete pod` (no grace: the pod's terminationGracePeriodSeconds),
            # `kubectl delete pod --grace-period=0 --force`.
            body = {"propagationPolicy": "Background", **({"gracePeriodSeconds": 0} if how == "forced" else {})}
            status, answer = self.api.call("DELETE", f"{PODS}/{leader}", body)
            assert status == 200, (status, answer)
        released = False
        deadline = started + 60
        while (holder := self.holder()) in ("", leader):
            released = released or holder == ""
            assert time.monotonic() < deadline, f"no new holder 60 s after {leader} ({how})"
            time.sleep(0.05)
        polled = time.monotonic() - started
        lease = self.lease()
        assert int(lease.get("leaseTransitions") or 0) > int(before.get("leaseTransitions") or 0), (before, lease)
        # Released and taken between two of those reads, the empty holder was not seen: the Lease's every change
        # since, replayed by a watch from the resourceVersion read before, says whether it was released.
        released = released or self.released_since(before_rv)
        return Handover(how, leader, holder, released, polled, _micro_time(lease["acquireTime"]) - started_wall)

    def released_since(self, resource_version: str) -> bool:
        """Whether the Lease was written with no holder after `resource_version` (every write, in order)."""
        collection, _, name = LEASE.rpartition("/leases/")
        status, body = self.api.call("GET", f"{collection}/leases?watch=true&fieldSelector=metadata.name%3D{name}"
                                            f"&resourceVersion={resource_version}&timeoutSeconds=1", timeout=15)
        assert status == 200, (status, body)
        events = [body] if isinstance(body, dict) else [json.loads(line) for line in body.splitlines() if line]
        assert events and all(e["type"] == "MODIFIED" for e in events), events
        return any(not (e["object"].get("spec") or {}).get("holderIdentity") for e in events)

    def log(self, pod: str) -> str:
        """The pod's log, through kube-apiserver and the kubelet API (`kubectl logs`)."""
        return kubectl(self.cluster, "logs", pod, "-n", RELEASE_NAMESPACE, check=False).stdout

    def wait_acting(self, pod: str, timeout: float = 60) -> str:
        """The leader's kopf has started the controllers (its start-up activity listed everything)."""
        return eventually(lambda: "controllers started" in (text := self.log(pod)) and text, timeout, interval=0.5,
                          what=f"{pod} to start the controllers")

    def sigterm(self, pod: str) -> None:
        """SIGTERM to the pod's container, as a node's runtime sends it (`kill 1` in the container): its process
        id (`local://<pid>`) is one of the node namespace's PID namespace."""
        status = self.get(f"{PODS}/{pod}")["status"]["containerStatuses"][0]
        inner = int(status["containerID"].removeprefix("local://"))
        os.kill(host_pid(self.cluster, inner), signal.SIGTERM)


def host_pid(cluster: NodeNamespace, inner: int) -> int:
    """This host's id of process `inner` of the node's PID namespace (`NSpid` in /proc/<pid>/status)."""
    assert cluster.process is not None
    init = NodeNamespace._inside_pid(cluster.process)
    assert init is not None, "the node's namespace is not running"
    namespace = os.readlink(f"/proc/{init}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.readlink(entry / "ns" / "pid") != namespace:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("NSpid:") and int(line.split()[-1]) == inner:
                    return int(entry.name)
    raise AssertionError(f"no process {inner} in the node's PID namespace")


@contextlib.contextmanager
def chart_on_node(cluster: NodeNamespace, workdir: Path) -> Iterator[RealLeaders]:
    """The chart installed, its controllers Deployment available; the release namespace removed afterwards."""
    install_chart(cluster, workdir)
    leaders = RealLeaders(cluster.admin_client(), cluster)
    try:
        eventually(lambda: (d := leaders.get(CONTROLLERS)) is not None and deployment_available(d), 180,
                   interval=0.5, what="the controllers Deployment to be available")
        yield leaders
    finally:
        kubectl(leaders.cluster, "delete", "namespace", RELEASE_NAMESPACE, "--wait=false", check=False)


def handovers(leaders: RealLeaders, plan: list[str]) -> list[Handover]:
    done = []
    for how in plan:
        leader, _ = leaders.wait_ready_pair()
        done.append(leaders.handover(how, leader))
        if how == "SIGTERM":
            # Its container restarts in place with the kubelet's back-off, which grows with each restart: a fresh
            # pod for the next rounds (it is not the leader any more).
            status, answer = leaders.api.call("DELETE", f"{PODS}/{leader}", {"propagationPolicy": "Background"})
            assert status == 200, (status, answer)
    return done


@pytest.mark.timeout(300)
def test_a_deleted_leader_pod_hands_over_within_a_retry_period(node: NodeNamespace, tmp_path: Path) -> None:
    with chart_on_node(node, tmp_path) as leaders:
        # The replicas act as the chart's ServiceAccount, with the tokens kube-apiserver binds to each pod.
        deployment = leaders.get(CONTROLLERS)
        assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == f"{RELEASE}-controllers"
        leader, _ = leaders.wait_ready_pair()
        # The leader acts at once: kopf's start-up lists every kind (a 429 while a new CRD's storage initialized
        # used to fail it, retried by kopf only 60 s later), with the chart's RBAC (a Forbidden would fail it).
        first = leaders.wait_acting(leader, timeout=30)
        assert "failed with an exception" not in first, first
        [graceful] = handovers(leaders, ["deletion"])
        leaders.wait_acting(graceful.new)  # a new leader acts too
        [stopped] = handovers(leaders, ["SIGTERM"])
        [forced] = handovers(leaders, ["forced"])
    print(f"\nreal control plane, chart timing 15/10/2 s: {graceful}\n{stopped}\n{forced}")
    # The pod, and the token its process releases the Lease with, stay while the kubelet stops it: as fast as a
    # SIGTERM to the leader's container (`kill 1` in it), which releases the Lease on its way out.
    assert graceful.released and graceful.polled < 5.0, graceful
    assert stopped.released and stopped.polled < 5.0, stopped
    # Forced: the pod is gone at once, but kube-apiserver caches a token's successful authentication for 10 s
    # (not configurable), so the release usually still goes through. When the cache entry expired first, the
    # release is refused (401) and the standby waits for the Lease to expire: a lease after the last renewal it
    # saw, which the stopping leader may still have made with its cached token, plus its retry period.
    if forced.released:
        assert forced.polled < 5.0, forced
    else:
        assert LEASE_SECONDS - 5.0 < forced.acquired < LEASE_SECONDS + TOKEN_CACHE_SECONDS + RETRY_SECONDS + 3, forced
