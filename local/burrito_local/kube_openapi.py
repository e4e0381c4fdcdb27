"""The API emulator's OpenAPI v3 documents, and the unknown-field check of built-in kinds.

The schemas of the built-in kinds are Kubernetes' own, as the `kubernetes-validate` package ships them
(JSON Schema converted from the apiserver's OpenAPI, for the version `/version` reports); custom resources
are documented by their CRD's `openAPIV3Schema`. kubectl reads these documents: `kubectl explain`, and
`kubectl apply`/`create`, which see that the server validates fields itself (`fieldValidation`) and leave
the checks to it. The same schemas tell the store which fields of a built-in object are unknown: dropped
silently (as Go's decoding drops them), reported as warnings (`fieldValidation=Warn`) or refused
(`Strict`, kubectl's default).
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections.abc import Iterable, Mapping
from importlib.resources import files
from typing import Any

from burrito_local.kube_resources import Resource

log = logging.getLogger(__name__)
Obj = dict[str, Any]
SCHEMA_VERSION = "v1.32.0"  # the version /version reports
_REF = "#/$defs/"
_COMPONENTS = "#/components/schemas/"
_PATCH_PARAMETERS = ("dryRun", "fieldManager", "fieldValidation", "force")


@functools.cache
def _raw_definitions() -> dict[str, Obj]:
    """Definition name (`io.k8s.api.core.v1.Pod`) → its JSON Schema, as kubernetes-validate ships it (the
    `local` extra; without it built-in kinds go undocumented and unchecked, as before). A package that no
    longer ships SCHEMA_VERSION gives its newest version instead."""
    try:
        root = files("kubernetes_validate") / "kubernetes-json-schema"
    except ModuleNotFoundError:
        log.warning("kubernetes-validate is not installed (pip install -e ./local): the emulator serves "
                    "no schemas of built-in kinds and does not check their fields")
        return {}
    wanted = root / f"{SCHEMA_VERSION}-local"
    if not wanted.is_dir():
        versions = [d.name for d in root.iterdir() if d.name.endswith("-local")]
        wanted = root / max(versions, key=lambda v: tuple(int(p) for p in v[1:].removesuffix("-local").split(".")))
    found: dict[str, Obj] = json.loads((wanted / "_definitions.json").read_text())["$defs"]
    return found


@functools.cache
def definition_for(group: str, version: str, kind: str) -> str | None:
    """The definition name of a built-in kind, from `x-kubernetes-group-version-kind`."""
    for name, schema in _raw_definitions().items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or ():
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return name
    return None


def _resolve(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_REF):
        return _raw_definitions()[ref[len(_REF):]]
    return schema


def _key_path(at: str, key: str) -> str:
    return f"{at}.{key}" if at else key


def prune_unknown(schema: Mapping[str, Any], value: Any, dropped: list[str], at: str = "") -> Any:
    """`value` without the fields `schema` does not declare (their paths, as Go's strict decoder names
    them, appended to `dropped`). Maps and free-form objects keep every key."""
    schema = _resolve(schema)
    if isinstance(value, dict):
        props: Mapping[str, Any] | None = schema.get("properties")
        additional = schema.get("additionalProperties")
        if props is None and not isinstance(additional, dict):
            return value  # free-form (RawExtension, FieldsV1, JSON): anything goes
        result: Obj = {}
        for key, item in value.items():
            sub = props.get(key) if props is not None else None
            if sub is None and isinstance(additional, dict):
                sub = additional
            if sub is None:
                dropped.append(_key_path(at, key))
                continue
            result[key] = prune_unknown(sub, item, dropped, _key_path(at, key))
        return result
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [prune_unknown(items, item, dropped, f"{at}[{i}]") for i, item in enumerate(value)]
    return value


def builtin_schema(resource: Resource) -> Obj | None:
    name = definition_for(resource.group, resource.version, resource.kind)
    return None if name is None else _raw_definitions()[name]


# -- OpenAPI v3 documents ----------------------------------------------------------------------------
def _openapi(schema: Any) -> Any:
    """JSON Schema (as kubernetes-validate has it) → the OpenAPI 3.0 form kube-apiserver serves."""
    if isinstance(schema, list):
        return [_openapi(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: Obj = {}
    for key, value in schema.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = _COMPONENTS + value.rpartition("/")[2]
        elif key == "type" and isinstance(value, list):
            types = [t for t in value if t != "null"]
            if types:
                out[key] = types[0]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _openapi(sub) for name, sub in value.items()}
        elif key in ("enum", "default", "example", "required", "x-kubernetes-group-version-kind",
                     "x-kubernetes-list-map-keys"):
            out[key] = copy.deepcopy(value)
        elif key not in ("$schema", "$id"):
            out[key] = _openapi(value)
    if "$ref" in out and len(out) > 1:  # OpenAPI 3.0 ignores siblings of $ref: wrap it, as kube does
        out = {**{k: v for k, v in out.items() if k != "$ref"}, "allOf": [{"$ref": out["$ref"]}]}
    return out


def _referenced(schema: Any) -> Iterable[str]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield value.rpartition("/")[2]
            elif key not in ("enum", "default", "example"):
                yield from _referenced(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _referenced(item)


def _closure(names: Iterable[str]) -> dict[str, Obj]:
    raw = _raw_definitions()
    found: dict[str, Obj] = {}
    pending = [n for n in names if n in raw]
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found[name] = raw[name]
        pending += [n for n in _referenced(raw[name]) if n in raw and n not in found]
    return found


def _crd_definition_name(resource: Resource) -> str:
    """`terraform.burrito-py.io`, v1alpha1, TerraformLayer → `io.burrito-py.terraform.v1alpha1.TerraformLayer`."""
    return ".".join([*reversed(resource.group.split(".")), resource.version, resource.kind])


def _crd_schema(resource: Resource) -> Obj:
    schema: Obj = copy.deepcopy(dict(resource.schema.schema)) if resource.schema is not None else {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = {"type": "string", "description": "APIVersion defines the versioned schema of this "
                           "representation of an object."}
    props["kind"] = {"type": "string", "description": "Kind is a string value representing the REST resource "
                     "this object represents."}
    props["metadata"] = {"allOf": [{"$ref": _COMPONENTS + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}],
                         "description": "Standard object's metadata."}
    schema["properties"] = props
    schema["x-kubernetes-group-version-kind"] = [
        {"group": resource.group, "version": resource.version, "kind": resource.kind}]
    return schema


def _paths(path_prefix: str, resources: list[Resource]) -> Obj:
    """One PATCH operation per resource: enough for kubectl to see that the server takes `fieldValidation`
    (kubectl then validates on the server) and to map the path to its kind."""
    paths: Obj = {}
    parameters = [{"name": n, "in": "query", "schema": {"type": "string", "uniqueItems": True}}
                  for n in _PATCH_PARAMETERS]
    for r in resources:
        scope = "/namespaces/{namespace}" if r.namespaced else ""
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        paths[f"/{path_prefix}{scope}/{r.plural}/{{name}}"] = {"patch": {
            "operationId": f"patch{r.kind}", "parameters": parameters, "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk, "responses": {}}}
    return paths


@functools.cache
def _builtin_document(path_prefix: str, resources: tuple[tuple[str, str, str, str, bool, str], ...]) -> bytes:
    """A built-in group version's document, serialised once (kubectl fetches it on every apply)."""
    served = [Resource(g, v, plural, "", kind, namespaced) for g, v, plural, kind, namespaced, _ in resources]
    names = [n for *_, n in resources if n]
    schemas = {name: _openapi(schema) for name, schema in sorted(_closure(names).items())}
    return json.dumps(_document(path_prefix, served, schemas)).encode()


def _document(path_prefix: str, resources: list[Resource], schemas: Obj) -> Obj:
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": SCHEMA_VERSION},
            "paths": _paths(path_prefix, resources), "components": {"schemas": schemas}}


def group_version_document(path_prefix: str, resources: list[Resource]) -> bytes:
    """The OpenAPI v3 document of one group version (`api/v1`, `apis/apps/v1`), as JSON bytes."""
    if not any(r.custom for r in resources):
        key = tuple(sorted((r.group, r.version, r.plural, r.kind, r.namespaced,
                            definition_for(r.group, r.version, r.kind) or "") for r in resources))
        return _builtin_document(path_prefix, key)
    schemas: Obj = {name: _openapi(schema)
                    for name, schema in sorted(_closure(["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]).items())}
    for r in resources:
        schemas[_crd_definition_name(r)] = _crd_schema(r)
    return json.dumps(_document(path_prefix, resources, schemas)).encode()
