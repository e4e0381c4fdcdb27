"""TerraformLayer: one Terraform root module of a repository, kept planned and applied (DESIGN §3, §5)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from burrito_py.api.common import (
    AGE_COLUMN,
    ApiModel,
    Condition,
    ObjectReference,
    OverrideRunnerSpec,
    PrinterColumn,
    RemediationStrategy,
    Resource,
    RunAction,
    RunHistoryPolicy,
    ToolSpec,
    check_single_tool,
)
from burrito_py.api.errors import PATTERN_EXPLANATIONS

__all__ = [
    "LAYER_STATES",
    "RELATIVE_PATH_PATTERN",
    "LayerState",
    "PlanReference",
    "RelativePath",
    "RunReference",
    "TerraformLayer",
    "TerraformLayerSpec",
    "TerraformLayerStatus",
]

# One path component that is not `..`: `.`, `.x…`, `..x…`, or anything not starting with a dot.
_COMPONENT = r"(\.|\.[^/.][^/]*|\.\.[^/]+|[^./][^/]*)"
# A non-empty repository-relative path: no leading `/`, no `..` component, no empty component (`a//b`);
# `.` (the repository root) and a trailing `/` are allowed.
RELATIVE_PATH_PATTERN = rf"^{_COMPONENT}(/{_COMPONENT})*/?$"
PATTERN_EXPLANATIONS[RELATIVE_PATH_PATTERN] = (
    "must be a non-empty path relative to the repository root, without a leading '/', '..' components or "
    "empty components ('.' is the root)"
)
RelativePath = Annotated[str, StringConstraints(pattern=RELATIVE_PATH_PATTERN)]

LayerState = Literal["Idle", "PlanNeeded", "ApplyNeeded", "Running", "MaxRetriesReached"]
LAYER_STATES: tuple[LayerState, ...] = ("Idle", "PlanNeeded", "ApplyNeeded", "Running", "MaxRetriesReached")


class TerraformLayerSpec(ApiModel):
    """Which root module to manage and how. Unset tool, remediation, runner and history settings are
    inherited from the repository."""

    repository: ObjectReference = Field(description="The TerraformRepository holding the code.")
    branch: str = Field(min_length=1, description="Branch to track.")
    path: RelativePath = Field(description="Path of the root module, relative to the repository root ('.' is "
                               "the root).")
    terraform: ToolSpec | None = Field(
        default=None, description="Terraform version and switch. Unset: inherited from the repository."
    )
    opentofu: ToolSpec | None = Field(
        default=None,
        description="OpenTofu version and switch; exactly one of terraform/opentofu is effective. Unset: "
        "inherited from the repository.",
    )
    terragrunt: ToolSpec | None = Field(
        default=None, description="Terragrunt version and switch. Unset: inherited from the repository."
    )
    remediation_strategy: RemediationStrategy | None = Field(
        default=None, description="Remediation settings. Unset fields: inherited from the repository."
    )
    override_runner_spec: OverrideRunnerSpec | None = Field(
        default=None, description="Runner pod overrides, field by field over the repository's."
    )
    additional_trigger_paths: list[RelativePath] = Field(
        default_factory=list,
        description="Repository-relative paths whose changes also make a commit relevant to this layer.",
    )
    run_history_policy: RunHistoryPolicy | None = Field(
        default=None, description="How many runs to keep. Unset: inherited from the repository, else 5."
    )

    @model_validator(mode="after")
    def _one_tool(self) -> Self:
        check_single_tool(self.terraform, self.opentofu)
        return self


class RunReference(ApiModel):
    """A TerraformRun of this layer."""

    name: str = Field(description="Name of the TerraformRun.")
    action: RunAction = Field(description="plan or apply.")
    date: str | None = Field(default=None, description="When the run was created (RFC 3339 UTC).")
    revision: str | None = Field(default=None, description="Commit the run works on.")


class PlanReference(ApiModel):
    """The latest successful plan of this layer."""

    sum: str | None = Field(default=None, description="sha256:<hex> of the plan binary.")
    revision: str | None = Field(default=None, description="Commit that was planned.")
    date: str | None = Field(default=None, description="When the plan was made (RFC 3339 UTC).")
    run: str | None = Field(default=None, description="<run>/<attempt> holding the plan artifacts.")


class TerraformLayerStatus(ApiModel):
    """Observed state of a TerraformLayer."""

    state: LayerState | None = Field(
        default=None, description="Idle, PlanNeeded, ApplyNeeded, Running or MaxRetriesReached."
    )
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions.")
    last_result: str | None = Field(
        default=None, description="Outcome of the last run, e.g. 'Plan: 1 to add, 0 to change, 0 to destroy'."
    )
    last_run: RunReference | None = Field(default=None, description="The most recent run.")
    latest_runs: list[RunReference] = Field(default_factory=list, description="The runs kept, newest first.")
    last_plan: PlanReference | None = Field(default=None, description="The latest successful plan.")


class TerraformLayer(Resource):
    """A Terraform/OpenTofu root module in a TerraformRepository, kept planned (and applied when allowed)."""

    KIND: ClassVar[str] = "TerraformLayer"
    PLURAL: ClassVar[str] = "terraformlayers"
    SINGULAR: ClassVar[str] = "terraformlayer"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tfl", "layer")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("State", "string", ".status.state"),
        PrinterColumn("Repository", "string", ".spec.repository.name"),
        PrinterColumn("Branch", "string", ".spec.branch"),
        PrinterColumn("Path", "string", ".spec.path"),
        PrinterColumn("Last Result", "string", ".status.lastResult"),
        AGE_COLUMN,
    )

    kind: str = Field(default="TerraformLayer", description="TerraformLayer.")
    spec: TerraformLayerSpec
    status: TerraformLayerStatus = Field(default_factory=TerraformLayerStatus)

    @property
    def repository_namespace(self) -> str:
        """Namespace of the layer's repository: `spec.repository.namespace`, else the layer's own."""
        return self.spec.repository.namespace or self.namespace
