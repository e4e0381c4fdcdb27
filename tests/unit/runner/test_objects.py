"""The runner's reading of its run, layer and repository (runner/objects.py) against the models it stands in for:
for generated objects, valid and invalid in every field the runner reads, both accept the same objects with the
same values and the same effective settings, and refuse the others naming the same problems in the same words."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from burrito_py.api.common import RunKind
from burrito_py.api.effective import (
    effective_extra_args,
    effective_override_runner_spec,
    effective_remediation,
    effective_state_location,
    effective_tool,
)
from burrito_py.api.errors import InvalidSpec
from burrito_py.api.layer import TerraformLayer
from burrito_py.api.repository import TerraformRepository
from burrito_py.api.run import TerraformRun
from burrito_py.runner.objects import RUN_ACTIONS, read_layer, read_repository, read_run

# Wrong values the models refuse (JSON's types; not what pydantic's lax mode would convert, see the last tests).
NOT_A_STRING = st.sampled_from([5, True, [], {"a": 1}])
NOT_A_BOOLEAN = st.sampled_from(["maybe", 7, 2.5, [], {}])
NOT_AN_INTEGER = st.sampled_from(["x", 2.5, [], {}])
NOT_A_MAPPING = st.sampled_from(["x", 3, [], True])


TEXT = st.text(alphabet="ab-_./\n ", max_size=6)
NAMES = st.one_of(st.sampled_from(["app", "x-1"]), st.text(alphabet="abc-", max_size=5))  # "" at times
ADDRESS = st.one_of(st.sampled_from(["aws_s3_bucket.logs", "module.a.b.c[0]", "data.x.y", "-lock=false",
                                     "a.b\n", "not an address", ""]), TEXT)


class Fields:
    """Strategies for the fields the runner reads. `bad`: any value, wrong types and non-objects included (the
    refusals are compared); otherwise values of the right types (most objects are accepted, their readings are
    compared), still with values the models' constraints refuse."""

    def __init__(self, bad: bool) -> None:
        self.bad = bad

    def maybe(self, value: st.SearchStrategy[Any], *wrong: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        """A field's value: null, a valid value, or (bad) a wrong one."""
        return st.one_of(st.none(), value, *(wrong if self.bad else ()))

    def block(self, fields: dict[str, st.SearchStrategy[Any]],
              required: dict[str, st.SearchStrategy[Any]] | None = None) -> st.SearchStrategy[Any]:
        """An object with any subset of `fields` (and `required`, unless bad), or (bad) not an object at all."""
        if not self.bad:
            return st.fixed_dictionaries(required or {}, optional=fields)
        return st.one_of(st.fixed_dictionaries({}, optional={**fields, **(required or {})}), NOT_A_MAPPING)

    def strings(self) -> st.SearchStrategy[Any]:
        if not self.bad:
            return st.lists(TEXT, max_size=3)
        return st.one_of(st.lists(st.one_of(TEXT, st.just(3)), max_size=3), st.just("abc"), st.none())

    def tool(self) -> st.SearchStrategy[Any]:
        return self.block({"version": self.maybe(TEXT, NOT_A_STRING),
                           "enabled": self.maybe(st.booleans(), NOT_A_BOOLEAN)})

    def settings(self) -> dict[str, st.SearchStrategy[Any]]:
        remediation = self.block({
            "autoApply": self.maybe(st.booleans(), NOT_A_BOOLEAN),
            "applyWithoutPlanArtifact": self.maybe(st.booleans(), NOT_A_BOOLEAN),
            "onError": self.maybe(self.block({"maxRetries": self.maybe(st.integers(-2, 9), NOT_AN_INTEGER)})),
            "drift": self.maybe(st.sampled_from(["detect", "auto", "autoIfPolicyPasses", "never"]), NOT_A_STRING),
        })
        overrides = self.block({"extraInitArgs": self.strings(), "extraPlanArgs": self.strings(),
                                "extraApplyArgs": self.strings()})
        return {"terraform": self.maybe(self.tool()), "opentofu": self.maybe(self.tool()),
                "terragrunt": self.maybe(self.tool()), "remediationStrategy": self.maybe(remediation),
                "overrideRunnerSpec": self.maybe(overrides),
                "state": self.maybe(self.block({"managed": self.maybe(st.booleans(), NOT_A_BOOLEAN)}))}

    def metadata(self) -> st.SearchStrategy[Any]:
        annotations = st.dictionaries(st.sampled_from(["runner.burrito-py.io/state-location", "other"]),
                                      st.sampled_from(["managed", "code", "x"]), max_size=2)
        valid = st.fixed_dictionaries({"name": st.just("x"), "namespace": st.sampled_from(["default", "ns"])},
                                      optional={"annotations": annotations})
        return st.one_of(valid, NOT_A_MAPPING) if self.bad else valid

    def layer(self) -> st.SearchStrategy[dict[str, Any]]:
        reference = self.block({"namespace": self.maybe(NAMES, NOT_A_STRING)},
                               required={"name": NAMES if not self.bad else self.maybe(NAMES, NOT_A_STRING)})
        path = st.one_of(st.sampled_from([".", "layers/app", "a/", "../x", "/abs", "a//b", "a\n"]), TEXT)
        spec = self.block({
            **self.settings(),
            "vars": self.maybe(st.dictionaries(st.sampled_from(["a", "b"]), st.integers()), NOT_A_MAPPING),
            "varsFrom": st.lists(self.block({"keys": self.maybe(self.strings()),
                                             "optional": self.maybe(st.booleans(), NOT_A_BOOLEAN)},
                                            required={"kind": st.sampled_from(["Secret", "ConfigMap", "Pod"]),
                                                      "name": NAMES}), max_size=2),
            "approvePlan": self.maybe(st.sampled_from(["auto", "manual", "sometimes"]), NOT_A_STRING),
        }, required={"repository": reference, "path": path if not self.bad else self.maybe(path, NOT_A_STRING)})
        # What the runner does not read (spec.branch) is valid, so that only what it reads can differ.
        return st.fixed_dictionaries({"metadata": self.metadata(), "spec": spec.map(
            lambda s: {"branch": "main", **s} if isinstance(s, dict) else s)})

    def repository(self) -> st.SearchStrategy[dict[str, Any]]:
        spec = self.block(self.settings()).map(
            lambda s: {"repository": {"url": "https://example.com/r.git"}, **s} if isinstance(s, dict) else s)
        return st.fixed_dictionaries({"metadata": self.metadata(), "spec": spec})

    def run(self) -> st.SearchStrategy[dict[str, Any]]:
        operation = self.block({
            "requestedAt": self.maybe(st.one_of(TEXT, st.just("t" * 65)), NOT_A_STRING),
            "address": self.maybe(ADDRESS, NOT_A_STRING),
            "id": self.maybe(st.sampled_from(["i-123", " padded", "-x", "two\nlines", ""]), NOT_A_STRING),
            "source": self.maybe(ADDRESS),
            "destination": self.maybe(ADDRESS),
            "replace": st.one_of(st.lists(ADDRESS, max_size=3), st.just(["a.b"] * 21),
                                 *((st.just([4]), st.none()) if self.bad else ())),
            "target": st.one_of(st.lists(ADDRESS, max_size=2), *((st.just("a.b"),) if self.bad else ())),
            "lockId": self.maybe(st.sampled_from(["3f0c-1", "-force", "a b", ""]), NOT_A_STRING),
            "to": self.maybe(st.sampled_from(["managed", "code", "s3"]), NOT_A_STRING),
        }, required={"requestedBy": st.one_of(NAMES, st.just("u" * 513))})
        artifact = self.block({
            "sum": self.maybe(st.sampled_from(["sha256:" + "a" * 64, "sha256:" + "A" * 64,
                                               "sha256:" + "a" * 64 + "\n", "md5:x"]), NOT_A_STRING),
        }, required={"run": NAMES, "attempt": st.one_of(st.integers(-1, 3), *((NOT_AN_INTEGER,) if self.bad else ()))})
        layer = self.block({"namespace": self.maybe(NAMES, NOT_A_STRING), "revision": self.maybe(TEXT, NOT_A_STRING)},
                           required={"name": NAMES})
        spec = self.block({
            "artifact": self.maybe(artifact),
            "destroy": st.one_of(st.booleans(), *((st.none(), NOT_A_BOOLEAN) if self.bad else ())),
            "pullRequest": self.maybe(NAMES, NOT_A_STRING),
            "operation": self.maybe(operation),
        }, required={"action": st.sampled_from([*RUN_ACTIONS, "destroy"]), "layer": layer})
        return st.fixed_dictionaries({"metadata": self.metadata(), "spec": spec})


def problems(error: InvalidSpec) -> list[tuple[str, str]]:
    return list(error.problems)


def outcome(read: Any, obj: dict[str, Any]) -> tuple[str, Any]:
    try:
        return "ok", read(obj)
    except InvalidSpec as exc:
        return "refused", problems(exc)


def same_outcome(model: Any, read: Any, obj: dict[str, Any]) -> tuple[Any, Any] | None:
    """Both accept (their readings, returned) or both refuse with the same problems (None)."""
    theirs, ours = outcome(model.from_object, obj), outcome(read, obj)
    assert theirs[0] == ours[0], (obj, theirs, ours)
    if theirs[0] == "refused":
        assert ours[1] == theirs[1], obj
        return None
    return theirs[1], ours[1]


def tools(obj: Any) -> list[tuple[str | None, bool | None] | None]:
    spec = obj.spec
    return [None if t is None else (t.version, t.enabled) for t in (spec.terraform, spec.opentofu, spec.terragrunt)]


def test_the_run_actions_are_the_models() -> None:
    assert get_args(RunKind) == RUN_ACTIONS


@settings(max_examples=500)
@given(objects=st.booleans().flatmap(lambda bad: st.tuples(Fields(bad).layer(), Fields(bad).repository())))
def test_a_layer_and_its_repository_read_as_the_models_read_them(objects: tuple[Any, Any]) -> None:
    layer_obj, repo_obj = objects
    layers = same_outcome(TerraformLayer, read_layer, layer_obj)
    repositories = same_outcome(TerraformRepository, read_repository, repo_obj)
    if layers is not None:
        model, ours = layers
        assert (ours.namespace, ours.repository_namespace, ours.annotations) == (
            model.namespace, model.repository_namespace, model.metadata.get("annotations") or {})
        assert (ours.spec.repository.name, ours.spec.path, ours.spec.vars, ours.spec.approve_plan) == (
            model.spec.repository.name, model.spec.path, model.spec.vars, model.spec.approve_plan)
        assert [(v.kind, v.name, list(v.keys) if v.keys is not None else None, v.optional)
                for v in ours.spec.vars_from] == [(v.kind, v.name, v.keys, v.optional) for v in model.spec.vars_from]
        assert tools(ours) == tools(model)
    if repositories is not None:
        assert tools(repositories[1]) == tools(repositories[0])
    if layers is None or repositories is None:
        return
    (model_layer, layer), (model_repository, repository) = layers, repositories
    for other_model, other in ((model_repository, repository), (None, None)):
        assert effective_tool(layer, other) == effective_tool(model_layer, other_model)
        assert effective_remediation(layer, other) == effective_remediation(model_layer, other_model)
        assert effective_state_location(layer, other) == effective_state_location(model_layer, other_model)
        merged = effective_override_runner_spec(model_layer, other_model)
        assert effective_extra_args(layer, other) == effective_extra_args(model_layer, other_model) == (
            merged.extra_init_args, merged.extra_plan_args, merged.extra_apply_args)


@pytest.mark.parametrize("path", [".\n", "a\n", "layers/app\n", ".", "a//b", "../x", "/a", "a/\n/b", ""])
def test_a_path_ending_in_a_newline_reads_as_the_model_reads_it(path: str) -> None:
    """Python's `$` also matches before a final newline: a search that stopped there refused `.\n`, which the model
    (and kube-apiserver's pattern) takes as the component `.` followed by a character (found by the property above)."""
    layer = {"metadata": {"name": "x", "namespace": "default"},
             "spec": {"branch": "main", "repository": {"name": "app"}, "path": path}}
    same_outcome(TerraformLayer, read_layer, layer)


@settings(max_examples=600)
@given(run_obj=st.booleans().flatmap(lambda bad: Fields(bad).run()))
def test_a_run_reads_as_the_model_reads_it(run_obj: dict[str, Any]) -> None:
    runs = same_outcome(TerraformRun, read_run, run_obj)
    if runs is None:
        return
    model, ours = runs
    assert ours.annotations == (model.metadata.get("annotations") or {})
    theirs = model.spec
    assert (ours.spec.action, ours.spec.layer.name, ours.spec.layer.namespace, ours.spec.layer.revision,
            ours.spec.destroy, ours.spec.pull_request) == (
        theirs.action, theirs.layer.name, theirs.layer.namespace, theirs.layer.revision, theirs.destroy,
        theirs.pull_request)
    assert (None if ours.spec.artifact is None else (ours.spec.artifact.run, ours.spec.artifact.attempt,
                                                     ours.spec.artifact.sum)) == (
        None if theirs.artifact is None else (theirs.artifact.run, theirs.artifact.attempt, theirs.artifact.sum))
    fields = ("requested_by", "requested_at", "address", "id", "source", "destination", "lock_id", "to")
    if theirs.operation is None:
        assert ours.spec.operation is None
    else:
        assert ours.spec.operation is not None
        assert [getattr(ours.spec.operation, f) for f in fields] == [getattr(theirs.operation, f) for f in fields]
        assert list(ours.spec.operation.replace) == theirs.operation.replace
        assert list(ours.spec.operation.target) == theirs.operation.target


def test_a_hostile_operation_is_refused_naming_the_field() -> None:
    """A run that would put an option on terraform's command line never reaches it."""
    spec = {"action": "state-rm", "layer": {"name": "app"},
            "operation": {"requestedBy": "mallory", "address": "-state=/etc/shadow"}}
    with pytest.raises(InvalidSpec) as refused:
        read_run({"spec": spec})
    assert str(refused.value) == ("spec.operation.address: address: '-state=/etc/shadow' starts with '-': an address "
                                  "is never an option")


@pytest.mark.parametrize(("read", "obj", "message"), [
    # pydantic's lax mode would take these; the API server's schema never serves them, and the runner refuses them.
    (read_run, {"spec": {"action": "plan", "layer": {"name": "a"}, "destroy": "true"}},
     "spec.destroy: Input should be a valid boolean, unable to interpret input"),
    (read_run, {"spec": {"action": "apply", "layer": {"name": "a"}, "artifact": {"run": "p", "attempt": "2"}}},
     "spec.artifact.attempt: Input should be a valid integer, unable to parse string as an integer"),
    (read_layer, {"spec": {"repository": {"name": "r"}, "path": ".", "state": {"managed": 1}}},
     "spec.state.managed: Input should be a valid boolean, unable to interpret input"),
    # The models keep metadata free-form; a list of annotations would otherwise be a traceback.
    (read_layer, {"metadata": {"annotations": ["x"]}, "spec": {"repository": {"name": "r"}, "path": "."}},
     "metadata.annotations: Input should be a valid dictionary"),
])
def test_the_reading_is_stricter_than_pydantics_lax_mode(read: Any, obj: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidSpec) as refused:
        read(obj)
    assert str(refused.value) == message


def test_reading_the_objects_imports_no_pydantic() -> None:
    """The runner's reading and the rules it shares with the models, in a fresh interpreter."""
    code = ("import sys\n"
            "from burrito_py.runner.objects import read_layer, read_repository, read_run\n"
            "import burrito_py.api.effective, burrito_py.api.operation_rules, burrito_py.runner.variables\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'pydantic_core')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
