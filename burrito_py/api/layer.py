"""TerraformLayer: one Terraform root module of a repository, kept planned and applied
(docs/architecture.md §3, §5)."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, StringConstraints, field_validator, model_validator

from burrito_py.api.common import (
    AGE_COLUMN,
    ApiModel,
    Condition,
    ObjectName,
    ObjectReference,
    OverrideRunnerSpec,
    PrinterColumn,
    RemediationStrategy,
    Resource,
    RunHistoryPolicy,
    RunKind,
    StateSettings,
    ToolSpec,
    check_single_tool,
)
from burrito_py.api.errors import PATTERN_EXPLANATIONS
from burrito_py.api.patterns import RELATIVE_PATH_PATTERN

__all__ = [
    "LAYER_STATES",
    "LAYER_STATES_TEXT",
    "OUTPUT_MAPPING_PATTERN",
    "RELATIVE_PATH_PATTERN",
    "ApprovePlan",
    "DependencyStatus",
    "DriftState",
    "DriftStatus",
    "ExhaustedRun",
    "LayerDependency",
    "LayerPullRequests",
    "LayerState",
    "OutputsSecret",
    "OutputsSync",
    "PendingPlan",
    "PlanPolicyStatus",
    "PlanReference",
    "PolicyFinding",
    "PolicyOverride",
    "RelativePath",
    "ReviewedPlan",
    "RunCreationStatus",
    "RunReference",
    "TerraformLayer",
    "TerraformLayerSpec",
    "TerraformLayerStatus",
    "VarsSource",
]

RelativePath = Annotated[str, StringConstraints(pattern=RELATIVE_PATH_PATTERN)]

# An output to copy into the Secret: `name`, or `old:new` to store output `old` under key `new`.
OUTPUT_MAPPING_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*(:[-._A-Za-z0-9]+)?$"
PATTERN_EXPLANATIONS[OUTPUT_MAPPING_PATTERN] = (
    "must be an output name, or 'output:key' to store the output under another Secret key"
)
ApprovePlan = Literal["auto", "manual"]
# A Terraform variable name (an input's key) and an output name (its value).
TERRAFORM_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
PATTERN_EXPLANATIONS[TERRAFORM_NAME_PATTERN] = (
    "must be a Terraform name: a letter or '_', then letters, digits, '_' or '-'"
)
TerraformName = Annotated[str, StringConstraints(pattern=TERRAFORM_NAME_PATTERN, max_length=128)]
MAX_DEPENDENCIES = 32

LayerState = Literal["Idle", "PlanNeeded", "ApplyNeeded", "Running", "MaxRetriesReached"]
# The one list of layer states: the decisions (controllers/layer/decide.py, destroy.py), the UI's filters
# (server/ui/queries.py), the REST view (server/views.py) and the AGL projection (agl/instance_decisions.py).
LAYER_STATES: tuple[LayerState, ...] = ("Idle", "PlanNeeded", "ApplyNeeded", "Running", "MaxRetriesReached")
LAYER_STATES_TEXT = f"{', '.join(LAYER_STATES[:-1])} or {LAYER_STATES[-1]}."


class VarsSource(ApiModel):
    """Terraform variables read from a Secret or ConfigMap in the layer's namespace: keys are variable names,
    values are used as they are, as strings."""

    kind: Literal["Secret", "ConfigMap"] = Field(description="Secret or ConfigMap.")
    name: ObjectName = Field(description="Name of the Secret or ConfigMap, in the layer's namespace.")
    keys: list[str] | None = Field(default=None, description="Only these keys. Unset: every key.")
    optional: bool | None = Field(
        default=None, description="A missing object (or key) is skipped instead of failing (default false)."
    )


class OutputsSecret(ApiModel):
    """Where the controller copies the outputs of the last successful apply."""

    name: ObjectName = Field(description="Name of the Secret, in the layer's namespace.")
    outputs: list[Annotated[str, StringConstraints(pattern=OUTPUT_MAPPING_PATTERN)]] | None = Field(
        default=None, description="Outputs to copy, as 'name' or 'output:key'. Unset: every output."
    )


class LayerDependency(ApiModel):
    """An upstream layer this one applies after, and the outputs of it this one reads as variables
    (docs/architecture.md §5.11)."""

    name: str = Field(min_length=1, max_length=253, description="The upstream TerraformLayer.")
    namespace: str | None = Field(
        default=None, min_length=1, max_length=63,
        description="Its namespace. Unset: this layer's. Another namespace only when the controllers allow it "
        "(allowCrossNamespaceDependencies).",
    )
    inputs: dict[str, TerraformName] = Field(
        default_factory=dict,
        description="Variables of this layer set from outputs of the upstream: {<variable>: <upstream output>}. "
        "They win over vars and varsFrom. Values are never logged nor shown.",
    )
    trigger_always: bool | None = Field(
        default=None,
        description="Plan this layer again after every apply of the upstream, not only when a consumed output "
        "changed (default false).",
    )

    @field_validator("inputs", mode="after")
    @classmethod
    def _variable_names(cls, value: dict[str, str]) -> dict[str, str]:
        # Keys are checked here: a CRD schema cannot constrain map keys (no patternProperties in structural schemas).
        for variable in value:
            if not re.fullmatch(TERRAFORM_NAME_PATTERN, variable) or len(variable) > 128:
                raise ValueError(f"inputs: {variable!r} {PATTERN_EXPLANATIONS[TERRAFORM_NAME_PATTERN]}")
        return value


class LayerPullRequests(ApiModel):
    """What pull requests may do to this layer (docs/architecture.md §11.3, "Apply before merge")."""

    apply_before_merge: bool | None = Field(
        default=None,
        description="Let `/burrito-py apply` on a pull request apply that pull request's reviewed plan of this layer "
        "before it merges (Atlantis' workflow), with the layer's runner identity and under its Lease; the layer is "
        "then locked to that pull request until it merges or closes (or `/burrito-py unlock`). Never for a fork's "
        "pull request. Unset: false (apply is refused; the layer applies after the merge).",
    )
    apply_requirements: list[Literal["approved", "mergeable", "undiverged"]] = Field(
        default_factory=list, max_length=3,
        description="Apply requirements of this layer, added to the repository's "
        "spec.pullRequests.commands.applyRequirements (a layer may only require more, never less).",
    )


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

    vars: dict[str, Any] | None = Field(
        default=None,
        description="Terraform variables (any JSON values), written by the runner to burrito-py.auto.tfvars.json.",
    )
    vars_from: list[VarsSource] = Field(
        default_factory=list,
        description="Variables from Secrets and ConfigMaps; later entries win over earlier ones and over vars.",
    )
    write_outputs_to_secret: OutputsSecret | None = Field(
        default=None, description="Copy the outputs of each successful apply into this Secret."
    )
    destroy_resources_on_deletion: bool | None = Field(
        default=None,
        description="Deleting the layer plans and applies a destroy first; a finalizer holds the layer until "
        "then (default false).",
    )
    approve_plan: ApprovePlan | None = Field(
        default=None,
        description="auto: apply every plan; manual: apply only a plan approved with the annotation "
        "api.burrito-py.io/approve-plan=<plan sum>. Unset: auto when remediationStrategy.autoApply, else manual.",
    )

    depends_on: list[LayerDependency] = Field(
        default_factory=list,
        max_length=MAX_DEPENDENCIES,
        description="Upstream layers: this layer applies only after each has applied the same commit (same "
        "repository and branch) or its latest code, and reads their outputs as variables (inputs).",
    )

    state: StateSettings | None = Field(
        default=None, description="Where the layer's state lives. Unset fields: inherited from the repository."
    )

    pull_requests: LayerPullRequests | None = Field(
        default=None, description="What comment commands on pull requests may do to this layer (apply before merge)."
    )

    lock_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        description="Key of the Lease that keeps one Terraform at a time on this layer's state. Unset: the "
        "repository (namespace/name) and path, so layers on other branches of the same path wait for each other. "
        "Set it when the state differs per branch (e.g. a backend key per branch), or to serialise layers of "
        "different paths that share a state. Layers of one namespace with the same key never run at once.",
    )

    @model_validator(mode="after")
    def _one_tool(self) -> Self:
        check_single_tool(self.terraform, self.opentofu)
        return self


class RunReference(ApiModel):
    """A TerraformRun of this layer."""

    name: str = Field(description="Name of the TerraformRun.")
    action: RunKind = Field(description="plan or apply, or a day-2 operation (import, state-rm, state-mv, "
                            "force-unlock, migrate-state).")
    date: str | None = Field(default=None, description="When the run was created (RFC 3339 UTC).")
    revision: str | None = Field(default=None, description="Commit the run works on.")


class PlanReference(ApiModel):
    """The latest successful plan of this layer."""

    sum: str | None = Field(default=None, description="sha256:<hex> of the plan binary.")
    revision: str | None = Field(default=None, description="Commit that was planned.")
    date: str | None = Field(default=None, description="When the plan was made (RFC 3339 UTC).")
    run: str | None = Field(default=None, description="<run>/<attempt> holding the plan artifacts.")


class PendingPlan(ApiModel):
    """A plan waiting for manual approval."""

    sum: str = Field(description="sha256:<hex> of the plan; approve with api.burrito-py.io/approve-plan=<sum>.")
    run: str | None = Field(default=None, description="<run>/<attempt> holding the plan.")
    revision: str | None = Field(default=None, description="Commit that was planned.")
    reason: str | None = Field(
        default=None, description="Why an approval is needed beyond approvePlan: manual (a policy gate, a drift "
        "correction, a mandatory denial)."
    )


class OutputsSync(ApiModel):
    """What `status.outputs` (and the outputs Secret) reflect, so that an unchanged layer costs no datastore
    read."""

    run: str = Field(description="<run>/<attempt> of the apply whose outputs were read.")
    secret: OutputsSecret | None = Field(
        default=None, description="The writeOutputsToSecret they were written for (unset: none)."
    )


class ExhaustedRun(ApiModel):
    """A run of this layer that failed for good. Kept on the status so that deleting old runs (run history)
    never lifts it: a failed plan is not retried at the same relevant commit, a failed apply never applies
    the same plan again."""

    run: str = Field(description="Name of the failed TerraformRun.")
    key: str = Field(description="plan: the relevant commit it planned; apply: the sum of the plan it applied.")
    reason: str = Field(description="RetryLimitReached, or StalePlan for an apply Terraform refused as stale.")
    message: str = Field(default="", description="Why the last attempt failed.")
    relevant_commit: str | None = Field(default=None, description="The layer's relevant commit when it ran.")
    stale_count: int = Field(
        default=0, ge=0, description="Stale applies in a row at that relevant commit (each re-plans once at most)."
    )
    changes_digest: str | None = Field(
        default=None, description="apply: what its plan would change (sha256); a later plan making the same changes "
        "at the same relevant commit and inputs is not applied without sync-now or an approval."
    )
    inputs_digest: str | None = Field(default=None, description="apply: the upstream outputs it was given.")


class PolicyFinding(ApiModel):
    """A plan policy rule that denied or warned about the plan: where, never attribute values."""

    policy: str = Field(description="The policy: <namespace>/<name>, or <name> for a cluster policy.")
    rule: str = Field(description="The rule's name in that policy.")
    enforcement: str = Field(description="advisory, gateAutoApply or mandatory.")
    addresses: list[str] = Field(default_factory=list, description="Resource addresses it names (at most 20).")
    count: int = Field(default=0, ge=0, description="How many resources it names in all.")
    error: str | None = Field(
        default=None,
        description="Why the rule could not be evaluated, in the controllers' words: the limit it exceeded (e.g. "
        "'rule loop of policy team-a/slow exceeded the 2 s evaluation limit').",
    )


class PolicyOverride(ApiModel):
    """Who overrode a mandatory policy's denial of this plan."""

    by: str = Field(description="The principal the server authenticated.")
    plan_sum: str = Field(description="The plan sum the override names.")


