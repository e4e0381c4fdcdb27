"""TerraformPullRequest reconcile (docs/architecture.md §11.3): gather one snapshot, decide
(`pull_request_decisions.decide_pull_request`), then act: discard runs, create runs, write the status, publish the
comment and commit statuses.

Gathering holds the I/O the decision needs: when the head moved, the head is fetched into the repository's own
mirror, its source archive stored and its affected layers found (`pullrequests.affected`); a finished run's plan,
log tail and policy verdict are read from the datastore once (kept in `PullRequestMemory`).

Publishing never blocks planning: a provider that refuses or is down gives `Published=False` and a retry, the
runs go on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

from burrito_py.api import annotations as ann
from burrito_py.api.patterns import object_name_problem
from burrito_py.controllers import metrics
from burrito_py.controllers.context import Context
from burrito_py.controllers.layer.dependencies import dependency_snapshot, upstream_inputs
from burrito_py.controllers.layer.dependency_decisions import judge_dependencies
from burrito_py.controllers.layer.inputs_record import Upstream, needs_record
from burrito_py.controllers.layer.run_inputs import put_run_inputs, store_record
from burrito_py.controllers.pullrequest.decide import (
    PlanOutcome,
    PullRequestDecision,
    PullRequestSnapshot,
    RunFacts,
    decide_pull_request,
    pull_request_record,
)
from burrito_py.controllers.repository.decide import source_not_stored_reason
from burrito_py.controllers.repository.reconcile import credentials_of, ensure_source, mirror_for
from burrito_py.datastore.client import DatastoreError
from burrito_py.git.allowed_hosts import HostNotAllowed
from burrito_py.git.credentials import CredentialsError as GitCredentialsError
from burrito_py.git.mirror import GitError, SourceRefused
from burrito_py.gitproviders.client import CommitStatus, ProviderClient, ProviderError, ReviewFacts
from burrito_py.gitproviders.registry import provider_named
from burrito_py.kube.client import KubeError, crd_path, path
from burrito_py.kube.conditions import Cond, merge_conditions
from burrito_py.kube.events import post_event
from burrito_py.kube.inventory import Body, Key, key_of
from burrito_py.kube.scheduler import slot_released
from burrito_py.outbound import OutboundRefused
from burrito_py.plans.changes import changes_digest
from burrito_py.plans.masking import load_json, run_secret_variables, values_to_hide
from burrito_py.plans.model import PlanFormatError, parse_plan
from burrito_py.pullrequests.affected import Affected, affected_layers
from burrito_py.pullrequests.apply import layer_apply_settings, lock_holder, release_due, release_plan
from burrito_py.pullrequests.commands import (
    ApplyOrder,
    CommandDecision,
    CommandFacts,
    LayerApply,
    Pending,
    command_settings,
    decide_command,
    identity_of,
    parse,
    pending_commands,
    reply_body,
)
from burrito_py.pullrequests.comment import LOG_LINES, comment_key, marker, render
from burrito_py.pullrequests.credentials import (
    CredentialsError,
    TokenSource,
    client_for,
    default_api_url,
    provider_token_source,
)
from burrito_py.pullrequests.forks import ApprovalToCheck, approval_to_check, fork_gate, inherits_secrets
from burrito_py.pullrequests.providers import body_digest, publish
from burrito_py.pullrequests.statuses import commit_statuses
from burrito_py.timeutil import format_time_precise, parse_time, utcnow

log = logging.getLogger(__name__)
RETRY_SECONDS = 15.0
COMMANDS_KEPT = 100  # status.commands: the latest answered comment commands


async def reconcile_pull_request(ctx: Context, key: Key) -> None:
    started = time.perf_counter()
    try:
        await _reconcile(ctx, key)
    except Exception:
        metrics.RECONCILE_ERRORS.labels("pull_request").inc()
        raise
    finally:
        metrics.RECONCILE_SECONDS.labels("pull_request").observe(time.perf_counter() - started)


def _settings(repository: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return ((repository or {}).get("spec") or {}).get("pullRequests") or {}


async def _reconcile(ctx: Context, key: Key) -> None:
    pull_request = ctx.inventory.pull_requests.get(key)
    if pull_request is None or pull_request["metadata"].get("deletionTimestamp"):
        return
    namespace, name = key
    spec: Mapping[str, Any] = pull_request.get("spec") or {}
    status: Mapping[str, Any] = pull_request.get("status") or {}
    repository = ctx.inventory.repositories.get((namespace, str(spec.get("repository") or "")))
    runs = [_facts(run) for run in ctx.inventory.runs_of_pull_request(namespace, name)]
    # Only this namespace's layers are ever planned for it (a run's layer is in the run's namespace).
    layers = {key_of(layer): str((layer.get("spec") or {}).get("path") or "") for layer in ctx.inventory.layers
              if layer["metadata"]["namespace"] == namespace and not layer["metadata"].get("deletionTimestamp")}
    open_ = spec.get("state", "open") == "open"
    ready: Cond | None = None
    if open_ and (repository is None or not _settings(repository).get("enabled")):
        why = (f"TerraformRepository {namespace}/{spec.get('repository')} does not exist" if repository is None
               else f"TerraformRepository {namespace}/{spec.get('repository')} does not plan pull requests "
               "(spec.pullRequests.enabled)")
        await _write_status(ctx, pull_request, dict(status), Cond("Ready", False, "RepositoryNotReady", why))
        return
    outcomes = await _outcomes(ctx, runs)
    if any(run.state in ("Succeeded", "Failed") and run.attempt and run.name not in outcomes for run in runs):
        ctx.wake_pull_request(key, RETRY_SECONDS)  # artifacts not readable yet (a log still being uploaded)
    settings = _settings(repository)
    check = approval_to_check(spec, settings, status) if open_ else None
    if check is not None:
        assert repository is not None  # an approval needs the repository's approvers
        checked = await _check_approval(ctx, repository, spec, check)
        if isinstance(checked, str):  # not planned on an approval whose author is unknown: asked again
            await _write_status(ctx, pull_request, dict(status),
                                Cond("Ready", False, "ApproverPermissionUnavailable", checked))
            ctx.wake_pull_request(key, RETRY_SECONDS)
            return
        status = {**status, "approvalChecked": checked}
    gate = fork_gate(spec, settings, status) if open_ else None
    # Once merged, what each layer's branch plan made of the merge (its status.reviewedPlan; §11.3 "After merge").
    verdicts = {key_of(layer): (layer.get("status") or {}).get("reviewedPlan") or {} for layer in ctx.inventory.layers
                if layer["metadata"]["namespace"] == namespace
                and ((layer.get("status") or {}).get("reviewedPlan") or {}).get("pullRequest") == name}
    snap = PullRequestSnapshot(name, namespace, spec, status, layers, runs, outcomes, gate=gate,
                               now=format_time_precise(utcnow()), verdicts=verdicts)
    decision = decide_pull_request(snap, settings)
    if decision.needs_review:
        assert repository is not None  # an apply requirement is a repository's setting
        review = await _review_facts(ctx, repository, spec)
        if isinstance(review, str):  # nothing of the merge is recorded before its review facts are known
            # The layers it holds go all the same once their branch has the merge (`release_due`): a provider that
            # never answers again (a token revoked, the pull request deleted on the host) must not hold them for good.
            await _release_all(ctx, pull_request, repository)
            await _write_status(ctx, pull_request, dict(status), Cond("Ready", False, "ReviewsUnavailable", review))
            ctx.wake_pull_request(key, RETRY_SECONDS)
            return
        ready = Cond("Ready", True, "ReviewsRead", "its reviews were read for the apply requirement approved")
        snap = dataclasses.replace(snap, review=review)
        decision = decide_pull_request(snap, settings)
    if decision.needs_affected:
        assert repository is not None
        try:
            affected = await _affected(ctx, repository, spec)
        except (GitError, GitCredentialsError, OutboundRefused, DatastoreError) as exc:
            reason, message, warn = _head_refusal(exc)
            before = [c for c in status.get("conditions") or () if c.get("type") == "Ready"]
            await _write_status(ctx, pull_request, dict(status), Cond("Ready", False, reason, message))
            if warn and (not before or before[0].get("message") != message):
                await post_event(ctx.kube, pull_request, "Warning", reason, message)
            ctx.wake_pull_request(key, RETRY_SECONDS)
            return
        snap = dataclasses.replace(snap, affected=affected)
        decision = decide_pull_request(snap, settings)
    # The controllers' own comments this time: each due one says whether it was posted (`Commented`).
    commented: list[Cond] = []
    release_notice: list[str] = []  # status.releaseNotice: reopened, a notice still pending is dropped
    if not open_:
        released, notice, release_notice = await _release_all(ctx, pull_request, repository)
        if not released:
            ctx.wake_pull_request(key, RETRY_SECONDS)
        commented += [notice] if notice is not None else []
    handled: list[Body] = []
    pending = pending_commands(spec, status)
    if pending and repository is not None:
        handled, replan, answered = await _answer_commands(ctx, pull_request, repository, pending,
                                                            {**status, **decision.status})
        commented.append(answered)
        if not answered.status:
            ctx.wake_pull_request(key, RETRY_SECONDS)
        if replan:
            snap = dataclasses.replace(snap, replan=replan)
            decision = decide_pull_request(snap, settings)
    planned: Cond | None = None
    if open_ and decision.gate is not None:
        planned = Cond("Planned", False, decision.gate.reason, decision.gate.message)
        before = [c for c in status.get("conditions") or () if c.get("type") == "Planned"]
        if not before or before[0].get("message") != planned.message:
            await post_event(ctx.kube, pull_request, "Normal", decision.gate.reason, decision.gate.message)
    elif open_:
        ready = Cond("Ready", True, "HeadFetched", f"layers found at {str(spec.get('headSha'))[:12]}")
        approval = spec.get("approval") or {}
        planned = (Cond("Planned", True, "Approved", f"a fork's head, approved by {approval.get('by')} at "
                        f"{str(spec.get('headSha'))[:12]}") if spec.get("fromFork")
                   else Cond("Planned", True, "NotAFork", "the head is in the repository itself"))
    if not await _discard(ctx, namespace, decision.discard):
        ctx.wake_pull_request(key, RETRY_SECONDS)
    for layer_key, run in decision.create:
        if not await _create_run(ctx, pull_request, layer_key, run):
            ctx.wake_pull_request(key, RETRY_SECONDS)
    new_status: Body = {**status, **decision.status}
    if decision.tell and repository is not None:
        told = await _tell(ctx, pull_request, repository, decision)
        commented.append(told)
        if not told.status:
            new_status["merged"] = status.get("merged")  # nothing marked told: said at the retry
            ctx.wake_pull_request(key, RETRY_SECONDS)
    for layer_key in decision.wake_layers:
        ctx.wake_layer(layer_key)  # the merge is recorded: a plan waiting at the merge commit is judged now
    new_status["releaseNotice"] = release_notice or None
    if handled:
        new_status["commands"] = [*(status.get("commands") or ()), *handled][-COMMANDS_KEPT:]
    if ((decision.status.get("headSha"), decision.status.get("gatedSha"))
            != (status.get("headSha"), status.get("gatedSha"))):
        new_status["statuses"] = []  # a new head carries none of the statuses sent for the last one
    published: Cond | None = None
    if decision.results is not None and repository is not None:
        published = await _publish(ctx, pull_request, repository, decision, new_status)
        if not published.status:
            ctx.wake_pull_request(key, RETRY_SECONDS)
            before = [c for c in status.get("conditions") or () if c.get("type") == "Published"]
            if not before or before[0].get("message") != published.message:
                await post_event(ctx.kube, pull_request, "Warning", "PublishFailed", published.message)
    comments = next((c for c in commented if not c.status), commented[0] if commented else None)
    if comments is not None and not comments.status:
        log.warning("pull request %s/%s: %s", namespace, name, comments.message)
        before = [c for c in status.get("conditions") or () if c.get("type") == "Commented"]
        if not before or before[0].get("message") != comments.message:
            await post_event(ctx.kube, pull_request, "Warning", "CommentFailed", comments.message)
    await _write_status(ctx, pull_request, new_status, ready, planned, published, comments)


def _facts(run: Mapping[str, Any]) -> RunFacts:
    spec, status = run.get("spec") or {}, run.get("status") or {}
    layer = spec.get("layer") or {}
    message = next((str(c.get("message") or "") for c in status.get("conditions") or ()
                    if c.get("type") == "HasSucceeded"), "")
    last: Mapping[str, Any] = (status.get("attempts") or [{}])[-1]
    return RunFacts(run["metadata"]["name"], (layer.get("namespace") or run["metadata"]["namespace"],
                                              str(layer.get("name") or "")), status.get("state"), message,
                    uid=str(run["metadata"].get("uid") or ""),
                    attempt=len(status.get("attempts") or ()),
                    json_sum=last.get("planJsonSum"), json_size=last.get("planJsonSize"),
                    plan_sum=last.get("planSum"), action=str(spec.get("action") or "plan"),
                    artifact_run=(spec.get("artifact") or {}).get("run"), revision=layer.get("revision"),
                    secret_variables=tuple(run_secret_variables(run)))


async def _review_facts(ctx: Context, repository: Mapping[str, Any], spec: Mapping[str, Any]) -> ReviewFacts | str:
    """The provider's review facts of the pull request (apply requirements), or why they cannot be had now."""
    client = await _client(ctx, repository, spec)
    if isinstance(client, Cond):
        log.warning("pull request %s: cannot read its reviews: %s", spec.get("number"), client.message)
        return f"cannot read its reviews for the apply requirement approved: {client.message}"
    try:
        return await asyncio.to_thread(client.review_facts, str(spec.get("base") or ""), str(spec.get("headSha") or ""))
    except (ProviderError, OutboundRefused) as exc:
        log.warning("pull request %s: cannot read its reviews: %s", spec.get("number"), exc)
        return f"cannot read its reviews for the apply requirement approved: {exc}"
    finally:
        client.close()


