"""Render `charts/burrito-py` with the real Helm engine (helm-python-sdk) into Kubernetes objects."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from burrito_py.chart.chartgen import CHART_DIR

__all__ = ["CHART_DIR", "ChartRenderError", "render_chart", "render_chart_files"]


class ChartRenderError(ValueError):
    """Helm refused the values (schema, `required`, `fail`) or a template; the message is Helm's."""


def render_chart_files(
    values: Mapping[str, Any] | None, release: str, namespace: str, chart_dir: Path = CHART_DIR
) -> dict[str, str]:
    """Template path → rendered text, as Helm produces it (values checked against values.schema.json)."""
    import helm_python

    try:
        chart = helm_python.Chart.load(chart_dir)
        rendered: dict[str, str] = chart.render(dict(values or {}), name=release, namespace=namespace)
    except helm_python.HelmError as exc:
        raise ChartRenderError(str(exc)) from None
    return rendered


def render_chart(
    values: Mapping[str, Any] | None, release: str, namespace: str, chart_dir: Path = CHART_DIR
) -> list[dict[str, Any]]:
    """The rendered objects, in template order (CRDs first), without empty documents and NOTES.txt."""
    files = render_chart_files(values, release, namespace, chart_dir)
    objects: list[dict[str, Any]] = []
    for path in sorted(files, key=lambda p: (not p.split("/", 2)[-1].startswith("templates/crds/"), p)):
        if path.endswith("NOTES.txt"):
            continue
        for document in yaml.safe_load_all(files[path]):
            if document:
                objects.append(document)
    return objects