class PlanPolicyStatus(ApiModel):
    """The plan policies' verdict on the current plan, computed by the controllers from the stored plan."""

    plan_sum: str = Field(description="The plan it is about (sha256:<hex>).")
    verdict: str = Field(description="Allowed, Warned, GatesAutoApply, Denied, or Unknown (the plan could not be "
                                     "read; retried).")
    policies: int = Field(default=0, ge=0, description="How many policies select this layer.")
    denied: list[PolicyFinding] = Field(default_factory=list, description="Rules that deny the plan.")
    warned: list[PolicyFinding] = Field(default_factory=list, description="Rules that warn about it.")
    override: PolicyOverride | None = Field(default=None, description="The override of a mandatory denial.")
    override_refused: str | None = Field(
        default=None, description="The principal of an override annotation the policies do not allow."
    )
    digest: str | None = Field(default=None, description="Of the policies it was computed with (a change re-reviews).")
    error: str | None = Field(default=None, description="Why the plan could not be read (reviewed again soon).")
    plan: dict[str, Any] | None = Field(
        default=None, description="What the review read of the plan: counts, addresses, its drift classification."
    )


DriftState = Literal["InSync", "Drifted", "CodeChange", "Unknown"]


class DriftStatus(ApiModel):
    """Whether the current plan corrects drift (changes at code already applied) or brings a code change."""

    state: DriftState = Field(description="InSync, Drifted, CodeChange or Unknown.")
    since: str | None = Field(default=None, description="When the layer was first seen Drifted (RFC 3339 UTC).")
    last_check: str | None = Field(default=None, description="When the plan it is judged from was made.")
    plan_sum: str | None = Field(default=None, description="The plan it is judged from.")
    resources: int = Field(default=0, ge=0, description="Resources the plan changes.")
    addresses: list[str] = Field(default_factory=list, description="Their addresses (at most 20).")


