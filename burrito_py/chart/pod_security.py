"""The Kubernetes "restricted" Pod Security Standard (baseline checks included) as a pure function over a
pod spec, plus our own rule: every container's root filesystem is read-only.

The checks follow https://kubernetes.io/docs/concepts/security/pod-security-standards/ (latest): used by the
chart tests on every pod template and on the runner pods the controllers build.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["pod_specs", "restricted_violations"]

ALLOWED_VOLUME_TYPES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)
ALLOWED_SECCOMP = frozenset({"RuntimeDefault", "Localhost"})
ALLOWED_ADDED_CAPABILITIES = frozenset({"NET_BIND_SERVICE"})
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
    }
)
ALLOWED_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
ALLOWED_APPARMOR = frozenset({"RuntimeDefault", "Localhost"})
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")


def pod_specs(obj: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, pod spec) of a Pod or of the pod template of a workload object."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    name = f"{kind}/{(obj.get('metadata') or {}).get('name')}"
    if kind == "Pod":
        yield name, spec
    elif kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController"):
        yield name, (spec.get("template") or {}).get("spec") or {}
    elif kind == "CronJob":
        yield name, ((((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec") or {})


def _seccomp_ok(context: Mapping[str, Any]) -> bool | None:
    """True/False when the context sets a seccomp profile, None when it leaves it unset."""
    profile = context.get("seccompProfile")
    if not profile:
        return None
    return profile.get("type") in ALLOWED_SECCOMP


def restricted_violations(spec: Mapping[str, Any]) -> list[str]:
    """Every way `spec` (a PodSpec) breaks the restricted profile or has a writable root filesystem."""
    problems: list[str] = []
    pod_context: Mapping[str, Any] = spec.get("securityContext") or {}

    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            problems.append(f"spec.{host} must not be true")
    if (pod_context.get("windowsOptions") or {}).get("hostProcess"):
        problems.append("spec.securityContext.windowsOptions.hostProcess must not be true")
    for volume in spec.get("volumes") or ():
        types = [key for key in volume if key != "name"]
        for volume_type in types:
            if volume_type not in ALLOWED_VOLUME_TYPES:
                problems.append(f"volume {volume.get('name')!r}: type {volume_type} is not allowed")
    for sysctl in pod_context.get("sysctls") or ():
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"spec.securityContext.sysctls: {sysctl.get('name')} is not a safe sysctl")
    problems.extend(_selinux_problems("spec.securityContext", pod_context))
    if (pod_context.get("appArmorProfile") or {}).get("type") not in (None, *ALLOWED_APPARMOR):
        problems.append("spec.securityContext.appArmorProfile must be RuntimeDefault or Localhost")
    if pod_context.get("runAsUser") == 0:
        problems.append("spec.securityContext.runAsUser must not be 0")
    pod_seccomp = _seccomp_ok(pod_context)
    if pod_seccomp is False:
        problems.append("spec.securityContext.seccompProfile.type must be RuntimeDefault or Localhost")
    pod_non_root = pod_context.get("runAsNonRoot") is True

    containers = [(kind, c) for kind in _CONTAINER_LISTS for c in spec.get(kind) or ()]
    if not containers:
        problems.append("the pod has no containers")
    for kind, container in containers:
        where = f"{kind}[{container.get('name')}]"
        context: Mapping[str, Any] = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{where}: privileged must not be true")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"{where}: windowsOptions.hostProcess must not be true")
        if context.get("procMount") not in (None, "Default"):
            problems.append(f"{where}: procMount must be Default")
        if (context.get("appArmorProfile") or {}).get("type") not in (None, *ALLOWED_APPARMOR):
            problems.append(f"{where}: appArmorProfile must be RuntimeDefault or Localhost")
        problems.extend(_selinux_problems(where, context))
        for port in container.get("ports") or ():
            if port.get("hostPort"):
                problems.append(f"{where}: hostPort {port['hostPort']} is not allowed")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation must be false")
        if context.get("runAsNonRoot") is False or not (pod_non_root or context.get("runAsNonRoot") is True):
            problems.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if context.get("runAsUser") == 0:
            problems.append(f"{where}: runAsUser must not be 0")
        seccomp = _seccomp_ok(context)
        if seccomp is False or (seccomp is None and pod_seccomp is not True):
            problems.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or ()):
            problems.append(f"{where}: capabilities must drop ALL")
        added = set(capabilities.get("add") or ()) - ALLOWED_ADDED_CAPABILITIES
        if added:
            problems.append(f"{where}: capabilities may add only NET_BIND_SERVICE, not {sorted(added)}")
        if context.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{where}: readOnlyRootFilesystem must be true")
    return problems


def _selinux_problems(where: str, context: Mapping[str, Any]) -> list[str]:
    options = context.get("seLinuxOptions") or {}
    problems = []
    if options.get("type", "") not in ALLOWED_SELINUX_TYPES:
        problems.append(f"{where}: seLinuxOptions.type {options['type']!r} is not allowed")
    for field in ("user", "role"):
        if options.get(field):
            problems.append(f"{where}: seLinuxOptions.{field} must not be set")
    return problems
