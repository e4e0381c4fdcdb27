"""The patch flavours kube-apiserver accepts. Every function returns new containers along the paths
it changes and never mutates its inputs (stored objects are shared, not copied)."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

# patchMergeKey of the list fields of the built-ins we serve (k8s.io/api struct tags).
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "secrets": "name",
    "conditions": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
}
# Primitive lists with patchStrategy "merge": a patch adds to them instead of replacing them.
MERGE_PRIMITIVE_LISTS = {"finalizers"}


class PatchError(Exception):
    """The patch does not apply to the object (the API answers 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge: like RFC 7386, but known lists merge by key, and `$patch` directives."""
    if not isinstance(patch, dict):
        raise PatchError("a strategic merge patch must be a JSON object")
    return _smp_object(target if isinstance(target, dict) else {}, patch)


def _smp_object(target: dict[str, Any], patch: dict[str, Any]) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if not k.startswith("$")}
    if directive == "delete":
        return None
    result = dict(target)
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            merged = _smp_object(current if isinstance(current, dict) else {}, value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and isinstance(result.get(key), list):
            result[key] = _smp_list(key, result[key], value)
        elif isinstance(value, list):
            result[key] = [
                _smp_object({}, item) if isinstance(item, dict) else copy.deepcopy(item)
                for item in value
                if not (isinstance(item, dict) and item.get("$patch") == "delete")
            ]
        else:
            result[key] = copy.deepcopy(value)
    return result


def _smp_list(field: str, target: list[Any], patch: list[Any]) -> list[Any]:
    if field in MERGE_PRIMITIVE_LISTS:
        return [*target, *(copy.deepcopy(v) for v in patch if v not in target)]
    key = MERGE_KEYS.get(field)
    if key is None or not all(isinstance(item, dict) for item in patch):
        if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
            return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
        return copy.deepcopy(patch)
    merged = list(target)
    for item in patch:
        if item.get("$patch") == "replace":
            return [copy.deepcopy(i) for i in patch if "$patch" not in i]
        if key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        index = next(
            (i for i, existing in enumerate(merged) if isinstance(existing, dict) and existing.get(key) == item[key]),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(_smp_object({}, item))
        else:
            merged[index] = _smp_object(merged[index], item)
    return merged


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902. A failed `test` or a bad path raises PatchError."""
    if not isinstance(operations, list):
        raise TypeError("a JSON patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(target, operations)
    except jsonpatch.JsonPatchTestFailed as exc:
        raise PatchError(f"testing value failed: {exc}") from None
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, IndexError) as exc:
        raise PatchError(str(exc) or type(exc).__name__) from None
