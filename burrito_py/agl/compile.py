"""An instance of a user kind → the TerraformLayer implementing it (pure).

The layer is `prefix + name` in the instance's namespace, owned by the instance (deleting the instance
deletes the layer by garbage collection), labelled with the instance's kind, group and name.

`spec.dependsOn` is reserved (never a variable): `[{kind, group?, name, namespace?, inputs?, triggerAlways?}]`
names other instances, of any served kind (`group` defaults to the instance's own), or `kind: TerraformLayer`
for a plain layer; each becomes an entry of the layer's `spec.dependsOn` naming that instance's layer
(docs/architecture.md §5.11, §12.2).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from burrito_py.agl.definition import EXTRA_ARGS
from burrito_py.agl.errors import Invalid
from burrito_py.agl.schema import UNDECLARED, undeclared_fields, validate_spec
from burrito_py.agl.template import render_template
from burrito_py.agl.variables import map_variables, to_snake
from burrito_py.api import annotations as ann
from burrito_py.api.application import APPS_GROUP, DEFAULT_OUTPUTS_SECRET_TEMPLATE, ApplicationDefinition

__all__ = [
    "LABEL_APP_GROUP",
    "LABEL_APP_KIND",
    "LABEL_APP_NAME",
    "MAX_LAYER_NAME",
    "CompiledInstance",
    "compile_instance",
    "instance_of_layer",
]

LABEL_APP_KIND = f"{APPS_GROUP}/application.kind"
LABEL_APP_GROUP = f"{APPS_GROUP}/application.group"
LABEL_APP_NAME = f"{APPS_GROUP}/application.name"
DEPENDS_ON = "dependsOn"
_TERRAFORM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,127}$")
_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# (group, kind) → the prefix of the layers of that kind's instances; None when no definition serves it.
PrefixOf = Callable[[str, str], str | None]
# Layer names end up in label values (`burrito-py.io/layer=<layer>` on runs and pods): 63 characters.
MAX_LAYER_NAME = 63
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class CompiledInstance:
    layer_name: str
    secret_name: str
    layer: dict[str, Any]  # the desired TerraformLayer: apiVersion, kind, metadata, spec


def _owner(instance: Mapping[str, Any]) -> dict[str, Any]:
    meta = instance["metadata"]
    return {"apiVersion": instance["apiVersion"], "kind": instance["kind"], "name": meta["name"],
            "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}


def _layer_name(prefix: str, name: str) -> str:
    layer = prefix + name
    if len(layer) > MAX_LAYER_NAME:
        raise Invalid("metadata.name", f"the TerraformLayer name {layer!r} (prefix {prefix!r} + name) is {len(layer)} "
                      f"characters; layer names are limited to {MAX_LAYER_NAME}")
    return layer


def _no_kinds(_group: str, _kind: str) -> str | None:
    return None


def instance_dependencies(raw: Any, group: str, prefix_of: PrefixOf) -> list[dict[str, Any]]:
    """An instance's `spec.dependsOn` as the layer's, or `Invalid` naming every offending field."""
    if not isinstance(raw, list):
        raise Invalid("spec.dependsOn", "must be a list of {kind, name, namespace, inputs, triggerAlways}")
    problems: list[tuple[str, str]] = []
    entries: list[dict[str, Any]] = []
    for index, entry in enumerate(raw):
        where = f"spec.dependsOn[{index}]"
        if not isinstance(entry, Mapping):
            problems.append((where, "must be an object {kind, name, namespace, inputs, triggerAlways}"))
            continue
        unknown = sorted(set(entry) - {"kind", "group", "name", "namespace", "inputs", "triggerAlways"})
        if unknown:
            problems.append((f"{where}.{unknown[0]}", "is not a field of a dependency"))
        kind, name = entry.get("kind"), entry.get("name")
        if not isinstance(name, str) or not name:
            problems.append((f"{where}.name", "is required: the name of the instance (or layer) depended on"))
            continue
        if not isinstance(kind, str) or not kind:
            problems.append((f"{where}.kind", "is required: the kind of the instance, or TerraformLayer"))
            continue
        if kind == "TerraformLayer":
            layer = name
        else:
            prefix = prefix_of(str(entry.get("group") or group), kind)
            if prefix is None:
                problems.append((f"{where}.kind", f"no ApplicationDefinition serves kind {kind} in group "
                                 f"{entry.get('group') or group}"))
                continue
            layer = prefix + name
        dependency: dict[str, Any] = {"name": layer}
        namespace = entry.get("namespace")
        if namespace is not None:
            if not isinstance(namespace, str) or not _DNS_NAME.match(namespace):
                problems.append((f"{where}.namespace", "must be a namespace name"))
                continue
            dependency["namespace"] = namespace
        inputs = entry.get("inputs", {})
        if not isinstance(inputs, Mapping) or not all(
                isinstance(k, str) and isinstance(v, str) and _TERRAFORM_NAME.match(k) and _TERRAFORM_NAME.match(v)
                for k, v in inputs.items()):
            problems.append((f"{where}.inputs", "must map Terraform variable names to output names"))
            continue
        if inputs:
            dependency["inputs"] = dict(inputs)
        trigger = entry.get("triggerAlways", False)
        if not isinstance(trigger, bool):
            problems.append((f"{where}.triggerAlways", "must be true or false"))
            continue
        if trigger:
            dependency["triggerAlways"] = True
        entries.append(dependency)
    if problems:
        raise Invalid(problems[0][0], problems[0][1], problems)
    return entries


def undeclared_inputs(schema: Mapping[str, Any] | None, dependencies: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The `spec.dependsOn[i].inputs` keys that name no field of the kind's schema, as problems. An input sets a
    module variable at run time from an upstream's output (over `vars` and `varsFrom`, §5.11), so it may feed only a
    variable the instance could set through its own spec: never one the definition keeps for the platform (its
    `varsFrom`, or a module default such as a bucket's public access)."""
    if not schema or "additionalProperties" in schema:
        return []  # no schema, or an open kind: any field is the instance's (`undeclared_fields`)
    declared = {to_snake(str(key)) for key in schema.get("properties") or ()}
    return [(f"spec.{DEPENDS_ON}[{index}].inputs.{name}",
             "is not a field of this kind: a dependency's output may feed only a declared field")
            for index, dependency in enumerate(dependencies) for name in dependency.get("inputs") or {}
            if name not in declared and undeclared_fields(schema, {name: None})]


