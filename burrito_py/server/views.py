"""Response models of the server's REST API (camelCase on the wire, like the CRDs they summarise), and how
they are read from the plain-dict objects the Kubernetes API returns.

Objects are read leniently (missing or odd fields become `None`) rather than validated against the CRD
models: the API has already applied the schema, and one odd object must not turn a whole listing into a 500.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from burrito_py.api import annotations as ann
from burrito_py.api.layer import LAYER_STATES_TEXT
from burrito_py.git.urls import redact


class View(BaseModel):
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, serialize_by_alias=True)


class ErrorView(View):
    error: str = Field(description="What went wrong, naming the parameter or object concerned.")


class ConditionView(View):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_transition_time: str | None = None


class RepositoryView(View):
    namespace: str
    name: str
    url: str | None = Field(
        default=None,
        description="The repository URL (credentials redacted); null when the TerraformRepository does not exist.",
    )
    state: str | None = Field(default=None, description="The repository's state (SyncNeeded or Synced).")


class RunReferenceView(View):
    name: str
    action: str | None = None
    date: str | None = Field(default=None, description="When the run was created (RFC 3339 UTC).")
    revision: str | None = None


class LayerView(View):
    namespace: str
    name: str
    state: str | None = Field(default=None, description=LAYER_STATES_TEXT)
    last_result: str | None = Field(default=None, description="Outcome of the last run.")
    last_run: RunReferenceView | None = None
    repository: RepositoryView
    branch: str | None = None
    path: str | None = None
    plan_run: str | None = Field(default=None, description="`<run>/<attempt>` holding the latest plan.")
    plan_summary: str | None = Field(default=None, description="One-line summary of the latest plan.")
    plan_date: str | None = None
    plan_commit: str | None = None
    sync_now: str | None = Field(default=None, description="When a sync was requested and not yet acted on.")


class DependencyView(View):
    name: str = Field(description="<namespace>/<name> of the upstream layer.")
    state: str | None = None
    applied_revision: str | None = None
    satisfied: bool = False
    reason: str = ""
    message: str = ""


class LayerDetailView(LayerView):
    conditions: list[ConditionView] = Field(default_factory=list)
    applied_revision: str | None = Field(default=None, description="The branch commit planned and applied.")
    dependencies: list[DependencyView] = Field(
        default_factory=list, description="How each upstream of spec.dependsOn stands (docs/architecture.md §5.11).")


class AttemptView(View):
    number: int
    pod_name: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    logs_uploaded: bool = False
    exit_code: int | None = None


class RunView(View):
    namespace: str
    name: str
    layer: str | None = Field(default=None, description="Name of the run's TerraformLayer.")
    action: str | None = Field(default=None, description="plan or apply.")
    state: str | None = Field(
        default=None, description="Initial, Running, Retrying, FailureGracePeriod, Succeeded or Failed."
    )
    revision: str | None = None
    retries: int = 0
    created: str | None = Field(default=None, description="When the run was created (RFC 3339 UTC).")
    attempts: list[AttemptView] = Field(default_factory=list, description="Runner pods, oldest first.")


class RunDetailView(RunView):
    layer_namespace: str | None = None
    runner_pod: str | None = None
    last_run: str | None = Field(default=None, description="When the last runner pod was created.")
    artifact: str | None = Field(default=None, description="For an apply: `<run>/<attempt>` of the plan it applies.")
    conditions: list[ConditionView] = Field(default_factory=list)


class OverrideRequest(View):
    plan_sum: str = Field(pattern=r"^sha256:[0-9a-f]{1,64}$", description="The sum of the denied plan to override.")


class RollbackRequest(View):
    serial: int = Field(ge=0, le=10**20 - 1, description="The kept state version to restore (as a new version).")


class OperationRequest(View):
    """A day-2 operation (docs/architecture.md §5.12); checked by api/operations.py, each refusal naming the field."""

    # A field that is not one is refused (422 naming it), never dropped: a request carries nothing it does not mean.
    model_config = ConfigDict(populate_by_name=True, alias_generator=to_camel, serialize_by_alias=True,
                              extra="forbid")

    operation: Literal["import", "state-rm", "state-mv", "plan", "force-unlock", "migrate-state"] = Field(
        description="What to run: import ADDR ID, state rm ADDR, state mv SRC DST, a plan with -replace/-target, "
        "force-unlock LOCK_ID, or migrate-state to managed|code.")
    address: str | None = Field(default=None, max_length=1024, description="import, state-rm: a resource address.")
    id: str | None = Field(default=None, max_length=1024, description="import: the provider's ID of the object.")
    source: str | None = Field(default=None, max_length=1024, description="state-mv: the address to move.")
    destination: str | None = Field(default=None, max_length=1024, description="state-mv: where to move it.")
    replace: list[str] = Field(default_factory=list, max_length=20, description="plan: -replace=ADDR each.")
    target: list[str] = Field(default_factory=list, max_length=20, description="plan: -target=ADDR each.")
    lock_id: str | None = Field(default=None, max_length=256, description="force-unlock: the lock ID to release.")
    to: Literal["managed", "code"] | None = Field(
        default=None, description="migrate-state: managed (the burrito-py datastore) or code (the backend the layer's "
        "code declares); never a backend of the caller's choosing.")


class OperationView(View):
    namespace: str
    name: str
    operation: str = Field(description="What will run, e.g. `state rm aws_s3_bucket.old`.")
    by: str = Field(description="Who asked, as recorded on the layer, its run and the Event.")
    requested_at: str = Field(description="When (RFC 3339 UTC, microseconds): tells two equal requests apart.")


class OverrideView(View):
    namespace: str
    name: str
    plan_sum: str = Field(description="The plan overridden (it still needs an approval of its sum).")
    by: str = Field(description="The principal recorded as overriding it.")


class SyncView(View):
    namespace: str
    name: str
    sync_now: str = Field(description="The time written to the layer's sync-now annotation.")


# -- reading objects -------------------------------------------------------------------------------
def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _int(value: Any, default: int | None = None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _conditions(status: Mapping[str, Any]) -> list[ConditionView]:
    found = []
    for item in status.get("conditions") or ():
        item = _dict(item)
        if _str(item.get("type")) and _str(item.get("status")):
            found.append(
                ConditionView(
                    type=item["type"],
                    status=item["status"],
                    reason=_str(item.get("reason")) or "",
                    message=_str(item.get("message")) or "",
                    last_transition_time=_str(item.get("lastTransitionTime")),
                )
            )
    return found


def repository_key(layer: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of the layer's repository; the namespace defaults to the layer's."""
    meta, ref = _dict(layer.get("metadata")), _dict(_dict(layer.get("spec")).get("repository"))
    return (_str(ref.get("namespace")) or str(meta.get("namespace", "")), _str(ref.get("name")) or "")


