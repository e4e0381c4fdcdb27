"""TerraformRun reconcile: runner pods per attempt, retries with backoff, the layer Lease, logs (and the
provider mirror fallbacks they report: a counter and one Warning per attempt).

Pods are watched (their events wake the run); the only timed wake-ups are the end of a failure
grace period and a re-check while a run waits for its Lease, its pod budget or a sync window.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from burrito_py.api import annotations as ann
from burrito_py.api.patterns import object_name_problem
from burrito_py.api.run import pod_name
from burrito_py.api.runner_secrets import secret_env_variables
from burrito_py.controllers import metrics
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.run_inputs import refresh_failed_inputs
from burrito_py.controllers.layer.sync_windows import Admission, pod_budget_allows
from burrito_py.controllers.layer.validation import inherited, validate_layer
from burrito_py.controllers.run import leases
from burrito_py.controllers.run.decide import (
    ACTIVE_POD_PHASES,
    APPLY_NOT_ALLOWED,
    PULL_REQUEST_ENDED,
    STOPPED_CONDITION,
    TERMINAL,
    AttemptView,
    FinishAttempt,
    PodView,
    RetryPolicy,
    RunDecision,
    RunSnapshot,
    decide_run,
    refused_for_good,
)
from burrito_py.controllers.run.isolation import refuse_run
from burrito_py.controllers.run.pod_creation import (
    EVENT_REASON,
    PodCreation,
    backoff,
    pod_surely_absent,
    wait_before_creating,
)
from burrito_py.controllers.run.pod_creation import condition as pod_creation_condition
from burrito_py.controllers.run.results import (
    AttemptFacts,
    FactsUnavailable,
    Recorded,
    facts_needed,
    gather_facts,
    migration_event,
    record_result,
)
from burrito_py.controllers.run.runner_pod import (
    IGNORED_EVENT,
    RunnerDefaults,
    build_runner_pod,
    closed_account,
    closed_secrets,
    ignored_condition,
    ignored_overrides,
    other_account,
    secret_names,
    without_secret_sources,
)
from burrito_py.controllers.run.state_lock import release_orphaned_lock
from burrito_py.durations import format_duration
from burrito_py.kube.client import KubeError, crd_path, path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key
from burrito_py.pullrequests.apply import apply_admission
from burrito_py.pullrequests.forks import inherits_secrets
from burrito_py.runner.mirror import fallback_lines
from burrito_py.timeutil import format_time, parse_time, utcnow

if TYPE_CHECKING:
    from burrito_py.datastore.client import DatastoreClient

log = logging.getLogger(__name__)
WAIT_RECHECK = timedelta(seconds=5)
# What the controllers read of a finished attempt's log at most: tenant code writes it, and it is read into the
# memory every layer's reconcile shares. The datastore's default `max_log_bytes`, which keeps no more anyway.
LOG_READ_BYTES = 32 * 1024 * 1024
LOG_CUT_NOTE = "(the beginning of this log was not collected: the attempt wrote more than {limit} bytes)\n"


def attempt_views(status: Mapping[str, Any]) -> tuple[AttemptView, ...]:
    return tuple(
        AttemptView(
            int(a.get("number", i + 1)),
            a.get("podName", ""),
            a.get("startedAt"),
            a.get("finishedAt"),
            a.get("exitCode"),
            bool(a.get("logsUploaded")),
            a.get("notStarted"),
        )
        for i, a in enumerate(status.get("attempts") or ())
    )


def pod_view(pod: Mapping[str, Any] | None, run: Mapping[str, Any]) -> PodView | None:
    """What `run` decides on of its latest attempt's pod, and whether that pod is the run's own."""
    if pod is None:
        return None
    status = pod.get("status") or {}
    terminated: Mapping[str, Any] = {}
    started = status.get("phase") not in (None, "Pending")
    waiting: tuple[str, str] | None = None
    running = False
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        terminated = state.get("terminated") or {}
        running = running or bool(state.get("running"))
        started = started or bool(state.get("running") or terminated or (container.get("lastState") or {}))
        if (state.get("waiting") or {}).get("reason"):
            waiting = (str(state["waiting"]["reason"]), str(state["waiting"].get("message") or ""))
    for condition in status.get("conditions") or ():
        # Not placed on a node (the scheduler's reason, e.g. Unschedulable, and its "0/3 nodes are available: …").
        if waiting is None and condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            waiting = (str(condition.get("reason") or "Unschedulable"), str(condition.get("message") or ""))
    meta = pod["metadata"]
    return PodView(
        meta["name"],
        status.get("phase"),
        terminated.get("exitCode"),
        str(terminated.get("message") or terminated.get("reason") or "").strip()[-500:],
        terminated.get("finishedAt"),
        started=started,
        waiting=None if waiting is None else (waiting[0], waiting[1].strip()[:300]),
        uid=meta.get("uid"),
        deleting=bool(meta.get("deletionTimestamp")),
        deleting_until=meta.get("deletionTimestamp"),
        node=str((pod.get("spec") or {}).get("nodeName") or ""),
        owned=belongs_to(pod, run),
        reason=str(status.get("reason") or ""),
        running=running,
        deadline_seconds=(pod.get("spec") or {}).get("activeDeadlineSeconds"),
    )


def _pod_active(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in (None, *ACTIVE_POD_PHASES)


def active_runner_pods(ctx: Context, repository: Mapping[str, Any] | None) -> int:
    """Runner pods not yet finished among the layers of `repository`."""
    if repository is None:
        return 0
    meta = repository["metadata"]
    layers = {
        (layer["metadata"]["namespace"], ann.layer_label(layer["metadata"]["name"]))
        for layer in ctx.inventory.layers_of_repository(meta["namespace"], meta["name"])
    }
    count = 0
    for pod in ctx.inventory.pods:
        labels = pod["metadata"].get("labels") or {}
        if (pod["metadata"]["namespace"], labels.get(ann.LABEL_LAYER)) in layers and _pod_active(pod):
            count += 1
    return count


def admission(
    ctx: Context, run: Mapping[str, Any], layer: Mapping[str, Any], repository: Mapping[str, Any] | None, now: datetime
) -> Admission:
    # Sync windows are decided by the layer controller before it creates a run (docs/architecture.md §5.8):
    # an attempt of a run already created is never held back by a window.
    run_spec = run.get("spec") or {}
    if run_spec.get("pullRequest") and run_spec.get("action") == "apply":
        # Apply before merge: the runner pod gets the layer's identity, so check it all again here, whatever made
        # the run (pullrequests/apply.py).
        namespace = run["metadata"]["namespace"]
        plan_run = ctx.inventory.runs.get((namespace, str((run_spec.get("artifact") or {}).get("run") or "")))
        pull_request = ctx.inventory.pull_requests.get((namespace, run_spec["pullRequest"]))
        refusal = apply_admission(run, layer, pull_request, plan_run)
        if refusal is not None:
            ended = ((pull_request or {}).get("spec") or {}).get("state") in ("merged", "closed")
            reason = PULL_REQUEST_ENDED if ended else APPLY_NOT_ALLOWED
            return Admission(False, reason, f"{refusal}: nothing is applied")
    spec = (repository or {}).get("spec") or {}
    return pod_budget_allows(
        active_runner_pods(ctx, repository),
        spec.get("maxConcurrentRunnerPods"),
        active_total=sum(1 for pod in ctx.inventory.pods if _pod_active(pod)),
        max_total=ctx.settings.max_concurrent_runner_pods,
    )


async def reconcile_run(ctx: Context, key: Key) -> None:
    started = time.perf_counter()
    try:
        await _reconcile(ctx, key)
    except KubeError as error:
        metrics.RECONCILE_ERRORS.labels("run").inc()
        if error.status == 403:
            # The Warning event is forbidden.py's and the retry backs off (scheduler.py); this says it on the run.
            await _show_forbidden(ctx, key, error)
        raise
    except Exception:
        metrics.RECONCILE_ERRORS.labels("run").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.labels("run").observe(time.perf_counter() - started)


FORBIDDEN_CONDITION = "Permitted"


def forbidden_condition(error: KubeError) -> Cond:
    """A request of the run's reconcile the API refused (403): shown on the run until a reconcile succeeds
    (the next successful status write drops it, as it computes every condition afresh)."""
    return Cond(FORBIDDEN_CONDITION, False, "Forbidden",
                f"{error.message or error}; retried with a growing delay (up to 5 minutes) until it is granted")


RESULT_CONDITION = "ResultRecorded"


def result_unavailable_condition(number: int, error: FactsUnavailable) -> Cond:
    """An attempt that ended whose result the datastore cannot give yet: the run stays Running (nothing of the
    attempt is recorded until it can), and says why until the reconcile that records it."""
    return Cond(RESULT_CONDITION, False, "DatastoreUnavailable",
                f"attempt {number} ended; its result cannot be read yet, asked again every "
                f"{format_duration(WAIT_RECHECK)}: {error}")


async def _show_forbidden(ctx: Context, key: Key, error: KubeError) -> None:
    await _show_condition(ctx, key, forbidden_condition(error))


async def _show_condition(ctx: Context, key: Key, shown: Cond) -> None:
    """Put `shown` on the run's stored conditions (in place of one of its type) when its reconcile stopped short of
    writing the status it computes; the next status it writes, computed afresh, drops it."""
    run = ctx.inventory.runs.get(key)
    if run is None:
        return
    status = run.get("status") or {}
    conditions = merge_conditions(status.get("conditions"), (
        *(Cond(c["type"], {"True": True, "False": False}.get(c.get("status", "")), c.get("reason", ""),
               c.get("message", "")) for c in status.get("conditions") or () if c.get("type") != shown.type),
        shown), utcnow())
    if conditions == status.get("conditions"):
        return
    try:
        updated = await ctx.kube.merge_patch(crd_path("terraformruns", key[0], key[1], "status"),
                                             {"status": {"conditions": conditions}})
    except KubeError as write_error:  # perhaps the very write that is forbidden: the log (and an event) say it
        log.warning("run %s/%s: could not show %s on its status: %s", key[0], key[1], shown.type, write_error)
        return
    ctx.inventory.runs.observe(updated)


async def _reconcile(ctx: Context, key: Key) -> None:
    run = ctx.inventory.runs.get(key)
    if run is None or run["metadata"].get("deletionTimestamp"):
        return
    namespace, name = key
    layer_ref = (run.get("spec") or {}).get("layer") or {}
    layer_key = (layer_ref.get("namespace") or namespace, layer_ref.get("name", ""))
    layer = ctx.inventory.layers.get(layer_key)
    # Isolation (run_isolation.py): another namespace's layer, or a repository the layer may not use.
    if await refuse_run(ctx, run, layer, ctx.inventory.repository_of(layer) if layer else None):
        return
    if layer is None:
        return  # its layer is gone; garbage collection removes the run
    repository = ctx.inventory.repository_of(layer)
    settings = ctx.settings
    policy = RetryPolicy(
        max_retries=validate_layer(layer, repository, settings).max_retries,
        grace_base=settings.failure_grace_period,
        grace_cap=settings.failure_grace_period_cap,
        start_timeout=settings.runner_start_timeout,
    )
    status: Body = dict(run.get("status") or {})
    attempts = attempt_views(status)
    latest_pod = pod_view(ctx.inventory.pods.get((namespace, attempts[-1].pod_name)), run) if attempts else None
    if attempts and latest_pod is None and ctx.inventory.pod_deleted(namespace, attempts[-1].pod_name, run):
        latest_pod = PodView(attempts[-1].pod_name, None, gone=True)
    now = utcnow()
    succeeded: Mapping[str, str] = next((c for c in status.get("conditions") or () if c.get("type") == "HasSucceeded"),
                                        {})
    snapshot = RunSnapshot(
        status.get("state"), int(status.get("retries") or 0), attempts, latest_pod, policy,
        message=succeeded.get("message") or "",
        reason=succeeded.get("reason") or "",
    )
    decision = decide_run(snapshot, now)
    recorded = None
    if decision.finish is not None:
        # The attempt's result, from the datastore, on the layer before the run says Succeeded (run_results.py).
        try:
            recorded = await _record_attempt(ctx, run, layer, decision.finish, now)
        except FactsUnavailable as exc:
            log.warning("run %s/%s: attempt %s ended; its result cannot be read yet: %s", namespace, name,
                        decision.finish.number, exc)
            await _show_condition(ctx, key, result_unavailable_condition(decision.finish.number, exc))
            ctx.wake_run(key, WAIT_RECHECK)
            return  # nothing of the attempt is written: it is recorded once the datastore answers
        if recorded.problem is not None and decision.finish.succeeded and latest_pod is not None:
            # The pod exited 0 but its result is not in the datastore: a failed attempt, retried as any other.
            failed_pod = replace(latest_pod, phase="Failed", message=recorded.problem)
            decision = decide_run(replace(snapshot, pod=failed_pod), now)

    raw_attempts: list[Body] = [dict(a) for a in status.get("attempts") or ()]
    state: str = decision.state
    extra: list[Cond] = []
    if decision.finish is not None:
        f = decision.finish
        raw_attempts[-1].update(finishedAt=f.finished_at or format_time(now), exitCode=f.exit_code,
                                **(recorded.attempt if recorded is not None else {}))
        if f.timed_out:
            metrics.RUNNER_TIMEOUTS.labels(namespace, str((run.get("spec") or {}).get("action") or "")).inc()
        if f.succeeded:
            await post_event(ctx.kube, run, "Normal", "AttemptSucceeded", f"attempt {f.number} succeeded")
        else:
            await post_event(
                ctx.kube,
                run,
                "Warning",
                "AttemptFailed",
                f"attempt {f.number} failed (exit code {f.exit_code}): {f.message}".rstrip(": "),
            )
        migrated = migration_event(run, f.number, f.succeeded, f.message)
        if migrated is not None:  # the audit of a migration, on the layer whose state moved (or did not)
            await post_event(ctx.kube, layer, *migrated)
        # A managed-state layer's lock left by a pod that is gone or ended (killed under terraform) would hold every
        # next attempt: released before one starts (state_lock.py).
        await release_orphaned_lock(ctx, layer, repository,
                                    migration=(run.get("spec") or {}).get("action") == "migrate-state")
    give_up = decision.give_up
    if give_up is not None and give_up.record:
        raw_attempts[-1]["notStarted"] = give_up.message
        metrics.RUNNER_PODS_NOT_STARTED.labels(namespace).inc()
        await post_event(ctx.kube, run, "Warning", "RunnerPodNotStarted",
                         f"attempt {give_up.number}: {give_up.message}: deleting it")
    for number in decision.upload_logs:
        if await _upload_logs(ctx, run, layer, number):
            for a in raw_attempts:
                if a.get("number") == number:
                    a["logsUploaded"] = True

    creation = PodCreation.of(status)
    next_try: datetime | None = None
    if decision.start_attempt is not None:
        wait = wait_before_creating(creation, now, settings.failure_grace_period, settings.failure_grace_period_cap)
        if wait is not None:  # the API refused the last pod: back off before asking again
            next_try = now + wait
            ctx.wake_run(key, wait)
        else:
            started = await _start_attempt(ctx, run, layer, repository, decision, now)
            if isinstance(started, dict):
                raw_attempts.append(started)
                status["lastRun"] = started["startedAt"]
                status["runnerPod"] = started["podName"]
                if "podCreation" in status:
                    status["podCreation"] = None  # a merge patch removes it
                creation = PodCreation()
                state = "Running"
            elif isinstance(started, CreationRefused):
                creation = PodCreation(creation.failures + 1, now, started.message)
                status["podCreation"] = {
                    "failures": creation.failures,
                    "lastFailure": format_time(now),
                    "message": creation.message,
                }
                wait = backoff(creation.failures, settings.failure_grace_period, settings.failure_grace_period_cap)
                next_try = now + wait
                ctx.wake_run(key, wait)
                if pod_surely_absent(started.status) and not started.pod_exists:
                    # The Lease is for a Terraform that runs: none does, so others may have the state meanwhile.
                    await leases.release(ctx.kube, layer, run)
            elif (ended := refused_for_good(snapshot, decision, started.reason, started.message)) is not None:
                # A pod of that attempt made just before a restart, never recorded, never had runner rights (the
                # datastore answers it 503 until the run records it): nothing of it ran; the run ends all the same.
                decision, state = ended, ended.state  # the Lease goes below (`release_lease`)
            else:
                extra.append(started)
                ctx.wake_run(key, WAIT_RECHECK)
    refused = pod_creation_condition(creation, next_try)
    if refused is not None:
        extra.append(refused)
    ignored = ignored_condition(raw_attempts)
    if ignored is not None:
        extra.append(ignored)
    if decision.release_lease and status.get("state") not in TERMINAL:
        await leases.release(ctx.kube, layer, run)
    if decision.requeue_after is not None:
        ctx.wake_run(key, decision.requeue_after)

    conditions = list(decision.conditions)
    overdue = next((c for c in conditions if c.type == STOPPED_CONDITION), None)
    if overdue is not None and not any(c.get("type") == STOPPED_CONDITION for c in status.get("conditions") or ()):
        await post_event(ctx.kube, run, "Warning", "RunnerPodStopOverdue", overdue.message)
    if state == "Running":
        conditions = [Cond(c.type, True, "RunnerPodActive") if c.type == "IsRunning" else c for c in conditions]
    new_status: Body = {
        **status,
        "state": state,
        "retries": decision.retries,
        "attempts": raw_attempts,
        "conditions": merge_conditions(status.get("conditions"), (*conditions, *extra), now),
    }
    if new_status != (run.get("status") or {}):
        updated = await ctx.kube.merge_patch(
            crd_path("terraformruns", namespace, name, "status"), {"status": new_status}
        )
        ctx.inventory.runs.observe(updated)
        if state != status.get("state"):
            pull_request = (run.get("spec") or {}).get("pullRequest")
            if pull_request:  # a pull request's plan: its pull request shows it; the layer never reads it
                ctx.wake_pull_request((namespace, pull_request))
            else:
                ctx.wake_layer(layer_key)
            if state == "Failed":
                await post_event(
                    ctx.kube,
                    run,
                    "Warning",
                    "RunFailed",
                    f"{run['spec']['action']} failed after {decision.retries} attempt(s): {decision.message}",
                )
    # After the status says why (a later reconcile asks again if this fails). The attempt ends, and the next starts
    # or the Lease goes, only once the watch sees the pod gone: nothing overlaps a late start.
    if give_up is not None and not await ctx.kube.delete(path("v1", "pods", namespace, give_up.pod_name),
                                                         uid=give_up.pod_uid):
        log.info("run %s/%s: runner pod %s was already gone", namespace, name, give_up.pod_name)


async def _start_attempt(
    ctx: Context, run: Body, layer: Body, repository: Body | None, decision: RunDecision, now: datetime
) -> Body | Cond | CreationRefused:
    """Create the runner pod of the next attempt, or say why it has to wait."""
    assert decision.start_attempt is not None
    verdict = admission(ctx, run, layer, repository, now)
    if not verdict.allowed:
        return Cond("Admitted", False, verdict.reason, verdict.message)

    async def holder_of(namespace: str, holder: str) -> tuple[bool, str | None]:
        held = ctx.inventory.runs.get((namespace, holder)) or await ctx.kube.get(
            crd_path("terraformruns", namespace, holder)
        )
        return (held is not None, ((held or {}).get("status") or {}).get("state"))

    # Never beside another run's pod on the same state: a deleted run's Lease goes at once, its pod only once it
    # stopped (§7).
    waiting = await leases.acquire(ctx.kube, layer, run, holder_of, ctx.inventory.pods)
    if waiting is not None:
        return Cond("Admitted", False, "LayerLocked", waiting)

    pull_request = (run.get("spec") or {}).get("pullRequest")
    # A pull request's apply before merge runs as the layer's runner (admission checked it may): only its plans are
    # the pull requests' own, less trusted runs.
    pr_apply = bool(pull_request) and (run.get("spec") or {}).get("action") == "apply"
    if pr_apply:
        pull_request = None
    if decision.start_attempt > 1 and not pull_request and not pr_apply:
        # A retry of a run whose varsFrom could not be satisfied sees a Secret created since (run_inputs.py); a
        # pull request's record is the pull request controller's (what it may inherit), never refreshed here.
        await refresh_failed_inputs(ctx, layer, run["metadata"]["name"])
    settings = ctx.settings
    defaults = RunnerDefaults(
        settings.runner_image,
        settings.runner_pull_request_service_account if pull_request else settings.runner_service_account,
        settings.datastore_url,
        tuple(settings.runner_command),
        termination_grace_period_seconds=settings.runner_termination_grace_period_seconds,
        plan_timeout_seconds=math.ceil(settings.runner_plan_timeout.total_seconds()),
        apply_timeout_seconds=math.ceil(settings.runner_apply_timeout.total_seconds()),
        provider_mirror_url=settings.provider_mirror_url,
        provider_mirror_fail_closed=settings.provider_mirror_fail_closed,
        provider_mirror_registries=tuple(settings.provider_mirror_registries),
        tool_mirror_url=settings.tool_mirror_url,
        mirror_ca_pem=settings.mirror_ca_pem(),
        node_selector=settings.runner_node_selector,
        tolerations=tuple(settings.runner_tolerations),
        affinity=settings.runner_affinity,
    )
    override = _override_runner_spec(layer, repository)
    if pull_request and not _pull_request_inherits(ctx, run["metadata"]["namespace"], pull_request, repository):
        override = without_secret_sources(override)  # issue 24, P2: a pull request's plan gets no Secret
    elif pull_request:
        override.pop("serviceAccountName", None)  # always the pull requests' own account
    namespace = run["metadata"]["namespace"]
    # Only Secrets their writers opened to runners reach the pod (api/runner_secrets.py): whoever may edit layers
    # or repositories may not read every Secret. Refused like a pod the API refuses: the run waits and says why.
    secrets = await _read_secrets(ctx, namespace, override)
    closed = closed_secrets(override, layer, repository, namespace, secrets)
    # So does the account it runs as: the platform's, or one its writers opened to runners.
    account = other_account(override, defaults.service_account)
    refused_account = account and closed_account(override, layer, repository, namespace, defaults.service_account,
                                                 await _read_object(ctx, "serviceaccounts", namespace, account))
    for reason, refusals in ((SECRET_EVENT, closed), (ACCOUNT_EVENT, [refused_account] if refused_account else [])):
        if refusals:
            message = "; ".join(refusals)
            await post_event(ctx.kube, run, "Warning", reason, f"attempt {decision.start_attempt}: {message}")
            log.warning("run %s/%s: %s", namespace, run["metadata"]["name"], message)
            return CreationRefused(message, 403)
    # An object stored before the API refused reserved overrides (api/runner_contract.py) still asks for them:
    # the pod gets the platform's values, and the run says which were ignored (an Event, its attempt, a condition).
    ignored = ignored_overrides(override, layer, repository, defaults)
    # Variables fed from a Secret through the environment: the runner masks them in its log, the views too
    # (plans/masking.py, from the attempt below).
    secret_variables = secret_env_variables(override, secrets)
    body = build_runner_pod(run, layer, decision.start_attempt, defaults, override, secret_variables)
    name = pod_name(run["metadata"]["name"], decision.start_attempt)
    try:
        created = await ctx.kube.create(path("v1", "pods", namespace), body)
    except KubeError as exc:
        refused = await _refuse_existing(ctx, run, name, exc)
        # A 403 is a `Forbidden` event, as every 403 the controllers meet (forbidden.py); others get their own.
        reason = "Forbidden" if refused.status == 403 else EVENT_REASON
        await post_event(ctx.kube, run, "Warning", reason, f"attempt {decision.start_attempt}: {refused.message}")
        log.warning("run %s/%s: %s", namespace, run["metadata"]["name"], refused.message)
        return refused
    ctx.inventory.pods.observe(created)
    uid: str | None = created["metadata"].get("uid")
    await post_event(ctx.kube, run, "Normal", "RunnerPodCreated", f"attempt {decision.start_attempt}: pod {name}")
    attempt: Body = {"podName": name, "number": decision.start_attempt, "startedAt": format_time(now),
                     "logsUploaded": False}
    if ignored:
        await post_event(ctx.kube, run, "Warning", IGNORED_EVENT,
                         f"attempt {decision.start_attempt}: pod {name} got burrito-py's own values instead of: "
                         + "; ".join(ignored))
        attempt["ignoredOverrides"] = ignored
    if secret_variables:
        attempt["secretVariables"] = secret_variables
    # The datastore grants runner rights only to this pod (name and uid): docs/architecture.md §10.2.
    return {**attempt, "podUid": uid} if uid else attempt


SECRET_EVENT = "RunnerSecretRefused"  # noqa: S105 - an event reason
ACCOUNT_EVENT = "RunnerServiceAccountRefused"


async def _read_object(ctx: Context, plural: str, namespace: str, name: str) -> Body | None:
    """A core object of the namespace as it is (None: absent, unreadable, or a name that is not one)."""
    if object_name_problem(name) is not None:  # the API refuses such a pod anyway: never read as a path
        return None
    try:
        return await ctx.kube.get(path("v1", plural, namespace, name))
    except KubeError as exc:
        if exc.status is None or exc.status >= 500:
            raise
        return None


async def _read_secrets(ctx: Context, namespace: str, override: Body) -> dict[str, Body | None]:
    """The Secrets the runner pod would get, as they are (None: absent, unreadable, or a name that is not one)."""
    return {name: await _read_object(ctx, "secrets", namespace, name) for name in secret_names(override)}


@dataclass(frozen=True, slots=True)
class CreationRefused:
    """The API would not create the attempt's pod; `message` carries its answer. `pod_exists`: the create's
    409 said the pod is there (it may run Terraform), so the run keeps the layer's Lease while it waits."""

    message: str
    status: int = 0
    pod_exists: bool = False


