"""ApplicationDefinition: a user-facing kind whose instances the AGL compiles into TerraformLayers
(docs/architecture.md §12).

A platform engineer declares the kind (`spec.application`) and the Terraform module behind it
(`spec.backend.terraform`); tenants then create instances of the kind, and each instance becomes a
TerraformLayer named `prefix + name` in its namespace.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from burrito_py.api.annotations import GROUP as TERRAFORM_GROUP
from burrito_py.api.common import (
    AGE_COLUMN,
    ApiModel,
    Condition,
    ObjectReference,
    OverrideRunnerSpec,
    PrinterColumn,
    Resource,
)
from burrito_py.api.errors import PATTERN_EXPLANATIONS
from burrito_py.api.layer import ApprovePlan, PendingPlan, RelativePath, VarsSource

__all__ = [
    "AGL_API_VERSION",
    "AGL_GROUP",
    "AGL_VERSION",
    "APPS_GROUP",
    "APPS_VERSION",
    "DEFAULT_OUTPUTS_SECRET_TEMPLATE",
    "ApplicationDefinition",
    "ApplicationDefinitionSpec",
    "ApplicationDefinitionStatus",
    "ApplicationSpec",
    "ApplicationStatus",
    "BackendSpec",
    "OutputsSecretTemplate",
    "TerraformBackend",
]

AGL_GROUP = "agl.burrito-py.io"
AGL_VERSION = "v1alpha1"
AGL_API_VERSION = f"{AGL_GROUP}/{AGL_VERSION}"
# Where user kinds are served unless a definition names another group, and the one version they get.
APPS_GROUP = "apps.burrito-py.io"
APPS_VERSION = "v1alpha1"
# Kind-scoped, so a VPC and a DNSZone both called `prod` never write the same Secret.
DEFAULT_OUTPUTS_SECRET_TEMPLATE = "{{ kind | lower }}-{{ name }}-outputs"  # noqa: S105 - a name, not a secret

KIND_PATTERN = r"^[A-Z][A-Za-z0-9]*$"
PLURAL_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
# A DNS subdomain with at least two labels, as the API server requires of CRD groups.
GROUP_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$"
# A prefix is glued to instance names, so it may end in `-` or `.` but must start like a name.
PREFIX_PATTERN = r"^([a-z0-9][-a-z0-9.]*)?$"
# Name characters, and `{{ variable | filter | ... }}` placeholders the controller fills per instance.
NAME_TEMPLATE_PATTERN = r"^([-a-z0-9.]|\{\{ *[a-z_]+( *\| *[a-z_]+)* *\}\})+$"
PATTERN_EXPLANATIONS[KIND_PATTERN] = "must be a CamelCase kind starting with an upper-case letter, e.g. Bucket"
PATTERN_EXPLANATIONS[PLURAL_PATTERN] = "must be a lower-case DNS label, e.g. buckets"
PATTERN_EXPLANATIONS[GROUP_PATTERN] = "must be a lower-case DNS subdomain with a dot, e.g. apps.example.com"
PATTERN_EXPLANATIONS[PREFIX_PATTERN] = (
    "must be lower-case letters, digits, '-' and '.', starting with a letter or digit"
)
PATTERN_EXPLANATIONS[NAME_TEMPLATE_PATTERN] = (
    "must be lower-case name characters and {{ variable | filter }} placeholders, e.g. {{ kind | lower }}-{{ name }}"
)
RESERVED_GROUPS = frozenset({TERRAFORM_GROUP, AGL_GROUP})


class ApplicationSpec(ApiModel):
    """The user-facing kind, served as a namespaced CustomResourceDefinition."""

    kind: Annotated[str, StringConstraints(pattern=KIND_PATTERN, max_length=63)] = Field(
        description="Kind of the instances, e.g. Bucket."
    )
    plural: Annotated[str, StringConstraints(pattern=PLURAL_PATTERN, max_length=63)] = Field(
        description="Plural resource name, e.g. buckets (`kubectl get buckets`)."
    )
    singular: Annotated[str, StringConstraints(pattern=PLURAL_PATTERN, max_length=63)] = Field(
        description="Singular resource name, e.g. bucket."
    )
    # Label values are at most 63 characters, and the group is written into a label of every layer.
    group: Annotated[str, StringConstraints(pattern=GROUP_PATTERN, max_length=63)] = Field(
        default=APPS_GROUP, description="API group of the kind."
    )
    short_names: list[Annotated[str, StringConstraints(pattern=PLURAL_PATTERN)]] = Field(
        default_factory=list, description="Short names for kubectl, e.g. bkt."
    )
    open_api_schema: dict[str, Any] = Field(
        default_factory=dict,
        alias="openAPISchema",
        description="JSON Schema of the instances' spec. Top-level properties become Terraform variables "
        "(camelCase → snake_case); a key it does not declare (properties, patternProperties) is refused unless it "
        "sets additionalProperties. Empty: any spec.",
    )

    @model_validator(mode="after")
    def _not_reserved(self) -> Self:
        if self.group in RESERVED_GROUPS:
            raise ValueError(f"group {self.group!r} is reserved for burrito-py's own kinds")
        return self


class OutputsSecretTemplate(ApiModel):
    """The Secret each instance's Terraform outputs are copied into."""

    name: Annotated[str, StringConstraints(pattern=NAME_TEMPLATE_PATTERN)] = Field(
        default=DEFAULT_OUTPUTS_SECRET_TEMPLATE,
        description="Template of the Secret's name, in the instance's namespace. Variables: name, namespace, "
        "kind, group, plural, singular, prefix, layer; filters: lower, upper. Default: "
        "{{ kind | lower }}-{{ name }}-outputs.",
    )