async def _check_approval(ctx: Context, repository: Mapping[str, Any], spec: Mapping[str, Any],
                          check: ApprovalToCheck) -> dict[str, Any] | str:
    """`status.approvalChecked` for a fork's approval by comment: whether the provider says its author may write
    to the repository; or why it cannot be asked now."""
    client = await _client(ctx, repository, spec)
    if isinstance(client, Cond):
        return f"cannot ask whether {check.by} (who approved by comment) may write to the repository: {client.message}"
    try:
        may = await asyncio.to_thread(client.write_permission, check.by, check.by_id)
    except (ProviderError, OutboundRefused) as exc:
        return f"cannot ask whether {check.by} (who approved by comment) may write to the repository: {exc}"
    finally:
        client.close()
    log.info("pull request %s: approval by comment %s: %s %s write to the repository", spec.get("number"),
             check.comment, check.by, "may" if may else "may not")
    return {"comment": check.comment, "by": check.by, "mayWrite": may, "at": format_time_precise(utcnow())}


async def _tell(ctx: Context, pull_request: Mapping[str, Any], repository: Mapping[str, Any],
                decision: PullRequestDecision) -> Cond:
    """Say on the pull request what its merge meant for each layer (one comment per verdict); `Commented=False`
    when the provider could not be reached (the verdicts are said at the retry; a crash between a comment and the
    status write says one twice, as a command's reply)."""
    what = "cannot say on the pull request what its merge meant (tried again)"
    client = await _client(ctx, repository, pull_request.get("spec") or {})
    if isinstance(client, Cond):
        return _not_commented(what, client)
    try:
        for _layer, text in decision.tell:
            await asyncio.to_thread(client.create_comment, text)
    except (ProviderError, OutboundRefused) as exc:
        return _not_commented(what, _refusal(exc, _settings(repository)))
    finally:
        client.close()
    return COMMENTED


