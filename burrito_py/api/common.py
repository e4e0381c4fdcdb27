"""Pieces shared by the CRD models: the model base classes and the spec blocks several kinds use."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, ValidationError, WithJsonSchema
from pydantic.alias_generators import to_camel

from burrito_py.api.annotations import API_VERSION, GROUP, VERSION
from burrito_py.api.errors import PATTERN_EXPLANATIONS, InvalidSpec
from burrito_py.api.patterns import NAMESPACE_PATTERN, OBJECT_NAME_PATTERN
from burrito_py.api.runner_contract import (
    OTHER_VOLUME_SOURCES,
    cel_env_rule,
    cel_mount_rules,
    cel_volume_rules,
    env_problem,
    mount_problem,
    volume_problem,
)

__all__ = [
    "API_VERSION",
    "CATEGORY",
    "GROUP",
    "VERSION",
    "ApiModel",
    "Condition",
    "ConditionStatus",
    "CronSchedule",
    "GoDuration",
    "NamespaceName",
    "ObjectName",
    "ObjectReference",
    "OnErrorStrategy",
    "OverrideRunnerSpec",
    "PrinterColumn",
    "RemediationStrategy",
    "Resource",
    "RunAction",
    "RunHistoryPolicy",
    "RunKind",
    "RunnerMetadata",
    "SyncWindow",
    "ToolSpec",
    "check_single_tool",
]

CATEGORY = "burrito-py"

RunAction = Literal["plan", "apply"]
# What a run does: a plan or an apply, or a day-2 operation (api/operations.py, docs/architecture.md §5.12).
RunKind = Literal["plan", "apply", "import", "state-rm", "state-mv", "force-unlock", "migrate-state"]
ConditionStatus = Literal["True", "False", "Unknown"]

# Patterns are kept to the subset that Go's RE2 (the API server), Rust's regex (pydantic) and Python's re
# (jsonschema in tests) all read the same way: no lookarounds, no backreferences.
CRON_PATTERN = r"^\S+(\s+\S+){4}$"
DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(h|m|s))+$"
PATTERN_EXPLANATIONS[CRON_PATTERN] = "must be a cron expression with 5 fields (minute hour day month weekday)"
PATTERN_EXPLANATIONS[DURATION_PATTERN] = "must be a Go-style duration in h, m and s, e.g. 1h30m, 45m or 90s"


def _valid_cron(expression: str) -> str:
    from croniter import croniter  # here, not at import: a runner start reads no cron expression

    if not croniter.is_valid(expression):
        raise ValueError(f"{expression!r} is not a valid cron expression")
    return expression


def check_single_tool(terraform: ToolSpec | None, opentofu: ToolSpec | None) -> None:
    """terraform and opentofu are alternatives: one level may not enable both."""
    if terraform is not None and opentofu is not None and terraform.enabled and opentofu.enabled:
        raise ValueError("terraform.enabled and opentofu.enabled cannot both be true")


CronSchedule = Annotated[str, StringConstraints(pattern=CRON_PATTERN), AfterValidator(_valid_cron)]
GoDuration = Annotated[str, StringConstraints(pattern=DURATION_PATTERN)]


class ApiModel(BaseModel):
    """Base of every API model: snake_case in Python, camelCase on the wire, unknown fields dropped
    (as the API server prunes them)."""

    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, extra="ignore")

    def to_dict(self) -> dict[str, Any]:
        """The wire form: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass(frozen=True, slots=True)
class PrinterColumn:
    """One `additionalPrinterColumns` entry of a CRD (what `kubectl get` shows)."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str = ""
    priority: int = 0

    def to_crd(self) -> dict[str, Any]:
        column: dict[str, Any] = {"name": self.name, "type": self.type, "jsonPath": self.json_path}
        if self.description:
            column["description"] = self.description
        if self.priority:
            column["priority"] = self.priority
        return column


AGE_COLUMN = PrinterColumn("Age", "date", ".metadata.creationTimestamp")


class Resource(ApiModel):
    """A custom resource: `apiVersion`, `kind`, free-form `metadata`, `spec` and `status`.

    Subclasses declare `spec`/`status` and the ClassVars that describe their CRD (namespaced, in the
    terraform group, unless they say otherwise)."""

    API_GROUP: ClassVar[str] = GROUP
    SCOPE: ClassVar[Literal["Namespaced", "Cluster"]] = "Namespaced"
    KIND: ClassVar[str]
    PLURAL: ClassVar[str]
    SINGULAR: ClassVar[str]
    SHORT_NAMES: ClassVar[tuple[str, ...]]
    CATEGORIES: ClassVar[tuple[str, ...]] = (CATEGORY,)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]]

    api_version: str = Field(default=API_VERSION, description="The API version of this object.")
    kind: str = Field(default="", description="The kind of this object; each subclass sets its own.")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Standard Kubernetes object metadata.")

    @classmethod
    def crd_name(cls) -> str:
        """`<plural>.<group>`, the CustomResourceDefinition's name."""
        return f"{cls.PLURAL}.{cls.API_GROUP}"

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> Self:
        """Validate a Kubernetes object (as read from the API or a manifest).

        Raises `InvalidSpec` naming the first offending field, e.g. `spec.branch: String should have at
        least 1 character`."""
        try:
            return cls.model_validate(obj)
        except ValidationError as error:
            raise InvalidSpec.from_validation_error(error) from None

    def to_object(self) -> dict[str, Any]:
        """The object as the API server stores it: camelCase keys, unset optional fields left out."""
        return self.to_dict()

    @property
    def name(self) -> str:
        """`metadata.name`; empty before the API server has named a `generateName` object."""
        return str(self.metadata.get("name") or "")

    @property
    def namespace(self) -> str:
        """`metadata.namespace`; empty when the object has not been given one yet."""
        return str(self.metadata.get("namespace") or "")


