"""The layer's Terraform variables, merged into `burrito-py.auto.tfvars.json` (pure, apart from `write_tfvars`).
The controllers resolve `spec.varsFrom` with `source_values` into the run's inputs record
(controllers/layer/run_inputs.py); the runner reads that record (`parse_inputs`) and never a Secret or ConfigMap.

Order: `spec.vars`, then each `spec.varsFrom` entry in turn; a later entry wins over earlier ones and over
`spec.vars`. A Secret's or ConfigMap's keys are the variable names, and its values are used as-is, as strings:
Terraform converts a string to a `number` or `bool` variable itself, and guessing JSON from a string would make
the value `"007"` or `"true"` change type behind the user's back. Structured values belong in `spec.vars`.

Secret values are secrets: no message raised here ever contains a value, only kinds, names and keys.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the runner imports this module: no pydantic at run time
    from burrito_py.api.layer import VarsSource

__all__ = [
    "TFVARS_FILE",
    "Inputs",
    "VariablesError",
    "merge_variables",
    "object_values",
    "parse_inputs",
    "source_values",
    "write_tfvars",
]

TFVARS_FILE = "burrito-py.auto.tfvars.json"


class VariablesError(Exception):
    """A varsFrom entry cannot be satisfied. The message names kind, namespace, name and key, never a value."""


def _where(source: VarsSource, namespace: str, index: int) -> str:
    return f"{source.kind} {namespace}/{source.name} (spec.varsFrom[{index}])"


def object_values(source: VarsSource, namespace: str, index: int, obj: Mapping[str, Any]) -> dict[str, str]:
    """Every key of a Secret (`data`, base64) or ConfigMap (`data`) as a string."""
    data = obj.get("data") or {}
    if not isinstance(data, Mapping):
        raise VariablesError(f"{_where(source, namespace, index)} has a malformed data field")
    if source.kind == "ConfigMap":
        return {str(k): str(v) for k, v in data.items()}
    values: dict[str, str] = {}
    for key, encoded in data.items():
        try:
            values[str(key)] = base64.b64decode(str(encoded), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise VariablesError(
                f"{_where(source, namespace, index)}: key {key!r} is not UTF-8 text, so it cannot be a variable"
            ) from None
    return values


def source_values(source: VarsSource, namespace: str, index: int, obj: Mapping[str, Any] | None) -> dict[str, str]:
    """The variables one varsFrom entry contributes, given the object read (None: it does not exist)."""
    optional = bool(source.optional)
    if obj is None:
        if optional:
            return {}
        raise VariablesError(f"{_where(source, namespace, index)} does not exist")
    values = object_values(source, namespace, index, obj)
    if source.keys is None:
        return values
    missing = [key for key in source.keys if key not in values]
    if missing and not optional:
        raise VariablesError(f"{_where(source, namespace, index)} has no key {', '.join(map(repr, missing))}")
    return {key: values[key] for key in source.keys if key in values}


def merge_variables(vars_: Mapping[str, Any] | None, sources: Iterable[Mapping[str, str]]) -> dict[str, Any]:
    """`spec.vars`, then each source's values in order (varsFrom, then the upstream inputs): the last one to set a
    variable wins."""
    merged: dict[str, Any] = dict(vars_ or {})
    for values in sources:
        merged.update(values)
    return merged


class Inputs(NamedTuple):
    """The run's inputs record as the runner uses it: every variable it is given (varsFrom values, then upstream
    outputs), the sensitive ones, the ones whose value came from a Secret, and why the varsFrom could not be
    satisfied (`error`, names only)."""

    variables: dict[str, Any]
    sensitive: list[str]
    secret: list[str]
    error: str | None = None

    def masked(self) -> dict[str, str]:
        """The values to mask in the log, by variable name (as text: a structured value as its JSON)."""
        return {name: value if isinstance(value, str) else json.dumps(value)
                for name in {*self.sensitive, *self.secret} if (value := self.variables.get(name)) is not None}


def parse_inputs(raw: bytes, digest: str | None) -> Inputs:
    """The run's inputs record (controllers/layer/run_inputs.py). With `digest` (the run's inputs-digest annotation),
    the record must be the one the run was created with; a message never holds a value."""
    try:
        record = json.loads(raw)
    except ValueError:
        raise VariablesError("the run's inputs are not JSON") from None
    if not isinstance(record, dict) or not isinstance(record.get("variables"), dict):
        raise VariablesError("the run's inputs are not an inputs record")
    if digest is not None and record.get("digest") != digest:
        raise VariablesError(f"the run's inputs are of digest {record.get('digest')!r}, not {digest!r} as the run "
                             "was created with")
    variables = {str(k): v for k, v in record["variables"].items()}
    listed = [str(name) for name in record.get("sensitive") or () if name in variables]
    secret = [str(name) for name in record.get("secretVariables") or () if name in variables]
    error = record.get("error")
    return Inputs(variables, listed, secret, str(error) if error else None)


def write_tfvars(directory: Path, variables: Mapping[str, Any]) -> Path:
    """Write the variables for Terraform to auto-load, readable by this user only (they may hold secrets)."""
    target = directory / TFVARS_FILE
    target.unlink(missing_ok=True)  # a file of that name in the repository would keep its own mode
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(variables, handle, indent=2, sort_keys=True)
    return target