def _head_refusal(exc: Exception) -> tuple[str, str, bool]:
    """`Ready`'s reason and message for a head that could not be fetched or stored, and whether a Warning says it
    too: not for what each retry would say again (a failed fetch, a datastore that does not store)."""
    if isinstance(exc, HostNotAllowed):
        return "HostNotAllowed", str(exc), True
    if isinstance(exc, OutboundRefused):
        return "AddressNotAllowed", f"spec.repository.url: {exc}", True
    if isinstance(exc, DatastoreError | SourceRefused):
        reason = "SourceNotStored" if isinstance(exc, SourceRefused) else source_not_stored_reason(exc.status_code)
        return reason, f"the source archive of the head cannot be stored: {exc}", False
    return "FetchFailed", str(exc), False


async def _affected(ctx: Context, repository: Mapping[str, Any], spec: Mapping[str, Any]) -> Affected:
    """Fetch the head into the repository's mirror, store its source archive, and find what it affects."""
    meta = repository["metadata"]
    source = (repository.get("spec") or {}).get("repository") or {}
    credentials = await credentials_of(ctx, meta["namespace"], source.get("secretName"), source.get("url", ""))
    mirror = mirror_for(ctx.settings.git_cache_dir, meta["namespace"], meta["name"], source.get("url", ""),
                        ctx.settings.outbound_policy())
    number = int(spec["number"])
    head_ref = provider_named(str(spec["provider"])).head_ref(number, str(spec.get("headBranch") or ""))
    head = await asyncio.to_thread(mirror.fetch_pull_request, head_ref, number, str(spec["headSha"]), credentials)
    if await asyncio.to_thread(mirror.resolve, str(spec["base"])) is None:  # a branch no layer follows yet
        await asyncio.to_thread(mirror.fetch, credentials)
    changes = await asyncio.to_thread(mirror.pull_request_changes, str(spec["base"]), head)
    await ensure_source(ctx, mirror, meta["namespace"], meta["name"], head)
    # A pull request's runs live in its namespace (a run's layer must be in the run's own, §6.1): layers of other
    # namespaces using this repository are not planned for it.
    own = [layer for layer in ctx.inventory.layers if layer["metadata"]["namespace"] == meta["namespace"]]
    return affected_layers(changes, own, (meta["namespace"], meta["name"]), str(spec["base"]))