class RunViewStale(Exception):
    """The run as the inventory had it is older than the API's: nothing of this reconcile is written, it is done
    again (the scheduler's retry) from the run as stored."""


async def _refuse_existing(ctx: Context, run: Body, name: str, exc: KubeError) -> CreationRefused:
    """After a failed create: why the attempt has no pod yet. A pod found under its name (409) is never adopted,
    even one naming this run: its creator wrote its owner reference and run label, and anyone who may create pods
    in the namespace may make it, as the runner account, before the run makes its own (the name is known). Only a
    uid the run's own create was answered with is recorded and so gets runner rights (§10.2). Such a pod is deleted
    (one an earlier try made, whose answer was lost or whose leader died before recording it, has had no runner
    rights: nothing it did counts), and the attempt's pod is created once it is gone."""
    namespace = run["metadata"]["namespace"]
    if exc.status != 409:
        return CreationRefused(
            f"could not create runner pod {name}: {exc.status} {exc.reason}: {exc.message}", exc.status
        )
    # 409 AlreadyExists: read it back, to tell a pod naming this run from a stranger's of the same name.
    try:
        existing = await ctx.kube.get(path("v1", "pods", namespace, name))
    except KubeError as error:
        # A pod exists that we cannot read (a 403: the controllers lack `get` on pods): waiting visibly, with
        # the Lease kept (that pod may be running Terraform), rather than raising into a 5-second retry loop.
        return CreationRefused(
            f"runner pod {name} already exists (409) and cannot be read: {error.status} "
            f"{error.reason}: {error.message}", error.status, pod_exists=True,
        )
    if existing is None:
        return CreationRefused(f"could not create runner pod {name}: 409 Conflict, and the pod is gone")
    if not belongs_to(existing, run):
        return CreationRefused(
            f"could not create runner pod {name}: a pod of that name exists and does not belong to run "
            f"{run['metadata']['name']} (uid {run['metadata'].get('uid')})"
        )
    ctx.inventory.pods.observe(existing)
    meta = existing["metadata"]
    unrecorded = (f"runner pod {name} exists and names run {run['metadata']['name']}, but not as the answer to the "
                  "run's own create (an earlier try whose answer was lost, or a pod made by someone who may create "
                  "pods): it is never adopted")
    if meta.get("deletionTimestamp"):
        return CreationRefused(f"{unrecorded}; it is being deleted, the attempt's pod is created once it is gone",
                               409, pod_exists=True)
    # The run as the API has it: a status write recording this very pod may have been applied with its answer lost,
    # and the watch not have brought it yet. That pod is the run's own (and may be applying): never deleted.
    fresh = await ctx.kube.get(crd_path("terraformruns", namespace, run["metadata"]["name"]))
    if fresh is not None and any(a.get("podName") == name and a.get("podUid") == meta.get("uid")
                                 for a in (fresh.get("status") or {}).get("attempts") or ()):
        ctx.inventory.runs.observe(fresh)
        raise RunViewStale(f"run {run['metadata']['name']} records runner pod {name} already (a status write whose "
                           "answer was lost): reconciled again from the run as stored")
    try:
        await ctx.kube.delete(path("v1", "pods", namespace, name), uid=meta.get("uid"))
    except KubeError as error:
        return CreationRefused(f"{unrecorded}, and it could not be deleted: {error.status} {error.reason}: "
                               f"{error.message}", error.status or 409, pod_exists=True)
    return CreationRefused(f"{unrecorded}; deleted, the attempt's pod is created once it is gone", 409,
                           pod_exists=True)