def _refuse(undeclared: list[str]) -> None:
    if undeclared:
        problems = [(f"spec.{key}", UNDECLARED) for key in undeclared]
        raise Invalid(problems[0][0], problems[0][1], problems)


def compile_instance(definition: ApplicationDefinition, instance: Mapping[str, Any],
                     prefix_of: PrefixOf = _no_kinds) -> CompiledInstance:
    """The desired layer of a valid instance, or `Invalid` naming the instance's offending field.

    `prefix_of` resolves the kinds its `spec.dependsOn` names."""
    application = definition.spec.application
    terraform = definition.spec.backend.terraform
    meta = instance["metadata"]
    name, namespace = str(meta["name"]), str(meta.get("namespace") or "")
    spec = instance.get("spec")
    spec = {} if spec is None else spec
    if not isinstance(spec, Mapping):
        raise Invalid("spec", f"must be an object, not {type(spec).__name__}")
    raw_dependencies = spec.get(DEPENDS_ON)
    spec = {k: v for k, v in spec.items() if k != DEPENDS_ON}
    # Every problem at once, so a tenant fixes the manifest in one go.
    problems: list[tuple[str, str]] = []
    variables: dict[str, Any] = {}
    dependencies: list[dict[str, Any]] = []
    # Only declared fields become variables: an undeclared one is refused (`undeclared_fields`), never mapped. A
    # `_` key is refused as reserved by `map_variables`, which says more.
    undeclared = [key for key in undeclared_fields(application.open_api_schema, spec) if not str(key).startswith("_")]
    declared = {k: v for k, v in spec.items() if k not in undeclared}
    for check in (lambda: validate_spec(application.open_api_schema, spec) if application.open_api_schema else None,
                  lambda: _refuse(undeclared),
                  lambda: variables.update(map_variables(declared)),
                  lambda: _layer_name(terraform.prefix, name),
                  lambda: dependencies.extend(instance_dependencies(raw_dependencies, application.group, prefix_of))
                  if raw_dependencies is not None else None):
        try:
            check()
        except Invalid as error:
            problems.extend(p for p in error.problems if p not in problems)
    problems.extend(undeclared_inputs(application.open_api_schema, dependencies))
    if problems:
        raise Invalid(problems[0][0], problems[0][1], problems)
    layer_name = terraform.prefix + name

    values = {"name": name, "namespace": namespace, "kind": application.kind, "group": application.group,
              "plural": application.plural, "singular": application.singular, "prefix": terraform.prefix,
              "layer": layer_name}
    template_field = "spec.backend.terraform.writeOutputsToSecret.name"
    template = terraform.write_outputs_to_secret.name if terraform.write_outputs_to_secret else None
    secret = render_template(template or DEFAULT_OUTPUTS_SECRET_TEMPLATE, values, template_field)
    if len(secret) > 253 or not _SUBDOMAIN.match(secret):
        raise Invalid("metadata.name", f"the outputs Secret name {secret!r} (from the definition's {template_field}) "
                      "is not a valid Secret name")

    layer_spec: dict[str, Any] = {
        "repository": {"name": terraform.repository.name, "namespace": terraform.repository.namespace or namespace},
        "branch": terraform.branch,
        "path": terraform.path,
        # approvePlan is what the layer controller obeys; autoApply says the same to anything reading only it.
        "remediationStrategy": {"autoApply": terraform.approve_plan == "auto"},
        "approvePlan": terraform.approve_plan,
        "destroyResourcesOnDeletion": terraform.destroy_resources_on_deletion,
        "vars": variables,
        "varsFrom": [source.to_dict() for source in terraform.vars_from],
        "writeOutputsToSecret": {"name": secret},
    }
    if dependencies:
        layer_spec["dependsOn"] = dependencies
    if terraform.override_runner_spec is not None:
        override = terraform.override_runner_spec.model_dump(mode="json", by_alias=True, exclude_none=True,
                                                             exclude_defaults=True)
        for key in EXTRA_ARGS:
            if key in override:
                override[key] = [render_template(arg, values, f"spec.backend.terraform.overrideRunnerSpec.{key}")
                                 for arg in override[key]]
        layer_spec["overrideRunnerSpec"] = override

    layer = {
        "apiVersion": ann.API_VERSION,
        "kind": "TerraformLayer",
        "metadata": {
            "name": layer_name,
            "namespace": namespace,
            "labels": {LABEL_APP_KIND: application.kind, LABEL_APP_GROUP: application.group, LABEL_APP_NAME: name},
            **({"annotations": {ann.LAYER_PLAN_POLICIES: ",".join(terraform.plan_policies)}}
               if terraform.plan_policies else {}),
            "ownerReferences": [_owner(instance)],
        },
        "spec": layer_spec,
    }
    return CompiledInstance(layer_name, secret, layer)


def instance_of_layer(layer: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """(group, kind, namespace, name) of the instance a layer implements, from its labels."""
    meta = layer.get("metadata") or {}
    labels = meta.get("labels") or {}
    kind, group, name = labels.get(LABEL_APP_KIND), labels.get(LABEL_APP_GROUP), labels.get(LABEL_APP_NAME)
    if not (kind and group and name):
        return None
    return str(group), str(kind), str(meta.get("namespace") or ""), str(name)
