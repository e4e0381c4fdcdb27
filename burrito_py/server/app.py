"""The server (docs/architecture.md §11): `POST /api/webhook` marks repositories for an immediate fetch, or writes the
TerraformPullRequest of a pull/merge request (§11.3); the REST API
(`burrito_py.server.rest`) lists layers and runs for people and the UI.

A push only annotates the matching TerraformRepositories with `webhook.burrito-py.io/sync-<branch>: <now>`;
the repository controller fetches at once when it sees that annotation newer than the branch's last sync, and
the layers the push touched plan from there. The server never talks to git.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from burrito_py.api import annotations as ann
from burrito_py.api.pullrequest import pull_request_name
from burrito_py.controllers.kube import Kube, KubeError, crd_path, path
from burrito_py.datastore.auth import Authenticator
from burrito_py.datastore.client import DatastoreClient
from burrito_py.gitops.urls import repository_identity
from burrito_py.pullrequests.events import BadPullRequest, PullRequestEvent, pull_request_event
from burrito_py.server.settings import ServerSettings
from burrito_py.server.webhooks import BadDelivery, Delivery, RecentDeliveries, read_delivery, signature_valid
from burrito_py.timeutil import format_time_precise, utcnow

log = logging.getLogger(__name__)
WEBHOOK_SECRET_KEY = "webhookSecret"  # noqa: S105 - the name of a Secret key


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


class Webhooks:
    def __init__(self, kube: Kube, settings: ServerSettings) -> None:
        self.kube, self.settings = kube, settings
        self.recent = RecentDeliveries(settings.delivery_cache_size)

    async def _repositories(self, identities: set[tuple[str, str]]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        namespaces: list[str | None] = list(self.settings.namespaces) or [None]
        for namespace in namespaces:
            for repository in await self.kube.list(crd_path("terraformrepositories", namespace)):
                url = ((repository.get("spec") or {}).get("repository") or {}).get("url") or ""
                if repository_identity(url) in identities:
                    found.append(repository)
        return found

    async def _secret(self, repository: Mapping[str, Any]) -> bytes:
        """The repository Secret's `webhookSecret`; empty when there is none (nothing then verifies)."""
        name = ((repository.get("spec") or {}).get("repository") or {}).get("secretName")
        if not name:
            return b""
        try:
            secret = await self.kube.get(path("v1", "secrets", repository["metadata"]["namespace"], name))
        except KubeError as exc:
            log.warning("webhook: cannot read Secret %s of repository %s: %s", name, _name(repository), exc.status)
            return b""
        value = ((secret or {}).get("data") or {}).get(WEBHOOK_SECRET_KEY)
        return base64.b64decode(value) if value else b""

    async def handle(self, request: Request) -> JSONResponse:
        try:
            body = await _read_body(request, self.settings.max_webhook_bytes)
        except BodyTooLarge:
            return _answer(413, error=f"the body is over the limit of {self.settings.max_webhook_bytes} bytes")
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            delivery = read_delivery(headers, body)
        except BadDelivery as exc:
            return _answer(400, error=str(exc))
        identities = delivery.identities()
        if not identities:
            return _answer(202, ignored="the payload names no repository URL")
        candidates = await self._repositories(identities)
        if not candidates:
            return _answer(202, ignored="no TerraformRepository matches the payload's repository")
        verified = [r for r in candidates if signature_valid(delivery, headers, body, await self._secret(r))]
        if not verified:
            log.warning("webhook: %s delivery %s for %s: missing or wrong signature", delivery.provider,
                        delivery.delivery_id, ", ".join(_name(r) for r in candidates))
            return _answer(401, error="missing or wrong signature for every matching TerraformRepository")
        return await self._act(delivery, verified)

    async def _act(self, delivery: Delivery, repositories: list[dict[str, Any]]) -> JSONResponse:
        key = f"{delivery.provider}:{delivery.delivery_id}" if delivery.delivery_id else None
        if not delivery.is_push:
            try:
                event = pull_request_event(delivery)
            except BadPullRequest as exc:
                return _answer(400, error=f"a {delivery.provider} pull request event without what it needs: {exc}")
            if event is None:
                return _answer(202, ignored=f"{delivery.provider} event {delivery.event!r} changes no plan")
            if key is not None and self.recent.seen(key):
                return _answer(200, duplicate=True, delivery=delivery.delivery_id)
            answer = await self._pull_request(event, repositories)
            if key is not None:
                self.recent.remember(key)
            return answer
        branch = delivery.branch
        if branch is None:
            return _answer(202, ignored=f"ref {delivery.payload.get('ref')!r} is not a branch")
        if key is not None and self.recent.seen(key):
            return _answer(200, duplicate=True, delivery=delivery.delivery_id)
        now = format_time_precise(utcnow())
        marked = []
        for repository in repositories:
            namespace, name = repository["metadata"]["namespace"], repository["metadata"]["name"]
            patch = {"metadata": {"annotations": {ann.repository_sync_annotation(branch): now}}}
            await self.kube.merge_patch(crd_path("terraformrepositories", namespace, name), patch)
            marked.append(f"{namespace}/{name}")
        if key is not None:
            self.recent.remember(key)
        log.info("webhook: %s push to %s marks %s", delivery.provider, branch, ", ".join(marked))
        return _answer(202, branch=branch, repositories=marked)


    async def _pull_request(self, event: PullRequestEvent, repositories: list[dict[str, Any]]) -> JSONResponse:
        """Create or update the TerraformPullRequest of each repository that plans pull requests. A close or merge
        of one never seen creates nothing."""
        written, skipped = [], []
        for repository in repositories:
            meta = repository["metadata"]
            if not (((repository.get("spec") or {}).get("pullRequests") or {}).get("enabled")):
                skipped.append(_name(repository))
                continue
            name = pull_request_name(meta["name"], event.number)
            spec = {"provider": event.provider, "repository": meta["name"], "project": event.project,
                    "number": event.number,
                    "base": event.base, "headBranch": event.head_branch, "headSha": event.head_sha,
                    "state": {"closed": "closed", "merged": "merged"}.get(event.action, "open"),
                    "title": event.title[:1024], "url": event.url}
            resource = crd_path("terraformpullrequests", meta["namespace"], name)
            if event.action in ("closed", "merged"):
                try:
                    await self.kube.merge_patch(resource, {"spec": spec})
                except KubeError as exc:
                    if exc.status != 404:
                        raise
                    continue
            else:
                body = {"apiVersion": f"{ann.GROUP}/{ann.VERSION}", "kind": "TerraformPullRequest",
                        "metadata": {"name": name, "namespace": meta["namespace"]}, "spec": spec}
                try:
                    await self.kube.create(crd_path("terraformpullrequests", meta["namespace"]), body)
                except KubeError as exc:
                    if exc.status != 409:
                        raise
                    await self.kube.merge_patch(resource, {"spec": spec})
            written.append(f"{meta['namespace']}/{name}")
        log.info("webhook: %s pull request #%d %s at %s: %s", event.provider, event.number, event.action,
                 event.head_sha[:12], ", ".join(written) or "no repository plans pull requests")
        if not written:
            return _answer(202, ignored="no matching TerraformRepository has spec.pullRequests.enabled",
                           repositories=skipped)
        return _answer(202, pullRequest=event.number, action=event.action, pullRequests=written)


def create_app(
    settings: ServerSettings, kube: Kube, datastore: DatastoreClient, authenticator: Authenticator | None
) -> FastAPI:
    from burrito_py.datastore.token_cache import CachedAuthenticator
    from burrito_py.server.access import Access, AccessReviewer
    from burrito_py.server.reads import Artifacts
    from burrito_py.server.rest import rest_router
    from burrito_py.server.throttle import ReviewThrottle, ThrottledAuthenticator

    app = FastAPI(title="burrito-py server", version="v1")
    webhooks = Webhooks(kube, settings)
    # One authorizer, one token-review throttle and one reader of artifacts for the REST API and the UI.
    access = Access(AccessReviewer(kube), settings.runner_service_account)
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
        responses={200: {"description": "A delivery already handled"}, 400: {}, 401: {}, 413: {}},
        summary="Receive a GitHub, GitLab or Gitea/Forgejo push (signed with the repository's webhookSecret).",
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
