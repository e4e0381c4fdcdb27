"""The settings a layer actually runs with: its own, else its repository's, else the defaults (pure).

The CRDs leave inherited fields unset (no schema default) so that "unset" stays distinguishable from
"set to the default"; these functions are the one place that resolves them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar

if TYPE_CHECKING:  # the models import pydantic: the runner resolves its own reading of them (runner/objects.py)
    from burrito_py.api.common import DriftRemediation, OverrideRunnerSpec, RunnerMetadata
    from burrito_py.api.layer import TerraformLayer
    from burrito_py.api.repository import TerraformRepository

__all__ = [
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_RUNS_TO_KEEP",
    "EffectiveRemediation",
    "EffectiveTool",
    "Settings",
    "SettingsSpec",
    "ToolSettings",
    "ToolVersion",
    "effective_extra_args",
    "effective_managed_state",
    "effective_override_runner_spec",
    "effective_remediation",
    "effective_runs_to_keep",
    "effective_state_location",
    "effective_tool",
    "state_location",
]

DEFAULT_MAX_RETRIES = 3
DEFAULT_RUNS_TO_KEEP = 5

T = TypeVar("T")


# What these functions read, as protocols: the models (TerraformLayer, TerraformRepository) and the runner's plain
# reading of the same fields (runner/objects.py) both fit, so the rules below are the one place for both.
class ToolSettings(Protocol):
    @property
    def version(self) -> str | None: ...
    @property
    def enabled(self) -> bool | None: ...


class _OnError(Protocol):
    @property
    def max_retries(self) -> int | None: ...


class _Remediation(Protocol):
    @property
    def auto_apply(self) -> bool | None: ...
    @property
    def apply_without_plan_artifact(self) -> bool | None: ...
    @property
    def on_error(self) -> _OnError | None: ...
    @property
    def drift(self) -> DriftRemediation | None: ...


class _State(Protocol):
    @property
    def managed(self) -> bool | None: ...


class _ExtraArgs(Protocol):
    @property
    def extra_init_args(self) -> Sequence[str]: ...
    @property
    def extra_plan_args(self) -> Sequence[str]: ...
    @property
    def extra_apply_args(self) -> Sequence[str]: ...


class SettingsSpec(Protocol):
    """The inherited settings of a layer's or a repository's spec."""

    @property
    def terraform(self) -> ToolSettings | None: ...
    @property
    def opentofu(self) -> ToolSettings | None: ...
    @property
    def terragrunt(self) -> ToolSettings | None: ...
    @property
    def remediation_strategy(self) -> _Remediation | None: ...
    @property
    def state(self) -> _State | None: ...
    @property
    def override_runner_spec(self) -> _ExtraArgs | None: ...


class Settings(Protocol):
    """A layer or a repository, as far as these rules read it."""

    @property
    def metadata(self) -> Mapping[str, Any]: ...
    @property
    def spec(self) -> SettingsSpec: ...


class ToolVersion(NamedTuple):
    """An enabled tool and the version asked for (None: what the code or a version file says)."""

    version: str | None
    enabled: bool | None = True


class EffectiveRemediation(NamedTuple):
    auto_apply: bool
    apply_without_plan_artifact: bool
    max_retries: int
    drift: DriftRemediation = "detect"


class EffectiveTool(NamedTuple):
    """`kind` is the one of terraform/opentofu that runs; `version` None means "what the code declares"
    (`required_version`); `terragrunt` is set only when terragrunt is effectively enabled."""

    kind: Literal["terraform", "opentofu"]
    version: str | None
    terragrunt: ToolSettings | None


def _first(*values: T | None) -> T | None:
    return next((v for v in values if v is not None), None)


def _remediations(layer: Settings, repository: Settings | None) -> list[_Remediation]:
    levels = [layer.spec.remediation_strategy, repository.spec.remediation_strategy if repository is not None else None]
    return [level for level in levels if level is not None]


def effective_remediation(
    layer: Settings, repository: Settings | None, default_max_retries: int = DEFAULT_MAX_RETRIES
) -> EffectiveRemediation:
    """Each field separately: the layer's, else the repository's, else false / false / `default_max_retries`."""
    levels = _remediations(layer, repository)
    auto_apply = _first(*(level.auto_apply for level in levels))
    without_artifact = _first(*(level.apply_without_plan_artifact for level in levels))
    max_retries = _first(*(level.on_error.max_retries for level in levels if level.on_error is not None))
    drift: DriftRemediation | None = next((level.drift for level in levels if level.drift is not None), None)
    return EffectiveRemediation(
        auto_apply=bool(auto_apply),
        apply_without_plan_artifact=bool(without_artifact),
        max_retries=default_max_retries if max_retries is None else max_retries,
        drift=drift if drift is not None else "detect",
    )


def effective_runs_to_keep(layer: TerraformLayer, repository: TerraformRepository | None) -> int:
    """`runHistoryPolicy.runs` of the layer, else of the repository, else 5."""
    levels = [layer.spec.run_history_policy, repository.spec.run_history_policy if repository is not None else None]
    runs = _first(*(level.runs for level in levels if level is not None))
    return DEFAULT_RUNS_TO_KEEP if runs is None else runs


def effective_managed_state(layer: Settings, repository: Settings | None) -> bool:
    """`state.managed` of the layer, else of the repository, else false (docs/architecture.md §10.6)."""
    levels = [layer.spec.state, repository.spec.state if repository is not None else None]
    return bool(_first(*(level.managed for level in levels if level is not None)))


StateLocation = Literal["managed", "code"]


def state_location(recorded: str | None, spec_managed: bool) -> StateLocation:
    """Where a layer's state lives (docs/architecture.md §10.6): where its last migrate-state run put it (the run
    controller's `runner.burrito-py.io/state-location`), else where the spec says (`state.managed`, inherited).

    The record wins over the spec: after a migration the other backend still holds the copy the migration left
    behind, and a run that followed a spec edit there would plan against a stale state (a split state). Only a
    migrate-state run moves a layer's state, and only its success changes the record."""
    if recorded == "managed":
        return "managed"
    if recorded == "code":
        return "code"
    return "managed" if spec_managed else "code"


