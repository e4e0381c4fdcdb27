"""The runner Pod of one attempt of a TerraformRun (docs/architecture.md §6.3), built as a pure function.

Every runner pod meets the Kubernetes "restricted" Pod Security profile and has a read-only root
filesystem: UID/GID 65532, seccomp RuntimeDefault, no capabilities, no privilege escalation, and emptyDirs
only where the runner writes (TMPDIR, HOME, the work dir, the tool dir). overrideRunnerSpec has no
security-context field, so no layer or repository can loosen it, and its volumes are of the sources the profile
allows (api/runner_contract.py), whatever the namespace enforces; its env, volumes and volumeMounts merge over
ours by name (a layer may, say, put the tool dir on a persistent volume, or point TENV_ROOT elsewhere), except
what api/runner_contract.py reserves (the runner's identity, datastore and mirrors, its token, its scratch
volumes): the API refuses such an entry, and an object stored before that rule has it left out here.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.run import pod_name
from burrito_py.api.runner_contract import (
    SCRATCH_VOLUMES,
    TOKEN_DIR,
    TOKEN_VOLUME,
    reserved_overrides,
    without_reserved,
)
from burrito_py.api.runner_secrets import account_refusal, refusal, secret_references
from burrito_py.controllers.run.leases import layer_lease_name
from burrito_py.kube.conditions import Cond

TOKEN_AUDIENCE = "burrito-py"  # noqa: S105
SECRET_VARIABLES_ENV = "BURRITO_RUNNER_SECRET_VARIABLES"  # noqa: S105 - names only (runner/main.py masks them)
# The runner writes why it failed here; the kubelet reports it as the container's termination message.
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
RUNNER_UID = 65532
# Writable directories (volume name → mount path); everything else is the image's read-only filesystem.
TMP_DIR, HOME_DIR, WORK_DIR, TOOLS_DIR = (SCRATCH_VOLUMES[n] for n in ("tmp", "home", "work", "tools"))
# The runner works in BURRITO_RUNNER_WORK_DIR, other temporary files follow TMPDIR; tenv installs under TENV_ROOT.
SCRATCH_ENV: tuple[tuple[str, str], ...] = (
    ("HOME", HOME_DIR),
    ("TMPDIR", TMP_DIR),
    ("BURRITO_RUNNER_WORK_DIR", WORK_DIR),
    ("TENV_ROOT", TOOLS_DIR),
    ("CHECKPOINT_DISABLE", "1"),
    ("TF_IN_AUTOMATION", "1"),
    ("TF_INPUT", "0"),
)
POD_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNNER_UID,
    "runAsGroup": RUNNER_UID,
    "fsGroup": RUNNER_UID,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY_CONTEXT: dict[str, Any] = {
    "runAsNonRoot": True,
    "runAsUser": RUNNER_UID,
    "runAsGroup": RUNNER_UID,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "privileged": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


@dataclass(frozen=True, slots=True)
class RunnerDefaults:
    image: str
    service_account: str
    datastore_url: str
    command: tuple[str, ...] = ("burrito-py", "runner", "start")
    token_expiration_seconds: int = 3600
    termination_grace_period_seconds: int = 120
    # activeDeadlineSeconds of a plan's pod, and of every other action's; 0: none.
    plan_timeout_seconds: int = 0
    apply_timeout_seconds: int = 0
    # The datastore's provider and tool mirrors (issue 16, runner/mirror.py); empty: none.
    provider_mirror_url: str = ""
    provider_mirror_fail_closed: bool = False
    provider_mirror_registries: tuple[str, ...] = ()
    tool_mirror_url: str = ""
    mirror_ca_pem: str = ""  # the CA of the datastore's HTTPS certificate: public, not a secret
    # Where runner pods may run (the platform's; `placement`): an override narrows it, never widens it.
    node_selector: Mapping[str, str] = dataclasses.field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = dataclasses.field(default_factory=dict)


def placement(override: Mapping[str, Any],
              defaults: RunnerDefaults) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The pod's nodeSelector, tolerations and affinity (pure), and what of the override's was set aside, as
    (override field, what and why). The platform's node selector wins key by key (an override may add labels: that
    only narrows where the pod runs), the platform's tolerations come first, and the platform's affinity, when set,
    replaces the override's: a layer editor cannot move tenant code onto nodes the platform keeps it off (the
    controllers', say)."""
    spec: dict[str, Any] = {}
    ignored: list[tuple[str, str]] = []
    selector = dict(override.get("nodeSelector") or {})
    for key, value in defaults.node_selector.items():
        if key in selector and selector[key] != value:
            ignored.append(("nodeSelector", f"nodeSelector {key}: the platform's runner.nodeSelector says {value!r}"))
        selector[key] = value
    if selector:
        spec["nodeSelector"] = selector
    tolerations = [*map(dict, defaults.tolerations), *(override.get("tolerations") or [])]
    if tolerations:
        spec["tolerations"] = tolerations
    if defaults.affinity:
        spec["affinity"] = copy.deepcopy(dict(defaults.affinity))
        if override.get("affinity"):
            ignored.append(("affinity", "affinity: the platform's runner.affinity is used"))
    elif override.get("affinity"):
        spec["affinity"] = override["affinity"]
    return spec, ignored


