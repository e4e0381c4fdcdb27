"""Pure helpers of the API emulator: selectors, patches, structural schemas, tables, tokens."""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from burrito_local.kube_patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from burrito_local.kube_resources import resources_from_crd
from burrito_local.kube_schema import CompiledSchema, prune_and_default
from burrito_local.kube_selectors import FieldSelector, LabelSelector
from burrito_local.kube_table import human_duration, json_path, table
from burrito_local.kube_tokens import TokenIssuer
from hypothesis import given
from hypothesis import strategies as st

keys = st.sampled_from(["a", "b", "c", "app"])
values = st.sampled_from(["x", "y", "z"])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=3),
                           lambda inner: st.dictionaries(keys, inner, max_size=3), max_leaves=8)


@given(st.dictionaries(keys, values), keys, st.sets(values, min_size=1))
def test_label_selector_set_operators_agree_with_their_definition(
    labels: dict[str, str], key: str, wanted: set[str]
) -> None:
    listed = ",".join(sorted(wanted))
    assert LabelSelector.parse(f"{key} in ({listed})").matches(labels) == (labels.get(key) in wanted)
    assert LabelSelector.parse(f"{key} notin ({listed})").matches(labels) == (labels.get(key) not in wanted)
    assert LabelSelector.parse(key).matches(labels) == (key in labels)
    assert LabelSelector.parse(f"!{key}").matches(labels) == (key not in labels)


@pytest.mark.parametrize("text", ["a in (x", "a b", "=x", "a in x", "a==", "!"])
def test_malformed_label_selectors_raise(text: str) -> None:
    if text == "a==":  # an empty value is legal
        assert LabelSelector.parse(text).matches({"a": ""})
        return
    with pytest.raises(ValueError):
        LabelSelector.parse(text)


def test_field_selector_reads_nested_fields_and_pins_names() -> None:
    selector = FieldSelector.parse("metadata.name=a,status.phase!=Running")
    assert selector.matches({"metadata": {"name": "a"}, "status": {"phase": "Pending"}})
    assert not selector.matches({"metadata": {"name": "a"}, "status": {"phase": "Running"}})
    assert selector.exact("metadata.name") == "a" and selector.fields == ["metadata.name", "status.phase"]
    with pytest.raises(ValueError):
        FieldSelector.parse("nonsense")


@given(json_values, json_values)
def test_merge_patch_never_mutates_its_inputs_and_is_idempotent(target: Any, patch: Any) -> None:
    before_target, before_patch = copy.deepcopy(target), copy.deepcopy(patch)
    once = merge_patch(target, patch)
    assert target == before_target and patch == before_patch
    assert merge_patch(once, patch) == once


def test_strategic_merge_patch_directives_and_primitive_merge_lists() -> None:
    target = {"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "x", "image": "1"}],
                                                          "tolerations": [{"key": "k"}]}}
    patched = strategic_merge_patch(target, {"metadata": {"finalizers": ["b", "a"]},
                                             "spec": {"tolerations": [{"key": "j"}],
                                                      "containers": [{"$patch": "replace"}, {"name": "y"}]}})
    assert patched["metadata"]["finalizers"] == ["a", "b"]
    assert patched["spec"]["tolerations"] == [{"key": "j"}]  # no merge key: replaced
    assert patched["spec"]["containers"] == [{"name": "y"}]
    assert target["spec"]["containers"] == [{"name": "x", "image": "1"}]
    with pytest.raises(PatchError):
        strategic_merge_patch(target, {"spec": {"containers": [{"image": "no-name"}]}})
    assert strategic_merge_patch(target, {"spec": {"$patch": "delete"}}) == {"metadata": {"finalizers": ["a"]}}


def test_json_patch_failures_are_patch_errors_and_bodies_must_be_lists() -> None:
    assert json_patch({"a": 1}, [{"op": "replace", "path": "/a", "value": 2}]) == {"a": 2}
    with pytest.raises(PatchError):
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    with pytest.raises(PatchError):
        json_patch({"a": 1}, [{"op": "remove", "path": "/b"}])
    with pytest.raises(TypeError):
        json_patch({"a": 1}, {"op": "remove"})


SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "size": {"type": "integer", "default": 3, "maximum": 5},
                "opt": {"type": "string", "nullable": True},
                "port": {"x-kubernetes-int-or-string": True},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "properties": {"n": {"type": "integer", "default": 1}}},
                "nested": {"type": "object", "default": {}, "properties": {
                    "deep": {"type": "string", "default": "d"}}},
            },
        }
    },
}


