"""Plan policies (docs/architecture.md §5.9): rules over what a plan does, evaluated by the controllers from the
stored plan JSON, never by the runner. `TerraformPlanPolicy` judges the layers of its own namespace;
`ClusterTerraformPlanPolicy` is the platform team's, across namespaces chosen by label.

Each rule is one of the built-in kinds, a CEL expression or a Rego module (conftest style), and says `deny`
or `warn`. The policy's `enforcement` says what a denial does: `advisory` reports it, `gateAutoApply` makes an
`auto` layer wait for an approval of that plan's sum, `mandatory` blocks the apply even when approved, unless a
principal named in `overrideBy` overrides that plan (through the server, which records who).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal, Self

from pydantic import Field, StringConstraints, model_validator

from burrito_py.api.common import AGE_COLUMN, ApiModel, Condition, PrinterColumn, Resource

__all__ = [
    "RULE_KINDS",
    "ClusterTerraformPlanPolicy",
    "Enforcement",
    "LabelSelector",
    "PlanPolicyRule",
    "PlanPolicySpec",
    "TerraformPlanPolicy",
]

Enforcement = Literal["advisory", "gateAutoApply", "mandatory"]
RuleName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
TypeGlob = Annotated[str, StringConstraints(min_length=1, max_length=256)]


class SelectorRequirement(ApiModel):
    """One `matchExpressions` entry of a Kubernetes label selector."""

    key: str = Field(description="The label key.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="In, NotIn, Exists, DoesNotExist.")
    values: list[str] = Field(default_factory=list, description="Values for In and NotIn.")

    @model_validator(mode="after")
    def _values_match_operator(self) -> Self:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: {self.operator} takes no values")
        return self


class LabelSelector(ApiModel):
    """A Kubernetes label selector; empty selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict, description="Labels that must all be equal.")
    match_expressions: list[SelectorRequirement] = Field(default_factory=list, description="Requirements.")

    def matches(self, labels: dict[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        for req in self.match_expressions:
            present = req.key in labels
            if req.operator == "In" and (not present or labels[req.key] not in req.values):
                return False
            if req.operator == "NotIn" and present and labels[req.key] in req.values:
                return False
            if req.operator == "Exists" and not present:
                return False
            if req.operator == "DoesNotExist" and present:
                return False
        return True


class TypeFilter(ApiModel):
    types: list[TypeGlob] = Field(
        default_factory=list, description="Resource types it applies to (globs such as aws_db_*); empty: all."
    )


class MaxChanges(ApiModel):
    total: int | None = Field(default=None, ge=0, description="At most this many resources changed.")
    delete: int | None = Field(default=None, ge=0, description="At most this many resources deleted or replaced.")


class CelRule(ApiModel):
    expression: str = Field(min_length=1, description="A CEL expression that must be true for the plan to pass.")
    message: str | None = Field(default=None, max_length=500, description="Shown when it is false.")
    scope: Literal["resource", "plan"] = Field(
        default="resource",
        description="resource: evaluated per changing resource (variables `change` and `plan`), a false result "
        "names that resource; plan: once (variable `plan`, with `plan.resource_changes`).",
    )


class RegoRule(ApiModel):
    module: str = Field(
        min_length=1,
        description="A Rego module, conftest style: its `deny` and `violation` rules deny, `warn` warns; entries are "
        "messages, or objects with `msg` and `address`. The input is the plan JSON (sensitive values masked) plus "
        "`burrito.drift_correction`.",
    )


RULE_KINDS = ("no_destroy", "no_replace", "max_changes", "deny_types", "allow_types", "drift_update_only", "cel",
              "rego")


class PlanPolicyRule(ApiModel):
    """One rule: a name, deny or warn, and exactly one kind."""

    name: RuleName = Field(description="Unique within the policy; shown in status, events and notifications.")
    action: Literal["deny", "warn"] = Field(default="deny", description="deny (the policy's enforcement) or warn.")
    no_destroy: TypeFilter | None = Field(default=None, description="Deny deleting (or replacing) resources.")
    no_replace: TypeFilter | None = Field(default=None, description="Deny replacing resources.")
    max_changes: MaxChanges | None = Field(default=None, description="Bound the blast radius.")
    deny_types: list[TypeGlob] | None = Field(default=None, description="Deny changing resources of these types.")
    allow_types: list[TypeGlob] | None = Field(default=None, description="Deny changing resources of other types.")
    drift_update_only: dict[str, Any] | None = Field(
        default=None, description="A plan that corrects drift may only update resources in place ({})."
    )
    cel: CelRule | None = Field(default=None, description="A CEL expression.")
    rego: RegoRule | None = Field(default=None, description="A Rego module.")

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> Self:
        given = [kind for kind in RULE_KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            names = ", ".join(_camel(k) for k in RULE_KINDS)
            found = ", ".join(_camel(k) for k in given) or "none"
            raise ValueError(f"rule {self.name!r} must have exactly one of {names} (found {found})")
        return self

    @property
    def kind(self) -> str:
        return next(kind for kind in RULE_KINDS if getattr(self, kind) is not None)


def _camel(snake: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m.group(1).upper(), snake)


class OverrideBy(ApiModel):
    users: list[str] = Field(
        default_factory=list, description="Users (service accounts: system:serviceaccount:NS:NAME)."
    )
    groups: list[str] = Field(default_factory=list, description="Groups.")


class PlanPolicySpec(ApiModel):
    enforcement: Enforcement = Field(description="advisory, gateAutoApply or mandatory (required).")
    layer_selector: LabelSelector | None = Field(default=None, description="Which layers (by label); unset: all.")
    override_by: OverrideBy | None = Field(
        default=None, description="Who may override a mandatory denial of a plan (through the server)."
    )
    rules: list[PlanPolicyRule] = Field(min_length=1, description="The rules.")

    @model_validator(mode="after")
    def _unique_rule_names(self) -> Self:
        seen: set[str] = set()
        for rule in self.rules:
            if rule.name in seen:
                raise ValueError(f"rules: the name {rule.name!r} is used twice")
            seen.add(rule.name)
        return self


class ClusterPlanPolicySpec(PlanPolicySpec):
    namespace_selector: LabelSelector | None = Field(
        default=None, description="Which namespaces (by label); unset: all."
    )


class PlanPolicyStatus(ApiModel):
    """Written by the controllers once per generation (controllers/planpolicy/reconcile.py)."""

    conditions: list[Condition] = Field(
        default_factory=list,
        description="Ready: True when the policy is valid and each CEL and Rego rule compiles; False (reason "
        "Invalid or CompileFailed) names the rule and the compiler's message.",
    )
    observed_generation: int | None = Field(default=None, description="The generation the status describes.")


_COLUMNS = (
    PrinterColumn("Enforcement", "string", ".spec.enforcement"),
    PrinterColumn("Ready", "string", '.status.conditions[?(@.type=="Ready")].status'),
    AGE_COLUMN,
)


class TerraformPlanPolicy(Resource):
    """Rules over the plans of the layers of this namespace."""

    KIND: ClassVar[str] = "TerraformPlanPolicy"
    PLURAL: ClassVar[str] = "terraformplanpolicies"
    SINGULAR: ClassVar[str] = "terraformplanpolicy"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("tfpp",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = _COLUMNS

    kind: str = Field(default="TerraformPlanPolicy", description="TerraformPlanPolicy.")
    spec: PlanPolicySpec
    status: PlanPolicyStatus = Field(default_factory=PlanPolicyStatus)


class ClusterTerraformPlanPolicy(Resource):
    """Rules over the plans of layers in every namespace its namespaceSelector picks."""

    SCOPE: ClassVar[Literal["Namespaced", "Cluster"]] = "Cluster"
    KIND: ClassVar[str] = "ClusterTerraformPlanPolicy"
    PLURAL: ClassVar[str] = "clusterterraformplanpolicies"
    SINGULAR: ClassVar[str] = "clusterterraformplanpolicy"
    SHORT_NAMES: ClassVar[tuple[str, ...]] = ("ctfpp",)
    PRINTER_COLUMNS: ClassVar[tuple[PrinterColumn, ...]] = _COLUMNS

    kind: str = Field(default="ClusterTerraformPlanPolicy", description="ClusterTerraformPlanPolicy.")
    spec: ClusterPlanPolicySpec
    status: PlanPolicyStatus = Field(default_factory=PlanPolicyStatus)
