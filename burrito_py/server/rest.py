"""The server's REST API for people and the UI (docs/architecture.md §11.2): layers, their runs, a run's logs
and plan, and `POST /api/layers/{ns}/{name}/sync`.

Everything is read live from the Kubernetes API (layers, runs, repositories) and the datastore (logs,
plans); the server keeps no state. Every route needs a bearer token checked by the datastore's
authenticator (a TokenReview): any authenticated identity may read, and anyone but a runner may ask for a
sync — a runner only ever needs to read its own artifacts, so a compromised one cannot trigger plans.

Errors are `{"error": "..."}` naming the parameter or object; bad input is a 400 (the route class below turns
FastAPI's 422 into 400, so the API answers like the datastore and the webhook).
"""

# No `from __future__ import annotations`: FastAPI must resolve the handlers' annotations, and `Caller` is
# local to `rest_router` (it closes over the authenticator), which a string annotation could not name.
import asyncio
import functools
import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any, Literal

import anyio.to_thread
from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from burrito_py.api import annotations as ann
from burrito_py.controllers.kube import Body, Kube, KubeError, crd_path
from burrito_py.controllers.plan_review import override_refusal
from burrito_py.datastore.auth import Authenticator, AuthError, Principal, principal_of
from burrito_py.datastore.client import DatastoreClient, DatastoreError
from burrito_py.server.layer_actions import LayerNotFound, request_sync
from burrito_py.server.reads import NAME, NAME_PATTERN, NAMESPACE, NAMESPACE_PATTERN, NoArtifacts, layer_runs
from burrito_py.server.reads import artifacts_of as shared_artifacts_of
from burrito_py.server.views import (
    ErrorView,
    LayerDetailView,
    LayerView,
    OverrideRequest,
    OverrideView,
    RunDetailView,
    RunView,
    SyncView,
    layer_view,
    repository_key,
    run_summary,
    run_view,
)

log = logging.getLogger(__name__)

RUNNER_SERVICE_ACCOUNT = "burrito-py-runner"
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
REALM = 'Bearer realm="burrito-py-server"'
_NAME, _NAMESPACE = NAME, NAMESPACE
MAX_ATTEMPT = 1_000_000  # the datastore's bound

PlanFormat = Literal["pretty", "json", "short"]
PLAN_MEDIA: dict[str, str] = {
    "pretty": "text/plain; charset=utf-8",
    "json": "application/json",
    "short": "text/plain; charset=utf-8",
}

Namespace = Annotated[
    str, PathParam(pattern=NAMESPACE_PATTERN, max_length=63, description="Namespace (a Kubernetes DNS label).")
]
LayerName = Annotated[str, PathParam(pattern=NAME_PATTERN, max_length=253, description="Name of the TerraformLayer.")]
RunName = Annotated[str, PathParam(pattern=NAME_PATTERN, max_length=253, description="Name of the TerraformRun.")]
AttemptNumber = Annotated[int, PathParam(ge=1, le=MAX_ATTEMPT, description="Attempt number, from 1.")]


class Problem(Exception):
    """An answer other than success; the message is shown to the caller, so it never holds a secret."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> JSONResponse:
    response = JSONResponse({"error": message}, status_code=status)
    if status == 401:
        response.headers["WWW-Authenticate"] = REALM
    return response


def validation_message(exc: RequestValidationError) -> str:
    """`path parameter 'ns': String should match pattern …`, one clause per invalid field."""
    parts = []
    for error in exc.errors():
        loc = [str(item) for item in error.get("loc", ())]
        where = f"{loc[0]} parameter {'.'.join(loc[1:])!r}" if len(loc) > 1 else (loc[0] if loc else "request")
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return "; ".join(parts) or "invalid request"


class RestRoute(APIRoute):
    """Turns validation errors, `Problem`s and Kubernetes API failures into JSON errors on this router's routes
    (a router cannot install app-wide exception handlers, and the app belongs to the server module)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                return _error(400, validation_message(exc))
            except Problem as exc:
                return _error(exc.status, str(exc))
            except KubeError as exc:
                # The server's own rights or the API itself failed: not the caller's fault.
                log.warning(
                    "REST %s %s: Kubernetes API error %s %s", request.method, request.url.path, exc.status, exc.reason
                )
                return _error(502, f"the Kubernetes API answered {exc.status} {exc.reason}")

        return route


