"""The name template language and spec validation against openAPISchema."""

from __future__ import annotations

from typing import Any

import pytest

from burrito_py.agl.errors import Invalid
from burrito_py.agl.schema import check_schema, validate_spec
from burrito_py.agl.template import check_template, render_template

VALUES = {"name": "prod", "namespace": "team-a", "kind": "DNSZone", "group": "apps.burrito-py.io",
          "plural": "dnszones", "singular": "dnszone", "prefix": "dns-", "layer": "dns-prod"}


@pytest.mark.parametrize(("template", "rendered"), [
    ("{{ kind | lower }}-{{ name }}-outputs", "dnszone-prod-outputs"),
    ("{{kind|lower|upper}}", "DNSZONE"),
    ("plain", "plain"),
    ("{{ namespace }}/{{ name }}.tfstate", "team-a/prod.tfstate"),
    ("-backend-config=path=/state/{{ layer }}.tfstate", "-backend-config=path=/state/dns-prod.tfstate"),
])
def test_render(template: str, rendered: str) -> None:
    check_template(template, "f")
    assert render_template(template, VALUES, "f") == rendered


@pytest.mark.parametrize(("template", "reason"), [
    ("{{ nmae }}", "unknown variable 'nmae'"),
    ("{{ name | title }}", "unknown filter 'title'"),
    ("{{ name ", "unbalanced"),
    ("name }}", "unbalanced"),
    ("{{ {{ name }} }}", "unknown variable '{{ name'"),
])
def test_mistakes_are_named_with_the_field(template: str, reason: str) -> None:
    with pytest.raises(Invalid) as caught:
        check_template(template, "spec.backend.terraform.writeOutputsToSecret.name")
    assert caught.value.field == "spec.backend.terraform.writeOutputsToSecret.name"
    assert reason in caught.value.reason


SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["region"],
    "additionalProperties": False,
    "properties": {
        "size": {"type": "integer", "minimum": 1},
        "region": {"type": "string", "enum": ["eu", "us"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "network": {"type": "object", "properties": {"cidr": {"type": "string", "pattern": "^[0-9./]+$"}}},
    },
}


def test_a_valid_spec_passes() -> None:
    validate_spec(SCHEMA, {"size": 3, "region": "eu", "tags": ["a"], "network": {"cidr": "10.0.0.0/16"}})


@pytest.mark.parametrize(("spec", "field", "reason"), [
    ({"size": "x", "region": "eu"}, "spec.size", "'x' is not of type 'integer'"),
    ({"size": 0, "region": "eu"}, "spec.size", "0 is less than the minimum of 1"),
    ({"size": 1}, "spec.region", "is required"),
    ({"region": "mars"}, "spec.region", "'mars' is not one of ['eu', 'us']"),
    ({"region": "eu", "tags": ["a", 2]}, "spec.tags[1]", "2 is not of type 'string'"),
    ({"region": "eu", "network": {"cidr": "x"}}, "spec.network.cidr", "'x' does not match '^[0-9./]+$'"),
    ({"region": "eu", "colour": "red"}, "spec.colour", "is not a field of this kind"),
])
def test_errors_name_the_field(spec: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(Invalid) as caught:
        validate_spec(SCHEMA, spec)
    assert (caught.value.field, caught.value.reason) == (field, reason)
    assert str(caught.value) == f"{field}: {reason}"


def test_every_problem_is_reported_sorted_by_field() -> None:
    with pytest.raises(Invalid) as caught:
        validate_spec(SCHEMA, {"size": "x", "tags": [1]})
    assert [where for where, _ in caught.value.problems] == ["spec.region", "spec.size", "spec.tags[0]"]


def test_an_invalid_schema_is_named_in_the_definition() -> None:
    with pytest.raises(Invalid) as caught:
        check_schema({"type": "object", "properties": {"size": {"type": "integr"}}})
    assert caught.value.field == "spec.application.openAPISchema.properties.size.type"
    check_schema(SCHEMA)
