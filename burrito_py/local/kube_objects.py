"""Pure object operations of the API emulator: patches, selectors, schema validation and defaults."""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

import jsonpatch
import jsonschema

# Lists that strategic merge patch merges by key on the built-ins we serve.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
    "conditions": "type",
}


class PatchError(Exception):
    """A patch that cannot apply: the API answers 422."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, field_name: str | None = None) -> Any:
    if isinstance(patch, dict):
        result = dict(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if key.startswith("$"):
                continue
            if value is None:
                result.pop(key, None)
            else:
                result[key] = strategic_merge_patch(result.get(key), value, key)
        return result
    if isinstance(patch, list) and field_name in MERGE_KEYS and isinstance(target, list):
        merge_key = MERGE_KEYS[field_name]
        merged = [dict(item) if isinstance(item, dict) else item for item in target]
        for item in patch:
            if not isinstance(item, dict) or merge_key not in item:
                merged.append(copy.deepcopy(item))
                continue
            for i, existing in enumerate(merged):
                if isinstance(existing, dict) and existing.get(merge_key) == item[merge_key]:
                    if item.get("$patch") == "delete":
                        merged.pop(i)
                    else:
                        merged[i] = strategic_merge_patch(existing, item)
                    break
            else:
                if item.get("$patch") != "delete":
                    merged.append(strategic_merge_patch({}, item))
        return merged
    return copy.deepcopy(patch)


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    try:
        return jsonpatch.apply_patch(target, operations)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException, TypeError, KeyError, ValueError) as exc:
        raise PatchError(str(exc)) from None


# -- selectors ------------------------------------------------------------------------------------
_SET_EXPR = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")


def _split_selector(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return [p.strip() for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> list[tuple[str, str, set[str]]]:
    """→ [(key, op, values)] with op one of = != in notin exists !exists; ValueError when malformed."""
    requirements: list[tuple[str, str, set[str]]] = []
    for part in _split_selector(text or ""):
        if m := _SET_EXPR.match(part):
            requirements.append((m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}))
        elif "!=" in part:
            key, value = part.split("!=", 1)
            requirements.append((key.strip(), "!=", {value.strip()}))
        elif "==" in part or "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            requirements.append((key.strip(), "=", {value.strip()}))
        elif part.startswith("!"):
            requirements.append((part[1:].strip(), "!exists", set()))
        elif re.match(r"^[A-Za-z0-9./_-]+$", part):
            requirements.append((part, "exists", set()))
        else:
            raise ValueError(f"unable to parse requirement: {part!r}")
    return requirements


def labels_match(labels: Mapping[str, str], requirements: list[tuple[str, str, set[str]]]) -> bool:
    for key, op, values in requirements:
        present = key in labels
        value = labels.get(key)
        if (
            (op == "=" and value not in values)
            or (op == "!=" and value in values)
            or (op == "in" and value not in values)
            or (op == "notin" and present and value in values)
            or (op == "exists" and not present)
            or (op == "!exists" and present)
        ):
            return False
    return True


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return "" if node is None else str(node)


def parse_field_selector(text: str | None) -> list[tuple[str, bool, str]]:
    result = []
    for part in _split_selector(text or ""):
        if "!=" in part:
            key, value = part.split("!=", 1)
            result.append((key.strip(), False, value.strip()))
        elif "=" in part:
            key, value = part.split("==", 1) if "==" in part else part.split("=", 1)
            result.append((key.strip(), True, value.strip()))
        else:
            raise ValueError(f"invalid field selector: {part!r}")
    return result


def fields_match(obj: Mapping[str, Any], requirements: list[tuple[str, bool, str]]) -> bool:
    return all((_field_value(obj, key) == value) == equal for key, equal, value in requirements)


# -- schemas --------------------------------------------------------------------------------------
def apply_defaults_and_prune(schema: Mapping[str, Any], value: Any) -> Any:
    """Structural-schema defaulting and pruning, as the API server does before validation."""
    if isinstance(value, dict) and schema.get("type") == "object":
        if schema.get("x-kubernetes-preserve-unknown-fields"):
            props = schema.get("properties") or {}
            return {k: apply_defaults_and_prune(props[k], v) if k in props else v for k, v in value.items()}
        props = schema.get("properties")
        additional = schema.get("additionalProperties")
        result: dict[str, Any] = {}
        if props is not None:
            for key, sub in props.items():
                if key in value:
                    result[key] = apply_defaults_and_prune(sub, value[key])
                elif "default" in sub:
                    result[key] = copy.deepcopy(sub["default"])
            if isinstance(additional, dict):
                for key, sub_value in value.items():
                    if key not in props:
                        result[key] = apply_defaults_and_prune(additional, sub_value)
            return result
        if isinstance(additional, dict):
            return {k: apply_defaults_and_prune(additional, v) for k, v in value.items()}
        return dict(value)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults_and_prune(schema["items"], item) for item in value]
    return value


def _for_jsonschema(schema: Any) -> Any:
    """Kubernetes extensions → plain JSON schema (`nullable` allows null)."""
    if isinstance(schema, dict):
        out = {k: _for_jsonschema(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
        if schema.get("nullable") and "type" in out:
            out["type"] = [out["type"], "null"]
        if schema.get("x-kubernetes-int-or-string"):
            out.pop("type", None)
        return out
    if isinstance(schema, list):
        return [_for_jsonschema(item) for item in schema]
    return schema


def schema_errors(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> list[tuple[str, str]]:
    """[(field path like `spec.branch`, message)] for everything the schema refuses."""
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata")}
    plain = _for_jsonschema(
        {
            **schema,
            "properties": {
                k: v for k, v in (schema.get("properties") or {}).items() if k not in ("apiVersion", "kind", "metadata")
            },
        }
    )
    validator = jsonschema.Draft7Validator(plain)
    errors = []
    for error in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        path = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in error.absolute_path).replace(".[", "[")
        if error.validator == "required":
            missing = re.findall(r"'([^']+)' is a required property", error.message)
            path = ".".join(p for p in (path, missing[0] if missing else "") if p)
            errors.append((path, "Required value"))
        elif error.validator == "enum":
            allowed = ", ".join(f'"{v}"' for v in error.validator_value)
            errors.append((path, f"Unsupported value: {error.instance!r}: supported values: {allowed}"))
        else:
            errors.append((path, f"Invalid value: {error.message}"))
    return errors