async def _outcomes(ctx: Context, runs: Sequence[RunFacts]) -> dict[str, PlanOutcome]:
    """Each finished run's outcome, read once from the datastore (a run that cannot be read yet is left out and
    shown as planning or failed until it can)."""
    memory = ctx.pull_request_memory
    found: dict[str, PlanOutcome] = {}
    for run in runs:
        if run.state not in ("Succeeded", "Failed") or run.attempt < 1:
            continue
        held = memory.outcomes.get(run.uid)
        if held is None:
            held = await _read_outcome(ctx, run)
            if held is None:
                continue
            memory.outcomes[run.uid] = held
        found[run.name] = held
    return found


async def _read_outcome(ctx: Context, run: RunFacts) -> PlanOutcome | None:
    from burrito_py.datastore.client import DatastoreError, NotTheRecordedObject

    if ctx.datastore is None:
        return None
    namespace, layer = run.layer
    store = ctx.datastore
    try:
        record = await _inputs_record(ctx, run)
        if run.state == "Failed":
            raw = await asyncio.to_thread(store.get_logs, namespace, layer, run.name, run.attempt)
            tail = tuple(raw.decode(errors="replace").rstrip("\n").splitlines()[-LOG_LINES:])
            return PlanOutcome("failed", run.message or "the plan failed", log_tail=tail,
                               hide=values_to_hide(record, None, run.secret_variables))
        limit = int(ctx.settings.max_plan_json_bytes)
        if not run.json_sum or run.json_size is None or run.json_size > limit:
            return PlanOutcome("failed", f"the plan JSON ({run.json_size} bytes) is above the {limit} bytes the "
                               "controllers read, or was not recorded: it is not shown" if run.json_sum
                               else "the plan JSON was not recorded by the controllers")
        async with ctx.parse_budget.hold(run.json_size):
            raw_json = await asyncio.to_thread(store.get_plan_verified, namespace, layer, run.name, run.attempt,
                                               "json", limit, run.json_sum)
            model = await asyncio.to_thread(parse_plan, raw_json, attributes=True)  # the comment shows them
            # What the comment masks (comment.py): the values of Secret-fed and sensitive variables.
            hide = values_to_hide(record, await asyncio.to_thread(load_json, raw_json), run.secret_variables)
        pretty = await asyncio.to_thread(store.get_plan, namespace, layer, run.name, run.attempt, "pretty")
    except NotTheRecordedObject as exc:
        return PlanOutcome("failed", f"the plan JSON is not the one recorded: {exc}")
    except DatastoreError as exc:
        log.info("pull request run %s/%s: its artifacts cannot be read yet: %s", namespace, run.name, exc)
        return None
    except PlanFormatError as exc:
        return PlanOutcome("failed", f"the plan JSON is invalid: {exc}")
    verdict = None
    body = ctx.inventory.layers.get(run.layer)
    policies = await ctx.policies.for_layer(ctx.kube, body) if body is not None else []
    if policies:
        async with slot_released():  # as a layer's review (plan_review.py): bounded, holding no queue slot
            verdict = (await ctx.sandbox.evaluate(policies, model, namespace=namespace,
                                                  plan_sum=f"pull-request:{run.name}", drift_correction=False)).result
    # The digest a merge compares with the branch's plan (§11.3 "After merge"): the controllers' own, from the JSON
    # whose sum the run controller recorded, as the layer's review computes it (never anything a runner claims).
    return PlanOutcome("planned", model.summary(), model, pretty.decode(errors="replace"), verdict=verdict,
                       hide=hide, changes_digest=changes_digest(model))


async def _inputs_record(ctx: Context, run: RunFacts) -> dict[str, Any] | None:
    """The run's inputs record (its variables, Secret-fed ones named), None when it has none."""
    from burrito_py.datastore.client import DatastoreError

    assert ctx.datastore is not None
    try:
        raw = await asyncio.to_thread(ctx.datastore.get_inputs, run.layer[0], run.layer[1], run.name)
    except DatastoreError as exc:
        if exc.status_code == 404:
            return None
        raise
    found = load_json(raw)
    return dict(found) if found is not None else None


async def _discard(ctx: Context, namespace: str, runs: Sequence[RunFacts]) -> bool:
    """The runs' artifacts, then the runs (their pods go with them). False when something is left for a retry."""
    from burrito_py.datastore.client import DatastoreError

    done = True
    for run in runs:
        try:
            if ctx.datastore is not None:
                await asyncio.to_thread(ctx.datastore.delete_run, run.layer[0], run.layer[1], run.name)
            await ctx.kube.delete(crd_path("terraformruns", namespace, run.name))
        except (DatastoreError, KubeError) as exc:
            log.warning("pull request run %s/%s: cannot discard it yet: %s", namespace, run.name, exc)
            done = False
            continue
        ctx.pull_request_memory.outcomes.pop(run.uid, None)
    return done


