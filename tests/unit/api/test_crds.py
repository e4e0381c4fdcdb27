"""The generated CRDs: up to date in crds/, structural, and as strict as the models on example manifests."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from burrito_py.api.annotations import API_VERSION, GROUP, VERSION
from burrito_py.api.application import AGL_API_VERSION, AGL_GROUP, ApplicationDefinition
from burrito_py.api.common import Resource
from burrito_py.api.crdgen import RESOURCES, crd_filename, generate_crds, render_crd, write_crds
from burrito_py.api.errors import InvalidSpec
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.notifier import TerraformNotifier
from burrito_py.api.policy import ClusterTerraformPlanPolicy, TerraformPlanPolicy
from burrito_py.api.pullrequest import TerraformPullRequest
from burrito_py.api.repository import TerraformRepository
from burrito_py.api.run import TerraformRun
from burrito_py.api.runner_contract import OTHER_VOLUME_SOURCES

CRDS_DIR = Path(__file__).resolve().parents[3] / "crds"


def schema_of(resource: type[Resource]) -> dict[str, Any]:
    crd = generate_crds()[crd_filename(resource)]
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def walk(node: Any, path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every schema node, with where it is."""
    if not isinstance(node, Mapping):
        return
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), Mapping):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from walk(node["additionalProperties"], f"{path}.*")


# ---------------------------------------------------------------------------------------------- staleness


def test_committed_crds_are_up_to_date() -> None:
    generated = {name: render_crd(crd) for name, crd in generate_crds().items()}
    committed = {path.name: path.read_text(encoding="utf-8") for path in CRDS_DIR.glob("*.yaml")}
    stale = sorted(name for name in generated.keys() | committed.keys() if generated.get(name) != committed.get(name))
    assert not stale, f"crds/ is stale ({', '.join(stale)}): run `burrito-py crds generate` and commit the result"


