"""Who may use a TerraformRepository from another namespace, free of pydantic: the model (repository.py), the
controllers' layer validation and the datastore's runner scope read the same rule (docs/architecture.md §8)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["EVERY_NAMESPACE", "SHARED_WITH_PATTERN", "shared_with"]

EVERY_NAMESPACE = "*"
# An entry of a repository's spec.allowedNamespaces: a namespace name, or `*`.
SHARED_WITH_PATTERN = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$"


def shared_with(repository: Mapping[str, Any], namespace: str) -> bool:
    """Whether layers of `namespace` may use this TerraformRepository (a body as the API holds it): its own
    namespace's always, another's only when its `spec.allowedNamespaces` names it or `*`."""
    if (repository.get("metadata") or {}).get("namespace") == namespace:
        return True
    allowed = (repository.get("spec") or {}).get("allowedNamespaces") or ()
    return isinstance(allowed, list) and (namespace in allowed or EVERY_NAMESPACE in allowed)
