"""Definition checks, the generated CRD, and an instance compiled into its TerraformLayer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from burrito_py.agl.compile import (
    LABEL_APP_GROUP,
    LABEL_APP_KIND,
    LABEL_APP_NAME,
    compile_instance,
    instance_of_layer,
)
from burrito_py.agl.definition import (
    AGL_CATEGORY,
    LABEL_DEFINITION,
    crd_for_definition,
    crd_up_to_date,
    parse_definition,
)
from burrito_py.agl.errors import Invalid
from burrito_py.agl.schema import UNDECLARED
from burrito_py.api import annotations as ann
from burrito_py.api.application import ApplicationDefinition
from burrito_py.api.layer import TerraformLayer

DEFINITION: dict[str, Any] = {
    "apiVersion": "agl.burrito-py.io/v1alpha1", "kind": "ApplicationDefinition",
    "metadata": {"name": "buckets", "resourceVersion": "1"},
    "spec": {
        "application": {"kind": "Bucket", "plural": "buckets", "singular": "bucket", "shortNames": ["bkt"],
                        "openAPISchema": {"type": "object", "description": "A storage bucket.",
                                          "properties": {"size": {"type": "integer"},
                                                         "storagePool": {"type": "string"}}}},
        "backend": {"type": "Terraform", "terraform": {
            "repository": {"name": "modules", "namespace": "platform"}, "branch": "main", "path": "modules/bucket",
            "prefix": "bkt-", "varsFrom": [{"kind": "Secret", "name": "cloud"}],
            "overrideRunnerSpec": {"extraInitArgs": ["-backend-config=path=/state/{{ namespace }}-{{ layer }}.tfstate"],
                                   "env": [{"name": "TF_LOG", "value": "INFO"}]}}},
    },
}


def instance(name: str = "photos", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "apps.burrito-py.io/v1alpha1", "kind": "Bucket",
            "metadata": {"name": name, "namespace": "team-a", "uid": "u-1", "generation": 1},
            "spec": spec or {"size": 3, "storagePool": "fast"}}


def definition(**changes: Any) -> ApplicationDefinition:
    body = copy.deepcopy(DEFINITION)
    body["spec"]["backend"]["terraform"].update(changes)
    return parse_definition(body)


def test_an_instance_becomes_its_layer() -> None:
    compiled = compile_instance(definition(), instance())
    assert compiled.layer_name == "bkt-photos"
    assert compiled.secret_name == "bucket-photos-outputs"
    layer = compiled.layer
    assert layer["metadata"] == {
        "name": "bkt-photos", "namespace": "team-a",
        "labels": {LABEL_APP_KIND: "Bucket", LABEL_APP_GROUP: "apps.burrito-py.io", LABEL_APP_NAME: "photos"},
        "ownerReferences": [{"apiVersion": "apps.burrito-py.io/v1alpha1", "kind": "Bucket", "name": "photos",
                             "uid": "u-1", "controller": True, "blockOwnerDeletion": True}],
    }
    assert layer["spec"] == {
        "repository": {"name": "modules", "namespace": "platform"}, "branch": "main", "path": "modules/bucket",
        "remediationStrategy": {"autoApply": False}, "approvePlan": "manual", "destroyResourcesOnDeletion": False,
        "vars": {"size": 3, "storage_pool": "fast"}, "varsFrom": [{"kind": "Secret", "name": "cloud"}],
        "writeOutputsToSecret": {"name": "bucket-photos-outputs"},
        "overrideRunnerSpec": {"extraInitArgs": ["-backend-config=path=/state/team-a-bkt-photos.tfstate"],
                               "env": [{"name": "TF_LOG", "value": "INFO"}]},
    }
    TerraformLayer.from_object(layer)  # what we write is a valid layer
    assert instance_of_layer(layer) == ("apps.burrito-py.io", "Bucket", "team-a", "photos")


def test_definition_settings_reach_the_layer() -> None:
    compiled = compile_instance(definition(approvePlan="auto", destroyResourcesOnDeletion=True,
                                           writeOutputsToSecret={"name": "{{ name }}-{{ kind | lower }}"},
                                           repository={"name": "modules"}), instance())
    spec = compiled.layer["spec"]
    assert (spec["approvePlan"], spec["remediationStrategy"], spec["destroyResourcesOnDeletion"]) == (
        "auto", {"autoApply": True}, True)
    assert spec["writeOutputsToSecret"] == {"name": "photos-bucket"}
    assert spec["repository"] == {"name": "modules", "namespace": "team-a"}, "unset: the instance's namespace"
    assert "annotations" not in compiled.layer["metadata"]


def test_the_definitions_plan_policies_judge_its_layers() -> None:
    compiled = compile_instance(definition(planPolicies=["no-destroy", "blast-radius"]), instance())
    assert compiled.layer["metadata"]["annotations"] == {ann.LAYER_PLAN_POLICIES: "no-destroy,blast-radius"}


def test_kinds_with_the_same_instance_name_get_different_secrets() -> None:
    vpc = copy.deepcopy(DEFINITION)
    vpc["spec"]["application"].update(kind="VPC", plural="vpcs", singular="vpc")
    a = compile_instance(parse_definition(DEFINITION), instance("prod"))
    b = compile_instance(parse_definition(vpc), {**instance("prod"), "kind": "VPC"})
    assert a.secret_name != b.secret_name == "vpc-prod-outputs"


def test_an_invalid_instance_names_every_field() -> None:
    with pytest.raises(Invalid) as caught:
        compile_instance(definition(), instance(size="x", _internal=1))
    assert caught.value.problems == (
        ("spec.size", "'x' is not of type 'integer'"),
        ("spec._internal", "keys starting with '_' are reserved and are not Terraform variables"),
    )


def test_attack_an_undeclared_field_never_sets_a_variable_the_platform_keeps() -> None:
    """Attack test: every key of an instance's spec became a Terraform variable once the spec passed the
    definition's schema, and JSON Schema lets undeclared keys through unless `additionalProperties: false`. A
    tenant set the module's variables the platform left out of the kind (`publicAccess: true` on a Bucket whose
    schema declares only size and storagePool) and the layer applied them. Now only declared fields become
    variables: the rest are refused, naming each, and nothing is compiled."""
    with pytest.raises(Invalid) as caught:
        compile_instance(definition(), instance(size=3, publicAccess=True, kmsKey="none"))
    assert caught.value.problems == (("spec.kmsKey", UNDECLARED), ("spec.publicAccess", UNDECLARED))
    assert caught.value.field == "spec.kmsKey"
    # What the definition declares still maps; a pattern declares the keys it matches; a kind the definition
    # opens on purpose (`additionalProperties`) or a kind without a schema takes any key, as documented.
    assert compile_instance(definition(), instance(size=3)).layer["spec"]["vars"] == {"size": 3}
    patterned = copy.deepcopy(DEFINITION)
    patterned["spec"]["application"]["openAPISchema"]["patternProperties"] = {"^tag[A-Z]": {"type": "string"}}
    assert compile_instance(parse_definition(patterned), instance(size=3, tagTeam="a")).layer["spec"]["vars"] == {
        "size": 3, "tag_team": "a"}
    for schema in ({**DEFINITION["spec"]["application"]["openAPISchema"], "additionalProperties": {"type": "string"}},
                   {}):
        kind = copy.deepcopy(DEFINITION)
        kind["spec"]["application"]["openAPISchema"] = schema
        assert compile_instance(parse_definition(kind), instance(size=3, extra="x")).layer["spec"]["vars"] == {
            "size": 3, "extra": "x"}


def test_layer_names_over_63_characters_are_refused_naming_them() -> None:
    name = "n" * 60
    with pytest.raises(Invalid) as caught:
        compile_instance(definition(), instance(name))
    assert caught.value.field == "metadata.name"
    assert f"'bkt-{name}'" in caught.value.reason and "64 characters" in caught.value.reason
    assert compile_instance(definition(), instance("n" * 59)).layer_name == "bkt-" + "n" * 59


def test_a_missing_spec_is_an_empty_one_and_a_non_object_spec_is_refused() -> None:
    body = instance()
    del body["spec"]
    assert compile_instance(definition(), body).layer["spec"]["vars"] == {}
    with pytest.raises(Invalid) as caught:
        compile_instance(definition(), {**body, "spec": [1]})
    assert caught.value.field == "spec"


@pytest.mark.parametrize(("path", "value", "field"), [
    (("application", "openAPISchema"), {"type": "nope"}, "spec.application.openAPISchema.type"),
    (("backend", "terraform", "writeOutputsToSecret"), {"name": "{{ nope }}"},
     "spec.backend.terraform.writeOutputsToSecret.name"),
    (("backend", "terraform", "overrideRunnerSpec"), {"extraPlanArgs": ["-x", "{{ name | nope }}"]},
     "spec.backend.terraform.overrideRunnerSpec.extraPlanArgs[1]"),
    (("application", "group"), "terraform.burrito-py.io", "spec.application"),
    (("application", "kind"), "bucket", "spec.application.kind"),
])
def test_definition_mistakes_are_named(path: tuple[str, ...], value: Any, field: str) -> None:
    body = copy.deepcopy(DEFINITION)
    node = body["spec"]
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    with pytest.raises(Invalid) as caught:
        parse_definition(body)
    assert caught.value.field == field


def test_the_generated_crd_serves_the_kind_with_a_free_spec_and_status() -> None:
    crd = crd_for_definition(parse_definition(DEFINITION))
    assert crd["metadata"] == {"name": "buckets.apps.burrito-py.io", "labels": {LABEL_DEFINITION: "buckets"}}
    spec = crd["spec"]
    assert spec["scope"] == "Namespaced" and spec["group"] == "apps.burrito-py.io"
    assert spec["names"] == {"kind": "Bucket", "listKind": "BucketList", "plural": "buckets", "singular": "bucket",
                             "shortNames": ["bkt"], "categories": [AGL_CATEGORY]}
    [version] = spec["versions"]
    assert version["subresources"] == {"status": {}}
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert props["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert props["spec"]["description"] == "A storage bucket."
    assert props["status"]["x-kubernetes-preserve-unknown-fields"] is True
    assert [c["name"] for c in version["additionalPrinterColumns"] if not c.get("priority")] == [
        "Ready", "Pending Approval", "Age"]
    served = {**crd, "spec": {**spec, "conversion": {"strategy": "None"}}, "status": {"conditions": []}}
    assert crd_up_to_date(served, crd), "fields the API server adds do not count"
    changed = copy.deepcopy(DEFINITION)
    changed["spec"]["application"]["shortNames"] = []
    assert not crd_up_to_date(served, crd_for_definition(parse_definition(changed)))


def test_attack_a_dependencys_output_never_feeds_a_variable_the_platform_keeps() -> None:
    """Attack test: `spec.dependsOn[].inputs` set module variables from an upstream's outputs, and its keys were
    only checked to be Terraform names, after the spec's own fields had been checked against the schema. A tenant
    made a layer of their own with outputs `flag = true` and `key = "attacker"` and fed them to a Bucket as
    `public_access` and `kms_key`: variables the kind does not expose, one of them set by the definition's
    `varsFrom` (which an upstream output overrides at run time). Now an input may feed only a declared field."""
    with pytest.raises(Invalid) as caught:
        inputs = {"public_access": "flag", "kms_key": "key", "storage_pool": "pool"}
        compile_instance(definition(), instance(size=3, dependsOn=[
            {"kind": "TerraformLayer", "name": "mine", "inputs": inputs}]), network_prefix)
    assert caught.value.problems == tuple(
        (f"spec.dependsOn[0].inputs.{name}", "is not a field of this kind: a dependency's output may feed only a "
         "declared field") for name in ("public_access", "kms_key"))
    # A declared field (storagePool) may be fed; a kind without a schema, or opened on purpose, takes any input.
    fed = compile_instance(definition(), instance(size=3, dependsOn=[
        {"kind": "TerraformLayer", "name": "mine", "inputs": {"storage_pool": "pool"}}]), network_prefix)
    assert fed.layer["spec"]["dependsOn"] == [{"name": "mine", "inputs": {"storage_pool": "pool"}}]
    open_kind = copy.deepcopy(DEFINITION)
    open_kind["spec"]["application"]["openAPISchema"] = {}
    assert compile_instance(parse_definition(open_kind), instance(size=3, dependsOn=[
        {"kind": "TerraformLayer", "name": "mine", "inputs": {"kms_key": "key"}}]), network_prefix).layer


def network_prefix(group: str, kind: str) -> str | None:
    return "net-" if (group, kind) == ("apps.burrito-py.io", "Network") else None


def with_property(name: str) -> ApplicationDefinition:
    """The Bucket definition with one more declared field."""
    body = copy.deepcopy(DEFINITION)
    body["spec"]["application"]["openAPISchema"]["properties"][name] = {"type": "string"}
    return parse_definition(body)


def test_an_instance_depends_on_instances_of_other_kinds() -> None:
    compiled = compile_instance(with_property("vpcId"), instance(size=3, dependsOn=[
        {"kind": "Network", "name": "main", "inputs": {"vpc_id": "vpc_id"}},
        {"kind": "TerraformLayer", "name": "account", "namespace": "platform", "triggerAlways": True}]),
        network_prefix)
    assert compiled.layer["spec"]["dependsOn"] == [
        {"name": "net-main", "inputs": {"vpc_id": "vpc_id"}},
        {"name": "account", "namespace": "platform", "triggerAlways": True}]
    assert "depends_on" not in compiled.layer["spec"]["vars"]  # reserved: never a variable
    TerraformLayer.model_validate(compiled.layer)


@pytest.mark.parametrize(("depends_on", "field", "reason"), [
    ("net", "spec.dependsOn", "must be a list"),
    ([{"kind": "Database", "name": "db"}], "spec.dependsOn[0].kind", "no ApplicationDefinition serves kind Database"),
    ([{"kind": "Network"}], "spec.dependsOn[0].name", "is required"),
    ([{"name": "x"}], "spec.dependsOn[0].kind", "is required"),
    ([{"kind": "Network", "name": "m", "inputs": {"1bad": "x"}}], "spec.dependsOn[0].inputs", "Terraform variable"),
    ([{"kind": "Network", "name": "m", "triggerAlways": "yes"}], "spec.dependsOn[0].triggerAlways", "true or false"),
    ([{"kind": "Network", "name": "m", "after": "x"}], "spec.dependsOn[0].after", "is not a field"),
    ([{"kind": "Network", "name": "m", "namespace": "Bad_NS"}], "spec.dependsOn[0].namespace", "namespace name"),
])
def test_bad_dependencies_name_the_field(depends_on: Any, field: str, reason: str) -> None:
    with pytest.raises(Invalid) as error:
        compile_instance(definition(), instance(size=3, dependsOn=depends_on), network_prefix)
    assert error.value.field == field and reason in error.value.reason
