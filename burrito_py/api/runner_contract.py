"""What burrito-py gives every runner pod and no `overrideRunnerSpec` may replace (docs/architecture.md §6.3).

One list, read by three checks that must agree: the API models (`OverrideRunnerSpec`: `burrito-py validate` and
the layer controller's reading), the CRDs' CEL rules (`cel_*` below, so kube-apiserver refuses such an object with
422), and the pod builder (`controllers/run/runner_pod.py`), which leaves out what an object stored before these
rules still asks for, so the platform's values always win. Pure; no Kubernetes client here.

Reserved: the runner's identity and contract with the controllers, where it sends its pod-bound token, the
platform's provider and tool mirrors (a supply-chain control, §10.5), the token's volume and directory, and the
scratch directories of the read-only root (§18). Not reserved, on purpose: `TENV_ROOT`, `BURRITO_RUNNER_TOOLS_PATH`,
`HOME`, `TMPDIR`, `BURRITO_RUNNER_WORK_DIR` (a layer may point the runner's writes or its tools elsewhere), and
the `tools` volume's source (a layer may keep its tools on a persistent volume).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

__all__ = [
    "MOUNT_PATH_PATTERN",
    "OTHER_VOLUME_SOURCES",
    "RESERVED_ENV",
    "RESERVED_MOUNTS",
    "RESTRICTED_VOLUME_SOURCES",
    "SCRATCH_VOLUMES",
    "TOKEN_DIR",
    "TOKEN_VOLUME",
    "VOLUME_SOURCES",
    "ReservedOverride",
    "cel_env_rule",
    "cel_mount_rules",
    "cel_volume_rules",
    "env_problem",
    "mount_problem",
    "reserved_overrides",
    "stored_without_reserved",
    "volume_problem",
    "without_reserved",
]

TOKEN_DIR = "/var/run/secrets/burrito-py"  # noqa: S105 - a path, not a secret
TOKEN_VOLUME = "burrito-py-token"  # noqa: S105 - a volume name
# Writable directories of the read-only root (volume name → mount path), each named by a variable (§18).
SCRATCH_VOLUMES: dict[str, str] = {"tmp": "/tmp", "home": "/home/burrito", "work": "/runner/work",
                                   "tools": "/runner/tools"}

_IDENTITY = "the runner's identity and contract with the controllers"
_MIRROR = "the platform's provider and tool mirrors, a supply-chain control (docs/architecture.md §10.5)"
RESERVED_ENV: dict[str, str] = {
    "BURRITO_RUNNER_RUN": _IDENTITY,
    "BURRITO_RUNNER_LAYER_NAME": _IDENTITY,
    "BURRITO_RUNNER_LAYER_NAMESPACE": _IDENTITY,
    "BURRITO_RUNNER_ACTION": _IDENTITY,
    "BURRITO_RUNNER_ATTEMPT": _IDENTITY,
    "BURRITO_RUNNER_GRACE_SECONDS": "the runner's contract with the pod's grace period",
    "BURRITO_RUNNER_SECRET_VARIABLES": "the variables whose values the runner masks in its log",
    "BURRITO_DATASTORE_URL": "where the runner sends its pod-bound token",
    "BURRITO_PROVIDER_MIRROR_URL": _MIRROR,
    "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED": _MIRROR,
    "BURRITO_PROVIDER_MIRROR_REGISTRIES": _MIRROR,
    "BURRITO_TOOL_MIRROR_URL": _MIRROR,
    "BURRITO_MIRROR_CA_PEM": _MIRROR,
}
# Volume name → the sources an override may give it instead (none: the volume is the platform's alone). `tmp`,
# `home` and `work` hold the attempt's credentials and secret inputs: only an emptyDir, which dies with the pod
# (its size or medium may change). `tools` may also live on a claim (§18).
VOLUME_SOURCES: dict[str, tuple[str, ...]] = {
    TOKEN_VOLUME: (),
    "tmp": ("emptyDir",),
    "home": ("emptyDir",),
    "work": ("emptyDir",),
    "tools": ("emptyDir", "persistentVolumeClaim", "ephemeral"),
}
# The volume sources the "restricted" Pod Security profile allows. Runner pods meet it whatever their namespace
# enforces (a tenant namespace need not be labelled): a hostPath of the node's /proc, say, would show the
# processes, environments and root filesystems of other tenants' runners, which run as the same uid.
RESTRICTED_VOLUME_SOURCES = ("configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                             "projected", "secret")
# Kubernetes' other sources, declared so that the CRDs' CEL rules (which see only declared fields) refuse them too;
# the Python check refuses any source not allowed, named here or not.
OTHER_VOLUME_SOURCES = ("hostPath", "gitRepo", "nfs", "iscsi", "glusterfs", "rbd", "cephfs", "cinder", "fc",
                        "flexVolume", "flocker", "azureFile", "azureDisk", "vsphereVolume", "quobyte",
                        "photonPersistentDisk", "portworxVolume", "scaleIO", "storageos", "gcePersistentDisk",
                        "awsElasticBlockStore", "image")
# Mounts of the platform's volumes (their paths are the contract); an override may not move them.
RESERVED_MOUNTS: dict[str, str] = {TOKEN_VOLUME: TOKEN_DIR, **SCRATCH_VOLUMES}
# The token directory in any spelling (`//`, `/./`, a trailing `/`), and through /run: /var/run is a symlink to
# /run in the runner image (Debian). A mountPath with a `..` segment is refused outright, so that this pattern
# (RE2: the same in Python, pydantic's Rust and kube-apiserver's CEL) is exact.
# `[.]`, never `\.`: the pattern goes into a CEL string literal, where `\.` is not an escape.
_SEP = "/([.]/|/)*"
MOUNT_PATH_PATTERN = "^([.]?/)*(var" + _SEP + ")?run" + _SEP + "secrets" + _SEP + "burrito-py(/.*)?$"
_BACKSTEP_PATTERN = "(^|/)[.][.](/|$)"


class ReservedOverride(NamedTuple):
    """One entry an override may not set: `field` is relative to `overrideRunnerSpec`, e.g. `env[2]`."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