def belongs_to(pod: Mapping[str, Any], run: Mapping[str, Any]) -> bool:
    """A pod that names this run: its controller owner reference is the run's uid and its run label names it.
    Whoever created the pod wrote both: never proof that the run's controller made it (`_refuse_existing`)."""
    meta, run_meta = pod.get("metadata") or {}, run["metadata"]
    owned = any(
        ref.get("kind") == "TerraformRun" and ref.get("uid") == run_meta.get("uid") and ref.get("controller")
        for ref in meta.get("ownerReferences") or ()
    )
    return owned and (meta.get("labels") or {}).get(ann.LABEL_RUN) == run_meta["name"]


def _pull_request_inherits(ctx: Context, namespace: str, pull_request: str, repository: Body | None) -> bool:
    """Whether a pull request's plan gets the layer's Secret-fed runner env (`inheritSecrets`); a pull request
    the controllers do not hold counts as a fork's."""
    held = ctx.inventory.pull_requests.get((namespace, pull_request))
    from_fork = bool(((held or {}).get("spec") or {}).get("fromFork", True)) if held is not None else True
    return inherits_secrets(((repository or {}).get("spec") or {}).get("pullRequests"), from_fork)


def _override_runner_spec(layer: Body, repository: Body | None) -> dict[str, Any]:
    """Layer fields win over the repository's, field by field; runner metadata maps merge."""
    base = dict(inherited({}, repository, "overrideRunnerSpec") or {})
    mine = dict(inherited(layer, None, "overrideRunnerSpec") or {})
    merged = {**base, **{k: v for k, v in mine.items() if v not in (None, [], {})}}
    meta_base, meta_mine = base.get("metadata") or {}, mine.get("metadata") or {}
    if meta_base or meta_mine:
        merged["metadata"] = {
            "labels": {**(meta_base.get("labels") or {}), **(meta_mine.get("labels") or {})},
            "annotations": {**(meta_base.get("annotations") or {}), **(meta_mine.get("annotations") or {})},
        }
    return merged