def test_structural_schema_prunes_defaults_and_keeps_preserved_fields() -> None:
    prepared = CompiledSchema(SCHEMA).prepare({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
                                               "spec": {"name": "a", "junk": 1, "size": None, "opt": None,
                                                        "free": {"anything": [1]}}, "top": True})
    assert prepared == {"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"},
                        "spec": {"name": "a", "size": 3, "opt": None, "free": {"anything": [1], "n": 1},
                                 "nested": {"deep": "d"}}}


def test_schema_errors_name_the_field_with_kubernetes_wording() -> None:
    compiled = CompiledSchema(SCHEMA)
    causes = compiled.causes({"spec": {"size": 9, "port": 1.5}})
    assert [(c["field"], c["reason"]) for c in causes] == [
        ("spec.name", "FieldValueRequired"), ("spec.port", "FieldValueInvalid"), ("spec.size", "FieldValueInvalid")]
    assert causes[2]["message"] == "Invalid value: 9: spec.size in body should be less than or equal to 5"
    assert compiled.causes({"spec": {"name": "a", "port": "http"}}) == []
    assert compiled.causes({"spec": {"name": "a", "port": 80}}) == []
    typed = compiled.causes({"spec": {"name": 5}})[0]
    assert typed["message"] == 'Invalid value: "integer": spec.name in body must be of type string: "integer"'


@given(json_values)
def test_pruning_never_mutates_its_input(value: Any) -> None:
    before = copy.deepcopy(value)
    prune_and_default(SCHEMA, value)
    assert value == before


@pytest.mark.parametrize(("seconds", "shown"), [
    (-5, "<invalid>"), (0, "0s"), (119, "119s"), (150, "2m30s"), (600, "10m"), (3 * 3600 + 600, "3h10m"),
    (20 * 3600, "20h"), (3 * 86400 + 3600, "3d1h"), (40 * 86400, "40d"), (800 * 86400, "2y70d"),
    (3000 * 86400, "8y"),
])
def test_human_duration_matches_kubectl_ages(seconds: int, shown: str) -> None:
    assert human_duration(seconds) == shown


def test_json_path_handles_fields_indexes_and_filters() -> None:
    obj = {"status": {"conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]},
           "spec": {"items": [{"name": "x"}], "dotted.key": 1}}
    assert json_path(obj, '.status.conditions[?(@.type=="Ready")].status') == "True"
    assert json_path(obj, ".spec.items[0].name") == "x"
    assert json_path(obj, "{.spec['dotted.key']}") == 1
    assert json_path(obj, ".spec.missing.deeper") is None and json_path(obj, ".spec.items[5]") is None


def test_table_uses_printer_columns_for_custom_resources() -> None:
    crd = {"spec": {"group": "g.io", "names": {"plural": "things", "kind": "Thing"}, "scope": "Namespaced",
                    "versions": [{"name": "v1", "served": True, "storage": True, "additionalPrinterColumns": [
                        {"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1},
                        {"name": "Tags", "type": "string", "jsonPath": ".spec.tags"}]}]}}
    resource = resources_from_crd(crd)[0]
    rendered = table(resource, [{"metadata": {"name": "t"}, "spec": {"size": 2, "tags": ["a"]}}], {}, "None")
    assert [c["name"] for c in rendered["columnDefinitions"]] == ["Name", "Size", "Tags"]
    assert rendered["columnDefinitions"][1]["priority"] == 1
    assert rendered["rows"] == [{"cells": ["t", 2, '["a"]']}]


def test_tokens_verify_only_our_signature_and_review_checks_time_and_objects() -> None:
    live = {("serviceaccounts", "ns", "sa"): "sa-uid"}
    issuer = TokenIssuer(lambda plural, ns, name: live.get((plural, ns, name)))
    token, expires = issuer.issue("ns", "sa", "sa-uid", ["aud"], 600)
    assert expires == pytest.approx(time.time() + 600, abs=2)
    assert issuer.review({"token": token, "audiences": ["aud"]})["authenticated"] is True
    other = TokenIssuer(lambda *_: "sa-uid")
    assert other.verify(token) is None and issuer.verify(other.issue("ns", "sa", "u", ["aud"], 600)[0]) is None
    issuer.clock = lambda: time.time() + 601
    assert issuer.review({"token": token, "audiences": ["aud"]})["authenticated"] is False
