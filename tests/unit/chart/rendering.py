"""The chart's value sets (charts/burrito-py/ci/*-values.yaml plus the defaults), each rendered once."""

from __future__ import annotations

from typing import Any

import yaml

from burrito_py.chart.chart import CHART_DIR, render_chart

RELEASE, NAMESPACE = "burrito-py", "burrito-py-system"
CI_DIR = CHART_DIR / "ci"


def value_sets() -> dict[str, dict[str, Any]]:
    sets: dict[str, dict[str, Any]] = {"default": {}}
    for path in sorted(CI_DIR.glob("*-values.yaml")):
        sets[path.name.removesuffix("-values.yaml")] = yaml.safe_load(path.read_text()) or {}
    return sets


VALUE_SETS = value_sets()
_RENDERED: dict[str, list[dict[str, Any]]] = {}


def rendered(name: str) -> list[dict[str, Any]]:
    if name not in _RENDERED:
        _RENDERED[name] = render_chart(VALUE_SETS[name], RELEASE, NAMESPACE)
    return _RENDERED[name]


def find(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]