def env_problem(item: Mapping[str, Any]) -> str | None:
    name = item.get("name")
    if isinstance(name, str) and name in RESERVED_ENV:
        return f"{name} is set by burrito-py for every runner ({RESERVED_ENV[name]}); an override may not replace it"
    return None


def volume_problem(item: Mapping[str, Any]) -> str | None:
    name = item.get("name")
    other = next((key for key in item if key != "name" and key not in RESTRICTED_VOLUME_SOURCES), None)
    if other is not None:
        return (f"volume source {other} is not one runner pods may use: they meet the restricted Pod Security "
                f"profile (docs/architecture.md §6.3), which allows only {_or(RESTRICTED_VOLUME_SOURCES)}")
    if not isinstance(name, str) or name not in VOLUME_SOURCES:
        return None
    allowed = VOLUME_SOURCES[name]
    if not allowed:
        return f"volume {name} is burrito-py's (the runner's datastore token); an override may not replace it"
    if any(source in item for source in allowed):
        return None
    return (f"volume {name} is a runner scratch directory ({SCRATCH_VOLUMES[name]}, docs/architecture.md §18): an "
            f"override may replace it only by {_or(allowed)}")


def mount_problem(item: Mapping[str, Any]) -> str | None:
    name, mount_path = item.get("name"), item.get("mountPath")
    if isinstance(name, str) and name in RESERVED_MOUNTS:
        return (f"volumeMount {name} is burrito-py's, at {RESERVED_MOUNTS[name]} (the runner's contract, "
                "docs/architecture.md §6.3); an override may not move or replace it")
    if isinstance(mount_path, str):
        if re.search(_BACKSTEP_PATTERN, mount_path):
            return f"mountPath {mount_path!r} has a '..' segment"
        if re.search(MOUNT_PATH_PATTERN, mount_path):
            return (f"mountPath {mount_path!r} is or is under {TOKEN_DIR}, the runner's token directory; an "
                    "override may not mount there")
    return None


_CHECKS = (("env", env_problem), ("volumes", volume_problem), ("volumeMounts", mount_problem))


