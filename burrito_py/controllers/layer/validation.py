"""Checks a layer against what a schema cannot say (its repository exists and may be used, its branch
resolves), and the settings it inherits (layer → repository → controller default). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from burrito_py.api.sharing import shared_with
from burrito_py.controllers.settings import ControllerSettings
from burrito_py.git.urls import is_file_url, url_policy_problem
from burrito_py.kube.conditions import Cond
from burrito_py.plans.versions import InvalidVersionConstraint, parse_constraint


@dataclass(frozen=True, slots=True)
class LayerValidation:
    ready: Cond
    # Effective approvePlan is auto: `spec.approvePlan`, else `remediationStrategy.autoApply` (inherited).
    auto_apply: bool
    runs_to_keep: int
    max_retries: int
    destroy_on_deletion: bool = False
    # Effective remediationStrategy.drift (inherited): detect | auto | autoIfPolicyPasses.
    drift_remediation: str = "detect"
    # Effective state.managed (inherited): what the spec says of where the state lives (§10.6).
    state_managed: bool = False


def inherited(layer: Mapping[str, Any], repository: Mapping[str, Any] | None, *path: str) -> Any:
    """The first value set along `path` in the layer's spec, then the repository's; None if neither."""
    for obj in (layer, repository or {}):
        node: Any = obj.get("spec") or {}
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None:
            return node
    return None


def _invalid_version(layer: Mapping[str, Any], repository: Mapping[str, Any] | None) -> str | None:
    for owner, obj in (("spec", layer), ("repository spec", repository or {})):
        spec = obj.get("spec") or {}
        switches = [(spec.get(tool) or {}).get("enabled") for tool in ("terraform", "opentofu")]
        if switches == [True, True]:
            # Which engine was meant is unknown: nothing runs rather than the wrong one.
            return (f"{owner}.terraform.enabled and {owner}.opentofu.enabled are both true: the engine is unknown; "
                    "enable one of them")
        if any(switch is not None for switch in switches):
            break  # the nearest level that switches an engine decides (api/effective.py)
    for tool in ("terraform", "opentofu", "terragrunt"):
        for owner, obj in (("spec", layer), ("repository spec", repository or {})):
            version = ((obj.get("spec") or {}).get(tool) or {}).get("version")
            if not version:
                continue
            try:
                parse_constraint(str(version))
            except InvalidVersionConstraint as exc:
                return f"{owner}.{tool}.version: {exc}"
    return None


def _branch_problem(repository: Mapping[str, Any], branch: str) -> str | None:
    for entry in (repository.get("status") or {}).get("branches") or ():
        if entry.get("name") == branch:
            status = str(entry.get("lastSyncStatus") or "")
            return status if status and status != "Synced" else None
    return None


def cross_namespace_problem(layer: Mapping[str, Any], settings: ControllerSettings,
                            repository: Mapping[str, Any] | None) -> str | None:
    """Why the layer may not use the repository it names in another namespace, else None. A repository in
    another namespace would hand this namespace's runners that namespace's sources (and its git credentials'
    reach), so it takes the operator's consent (`allow_cross_namespace_repositories`) and its owners' (the
    repository's `spec.allowedNamespaces` names the layer's namespace; `shared_with`). A repository not found
    (None) is its own refusal, said elsewhere."""
    own = layer["metadata"]["namespace"]
    reference = (layer.get("spec") or {}).get("repository") or {}
    other = reference.get("namespace")
    if not other or other == own:
        return None
    if not settings.allow_cross_namespace_repositories:
        return (
            f"spec.repository.namespace: {other!r} is not the layer's namespace {own!r}; repositories of other "
            "namespaces are disabled on these controllers (BURRITO_PY_ALLOW_CROSS_NAMESPACE_REPOSITORIES)"
        )
    if repository is not None and not shared_with(repository, own):
        return _not_shared(layer)
    return None


def _not_shared(layer: Mapping[str, Any]) -> str:
    reference = (layer.get("spec") or {}).get("repository") or {}
    return (
        f"spec.repository: TerraformRepository {reference.get('namespace')}/{reference.get('name')} is not shared "
        f"with namespace {layer['metadata']['namespace']!r}: its spec.allowedNamespaces must name it (or '*')"
    )


def repository_refusal(
    layer: Mapping[str, Any], repository: Mapping[str, Any] | None, settings: ControllerSettings
) -> Cond | None:
    """The Ready=False condition of a layer whose repository reference the isolation settings refuse."""
    cross = cross_namespace_problem(layer, settings, repository)
    if cross:
        return Cond("Ready", False, "CrossNamespaceRepository", cross)
    if repository is not None:
        url = str(((repository.get("spec") or {}).get("repository") or {}).get("url") or "")
        # Only the policy here: an invalid URL is the repository's own failure (its Synced condition).
        problem = url_policy_problem(url, settings.allow_file_repositories) if is_file_url(url) else None
        if problem:
            meta = repository.get("metadata") or {}
            return Cond(
                "Ready",
                False,
                "RepositoryNotAllowed",
                f"spec.repository: TerraformRepository {meta.get('namespace')}/{meta.get('name')}: {problem}",
            )
    return None


def validate_layer(
    layer: Mapping[str, Any], repository: Mapping[str, Any] | None, settings: ControllerSettings
) -> LayerValidation:
    spec = layer.get("spec") or {}
    ref = spec.get("repository") or {}
    namespace = ref.get("namespace") or layer["metadata"]["namespace"]
    ready = Cond("Ready", True, "Ready", "")
    invalid = _invalid_version(layer, repository)
    refusal = repository_refusal(layer, repository, settings)
    outside = settings.scope().foreign_repository(namespace) if repository is None else None
    if refusal is None and repository is None and not outside and namespace != layer["metadata"]["namespace"]:
        # Another namespace's repository that does not exist reads exactly as one not shared with this namespace:
        # a tenant never learns which names exist there. (A run is not refused for it: its repository may only be
        # missing from the controllers' cache for now; nothing runs without it anyway.)
        refusal = Cond("Ready", False, "CrossNamespaceRepository", _not_shared(layer))
    if refusal is not None:  # before RepositoryNotFound: never tell another namespace's objects apart
        ready = refusal
    elif invalid:
        ready = Cond("Ready", False, "InvalidSpec", invalid)
    elif repository is None:
        # Shards see only their own namespaces: a repository elsewhere is not found, and the message says why.
        ready = Cond(
            "Ready",
            False,
            "RepositoryNotFound",
            f"spec.repository: TerraformRepository {namespace}/{ref.get('name')} "
            + (f"is not visible: {outside}" if outside else "does not exist"),
        )
    else:
        problem = _branch_problem(repository, spec.get("branch", ""))
        if problem:
            ready = Cond(
                "Ready", False, "BranchNotFound" if "not exist" in problem else "SyncFailed", f"spec.branch: {problem}"
            )
    approve_plan = spec.get("approvePlan")
    auto_apply = (
        approve_plan == "auto"
        if approve_plan is not None
        else inherited(layer, repository, "remediationStrategy", "autoApply")
    )
    max_retries = inherited(layer, repository, "remediationStrategy", "onError", "maxRetries")
    runs = inherited(layer, repository, "runHistoryPolicy", "runs")
    drift = inherited(layer, repository, "remediationStrategy", "drift")
    return LayerValidation(
        ready=ready,
        auto_apply=bool(auto_apply),
        drift_remediation=str(drift or "detect"),
        runs_to_keep=int(runs) if runs is not None else settings.runs_to_keep,
        max_retries=int(max_retries) if max_retries is not None else settings.max_retries,
        destroy_on_deletion=bool(spec.get("destroyResourcesOnDeletion")),
        state_managed=bool(inherited(layer, repository, "state", "managed")),
    )
