"""A pull request's runner pod inherits no Secret of the layer (issue 24, P2; pure)."""

from __future__ import annotations

from typing import Any

from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod, without_secret_sources

OVERRIDE: dict[str, Any] = {
    "serviceAccountName": "cloud-admin",
    "image": "example/runner:1",
    "env": [{"name": "CLOUD_TOKEN", "valueFrom": {"secretKeyRef": {"name": "cloud", "key": "token"}}},
            {"name": "REGION", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "region"}}},
            {"name": "PLAIN", "value": "kept"}],
    "envFrom": [{"secretRef": {"name": "cloud"}}, {"configMapRef": {"name": "cfg"}}],
    "volumes": [{"name": "creds", "secret": {"secretName": "cloud"}},
                {"name": "projected", "projected": {"sources": [{"secret": {"name": "cloud"}}]}},
                {"name": "token", "projected": {"sources": [{"serviceAccountToken": {"audience": "sts"}}]}},
                {"name": "vault", "csi": {"driver": "secrets-store.csi.k8s.io"}},
                {"name": "cache", "persistentVolumeClaim": {"claimName": "plugin-cache"}},
                {"name": "cfg", "configMap": {"name": "cfg"}}],
    "volumeMounts": [{"name": n, "mountPath": f"/m/{n}"} for n in ("creds", "projected", "token", "vault", "cache",
                                                                 "cfg")],
    "resources": {"limits": {"memory": "1Gi"}},
}


def test_nothing_secret_survives_and_everything_else_does() -> None:
    kept = without_secret_sources(OVERRIDE)
    assert "serviceAccountName" not in kept
    assert [e["name"] for e in kept["env"]] == ["REGION", "PLAIN"]
    assert kept["envFrom"] == [{"configMapRef": {"name": "cfg"}}]
    assert [v["name"] for v in kept["volumes"]] == ["cfg"]
    assert [m["name"] for m in kept["volumeMounts"]] == ["cfg"]
    assert kept["image"] == "example/runner:1" and kept["resources"] == OVERRIDE["resources"]
    assert "cloud" not in str({k: v for k, v in kept.items() if k not in ("image",)}).replace("cfg", "")


def test_the_pod_of_a_pull_requests_run_carries_no_secret_reference() -> None:
    run = {"metadata": {"name": "pr1-app-0123456789", "namespace": "team", "uid": "u"},
           "spec": {"action": "plan", "pullRequest": "infra-pr-1"}}
    layer = {"metadata": {"name": "app", "namespace": "team"}}
    defaults = RunnerDefaults("img", "burrito-py-runner-pr", "http://datastore")
    pod = build_runner_pod(run, layer, 1, defaults, without_secret_sources(OVERRIDE))
    assert pod["spec"]["serviceAccountName"] == "burrito-py-runner-pr"
    assert "secretKeyRef" not in str(pod) and "secretRef" not in str(pod) and "secretName" not in str(pod)