def test_write_crds_writes_every_kind_atomically_and_idempotently(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "crds"
    paths = write_crds(out)
    assert sorted(p.name for p in paths) == sorted(generate_crds())
    assert sorted(p.name for p in out.iterdir()) == sorted(generate_crds()), "no temporary files left behind"
    before = {p: (p.stat().st_mtime_ns, p.read_text()) for p in paths}
    assert write_crds(out) == paths
    assert {p: (p.stat().st_mtime_ns, p.read_text()) for p in paths} == before, "unchanged files are not rewritten"
    for path in paths:
        loaded = yaml.safe_load(path.read_text())
        assert loaded == generate_crds()[path.name]


def test_rendering_is_deterministic() -> None:
    assert [render_crd(c) for c in generate_crds().values()] == [render_crd(c) for c in generate_crds().values()]


# ------------------------------------------------------------------------------------------ CRD envelope


@pytest.mark.parametrize(
    ("resource", "plural", "short_names", "columns"),
    [
        (TerraformRepository, "terraformrepositories", ["tfr", "tfrs"], ["State", "URL", "Age"]),
        (TerraformLayer, "terraformlayers", ["tfl", "layer"],
         ["State", "Repository", "Branch", "Path", "Last Result", "Drift", "Age"]),
        (TerraformRun, "terraformruns", ["tfrun", "run"],
         ["State", "Action", "Layer", "Retries", "Runner Pod", "Requested By", "Age"]),
    ],
)
def test_crd_names_scope_subresources_and_columns(
    resource: type[Resource], plural: str, short_names: list[str], columns: list[str]
) -> None:
    crd = generate_crds()[f"terraform.burrito-py.io_{plural}.yaml"]
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == f"{plural}.{GROUP}"
    spec = crd["spec"]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": resource.KIND,
        "listKind": f"{resource.KIND}List",
        "plural": plural,
        "singular": resource.KIND.lower(),
        "shortNames": short_names,
        "categories": ["burrito-py"],
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (VERSION, True, True)
    assert version["subresources"] == {"status": {}}
    printed = version["additionalPrinterColumns"]
    assert [c["name"] for c in printed] == columns
    assert printed[-1] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


@pytest.mark.parametrize("resource", RESOURCES)
def test_printer_columns_point_at_schema_fields(resource: type[Resource]) -> None:
    schema = schema_of(resource)
    for column in resource.PRINTER_COLUMNS:
        if column.json_path.startswith(".metadata."):
            continue
        node: Mapping[str, Any] = schema
        # `.status.conditions[?(@.type=="Ready")].status`: the filter picks an item of the list
        json_path = column.json_path.replace('[?(@.type=="Ready")]', ".[]")
        for part in json_path.lstrip(".").split("."):
            if part == "[]":
                assert node["type"] == "array", column.name
                node = node["items"]
                continue
            assert part in node.get("properties", {}), f"{column.name}: {column.json_path} is not in the schema"
            node = node["properties"][part]
        expected = {"string": "string", "integer": "integer"}[column.type]
        assert node["type"] == expected, column.name


def test_application_definition_crd_is_cluster_scoped_in_the_agl_group() -> None:
    crd = generate_crds()[f"{AGL_GROUP}_applicationdefinitions.yaml"]
    assert crd["metadata"]["name"] == f"applicationdefinitions.{AGL_GROUP}"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"]) == (AGL_GROUP, "Cluster")
    assert spec["names"]["kind"] == "ApplicationDefinition" and spec["names"]["shortNames"] == ["appdef", "appdefs"]
    [version] = spec["versions"]
    assert version["subresources"] == {"status": {}}
    columns = [(c["name"], c.get("priority", 0)) for c in version["additionalPrinterColumns"]]
    assert columns == [("Kind", 0), ("Group", 0), ("Ready", 0), ("Instances", 0), ("Path", 1), ("Age", 0)]
    application = schema_of(ApplicationDefinition)["properties"]["spec"]["properties"]["application"]
    assert application["properties"]["openAPISchema"]["x-kubernetes-preserve-unknown-fields"] is True
    assert application["properties"]["group"]["default"] == "apps.burrito-py.io"
    terraform = schema_of(ApplicationDefinition)["properties"]["spec"]["properties"]["backend"]["properties"][
        "terraform"]
    assert terraform["properties"]["approvePlan"] == {
        "type": "string", "enum": ["auto", "manual"], "default": "manual",
        "description": terraform["properties"]["approvePlan"]["description"]}


def test_reserved_groups_are_refused() -> None:
    bad = with_change(DEFINITION, "spec.application.group", GROUP)
    with pytest.raises(InvalidSpec) as caught:
        ApplicationDefinition.from_object(bad)
    assert caught.value.field_path == "spec.application" and "reserved" in str(caught.value)


# ---------------------------------------------------------------------------------------------- structure

FORBIDDEN = {"$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "definitions"}


@pytest.mark.parametrize("resource", RESOURCES)
def test_schema_is_structural(resource: type[Resource]) -> None:
    schema = schema_of(resource)
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert schema["required"] == ["spec"]
    nodes = list(walk(schema))
    assert len(nodes) > 20
    for where, node in nodes:
        assert not FORBIDDEN & node.keys(), f"{where}: {sorted(FORBIDDEN & node.keys())}"
        assert "type" in node, f"{where}: every node needs a type"
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", where
        if node.get("x-kubernetes-preserve-unknown-fields"):
            # Properties beside it only for the fields a CEL rule of the node reads (CEL sees no undeclared field).
            assert node["type"] == "object" and ("properties" not in node or "x-kubernetes-validations" in node), where
        assert node.get("default", 0) is not None, f"{where}: null default"
        for name in node.get("required", ()):
            assert name in node["properties"], f"{where}: required {name} is not a property"


@pytest.mark.parametrize("resource", [TerraformRepository, TerraformLayer])
def test_inherited_spec_fields_have_no_schema_default(resource: type[Resource]) -> None:
    """A default would make "unset, inherit from the repository" indistinguishable from the default."""
    spec = schema_of(resource)["properties"]["spec"]
    with_defaults = [where for where, node in walk(spec) if "default" in node]
    assert with_defaults == []
    for name in ("terraform", "opentofu", "terragrunt", "remediationStrategy", "overrideRunnerSpec",
                 "runHistoryPolicy"):
        assert name in spec["properties"] and name not in spec.get("required", [])


def test_free_form_kubernetes_fields_preserve_unknown_fields() -> None:
    override = schema_of(TerraformLayer)["properties"]["spec"]["properties"]["overrideRunnerSpec"]["properties"]
    for name in ("env", "envFrom", "volumes", "volumeMounts", "tolerations"):
        assert override[name]["type"] == "array"
        assert override[name]["items"]["type"] == "object"
        assert override[name]["items"]["x-kubernetes-preserve-unknown-fields"] is True
    for name in ("envFrom", "tolerations"):
        assert override[name]["items"] == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    # What the platform reserves is refused on each item (api/runner_contract.py, test_runner_contract.py).
    volume_fields = {"name", "emptyDir", "persistentVolumeClaim", "ephemeral", *OTHER_VOLUME_SOURCES}
    for name, read in (("env", {"name"}), ("volumes", volume_fields),
                       ("volumeMounts", {"name", "mountPath"})):
        items = override[name]["items"]
        assert set(items["properties"]) == read and items["x-kubernetes-validations"]
    for name in ("resources", "affinity"):
        assert override[name]["type"] == "object"
        assert override[name]["x-kubernetes-preserve-unknown-fields"] is True
    assert override["nodeSelector"] == {
        "type": "object", "additionalProperties": {"type": "string"}, "description": "Node selector of runner pods.",
    }


def test_descriptions_come_from_docstrings_and_fields() -> None:
    props = schema_of(TerraformLayer)["properties"]
    assert props["spec"]["description"].startswith("Which root module to manage")
    assert props["spec"]["properties"]["branch"]["description"] == "Branch to track."
    run_status = schema_of(TerraformRun)["properties"]["status"]["properties"]
    assert run_status["retries"] == {
        "type": "integer", "minimum": 0, "default": 0, "description": "Number of failed attempts.",
    }


# ------------------------------------------------------------------------------- examples: schema vs model

REPOSITORY: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "TerraformRepository",
    "metadata": {"name": "infra", "namespace": "platform"},
    "spec": {
        "repository": {"url": "git@github.com:padok-team/burrito-examples.git", "secretName": "infra-git"},
        "terraform": {"version": "1.9.5", "enabled": True},
        "remediationStrategy": {"autoApply": False, "onError": {"maxRetries": 2}},
        "overrideRunnerSpec": {
            "env": [{"name": "TF_LOG", "value": "INFO"}],
            "resources": {"limits": {"memory": "512Mi"}},
            "metadata": {"labels": {"team": "platform"}},
        },
        "maxConcurrentRunnerPods": 4,
        "syncWindows": [{"kind": "deny", "schedule": "0 22 * * *", "duration": "8h", "actions": ["apply"],
                         "layers": ["prod-*"]}],
    },
}
LAYER: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "TerraformLayer",
    "metadata": {"name": "prod-network", "namespace": "platform"},
    "spec": {
        "repository": {"name": "infra", "namespace": "platform"},
        "branch": "main",
        "path": "terraform/network",
        "opentofu": {"enabled": True, "version": "1.8.3"},
        "additionalTriggerPaths": ["modules/vpc", "./shared/"],
        "runHistoryPolicy": {"runs": 10},
    },
    "status": {"state": "Idle", "conditions": [{"type": "IsRunning", "status": "False", "reason": "NoRun"}],
               "lastRun": {"name": "prod-network-plan-x1", "action": "plan"}},
}
RUN: dict[str, Any] = {
    "apiVersion": API_VERSION,
    "kind": "TerraformRun",
    "metadata": {"name": "prod-network-apply-abc12", "namespace": "platform"},
    "spec": {"action": "apply", "layer": {"name": "prod-network", "namespace": "platform", "revision": "a1b2c3"},
             "artifact": {"run": "prod-network-plan-x1", "attempt": 1}},
    "status": {"state": "Running", "retries": 1, "attempts": [{"podName": "p-1", "number": 1, "exitCode": 1}]},
}
DEFINITION: dict[str, Any] = {
    "apiVersion": AGL_API_VERSION,
    "kind": "ApplicationDefinition",
    "metadata": {"name": "buckets"},
    "spec": {
        "application": {"kind": "Bucket", "plural": "buckets", "singular": "bucket", "group": "apps.example.com",
                        "openAPISchema": {"type": "object", "properties": {"size": {"type": "integer"}}}},
        "backend": {"type": "Terraform", "terraform": {
            "repository": {"name": "modules", "namespace": "platform"}, "branch": "main", "path": "modules/bucket",
            "prefix": "bucket-", "approvePlan": "auto", "writeOutputsToSecret": {"name": "{{ name }}-out"},
            "varsFrom": [{"kind": "Secret", "name": "cloud-credentials"}]}},
    },
    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Served"}], "instances": 2},
}
POLICY_SPEC: dict[str, Any] = {
    "enforcement": "gateAutoApply",
    "layerSelector": {"matchLabels": {"tier": "data"}, "matchExpressions": [{"key": "env", "operator": "In",
                                                                             "values": ["prod"]}]},
    "overrideBy": {"users": ["alice"], "groups": ["platform"]},
    "rules": [{"name": "no-db-replace", "noReplace": {"types": ["aws_db_*"]}},
              {"name": "blast", "action": "warn", "maxChanges": {"total": 50}},
              {"name": "iam", "cel": {"expression": "!change.type.startsWith('aws_iam')"}},
              {"name": "conftest", "rego": {"module": "package main\ndeny contains 'x' if { false }\n"}}],
}
PLAN_POLICY: dict[str, Any] = {"apiVersion": API_VERSION, "kind": "TerraformPlanPolicy",
                               "metadata": {"name": "data-safety", "namespace": "platform"}, "spec": POLICY_SPEC}
