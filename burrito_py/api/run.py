"""TerraformRun: one plan or apply of a layer, retried in runner pods (docs/architecture.md §3, §6)."""

from __future__ import annotations

from typing import ClassVar, Literal, Self

from pydantic import Field, model_validator

from burrito_py.api.common import AGE_COLUMN, ApiModel, Condition, PrinterColumn, Resource, RunAction, RunKind
from burrito_py.api.operations import OPERATION_ACTIONS, RunOperation
from burrito_py.api.patterns import PLAN_SUM_PATTERN

__all__ = [
    "RUN_STATES",
    "ArtifactReference",
    "Attempt",
    "LayerReference",
    "PodCreation",
    "RunAction",
    "RunKind",
    "RunState",
    "TerraformRun",
    "TerraformRunSpec",
    "TerraformRunStatus",
]

RunState = Literal["Initial", "Running", "Retrying", "FailureGracePeriod", "Succeeded", "Failed"]
RUN_STATES: tuple[RunState, ...] = ("Initial", "Running", "Retrying", "FailureGracePeriod", "Succeeded", "Failed")


class LayerReference(ApiModel):
    """The layer a run works for, and the commit it works on."""

    name: str = Field(min_length=1, description="Name of the TerraformLayer.")
    namespace: str | None = Field(default=None, description="Namespace of the layer; defaults to the run's.")
    revision: str | None = Field(default=None, description="Commit to plan or apply.")


class ArtifactReference(ApiModel):
    """The plan an apply run applies."""

    run: str = Field(min_length=1, description="Name of the plan run.")
    attempt: int = Field(ge=1, description="Attempt of that run that holds the plan (from 1).")
    sum: str | None = Field(
        default=None, pattern=PLAN_SUM_PATTERN,
        description="sha256:<hex> of that attempt's binary plan, as the controllers recorded it from the datastore; "
        "the runner applies only a plan of exactly this sum.",
    )


class TerraformRunSpec(ApiModel):
    """What to run."""

    action: RunKind = Field(description="plan or apply; or a day-2 operation: import, state-rm, state-mv, "
                            "force-unlock, migrate-state (spec.operation says what).")
    layer: LayerReference = Field(description="The layer and revision.")
    artifact: ArtifactReference | None = Field(
        default=None, description="For apply: the plan to apply (unset with applyWithoutPlanArtifact)."
    )
    destroy: bool = Field(
        default=False,
        description="Set when a layer with destroyResourcesOnDeletion is being deleted. A plan plans the destruction "
        "of every resource (terraform plan -destroy); an apply applies that destroy plan (always its artifact).",
    )
    pull_request: str | None = Field(
        default=None, min_length=1,
        description="Set on the runs of a TerraformPullRequest (its name). A plan: at the pull request's head, under "
        "its own Lease, that never takes the state lock, never writes the layer's annotations and is never the "
        "artifact of a layer's apply. An apply (`/burrito-py apply`, a layer with spec.pullRequests.applyBeforeMerge): "
        "exactly that pull request's plan (spec.artifact with its sum), under the layer's Lease, as the layer's "
        "runner.",
    )

    operation: RunOperation | None = Field(
        default=None,
        description="A day-2 operation (docs/architecture.md §5.12): what an import, state-rm, state-mv, "
        "force-unlock or migrate-state run does, or the -replace/-target addresses of a plan, and who asked. Set "
        "by the layer controller from the layer's api.burrito-py.io/operation request.",
    )

    @model_validator(mode="after")
    def _pull_request_plans_only(self) -> Self:
        if self.pull_request is None:
            return self
        if self.destroy or self.operation is not None or self.action not in ("plan", "apply"):
            raise ValueError("a pull request's run (spec.pullRequest) may only be a plan, or the apply of its "
                             "reviewed plan, never a destroy or an operation")
        if self.action == "apply" and (self.artifact is None or self.artifact.sum is None):
            raise ValueError("a pull request's apply (spec.pullRequest) applies exactly its reviewed plan: "
                             "spec.artifact with its sum is required")
        return self

    @model_validator(mode="after")
    def _operation_fits_action(self) -> Self:
        if self.action in OPERATION_ACTIONS or (self.action == "plan" and self.operation is not None):
            if self.operation is None:
                raise ValueError(f"spec.operation: required by action {self.action}")
            if self.destroy:
                raise ValueError("spec.destroy: an operation is never a destroy")
            problem = self.operation.missing_for(self.action)
            if problem is not None:
                raise ValueError(f"spec.operation.{problem}")
        elif self.operation is not None:
            raise ValueError(f"spec.operation: not allowed on an {self.action} run")
        return self