async def _record_attempt(ctx: Context, run: Body, layer: Body, finish: FinishAttempt, now: datetime) -> Recorded:
    """Read what the ended attempt stored, write its result on the layer (not for a pull request's run), and
    return what to record in its status entry. Raises FactsUnavailable while the datastore cannot answer."""
    spec = run.get("spec") or {}
    needed = facts_needed(str(spec.get("action")), finish.succeeded)
    meta = layer["metadata"]
    if needed and ctx.datastore is None:
        return Recorded()
    # A migration needs no fact of the datastore: its runner compared the resources on both sides (§5.12).
    facts = await gather_facts(ctx.datastore, meta["namespace"], meta["name"], run["metadata"]["name"], finish.number,
                               needed) if needed and ctx.datastore is not None else AttemptFacts()
    finished_at = format_time(parse_time(finish.finished_at) or now)
    recorded = record_result(run, finish.number, finish.succeeded, finished_at, facts)
    if recorded.annotations and not spec.get("pullRequest"):
        try:
            patched = await ctx.kube.merge_patch(crd_path("terraformlayers", meta["namespace"], meta["name"]),
                                                 {"metadata": {"annotations": recorded.annotations}})
        except KubeError as exc:
            if exc.status != 404:  # 404: the layer is gone, and its runs with it
                raise
        else:
            ctx.inventory.layers.observe(patched)
    return recorded