CLUSTER_PLAN_POLICY: dict[str, Any] = {
    "apiVersion": API_VERSION, "kind": "ClusterTerraformPlanPolicy", "metadata": {"name": "no-destroy"},
    "spec": {"enforcement": "mandatory", "namespaceSelector": {"matchLabels": {"team": "a"}, "matchExpressions": [
        {"key": "tier", "operator": "Exists"}]},
             "rules": [{"name": "no-destroy", "noDestroy": {}}]},
}
NOTIFIER: dict[str, Any] = {
    "apiVersion": API_VERSION, "kind": "TerraformNotifier",
    "metadata": {"name": "drift-to-slack", "namespace": "platform"},
    "spec": {"events": ["DriftDetected", "DriftResolved"], "layerSelector": {"matchLabels": {"tier": "data"}},
             "slack": {"urlSecretRef": {"name": "slack", "key": "url"}}},
    "status": {"lastDelivery": {"event": "DriftDetected", "layer": "db", "time": "2026-11-24T12:00:00Z",
                                "result": "Delivered"}},
}
PULL_REQUEST: dict[str, Any] = {
    "apiVersion": API_VERSION, "kind": "TerraformPullRequest",
    "metadata": {"name": "infra-pr-42", "namespace": "platform"},
    "spec": {"provider": "github", "repository": "infra", "project": "org/infra", "number": 42, "base": "main",
             "headBranch": "feature",
             "headSha": "0123456789abcdef0123456789abcdef01234567", "state": "open", "title": "More VPC",
             "url": "https://github.com/org/infra/pull/42"},
    "status": {"state": "Planning", "headSha": "0123456789abcdef0123456789abcdef01234567", "progress": "1/2",
               "layers": [{"namespace": "platform", "name": "vpc", "path": "vpc", "run": "pr42-vpc-0a1b2c3d4e",
                           "state": "planned", "summary": "Plan: 1 to add, 0 to change, 0 to destroy."},
                          {"namespace": "platform", "name": "app", "path": "app", "downstream": True}],
               "comment": {"id": "1001", "digest": "sha256:00"},
               "statuses": [{"context": "burrito-py", "state": "pending", "description": "planning 1/2 layers…"}]},
}
EXAMPLES: dict[type[Resource], dict[str, Any]] = {
    TerraformRepository: REPOSITORY, TerraformLayer: LAYER, TerraformRun: RUN, ApplicationDefinition: DEFINITION,
    TerraformPlanPolicy: PLAN_POLICY, ClusterTerraformPlanPolicy: CLUSTER_PLAN_POLICY, TerraformNotifier: NOTIFIER,
    TerraformPullRequest: PULL_REQUEST}