async def _create_run(ctx: Context, pull_request: Mapping[str, Any], layer_key: Key, name: str) -> bool:
    """One plan-only run at the head; its upstream outputs first when the layer reads some (§5.11). False when it
    has to wait (the outputs could not be stored)."""
    meta, spec = pull_request["metadata"], pull_request.get("spec") or {}
    layer = ctx.inventory.layers.get(layer_key)
    if layer is None:
        return True
    annotations = {ann.RUN_CREATED_AT: format_time_precise(utcnow())}
    snapshot = await dependency_snapshot(ctx, layer)
    verdict = judge_dependencies(snapshot) if snapshot is not None else None
    upstream: Upstream | None = None
    if verdict is not None and verdict.inputs_digest is not None and verdict.inputs:
        consumed = await upstream_inputs(ctx, verdict)
        if isinstance(consumed, str):
            return False
        upstream = consumed
        annotations[ann.RUN_INPUTS_DIGEST] = verdict.inputs_digest
    # What the plan is given (issue 24, P2): the layer's varsFrom values and sensitive upstream outputs only when
    # the repository says so (`inheritSecrets`; for a fork `forks.inheritSecrets`), else none of them.
    repository = ctx.inventory.repositories.get((meta["namespace"], str(spec.get("repository") or "")))
    if inherits_secrets(_settings(repository), bool(spec.get("fromFork"))):
        if await put_run_inputs(ctx, layer, name, upstream) is not None:
            return False
    elif needs_record(layer, upstream) and await store_record(ctx, layer, name,
                                                               pull_request_record(upstream)) is not None:
        return False
    body = {
        "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
        "metadata": {
            "name": name, "namespace": meta["namespace"],
            "labels": {ann.LABEL_PULL_REQUEST: ann.layer_label(meta["name"])},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": pull_request.get("apiVersion", ann.API_VERSION),
                                 "kind": "TerraformPullRequest", "name": meta["name"], "uid": meta["uid"],
                                 "blockOwnerDeletion": True}],
        },
        "spec": {"action": "plan", "layer": {"name": layer_key[1], "namespace": layer_key[0],
                                             "revision": spec["headSha"]},
                 "pullRequest": meta["name"]},
    }
    try:
        created = await ctx.kube.create(crd_path("terraformruns", meta["namespace"]), body)
    except KubeError as exc:
        if exc.status == 409:
            return True  # a retried create: the name is the run's for this head
        raise
    ctx.inventory.runs.observe(created)
    ctx.wake_run(key_of(created))
    return True


async def _publish(ctx: Context, pull_request: Mapping[str, Any], repository: Mapping[str, Any],
                   decision: PullRequestDecision, status: Body) -> Cond:
    """Render and publish (comment, commit statuses); records what was published into `status`."""
    assert decision.results is not None
    # The marker's key: only a comment we wrote is ever taken for ours (an outsider can write the marker's rest).
    results = dataclasses.replace(decision.results, key=comment_key(str(pull_request["metadata"].get("uid") or "")))
    spec = pull_request.get("spec") or {}
    provider = str(spec["provider"])
    settings = _settings(repository)
    limit = int(settings.get("commentLimit") or provider_named(provider).comment_limit)
    body = render(results, limit)
    statuses = commit_statuses(results)
    head = str(spec["headSha"])
    sent = {s["context"]: CommitStatus(s["context"], s["state"], s.get("description", ""))
            for s in status.get("statuses") or ()}
    comment = status.get("comment") or {}
    if comment.get("digest") == body_digest(body) and all(sent.get(s.context) == s for s in statuses):
        metrics.PULL_REQUEST_PROVIDER_CALLS.observe(0)  # nothing changed: not a call
        return Cond("Published", True, "Published", "the comment and statuses are up to date")
    client = await _client(ctx, repository, spec)
    if isinstance(client, Cond):
        return client
    try:
        done = await asyncio.to_thread(
            publish, client, marker(results.repository, results.number, results.key), body,
            comment.get("id"), comment.get("digest"), head, statuses, sent)
    except (OutboundRefused, ProviderError) as exc:
        return _refusal(exc, settings)
    finally:
        client.close()
    metrics.PULL_REQUEST_PROVIDER_CALLS.observe(done.calls)
    status["comment"] = {"id": done.comment_id, "digest": body_digest(body)} if done.comment_id else None
    status["statuses"] = [{"context": s.context, "state": s.state, "description": s.description}
                          for s in sorted(done.sent.values(), key=lambda s: s.context)]
    if any(done.sent.get(s.context) != s for s in statuses):
        ctx.wake_pull_request(key_of(pull_request), 1.0)  # statuses beyond this update's call budget: next
    return Cond("Published", True, "Published", "the comment and statuses are up to date")


async def _client(ctx: Context, repository: Mapping[str, Any], spec: Mapping[str, Any]) -> ProviderClient | Cond:
    """The provider's API client for the pull request, or the `Published=False` condition saying why none
    (`_refusal`; the callers that comment turn it into `Commented=False`)."""
    provider = str(spec["provider"])
    settings = _settings(repository)
    try:
        api_url = str(settings.get("apiUrl") or default_api_url(
            provider, str(((repository.get("spec") or {}).get("repository") or {}).get("url") or "")))
        tokens = await provider_tokens(ctx, repository, provider, api_url)
        # An App's token exchange is the first call: in the thread, as every call to the provider.
        return await asyncio.to_thread(client_for, provider, api_url, str(spec["project"]), int(spec["number"]),
                                       tokens, outbound=ctx.settings.outbound_policy())
    except (ProviderError, OutboundRefused, CredentialsError, GitCredentialsError, ValueError) as exc:
        return _refusal(exc, settings)


def _refusal(exc: Exception, settings: Mapping[str, Any]) -> Cond:
    """`Published=False` for why the provider could not be asked (no token ever in the message)."""
    if isinstance(exc, HostNotAllowed):  # before any call: the credentials never left
        return Cond("Published", False, "HostNotAllowed", str(exc))
    if isinstance(exc, OutboundRefused):
        return Cond("Published", False, "AddressNotAllowed", f"{api_field(settings)}: {exc}")
    if isinstance(exc, ProviderError):
        return Cond("Published", False, "ProviderError", str(exc))
    if isinstance(exc, KubeError):  # a command's own Kubernetes call (an apply run, a lock's release)
        return Cond("Published", False, "APIError", str(exc))
    return Cond("Published", False, "CredentialsInvalid", str(exc))


# `Commented`: whether the controllers' own comments (command replies, what a merge meant, locks released on close)
# reached the pull request; set when one was due, kept otherwise (docs/architecture.md §11.3).
COMMENTED = Cond("Commented", True, "Posted", "the controllers' replies and notices are posted")


def _not_commented(what: str, refusal: Cond) -> Cond:
    return Cond("Commented", False, refusal.reason, f"{what}: {refusal.message}")


