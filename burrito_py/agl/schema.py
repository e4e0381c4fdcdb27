"""Instances' specs checked against their definition's `openAPISchema` (JSON Schema), errors naming the field.

The generated CRDs keep `spec` schemaless and the controller validates instead, so that (1) instances
stored before a definition tightened its schema are re-checked like new ones (the API server never
re-validates stored objects), (2) the schema may use all of JSON Schema rather than the structural
subset the API server accepts, and (3) every problem reads the same: `spec.size: 'x' is not of type
'integer'`, on the instance's `Ready` condition and in a Warning event.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError, ValidationError

from burrito_py.agl.errors import Invalid

__all__ = ["UNDECLARED", "check_schema", "undeclared_fields", "validate_spec"]

_VALIDATOR = jsonschema.Draft202012Validator
UNDECLARED = "is not a field of this kind (not among the properties of the definition's openAPISchema)"


def _path(parts: Iterable[Any], prefix: str) -> str:
    out = prefix
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def check_schema(schema: Mapping[str, Any], field: str = "spec.application.openAPISchema") -> None:
    """Raise `Invalid` when the definition's schema is not a valid JSON Schema."""
    try:
        _VALIDATOR.check_schema(schema)
    except SchemaError as error:
        raise Invalid(_path(error.absolute_path, field), error.message) from None


def _problem(error: ValidationError) -> tuple[str, str]:
    where = _path(error.absolute_path, "spec")
    if error.validator == "required" and isinstance(error.instance, Mapping):
        # jsonschema reports a missing property at its parent; name the property itself.
        missing = next((name for name in error.validator_value if name not in error.instance), None)
        if missing is not None:
            return f"{where}.{missing}", "is required"
    if error.validator == "additionalProperties" and isinstance(error.instance, Mapping):
        allowed = set((error.schema or {}).get("properties") or ())
        extra = sorted(name for name in error.instance if name not in allowed)
        if extra:
            return f"{where}.{extra[0]}", "is not a field of this kind"
    return where, error.message


def validate_spec(schema: Mapping[str, Any], spec: Any) -> None:
    """Raise `Invalid` with every problem of `spec`, sorted by field, the first one first."""
    problems = sorted({_problem(error) for error in _VALIDATOR(schema).iter_errors(spec)})
    if problems:
        raise Invalid(problems[0][0], problems[0][1], problems)


def undeclared_fields(schema: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """The top-level keys of `spec` the schema does not declare (`properties`, or a `patternProperties`
    pattern), sorted. Every key of a spec would become a Terraform variable, so a tenant could set the module's
    variables the definition keeps for the platform (left at their defaults: say, a bucket's public access). JSON
    Schema lets undeclared keys through unless `additionalProperties: false`; a Kubernetes schema drops them. Here
    they are refused, unless the definition opens the kind explicitly (`additionalProperties` set to anything but
    false) or has no schema at all (any spec, as documented). `additionalProperties: false` is `validate_spec`'s
    to report."""
    if not schema or "additionalProperties" in schema:
        return []
    declared = set(schema.get("properties") or ())
    patterns = [str(pattern) for pattern in schema.get("patternProperties") or ()]
    return sorted(key for key in spec if key not in declared and not any(_matches(p, str(key)) for p in patterns))


def _matches(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:  # a pattern Python cannot read declares nothing
        return False
