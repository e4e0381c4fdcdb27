"""The runner's reading of its TerraformRun, TerraformLayer and TerraformRepository, without pydantic (issue 31).

Importing pydantic and building the API models cost ~0.2 s CPU of every attempt's start, two thirds of what the
runner added to a small plan, to read a few dozen fields. Here those fields are read into plain named tuples,
each checked with its model's rules (`api/run.py`, `api/layer.py`, `api/repository.py`, `api/common.py`,
`api/operations.py`), and a refusal names the field and the reason in the models' own words (`InvalidSpec`:
`spec.path: must be a non-empty path relative to the repository root, … (got '../x')`). The rules that are more
than a type or a bound are the models' own functions, shared: the operation checks (`api/operation_rules.py`), the
patterns (`api/patterns.py`), the tool switch (`check_single_tool`'s rule) and the inheritance (`api/effective.py`
reads these objects and the models alike). `tests/unit/runner/test_objects.py` holds the reading to the models:
for generated objects, valid and invalid, both accept the same ones with the same values, and refuse the others
naming the same problems.

Two differences, both on input the API server never serves (its CRD schema, generated from the models, types every
field): the types are JSON's own, where pydantic's lax mode would also take `"true"` for a boolean or `"3"` for an
integer (refused here, in pydantic's words); and `metadata.annotations` must be a mapping (the models keep
`metadata` as a free-form mapping; a list there would otherwise be a traceback). Fields the runner does not read
(a layer's branch, a repository's URL, pod overrides other than the extra arguments, …) are not checked here: they
cannot change what the runner does, and the controllers read them through the models.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, TypeVar, cast

from burrito_py.api.errors import PATTERN_EXPLANATIONS, InvalidSpec
from burrito_py.api.operation_rules import (
    MAX_ADDRESSES,
    MIGRATION_TARGETS,
    OPERATION_ACTIONS,
    BadOperation,
    check_address,
    check_import_id,
    check_lock_id,
    missing_for,
)
from burrito_py.api.patterns import NAMESPACE_PATTERN, OBJECT_NAME_PATTERN, PLAN_SUM_PATTERN, RELATIVE_PATH_PATTERN

__all__ = [
    "RUN_ACTIONS",
    "Artifact",
    "ExtraArgs",
    "Layer",
    "LayerSpec",
    "Operation",
    "Remediation",
    "Repository",
    "Run",
    "RunSpec",
    "SettingsSpec",
    "Tool",
    "read_layer",
    "read_repository",
    "read_run",
]

# api/common.py RunKind, in its order (a test keeps them in step).
RUN_ACTIONS = ("plan", "apply", "import", "state-rm", "state-mv", "force-unlock", "migrate-state")
DRIFT_REMEDIATIONS = ("detect", "auto", "autoIfPolicyPasses")
APPROVE_PLANS = ("auto", "manual")
VARS_KINDS = ("Secret", "ConfigMap")

T = TypeVar("T")


# -- what is read --------------------------------------------------------------------------------------------------
# NamedTuples rather than dataclasses: a dataclass costs ~1 ms of start-up to build (its methods are generated and
# exec'd), a NamedTuple a tenth of that, and these are read-only records.
class Tool(NamedTuple):
    version: str | None = None
    enabled: bool | None = None


class OnError(NamedTuple):
    max_retries: int | None = None


class Remediation(NamedTuple):
    auto_apply: bool | None = None
    apply_without_plan_artifact: bool | None = None
    on_error: OnError | None = None
    drift: Literal["detect", "auto", "autoIfPolicyPasses"] | None = None


class State(NamedTuple):
    managed: bool | None = None


class ExtraArgs(NamedTuple):
    """What the runner reads of `overrideRunnerSpec` (the rest shapes the pod, which the controllers build)."""

    extra_init_args: tuple[str, ...] = ()
    extra_plan_args: tuple[str, ...] = ()
    extra_apply_args: tuple[str, ...] = ()


class SettingsSpec(NamedTuple):
    """The settings a layer inherits from its repository (api/effective.py's `SettingsSpec`)."""

    terraform: Tool | None = None
    opentofu: Tool | None = None
    terragrunt: Tool | None = None
    remediation_strategy: Remediation | None = None
    override_runner_spec: ExtraArgs | None = None
    state: State | None = None


class Reference(NamedTuple):
    name: str
    namespace: str | None = None


class VarsFrom(NamedTuple):
    kind: Literal["Secret", "ConfigMap"]
    name: str
    keys: tuple[str, ...] | None = None
    optional: bool | None = None


class LayerSpec(NamedTuple):
    """A layer's spec: its inherited settings (as SettingsSpec's) and its own fields the runner reads."""

    repository: Reference
    path: str
    terraform: Tool | None = None
    opentofu: Tool | None = None
    terragrunt: Tool | None = None
    remediation_strategy: Remediation | None = None
    override_runner_spec: ExtraArgs | None = None
    state: State | None = None
    vars: Mapping[str, Any] | None = None
    vars_from: tuple[VarsFrom, ...] = ()
    approve_plan: Literal["auto", "manual"] | None = None


def _annotations(metadata: Mapping[str, Any]) -> Mapping[str, Any]:
    return cast("Mapping[str, Any]", metadata.get("annotations") or {})


class Repository(NamedTuple):
    metadata: Mapping[str, Any]
    spec: SettingsSpec


class Layer(NamedTuple):
    metadata: Mapping[str, Any]
    spec: LayerSpec

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "")

    @property
    def annotations(self) -> Mapping[str, Any]:
        return _annotations(self.metadata)

    @property
    def repository_namespace(self) -> str:
        """Namespace of the layer's repository: `spec.repository.namespace`, else the layer's own."""
        return self.spec.repository.namespace or self.namespace