async def _answer_commands(ctx: Context, pull_request: Mapping[str, Any], repository: Mapping[str, Any],
                           pending: Sequence[Pending], decided: Mapping[str, Any]
                           ) -> tuple[list[Body], dict[Key, str], Cond]:
    """Answer each new comment command once (`pullrequests.commands.decide_command`), asking the provider only
    what a decision needs (the commenter's write permission, the review facts of an apply): a reply on the pull
    request, then its record (`status.commands`). Returns the records, the layers to plan again (→ the comment's
    id) and `Commented`: False when something failed (the rest wait for a retry). A reply is posted before its
    record is written: a crash between them may answer twice, never act twice (a re-plan's run is named by the
    comment)."""
    meta, spec = pull_request["metadata"], pull_request.get("spec") or {}
    what = f"cannot answer {len(pending)} comment command(s) (tried again)"
    client = await _client(ctx, repository, spec)
    if isinstance(client, Cond):
        return [], {}, _not_commented(what, client)
    handled: list[Body] = []
    replan: dict[Key, str] = {}
    settings = _settings(repository)
    try:
        for command in pending:
            parsed = parse(command.text)
            facts = CommandFacts()
            layers = _layer_apply_facts(ctx, pull_request)
            answer = decide_command(parsed, command.id, command.by, spec, decided, settings, facts,
                                    command.note, command.head_sha, meta["name"], layers)
            while answer.outcome == "ask":
                if answer.ask == "permission":
                    may = await asyncio.to_thread(client.write_permission, command.by, command.by_id)
                    facts = dataclasses.replace(facts, may_write=may)
                elif answer.ask == "access":
                    identity = identity_of(command.by, command_settings(settings))
                    assert identity is not None
                    facts = dataclasses.replace(facts, may_update=await _may_update(ctx, identity, meta["namespace"]))
                else:
                    review = await asyncio.to_thread(client.review_facts, str(spec.get("base") or ""),
                                                     str(spec.get("headSha") or ""))
                    facts = dataclasses.replace(facts, review=review)
                answer = decide_command(parsed, command.id, command.by, spec, decided, settings, facts,
                                        command.note, command.head_sha, meta["name"], layers)
            if answer.apply:
                answer = await _apply(ctx, pull_request, answer, command)
            for layer_key in answer.unlock:
                await _release(ctx, layer_key, meta["name"])
            body = reply_body(command.text, command.by, answer)
            reply = await asyncio.to_thread(client.create_comment, body)
            handled.append({"id": command.id, "outcome": answer.outcome, "reply": reply,
                            "message": answer.reply.splitlines()[0][:1000] if answer.reply else ""})
            for layer in answer.replan:
                replan[layer] = command.id
            log.info("pull request %s/%s: command %r by %s (comment %s): %s: %s", meta["namespace"], meta["name"],
                     command.text[:100], command.by, command.id, answer.outcome, handled[-1]["message"][:200])
    except (ProviderError, OutboundRefused, KubeError) as exc:
        unanswered = len(pending) - len(handled)
        return handled, replan, _not_commented(f"cannot answer {unanswered} comment command(s) (tried again)",
                                               _refusal(exc, settings))
    finally:
        client.close()
    return handled, replan, COMMENTED


def _layer_apply_facts(ctx: Context, pull_request: Mapping[str, Any]) -> dict[Key, LayerApply]:
    """What apply and unlock commands read of the pull request's namespace's layers: opt-in, requirements, who
    holds each, and this pull request's apply runs of each (→ live?)."""
    namespace, name = pull_request["metadata"]["namespace"], pull_request["metadata"]["name"]
    held = _pull_requests_of(ctx, namespace)
    applies: dict[Key, dict[str, str]] = {}
    requested: dict[Key, dict[str, str]] = {}
    for run in ctx.inventory.runs_of_pull_request(namespace, name):
        facts = _facts(run)
        if facts.action == "apply":
            applies.setdefault(facts.layer, {})[facts.name] = facts.state or "Initial"
            by = str((run["metadata"].get("annotations") or {}).get(ann.RUN_REQUESTED_BY) or "")
            if (asked := REQUESTED_BY_COMMENT.search(by)) is not None:
                requested.setdefault(facts.layer, {})[facts.name] = asked.group(1)
    found: dict[Key, LayerApply] = {}
    for layer in ctx.inventory.layers:
        if layer["metadata"]["namespace"] != namespace:
            continue
        opted, required = layer_apply_settings(layer)
        found[key_of(layer)] = LayerApply(opted, required, lock_holder(layer, held), applies.get(key_of(layer), {}),
                                          requested.get(key_of(layer), {}))
    return found


async def _apply(ctx: Context, pull_request: Mapping[str, Any], answer: CommandDecision, command: Pending
                 ) -> CommandDecision:
    """Carry out an apply command's orders: take each layer's lock for the pull request (under the layer's
    resourceVersion: of two pull requests racing, one wins), then create the apply run of exactly the plan shown
    (named by the plan's sum: a second create meets it). A lock another pull request won meanwhile refuses."""
    name = pull_request["metadata"]["name"]
    taken: list[Key] = []  # locked by this answer: released again if a later layer refuses (nothing applied)
    for order in answer.apply:
        before = lock_holder(ctx.inventory.layers.get(order.layer) or {}, _pull_requests_of(ctx, order.layer[0]))
        try:
            holder = await _take(ctx, order.layer, name)
        except KubeError:
            for layer_key in taken:  # the retry would find them its own, and never release them
                await _release(ctx, layer_key, name)
            raise
        if holder == name and before != name:
            taken.append(order.layer)
        if holder != name:
            for layer_key in taken:
                await _release(ctx, layer_key, name)
            return CommandDecision("refused", f"layer {order.layer[0]}/{order.layer[1]} is locked to pull request "
                                   f"{holder} (it applied its plan before merge): it is released when that pull "
                                   "request merges or closes, or by `/burrito-py unlock` there. Nothing applied"
                                   if holder else f"layer {order.layer[0]}/{order.layer[1]} is gone. Nothing applied")
    for order in answer.apply:
        await _create_apply_run(ctx, pull_request, order, requested_by(command.by, command.id))
    return answer


