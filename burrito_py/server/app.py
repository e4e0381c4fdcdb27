"""The server (docs/architecture.md §11): `POST /api/webhook` marks repositories for an immediate fetch, or writes the
TerraformPullRequest of a pull/merge request (§11.3); the REST API
(`burrito_py.server.rest`) lists layers and runs for people and the UI.

A push only annotates the matching TerraformRepositories with `webhook.burrito-py.io/sync-<branch>: <now>`;
the repository controller fetches at once when it sees that annotation newer than the branch's last sync, and
the layers the push touched plan from there. The server never talks to git, and reads no repository Secret: it
verifies deliveries with the keys the controllers publish, matched in memory (`webhook_index.py`), so a delivery
costs no Kubernetes request until it is verified, and an unknown repository and a wrong signature get one answer.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from burrito_py.api import annotations as ann
from burrito_py.api.pullrequest import pull_request_name
from burrito_py.datastore.auth import Authenticator
from burrito_py.datastore.client import DatastoreClient
from burrito_py.gitproviders.base import BadPullRequest, CommentEvent, PullRequestEvent
from burrito_py.gitproviders.delivery import Delivery, comment_event, pull_request_event
from burrito_py.kube.client import Kube, KubeError, crd_path
from burrito_py.pullrequests.commands import command_line, comment_approval, is_command, parse, seen_head
from burrito_py.pullrequests.events import older, pull_request_write
from burrito_py.pullrequests.writes import write_pull_request
from burrito_py.server.ratelimit import SourceLimiter, source_of
from burrito_py.server.settings import ServerSettings
from burrito_py.server.webhook_index import WebhookIndex
from burrito_py.server.webhooks import (
    BadDelivery,
    RecentDeliveries,
    body_digest,
    read_delivery,
    verified_by,
)
from burrito_py.timeutil import format_time_precise, utcnow

log = logging.getLogger(__name__)


class BodyTooLarge(Exception):
    pass


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _answer(status: int, **body: Any) -> JSONResponse:
    return JSONResponse(body, status_code=status)


def _name(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


Outcome = tuple[JSONResponse, bool]  # the answer, and whether the delivery was acted on (else it counts against
# its source's allowance of refusals)


def _body_key(digest: str, repository: Mapping[str, Any]) -> str:
    return f"body:{digest}:{repository['metadata'].get('uid') or _name(repository)}"


def _delivery_key(delivery_key: str | None, repository: Mapping[str, Any]) -> str | None:
    """A delivery id as seen for one repository: the id is unsigned, so a delivery verified for another repository
    (another tenant's hook and secret) under the same id never marks this one's as seen."""
    return f"{delivery_key}:{repository['metadata'].get('uid') or _name(repository)}" if delivery_key else None


def _refused(status: int, **body: Any) -> Outcome:
    return _answer(status, **body), False


def _acted(status: int, **body: Any) -> Outcome:
    return _answer(status, **body), True


UNVERIFIED = ("no TerraformRepository accepts this delivery: its repository is not configured here, or its "
              "signature is missing or wrong")
READY_SECONDS = 10.0
COMMANDS_KEPT = 50  # spec.commands: the latest comment commands (the CRD's maxItems)


class Webhooks:
    def __init__(self, kube: Kube, settings: ServerSettings) -> None:
        from burrito_py.kube.pod_paths import own_namespace

        self.kube, self.settings = kube, settings
        self.recent = RecentDeliveries(settings.delivery_cache_size)
        self.index = WebhookIndex(kube, settings.namespaces, settings.webhook_keys_namespace or own_namespace(),
                                  settings.webhook_keys_secrets)
        self.limiter = SourceLimiter(settings.webhook_failures_per_minute, settings.webhook_failures_burst)

    async def handle(self, request: Request) -> JSONResponse:
        source = source_of(request.client.host if request.client else None)
        wait = self.limiter.retry_after(source)
        if wait is not None:
            return JSONResponse({"error": "too many deliveries refused from this address: try again later"},
                                status_code=429, headers={"Retry-After": str(max(1, math.ceil(wait)))})
        answer, acted = await self._handle(request, source)
        if not acted:
            self.limiter.charge(source)
        return answer

    async def _handle(self, request: Request, source: str) -> Outcome:
        try:
            body = await _read_body(request, self.settings.max_webhook_bytes)
        except BodyTooLarge:
            return _refused(413, error=f"the body is over the limit of {self.settings.max_webhook_bytes} bytes")
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            delivery = read_delivery(headers, body)
        except BadDelivery as exc:
            return _refused(400, error=str(exc))
        identities = delivery.identities()
        if not identities:
            return _refused(202, ignored="the payload names no repository URL")
        if not await self.index.ready(READY_SECONDS):
            return _answer(503, error="the server cannot verify deliveries yet: try again shortly"), True
        # Nothing below reads the API before a delivery is verified, and an unknown repository is checked
        # against a decoy key: the answer and its time are the same for both (docs/architecture.md §11.1).
        candidates = self.index.candidates(identities)
        checks = verified_by(delivery, headers, body, [c.key for c in candidates])
        verified = [c.repository for c, ok in zip(candidates, checks, strict=True) if ok]
        if not verified:
            log.warning("webhook: %s delivery %s: %s", delivery.provider, delivery.delivery_id,
                        f"missing or wrong signature for {', '.join(c.name for c in candidates)}" if candidates
                        else f"no TerraformRepository has the URL {delivery.repository_urls()[:3]!r}")
            return _refused(401, error=UNVERIFIED)
        self.limiter.vouch(source)  # a provider's address: deliveries relayed through it never throttle it
        return await self._act(delivery, verified, body_digest(body))

    async def _act(self, delivery: Delivery, repositories: list[dict[str, Any]], digest: str) -> Outcome:
        # Known per repository by its (unsigned) delivery id and by the digest of the body it verified: a replay
        # under a fresh id verifies the same repositories with the same body; one event delivered by two hooks
        # (two repositories of one URL, each with its own secret) is acted on once for each; and an id another
        # repository's verified delivery used first says nothing of this one's.
        delivery_key = f"{delivery.provider}:{delivery.delivery_id}" if delivery.delivery_id else None
        fresh = [r for r in repositories
                 if not self.recent.seen(_delivery_key(delivery_key, r), _body_key(digest, r))]
        if not delivery.is_push:
            try:
                event = pull_request_event(delivery)
                comment = comment_event(delivery) if event is None else None
            except BadPullRequest as exc:
                return _refused(400, error=f"a {delivery.provider} pull request event without what it needs: {exc}")
            if event is None and (comment is None or not is_command(comment.body)):
                return _acted(202, ignored=f"{delivery.provider} event {delivery.event!r} changes no plan")
            if not fresh:
                return _refused(200, duplicate=True, delivery=delivery.delivery_id)
            answer = (await self._pull_request(event, fresh) if event is not None
                      else await self._comment(comment, fresh) if comment is not None else None)
            assert answer is not None
            self.recent.remember(*(key for r in fresh for key in (_delivery_key(delivery_key, r),
                                                                _body_key(digest, r))))
            return answer, True
        branch = delivery.branch
        if branch is None:
            return _acted(202, ignored=f"ref {delivery.payload.get('ref')!r} is not a branch")
        if not fresh:
            return _refused(200, duplicate=True, delivery=delivery.delivery_id)
        now = format_time_precise(utcnow())
        marked = []
        for repository in fresh:
            namespace, name = repository["metadata"]["namespace"], repository["metadata"]["name"]
            patch = {"metadata": {"annotations": {ann.repository_sync_annotation(branch): now}}}
            await self.kube.merge_patch(crd_path("terraformrepositories", namespace, name), patch)
            marked.append(f"{namespace}/{name}")
            self.recent.remember(_delivery_key(delivery_key, repository), _body_key(digest, repository))
        log.info("webhook: %s push to %s marks %s", delivery.provider, branch, ", ".join(marked))
        return _acted(202, branch=branch, repositories=marked)

    async def _pull_request(self, event: PullRequestEvent, repositories: list[dict[str, Any]]) -> JSONResponse:
        """Create or update the TerraformPullRequest of each repository that plans pull requests. A close or merge
        of one never seen creates nothing; an event older than the one its spec records (`updatedAt`) changes
        nothing: a replay of a signed delivery cannot roll a pull request back to an old head or state."""
        written, skipped, stale = [], [], []
        for repository in repositories:
            meta = repository["metadata"]
            if not (((repository.get("spec") or {}).get("pullRequests") or {}).get("enabled")):
                skipped.append(_name(repository))
                continue
            write = pull_request_write(event, meta["name"], (repository.get("spec") or {}).get("pullRequests"))
            if write.approval_note:
                log.info("webhook: %s pull request #%d label event for %s/%s: %s", event.provider, event.number,
                         meta["namespace"], meta["name"], write.approval_note)
            outcome = await write_pull_request(self.kube, meta["namespace"], write)
            name = write.name
            if outcome == "written":
                written.append(f"{meta['namespace']}/{name}")
            elif outcome == "stale":
                stale.append(f"{meta['namespace']}/{name}")
        log.info("webhook: %s pull request #%d %s at %s: %s%s", event.provider, event.number, event.action,
                 event.head_sha[:12], ", ".join(written) or "nothing written",
                 f"; older than what {', '.join(stale)} records" if stale else "")
        if not written:
            if stale:
                return _answer(202, ignored="the event is older than the one its TerraformPullRequest records",
                               pullRequests=stale)
            return _answer(202, ignored="no matching TerraformRepository has spec.pullRequests.enabled",
                           repositories=skipped)
        return _answer(202, pullRequest=event.number, action=event.action, pullRequests=written)

    async def _comment(self, event: CommentEvent, repositories: list[dict[str, Any]]) -> JSONResponse:
        """Record a `/burrito-py …` comment on the TerraformPullRequest of each repository that plans pull requests
        (`spec.commands`, one entry per comment id); the pull request controller answers it. A comment whose id is
        recorded already (a redelivery, at any replica) adds nothing. `/burrito-py approve` also writes a fork's
        approval when `comment_approval` allows it (§11.3)."""
        recorded: list[str] = []
        duplicate: list[str] = []
        missing: list[str] = []
        for repository in repositories:
            meta = repository["metadata"]
            settings = (repository.get("spec") or {}).get("pullRequests") or {}
            if not settings.get("enabled"):
                continue
            name = pull_request_name(meta["name"], event.number)
            outcome = await self._record_command(meta["namespace"], name, event, settings)
            {"recorded": recorded, "duplicate": duplicate}.get(outcome, missing).append(f"{meta['namespace']}/{name}")
        log.info("webhook: %s pull request #%d comment %s by %s: %s", event.provider, event.number, event.comment_id,
                 event.sender, f"recorded on {', '.join(recorded)}" if recorded else
                 f"already recorded on {', '.join(duplicate)}" if duplicate else "no pull request to record it on")
        if recorded:
            return _answer(202, command=command_line(event.body)[:100], comment=event.comment_id,
                           pullRequests=recorded)
        if duplicate:
            return _answer(200, duplicate=True, comment=event.comment_id, pullRequests=duplicate)
        return _answer(202, ignored="no TerraformPullRequest of a repository planning pull requests has this number",
                       pullRequests=missing)

    async def _record_command(self, namespace: str, name: str, event: CommentEvent, settings: Mapping[str, Any]
                              ) -> str:
        """"recorded", "duplicate" (its id is there), "old" (older than every command kept) or "absent"."""
        resource = crd_path("terraformpullrequests", namespace, name)
        for attempt in range(5):
            held = await self.kube.get(resource)
            if held is None:
                return "absent"
            spec = held.get("spec") or {}
            commands = list(spec.get("commands") or ())
            if any(str(c.get("id")) == event.comment_id for c in commands):
                return "duplicate"
            if len(commands) >= COMMANDS_KEPT and older(event.created_at or None, commands[0].get("at")):
                return "old"  # dropped from the list long ago: answered then
            later = older(event.created_at or None, spec.get("updatedAt"))
            # The head the comment was written at, not the one recorded when its delivery came (§11.3).
            entry: dict[str, Any] = {"id": event.comment_id[:64], "by": event.sender[:255],
                                     "text": command_line(event.body),
                                     "headSha": seen_head(event.head_sha, spec.get("headSha"), later)}
            if event.sender_id is not None:
                entry["byId"] = event.sender_id
            if event.created_at:
                entry["at"] = event.created_at
            patch: dict[str, Any] = {"metadata": {"resourceVersion": held["metadata"]["resourceVersion"]}}
            parsed = parse(event.body)
            if parsed.command is not None and parsed.command.verb == "approve":
                verdict = comment_approval(spec, settings, event.sender, event.sender_id, event.comment_id,
                                           event.created_at, event.head_sha, later)
                entry["note"] = verdict.why[:500]
                if verdict.approval is not None:
                    patch.setdefault("spec", {})["approval"] = dict(verdict.approval)
            patch.setdefault("spec", {})["commands"] = [*commands, entry][-COMMANDS_KEPT:]
            try:
                await self.kube.merge_patch(resource, patch)
                return "recorded"
            except KubeError as exc:
                if exc.status == 404:
                    return "absent"
                if exc.status != 409 or attempt == 4:
                    raise
        raise AssertionError("unreachable")


def create_app(
    settings: ServerSettings, kube: Kube, datastore: DatastoreClient, authenticator: Authenticator | None
) -> FastAPI:
    from burrito_py.datastore.review_throttle import ReviewThrottle, ThrottledAuthenticator
    from burrito_py.datastore.token_cache import CachedAuthenticator
    from burrito_py.server.access import Access, AccessReviewer
    from burrito_py.server.reads import Artifacts
    from burrito_py.server.rest import rest_router

    app = FastAPI(title="burrito-py server", version="v1")
    from burrito_py.server.body_limit import BodyLimit

    app.add_middleware(BodyLimit, limit=settings.max_request_bytes, setting="BURRITO_PY_SERVER_MAX_REQUEST_BYTES")
    webhooks = Webhooks(kube, settings)
    app.state.webhooks = webhooks  # serving.py starts its index with the server
    # One authorizer, one token-review throttle and one reader of artifacts for the REST API and the UI.
    access = Access(AccessReviewer(kube), settings.runner_service_account,
                    settings.runner_pull_request_service_account)
    artifacts = Artifacts(datastore)
    throttled = None
    if authenticator is not None:
        cached = authenticator if isinstance(authenticator, CachedAuthenticator) else CachedAuthenticator(
            authenticator, settings.auth_cache_ttl_seconds)
        throttled = ThrottledAuthenticator(cached, ReviewThrottle())
    app.state.access = access

    @app.post(
        "/api/webhook",
        status_code=202,
        responses={200: {"description": "A delivery already handled"}, 400: {},
                   401: {"description": "Unknown repository or missing/wrong signature (one answer for both)"},
                   413: {}, 429: {"description": "Too many refused deliveries from this address"},
                   503: {"description": "Not ready to verify deliveries yet"}},
        summary="Receive a GitHub, GitLab or Gitea/Forgejo push or pull request event (signed with the repository's "
        "webhookSecret).",
    )
    async def webhook(request: Request) -> JSONResponse:
        return await webhooks.handle(request)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(rest_router(kube, artifacts, throttled, access, namespaces=settings.namespaces))
    if settings.ui_enabled:
        from burrito_py.server.ui.routes import mount_ui

        mount_ui(app, settings, kube, artifacts, throttled, access)
    return app