class DependencyStatus(ApiModel):
    """How one upstream stands, as this layer's apply rule sees it."""

    name: str = Field(description="<namespace>/<name> of the upstream layer.")
    state: str | None = Field(default=None, description="The upstream's state (unset: not found).")
    applied_revision: str | None = Field(
        default=None, description="The branch commit whose code the upstream has planned and applied."
    )
    satisfied: bool = Field(description="Whether this layer may apply as far as this upstream is concerned.")
    reason: str = Field(description="Satisfied, UpstreamPending, UpstreamFailed, UpstreamDeleting, "
                        "DependencyNotFound, DependencyCycle, CrossNamespaceDenied or OutputMissing.")
    message: str = Field(default="", description="Why, in words (names only, never values).")


class RunCreationStatus(ApiModel):
    """A run of this layer the API refused to create (an admission policy, a webhook, a permission)."""

    action: str = Field(description="plan or apply: the run it tried to create.")
    revision: str = Field(default="", description="The commit of that run.")
    failures: int = Field(default=0, ge=0, description="Refused creations of that run in a row.")
    last_failure: str | None = Field(default=None, description="When the API last refused it (RFC 3339 UTC).")
    message: str = Field(default="", description="Failed to create TerraformRun for <Action> action: <API error>.")


class ReviewedPlan(ApiModel):
    """What a merged pull request meant for the layer's plan (issue 30 item 4: what was reviewed is what applies)."""

    pull_request: str = Field(description="The TerraformPullRequest (this namespace).")
    number: int = Field(default=0, ge=0, description="Its number at the provider.")
    head_sha: str = Field(description="The merged head whose plan was reviewed.")
    plan_sum: str = Field(description="The layer's plan judged.")
    result: Literal["Approved", "Differs"] = Field(
        description="Approved: the plan is the reviewed one and applies without a manual approval; Differs: it "
        "waits for approval as usual (message says why)."
    )
    message: str = Field(default="", max_length=1000, description="Why, in words.")


