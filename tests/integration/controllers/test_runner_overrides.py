"""Attack: a tenant who may edit layers and repositories replaces what the platform gives every runner pod
(docs/architecture.md §6.3, §24) through `overrideRunnerSpec`: the fail-closed provider mirror turned off and pointed
at their host, the datastore URL (where the runner sends its pod-bound token), the token's volume, a scratch mount.

The objects are written raw through the API, as one stored before the CRD's CEL rules would be (the emulator
does not evaluate x-kubernetes-validations; kube-apiserver's 422 is tests/integration/controlplane/
test_runner_overrides_real.py). The run controller's own reconcile builds and creates the pod: it must carry the
platform's values, and the run must say which overrides were ignored (its attempt, a condition, a Warning).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from burrito_local.apiserver import ApiServer
from burrito_local.identity import admin_client

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from tests.support.runner_overrides import (
    RUN,
    assert_platform_values_won,
    assert_the_run_says_so,
    objects,
    reconcile_once,
    runner_account,
)


def store_and_reconcile(admin: Any, kubeconfig: Path, bodies: Any) -> str:
    """The runner account, then the repository, layer and run written raw (as objects stored before the rules),
    then one reconcile of the run by the real run controller; the namespace's API path."""
    base = f"/apis/{ann.API_VERSION}/namespaces/default"
    admin.post("/api/v1/namespaces/default/serviceaccounts", json=runner_account("default")).raise_for_status()
    stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
              for body, plural in zip(bodies, ("terraformrepositories", "terraformlayers", "terraformruns"),
                                      strict=True)]
    asyncio.run(reconcile_once(str(kubeconfig), *stored))
    return base


def test_attack_reserved_overrides_of_a_layer_and_its_repository_do_not_reach_the_runner_pod(
    api: tuple[ApiServer, Path],
) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        base = store_and_reconcile(admin, kubeconfig, objects("default"))

        pod = admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").raise_for_status().json()
        assert_platform_values_won(pod)
        status = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
        assert status["state"] == "Running", status
        events = admin.get("/api/v1/namespaces/default/events").json()["items"]
        assert_the_run_says_so(status, events, "default")


def test_the_repositorys_reserved_override_is_ignored_and_named_when_it_is_in_effect(
    api: tuple[ApiServer, Path],
) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        base = store_and_reconcile(admin, kubeconfig, objects("default", layer_override={}))

        pod = admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").raise_for_status().json()
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
        assert env["BURRITO_DATASTORE_URL"] == "http://burrito-py-datastore.burrito-py-system.svc:8080"
        status = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]
        assert status["attempts"][0]["ignoredOverrides"] == [
            "TerraformRepository default/repo spec.overrideRunnerSpec.env: BURRITO_DATASTORE_URL is set by burrito-py "
            "for every runner (where the runner sends its pod-bound token); an override may not replace it"]


# The node's /proc: other tenants' runners run as the same uid, so their environments and root filesystems (their
# datastore tokens, their tfvars) would be readable through it; the namespace need not enforce Pod Security.
HOST_PROC = {"volumes": [{"name": "host-proc", "hostPath": {"path": "/proc"}},
                         {"name": "cache", "nfs": {"server": "10.0.0.9", "path": "/"}},
                         {"name": "plugins", "emptyDir": {}}],
             "volumeMounts": [{"name": "host-proc", "mountPath": "/host/proc"},
                              {"name": "cache", "mountPath": "/cache"},
                              {"name": "plugins", "mountPath": "/plugins"}]}


def test_attack_a_host_path_volume_of_an_override_does_not_reach_the_runner_pod(api: tuple[ApiServer, Path]) -> None:
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        base = store_and_reconcile(admin, kubeconfig, objects("default", layer_override=HOST_PROC,
                                                               repository_override={}))

        pod = admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").raise_for_status().json()
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        assert "host-proc" not in volumes and "cache" not in volumes, volumes
        assert not any("hostPath" in v or "nfs" in v for v in volumes.values()), volumes
        mounts = {m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
        assert "host-proc" not in mounts and "cache" not in mounts and "plugins" in mounts, mounts
        ignored = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]["attempts"][0]["ignoredOverrides"]
        assert [i.split(": ", 1)[0] for i in ignored] == [
            "TerraformLayer default/app spec.overrideRunnerSpec.volumes"] * 2, ignored
        assert "volume source hostPath is not one runner pods may use" in ignored[0], ignored


def test_attack_an_override_cannot_move_runner_pods_off_the_platforms_nodes(api: tuple[ApiServer, Path]) -> None:
    """The platform keeps tenant code on its runner node pool (`runner.nodeSelector`, a toleration for that pool's
    taint); a layer editor's override named the controllers' pool, tolerated its taint and required it by
    affinity: the pod would run there. The platform's selector wins key by key, its affinity replaces the
    override's, and the run names what was set aside."""
    from tests.support.runner_overrides import settings

    platform = settings(runner_node_selector={"pool": "runners"},
                        runner_tolerations=[{"key": "pool", "value": "runners", "effect": "NoSchedule"}],
                        runner_affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "pool", "operator": "In", "values": ["runners"]}]}]}}})
    move = {"nodeSelector": {"pool": "controllers", "disk": "ssd"},
            "tolerations": [{"key": "pool", "value": "controllers", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["controllers"]}]}]}}}}
    server, kubeconfig = api
    with admin_client(server.url) as admin:
        base = f"/apis/{ann.API_VERSION}/namespaces/default"
        admin.post("/api/v1/namespaces/default/serviceaccounts", json=runner_account("default")).raise_for_status()
        stored = [admin.post(f"{base}/{plural}", json=body).raise_for_status().json()
                  for body, plural in zip(objects("default", layer_override=move, repository_override={}),
                                          ("terraformrepositories", "terraformlayers", "terraformruns"), strict=True)]
        asyncio.run(reconcile_once(str(kubeconfig), *stored, platform=platform))

        spec = admin.get(f"/api/v1/namespaces/default/pods/{pod_name(RUN, 1)}").raise_for_status().json()["spec"]
        assert spec["nodeSelector"] == {"pool": "runners", "disk": "ssd"}  # narrowed, never moved
        assert spec["affinity"] == platform.runner_affinity
        assert spec["tolerations"][0] == {"key": "pool", "value": "runners", "effect": "NoSchedule"}
        ignored = admin.get(f"{base}/terraformruns/{RUN}").json()["status"]["attempts"][0]["ignoredOverrides"]
        assert ignored == [
            "TerraformLayer default/app spec.overrideRunnerSpec.nodeSelector pool: the platform's runner.nodeSelector "
            "says 'runners'",
            "TerraformLayer default/app spec.overrideRunnerSpec.affinity: the platform's runner.affinity is used"]