def repository_view(key: tuple[str, str], repository: Mapping[str, Any] | None) -> RepositoryView:
    if repository is None:
        return RepositoryView(namespace=key[0], name=key[1])
    url = _str(_dict(_dict(repository.get("spec")).get("repository")).get("url"))
    return RepositoryView(
        namespace=key[0],
        name=key[1],
        # A URL may carry `user:password@`: never echo it.
        url=redact(url) if url else None,
        state=_str(_dict(repository.get("status")).get("state")),
    )


def layer_view(layer: Mapping[str, Any], repository: Mapping[str, Any] | None) -> LayerDetailView:
    meta, spec, status = _dict(layer.get("metadata")), _dict(layer.get("spec")), _dict(layer.get("status"))
    annotations = _dict(meta.get("annotations"))
    last = _dict(status.get("lastRun"))
    return LayerDetailView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        state=_str(status.get("state")),
        last_result=_str(status.get("lastResult")),
        last_run=RunReferenceView(
            name=last["name"],
            action=_str(last.get("action")),
            date=_str(last.get("date")),
            revision=_str(last.get("revision")),
        )
        if _str(last.get("name"))
        else None,
        repository=repository_view(repository_key(layer), repository),
        branch=_str(spec.get("branch")),
        path=_str(spec.get("path")),
        plan_run=_str(annotations.get(ann.PLAN_RUN)),
        plan_summary=_str(annotations.get(ann.PLAN_SUMMARY)),
        plan_date=_str(annotations.get(ann.PLAN_DATE)),
        plan_commit=_str(annotations.get(ann.PLAN_COMMIT)),
        sync_now=_str(annotations.get(ann.SYNC_NOW)),
        conditions=_conditions(status),
        applied_revision=_str(status.get("appliedRevision")),
        dependencies=[
            DependencyView(name=str(row.get("name", "")), state=_str(row.get("state")),
                           applied_revision=_str(row.get("appliedRevision")), satisfied=bool(row.get("satisfied")),
                           reason=str(row.get("reason") or ""), message=str(row.get("message") or ""))
            for row in (_dict(item) for item in status.get("dependencies") or ())
        ],
    )


def run_layer(run: Mapping[str, Any]) -> tuple[str, str | None]:
    """(namespace, name) of the run's layer: `spec.layer`, the namespace defaulting to the run's."""
    meta, ref = _dict(run.get("metadata")), _dict(_dict(run.get("spec")).get("layer"))
    return (_str(ref.get("namespace")) or str(meta.get("namespace", "")), _str(ref.get("name")))


def run_view(run: Mapping[str, Any]) -> RunDetailView:
    meta, spec, status = _dict(run.get("metadata")), _dict(run.get("spec")), _dict(run.get("status"))
    layer_namespace, layer = run_layer(run)
    attempts = []
    for item in status.get("attempts") or ():
        item = _dict(item)
        number = _int(item.get("number"))
        if number is None:
            continue
        attempts.append(
            AttemptView(
                number=number,
                pod_name=_str(item.get("podName")),
                started_at=_str(item.get("startedAt")),
                finished_at=_str(item.get("finishedAt")),
                logs_uploaded=item.get("logsUploaded") is True,
                exit_code=_int(item.get("exitCode")),
            )
        )
    artifact = _dict(spec.get("artifact"))
    return RunDetailView(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        layer=layer,
        layer_namespace=layer_namespace,
        action=_str(spec.get("action")),
        state=_str(status.get("state")),
        revision=_str(_dict(spec.get("layer")).get("revision")),
        retries=_int(status.get("retries"), 0) or 0,
        created=_str(meta.get("creationTimestamp")),
        attempts=sorted(attempts, key=lambda a: a.number),
        runner_pod=_str(status.get("runnerPod")),
        last_run=_str(status.get("lastRun")),
        artifact=f"{artifact['run']}/{_int(artifact.get('attempt'), 1)}" if _str(artifact.get("run")) else None,
        conditions=_conditions(status),
    )


def run_summary(run: Mapping[str, Any]) -> RunView:
    """The list form: the detail without its conditions and pod bookkeeping."""
    detail = run_view(run)
    return RunView.model_validate(detail.model_dump(include=set(RunView.model_fields)))