class TerraformLayerStatus(ApiModel):
    """Observed state of a TerraformLayer."""

    state: LayerState | None = Field(
        default=None, description=LAYER_STATES_TEXT
    )
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions.")
    last_result: str | None = Field(
        default=None, description="Outcome of the last run, e.g. 'Plan: 1 to add, 0 to change, 0 to destroy'."
    )
    last_run: RunReference | None = Field(default=None, description="The most recent run.")
    latest_runs: list[RunReference] = Field(default_factory=list, description="The runs kept, newest first.")
    last_plan: PlanReference | None = Field(default=None, description="The latest successful plan.")
    pending_plan: PendingPlan | None = Field(default=None, description="The plan waiting for approval, if any.")
    exhausted_plan: ExhaustedRun | None = Field(
        default=None, description="The newest plan run, when it failed after its last retry."
    )
    exhausted_apply: ExhaustedRun | None = Field(
        default=None, description="The newest apply run, when it failed after its last retry or on a stale plan."
    )
    outputs: list[str] = Field(
        default_factory=list, description="Names of the outputs of the last successful apply (values are not shown)."
    )
    outputs_sync: OutputsSync | None = Field(
        default=None, description="Which apply the outputs come from, and the Secret they were written to."
    )
    policy: PlanPolicyStatus | None = Field(default=None, description="The plan policies' verdict on the plan.")
    drift: DriftStatus | None = Field(default=None, description="Drift, told apart from code changes.")
    notified: dict[str, str] = Field(
        default_factory=dict, description="The last notification sent per event (its key: see notifications)."
    )
    applied_revision: str | None = Field(
        default=None, description="The branch commit whose code this layer has planned and applied (set while "
        "Idle; what its dependents' apply rule compares)."
    )
    dependencies: list[DependencyStatus] = Field(
        default_factory=list, description="How each upstream of spec.dependsOn stands."
    )
    inputs_digest: str | None = Field(
        default=None, description="sha256 of the upstream outputs the current plan consumed (salted; never the "
        "values)."
    )
    run_creation: RunCreationStatus | None = Field(
        default=None, description="The run the API refuses to create, while it does (asked again with a backoff)."
    )
    reviewed_plan: ReviewedPlan | None = Field(
        default=None, description="The last verdict of a merged pull request on the layer's plan: applied as "
        "reviewed, or waiting for approval because the merged result differs."
    )


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
        PrinterColumn("Drift", "string", ".status.drift.state"),
        AGE_COLUMN,
    )

    kind: str = Field(default="TerraformLayer", description="TerraformLayer.")
    spec: TerraformLayerSpec
    status: TerraformLayerStatus = Field(default_factory=TerraformLayerStatus)

    @property
    def repository_namespace(self) -> str:
        """Namespace of the layer's repository: `spec.repository.namespace`, else the layer's own."""
        return self.spec.repository.namespace or self.namespace