class Attempt(ApiModel):
    """One runner pod of a run."""

    pod_name: str = Field(description="Name of the runner pod.")
    pod_uid: str | None = Field(
        default=None, description="UID of the runner pod the controller created; only its token may write the run's "
        "artifacts."
    )
    number: int = Field(ge=1, description="Attempt number, from 1.")
    started_at: str | None = Field(default=None, description="When the pod was created (RFC 3339 UTC).")
    finished_at: str | None = Field(default=None, description="When the pod terminated (RFC 3339 UTC).")
    logs_uploaded: bool = Field(default=False, description="Whether the attempt's log is in the datastore.")
    exit_code: int | None = Field(default=None, description="Exit code of the runner container.")
    not_started: str | None = Field(
        default=None, description="Why the pod was given up before it started (the start timeout passed): it was "
        "deleted, and the attempt failed with this message once it was gone."
    )
    # Recorded by the run controller from the datastore when the attempt ends (never from the runner's word):
    # what a later apply of this plan is checked against (docs/architecture.md §6.4).
    plan_sum: str | None = Field(
        default=None, description="sha256:<hex> of the attempt's binary plan, as the datastore computed it."
    )
    plan_json_sum: str | None = Field(
        default=None, description="sha256:<hex> of the attempt's plan JSON, as the datastore computed it."
    )
    plan_json_size: int | None = Field(default=None, ge=0, description="Size of the attempt's plan JSON in bytes.")
    applied_sum: str | None = Field(
        default=None, description="sha256:<hex> of the plan this apply attempt applied (its run's artifact)."
    )
    ignored_overrides: list[str] = Field(
        default_factory=list,
        description="overrideRunnerSpec entries of the layer or repository that set what burrito-py reserves for "
        "every runner (stored before the API refused them): the pod got burrito-py's own values instead.",
    )
    secret_variables: list[str] = Field(
        default_factory=list,
        description="Terraform variables the pod got from a Secret through overrideRunnerSpec env or envFrom "
        "(TF_VAR_<name>): every view of the run masks their values, as it does those of varsFrom Secrets.",
    )


class PodCreation(ApiModel):
    """Runner pods the API refused to create since the last one it created (e.g. a missing ServiceAccount)."""

    failures: int = Field(default=0, ge=0, description="Refused creations in a row.")
    last_failure: str | None = Field(default=None, description="When the last one was refused (RFC 3339 UTC).")
    message: str | None = Field(default=None, description="The API's answer to the last one.")


class TerraformRunStatus(ApiModel):
    """Observed state of a TerraformRun."""

    state: RunState | None = Field(
        default=None, description="Initial, Running, Retrying, FailureGracePeriod, Succeeded or Failed."
    )
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions.")
    retries: int = Field(default=0, ge=0, description="Number of failed attempts.")
    last_run: str | None = Field(default=None, description="When the last runner pod was created (RFC 3339 UTC).")
    attempts: list[Attempt] = Field(default_factory=list, description="Runner pods, oldest first.")
    runner_pod: str | None = Field(default=None, description="Runner pod of the latest attempt.")
    pod_creation: PodCreation | None = Field(
        default=None, description="Set while runner pod creations are refused; the run retries them with a backoff."
    )


class TerraformRun(Resource):
    """One plan or apply of a TerraformLayer at a revision."""

    KIND: ClassVar[str] = "TerraformRun"
    PLURAL: ClassVar[str] = "terraformruns"
    SINGULAR: ClassVar[str] = "terraformrun"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tfrun", "run")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("State", "string", ".status.state"),
        PrinterColumn("Action", "string", ".spec.action"),
        PrinterColumn("Layer", "string", ".spec.layer.name"),
        PrinterColumn("Retries", "integer", ".status.retries"),
        PrinterColumn("Runner Pod", "string", ".status.runnerPod"),
        PrinterColumn("Requested By", "string", ".spec.operation.requestedBy"),
        AGE_COLUMN,
    )

    kind: str = Field(default="TerraformRun", description="TerraformRun.")
    spec: TerraformRunSpec
    status: TerraformRunStatus = Field(default_factory=TerraformRunStatus)

    @property
    def layer_namespace(self) -> str:
        """Namespace of the run's layer: `spec.layer.namespace`, else the run's own."""
        return self.spec.layer.namespace or self.namespace


def pod_name(run_name: str, attempt: int) -> str:
    """Deterministic per attempt, so a retried create can never start a second pod for it."""
    suffix = f"-{attempt}"
    return run_name[: 253 - len(suffix)] + suffix