def _pull_requests_of(ctx: Context, namespace: str) -> dict[str, Body]:
    return {pr["metadata"]["name"]: pr for pr in ctx.inventory.pull_requests
            if pr["metadata"]["namespace"] == namespace}


async def _take(ctx: Context, layer_key: Key, name: str) -> str | None:
    """Lock the layer to pull request `name` unless an open one holds it; returns the holder now (None: the layer
    is gone). Guarded by the layer's resourceVersion and retried on a conflict."""
    for _ in range(5):
        layer = await ctx.kube.get(crd_path("terraformlayers", layer_key[0], layer_key[1]))
        if layer is None:
            return None
        holder = lock_holder(layer, _pull_requests_of(ctx, layer_key[0]))
        if holder is not None:
            return holder
        try:
            updated = await ctx.kube.merge_patch(
                crd_path("terraformlayers", layer_key[0], layer_key[1]),
                {"metadata": {"resourceVersion": layer["metadata"]["resourceVersion"],
                              "annotations": {ann.PULL_REQUEST_LOCK: name, ann.PULL_REQUEST_LOCK_BRANCH: (
                                  (layer["metadata"].get("annotations") or {}).get(ann.BRANCH_COMMIT) or "")}}})
        except KubeError as exc:
            if exc.status == 409:
                continue  # the layer changed under us: look again
            raise
        ctx.inventory.layers.observe(updated)
        ctx.wake_layer(layer_key)
        return name
    raise KubeError(409, "Conflict", f"layer {layer_key[0]}/{layer_key[1]} kept changing while being locked")


async def _release(ctx: Context, layer_key: Key, name: str) -> bool:
    """Remove the layer's lock if pull request `name` holds it (under its resourceVersion); True when released.
    The same write asks the layer to plan again (`sync-now`): a plan it made while locked, against the state as it
    was before the pull request's apply or not, is never what it applies next."""
    for _ in range(5):
        layer = await ctx.kube.get(crd_path("terraformlayers", layer_key[0], layer_key[1]))
        annotations = ((layer or {}).get("metadata") or {}).get("annotations") or {}
        if layer is None or annotations.get(ann.PULL_REQUEST_LOCK) != name:
            return False
        try:
            updated = await ctx.kube.merge_patch(
                crd_path("terraformlayers", layer_key[0], layer_key[1]),
                {"metadata": {"resourceVersion": layer["metadata"]["resourceVersion"],
                              "annotations": {ann.PULL_REQUEST_LOCK: None, ann.PULL_REQUEST_LOCK_BRANCH: None,
                                              ann.SYNC_NOW: format_time_precise(utcnow())}}})
        except KubeError as exc:
            if exc.status == 409:
                continue
            if exc.status == 404:
                return False
            raise
        ctx.inventory.layers.observe(updated)
        ctx.wake_layer(layer_key)
        return True
    raise KubeError(409, "Conflict", f"layer {layer_key[0]}/{layer_key[1]} kept changing while being released")


async def _release_all(ctx: Context, pull_request: Mapping[str, Any], repository: Mapping[str, Any] | None
                       ) -> tuple[bool, Cond | None, list[str]]:
    """A merged or closed pull request releases every layer it holds; closed without a merge, it says on the pull
    request that what it applied is still live, the names written down first (`release_plan`). Returns False when
    something is left for a retry (a release, or the notice: the provider refused it), `Commented` when the notice
    was due, and the layers the notice is still to name (`status.releaseNotice`)."""
    meta, spec = pull_request["metadata"], pull_request.get("spec") or {}
    held = {key_of(layer): layer for layer in ctx.inventory.layers
            if layer["metadata"]["namespace"] == meta["namespace"]
            and ((layer["metadata"].get("annotations") or {}).get(ann.PULL_REQUEST_LOCK) == meta["name"])}
    merged_at = parse_time(((pull_request.get("status") or {}).get("merged") or {}).get("at"))
    due = [f"{k[0]}/{k[1]}" for k, layer in held.items()
           if release_due(str(spec.get("state")), layer, merged_at, utcnow())]
    pending = [str(n) for n in (pull_request.get("status") or {}).get("releaseNotice") or ()]
    plan = release_plan(str(spec.get("state")), due, pending)
    if plan.recorded_first:
        ctx.wake_pull_request(key_of(pull_request))  # released once the names are stored, at once
        return True, None, list(plan.notice)
    released = {name for name in plan.release if await _release(ctx, _key(name), meta["name"])}
    done = len(plan.release) == len(held)  # merged: the rest wait until the branch has the merge
    still_held = {f"{k[0]}/{k[1]}" for k in held} - released
    if not plan.notice or repository is None:
        return done, None, []  # nothing to say, or no provider left to say it on
    if still_held & set(plan.notice):
        return False, None, list(plan.notice)  # said once every one of them is released
    names = ", ".join(f"`{n}`" for n in plan.notice)
    what = f"released {names}, but cannot say so on the pull request yet (tried again in {RETRY_SECONDS:.0f} s)"
    client = await _client(ctx, repository, spec)
    if isinstance(client, Cond):
        return False, _not_commented(what, client), list(plan.notice)  # the locks are released all the same
    try:
        await asyncio.to_thread(client.create_comment, (
            f"burrito-py: this pull request was closed without merging: released {names}. The changes it applied "
            "before merge are still live: the layers' own runs now plan and apply their branch's code over them."))
    except (ProviderError, OutboundRefused) as exc:
        return False, _not_commented(what, _refusal(exc, _settings(repository))), list(plan.notice)
    finally:
        client.close()
    return done, COMMENTED, []


def _key(name: str) -> Key:
    namespace, _, layer = name.partition("/")
    return namespace, layer


# `RUN_REQUESTED_BY` of a pull request's apply run: `<login> (comment <id>)`.
REQUESTED_BY_COMMENT = re.compile(r"\(comment ([^()\s]+)\)$")


