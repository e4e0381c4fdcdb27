"""An ApplicationDefinition checked as a whole, and the CustomResourceDefinition that serves its kind."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from burrito_py.agl.errors import Invalid
from burrito_py.agl.schema import check_schema
from burrito_py.agl.template import check_template
from burrito_py.api.application import (
    AGL_GROUP,
    APPS_VERSION,
    DEFAULT_OUTPUTS_SECRET_TEMPLATE,
    ApplicationDefinition,
)
from burrito_py.api.errors import InvalidSpec

__all__ = [
    "AGL_CATEGORY",
    "DEFINITION_FINALIZER",
    "EXTRA_ARGS",
    "LABEL_DEFINITION",
    "crd_for_definition",
    "crd_name",
    "crd_up_to_date",
    "parse_definition",
]

# Every generated CRD is in this category: the controller watches the category, so kinds defined at
# runtime are picked up without a restart (and `kubectl get burrito-py-apps` lists every instance).
AGL_CATEGORY = "burrito-py-apps"
# On each generated CRD: the definition serving it, so a definition never takes over another's CRD.
LABEL_DEFINITION = f"{AGL_GROUP}/definition"
# Holds a definition until its CRD is gone, which happens only once no instance remains.
DEFINITION_FINALIZER = f"{AGL_GROUP}/instances"
EXTRA_ARGS = ("extraInitArgs", "extraPlanArgs", "extraApplyArgs")


def parse_definition(body: Mapping[str, Any]) -> ApplicationDefinition:
    """The validated model, or `Invalid` naming the field: the model's rules, the schema, the templates."""
    try:
        definition = ApplicationDefinition.from_object(body)
    except InvalidSpec as error:
        raise Invalid(error.field_path, error.reason, error.problems) from None
    check_schema(definition.spec.application.open_api_schema)
    terraform = definition.spec.backend.terraform
    secret = terraform.write_outputs_to_secret
    check_template(secret.name if secret else DEFAULT_OUTPUTS_SECRET_TEMPLATE,
                   "spec.backend.terraform.writeOutputsToSecret.name")
    override = terraform.override_runner_spec.to_dict() if terraform.override_runner_spec else {}
    for key in EXTRA_ARGS:
        for index, arg in enumerate(override.get(key) or ()):
            check_template(arg, f"spec.backend.terraform.overrideRunnerSpec.{key}[{index}]")
    return definition


def crd_name(definition: ApplicationDefinition) -> str:
    application = definition.spec.application
    return f"{application.plural}.{application.group}"


def crd_for_definition(definition: ApplicationDefinition) -> dict[str, Any]:
    """The namespaced CRD serving the definition's kind.

    `spec` is kept schemaless on purpose (see agl/schema.py: the controller validates it against
    `openAPISchema`); `status` belongs to the controller."""
    application = definition.spec.application
    description = str(application.open_api_schema.get("description") or f"Desired {application.kind}.")
    schema = {
        "type": "object",
        "description": f"A {application.kind}, implemented by a TerraformLayer (ApplicationDefinition "
        f"{definition.name}).",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": {"type": "object", "description": description, "x-kubernetes-preserve-unknown-fields": True},
            "status": {"type": "object", "description": "Written by the AGL controller.",
                       "x-kubernetes-preserve-unknown-fields": True},
        },
    }
    columns = [
        {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
        {"name": "Pending Approval", "type": "string",
         "jsonPath": '.status.conditions[?(@.type=="PendingApproval")].status'},
        {"name": "Reason", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].reason',
         "priority": 1},
        {"name": "Layer", "type": "string", "jsonPath": ".status.layer", "priority": 1},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": crd_name(definition),
            "labels": {LABEL_DEFINITION: definition.name},
        },
        "spec": {
            "group": application.group,
            "names": {
                "kind": application.kind,
                "listKind": f"{application.kind}List",
                "plural": application.plural,
                "singular": application.singular,
                "shortNames": list(application.short_names),
                "categories": [AGL_CATEGORY],
            },
            "scope": "Namespaced",
            "versions": [{
                "name": APPS_VERSION,
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": schema},
                "subresources": {"status": {}},
                "additionalPrinterColumns": columns,
            }],
        },
    }


def crd_up_to_date(existing: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether the served CRD says what the definition wants (fields the API server adds are ignored)."""
    spec = existing.get("spec") or {}
    if any(spec.get(key) != value for key, value in desired["spec"].items()):
        return False
    labels = (existing.get("metadata") or {}).get("labels") or {}
    return all(labels.get(k) == v for k, v in desired["metadata"]["labels"].items())