async def _upload_logs(ctx: Context, run: Body, layer: Body, number: int) -> bool:
    """Copy a finished attempt's log to the datastore; False (retried later) when it cannot yet."""
    if ctx.datastore is None:
        return False
    namespace = run["metadata"]["namespace"]
    name = pod_name(run["metadata"]["name"], number)
    try:
        text = await _read_attempt_log(ctx, namespace, name)
    except KubeError as exc:
        if exc.status == 404:
            text = f"(the runner pod {name} was gone before its log could be collected)\n"
        else:
            log.warning("could not read log of %s/%s: %s", namespace, name, exc)
            return False
    meta = layer["metadata"]
    try:
        await _put_log(ctx.datastore, meta["namespace"], meta["name"], run["metadata"]["name"], number, text.encode())
    except Exception as exc:  # the datastore may be briefly unavailable; the next reconcile retries
        log.warning("could not upload log of %s attempt %s: %s", run["metadata"]["name"], number, exc)
        ctx.wake_run((namespace, run["metadata"]["name"]), WAIT_RECHECK)
        return False
    # Counted once the log is stored: an attempt's log is uploaded once (logsUploaded), so counted once.
    await _report_mirror_fallbacks(ctx, run, number, text)
    return True


async def _read_attempt_log(ctx: Context, namespace: str, name: str) -> str:
    """The attempt's log, at most LOG_READ_BYTES of it (`limitBytes`). A longer one is read again as its last
    lines (its end says why the attempt ended), behind a line saying the beginning was not collected."""
    log_path = path("v1", "pods", namespace, name, "log")
    text = await ctx.kube.read_text(log_path, query={"limitBytes": str(LOG_READ_BYTES + 1)})
    if _size(text) <= LOG_READ_BYTES:
        return text
    lines = text.count("\n")
    del text
    note = LOG_CUT_NOTE.format(limit=LOG_READ_BYTES)
    budget = LOG_READ_BYTES - len(note)
    # The API cuts `tailLines` to `limitBytes` from the window's start, which would keep the wrong end: the window
    # starts a little smaller than the beginning's lines suggest, and halves until it fits.
    count = max(1, lines * 9 // 10)
    while True:
        tail = await ctx.kube.read_text(log_path, query={"tailLines": str(count), "limitBytes": str(budget)})
        if count == 1 or _size(tail) < budget:
            return note + tail
        count //= 2


def _size(text: str) -> int:
    return len(text.encode(errors="surrogateescape"))


async def _put_log(store: DatastoreClient, namespace: str, layer: str, run: str, number: int, data: bytes) -> None:
    """Store the log; one above the datastore's limit (413 naming it) is cut to its end, which says why it
    failed, behind a line saying how much was dropped."""
    from burrito_py.datastore.client import DatastoreError

    try:
        await asyncio.to_thread(store.put_logs, namespace, layer, run, number, data)
    except DatastoreError as exc:
        if exc.status_code != 413 or not exc.limit:
            raise
        note = b"(the beginning of this log was dropped: it was longer than the datastore keeps)\n"
        keep = max(exc.limit - len(note), 0)
        await asyncio.to_thread(store.put_logs, namespace, layer, run, number, note + data[len(data) - keep:])


async def _report_mirror_fallbacks(ctx: Context, run: Body, number: int, text: str) -> None:
    """The runner printed that terraform installed providers directly (its provider mirror was down)."""
    lines = fallback_lines(text)
    if not lines:
        return
    metrics.PROVIDER_MIRROR_FALLBACKS.labels(run["metadata"]["namespace"]).inc(len(lines))
    detail = lines[0].removeprefix("burrito-py: ")
    await post_event(ctx.kube, run, "Warning", "ProviderMirrorUnavailable", f"attempt {number}: {detail}")
