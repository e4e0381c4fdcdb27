"""The difference between two versions of a layer's state (docs/architecture.md §10.6, §11.2), pure.

Resource instances are compared by address (`module.m.type.name[key]`, `data.` for data sources): added, removed,
and changed with the names of the attributes that differ. No value is ever part of the answer, sensitive or not:
a state holds secrets Terraform does not always mark (an attribute computed from a Secret-fed variable), and the
names say what changed; whoever may see values downloads the version (`get secrets`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["instances", "state_diff"]


def _address(resource: Mapping[str, Any], instance: Mapping[str, Any]) -> str:
    module = str(resource.get("module") or "")
    prefix = f"{module}." if module else ""
    data = "data." if resource.get("mode") == "data" else ""
    key = instance.get("index_key")
    index = "" if key is None else f"[{json.dumps(key)}]" if isinstance(key, str) else f"[{key}]"
    return f"{prefix}{data}{resource.get('type')}.{resource.get('name')}{index}"


def instances(state: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Each resource instance's attributes by address."""
    found: dict[str, Mapping[str, Any]] = {}
    for resource in state.get("resources") or ():
        if not isinstance(resource, Mapping):
            continue
        for instance in resource.get("instances") or ():
            if isinstance(instance, Mapping):
                attributes = instance.get("attributes")
                found[_address(resource, instance)] = attributes if isinstance(attributes, Mapping) else {}
    return found


def state_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """`{from, to, added, removed, changed: [{address, attributes}], outputs: {added, removed, changed}}`, sorted;
    names only (see the module's docstring)."""
    before, after = instances(old), instances(new)
    changed = [
        {"address": address, "attributes": sorted(name for name in set(before[address]) | set(after[address])
                                                  if before[address].get(name) != after[address].get(name))}
        for address in sorted(set(before) & set(after)) if before[address] != after[address]
    ]
    outputs_before = old.get("outputs") if isinstance(old.get("outputs"), Mapping) else {}
    outputs_after = new.get("outputs") if isinstance(new.get("outputs"), Mapping) else {}
    assert isinstance(outputs_before, Mapping) and isinstance(outputs_after, Mapping)
    return {
        "from": old.get("serial"),
        "to": new.get("serial"),
        "added": sorted(set(after) - set(before)),
        "removed": sorted(set(before) - set(after)),
        "changed": changed,
        "outputs": {
            "added": sorted(set(outputs_after) - set(outputs_before)),
            "removed": sorted(set(outputs_before) - set(outputs_after)),
            "changed": sorted(name for name in set(outputs_before) & set(outputs_after)
                              if outputs_before[name] != outputs_after[name]),
        },
    }
