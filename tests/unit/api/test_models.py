"""The API models: wire form round trips, errors that name the field, and patterns that mean what they say."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api.annotations import API_VERSION
from burrito_py.api.common import (
    Condition,
    ObjectReference,
    OnErrorStrategy,
    OverrideRunnerSpec,
    RemediationStrategy,
    Resource,
    RunHistoryPolicy,
    RunnerMetadata,
    SyncWindow,
    ToolSpec,
)
from burrito_py.api.crdgen import crd_filename, generate_crds
from burrito_py.api.errors import InvalidSpec
from burrito_py.api.layer import (
    LAYER_STATES,
    RELATIVE_PATH_PATTERN,
    PlanReference,
    RunReference,
    TerraformLayer,
    TerraformLayerSpec,
    TerraformLayerStatus,
)
from burrito_py.api.repository import (
    REPOSITORY_URL_PATTERN,
    BranchStatus,
    RepositorySource,
    TerraformRepository,
    TerraformRepositorySpec,
    TerraformRepositoryStatus,
)
from burrito_py.api.run import (
    RUN_STATES,
    ArtifactReference,
    Attempt,
    LayerReference,
    TerraformRun,
    TerraformRunSpec,
    TerraformRunStatus,
)

T = TypeVar("T")


def opt(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | strategy


names = st.from_regex(r"[a-z]([a-z0-9-]{0,14}[a-z0-9])?", fullmatch=True)  # DNS labels, as object names are
object_names = names  # object and namespace names a reference holds
words = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
times = opt(st.sampled_from(["2026-11-22T08:44:00Z", "2027-01-01T00:00:00Z"]))
components = st.from_regex(r"[A-Za-z0-9_.-]{1,8}", fullmatch=True).filter(lambda c: c != "..")
rel_paths = st.just(".") | st.lists(components, min_size=1, max_size=4).map("/".join)
urls = st.sampled_from([
    "https://github.com/padok-team/burrito.git", "http://git.local:3000/org/repo", "ssh://git@host:22/org/repo.git",
    "git@github.com:org/repo.git", "git@gitlab.example.com:group/sub/repo", "file:///srv/git/infra.git",
])
free_objects = st.dictionaries(names, st.integers() | words | st.booleans() | st.lists(words, max_size=2), max_size=3)
string_maps = st.dictionaries(names, words, max_size=3)
# A volume: a name and one of the sources the restricted Pod Security profile allows (api/runner_contract.py).
volumes = st.builds(lambda name, source, body: {"name": name, source: body}, names,
                    st.sampled_from(["emptyDir", "configMap", "secret", "projected", "csi", "downwardAPI"]),
                    free_objects)

tools = st.builds(ToolSpec, version=opt(st.sampled_from(["1.9.5", "~> 1.8", ">= 1.5, < 2"])),
                  enabled=opt(st.booleans()))
remediations = st.builds(
    RemediationStrategy, auto_apply=opt(st.booleans()), apply_without_plan_artifact=opt(st.booleans()),
    on_error=opt(st.builds(OnErrorStrategy, max_retries=opt(st.integers(0, 10)))),
)
overrides = st.builds(
    OverrideRunnerSpec,
    image=opt(names), image_pull_policy=opt(st.sampled_from(["Always", "IfNotPresent", "Never"])),
    service_account_name=opt(names), env=st.lists(free_objects, max_size=2),
    env_from=st.lists(free_objects, max_size=2),
    volumes=st.lists(volumes, max_size=2), volume_mounts=st.lists(free_objects, max_size=2),
    resources=opt(free_objects), node_selector=string_maps, tolerations=st.lists(free_objects, max_size=2),
    affinity=opt(free_objects), metadata=opt(st.builds(RunnerMetadata, labels=string_maps, annotations=string_maps)),
    extra_init_args=st.lists(words, max_size=2), extra_plan_args=st.lists(words, max_size=2),
    extra_apply_args=st.lists(words, max_size=2),
)
histories = st.builds(RunHistoryPolicy, runs=opt(st.integers(1, 50)))
windows = st.builds(
    SyncWindow, kind=st.sampled_from(["allow", "deny"]),
    schedule=st.sampled_from(["0 22 * * *", "*/15 * * * 1-5", "30 6 1 * *"]),
    duration=st.sampled_from(["1h", "30m", "1h30m", "90s", "1.5h"]),
    actions=st.lists(st.sampled_from(["plan", "apply"]), max_size=2, unique=True),
    layers=st.lists(st.sampled_from(["prod-*", "*", "network"]), max_size=2),
)
conditions = st.lists(st.builds(
    Condition, type=names, status=st.sampled_from(["True", "False", "Unknown"]), reason=names, message=words,
    last_transition_time=times,
), max_size=2)


def metadata() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({"name": names, "namespace": names},
                                 optional={"labels": string_maps, "resourceVersion": names.map(str)})


def tool_pair() -> st.SearchStrategy[tuple[ToolSpec | None, ToolSpec | None]]:
    """terraform and opentofu settings that do not both enable their tool."""
    return st.tuples(opt(tools), opt(tools)).filter(
        lambda pair: not (pair[0] is not None and pair[1] is not None and pair[0].enabled and pair[1].enabled)
    )




@st.composite
def repositories(draw: st.DrawFn) -> TerraformRepository:
    terraform, opentofu = draw(tool_pair())
    spec = TerraformRepositorySpec(
        repository=draw(st.builds(RepositorySource, url=urls, secret_name=opt(object_names))),
        terraform=terraform, opentofu=opentofu, terragrunt=draw(opt(tools)),
        remediation_strategy=draw(opt(remediations)), override_runner_spec=draw(opt(overrides)),
        run_history_policy=draw(opt(histories)), max_concurrent_runner_pods=draw(opt(st.integers(1, 20))),
        sync_windows=draw(st.lists(windows, max_size=2)),
    )
    status = draw(st.builds(
        TerraformRepositoryStatus, state=opt(st.sampled_from(["SyncNeeded", "Synced"])), conditions=conditions,
        branches=st.lists(st.builds(BranchStatus, name=names, latest_rev=opt(names), last_sync_date=times,
                                    last_sync_status=opt(words)), max_size=2),
    ))
    return TerraformRepository(metadata=draw(metadata()), spec=spec, status=status)


run_refs = st.builds(RunReference, name=names, action=st.sampled_from(["plan", "apply"]), date=times,
                     revision=opt(names))
layers = st.builds(
    lambda md, pair, status, **kw: TerraformLayer(
        metadata=md, spec=TerraformLayerSpec(terraform=pair[0], opentofu=pair[1], **kw), status=status,
    ),
    metadata(), tool_pair(),
    st.builds(TerraformLayerStatus, state=opt(st.sampled_from(LAYER_STATES)), conditions=conditions,
              last_result=opt(words), last_run=opt(run_refs), latest_runs=st.lists(run_refs, max_size=2),
              last_plan=opt(st.builds(PlanReference, sum=opt(names), revision=opt(names), date=times,
                                      run=opt(names)))),
    repository=st.builds(ObjectReference, name=object_names, namespace=opt(object_names)), branch=names, path=rel_paths,
    terragrunt=opt(tools), remediation_strategy=opt(remediations), override_runner_spec=opt(overrides),
    additional_trigger_paths=st.lists(rel_paths, max_size=3), run_history_policy=opt(histories),
)
runs = st.builds(
    TerraformRun, metadata=metadata(),
    spec=st.builds(TerraformRunSpec, action=st.sampled_from(["plan", "apply"]),
                   layer=st.builds(LayerReference, name=names, namespace=opt(names), revision=opt(names)),
                   artifact=opt(st.builds(ArtifactReference, run=names, attempt=st.integers(1, 5)))),
    status=st.builds(TerraformRunStatus, state=opt(st.sampled_from(RUN_STATES)), conditions=conditions,
                     retries=st.integers(0, 5), last_run=times, runner_pod=opt(names),
                     attempts=st.lists(st.builds(Attempt, pod_name=names, number=st.integers(1, 5),
                                                 started_at=times, finished_at=times, logs_uploaded=st.booleans(),
                                                 exit_code=opt(st.integers(0, 255))), max_size=3)),
)
resources = st.one_of(repositories(), layers, runs)


def no_nones_and_camel_keys(value: Any, where: str = "") -> None:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            assert sub is not None, f"{where}.{key} is None"
            if where.count(".") <= 3 and "_" in key and not where.endswith((".metadata", "Selector", "labels",
                                                                               "annotations")):
                raise AssertionError(f"{where}.{key}: snake_case key on the wire")
            no_nones_and_camel_keys(sub, f"{where}.{key}")
    elif isinstance(value, list):
        for i, sub in enumerate(value):
            no_nones_and_camel_keys(sub, f"{where}[{i}]")


@settings(max_examples=150, deadline=None)
@given(resources)
def test_round_trip_through_the_wire_form(resource: Resource) -> None:
    obj = resource.to_object()
    assert obj["apiVersion"] == API_VERSION and obj["kind"] == resource.KIND
    no_nones_and_camel_keys(obj)
    assert type(resource).from_object(obj) == resource


VALIDATORS = {
    name: jsonschema.Draft202012Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    for name, crd in generate_crds().items()
}


@settings(max_examples=100, deadline=None)
@given(resources)
def test_every_valid_model_is_accepted_by_its_crd_schema(resource: Resource) -> None:
    validator = VALIDATORS[crd_filename(type(resource))]
    errors = [e.message for e in validator.iter_errors(resource.to_object())]
    assert errors == []


def test_defaults_and_properties() -> None:
    layer = TerraformLayer.from_object({
        "metadata": {"name": "net", "namespace": "team-a"},
        "spec": {"repository": {"name": "infra"}, "branch": "main", "path": "."},
    })
    assert (layer.name, layer.namespace, layer.repository_namespace) == ("net", "team-a", "team-a")
    assert layer.api_version == API_VERSION and layer.kind == "TerraformLayer"
    assert layer.spec.remediation_strategy is None and layer.spec.terraform is None
    assert layer.status == TerraformLayerStatus()
    assert layer.to_object()["spec"] == {"repository": {"name": "infra"}, "branch": "main", "path": ".",
                                         "additionalTriggerPaths": [], "varsFrom": [], "dependsOn": []}
    run = TerraformRun(metadata={"generateName": "net-plan-", "namespace": "team-a"},
                       spec=TerraformRunSpec(action="plan", layer=LayerReference(name="net")))
    assert (run.name, run.layer_namespace, run.status.retries) == ("", "team-a", 0)


def test_unknown_fields_are_ignored_like_the_api_server_prunes_them() -> None:
    run = TerraformRun.from_object({"spec": {"action": "plan", "layer": {"name": "l", "colour": "red"}},
                                    "unexpected": 1})
    assert "colour" not in run.spec.layer.to_dict()


def test_python_names_are_accepted_too() -> None:
    assert OnErrorStrategy(max_retries=2) == OnErrorStrategy.model_validate({"maxRetries": 2})


@pytest.mark.parametrize(
    ("model", "obj", "field", "reason"),
    [
        (TerraformLayer, {"spec": {"repository": {"name": "r"}, "branch": "", "path": "."}},
         "spec.branch", "String should have at least 1 character"),
        (TerraformLayer, {"spec": {"repository": {"name": "r"}, "path": "."}}, "spec.branch", "Field required"),
        (TerraformLayer, {"spec": {"repository": {"name": "r"}, "branch": "main", "path": "a/../b"}},
         "spec.path", "must be a non-empty path relative to the repository root, without a leading '/', '..' "
         "components or empty components ('.' is the root) (got 'a/../b')"),
        (TerraformLayer, {"spec": {"repository": {"name": "r"}, "branch": "m", "path": ".",
                                   "terraform": {"enabled": True}, "opentofu": {"enabled": True}}},
         "spec", "terraform.enabled and opentofu.enabled cannot both be true"),
        (TerraformRepository, {"spec": {"repository": {"url": "github.com/a/b"}}},
         "spec.repository.url",
         "must be a git URL: https://, http://, ssh://, file:// or scp-style user@host:org/repo "
         "(got 'github.com/a/b')"),
        (TerraformRepository, {"spec": {"repository": {"url": "file:///r"},
                                        "syncWindows": [{"kind": "deny", "schedule": "61 * * * *", "duration": "1h"}]}},
         "spec.syncWindows[0].schedule", "'61 * * * *' is not a valid cron expression"),
        (TerraformRepository, {"spec": {"repository": {"url": "file:///r"},
                                        "syncWindows": [{"kind": "deny", "schedule": "* * * * *", "duration": "1d"}]}},
         "spec.syncWindows[0].duration",
         "must be a Go-style duration in h, m and s, e.g. 1h30m, 45m or 90s (got '1d')"),
        (TerraformRun, {"spec": {"action": "destroy", "layer": {"name": "l"}}},
         "spec.action", "Input should be 'plan', 'apply', 'import', 'state-rm', 'state-mv', 'force-unlock' or "
         "'migrate-state'"),
        (TerraformRun, {"spec": {"action": "plan", "layer": {"name": "l"}}, "status": {"retries": -1}},
         "status.retries", "Input should be greater than or equal to 0"),
        (TerraformRun, {"spec": {"action": "plan", "layer": {"name": "l"}},
                        "status": {"attempts": [{"podName": "p", "number": "one"}]}},
         "status.attempts[0].number", "Input should be a valid integer, unable to parse string as an integer"),
    ],
)
def test_invalid_spec_names_the_field_and_the_reason(
    model: type[Resource], obj: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidSpec) as caught:
        model.from_object(obj)
    assert (caught.value.field_path, caught.value.reason) == (field, reason)
    assert str(caught.value) == f"{field}: {reason}"


def test_invalid_spec_reports_every_problem() -> None:
    with pytest.raises(InvalidSpec) as caught:
        TerraformLayer.from_object({"spec": {"repository": {}, "branch": "", "path": "/abs"}})
    assert [path for path, _ in caught.value.problems] == ["spec.repository.name", "spec.branch", "spec.path"]
    assert caught.value.field_path == "spec.repository.name"
    assert str(caught.value).count("; ") == 2


def reference_relative_path_ok(path: str) -> bool:
    """What RELATIVE_PATH_PATTERN is meant to say, written plainly."""
    if not path or path.startswith("/"):
        return False
    parts = path.removesuffix("/").split("/")
    return all(part and part != ".." for part in parts)


@settings(max_examples=500)
@given(st.text(alphabet="a./\n", max_size=10))
def test_relative_path_pattern_means_what_it_says_in_every_engine(path: str) -> None:
    expected = reference_relative_path_ok(path)
    # jsonschema (and so the tests' view of the CRD) uses Python's re.search; pydantic uses Rust regex.
    assert bool(re.search(RELATIVE_PATH_PATTERN, path)) is expected
    try:
        TerraformLayerSpec(repository=ObjectReference(name="r"), branch="main", path=path)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted is expected


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://github.com/padok-team/burrito.git", True),
        ("http://localhost:3000/org/repo", True),
        ("https://user@git.example.com/org/repo", True),
        ("ssh://git@github.com/org/repo.git", True),
        ("git@github.com:org/repo.git", True),
        ("git@github.com:org/repo", True),
        ("file:///tmp/repos/infra", True),
        ("github.com/org/repo", False),
        ("https://", False),
        ("ftp://example.com/repo", False),
        ("git@github.com", False),
        ("file://", False),
        ("https://github.com/org repo", False),
        ("", False),
    ],
)
def test_repository_url_pattern(url: str, ok: bool) -> None:
    assert bool(re.search(REPOSITORY_URL_PATTERN, url)) is ok
    try:
        RepositorySource(url=url)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted is ok
