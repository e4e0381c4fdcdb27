"""Patterns of fields the runner reads, with what they mean, free of pydantic: the models (layer.py, run.py) and
the runner's own reading of its objects (runner/objects.py) share them."""

from __future__ import annotations

from burrito_py.api.errors import PATTERN_EXPLANATIONS

__all__ = ["PLAN_SUM_PATTERN", "RELATIVE_PATH_PATTERN"]

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