def is_runner(principal: Principal, runner_service_account: str) -> bool:
    """A token bound to a runner pod, or any token of the runners' service account."""
    if principal.runner is not None:
        return True
    if not principal.username.startswith(SERVICE_ACCOUNT_PREFIX):
        return False
    _, _, account = principal.username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    return account == runner_service_account


_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="serviceAccountToken",
    description="A Kubernetes token accepted by a TokenReview for the server's audiences (burrito-py).",
)

_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorView, "description": "A path or query parameter is invalid (the message names it)."},
    401: {"model": ErrorView, "description": "No bearer token, or one the Kubernetes API rejects."},
    404: {"model": ErrorView, "description": "The layer, run, plan or log does not exist."},
    502: {"model": ErrorView, "description": "The Kubernetes API or the datastore failed."},
    503: {"model": ErrorView, "description": "The token cannot be checked now, or the datastore is unavailable."},
    # Declaring a catch-all also keeps FastAPI from documenting a 422 this router never sends.
    "default": {"model": ErrorView, "description": "Any other error."},
}
_TEXT = {"text/plain": {"schema": {"type": "string"}}}


def rest_router(
    kube: Kube,
    datastore: DatastoreClient,
    authenticator: Authenticator | None,
    runner_service_account: str = RUNNER_SERVICE_ACCOUNT,
    namespaces: Sequence[str] = (),
) -> APIRouter:
    """`authenticator=None` disables auth (local tests only). `runner_service_account` is the controllers'
    `runner_service_account` setting: tokens of that account may read but not ask for syncs. `namespaces` is the
    server's `namespaces` setting: when set, the API shows and syncs only layers and runs of these (the server's
    RBAC may cover no others), and reads repositories only there; empty, every namespace."""
    managed = frozenset(namespaces)

    def visible(namespace: str) -> bool:
        return not managed or namespace in managed

    router = APIRouter(prefix="/api", route_class=RestRoute, responses=_ERRORS, tags=["layers and runs"])

    async def caller(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
        try:
            return await principal_of(authenticator, credentials.credentials if credentials else None)
        except AuthError as exc:
            if exc.status == 503:
                log.warning("REST: cannot check a token: %s", exc)
            raise Problem(exc.status, str(exc)) from None

    Caller = Annotated[Principal, Depends(caller)]

    def readable_repository(key: tuple[str, str]) -> bool:
        """A layer's repository reference is its author's text: only a valid namespace and name become a path on
        the API, and only in a namespace this server manages."""
        valid = bool(_NAMESPACE.fullmatch(key[0]) and _NAME.fullmatch(key[1])) and len(key[1]) <= 253
        return valid and visible(key[0])

    def by_key(objects: list[Body]) -> dict[tuple[str, str], Body]:
        return {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}

    async def list_in(plural: str, namespaces: Sequence[str]) -> list[Body]:
        found = await asyncio.gather(*(kube.list(crd_path(plural, ns)) for ns in namespaces))
        return [item for items in found for item in items]

    async def layers_with_repositories(namespace: str | None) -> tuple[list[Body], dict[tuple[str, str], Body]]:
        if namespace is None and not managed:
            layers, repos = await asyncio.gather(
                kube.list(crd_path("terraformlayers")), kube.list(crd_path("terraformrepositories"))
            )
            return layers, by_key(repos)
        targets = sorted(managed) if namespace is None else [namespace] if visible(namespace) else []
        layers = await list_in("terraformlayers", targets)
        # A layer may use a repository of another namespace: list those of the namespaces the layers name.
        wanted = sorted({key[0] for key in map(repository_key, layers) if readable_repository(key)})
        return layers, by_key(await list_in("terraformrepositories", wanted))

    async def layer_or_404(ns: str, name: str) -> Body:
        layer = await kube.get(crd_path("terraformlayers", ns, name)) if visible(ns) else None
        if layer is None:
            raise Problem(404, f"TerraformLayer {ns}/{name} not found")
        return layer

    async def run_or_404(ns: str, name: str) -> Body:
        run = await kube.get(crd_path("terraformruns", ns, name)) if visible(ns) else None
        if run is None:
            raise Problem(404, f"TerraformRun {ns}/{name} not found")
        return run

    def artifacts_of(run: Body) -> tuple[str, str]:
        try:
            return shared_artifacts_of(run, visible)
        except NoArtifacts as exc:
            raise Problem(404, str(exc)) from None

    async def from_datastore(call: Callable[[], bytes], missing: str) -> bytes:
        try:
            return await anyio.to_thread.run_sync(call)
        except DatastoreError as exc:
            if exc.status_code == 404:
                raise Problem(404, missing) from None
            log.warning("REST: datastore error: %s", exc)
            if exc.status_code is None:
                raise Problem(503, "the datastore is unavailable") from None
            raise Problem(502, f"the datastore refused the server's request (HTTP {exc.status_code})") from None

    @router.get("/layers", response_model=list[LayerView], summary="List layers (optionally of one namespace).")
    async def list_layers(
        _: Caller,
        namespace: Annotated[
            str | None, Query(pattern=NAMESPACE_PATTERN, max_length=63, description="Only this namespace.")
        ] = None,
    ) -> list[LayerView]:
        layers, repos = await layers_with_repositories(namespace)
        views = [layer_view(layer, repos.get(repository_key(layer))) for layer in layers]
        views.sort(key=lambda v: (v.namespace, v.name))
        # The list leaves out conditions (the detail has them): the model drops them.
        return [LayerView.model_validate(v.model_dump(include=set(LayerView.model_fields))) for v in views]

    @router.get("/layers/{ns}/{name}", response_model=LayerDetailView, summary="One layer, with its conditions.")
    async def get_layer(_: Caller, ns: Namespace, name: LayerName) -> LayerDetailView:
        layer = await layer_or_404(ns, name)
        key = repository_key(layer)
        repository = await kube.get(crd_path("terraformrepositories", *key)) if readable_repository(key) else None
        return layer_view(layer, repository)

    @router.get(
        "/layers/{ns}/{name}/runs", response_model=list[RunView], summary="The layer's TerraformRuns, newest first."
    )
    async def list_layer_runs(_: Caller, ns: Namespace, name: LayerName) -> list[RunView]:
        await layer_or_404(ns, name)
        return [run_summary(r) for r in await layer_runs(kube, ns, name)]

    @router.post(
        "/layers/{ns}/{name}/sync",
        status_code=202,
        response_model=SyncView,
        responses={403: {"model": ErrorView, "description": "Runners may not ask for syncs."}},
        summary="Plan the layer now (sets its sync-now annotation; the layer controller removes it).",
    )
    async def sync_layer(who: Caller, ns: Namespace, name: LayerName) -> SyncView:
        if is_runner(who, runner_service_account):
            raise Problem(403, f"{who.describe()} is a runner; runners may not ask for syncs")
        if not visible(ns):
            raise Problem(404, f"TerraformLayer {ns}/{name} not found")
        try:
            now = await request_sync(kube, ns, name)
        except LayerNotFound as exc:
            raise Problem(404, str(exc)) from None
        log.info("REST: %s asked for a sync of layer %s/%s", who.username, ns, name)
        return SyncView(namespace=ns, name=name, sync_now=now)

    @router.post(
        "/layers/{ns}/{name}/override",
        status_code=202,
        response_model=OverrideView,
        responses={403: {"model": ErrorView, "description": "The caller may not override the denying policies."},
                   409: {"model": ErrorView, "description": "The plan is not the layer's current, denied plan."}},
        summary="Override a mandatory plan policy's denial of the current plan (it still needs an approval).",
    )
    async def override_plan(who: Caller, ns: Namespace, name: LayerName, body: OverrideRequest) -> OverrideView:
        if is_runner(who, runner_service_account):
            raise Problem(403, f"{who.describe()} is a runner; runners may not override plan policies")
        layer = await layer_or_404(ns, name)
        policy = (layer.get("status") or {}).get("policy") or {}
        if policy.get("planSum") != body.plan_sum or policy.get("verdict") != "Denied":
            raise Problem(409, f"plan {body.plan_sum} is not the current plan of {ns}/{name} denied by a mandatory "
                               f"policy (the current verdict: {policy.get('verdict') or 'none'} on "
                               f"{policy.get('planSum') or 'no plan'})")
        allowed = {}
        for finding in policy.get("denied") or ():
            held = str(finding.get("policy") or "")
            if finding.get("enforcement") != "mandatory" or held in allowed:
                continue
            policy_ns, _, policy_name = held.rpartition("/")
            found = await kube.get(crd_path("terraformplanpolicies", policy_ns, policy_name) if policy_ns
                                   else crd_path("clusterterraformplanpolicies", None, policy_name))
            by = ((found or {}).get("spec") or {}).get("overrideBy") or {}
            allowed[held] = (tuple(by.get("users") or ()), tuple(by.get("groups") or ()))
        refusal = override_refusal(policy.get("denied") or (), allowed, who.username, who.groups)
        if refusal is not None:
            raise Problem(403, refusal)
        value = json.dumps({"sum": body.plan_sum, "user": who.username, "groups": list(who.groups)})
        await kube.merge_patch(crd_path("terraformlayers", ns, name),
                               {"metadata": {"annotations": {ann.OVERRIDE_POLICY: value}}})
        log.info("REST: %s overrode the mandatory denial of plan %s of layer %s/%s", who.username, body.plan_sum,
                 ns, name)
        return OverrideView(namespace=ns, name=name, plan_sum=body.plan_sum, by=who.username)

    @router.get("/runs/{ns}/{run}", response_model=RunDetailView, summary="A run with its attempts.")
    async def get_run(_: Caller, ns: Namespace, run: RunName) -> RunDetailView:
        return run_view(await run_or_404(ns, run))

    @router.get(
        "/runs/{ns}/{run}/attempts/{n}/logs",
        response_class=PlainTextResponse,
        responses={200: {"content": _TEXT, "description": "The attempt's runner log."}},
        summary="The log of one attempt of a run.",
    )
    async def get_logs(_: Caller, ns: Namespace, run: RunName, n: AttemptNumber) -> Response:
        layer_ns, layer = artifacts_of(await run_or_404(ns, run))
        data = await from_datastore(
            functools.partial(datastore.get_logs, layer_ns, layer, run, n),
            f"no logs for attempt {n} of TerraformRun {ns}/{run} (no such attempt, or not uploaded yet)",
        )
        return Response(content=data, media_type="text/plain; charset=utf-8")

    @router.get(
        "/runs/{ns}/{run}/plan",
        response_class=PlainTextResponse,
        responses={
            200: {
                "content": {**_TEXT, "application/json": {"schema": {"type": "object"}}},
                "description": "The latest plan of the run: text for pretty and short, Terraform's JSON for json.",
            }
        },
        summary="The latest plan of a run.",
    )
    async def get_plan(
        _: Caller,
        ns: Namespace,
        run: RunName,
        format: Annotated[PlanFormat, Query(description="pretty (terraform show), json or short (one line).")] = (
            "pretty"
        ),
    ) -> Response:
        layer_ns, layer = artifacts_of(await run_or_404(ns, run))
        data = await from_datastore(
            functools.partial(datastore.get_plan, layer_ns, layer, run, None, format),
            f"no {format} plan for TerraformRun {ns}/{run}",
        )
        return Response(content=data, media_type=PLAN_MEDIA[format])

    return router
