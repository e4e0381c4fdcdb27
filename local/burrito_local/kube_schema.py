"""Structural-schema handling of custom resources, in kube-apiserver's order: prune unknown fields,
apply defaults, then validate against `openAPIV3Schema` and word the failures as the real server does."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema

from burrito_local.kube_errors import field_cause

Obj = dict[str, Any]
_ROOT_KEPT = ("apiVersion", "kind", "metadata")
_REQUIRED = re.compile(r"^'(.+)' is a required property$")


def prune_and_default(schema: Mapping[str, Any], value: Any, dropped: list[str] | None = None, at: str = "") -> Any:
    """Return a new value: unknown fields dropped (unless preserved; their paths appended to `dropped`),
    nulls of non-nullable fields dropped, defaults filled in. The input is not modified."""
    if isinstance(value, dict):
        props: Mapping[str, Any] | None = schema.get("properties")
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        embedded = bool(schema.get("x-kubernetes-embedded-resource"))
        result: Obj = {}
        for key, item in value.items():
            sub: Mapping[str, Any] | None = None
            if props is not None and key in props:
                sub = props[key]
            elif isinstance(additional, dict):
                sub = additional
            elif not (preserve or additional is True or (embedded and key in _ROOT_KEPT)):
                if dropped is not None:
                    dropped.append(f"{at}.{key}" if at else str(key))
                continue  # pruned
            if sub is None:
                result[key] = copy.deepcopy(item)
            elif item is None and not sub.get("nullable"):
                continue  # a null is dropped before defaulting
            else:
                result[key] = prune_and_default(sub, item, dropped, f"{at}.{key}" if at else str(key))
        for key, sub in (props or {}).items():
            if key not in result and isinstance(sub, Mapping) and "default" in sub:
                result[key] = prune_and_default(sub, copy.deepcopy(sub["default"]))
        return result
    if isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            return [prune_and_default(items, item, dropped, f"{at}[{i}]") for i, item in enumerate(value)]
        return copy.deepcopy(value)
    return value


def _plain(schema: Any) -> Any:
    """Kubernetes' OpenAPI extensions → plain JSON Schema."""
    if isinstance(schema, list):
        return [_plain(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {
        k: (
            {name: _plain(sub) for name, sub in v.items()}
            if k == "properties" and isinstance(v, dict)
            else v
            if k in ("default", "enum", "example", "required")
            else _plain(v)
        )
        for k, v in schema.items()
        if not k.startswith("x-kubernetes") and k not in ("nullable", "format")
    }
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _go_value(value: Any) -> str:
    return json.dumps(value) if not isinstance(value, str) else f'"{value}"'


def _path(parts: Any) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


class CompiledSchema:
    """One version's `openAPIV3Schema`, compiled once when the CRD is registered."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self.schema = schema
        body = dict(_plain(schema))
        body["properties"] = {k: v for k, v in (body.get("properties") or {}).items() if k not in _ROOT_KEPT}
        body["required"] = [r for r in body.get("required") or () if r not in _ROOT_KEPT]
        if not body["required"]:
            body.pop("required")
        self._validator = jsonschema.Draft7Validator(body)

    def prepare(self, obj: Obj, dropped: list[str] | None = None) -> Obj:
        """Prune and default everything but the root's apiVersion/kind/metadata."""
        rest = prune_and_default(self.schema, {k: v for k, v in obj.items() if k not in _ROOT_KEPT}, dropped)
        return {**{k: obj[k] for k in _ROOT_KEPT if k in obj}, **rest}

    def causes(self, obj: Obj) -> list[Obj]:
        """422 causes ({reason, message, field}) for everything the schema refuses, sorted by field."""
        body = {k: v for k, v in obj.items() if k not in _ROOT_KEPT}
        found: list[Obj] = []
        for error in self._validator.iter_errors(body):
            where = _path(error.absolute_path)
            value = error.instance
            if error.validator == "required":
                m = _REQUIRED.match(error.message)
                missing = m.group(1) if m else "?"
                found.append(field_cause(f"{where}.{missing}" if where else missing, "Required value",
                                         "FieldValueRequired"))
            elif error.validator == "enum":
                allowed = ", ".join(_go_value(v) for v in error.validator_value)
                found.append(field_cause(where, f"Unsupported value: {_go_value(value)}: supported values: {allowed}",
                                         "FieldValueNotSupported"))
            elif error.validator == "type":
                actual = _JSON_TYPES.get(type(value), "null")
                wanted = error.validator_value
                wanted = wanted[0] if isinstance(wanted, list) else wanted
                found.append(field_cause(
                    where,
                    f'Invalid value: "{actual}": {where} in body must be of type {wanted}: "{actual}"',
                    "FieldValueTypeInvalid",
                ))
            else:
                message = f"Invalid value: {_go_value(value)}: {where} in body {_wording(error)}"
                found.append(field_cause(where, message))
        return sorted(found, key=lambda c: str(c["field"]))


def _wording(error: jsonschema.ValidationError) -> str:
    v = error.validator_value
    words = {
        "pattern": f"should match '{v}'",
        "minLength": f"should be at least {v} chars long",
        "maxLength": f"should be at most {v} chars long",
        "minimum": f"should be greater than or equal to {v}",
        "maximum": f"should be less than or equal to {v}",
        "exclusiveMinimum": f"should be greater than {v}",
        "exclusiveMaximum": f"should be less than {v}",
        "minItems": f"should have at least {v} items",
        "maxItems": f"should have at most {v} items",
        "minProperties": f"should have at least {v} properties",
        "maxProperties": f"should have at most {v} properties",
        "uniqueItems": "shouldn't contain duplicates",
        "multipleOf": f"should be a multiple of {v}",
        "additionalProperties": "must not have unknown fields",
    }
    return words.get(str(error.validator), f"is invalid: {error.message}")
