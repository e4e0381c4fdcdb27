"""Render `charts/burrito-py` with the real Helm engine (helm-python-sdk) into Kubernetes objects."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

__all__ = ["CHART_DIR", "ChartRenderError", "render_chart", "render_chart_files"]


# Here, not in chartgen: chartgen imports the values model, and with it the controllers' settings, kopf and
# kubernetes_asyncio (~1 s of CPU), which `burrito-py dev` (chart mode) never needs to render and install.
CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "burrito-py"
# libyaml's loader where PyYAML was built with it: the pure-Python one took ~0.6 s of `dev`'s start on the
# 66 rendered objects (the CRDs' schemas are most of it); same documents either way.
_Loader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
        for document in yaml.load_all(files[path], Loader=_Loader):
            if document:
                objects.append(document)
    return objects