class TerraformBackend(ApiModel):
    """The Terraform root module every instance is applied with."""

    repository: ObjectReference = Field(
        description="The TerraformRepository holding the module. Unset namespace: the instance's namespace."
    )
    branch: str = Field(min_length=1, description="Branch to track.")
    path: RelativePath = Field(description="Path of the root module, relative to the repository root.")
    prefix: Annotated[str, StringConstraints(pattern=PREFIX_PATTERN)] = Field(
        default="", description="Prefix of the layer names: an instance `x` becomes the layer `<prefix>x`."
    )
    approve_plan: ApprovePlan = Field(
        default="manual",
        description="auto: apply every plan; manual: apply a plan only once the instance is annotated with "
        "api.burrito-py.io/approve-plan=<the sum in status.pendingPlan.sum>.",
    )
    destroy_resources_on_deletion: bool = Field(
        default=False, description="Deleting an instance destroys its Terraform resources first."
    )
    plan_policies: list[Annotated[str, StringConstraints(pattern=PLURAL_PATTERN, max_length=253)]] = Field(
        default_factory=list,
        description="ClusterTerraformPlanPolicies that judge every instance's plans, whatever their selectors say "
        "(e.g. a noDestroy policy for a database kind, so that approvePlan: auto applies only what is safe).",
    )
    write_outputs_to_secret: OutputsSecretTemplate | None = Field(
        default=None, description="Where outputs are copied. Unset: {{ kind | lower }}-{{ name }}-outputs."
    )
    override_runner_spec: OverrideRunnerSpec | None = Field(
        default=None,
        description="Runner pod overrides for every layer. Templates in extraInitArgs, extraPlanArgs and "
        "extraApplyArgs are filled per instance, e.g. -backend-config=key={{ namespace }}/{{ name }}.tfstate.",
    )
    vars_from: list[VarsSource] = Field(
        default_factory=list,
        description="Variables from Secrets and ConfigMaps in the instance's namespace, shared by every "
        "instance; they win over the instance's spec.",
    )


class BackendSpec(ApiModel):
    """What instances are compiled into."""

    type: Literal["Terraform"] = Field(description="Terraform (the only backend).")
    terraform: TerraformBackend = Field(description="The Terraform module and how its layers run.")


class ApplicationDefinitionSpec(ApiModel):
    """The kind to serve and the backend that implements it."""

    application: ApplicationSpec = Field(description="The user-facing kind.")
    backend: BackendSpec = Field(description="How instances are implemented.")


class ApplicationDefinitionStatus(ApiModel):
    """Observed state of an ApplicationDefinition."""

    conditions: list[Condition] = Field(default_factory=list, description="Ready: the kind is served.")
    instances: int | None = Field(default=None, ge=0, description="Number of instances, in every namespace.")
    served_crd: str | None = Field(default=None, description="The CustomResourceDefinition serving the kind.")
    observed_generation: int | None = Field(default=None, description="The generation the status describes.")


class ApplicationDefinition(Resource):
    """A user-facing kind (e.g. Bucket) whose instances become TerraformLayers."""

    API_GROUP: ClassVar[str] = AGL_GROUP
    SCOPE: ClassVar[Literal["Namespaced", "Cluster"]] = "Cluster"
    KIND: ClassVar[str] = "ApplicationDefinition"
    PLURAL: ClassVar[str] = "applicationdefinitions"
    SINGULAR: ClassVar[str] = "applicationdefinition"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("appdef", "appdefs")
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = (
        PrinterColumn("Kind", "string", ".spec.application.kind"),
        PrinterColumn("Group", "string", ".spec.application.group"),
        PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
        PrinterColumn("Instances", "integer", ".status.instances"),
        PrinterColumn("Path", "string", ".spec.backend.terraform.path", priority=1),
        AGE_COLUMN,
    )

    api_version: str = Field(default=AGL_API_VERSION, description="The API version of this object.")
    kind: str = Field(default="ApplicationDefinition", description="ApplicationDefinition.")
    spec: ApplicationDefinitionSpec
    status: ApplicationDefinitionStatus = Field(default_factory=ApplicationDefinitionStatus)


class ApplicationStatus(ApiModel):
    """What the AGL writes on each instance of a user kind (their CRDs keep status schemaless)."""

    conditions: list[Condition] = Field(
        default_factory=list, description="Ready (applied and up to date) and PendingApproval."
    )
    layer: str | None = Field(default=None, description="The TerraformLayer implementing the instance.")
    pending_plan: PendingPlan | None = Field(
        default=None, description="The plan waiting for approval: annotate the instance with its sum."
    )
    last_applied_revision: str | None = Field(default=None, description="Commit of the module last applied.")
    outputs: list[str] = Field(default_factory=list, description="Names of the Terraform outputs.")
    outputs_secret: str | None = Field(default=None, description="Secret holding the outputs' values.")
    observed_generation: int | None = Field(default=None, description="The generation the status describes.")
