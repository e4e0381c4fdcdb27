"""The local kubelet's podman mode, its pure half: a pod's securityContext and volumes as `podman run` flags."""

from __future__ import annotations

import json
from typing import Any

import pytest
from burrito_local.container_runtime import (
    ContainerConfigError,
    Mount,
    check_non_root,
    podman_env,
    run_argv,
    security_args,
)

from burrito_py.controllers.run.runner_pod import CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT


def pod(container_context: dict[str, Any] | None = None, pod_context: dict[str, Any] | None = None,
        **container: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    spec_container = {"name": "main", "image": "localhost/img:1", **container}
    if container_context is not None:
        spec_container["securityContext"] = container_context
    body = {"metadata": {"name": "p", "namespace": "ns", "uid": "0123456789"},
            "spec": {"containers": [spec_container], **({"securityContext": pod_context} if pod_context else {})}}
    return body, spec_container


def test_the_runner_pods_restricted_context_becomes_runtime_flags() -> None:
    body, container = pod(CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT)
    args = security_args(body, container)
    assert args == ["--user", "65532:65532", "--group-add", "65532", "--read-only", "--read-only-tmpfs=false",
                    "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]  # RuntimeDefault: podman's profile


def test_the_containers_fields_win_over_the_pods() -> None:
    body, container = pod({"runAsUser": 1000, "capabilities": {"add": ["NET_BIND_SERVICE"]}},
                          {"runAsUser": 2000, "runAsGroup": 3000, "supplementalGroups": [4000],
                           "seccompProfile": {"type": "RuntimeDefault"}})
    assert security_args(body, container) == ["--user", "1000:3000", "--group-add", "4000",
                                              "--cap-add", "NET_BIND_SERVICE"]


def test_without_a_seccomp_profile_the_container_is_unconfined_as_on_a_node() -> None:
    body, container = pod({"privileged": True})
    assert security_args(body, container) == ["--privileged", "--security-opt", "seccomp=unconfined"]
    body, container = pod({"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}})
    with pytest.raises(ContainerConfigError, match="Localhost is not supported"):
        security_args(body, container)


@pytest.mark.parametrize(("context", "image_user", "message"), [
    ({"runAsNonRoot": True, "runAsUser": 0}, "65532", "container's runAsUser breaks non-root policy"),
    ({"runAsNonRoot": True}, "", "image will run as root"),
    ({"runAsNonRoot": True}, "0:0", "image will run as root"),
    ({"runAsNonRoot": True}, "root", "image will run as root"),
    ({"runAsNonRoot": True}, "burrito", "image has non-numeric user (burrito), cannot verify user is non-root"),
])
def test_run_as_non_root_is_verified_as_the_kubelet_does(context: dict[str, Any], image_user: str,
                                                         message: str) -> None:
    body, container = pod(context)
    with pytest.raises(ContainerConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_non_root(body, container, image_user)


@pytest.mark.parametrize(("context", "image_user"), [
    ({"runAsNonRoot": True}, "65532:65532"), ({"runAsNonRoot": True, "runAsUser": 7}, "root"), ({}, "root")])
def test_run_as_non_root_allows(context: dict[str, Any], image_user: str) -> None:
    body, container = pod(context)
    check_non_root(body, container, image_user)


def test_run_argv_keeps_values_off_the_command_line() -> None:
    body, container = pod(CONTAINER_SECURITY_CONTEXT, POD_SECURITY_CONTEXT, command=["burrito-py", "runner"],
                          workingDir="/runner/work")
    argv = run_argv("/usr/bin/podman", "k8s_ns_p_01234567", body, container, ["TOKEN", "HOME"],
                    [Mount("/host/tmp", "/tmp"), Mount("/host/token", "/var/run/token", read_only=True)], ["start"])
    assert argv[:3] == ["/usr/bin/podman", "--cgroup-manager=cgroupfs", "--runtime=runc"]
    assert argv[3:9] == ["run", "--rm", "--replace", "--name", "k8s_ns_p_01234567", "--pull=never"]
    assert "--network=host" in argv
    joined = " ".join(argv)
    assert "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024" in joined
    assert "--env TOKEN --env HOME" in joined  # names only: podman reads the values from its environment
    assert "--volume /host/tmp:/tmp:rw --volume /host/token:/var/run/token:ro" in joined
    assert argv[argv.index("--entrypoint") + 1] == json.dumps(["burrito-py", "runner"])
    assert argv[argv.index("--workdir") + 1] == "/runner/work"
    assert argv[-2:] == ["localhost/img:1", "start"]


def test_podmans_environment_is_its_own_then_the_containers() -> None:
    env = podman_env({"PATH": "/usr/bin", "SECRET_OF_THE_HOST": "x", "LANG": "C.UTF-8"}, {"TOKEN": "t", "HOME": "/h"})
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "TOKEN": "t", "HOME": "/h"}
    assert podman_env({}, {})["PATH"].startswith("/usr/local/sbin")