def effective_state_location(layer: Settings, repository: Settings | None) -> StateLocation:
    from burrito_py.api.annotations import STATE_LOCATION

    recorded = (layer.metadata.get("annotations") or {}).get(STATE_LOCATION)
    return state_location(recorded, effective_managed_state(layer, repository))


def _enabled(spec: ToolSettings | None) -> bool | None:
    return spec.enabled if spec is not None else None


def _version(spec: ToolSettings | None) -> str | None:
    return spec.version if spec is not None else None


def effective_tool(layer: Settings, repository: Settings | None) -> EffectiveTool:
    """terraform or opentofu, decided by the nearest level (layer, then repository) that sets `enabled` on
    either: opentofu when its `opentofu.enabled` is true, terraform otherwise (and when no level decides).
    The version is the nearest one set for the chosen tool; terragrunt merges field by field."""
    levels: list[SettingsSpec] = [layer.spec] + ([repository.spec] if repository is not None else [])
    kind: Literal["terraform", "opentofu"] = "terraform"
    for spec in levels:
        if _enabled(spec.terraform) is not None or _enabled(spec.opentofu) is not None:
            kind = "opentofu" if _enabled(spec.opentofu) else "terraform"
            break
    version = _first(*(_version(spec.opentofu if kind == "opentofu" else spec.terraform) for spec in levels))
    terragrunt_enabled = _first(*(_enabled(spec.terragrunt) for spec in levels))
    terragrunt = None
    if terragrunt_enabled:
        terragrunt = ToolVersion(version=_first(*(_version(spec.terragrunt) for spec in levels)))
    return EffectiveTool(kind=kind, version=version, terragrunt=terragrunt)


def effective_extra_args(layer: Settings, repository: Settings | None) -> tuple[list[str], list[str], list[str]]:
    """extraInitArgs, extraPlanArgs and extraApplyArgs as `effective_override_runner_spec` merges them (a non-empty
    list of the layer replaces the repository's): what the runner reads of the overrides, without the model."""
    mine = layer.spec.override_runner_spec
    theirs = repository.spec.override_runner_spec if repository is not None else None

    def merged(name: str) -> list[str]:
        own: Sequence[str] = getattr(mine, name) if mine is not None else ()
        inherited: Sequence[str] = getattr(theirs, name) if theirs is not None else ()
        return list(own or inherited)

    return merged("extra_init_args"), merged("extra_plan_args"), merged("extra_apply_args")


def _merge_metadata(mine: RunnerMetadata | None, theirs: RunnerMetadata | None) -> RunnerMetadata | None:
    if mine is None or theirs is None:
        return mine or theirs
    from burrito_py.api.common import RunnerMetadata

    return RunnerMetadata(
        labels={**theirs.labels, **mine.labels}, annotations={**theirs.annotations, **mine.annotations}
    )


def effective_override_runner_spec(
    layer: TerraformLayer, repository: TerraformRepository | None
) -> OverrideRunnerSpec:
    """The layer's overrides over the repository's, field by field: a set scalar or object wins, a non-empty
    list or map replaces (lists are not concatenated: an env var set twice would be ambiguous), and
    `metadata` labels and annotations are merged key by key with the layer's winning."""
    from burrito_py.api.common import OverrideRunnerSpec

    mine = layer.spec.override_runner_spec or OverrideRunnerSpec()
    theirs = (repository.spec.override_runner_spec if repository is not None else None) or OverrideRunnerSpec()
    merged: dict[str, Any] = {}
    for name in OverrideRunnerSpec.model_fields:
        if name == "metadata":
            continue
        own, inherited = getattr(mine, name), getattr(theirs, name)
        if isinstance(own, list | dict):
            merged[name] = own if own else inherited
        else:
            merged[name] = own if own is not None else inherited
    merged["metadata"] = _merge_metadata(mine.metadata, theirs.metadata)
    return OverrideRunnerSpec.model_validate(merged)