def mirror_env(defaults: RunnerDefaults) -> list[dict[str, str]]:
    """What the runner needs to use the datastore's mirrors: nothing when none is configured."""
    env: list[dict[str, str]] = []
    if defaults.provider_mirror_url:
        env += [
            {"name": "BURRITO_PROVIDER_MIRROR_URL", "value": defaults.provider_mirror_url},
            {"name": "BURRITO_PROVIDER_MIRROR_FAIL_CLOSED",
             "value": "true" if defaults.provider_mirror_fail_closed else "false"},
            {"name": "BURRITO_PROVIDER_MIRROR_REGISTRIES", "value": ",".join(defaults.provider_mirror_registries)},
        ]
    if defaults.tool_mirror_url:
        env.append({"name": "BURRITO_TOOL_MIRROR_URL", "value": defaults.tool_mirror_url})
    if env and defaults.mirror_ca_pem:
        env.append({"name": "BURRITO_MIRROR_CA_PEM", "value": defaults.mirror_ca_pem})
    return env


def _merge_by_name(base: Sequence[Mapping[str, Any]], extra: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Lists keyed by `name` (env, volumes, volumeMounts): entries from `extra` replace same-named ones."""
    merged = {str(item.get("name")): dict(item) for item in base}
    for item in extra:
        merged[str(item.get("name"))] = dict(item)
    return list(merged.values())


def _secret_volume(volume: Mapping[str, Any]) -> bool:
    """A volume that brings Secret data (or a token, or a CSI driver's, e.g. a secrets store) into the pod."""
    if volume.get("secret") or volume.get("csi") or volume.get("ephemeral") or volume.get("persistentVolumeClaim"):
        return True
    sources = (volume.get("projected") or {}).get("sources") or ()
    return any(src.get("secret") or src.get("serviceAccountToken") for src in sources)


def without_secret_sources(override: Mapping[str, Any]) -> dict[str, Any]:
    """An overrideRunnerSpec for a pull request's plan that inherits no secret (issue 24, P2; §11.3): no env
    entry whose value comes from a Secret, no `envFrom` Secret, no volume bringing Secret data, a token, a CSI
    or persistent volume (and no mount of one), and never its `serviceAccountName` (the pull request's own
    account is used). The rest (image, resources, plain env, ConfigMaps, scheduling) is kept. Pure."""
    kept = {k: v for k, v in override.items() if k != "serviceAccountName"}
    if "env" in kept:
        kept["env"] = [e for e in kept["env"] or () if not ((e.get("valueFrom") or {}).get("secretKeyRef"))]
    if "envFrom" in kept:
        kept["envFrom"] = [e for e in kept["envFrom"] or () if not e.get("secretRef")]
    if "volumes" in kept:
        dropped = {str(v.get("name")) for v in kept["volumes"] or () if _secret_volume(v)}
        kept["volumes"] = [v for v in kept["volumes"] or () if str(v.get("name")) not in dropped]
        if "volumeMounts" in kept:
            kept["volumeMounts"] = [m for m in kept["volumeMounts"] or () if str(m.get("name")) not in dropped]
    return kept


def _origin(key: str, layer: Mapping[str, Any], repository: Mapping[str, Any] | None) -> str:
    """The object a list of the effective override comes from: the layer's when it sets one, else the repository's."""
    mine = (layer.get("spec") or {}).get("overrideRunnerSpec") or {}
    owner, kind = (layer, "TerraformLayer") if mine.get(key) else (repository or {}, "TerraformRepository")
    meta = owner.get("metadata") or {}
    return f"{kind} {meta.get('namespace')}/{meta.get('name')} spec.overrideRunnerSpec"


def secret_names(override: Mapping[str, Any]) -> list[str]:
    """The Secrets the pod would get from `override` (the effective one), once each: what to read first."""
    return list(dict.fromkeys(name for _, name in secret_references(override)))


def closed_secrets(override: Mapping[str, Any], layer: Mapping[str, Any], repository: Mapping[str, Any] | None,
                   namespace: str, secrets: Mapping[str, Mapping[str, Any] | None]) -> list[str]:
    """Why the pod may not get the Secrets `override` names (api/runner_secrets.py), each naming the field and
    the object it comes from; empty when it may. `secrets`: each name's Secret as read (None: absent). Pure."""
    found = []
    for field, name in secret_references(override, ""):
        key = field.lstrip(".").split("[", 1)[0]
        why = refusal(namespace, name, _origin(key, layer, repository) + field, secrets.get(name))
        if why is not None:
            found.append(why)
    return found


def other_account(override: Mapping[str, Any], default: str) -> str | None:
    """The ServiceAccount `override` asks the pod to run as, when it is not the platform's `default`."""
    name = override.get("serviceAccountName")
    return name if isinstance(name, str) and name and name != default else None


def closed_account(override: Mapping[str, Any], layer: Mapping[str, Any], repository: Mapping[str, Any] | None,
                   namespace: str, default: str, account: Mapping[str, Any] | None) -> str | None:
    """Why the pod may not run as the account `override` names (api/runner_secrets.py), naming the field and the
    object it comes from; None when it may (the platform's own account needs no mark). `account`: as read. Pure."""
    name = other_account(override, default)
    if name is None:
        return None
    where = _origin("serviceAccountName", layer, repository) + ".serviceAccountName"
    return account_refusal(namespace, name, where, account)


IGNORED_CONDITION = "RunnerOverridesIgnored"
IGNORED_EVENT = "RunnerOverrideIgnored"


def ignored_overrides(
    override: Mapping[str, Any], layer: Mapping[str, Any], repository: Mapping[str, Any] | None,
    defaults: RunnerDefaults | None = None,
) -> list[str]:
    """What `build_runner_pod` leaves out of `override` (the effective one, as the run controller passes it), each
    named with the object it came from: a list is the layer's when the layer sets it, else the repository's. With
    `defaults`, also what the platform's placement sets aside (`placement`)."""
    found = []
    for entry in reserved_overrides(override):
        key = entry.field.split("[", 1)[0]
        found.append(f"{_origin(key, layer, repository)}.{key}: {entry.reason}")
    if defaults is not None:
        found += [f"{_origin(key, layer, repository)}.{why}" for key, why in placement(override, defaults)[1]]
    return found


def ignored_condition(attempts: Sequence[Mapping[str, Any]]) -> Cond | None:
    """`RunnerOverridesIgnored=True` while the latest attempt's pod left out reserved overrides (its status entry's
    `ignoredOverrides`, recorded when the pod was made); nothing otherwise."""
    ignored = list((attempts[-1] if attempts else {}).get("ignoredOverrides") or ())
    if not ignored:
        return None
    return Cond(IGNORED_CONDITION, True, "ReservedByBurritoPy",
                "the runner pod got burrito-py's own values instead of: " + "; ".join(ignored))


def build_runner_pod(
    run: Mapping[str, Any],
    layer: Mapping[str, Any],
    attempt: int,
    defaults: RunnerDefaults,
    override: Mapping[str, Any] | None = None,
    secret_variables: Sequence[str] = (),
) -> dict[str, Any]:
    """`override` is the effective overrideRunnerSpec (camelCase, as in the CRD). What it may not set
    (`runner_contract.reserved_overrides`: the caller reports it) is left out, so the platform's values win.
    `secret_variables`: the variables it feeds from a Secret through the environment, which the runner masks."""
    override = without_reserved(override or {})
    run_meta, layer_meta = run["metadata"], layer["metadata"]
    run_name, namespace = run_meta["name"], run_meta["namespace"]
    layer_name = layer_meta["name"]
    meta_override = override.get("metadata") or {}

    env = [
        {"name": "BURRITO_RUNNER_RUN", "value": run_name},
        {"name": "BURRITO_RUNNER_LAYER_NAME", "value": layer_name},
        {"name": "BURRITO_RUNNER_LAYER_NAMESPACE", "value": layer_meta["namespace"]},
        {"name": "BURRITO_RUNNER_ACTION", "value": run["spec"]["action"]},
        {"name": "BURRITO_RUNNER_ATTEMPT", "value": str(attempt)},
        {"name": "BURRITO_DATASTORE_URL", "value": defaults.datastore_url},
        *({"name": name, "value": value} for name, value in SCRATCH_ENV),
        # The runner stops terraform (SIGINT) within the pod's grace period, before the kubelet's SIGKILL.
        {"name": "BURRITO_RUNNER_GRACE_SECONDS", "value": str(defaults.termination_grace_period_seconds)},
        *mirror_env(defaults),
        *([{"name": SECRET_VARIABLES_ENV, "value": ",".join(secret_variables)}] if secret_variables else []),
    ]
    token_volume = {
        "name": TOKEN_VOLUME,
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": TOKEN_AUDIENCE,
                        "expirationSeconds": defaults.token_expiration_seconds,
                        "path": "token",
                    }
                }
            ]
        },
    }
    container: dict[str, Any] = {
        "name": "runner",
        "image": override.get("image") or defaults.image,
        "command": list(defaults.command),
        "env": _merge_by_name(env, override.get("env") or []),
        "volumeMounts": _merge_by_name(
            [
                {"name": TOKEN_VOLUME, "mountPath": TOKEN_DIR, "readOnly": True},
                *({"name": name, "mountPath": mount} for name, mount in SCRATCH_VOLUMES.items()),
            ],
            override.get("volumeMounts") or [],
        ),
        "terminationMessagePath": TERMINATION_MESSAGE_PATH,
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": copy.deepcopy(CONTAINER_SECURITY_CONTEXT),
    }
    for key in ("envFrom", "resources", "imagePullPolicy"):
        if override.get(key):
            container[key] = override[key]

    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": override.get("serviceAccountName") or defaults.service_account,
        "containers": [container],
        "volumes": _merge_by_name(
            [token_volume, *({"name": name, "emptyDir": {}} for name in SCRATCH_VOLUMES)], override.get("volumes") or []
        ),
        "securityContext": copy.deepcopy(POD_SECURITY_CONTEXT),
        "terminationGracePeriodSeconds": defaults.termination_grace_period_seconds,
    }
    spec.update(placement(override, defaults)[0])
    # The kubelet stops a pod that runs longer (SIGTERM, then the grace period): a hung Terraform never holds its
    # layer's Lease for good (§6.1). Not an override: a tenant's layer may not run longer than the platform allows.
    timeout = defaults.plan_timeout_seconds if run["spec"]["action"] == "plan" else defaults.apply_timeout_seconds
    if timeout > 0:
        spec["activeDeadlineSeconds"] = timeout

    labels = {
        **(meta_override.get("labels") or {}),
        ann.LABEL_COMPONENT: ann.COMPONENT_RUNNER,
        ann.LABEL_RUN: run_name,
        ann.LABEL_LAYER: ann.layer_label(layer_name),
        # The state it runs Terraform on: another run of that Lease waits until this pod is gone (§7).
        ann.LABEL_LEASE: layer_lease_name(layer, run),
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(run_name, attempt),
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(meta_override.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": run.get("apiVersion", ann.API_VERSION),
                    "kind": "TerraformRun",
                    "name": run_name,
                    "uid": run_meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": spec,
    }