def reserved_overrides(override: Mapping[str, Any]) -> list[ReservedOverride]:
    """Every entry of an overrideRunnerSpec (camelCase, as in the CRD) that sets what the platform reserves."""
    found: list[ReservedOverride] = []
    for key, problem in _CHECKS:
        for index, item in enumerate(override.get(key) or ()):
            why = problem(item) if isinstance(item, Mapping) else None
            if why is not None:
                found.append(ReservedOverride(f"{key}[{index}]", why))
    return found


def without_reserved(override: Mapping[str, Any]) -> dict[str, Any]:
    """The override without those entries (the pod builder's: the platform's values win). Pure."""
    kept = dict(override)
    for key, problem in _CHECKS:
        if key in kept:
            kept[key] = [i for i in kept[key] or () if not (isinstance(i, Mapping) and problem(i) is not None)]
    # A volume left out takes its mounts with it (the pod would name a volume it has not), unless the name is one of
    # the platform's, whose own volume stays.
    dropped = {str(i.get("name")) for i in override.get("volumes") or ()
               if isinstance(i, Mapping) and volume_problem(i) is not None} - set(VOLUME_SOURCES)
    if dropped and "volumeMounts" in kept:
        kept["volumeMounts"] = [m for m in kept["volumeMounts"] if str(m.get("name")) not in dropped]
    return kept


def stored_without_reserved(body: Mapping[str, Any]) -> dict[str, Any]:
    """A stored TerraformLayer or TerraformRepository as its runner reads it: an object written before the API
    refused reserved overrides still parses (its pod never got them), rather than failing every attempt."""
    spec = body.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(spec.get("overrideRunnerSpec"), Mapping):
        return dict(body)
    return {**body, "spec": {**spec, "overrideRunnerSpec": without_reserved(spec["overrideRunnerSpec"])}}


def _or(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _cel_list(names: Sequence[str]) -> str:
    return "[" + ", ".join(f"'{n}'" for n in names) + "]"


# -- the same rules as CEL (x-kubernetes-validations on one list item: kube-apiserver's 422 names `env[2]`) ------
def cel_env_rule() -> dict[str, str]:
    return {"rule": f"!has(self.name) || !(self.name in {_cel_list(list(RESERVED_ENV))})",
            "message": f"env may not set {', '.join(RESERVED_ENV)}: burrito-py sets them for every runner (its "
                       "identity, its datastore, the platform's provider and tool mirrors; docs/architecture.md "
                       "§6.3)"}


def cel_volume_rules() -> list[dict[str, str]]:
    rules = [{"rule": " && ".join(f"!has(self.{source})" for source in OTHER_VOLUME_SOURCES),
              "message": "a volume may use only " + _or(RESTRICTED_VOLUME_SOURCES) + ": runner pods meet the "
                         "restricted Pod Security profile (docs/architecture.md §6.3)"}]
    for name, allowed in VOLUME_SOURCES.items():
        if not allowed:
            rules.append({"rule": f"!has(self.name) || self.name != '{name}'",
                          "message": f"volume {name} is burrito-py's (the runner's datastore token); an override may "
                                     "not replace it"})
        else:
            rules.append({"rule": f"!has(self.name) || self.name != '{name}' || "
                                  + " || ".join(f"has(self.{s})" for s in allowed),
                          "message": f"volume {name} is a runner scratch directory ({SCRATCH_VOLUMES[name]}, "
                                     f"docs/architecture.md §18): an override may replace it only by {_or(allowed)}"})
    return rules


def cel_mount_rules() -> list[dict[str, str]]:
    return [
        {"rule": f"!has(self.name) || !(self.name in {_cel_list(list(RESERVED_MOUNTS))})",
         "message": f"volumeMounts {', '.join(RESERVED_MOUNTS)} are burrito-py's (the runner's contract, "
                    "docs/architecture.md §6.3); an override may not move or replace them"},
        {"rule": f"!has(self.mountPath) || !self.mountPath.matches('{_BACKSTEP_PATTERN}')",
         "message": "a mountPath may not have a '..' segment"},
        {"rule": f"!has(self.mountPath) || !self.mountPath.matches('{MOUNT_PATH_PATTERN}')",
         "message": f"a mountPath may not be {TOKEN_DIR} (the runner's token directory) or under it"},
    ]
