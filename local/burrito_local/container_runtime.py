"""The local kubelet's container runtime mode: a pod's container runs from its image under podman (docs/architecture.md
§20), with the pod's securityContext applied for real: a non-root UID, a read-only root filesystem, dropped
capabilities, no privilege escalation, a seccomp profile.

podman runs with runc and cgroupfs and nofile/nproc limits of 1024, the only combination that works on the
development machines (crun 1.8 refuses their hybrid cgroup hierarchy; podman's default nofile limit exceeds their
hard limit, §18). The container shares the host's network namespace: the emulator's pod and Service addresses
live on the host's loopback. The translation of a pod into `podman run` arguments is pure (`run_argv`); the
runtime object only runs podman.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
GLOBAL_FLAGS = ("--cgroup-manager=cgroupfs", "--runtime=runc")
ULIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


class RuntimeUnavailable(Exception):
    """podman or runc is missing: what and how to get it."""


class ContainerConfigError(Exception):
    """The pod cannot run as specified (the kubelet's CreateContainerConfigError, or `reason`)."""

    def __init__(self, message: str, reason: str = "CreateContainerConfigError") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    read_only: bool = False


def _merged(pod: Obj, container: Obj, key: str) -> Any:
    """A securityContext field: the container's wins over the pod's, as on a node."""
    value = ((container.get("securityContext") or {}).get(key))
    return value if value is not None else (((pod.get("spec") or {}).get("securityContext") or {}).get(key))


def _uid_of(user: str) -> str:
    return user.split(":", 1)[0]


def check_non_root(pod: Obj, container: Obj, image_user: str) -> None:
    """runAsNonRoot as the kubelet verifies it, word for word (kuberuntime's verifyRunAsNonRoot)."""
    if not _merged(pod, container, "runAsNonRoot"):
        return
    uid = _merged(pod, container, "runAsUser")
    if uid is not None:
        if int(uid) == 0:
            raise ContainerConfigError("container's runAsUser breaks non-root policy "
                                       f"(pod: \"{pod['metadata']['name']}_{pod['metadata']['namespace']}"
                                       f"({pod['metadata']['uid']})\", container: {container.get('name', 'main')})")
        return
    user = _uid_of(image_user)
    if user in ("", "root", "0"):
        raise ContainerConfigError("container has runAsNonRoot and image will run as root "
                                   f"(pod: \"{pod['metadata']['name']}_{pod['metadata']['namespace']}"
                                   f"({pod['metadata']['uid']})\", container: {container.get('name', 'main')})")
    if not user.isdigit():
        raise ContainerConfigError(f"container has runAsNonRoot and image has non-numeric user ({user}), "
                                   "cannot verify user is non-root")


def security_args(pod: Obj, container: Obj) -> list[str]:
    """`podman run` flags for the pod's and the container's securityContext."""
    args: list[str] = []
    uid, gid = _merged(pod, container, "runAsUser"), _merged(pod, container, "runAsGroup")
    if uid is not None:
        args += ["--user", f"{int(uid)}:{int(gid)}" if gid is not None else str(int(uid))]
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    groups = [*([pod_context["fsGroup"]] if pod_context.get("fsGroup") is not None else []),
              *(pod_context.get("supplementalGroups") or ())]
    for group in groups:
        args += ["--group-add", str(int(group))]
    context = container.get("securityContext") or {}
    if context.get("privileged"):
        args.append("--privileged")
    if context.get("readOnlyRootFilesystem"):
        # No tmpfs on /tmp, /var/tmp, /run (podman's default with --read-only): on a node only volumes are writable.
        args += ["--read-only", "--read-only-tmpfs=false"]
    capabilities = context.get("capabilities") or {}
    for name in capabilities.get("drop") or ():
        args += ["--cap-drop", str(name)]
    for name in capabilities.get("add") or ():
        args += ["--cap-add", str(name)]
    if context.get("allowPrivilegeEscalation") is False:
        args += ["--security-opt", "no-new-privileges"]
    profile = _merged(pod, container, "seccompProfile") or {}
    kind = profile.get("type")
    if kind == "Localhost":
        raise ContainerConfigError("seccompProfile Localhost is not supported by the local kubelet")
    if kind != "RuntimeDefault":  # Kubernetes' default is Unconfined (the kubelet's --seccomp-default is off)
        args += ["--security-opt", "seccomp=unconfined"]
    return args


def run_argv(podman: str, name: str, pod: Obj, container: Obj, env_names: Sequence[str], mounts: Sequence[Mount],
             args: Sequence[str]) -> list[str]:
    """The `podman run` command line of a pod's container. Environment values are not on it (they may be Secrets
    and a command line is world-readable): `-e NAME` takes each from podman's own environment. Pure."""
    argv = [podman, *GLOBAL_FLAGS, "run", "--rm", "--replace", "--name", name, "--pull=never", "--network=host",
            "--log-driver=k8s-file", *ULIMITS, *security_args(pod, container)]
    if container.get("workingDir"):
        argv += ["--workdir", str(container["workingDir"])]
    if container.get("command"):
        argv += ["--entrypoint", json.dumps(list(container["command"]))]
    for env_name in env_names:
        argv += ["--env", env_name]
    for mount in mounts:
        argv += ["--volume", f"{mount.source}:{mount.target}:{'ro' if mount.read_only else 'rw'}"]
    return [*argv, str(container.get("image", "")), *args]


def container_name(pod: Obj) -> str:
    meta = pod["metadata"]
    return f"k8s_{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"


class Podman:
    """podman and runc on this machine (root: the containers run as the pod's UID, not ours)."""

    def __init__(self) -> None:
        missing = [tool for tool in ("podman", "runc") if shutil.which(tool) is None
                   and not (tool == "runc" and shutil.which("runc", path="/usr/sbin:/sbin"))]
        if missing:
            raise RuntimeUnavailable(f"the podman runtime needs {' and '.join(missing)}: apt-get install "
                                     f"{' '.join(missing)} (scripts/test.sh installs them)")
        self.binary = str(shutil.which("podman"))

    async def _run(self, *args: str, limit: float = 120.0) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            self.binary, *GLOBAL_FLAGS, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await asyncio.wait_for(process.communicate(), limit)
        except TimeoutError:
            process.kill()
            await process.wait()
            return -1, f"podman {args[0]} timed out after {limit:g}s"
        return process.returncode or 0, out.decode(errors="replace").strip()

    async def image_user(self, image: str) -> str:
        """The image's USER; ContainerConfigError(ErrImageNeverPull) when it is not in podman's storage (pods run
        as with imagePullPolicy Never: nothing is pulled)."""
        code, out = await self._run("image", "inspect", "--format", "{{.Config.User}}", image)
        if code != 0:
            raise ContainerConfigError(f'Container image "{image}" is not present with pull policy of Never',
                                       reason="ErrImageNeverPull")
        return out

    async def stop(self, name: str, grace: float) -> None:
        """The stop signal (SIGTERM), SIGKILL after `grace` seconds: the container's main process then reads 137."""
        await self._run("stop", "--ignore", "--time", str(max(0, math.ceil(grace))), name, limit=grace + 60)

    async def remove(self, name: str) -> None:
        """Make sure nothing of the container is left (its `podman run` may have died before it)."""
        await self._run("rm", "--force", "--ignore", "--time", "0", name)


def podman_env(base: Mapping[str, str], container_env: Mapping[str, str]) -> dict[str, str]:
    """podman's own environment: what it needs to run, then the container's variables (`-e NAME` reads them)."""
    own = {name: base[name] for name in ("PATH", "LANG", "XDG_RUNTIME_DIR") if name in base}
    own.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    return {**own, **container_env}
