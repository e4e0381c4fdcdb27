"""The chart's generated files are up to date with the models, and values.yaml holds the models' defaults."""

from __future__ import annotations

import json

import jsonschema
import yaml

from burrito_py.api.crdgen import generate_crds
from burrito_py.chart.chartgen import CHART_DIR, KEEP_ANNOTATION, generate_chart_files, values_schema
from burrito_py.chart.values import ChartValues
from tests.unit.chart.rendering import rendered

REGENERATE = "run `burrito-py chart generate`"


def test_generated_chart_files_are_current() -> None:
    for relative, text in generate_chart_files().items():
        path = CHART_DIR / relative
        assert path.exists(), f"{relative} is missing: {REGENERATE}"
        assert path.read_text(encoding="utf-8") == text, f"{relative} is stale: {REGENERATE}"
    on_disk = {p.name for p in (CHART_DIR / "templates" / "crds").glob("*.yaml")}
    assert on_disk == {name for name in generate_crds()}, f"stale CRD templates: {REGENERATE}"


def test_chart_crds_are_the_crds_directory_kept_on_uninstall() -> None:
    """The CRDs the chart installs are crds/*.yaml (themselves checked against the models elsewhere), plus
    the keep annotation; their descriptions' `{{ }}` survive templating."""
    crds_dir = CHART_DIR.parents[1] / "crds"
    installed = {o["metadata"]["name"]: o for o in rendered("default") if o["kind"] == "CustomResourceDefinition"}
    assert len(installed) == len(generate_crds()) == 8
    for path in crds_dir.glob("*.yaml"):
        expected = yaml.safe_load(path.read_text())
        got = installed[expected["metadata"]["name"]]
        assert got["metadata"].pop("annotations") == KEEP_ANNOTATION
        assert got == expected, path.name
    assert "{{ kind | lower }}" in json.dumps(installed["applicationdefinitions.agl.burrito-py.io"])


def test_values_yaml_validates_and_equals_the_model_defaults() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    jsonschema.Draft202012Validator(values_schema()).validate(values)
    assert values == ChartValues().model_dump(mode="json", by_alias=True)
    assert ChartValues.model_validate(values) == ChartValues()


def test_schema_closes_every_object_of_ours() -> None:
    """additionalProperties false on every model; only Kubernetes-typed passthroughs are open maps."""
    schema = values_schema()
    open_maps = []

    def walk(node: object, where: str) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, where
            if node.get("additionalProperties") not in (None, False):
                open_maps.append(where)
            for key, value in node.items():
                walk(value, f"{where}/{key}")
        elif isinstance(node, list):
            for index, value in enumerate(node):
                walk(value, f"{where}[{index}]")

    walk(schema, "")
    assert open_maps, "free-form Kubernetes maps (resources, annotations...) are expected"
    assert all(
        where.rsplit("/", 1)[-1] in {"resources", "affinity", "annotations", "nodeSelector", "podAnnotations",
                                     "podLabels", "commonLabels", "labels", "items"}
        for where in open_maps
    ), open_maps


def test_values_reuse_the_settings_descriptions() -> None:
    from burrito_py.controllers.settings import ControllerSettings
    from burrito_py.datastore.backends import StorageSettings

    schema = values_schema()["$defs"]
    assert schema["ControllersConfig"]["properties"]["driftDetectionPeriod"]["description"] == (
        ControllerSettings.model_fields["drift_detection_period"].description
    )
    assert schema["S3Storage"]["properties"]["pathStyle"]["description"] == (
        StorageSettings.model_fields["s3_path_style"].description
    )
    assert schema["Runner"]["properties"]["terminationGracePeriodSeconds"]["minimum"] == 1