def requested_by(login: str, comment_id: str) -> str:
    """The run's `RUN_REQUESTED_BY`: the comment's id kept whole (a long login is cut, never the id)."""
    tail = f" (comment {comment_id})"
    return login[:max(0, 250 - len(tail))] + tail


async def _create_apply_run(ctx: Context, pull_request: Mapping[str, Any], order: ApplyOrder, by: str) -> None:
    """The apply run of exactly the plan shown: the pull request's, at its head, with the plan's run, attempt and
    sum as artifact (the runner applies nothing else); the run controller gives it the layer's runner identity and
    the layer's Lease, after its own checks (`pullrequests.apply.apply_admission`)."""
    meta, spec = pull_request["metadata"], pull_request.get("spec") or {}
    body = {
        "apiVersion": ann.API_VERSION, "kind": "TerraformRun",
        "metadata": {
            "name": order.run, "namespace": meta["namespace"],
            "labels": {ann.LABEL_PULL_REQUEST: ann.layer_label(meta["name"])},
            "annotations": {ann.RUN_CREATED_AT: format_time_precise(utcnow()), ann.RUN_PLAN_SUM: order.sum,
                            ann.RUN_REQUESTED_BY: by},
            "ownerReferences": [{"apiVersion": pull_request.get("apiVersion", ann.API_VERSION),
                                 "kind": "TerraformPullRequest", "name": meta["name"], "uid": meta["uid"],
                                 "blockOwnerDeletion": True}],
        },
        "spec": {"action": "apply",
                 "layer": {"name": order.layer[1], "namespace": order.layer[0], "revision": spec["headSha"]},
                 "artifact": {"run": order.plan_run, "attempt": order.attempt, "sum": order.sum},
                 "pullRequest": meta["name"]},
    }
    try:
        created = await ctx.kube.create(crd_path("terraformruns", meta["namespace"]), body)
    except KubeError as exc:
        if exc.status == 409:
            return  # a second answer to the command: the run of this plan exists
        raise
    ctx.inventory.runs.observe(created)
    ctx.wake_run(key_of(created))
    await post_event(ctx.kube, pull_request, "Normal", "ApplyBeforeMerge",
                     f"run {order.run} applies plan {order.sum} of layer {order.layer[0]}/{order.layer[1]}, "
                     f"asked by {by}")


async def _may_update(ctx: Context, identity: tuple[str, tuple[str, ...]], namespace: str) -> bool:
    """A SubjectAccessReview: may this Kubernetes identity update the TerraformLayers of `namespace` (what
    annotating a layer to plan or approve it needs)? KubeError when the API cannot say (the command waits)."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": identity[0], "groups": list(identity[1]),
                       "resourceAttributes": {"verb": "update", "group": ann.GROUP, "resource": "terraformlayers",
                                              "namespace": namespace}}}
    answer = await ctx.kube.create(path("authorization.k8s.io/v1", "subjectaccessreviews"), review)
    return bool((answer.get("status") or {}).get("allowed"))


def api_field(settings: Mapping[str, Any]) -> str:
    """Which field a refusal of the API's destination is about."""
    return "spec.pullRequests.apiUrl" if settings.get("apiUrl") else "spec.repository.url (the default apiUrl)"


async def provider_tokens(ctx: Context, repository: Mapping[str, Any], provider: str, api_url: str) -> TokenSource:
    """The token source for `api_url`; HostNotAllowed when the Secret's `allowedHosts` does not name its host."""
    meta = repository["metadata"]
    source = (repository.get("spec") or {}).get("repository") or {}
    secret_name = source.get("secretName")
    secret = None
    if secret_name:
        problem = object_name_problem(secret_name)
        if problem is not None:  # a path in the name would reach another namespace's Secret: never read
            raise CredentialsError(f"spec.repository.secretName: {problem}")
        try:
            secret = await ctx.kube.get(path("v1", "secrets", meta["namespace"], secret_name))
        except KubeError as exc:
            raise CredentialsError(f"cannot read Secret {meta['namespace']}/{secret_name}: {exc.status} "
                                   f"{exc.reason}") from None
    version = str(((secret or {}).get("metadata") or {}).get("resourceVersion") or "")
    # The API URL is part of the key: a source (an App's cached installation token) never serves another URL.
    cache_key = (meta["namespace"], str(secret_name or ""), version, provider, api_url)
    held = ctx.pull_request_memory.tokens.get(cache_key)
    if held is None:
        held = provider_token_source(secret, provider, api_url, str(secret_name or ""),
                                     field=api_field(_settings(repository)), outbound=ctx.settings.outbound_policy())
        ctx.pull_request_memory.tokens[cache_key] = held
    return held


async def _write_status(ctx: Context, pull_request: Mapping[str, Any], status: Body, *conditions: Cond | None
                        ) -> None:
    """Write `status` when it differs; conditions not computed this time keep what they said."""
    old = pull_request.get("status") or {}
    computed = {c.type: c for c in conditions if c is not None}
    kept = [Cond(str(c.get("type")), c.get("status") == "True", str(c.get("reason") or ""), str(c.get("message") or ""))
            for c in old.get("conditions") or () if c.get("type") not in computed]
    status = {k: v for k, v in status.items() if v is not None}  # unset, as the API stores it
    status["conditions"] = merge_conditions(old.get("conditions"), [*kept, *computed.values()], utcnow())
    if status == old:
        return
    meta = pull_request["metadata"]
    try:
        updated = await ctx.kube.merge_patch(
            crd_path("terraformpullrequests", meta["namespace"], meta["name"], "status"),
            {"status": {**{k: None for k in old if k not in status}, **status}})
    except KubeError as exc:
        if exc.status == 404:
            return
        raise
    ctx.inventory.pull_requests.observe(updated)
    if (updated.get("metadata") or {}).get("generation") != meta.get("generation"):
        # The spec changed while we decided (a new head, an approval): its watch event now meets an inventory
        # that already holds that generation and wakes nothing, so decide again here.
        ctx.wake_pull_request(key_of(pull_request))