class Condition(ApiModel):
    """A Kubernetes-style status condition."""

    type: str = Field(description="Type of the condition, e.g. Ready or IsRunning.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="Machine-readable CamelCase reason for the status.")
    message: str = Field(default="", description="Human-readable details.")
    last_transition_time: str | None = Field(
        default=None, description="When the status last changed (RFC 3339 UTC)."
    )


# A name a spec field refers to (a Secret's, a ConfigMap's, a repository's): one segment of an API path, never a path
# (api/patterns.py), so the API server refuses `../other-namespace/secrets/x` when it is written.
ObjectName = Annotated[str, StringConstraints(pattern=OBJECT_NAME_PATTERN, max_length=253)]
NamespaceName = Annotated[str, StringConstraints(pattern=NAMESPACE_PATTERN, max_length=63)]


class ObjectReference(ApiModel):
    """A reference to an object by name; the namespace defaults to the referring object's."""

    name: ObjectName = Field(description="Name of the referenced object.")
    namespace: NamespaceName | None = Field(
        default=None, description="Namespace of the referenced object; defaults to the referrer's namespace."
    )


class ToolSpec(ApiModel):
    """Which version of a tool (terraform, opentofu or terragrunt) to use and whether it is enabled."""

    version: str | None = Field(
        default=None,
        description="Version or version constraint (e.g. 1.9.5, ~> 1.8). Unset: inherited, else what the code "
        "declares in required_version.",
    )
    enabled: bool | None = Field(default=None, description="Whether the tool is used. Unset: inherited.")


class OnErrorStrategy(ApiModel):
    """What to do when a run fails."""

    max_retries: int | None = Field(
        default=None, ge=0, description="How many times a failed run is retried. Unset: inherited, else 3."
    )


DriftRemediation = Literal["detect", "auto", "autoIfPolicyPasses"]


class RemediationStrategy(ApiModel):
    """How drift and new commits are remediated."""

    auto_apply: bool | None = Field(
        default=None,
        description="Apply plans automatically. Unset: inherited, else false (plan only, the layer stays "
        "ApplyNeeded).",
    )
    apply_without_plan_artifact: bool | None = Field(
        default=None,
        description="Apply by planning and applying in one step instead of applying the stored plan. Unset: "
        "inherited, else false.",
    )
    on_error: OnErrorStrategy | None = Field(default=None, description="Retry policy for failed runs.")
    drift: DriftRemediation | None = Field(
        default=None,
        description="What a plan that corrects drift (changes at code already applied) does: detect (report it "
        "and wait for an approval of its sum, even with autoApply), auto (apply it as any other plan), or "
        "autoIfPolicyPasses (apply it only when it is update-only and no plan policy gates it). Unset: "
        "inherited, else detect.",
    )


class RunnerMetadata(ApiModel):
    """Extra labels and annotations for runner pods."""

    labels: dict[str, str] = Field(default_factory=dict, description="Labels added to runner pods.")
    annotations: dict[str, str] = Field(default_factory=dict, description="Annotations added to runner pods.")


def _not_reserved(problem: Callable[[Mapping[str, Any]], str | None]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def check(item: dict[str, Any]) -> dict[str, Any]:
        why = problem(item)
        if why is not None:
            raise ValueError(why)
        return item

    return check


def _k8s_item(properties: dict[str, Any], rules: list[dict[str, str]]) -> WithJsonSchema:
    """A Kubernetes object passed on as given, but with the fields the CEL `rules` read declared (CEL sees no
    field that is not in the schema) and the rules themselves on the item, so a 422 names `env[2]`."""
    return WithJsonSchema({"type": "object", "properties": properties, "additionalProperties": True,
                           "x-kubernetes-validations": rules})


# The API server estimates a CEL rule's cost from the largest list and string it may meet: bounded here.
_NAME = {"type": "string", "maxLength": 256}
_SOURCE = {"type": "object", "additionalProperties": True}
EnvVar = Annotated[dict[str, Any], AfterValidator(_not_reserved(env_problem)),
                   _k8s_item({"name": _NAME}, [cel_env_rule()])]
Volume = Annotated[dict[str, Any], AfterValidator(_not_reserved(volume_problem)),
                   _k8s_item({"name": _NAME, "emptyDir": _SOURCE, "persistentVolumeClaim": _SOURCE,
                              "ephemeral": _SOURCE, **dict.fromkeys(OTHER_VOLUME_SOURCES, _SOURCE)},
                             cel_volume_rules())]
VolumeMount = Annotated[dict[str, Any], AfterValidator(_not_reserved(mount_problem)),
                        _k8s_item({"name": _NAME, "mountPath": {"type": "string", "maxLength": 4096}},
                                  cel_mount_rules())]


class OverrideRunnerSpec(ApiModel):
    """Overrides for the runner pods of a layer (or of all layers of a repository).

    Kubernetes-typed fields (env, volumes, resources, tolerations, affinity, ...) are passed to the pod spec
    as given, except what burrito-py gives every runner (api/runner_contract.py, docs/architecture.md §6.3):
    such an entry is refused, naming it."""

    image: str | None = Field(default=None, description="Runner image.")
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Image pull policy of the runner container."
    )
    service_account_name: str | None = Field(default=None, description="Service account of runner pods.")
    env: list[EnvVar] = Field(
        default_factory=list, max_length=256,
        description="Extra environment variables (EnvVar); one of the same name replaces ours, except the "
        "runner's own: BURRITO_RUNNER_* identity, BURRITO_DATASTORE_URL and the mirrors' BURRITO_PROVIDER_MIRROR_*, "
        "BURRITO_TOOL_MIRROR_URL and BURRITO_MIRROR_CA_PEM are refused (TENV_ROOT, BURRITO_RUNNER_TOOLS_PATH, "
        "HOME, TMPDIR may be set).",
    )
    env_from: list[dict[str, Any]] = Field(
        default_factory=list, description="Extra EnvFromSource entries (the runner's own env always wins over them)."
    )
    volumes: list[Volume] = Field(
        default_factory=list, max_length=128,
        description="Extra pod volumes (Volume); one of the same name replaces ours, except burrito-py-token "
        "(refused) and the scratch volumes tmp, home, work (an emptyDir only) and tools (an emptyDir, "
        "persistentVolumeClaim or ephemeral volume); never a hostPath.",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, max_length=128,
        description="Extra volume mounts of the runner container (VolumeMount). Ours (burrito-py-token, tmp, home, "
        "work, tools) may not be replaced, nor anything mounted at or under /var/run/secrets/burrito-py.",
    )
    resources: dict[str, Any] | None = Field(
        default=None, description="Resource requests and limits of the runner container (ResourceRequirements)."
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Node selector of runner pods.")
    tolerations: list[dict[str, Any]] = Field(default_factory=list, description="Tolerations of runner pods.")
    affinity: dict[str, Any] | None = Field(default=None, description="Affinity of runner pods (Affinity).")
    metadata: RunnerMetadata | None = Field(default=None, description="Extra labels and annotations.")
    extra_init_args: list[str] = Field(default_factory=list, description="Extra arguments to `init`.")
    extra_plan_args: list[str] = Field(default_factory=list, description="Extra arguments to `plan`.")
    extra_apply_args: list[str] = Field(default_factory=list, description="Extra arguments to `apply`.")


class StateSettings(ApiModel):
    """Terraform state the platform owns (docs/architecture.md §10.6): the datastore is the layer's backend."""

    managed: bool | None = Field(
        default=None,
        description="true: the layer's state lives in the burrito-py datastore (Terraform's http backend, set up by "
        "the runner: the code declares no backend and holds no credential for it; a code that declares a backend "
        "or cloud block fails its runs until its state is migrated with the migrate-state operation). Unset: "
        "inherited from the repository, else false. Once a migrate-state run moved the state, where it put it wins "
        "over this field (docs/architecture.md §10.6).",
    )


class RunHistoryPolicy(ApiModel):
    """How many runs of a layer are kept."""

    runs: int | None = Field(
        default=None, ge=1, description="Number of runs kept per layer; older ones are deleted. Unset: inherited, "
        "else 5."
    )


class SyncWindow(ApiModel):
    """A recurring time window that allows or denies runs. Deny windows win; when allow windows match an
    action and layer, one of them must be open."""

    kind: Literal["allow", "deny"] = Field(description="allow or deny.")
    schedule: CronSchedule = Field(description="Cron expression (5 fields, UTC) at which the window opens.")
    duration: GoDuration = Field(description="How long the window stays open, e.g. 1h30m.")
    actions: list[RunAction] = Field(
        default_factory=list, description="Actions the window applies to (plan, apply); empty: all."
    )
    layers: list[str] = Field(
        default_factory=list, description="Glob patterns of layer names the window applies to; empty: all."
    )
