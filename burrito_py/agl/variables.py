"""An instance's spec → Terraform variables: each top-level key becomes one variable, camelCase → snake_case.

Kubernetes manifests are camelCase and Terraform variables snake_case by convention, so `storagePool: fast`
becomes `storage_pool = "fast"`. The mapping must be unambiguous, because a variable silently taking the
value of another key would be a wrong apply: two keys naming the same variable are refused, and so are
keys Terraform cannot take as a variable name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from burrito_py.agl.errors import Invalid

__all__ = ["RESERVED_VARIABLES", "map_variables", "to_snake"]

# Terraform refuses these as variable names (they are meta-arguments of `module` blocks).
RESERVED_VARIABLES = frozenset({"source", "version", "providers", "count", "for_each", "lifecycle", "depends_on",
                                "locals"})
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
# A word boundary inside camelCase: `aB` (lower or digit, then upper), or `ABc` (the last capital of an
# acronym starts a new word: `HTTPPort` → `http_port`).
_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def to_snake(key: str) -> str:
    """`storagePool` → `storage_pool`, `HTTPPort` → `http_port`, `ipv4Cidr` → `ipv4_cidr`; snake_case stays."""
    return _BOUNDARY.sub("_", key).lower()


def map_variables(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The Terraform variables of a spec, or `Invalid` naming every offending key (`spec.<key>`)."""
    problems: list[tuple[str, str]] = []
    variables: dict[str, Any] = {}
    source: dict[str, str] = {}
    for key in sorted(spec):  # sorted: the same spec always reports the same first problem
        where = f"spec.{key}"
        if key.startswith("_"):
            problems.append((where, "keys starting with '_' are reserved and are not Terraform variables"))
            continue
        if not _KEY.match(key):
            problems.append((where, "must be a letter followed by letters, digits and '_' to be a Terraform variable"))
            continue
        name = to_snake(key)
        if name in RESERVED_VARIABLES:
            problems.append((where, f"maps to {name!r}, a name Terraform reserves"))
            continue
        if name in source:
            problems.append((where, f"maps to Terraform variable {name!r} like spec.{source[name]}; rename one"))
            continue
        source[name] = key
        variables[name] = spec[key]
    if problems:
        raise Invalid(problems[0][0], problems[0][1], problems)
    return variables
