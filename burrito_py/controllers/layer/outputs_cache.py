"""The outputs of each upstream layer's last apply, as the dependents read them (dependencies.py): held once
per apply so a dependent's reconcile does not read the datastore again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from burrito_py.kube.inventory import Key


@dataclass(frozen=True, slots=True)
class HeldOutputs:
    apply_run: str
    values: Mapping[str, Any]
    sensitive: frozenset[str]
    fingerprints: Mapping[str, str]


def read_outputs(raw: bytes, apply_run: str) -> HeldOutputs | None:
    """`terraform output -json` → values, the sensitive names and a fingerprint per output (None: unreadable)."""
    try:
        document = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(document, dict) or not all(isinstance(o, dict) and "value" in o for o in document.values()):
        return None
    values = {str(name): output["value"] for name, output in document.items()}
    sensitive = frozenset(str(name) for name, output in document.items() if output.get("sensitive"))
    fingerprints = {name: fingerprint(value) for name, value in values.items()}
    return HeldOutputs(apply_run, values, sensitive, fingerprints)


def fingerprint(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class OutputsCache:
    """The outputs of each upstream's last apply, read once per apply."""

    def __init__(self) -> None:
        self._held: dict[Key, HeldOutputs] = {}

    def get(self, key: Key, apply_run: str) -> HeldOutputs | None:
        held = self._held.get(key)
        return held if held is not None and held.apply_run == apply_run else None

    def put(self, key: Key, held: HeldOutputs) -> None:
        self._held[key] = held

    def forget(self, key: Key) -> None:
        self._held.pop(key, None)
