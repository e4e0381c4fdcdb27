"""Patterns of fields the runner reads, with what they mean, free of pydantic: the models (layer.py, run.py) and
the runner's own reading of its objects (runner/objects.py) share them."""

from __future__ import annotations

import re

from burrito_py.api.errors import PATTERN_EXPLANATIONS

__all__ = ["NAMESPACE_PATTERN", "OBJECT_NAME_PATTERN", "PLAN_SUM_PATTERN", "RELATIVE_PATH_PATTERN",
           "object_name_problem"]

# One path component that is not `..`: `.`, `.x…`, `..x…`, or anything not starting with a dot.
_COMPONENT = r"(\.|\.[^/.][^/]*|\.\.[^/]+|[^./][^/]*)"
# A non-empty repository-relative path: no leading `/`, no `..` component, no empty component (`a//b`);
# `.` (the repository root) and a trailing `/` are allowed.
RELATIVE_PATH_PATTERN = rf"^{_COMPONENT}(/{_COMPONENT})*/?$"
PATTERN_EXPLANATIONS[RELATIVE_PATH_PATTERN] = (
    "must be a non-empty path relative to the repository root, without a leading '/', '..' components or "
    "empty components ('.' is the root)"
)
# A plan's sum as the datastore computes it (a run's spec.artifact.sum).
PLAN_SUM_PATTERN = r"^sha256:[0-9a-f]{64}$"

# The name of a Secret, ConfigMap or other object a spec field refers to: a DNS subdomain, as Kubernetes names
# them. It becomes a segment of an API path (kube/client.py `path`): a `/`, `..` or `%2e%2e` there would name an
# object of another namespace (the HTTP client resolves dot segments), which the controllers may read and a tenant
# may not.
OBJECT_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
PATTERN_EXPLANATIONS[OBJECT_NAME_PATTERN] = (
    "must be an object name of the same namespace: lower-case letters, digits, '-' and '.' (a DNS subdomain), "
    "never a path"
)
_OBJECT_NAME = re.compile(OBJECT_NAME_PATTERN)
NAMESPACE_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
PATTERN_EXPLANATIONS[NAMESPACE_PATTERN] = "must be a namespace name: lower-case letters, digits and '-' (a DNS label)"


def object_name_problem(name: object) -> str | None:
    """Why `name` is not an object name a reference may hold (None: it is). A name is no secret: it is quoted."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty object name"
    if len(name) > 253 or not _OBJECT_NAME.match(name):
        return f"{name[:80]!r} {PATTERN_EXPLANATIONS[OBJECT_NAME_PATTERN]}"
    return None
