"""The restricted Pod Security checker, and every pod the chart or the controllers make passes it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from burrito_py.api import annotations as ann
from burrito_py.chart.pod_security import pod_specs, restricted_violations
from burrito_py.controllers.run.runner_pod import RunnerDefaults, build_runner_pod
from tests.unit.chart.rendering import VALUE_SETS, rendered

GOOD: dict[str, Any] = {
    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
    "containers": [
        {
            "name": "main",
            "image": "x",
            "securityContext": {
                "allowPrivilegeEscalation": False,
                "readOnlyRootFilesystem": True,
                "capabilities": {"drop": ["ALL"]},
            },
        }
    ],
    "volumes": [{"name": "tmp", "emptyDir": {}}],
}


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GOOD)
    node: Any = spec
    for key in path[:-1]:
        node = node[key]
    if value is None:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value
    return spec


def test_a_restricted_pod_passes() -> None:
    assert restricted_violations(GOOD) == []


@pytest.mark.parametrize(
    ("path", "value", "complaint"),
    [
        (["hostNetwork"], True, "hostNetwork"),
        (["hostPID"], True, "hostPID"),
        (["hostIPC"], True, "hostIPC"),
        (["volumes"], [{"name": "h", "hostPath": {"path": "/"}}], "type hostPath"),
        (["volumes"], [{"name": "n", "nfs": {"server": "s", "path": "/"}}], "type nfs"),
        (["securityContext", "runAsNonRoot"], None, "runAsNonRoot"),
        (["securityContext", "runAsUser"], 0, "runAsUser must not be 0"),
        (["securityContext", "seccompProfile"], {"type": "Unconfined"}, "seccompProfile"),
        (["securityContext", "seccompProfile"], None, "seccompProfile"),
        (["securityContext", "sysctls"], [{"name": "kernel.msgmax", "value": "1"}], "safe sysctl"),
        (["containers", 0, "securityContext", "privileged"], True, "privileged"),
        (["containers", 0, "securityContext", "allowPrivilegeEscalation"], None, "allowPrivilegeEscalation"),
        (["containers", 0, "securityContext", "capabilities"], {"drop": ["NET_RAW"]}, "drop ALL"),
        (["containers", 0, "securityContext", "capabilities"], {"drop": ["ALL"], "add": ["SYS_ADMIN"]}, "SYS_ADMIN"),
        (["containers", 0, "securityContext", "readOnlyRootFilesystem"], False, "readOnlyRootFilesystem"),
        (["containers", 0, "securityContext", "runAsNonRoot"], False, "runAsNonRoot"),
        (["containers", 0, "securityContext", "procMount"], "Unmasked", "procMount"),
        (["containers", 0, "securityContext", "seLinuxOptions"], {"user": "root"}, "seLinuxOptions.user"),
        (["containers", 0, "ports"], [{"containerPort": 80, "hostPort": 80}], "hostPort"),
    ],
)
def test_each_restricted_rule_is_checked(path: list[Any], value: Any, complaint: str) -> None:
    problems = restricted_violations(_with(path, value))
    assert any(complaint in p for p in problems), problems


def test_net_bind_service_may_be_added() -> None:
    spec = _with(["containers", 0, "securityContext", "capabilities"], {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]})
    assert restricted_violations(spec) == []


def test_init_containers_are_checked_too() -> None:
    spec = _with(["initContainers"], [{"name": "init", "image": "x"}])
    assert any(p.startswith("initContainers[init]") for p in restricted_violations(spec))


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_chart_pod_is_restricted(name: str) -> None:
    specs = [s for obj in rendered(name) for s in pod_specs(obj)]
    shards = len(VALUE_SETS[name].get("controllers", {}).get("shards") or ()) or 1
    assert len(specs) == 2 + shards  # controllers (one Deployment per shard), datastore, server
    for where, spec in specs:
        assert restricted_violations(spec) == [], where
        mounts = {m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        assert "/tmp" in mounts, where


def _runner_pod(override: dict[str, Any] | None) -> dict[str, Any]:
    run = {"apiVersion": ann.API_VERSION, "metadata": {"name": "app-plan-x", "namespace": "team-a", "uid": "u"},
           "spec": {"action": "plan"}}
    layer = {"metadata": {"name": "app", "namespace": "team-a"}}
    defaults = RunnerDefaults("runner:1", "burrito-py-runner", "http://ds:8080", termination_grace_period_seconds=90)
    return build_runner_pod(run, layer, 1, defaults, override)


OVERRIDES = [
    None,
    {
        "image": "custom:2",
        "env": [{"name": "TF_LOG", "value": "DEBUG"}],
        "volumes": [{"name": "tools", "persistentVolumeClaim": {"claimName": "tool-cache"}}],
        "resources": {"limits": {"memory": "1Gi"}},
        "tolerations": [{"key": "spot", "operator": "Exists"}],
        "metadata": {"labels": {"team": "a"}},
    },
]


@pytest.mark.parametrize("override", OVERRIDES)
def test_runner_pods_are_restricted_with_scratch_dirs_only(override: dict[str, Any] | None) -> None:
    pod = _runner_pod(override)
    spec = pod["spec"]
    assert restricted_violations(spec) == []
    assert spec["terminationGracePeriodSeconds"] == 90
    container = spec["containers"][0]
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert writable == {"/tmp", "/home/burrito", "/runner/work", "/runner/tools"}
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert {k: env[k] for k in ("HOME", "TMPDIR", "TENV_ROOT", "CHECKPOINT_DISABLE", "TF_IN_AUTOMATION",
                                "TF_INPUT")} == {
        "HOME": "/home/burrito", "TMPDIR": "/tmp", "TENV_ROOT": "/runner/tools", "CHECKPOINT_DISABLE": "1",
        "TF_IN_AUTOMATION": "1", "TF_INPUT": "0",
    }
    assert spec["securityContext"]["runAsUser"] == container["securityContext"]["runAsUser"] == 65532
    assert pod["metadata"]["labels"][ann.LABEL_COMPONENT] == ann.COMPONENT_RUNNER


def test_an_override_replaces_a_scratch_volume_by_name_but_not_the_security_context() -> None:
    pod = _runner_pod(OVERRIDES[1])
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["tools"] == {"name": "tools", "persistentVolumeClaim": {"claimName": "tool-cache"}}
    assert volumes["tmp"] == {"name": "tmp", "emptyDir": {}}
    assert pod["spec"]["securityContext"] == _runner_pod(None)["spec"]["securityContext"]
    # A scratch volume swapped for a host path is left out (only an emptyDir may replace it: api/runner_contract.py),
    # and so is a host path of its own, whatever the namespace enforces: the pod stays restricted.
    swapped = _runner_pod({"volumes": [{"name": "tmp", "hostPath": {"path": "/tmp"}}]})
    assert {v["name"]: v for v in swapped["spec"]["volumes"]}["tmp"] == {"name": "tmp", "emptyDir": {}}
    unsafe = _runner_pod({"volumes": [{"name": "host", "hostPath": {"path": "/tmp"}}],
                          "volumeMounts": [{"name": "host", "mountPath": "/host"}]})
    assert restricted_violations(unsafe["spec"]) == []
    assert "host" not in {v["name"] for v in unsafe["spec"]["volumes"]}