def schema_errors(resource: type[Resource], obj: Mapping[str, Any]) -> list[str]:
    """Where the CRD schema rejects `obj`, as dotted paths like the models report them."""
    validator = jsonschema.Draft202012Validator(schema_of(resource))
    paths = []
    for error in validator.iter_errors(obj):
        path = ""
        for part in error.absolute_path:
            path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
        if error.validator == "required":  # the missing property is named in the message, not the path
            missing = str(error.message).split("'")[1]
            path = f"{path}.{missing}" if path else missing
        paths.append(path)
    return paths


def with_change(obj: Mapping[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of `obj` with `path` (dotted, `[i]` for list items) set to `value`, or removed for DELETE."""
    out = copy.deepcopy(dict(obj))
    parts = path.replace("[", ".[").split(".")
    node: Any = out
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node[part]
    last: Any = int(parts[-1][1:-1]) if parts[-1].startswith("[") else parts[-1]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return out


class _Delete:
    """Marks a field to remove from the example (a stable repr: test ids must match across xdist workers)."""

    def __repr__(self) -> str:
        return "<deleted>"


DELETE = _Delete()


@pytest.mark.parametrize("resource", RESOURCES)
def test_valid_examples_pass_schema_and_model(resource: type[Resource]) -> None:
    example = EXAMPLES[resource]
    assert schema_errors(resource, example) == []
    out = resource.from_object(example).to_object()
    assert is_subset(example, out), "everything in the manifest survives the model (defaults may be added)"
    assert schema_errors(resource, out) == []


def is_subset(small: Any, big: Any) -> bool:
    if isinstance(small, Mapping):
        return isinstance(big, Mapping) and all(k in big and is_subset(v, big[k]) for k, v in small.items())
    if isinstance(small, list):
        return isinstance(big, list) and len(small) == len(big) and all(map(is_subset, small, big))
    return bool(small == big)


INVALID: list[tuple[type[Resource], str, Any]] = [
    (TerraformRepository, "spec.repository.url", "github.com/org/repo"),
    (TerraformRepository, "spec.repository.url", "ftp://example.com/repo.git"),
    (TerraformRepository, "spec.repository", DELETE),
    (TerraformRepository, "spec.maxConcurrentRunnerPods", 0),
    (TerraformRepository, "spec.syncWindows[0].kind", "maybe"),
    (TerraformRepository, "spec.syncWindows[0].schedule", "0 22 * *"),
    (TerraformRepository, "spec.syncWindows[0].duration", "1d"),
    (TerraformRepository, "spec.syncWindows[0].actions[0]", "destroy"),
    (TerraformRepository, "spec.remediationStrategy.onError.maxRetries", -1),
    (TerraformRepository, "spec.overrideRunnerSpec.env[0]", "TF_LOG=INFO"),
    (TerraformLayer, "spec.branch", DELETE),
    (TerraformLayer, "spec.branch", ""),
    (TerraformLayer, "spec.path", "../secrets"),
    (TerraformLayer, "spec.path", "terraform/../../etc"),
    (TerraformLayer, "spec.path", "/terraform/network"),
    (TerraformLayer, "spec.path", ""),
    (TerraformLayer, "spec.additionalTriggerPaths[1]", "modules/.."),
    (TerraformLayer, "spec.runHistoryPolicy.runs", 0),
    (TerraformLayer, "spec.repository.name", ""),
    (TerraformLayer, "status.state", "Sleeping"),
    (TerraformLayer, "status.conditions[0].status", "Maybe"),
    (TerraformRun, "spec.action", "destroy"),
    (TerraformRun, "spec.layer", DELETE),
    (TerraformRun, "spec.artifact.attempt", 0),
    (TerraformRun, "status.retries", -1),
    (TerraformRun, "status.state", "Done"),
    (ApplicationDefinition, "spec.application.kind", "bucket"),
    (ApplicationDefinition, "spec.application.plural", "Buckets"),
    (ApplicationDefinition, "spec.application.group", "nodots"),
    (ApplicationDefinition, "spec.application", DELETE),
    (ApplicationDefinition, "spec.backend.type", "Helm"),
    (ApplicationDefinition, "spec.backend.terraform.path", "../x"),
    (ApplicationDefinition, "spec.backend.terraform.prefix", "-x"),
    (ApplicationDefinition, "spec.backend.terraform.approvePlan", "sometimes"),
    (ApplicationDefinition, "spec.backend.terraform.writeOutputsToSecret.name", "{{ name }"),
    (ApplicationDefinition, "spec.backend.terraform.writeOutputsToSecret.name", "Upper-{{ name }}"),
    (ApplicationDefinition, "status.instances", -1),
    (TerraformPlanPolicy, "spec.enforcement", "sometimes"),
    (TerraformPlanPolicy, "spec.rules", []),
    (TerraformPlanPolicy, "spec.rules[0].name", "Not A Label"),
    (TerraformPlanPolicy, "spec.rules[1].maxChanges.total", -1),
    (ClusterTerraformPlanPolicy, "spec.namespaceSelector.matchExpressions[0].operator", "Near"),
    (TerraformNotifier, "spec.events[0]", "Sometimes"),
]


@pytest.mark.parametrize(("resource", "field", "value"), INVALID, ids=[f"{f}={v!r}" for _, f, v in INVALID])
def test_invalid_examples_fail_schema_and_model_naming_the_field(
    resource: type[Resource], field: str, value: Any
) -> None:
    bad = with_change(EXAMPLES[resource], field, value)
    assert schema_errors(resource, bad) == [field]
    with pytest.raises(InvalidSpec) as caught:
        resource.from_object(bad)
    assert caught.value.field_path == field
    assert str(caught.value).startswith(f"{field}: ")