class LayerReference(NamedTuple):
    name: str
    namespace: str | None = None
    revision: str | None = None


class Artifact(NamedTuple):
    run: str
    attempt: int
    sum: str | None = None


class Operation(NamedTuple):
    """A run's `spec.operation` (api/operations.py RunOperation), every value checked as the model checks it."""

    requested_by: str
    requested_at: str | None = None
    address: str | None = None
    id: str | None = None
    source: str | None = None
    destination: str | None = None
    replace: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    lock_id: str | None = None
    to: Literal["managed", "code"] | None = None


class RunSpec(NamedTuple):
    action: str
    layer: LayerReference
    artifact: Artifact | None = None
    destroy: bool = False
    pull_request: str | None = None
    operation: Operation | None = None


class Run(NamedTuple):
    metadata: Mapping[str, Any]
    spec: RunSpec

    @property
    def annotations(self) -> Mapping[str, Any]:
        return _annotations(self.metadata)


# -- the checks, in pydantic's words -------------------------------------------------------------------------------
class _Bad:
    """A value that was refused (its problem is recorded)."""


_BAD = _Bad()
_MISSING = object()


class _Reader:
    """Records every problem found, as pydantic lists them."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def refuse(self, path: str, reason: str) -> _Bad:
        self.problems.append((path, reason))
        return _BAD

    # Each reader takes the value (or _MISSING) and its path; it returns the value or _BAD.
    def mapping(self, value: object, path: str, model: str | None = None) -> Mapping[str, Any] | _Bad:
        if isinstance(value, Mapping):
            return value
        return self.refuse(path, "Input should be a valid dictionary" + (f" or instance of {model}" if model else ""))

    def string(self, value: object, path: str, min_length: int | None = None, max_length: int | None = None,
               pattern: str | None = None) -> str | _Bad:
        if not isinstance(value, str):
            return self.refuse(path, "Input should be a valid string")
        if min_length is not None and len(value) < min_length:
            return self.refuse(path, f"String should have at least {_count(min_length, 'character')}")
        if max_length is not None and len(value) > max_length:
            return self.refuse(path, f"String should have at most {_count(max_length, 'character')}")
        if pattern is not None and not _matches(pattern, value):
            explained = PATTERN_EXPLANATIONS.get(pattern)
            return self.refuse(path, f"{explained} (got {value!r})" if explained
                               else f"String should match pattern '{pattern}'")
        return value

    def boolean(self, value: object, path: str) -> bool | _Bad:
        if isinstance(value, bool):
            return value
        unreadable = isinstance(value, str | int | float) and not isinstance(value, float)
        return self.refuse(path, "Input should be a valid boolean" + (", unable to interpret input" if unreadable
                                                                        else ""))

    def integer(self, value: object, path: str, ge: int | None = None) -> int | _Bad:
        if not isinstance(value, int) or isinstance(value, bool):
            if isinstance(value, str):
                return self.refuse(path, "Input should be a valid integer, unable to parse string as an integer")
            if isinstance(value, float) and not value.is_integer():
                return self.refuse(path, "Input should be a valid integer, got a number with a fractional part")
            return self.refuse(path, "Input should be a valid integer")
        if ge is not None and value < ge:
            return self.refuse(path, f"Input should be greater than or equal to {ge}")
        return value

    def choice(self, value: object, path: str, choices: Sequence[str]) -> str | _Bad:
        if isinstance(value, str) and value in choices:
            return value
        quoted = [f"'{c}'" for c in choices]
        return self.refuse(path, f"Input should be {', '.join(quoted[:-1])} or {quoted[-1]}")

    def strings(self, value: object, path: str, max_items: int | None = None) -> tuple[str, ...] | _Bad:
        if not isinstance(value, list):
            return self.refuse(path, "Input should be a valid list")
        items = [self.string(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if any(isinstance(item, _Bad) for item in items):
            return _BAD
        if max_items is not None and len(items) > max_items:
            return self.refuse(path, f"List should have at most {_count(max_items, 'item')} after validation, "
                               f"not {len(items)}")
        return tuple(cast("list[str]", items))


def _matches(pattern: str, value: str) -> bool:
    """pydantic's (Rust) regex search, as kube-apiserver's (Go): a final `$` is the end of the text only, where
    Python's also matches before a final newline. Made Python's end-of-text anchor, the search still backtracks to
    another alternative that reaches the end: a dot then a newline is a path component, as the models read it."""
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        pattern = pattern[:-1] + r"\Z"
    return re.search(pattern, value) is not None


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _field(reader: _Reader, obj: Mapping[str, Any], key: str, path: str, read: Callable[[object, str], Any],
           default: Any = None, required: bool = False, nullable: bool = True) -> Any:
    """One field of `obj`: absent, its default (or 'Field required'); null, None when the model allows it. The
    value read, or _BAD (the callers check with `_ok` before they cast)."""
    where = f"{path}.{key}" if path else key
    if key not in obj:
        return reader.refuse(where, "Field required") if required else default
    value = obj[key]
    if value is None and nullable and not required:  # the models' required fields are never nullable
        return None
    return read(value, where)


def _ok(*values: object) -> bool:
    return not any(isinstance(value, _Bad) for value in values)


# -- the blocks ----------------------------------------------------------------------------------------------------
def _tool(r: _Reader, value: object, path: str) -> Tool | _Bad:
    obj = r.mapping(value, path, "ToolSpec")
    if isinstance(obj, _Bad):
        return obj
    version = _field(r, obj, "version", path, r.string)
    enabled = _field(r, obj, "enabled", path, r.boolean)
    if not _ok(version, enabled):
        return _BAD
    return Tool(cast("str | None", version), cast("bool | None", enabled))


def _remediation(r: _Reader, value: object, path: str) -> Remediation | _Bad:
    obj = r.mapping(value, path, "RemediationStrategy")
    if isinstance(obj, _Bad):
        return obj
    auto_apply = _field(r, obj, "autoApply", path, r.boolean)
    without = _field(r, obj, "applyWithoutPlanArtifact", path, r.boolean)

    def on_error(value: object, where: str) -> OnError | _Bad:
        block = r.mapping(value, where, "OnErrorStrategy")
        if isinstance(block, _Bad):
            return block
        retries = _field(r, block, "maxRetries", where, lambda v, p: r.integer(v, p, ge=0))
        return OnError(cast("int | None", retries)) if _ok(retries) else _BAD

    retry = _field(r, obj, "onError", path, on_error)
    drift = _field(r, obj, "drift", path, lambda v, p: r.choice(v, p, DRIFT_REMEDIATIONS))
    if not _ok(auto_apply, without, retry, drift):
        return _BAD
    return Remediation(cast("bool | None", auto_apply), cast("bool | None", without), cast("OnError | None", retry),
                       cast("Literal['detect', 'auto', 'autoIfPolicyPasses'] | None", drift))


def _extra_args(r: _Reader, value: object, path: str) -> ExtraArgs | _Bad:
    obj = r.mapping(value, path, "OverrideRunnerSpec")
    if isinstance(obj, _Bad):
        return obj
    lists = [_field(r, obj, key, path, r.strings, default=(), nullable=False)
             for key in ("extraInitArgs", "extraPlanArgs", "extraApplyArgs")]
    if not _ok(*lists):
        return _BAD
    init, plan, apply = (cast("tuple[str, ...]", value) for value in lists)
    return ExtraArgs(init, plan, apply)


def _state(r: _Reader, value: object, path: str) -> State | _Bad:
    obj = r.mapping(value, path, "StateSettings")
    if isinstance(obj, _Bad):
        return obj
    managed = _field(r, obj, "managed", path, r.boolean)
    return State(cast("bool | None", managed)) if _ok(managed) else _BAD


def _vars_from(r: _Reader, value: object, path: str) -> tuple[VarsFrom, ...] | _Bad:
    if not isinstance(value, list):
        return r.refuse(path, "Input should be a valid list")
    read: list[VarsFrom | _Bad] = []
    for i, item in enumerate(value):
        where = f"{path}[{i}]"
        obj = r.mapping(item, where, "VarsSource")
        if isinstance(obj, _Bad):
            read.append(obj)
            continue
        kind = _field(r, obj, "kind", where, lambda v, p: r.choice(v, p, VARS_KINDS), required=True)
        name = _field(r, obj, "name", where, lambda v, p: r.string(v, p, max_length=253, pattern=OBJECT_NAME_PATTERN),
                      required=True)
        keys = _field(r, obj, "keys", where, r.strings)
        optional = _field(r, obj, "optional", where, r.boolean)
        read.append(VarsFrom(cast("Literal['Secret', 'ConfigMap']", kind), cast("str", name),
                             cast("tuple[str, ...] | None", keys), cast("bool | None", optional))
                    if _ok(kind, name, keys, optional) else _BAD)
    return _BAD if not _ok(*read) else tuple(cast("list[VarsFrom]", read))


def _settings(r: _Reader, spec: Mapping[str, Any], state: bool = True) -> dict[str, Any]:
    """The inherited settings of a layer's or a repository's spec, each read or _BAD (`state`: read here, in a
    repository's field order; a layer reads it after its own fields, in its order)."""
    settings = {
        "terraform": _field(r, spec, "terraform", "spec", lambda v, p: _tool(r, v, p)),
        "opentofu": _field(r, spec, "opentofu", "spec", lambda v, p: _tool(r, v, p)),
        "terragrunt": _field(r, spec, "terragrunt", "spec", lambda v, p: _tool(r, v, p)),
        "remediation_strategy": _field(r, spec, "remediationStrategy", "spec", lambda v, p: _remediation(r, v, p)),
        "override_runner_spec": _field(r, spec, "overrideRunnerSpec", "spec", lambda v, p: _extra_args(r, v, p)),
    }
    if state:
        settings["state"] = _field(r, spec, "state", "spec", lambda v, p: _state(r, v, p))
    return settings


def _one_tool(r: _Reader, terraform: Tool | None, opentofu: Tool | None) -> bool:
    """api/common.py check_single_tool, as the specs' model validator reports it."""
    if terraform is not None and opentofu is not None and terraform.enabled and opentofu.enabled:
        r.refuse("spec", "terraform.enabled and opentofu.enabled cannot both be true")
        return False
    return True


def _metadata(r: _Reader, obj: Mapping[str, Any]) -> Mapping[str, Any] | _Bad:
    metadata: Mapping[str, Any] | _Bad = _field(r, obj, "metadata", "", r.mapping, default={}, nullable=False)
    if isinstance(metadata, _Bad):
        return metadata
    annotations = metadata.get("annotations")
    if annotations is not None and not isinstance(annotations, Mapping):
        return r.refuse("metadata.annotations", "Input should be a valid dictionary")
    return metadata


def _spec(r: _Reader, obj: Mapping[str, Any], model: str) -> Mapping[str, Any] | _Bad:
    spec: Mapping[str, Any] | _Bad = _field(r, obj, "spec", "", lambda v, p: r.mapping(v, p, model), required=True,
                                            nullable=False)
    return spec


def _finish(r: _Reader, result: T | None) -> T:
    if r.problems:
        first_path, first_reason = r.problems[0]
        raise InvalidSpec(first_path, first_reason, r.problems)
    assert result is not None  # every refusal records a problem
    return result


# -- the objects ---------------------------------------------------------------------------------------------------
def read_repository(obj: Mapping[str, Any]) -> Repository:
    """A TerraformRepository as the runner reads it; InvalidSpec names the problems."""
    r = _Reader()
    metadata = _metadata(r, obj)
    spec = _spec(r, obj, "TerraformRepositorySpec")
    result = None
    if not isinstance(spec, _Bad):
        settings = _settings(r, spec)
        if _ok(*settings.values()) and _one_tool(r, settings["terraform"], settings["opentofu"]) \
                and not isinstance(metadata, _Bad):
            result = Repository(metadata, SettingsSpec(**settings))
    return _finish(r, result)


def read_layer(obj: Mapping[str, Any]) -> Layer:
    """A TerraformLayer as the runner reads it; InvalidSpec names the problems."""
    r = _Reader()
    metadata = _metadata(r, obj)
    spec = _spec(r, obj, "TerraformLayerSpec")
    result = None
    if not isinstance(spec, _Bad):

        def reference(value: object, path: str) -> Reference | _Bad:
            block = r.mapping(value, path, "ObjectReference")
            if isinstance(block, _Bad):
                return block
            name = _field(r, block, "name", path,
                          lambda v, p: r.string(v, p, max_length=253, pattern=OBJECT_NAME_PATTERN), required=True,
                          nullable=False)
            namespace = _field(r, block, "namespace", path,
                               lambda v, p: r.string(v, p, max_length=63, pattern=NAMESPACE_PATTERN))
            return Reference(cast("str", name), cast("str | None", namespace)) if _ok(name, namespace) else _BAD

        # In the model's field order, so that the problems come in the same order.
        repository = _field(r, spec, "repository", "spec", reference, required=True, nullable=False)
        path = _field(r, spec, "path", "spec", lambda v, p: r.string(v, p, pattern=RELATIVE_PATH_PATTERN),
                      required=True, nullable=False)
        settings = _settings(r, spec, state=False)
        variables = _field(r, spec, "vars", "spec", r.mapping)
        vars_from = _field(r, spec, "varsFrom", "spec", lambda v, p: _vars_from(r, v, p), default=(), nullable=False)
        approve = _field(r, spec, "approvePlan", "spec", lambda v, p: r.choice(v, p, APPROVE_PLANS))
        settings["state"] = _field(r, spec, "state", "spec", lambda v, p: _state(r, v, p))
        if _ok(repository, path, variables, vars_from, approve, *settings.values()) \
                and _one_tool(r, settings["terraform"], settings["opentofu"]) and not isinstance(metadata, _Bad):
            result = Layer(metadata, LayerSpec(
                repository=cast("Reference", repository), path=cast("str", path), **settings,
                vars=cast("Mapping[str, Any] | None", variables), vars_from=cast("tuple[VarsFrom, ...]", vars_from),
                approve_plan=cast("Literal['auto', 'manual'] | None", approve),
            ))
    return _finish(r, result)


def _operation(r: _Reader, value: object, path: str) -> Operation | _Bad:
    obj = r.mapping(value, path, "RunOperation")
    if isinstance(obj, _Bad):
        return obj

    def checked(check: Callable[[str], str]) -> Callable[[object, str], str | _Bad]:
        """A string, then the operations' own check (a BadOperation names the field itself)."""

        def read(value: object, where: str) -> str | _Bad:
            text = r.string(value, where)
            if isinstance(text, _Bad):
                return text
            try:
                return check(text)
            except BadOperation as exc:
                return r.refuse(where, str(exc))

        return read

    def addresses(name: str) -> Callable[[object, str], tuple[str, ...] | _Bad]:
        def read(value: object, where: str) -> tuple[str, ...] | _Bad:
            items = r.strings(value, where, max_items=MAX_ADDRESSES)
            if isinstance(items, _Bad):
                return items
            try:
                return tuple(check_address(item, f"{name}[{i}]") for i, item in enumerate(items))
            except BadOperation as exc:
                return r.refuse(where, str(exc))

        return read

    fields = {
        "requested_by": _field(r, obj, "requestedBy", path, lambda v, p: r.string(v, p, min_length=1, max_length=512),
                               required=True, nullable=False),
        "requested_at": _field(r, obj, "requestedAt", path, lambda v, p: r.string(v, p, max_length=64)),
        "address": _field(r, obj, "address", path, checked(lambda v: check_address(v, "address"))),
        "id": _field(r, obj, "id", path, checked(check_import_id)),
        "source": _field(r, obj, "source", path, checked(lambda v: check_address(v, "source"))),
        "destination": _field(r, obj, "destination", path, checked(lambda v: check_address(v, "destination"))),
        "replace": _field(r, obj, "replace", path, addresses("replace"), default=(), nullable=False),
        "target": _field(r, obj, "target", path, addresses("target"), default=(), nullable=False),
        "lock_id": _field(r, obj, "lockId", path, checked(check_lock_id)),
        "to": _field(r, obj, "to", path, lambda v, p: r.choice(v, p, MIGRATION_TARGETS)),
    }
    return Operation(**fields) if _ok(*fields.values()) else _BAD


def read_run(obj: Mapping[str, Any]) -> Run:
    """A TerraformRun as the runner reads it; InvalidSpec names the problems."""
    r = _Reader()
    metadata = _metadata(r, obj)
    spec = _spec(r, obj, "TerraformRunSpec")
    result = None
    if not isinstance(spec, _Bad):

        def layer(value: object, path: str) -> LayerReference | _Bad:
            block = r.mapping(value, path, "LayerReference")
            if isinstance(block, _Bad):
                return block
            name = _field(r, block, "name", path, lambda v, p: r.string(v, p, min_length=1), required=True,
                          nullable=False)
            namespace = _field(r, block, "namespace", path, r.string)
            revision = _field(r, block, "revision", path, r.string)
            if not _ok(name, namespace, revision):
                return _BAD
            return LayerReference(cast("str", name), cast("str | None", namespace), cast("str | None", revision))

        def artifact(value: object, path: str) -> Artifact | _Bad:
            block = r.mapping(value, path, "ArtifactReference")
            if isinstance(block, _Bad):
                return block
            run = _field(r, block, "run", path, lambda v, p: r.string(v, p, min_length=1), required=True,
                         nullable=False)
            attempt = _field(r, block, "attempt", path, lambda v, p: r.integer(v, p, ge=1), required=True,
                             nullable=False)
            plan_sum = _field(r, block, "sum", path, lambda v, p: r.string(v, p, pattern=PLAN_SUM_PATTERN))
            if not _ok(run, attempt, plan_sum):
                return _BAD
            return Artifact(cast("str", run), cast("int", attempt), cast("str | None", plan_sum))

        action = _field(r, spec, "action", "spec", lambda v, p: r.choice(v, p, RUN_ACTIONS), required=True,
                        nullable=False)
        layer_ref = _field(r, spec, "layer", "spec", layer, required=True, nullable=False)
        artifact_ref = _field(r, spec, "artifact", "spec", artifact)
        destroy = _field(r, spec, "destroy", "spec", r.boolean, default=False, nullable=False)
        pull_request = _field(r, spec, "pullRequest", "spec", lambda v, p: r.string(v, p, min_length=1))
        operation = _field(r, spec, "operation", "spec", lambda v, p: _operation(r, v, p))
        if _ok(action, layer_ref, artifact_ref, destroy, pull_request, operation):
            run_spec = RunSpec(cast("str", action), cast("LayerReference", layer_ref),
                               cast("Artifact | None", artifact_ref), bool(destroy), cast("str | None", pull_request),
                               cast("Operation | None", operation))
            problem = _run_spec_problem(run_spec)
            if problem is not None:
                r.refuse("spec", problem)
            elif not isinstance(metadata, _Bad):
                result = Run(metadata, run_spec)
    return _finish(r, result)


def _run_spec_problem(spec: RunSpec) -> str | None:
    """api/run.py TerraformRunSpec's two model validators, in their order."""
    if spec.pull_request is not None:
        if spec.destroy or spec.operation is not None or spec.action not in ("plan", "apply"):
            return ("a pull request's run (spec.pullRequest) may only be a plan, or the apply of its reviewed plan, "
                    "never a destroy or an operation")
        if spec.action == "apply" and (spec.artifact is None or spec.artifact.sum is None):
            return ("a pull request's apply (spec.pullRequest) applies exactly its reviewed plan: spec.artifact with "
                    "its sum is required")
    if spec.action in OPERATION_ACTIONS or (spec.action == "plan" and spec.operation is not None):
        if spec.operation is None:
            return f"spec.operation: required by action {spec.action}"
        if spec.destroy:
            return "spec.destroy: an operation is never a destroy"
        problem = missing_for(spec.operation, spec.action)
        if problem is not None:
            return f"spec.operation.{problem}"
    elif spec.operation is not None:
        return f"spec.operation: not allowed on an {spec.action} run"
    return None
